"""Remote collectors: collected env steps/s and learner updates/s with 0, 1, 2, 4, 8 collectors.

    python benchmarks/distributed.py --collectors 0 1 2 4 8 [--resume]

Two settings (issue #30, acceptance 3), DDPG with one update per env step:

* ``slow``: Pendulum-v1 behind a wrapper that sleeps 10 ms per step (``slow_env:SlowPendulum-v1``:
  a slow simulator), 64-64 networks, batch 64: collection is latency-bound, the update cheap;
* ``halfcheetah``: HalfCheetah-v5 with the ACE paper's 400-300 networks: the update costs
  more than the env step, and this machine has 2 cores.

Each row is one run of ``offpolicy train`` (0 collectors: the single-process loop) of a fixed
wall budget's worth of steps; collected env steps/s, updates/s and the measured replay ratio
are the medians over its train.csv rows after the first (start-up, compiles). Nothing else
should run on the machine meanwhile. Results: ``results/distributed_scaling.{csv,md,png}``.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "results"
RUNS = HERE / "runs" / "distributed_scaling"
SETTINGS = {
    # name: (env, flags, env steps per second of one collector, roughly: sizes the runs)
    "slow": ("slow_env:SlowPendulum-v1", ["--ddpg.hidden", "64", "64"], 95.0),
    "halfcheetah": ("HalfCheetah-v5", [], 250.0),
}
FIELDS = ["setting", "collectors", "steps", "env_steps_per_s", "updates_per_s",
          "replay_ratio", "param_lag", "rows"]


def steps_for(rate: float, collectors: int, seconds: float) -> int:
    """A run's steps: about ``seconds`` of collection, a multiple of the 50-step chunk."""
    n = int(rate * max(collectors, 1) * seconds)
    return max(50 * round(n / 50), 500)


def one(setting: str, collectors: int, seconds: float) -> dict:
    env, flags, rate = SETTINGS[setting]
    steps = steps_for(rate, collectors, seconds)
    run_dir = RUNS / f"{setting}-c{collectors}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "offpolicy", "train", "ddpg", "--env", env, "--steps",
           str(steps), "--num-collectors", str(collectors), "--eval-every", str(steps),
           "--eval-episodes", "1", "--log-every", str(max(steps // 12, 50) // 50 * 50),
           "--quiet", "--run-dir", str(run_dir), *flags]
    env_vars = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep))
    subprocess.run(cmd, check=True, env=env_vars, stdout=subprocess.DEVNULL)
    with open(run_dir / "train.csv", newline="") as f:
        rows = list(csv.DictReader(f))[1:]  # the first interval holds start-up and compiles

    def med(key):
        vals = [float(r[key]) for r in rows if key in r and r[key] not in ("", "nan")]
        return float(np.median(vals)) if vals else float("nan")

    if collectors == 0:  # the single-process loop: one update per env step by construction
        ratio, ups = 1.0, med("steps_per_s")
    else:
        ratio, ups = med("replay_ratio"), med("updates_per_s")
    return {"setting": setting, "collectors": collectors, "steps": steps,
            "env_steps_per_s": med("steps_per_s"), "updates_per_s": ups,
            "replay_ratio": ratio, "param_lag": med("param_lag"), "rows": len(rows)}


def report(rows: list[dict], command: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["# Remote collectors: scaling on this machine", "", f"Command: `{command}`", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores. "
             "DDPG, one update per env step; medians over each run's train.csv rows after the "
             "first. 0 collectors is the single-process loop.", "",
             "| setting | collectors | env steps/s | x one collector | updates/s | "
             "replay ratio (configured 1) | parameter lag (updates) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for setting in SETTINGS:
        mine = sorted((r for r in rows if r["setting"] == setting),
                      key=lambda r: int(r["collectors"]))
        one_rate = next((float(r["env_steps_per_s"]) for r in mine
                         if int(r["collectors"]) == 1), float("nan"))
        for r in mine:
            lines.append(f"| {setting} | {r['collectors']} | {float(r['env_steps_per_s']):.0f} | "
                         f"{float(r['env_steps_per_s']) / one_rate:.2f} | "
                         f"{float(r['updates_per_s']):.0f} | {float(r['replay_ratio']):.3f} | "
                         f"{float(r['param_lag']):.0f} |")
        if mine:
            ax.plot([int(r["collectors"]) for r in mine],
                    [float(r["env_steps_per_s"]) for r in mine], marker="o", label=setting)
    ax.set_xlabel("remote collectors (0: single process)")
    ax.set_ylabel("collected env steps/s")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "distributed_scaling.png")
    plt.close(fig)
    text = "\n".join(lines) + "\n"
    (OUT / "distributed_scaling.md").write_text(text)
    return text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--collectors", type=int, nargs="+", default=[0, 1, 2, 4, 8])
    p.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    p.add_argument("--seconds", type=float, default=40.0, help="collection per run, roughly")
    p.add_argument("--resume", action="store_true", help="keep the rows already measured")
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "distributed_scaling.csv"
    rows = []
    if (a.resume or a.report_only) and path.exists():
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    command = "python benchmarks/distributed.py " + " ".join(
        x for x in sys.argv[1:] if x not in ("--resume", "--report-only"))
    if not a.report_only:
        for setting in a.settings:
            for k in a.collectors:
                if any(r["setting"] == setting and int(r["collectors"]) == k for r in rows):
                    continue
                rows.append(one(setting, k, a.seconds))
                with open(path, "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=FIELDS)
                    w.writeheader()
                    w.writerows(rows)
                print(rows[-1], flush=True)
    print(report(rows, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
