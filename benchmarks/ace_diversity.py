"""Do ACE's actors stay different? Spread of the N proposed actions and how often each actor
is chosen, over a HalfCheetah-v5 run, with shared and with separate actor hidden layers.

    python benchmarks/ace_diversity.py --steps 20000 [--resume]

ACE's update logs, per logging interval, ``action_spread`` (the std of the N actors' actions
across actors, averaged over states in the batch and action dimensions) and
``chosen_fraction_i`` (how often actor i has the highest f_q^d value on the batch, i.e. would
be chosen when acting). This script trains ACE(5,1) twice with the same seed, once with the
paper's shared actor layer (``--ace.shared-actor-layer``) and once with a hidden layer per
actor (the authors' code, the default), and writes ``results/ace_diversity.{csv,md,png}``.
Each run is a normal run directory under ``benchmarks/runs/ace-diversity/``: ``--resume``
continues a stopped one.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

ARMS = {"shared": ["--ace.shared-actor-layer"], "separate": ["--no-ace.shared-actor-layer"]}


def run_arm(name: str, flags: list[str], steps: int, seed: int, root: Path, resume: bool
            ) -> Path:
    run_dir = root / f"{name}-s{seed}"
    done = run_dir / "train.csv"
    if done.exists() and resume:
        rows = list(csv.DictReader(open(done)))
        if rows and int(rows[-1]["step"]) >= steps:
            return run_dir
    cmd = [sys.executable, "-m", "offpolicy", "train", "ace", "--env", "HalfCheetah-v5",
           "--steps", str(steps), "--seed", str(seed), "--eval-every", str(steps),
           "--eval-episodes", "5", "--log-every", "1000", "--quiet", "--run-dir", str(run_dir),
           *flags]
    if resume and (run_dir / "config.yaml").exists():
        cmd = [sys.executable, "-m", "offpolicy", "train", "ace", "--run-dir", str(run_dir),
               "--steps", str(steps), "--resume"]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return run_dir


def summarize(dirs: dict[str, Path], out: Path, command: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, series = [], {}
    for name, d in dirs.items():
        data = list(csv.DictReader(open(d / "train.csv")))
        n = len([k for k in data[0] if k.startswith("chosen_fraction_")])
        steps = np.array([int(r["step"]) for r in data])
        spread = np.array([float(r["action_spread"]) for r in data])
        chosen = np.array([[float(r[f"chosen_fraction_{i}"]) for i in range(n)] for r in data])
        series[name] = (steps, spread, chosen)
        for r, s, c in zip(steps, spread, chosen):
            rows.append({"arm": name, "step": int(r), "action_spread": s,
                         **{f"chosen_fraction_{i}": x for i, x in enumerate(c)}})
    with open(out / "ace_diversity.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = ["# ACE(5,1) actor diversity on HalfCheetah-v5: shared vs separate actor layers", "",
             f"Command: `{command}`", "",
             "`action_spread`: std of the 5 proposed actions across actors (mean over batch "
             "states and action dimensions; actions in [-1, 1]). `chosen`: share of batch states "
             "on which each actor has the highest f_q^d (the one acting picks). Values at "
             "selected logging intervals (each a mean over 1000 updates).", "",
             "| arm | step | action spread | chosen share per actor | max share |",
             "|---|---:|---:|---|---:|"]
    for name, (steps, spread, chosen) in series.items():
        picks = sorted({0, len(steps) // 4, len(steps) // 2, len(steps) - 1})
        for i in picks:
            shares = ", ".join(f"{x:.2f}" for x in chosen[i])
            lines.append(f"| {name} | {steps[i]} | {spread[i]:.2e} | {shares} | "
                         f"{chosen[i].max():.2f} |")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    for name, (steps, spread, chosen) in series.items():
        axes[0].semilogy(steps, np.maximum(spread, 1e-9), label=name)
        axes[1].plot(steps, chosen.max(1), label=name)
    axes[0].set_title("spread of the actors' actions")
    axes[1].set_title("share of the most chosen actor")
    for ax in axes:
        ax.set_xlabel("env steps")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "ace_diversity.png")
    text = "\n".join(lines) + "\n"
    (out / "ace_diversity.md").write_text(text)
    return text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs-root", type=Path, default=HERE / "runs" / "ace-diversity")
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    p.add_argument("--resume", action="store_true")
    a = p.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    dirs = {name: run_arm(name, flags, a.steps, a.seed, a.runs_root, a.resume)
            for name, flags in ARMS.items()}
    print(summarize(dirs, a.out_dir, "python benchmarks/ace_diversity.py "
                    + " ".join(sys.argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
