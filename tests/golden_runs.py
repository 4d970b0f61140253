"""Golden runs: short fixed-seed runs of every family whose eval.csv and train.csv (without the
wall-clock columns) are committed under ``tests/golden/`` and must reproduce exactly.

They were recorded before the runtime was restructured (issue #37) and prove that it changed
no algorithm's behaviour. Re-record only for a change that is meant to change behaviour, and
say so in its commit:

    python tests/golden_runs.py            # every run
    python tests/golden_runs.py ddpg ace   # some

XLA:CPU's results depend on the CPU's instruction set and on the library versions, so the
files carry the fingerprint of the machine that wrote them (``fingerprint.json``); there the
test compares every value exactly, on another machine within float32 rounding
(tests/test_golden.py, ``RTOL``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
CLOCK_COLUMNS = {"wall_time", "steps_per_s", "updates_per_s"}  # differ run to run by nature

_COMMON = ["--seed", "0", "--quiet", "--eval-every", "500", "--eval-episodes", "2",
           "--log-every", "100"]
_DDPG = ["ddpg", "--env", "Pendulum-v1", "--steps", "1000", "--ddpg.hidden", "32", "32",
         "--batch-size", "16"]
_ACE = ["--ace.num-actors", "3", "--ace.encoder-size", "16", "--ace.hidden", "16"]
_AQL = ["--preset", "small", "--aql.unroll-length", "8", "--batch-size", "4"]

# name -> the `offpolicy train` arguments (the run directory is added)
RUNS: dict[str, list[str]] = {
    "ddpg": _DDPG,
    "ddpg-refer": [*_DDPG, "--replay", "refer"],
    "ddpg-per": [*_DDPG, "--replay", "per"],
    "ddpg-envs2": [*_DDPG, "--num-envs", "2"],
    "ddpg-pipeline": [*_DDPG, "--pipeline"],
    "ace": ["ace", "--env", "Pendulum-v1", "--steps", "1000", "--batch-size", "16", *_ACE],
    "naf": ["naf", "--env", "Pendulum-v1", "--steps", "1000", "--naf.hidden", "32", "32",
            "--batch-size", "32"],
    "vracer": ["vracer", "--env", "InvertedPendulum-v5", "--steps", "1500", "--vracer.hidden",
               "32", "32", "--batch-size", "32", "--buffer-size", "4000"],
    "acer-cartpole": ["acer", "--env", "CartPole-v1", "--steps", "1000", "--acer.hidden",
                      "32", "32"],
    "acer-pendulum": ["acer", "--env", "Pendulum-v1", "--steps", "1000", "--acer.hidden",
                      "32", "32"],
    "aql-cartpole": ["aql", "--env", "CartPole-v1", "--steps", "1000", *_AQL],
    "aql-platform": ["aql", "--env", "offpolicy/Platform-v0", "--steps", "1000", *_AQL],
    # added before issue #70 (replay as a table, typed agent state) by the code it restructures
    "td3": ["td3", "--env", "Pendulum-v1", "--steps", "1000", "--td3.hidden", "32", "32",
            "--batch-size", "16", "--warmup-steps", "200"],
    "td3-lstm": ["td3", "--env", "offpolicy/Pendulum-P-v0", "--steps", "600", "--td3.hidden",
                 "16", "16", "--batch-size", "8", "--warmup-steps", "200", "--td3.core", "lstm",
                 "--td3.core-cells", "8", "--td3.core-window", "4"],
    "sac": ["sac", "--env", "Pendulum-v1", "--steps", "1000", "--sac.hidden", "32", "32",
            "--batch-size", "16", "--warmup-steps", "200"],
    "dqn": ["dqn", "--env", "CartPole-v1", "--steps", "1000", "--dqn.hidden", "32", "32",
            "--batch-size", "16", "--warmup-steps", "200"],
}
# killed with SIGKILL once its checkpoint of step KILL_AT is written, then resumed to the end
RESUMED = {"ddpg-killed-resumed": ([*_DDPG, "--checkpoint-every", "400"], 400)}


def fingerprint() -> dict:
    """What XLA:CPU's and the envs' numbers depend on."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    except OSError:
        pass
    libs = ("jax", "jaxlib", "flax", "optax", "numpy", "gymnasium", "mujoco")
    return {"machine": platform.machine(), "python": platform.python_version(),
            "cpu_flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16],
            **{lib: version(lib) for lib in libs}}


def _cli(args: list[str], cwd: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "offpolicy", "train", *args], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _latest(run_dir: Path) -> int | None:
    try:
        return int((run_dir / "checkpoints" / "latest").read_text().strip().rsplit("-", 1)[1])
    except (OSError, ValueError, IndexError):
        return None


def produce(name: str, work: Path, env: dict) -> Path:
    """Run ``name`` into ``work/name`` with the CLI; return its run directory."""
    run_dir = work / name
    if name in RUNS:
        p = _cli([*RUNS[name], *_COMMON, "--run-dir", str(run_dir)], work, env)
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"golden run {name} failed:\n{err}")
        return run_dir
    args, kill_at = RESUMED[name]
    for _ in range(5):  # a kill must land between the checkpoint of KILL_AT and the next one
        shutil.rmtree(run_dir, ignore_errors=True)
        p = _cli([*args, *_COMMON, "--run-dir", str(run_dir)], work, env)
        while p.poll() is None and (_latest(run_dir) or 0) < kill_at:
            time.sleep(0.01)
        p.send_signal(signal.SIGSTOP)
        reached = _latest(run_dir)
        p.kill()
        p.communicate()
        if reached == kill_at:
            break
    else:
        raise RuntimeError(f"could not kill {name} between its checkpoints")
    p = _cli([*args, *_COMMON, "--run-dir", str(run_dir), "--resume"], work, env)
    out, err = p.communicate(timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"golden run {name} failed on resume:\n{err}")
    return run_dir


