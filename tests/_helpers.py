"""Shared helpers for the tests (there is no conftest.py for them to live in).

Importing this module points ``OFFPOLICY_CACHE_DIR`` at one JAX compilation cache shared by the
test process and every CLI subprocess, so each tiny configuration compiles once per machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
CACHE_DIR = os.environ.setdefault(
    "OFFPOLICY_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"offpolicy-test-jax-{os.getuid()}"))
SUBPROCESS_TIMEOUT = 120


def assert_same_tree(got, want) -> None:
    """``got`` and ``want`` hold the same leaves bitwise: tree structure, dtypes and values."""
    import jax
    import numpy as np

    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for x, y in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# tiny DDPG: small networks, small batches, two evaluation episodes
TINY_FLAGS = ["--ddpg.hidden", "32", "32", "--batch-size", "16", "--eval-episodes", "2",
              "--quiet"]
TINY_OVERRIDES = {"hidden": (32, 32), "batch_size": 16, "eval_episodes": 2, "quiet": True}


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, **(extra or {}))
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(TESTS_DIR) + (os.pathsep + old if old else "")
    env["OFFPOLICY_CACHE_DIR"] = CACHE_DIR
    return env


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "offpolicy", *map(str, args)]


def run_cli(*args: str, cwd: Path, timeout: float = SUBPROCESS_TIMEOUT,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cli_cmd(*args), cwd=cwd, env=cli_env(extra_env), capture_output=True,
                          text=True, timeout=timeout)


def start_cli(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(cli_cmd(*args), cwd=cwd, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def assert_one_line_error(proc: subprocess.CompletedProcess, contains: str | None = None) -> str:
    """Exit 2, exactly one non-empty stderr line 'offpolicy: error: ...', no traceback."""
    detail = f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 2, detail
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, detail
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, detail
    assert lines[0].startswith("offpolicy: error:"), detail
    assert len(lines[0]) > len("offpolicy: error:") + 3, detail
    if contains is not None:
        assert contains.lower() in lines[0].lower(), detail
    return lines[0]


def latest_step(run_dir: Path) -> int | None:
    """The step named by RUN_DIR/checkpoints/latest, or None while there is none."""
    pointer = Path(run_dir) / "checkpoints" / "latest"
    try:
        name = pointer.read_text().strip()
    except OSError:
        return None
    if not name:
        return None
    return int(name.rsplit("-", 1)[1])


def wait_for(predicate, proc: subprocess.Popen, timeout: float = SUBPROCESS_TIMEOUT,
             interval: float = 0.05) -> None:
    """Poll ``predicate()`` until true; fail if ``proc`` exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"process exited ({proc.returncode}) before the condition held"
                                 f"\nstdout:\n{out}\nstderr:\n{err}")
        time.sleep(interval)
    proc.kill()
    proc.communicate()
    raise AssertionError("timed out waiting for the condition")


def read_csv(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def tiny_run(algo: str = "ddpg", env: str = "Pendulum-v1", seed: int = 0, **overrides):
    """A validated RunConfig with the tiny settings (overrides name any config field)."""
    from offpolicy.api import _split_overrides
    from offpolicy.registry import resolve

    train, agent = _split_overrides(algo, {**TINY_OVERRIDES, **overrides})
    train.update(env=env, seed=seed)
    return resolve(algo, train_overrides=train, agent_overrides=agent)


def signal_when(predicate, proc: subprocess.Popen, sig: int,
                timeout: float = SUBPROCESS_TIMEOUT, group: bool = False) -> tuple[str, str]:
    """Send ``sig`` to ``proc`` once ``predicate()`` holds; return its (stdout, stderr).
    ``group``: to its whole process group, as Ctrl-C in a terminal does (start ``proc`` with
    ``start_new_session=True``)."""
    try:
        wait_for(predicate, proc, timeout)
        assert proc.poll() is None, "the run finished before the signal"
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@contextlib.contextmanager
def one_ray_at_a_time(tmp_path_factory):
    """Hold the test run's Ray lock: ``make test`` runs two pytest-xdist workers, and a test
    that starts Ray checks that none of its processes outlive it, while a second Ray instance
    on the machine could join it or take its ports. The lock file sits beside the workers'
    temporary folders, so it is one per run (one per user without xdist)."""
    path = tmp_path_factory.getbasetemp().parent / "ray.lock"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# under pytest-xdist: this worker's name, which the processes it starts inherit (Ray's GCS,
# raylet and workers, directly or through a CLI run; the raylet's two agents are started
# without it, so they count through their parent), so another worker's or the user's own Ray
# instance is not mistaken for one a test left behind
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")


def _tagged(pid: str) -> bool:
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return False
    return f"PYTEST_XDIST_WORKER={_WORKER}".encode() in environ


def _started_here(pid: str) -> bool:
    if _WORKER is None:
        return True
    if _tagged(pid):
        return True
    try:
        parent = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return False
    return _tagged(parent)


def ray_processes() -> set[int]:
    """PIDs of every Ray process (raylet, GCS, workers, agents) on the machine; under
    pytest-xdist, of those started from this worker."""
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if ("ray::" in cmd or "/ray/" in cmd) and _started_here(d):
            out.add(int(d))
    return out
