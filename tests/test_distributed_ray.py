"""Remote collectors on Ray (issue #30): a 2-collector run, a collector killed mid-run, SIGTERM
of the learner then --resume, SIGKILL of the learner, and no Ray process left behind. One
``ray.init(num_cpus=2)`` serves the in-process runs of this module; the CLI runs start (and
end) their own."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from _helpers import (
    TINY_FLAGS,
    cli_env,
    latest_step,
    one_ray_at_a_time,
    ray_processes,
    read_csv,
    run_cli,
    signal_when,
    start_cli,
)
from test_distributed import TOY, _assert_no_transition_crosses_episodes, _run

ray = pytest.importorskip("ray")

from offpolicy.training.distributed import RayPool, _spawning  # noqa: E402


def _settle(before: set[int], timeout: float = 30.0) -> set[int]:
    """The Ray processes that are not in ``before`` once they had ``timeout`` s to exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = ray_processes() - before
        if not left:
            return left
        time.sleep(0.5)
    return ray_processes() - before


@pytest.fixture(scope="module", autouse=True)
def shared_ray(tmp_path_factory):
    with one_ray_at_a_time(tmp_path_factory):  # the module's Ray is the run's only one
        before = ray_processes()
        # the workers import the tests' env modules (toy_envs) as the CLI's do
        env = {"PYTHONPATH": cli_env()["PYTHONPATH"], "JAX_PLATFORMS": "cpu"}
        with _spawning():  # Ray starts its processes with fork + exec: JAX's warning is moot
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR", runtime_env={"env_vars": env})
        yield
        ray.shutdown()
        assert not _settle(before), "Ray processes outlived the module"


def test_two_ray_collectors_fill_their_rings():
    r = _run(steps=400, pool=RayPool)
    assert r.train()["step"] == 400
    assert r.collection.episodes == 40 and len(r.replay) == 400
    _assert_no_transition_crosses_episodes(r.replay)
    r.close()


class KillingPool(RayPool):
    """Kills collector 0's actor (ray.kill) once the learner has 5 chunks: collector 0 then
    has a chunk in flight (the learner waits for every chunk it asked for), whichever of the
    two collectors started first on a loaded machine."""

    received = 0

    def next(self):
        out = super().next()
        self.received += 1
        if self.received == 5:
            self.ray.kill(self.actors[0], no_restart=True)
        return out


def test_a_killed_collector_is_restarted_and_the_run_completes(tmp_path, capsys):
    r = _run(tmp_path / "R", steps=700, collect_steps=7, eval_every=700, log_every=140,
             checkpoint_every=700, pool=KillingPool)
    assert r.train()["step"] == 700
    err = capsys.readouterr().err
    assert "collector 0 failed (" in err and "restarted (1 of at most 3)" in err
    assert r.collection.restarts == 1
    _assert_no_transition_crosses_episodes(r.replay)
    assert float(read_csv(tmp_path / "R" / "train.csv")[-1]["collector_restarts"]) == 1
    r.close()


ARGS = ["train", "ddpg", "--env", TOY, *TINY_FLAGS, "--num-collectors", "2",
        "--collect-steps", "10", "--eval-every", "1000", "--checkpoint-every", "500"]


def test_sigterm_then_resume_and_no_ray_process_outlives_the_run(tmp_path):
    before = ray_processes()
    p = start_cli(*ARGS, "--steps", "100000", "--run-dir", "R", cwd=tmp_path)
    _, err = signal_when(lambda: (latest_step(tmp_path / "R") or 0) >= 500, p, signal.SIGTERM)
    assert p.returncode == 143, err
    assert not _settle(before), "the run's Ray instance outlived it"
    done = run_cli(*ARGS, "--steps", "3000", "--run-dir", "R", "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [int(r["step"]) for r in read_csv(tmp_path / "R" / "eval.csv")][-1] == 3000
    assert not _settle(before), "the resumed run's Ray instance outlived it"


def _descendant_commands(pid: int) -> list[str]:
    """The command lines of ``pid``'s descendants."""
    children: dict[int, list[int]] = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            try:
                out.append(open(f"/proc/{child}/cmdline", "rb").read().replace(b"\0", b" ")
                           .decode(errors="replace"))
            except OSError:
                continue
            todo.append(child)
    return out


def _started(p, *names: str):
    """True once one of ``p``'s descendants runs one of ``names``."""
    return lambda: any(n in cmd for cmd in _descendant_commands(p.pid) for n in names)


# moments of the start-up of a run with collectors: importing and building (no Ray yet), the
# run directory made, Ray's GCS up (ray.init under way), its raylet's agents started (the end
# of ray.init), the collectors' actors starting
START_UP = {"building": lambda p, d: (lambda: time.monotonic() > p.started + 2.0),
            "run directory": lambda p, d: (lambda: (d / "R" / "config.yaml").exists()),
            "GCS": lambda p, d: _started(p, "gcs_server"),
            "agents": lambda p, d: _started(p, "ray::DashboardAgent", "ray::RuntimeEnvAgent"),
            "actors": lambda p, d: _started(p, "CollectorProcess")}


@pytest.mark.parametrize("moment", list(START_UP))
def test_sigterm_at_any_moment_of_start_up_exits_143_and_leaves_no_ray(tmp_path, moment):
    """#74 item 1: a SIGTERM while Ray started (ray.init installs handlers of its own) exited
    15 or aborted (134), and Ray's agents outlived the run by over a minute."""
    before = ray_processes()
    p = start_cli(*ARGS, "--steps", "100000", "--run-dir", "R", cwd=tmp_path)
    p.started = time.monotonic()
    _, err = signal_when(START_UP[moment](p, tmp_path), p, signal.SIGTERM)
    assert p.returncode == 143, err
    assert "Traceback" not in err and "Aborted" not in err, err
    assert not _settle(before, timeout=5), "Ray processes outlived the run"


def test_sigkill_of_the_learner_leaves_no_ray_process(tmp_path):
    before = ray_processes()
    p = start_cli(*ARGS, "--steps", "100000", "--run-dir", "R", cwd=tmp_path)
    signal_when(lambda: (latest_step(tmp_path / "R") or 0) >= 500, p, signal.SIGKILL)
    assert not _settle(before, timeout=20), "Ray outlived a killed learner"
    assert np.isfinite(latest_step(tmp_path / "R"))