def _as_written(v: str) -> str:
    """A value as the logger writes it now (floats to 8 significant digits): the recorded
    files kept every digit, and the same float gives the same 8 digits."""
    try:
        x = float(v)
    except ValueError:
        return v
    return v if v.lstrip("-").isdigit() or x != x else f"{x:.8g}"


def read_rows(path: Path) -> list[dict[str, str]]:
    """A run's CSV without the wall-clock columns, values as the logger writes them (exact
    otherwise)."""
    with open(path, newline="") as f:
        return [{k: _as_written(v) for k, v in row.items() if k not in CLOCK_COLUMNS}
                for row in csv.DictReader(f)]


def write_rows(path: Path, rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


NAMES = [*RUNS, *RESUMED]

# Run directories written by the code before issue #70 (replay as a table, typed agent state),
# stopped at their checkpoint of step 400 (replay file included): tests/golden/before-70/NAME
# must resume to step 600 with any later code. Recorded once, by
#     python tests/golden_runs.py --checkpoints
_SMALL = ["--steps", "400", "--checkpoint-every", "400", "--eval-every", "200",
          "--eval-episodes", "2", "--log-every", "100", "--seed", "0", "--quiet",
          "--buffer-size", "2000"]
CHECKPOINTED: dict[str, list[str]] = {
    "ddpg-refer": ["ddpg", "--env", "Pendulum-v1", "--ddpg.hidden", "16", "16",
                   "--batch-size", "16", "--replay", "refer"],
    "ddpg-per": ["ddpg", "--env", "Pendulum-v1", "--ddpg.hidden", "16", "16",
                 "--batch-size", "16", "--replay", "per"],
    "td3": ["td3", "--env", "Pendulum-v1", "--td3.hidden", "16", "16", "--batch-size", "16",
            "--warmup-steps", "100"],
    "td3-lstm": ["td3", "--env", "offpolicy/Pendulum-P-v0", "--td3.hidden", "16", "16",
                 "--batch-size", "8", "--warmup-steps", "100", "--td3.core", "lstm",
                 "--td3.core-cells", "8", "--td3.core-window", "4"],
    "sac": ["sac", "--env", "Pendulum-v1", "--sac.hidden", "16", "16", "--batch-size", "16",
            "--warmup-steps", "100"],
    "dqn": ["dqn", "--env", "CartPole-v1", "--dqn.hidden", "16", "16", "--batch-size", "16",
            "--warmup-steps", "100"],
    "naf": ["naf", "--env", "Pendulum-v1", "--naf.hidden", "16", "16", "--batch-size", "16",
            "--replay", "refer"],
    "vracer": ["vracer", "--env", "InvertedPendulum-v5", "--vracer.hidden", "16", "16",
               "--batch-size", "16"],
    "acer": ["acer", "--env", "CartPole-v1", "--acer.hidden", "16", "16"],
    "aql": ["aql", "--env", "CartPole-v1", *_AQL],
    "ace": ["ace", "--env", "Pendulum-v1", "--batch-size", "16", *_ACE],
}
BEFORE_70 = GOLDEN / "before-70"


def record_checkpointed(names: list[str]) -> None:
    env = cli_env_for_golden()
    BEFORE_70.mkdir(parents=True, exist_ok=True)
    for name in names:
        out = BEFORE_70 / name
        shutil.rmtree(out, ignore_errors=True)
        p = _cli([*CHECKPOINTED[name], *_SMALL, "--run-dir", str(out)], HERE, env)
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"checkpointed run {name} failed:\n{err}")
        for best in (out / "checkpoints").glob("best*"):  # resuming reads latest only
            shutil.rmtree(best) if best.is_dir() else best.unlink()
        print(f"{name}: {sum(f.stat().st_size for f in out.rglob('*') if f.is_file())} bytes",
              flush=True)


def cli_env_for_golden() -> dict:
    """The CLI's environment: the tests' JAX cache (see _helpers), default XLA flags."""
    from _helpers import cli_env

    return cli_env()


def record(names: list[str]) -> None:
    sys.path.insert(0, str(HERE))
    env = cli_env_for_golden()
    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            t0 = time.time()
            run_dir = produce(name, Path(tmp), env)
            out = GOLDEN / name
            out.mkdir(exist_ok=True)
            for f in ("eval.csv", "train.csv"):
                write_rows(out / f, read_rows(run_dir / f))
            print(f"{name}: {time.time() - t0:.1f} s", flush=True)
    (GOLDEN / "fingerprint.json").write_text(json.dumps(fingerprint(), indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--checkpoints"]:
        sys.path.insert(0, str(HERE))
        record_checkpointed(sys.argv[2:] or list(CHECKPOINTED))
        sys.exit(0)
    wanted = sys.argv[1:] or NAMES
    unknown = set(wanted) - set(NAMES)
    if unknown:
        sys.exit(f"unknown golden runs: {', '.join(sorted(unknown))} (valid: {', '.join(NAMES)})")
    record(wanted)
