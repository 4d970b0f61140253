"""Count the runs of a ``td3-init-trap`` suite that the Hopper trap caught.

    offpolicy suite run benchmarks/suites/td3-init-trap.yaml --out DIR --jobs 2
    python benchmarks/init_trap.py --out DIR [--results benchmarks/results]

The trap (issue 33's Hopper-v5 runs, learning_td3-sbx-ablation_Hopper-v5.md): from the first
evaluation on, the actor outputs +1 on every joint, the hopper falls after about 22 steps and
every evaluation scores 37.6. Other corners of the action box catch runs too (e.g. (-1, +1,
+1): the hopper falls after 7 steps). For each run under ``DIR/<env>/<entry>/s<seed>`` this
script reads the last evaluation (eval.csv) and loads the run's latest checkpoint
(``offpolicy.load``) to play one deterministic episode (env seed 0), recording its length and
the mean action per joint. A run counts as caught in a corner when the episode ends within 50
steps and every joint's mean action is at least 0.95 in size (the actor's own behaviour, not
only its score), and in the +1 trap when besides every joint's mean is +0.95 or more. Per
entry it prints both counts, and for each pair of entries Fisher's exact test (two-sided) of
the corner counts (an entry on two envs is two samples). A run whose last evaluation is
short of its own budget (``train.steps`` in its config.yaml), or that has none yet, is left
out with a note on stderr. With ``--results`` it writes ``init_trap.csv`` there.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def last_eval(run_dir: Path) -> tuple[int, float, float] | None:
    """(step, mean return, its standard error) of the run's last evaluation, None before the
    first (eval.csv read by the package's one reader, ``plotting.read_eval_csv``)."""
    from offpolicy.plotting import read_eval_csv

    rows = read_eval_csv(run_dir / "eval.csv", quiet=True)
    if not rows:
        return None
    r = rows[-1]
    return int(r["step"]), float(r["return_mean"]), float(r["return_se"])


def budget(run_dir: Path) -> int | None:
    """The run's own step budget (``train.steps`` in its config.yaml, read by the package's
    ``plotting.run_config``), None where there is none or it cannot be read."""
    from offpolicy.errors import OffpolicyError
    from offpolicy.plotting import run_config

    try:
        steps = run_config(run_dir).get("train.steps")
        return None if steps is None else int(steps)
    except (OffpolicyError, ValueError):
        return None


def one_episode(run_dir: Path, env_id: str, max_steps: int = 1000) -> dict:
    """Length and mean action (per joint) of one deterministic episode of the run's latest
    actor on ``env_id`` (reset with seed 0)."""
    import offpolicy
    from offpolicy.envs.make import make_env

    agent = offpolicy.load(run_dir)
    env = make_env(env_id, 0)
    obs, _ = env.reset(seed=0)
    actions = []
    try:
        for _ in range(max_steps):
            a = np.asarray(agent.act(obs), np.float64)
            actions.append(a)
            obs, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                break
    finally:
        env.close()
        agent.close()
    acts = np.stack(actions)
    return {"length": len(acts), "mean_action": acts.mean(axis=0)}


def write_rows(path: Path, rows: list[dict]) -> None:
    """``rows`` (dicts with the same keys, in order) as a CSV file, its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def fisher_two_sided(a: int, b: int, c: int, d: int) -> float:
    """Fisher's exact test of the 2x2 table [[a, b], [c, d]], two-sided (the tables with the
    same margins no more probable than the one seen)."""
    n1, n2, k = a + b, c + d, a + c
    total = math.comb(n1 + n2, k)

    def p(x: int) -> float:
        return math.comb(n1, x) * math.comb(n2, k - x) / total

    seen = p(a)
    lo, hi = max(0, k - n2), min(k, n1)
    return min(1.0, sum(p(x) for x in range(lo, hi + 1) if p(x) <= seen * (1 + 1e-9)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the suite's --out folder")
    ap.add_argument("--results", type=Path, default=None, help="write init_trap.csv here")
    a = ap.parse_args()
    runs = sorted((p for p in a.out.glob("*/*/s*") if p.is_dir() and p.name[1:].isdigit()),
                  key=lambda p: (p.parent.parent.name, p.parent.name, int(p.name[1:])))
    if not runs:
        raise SystemExit(f"no runs under {a.out} (expected <env>/<entry>/s<seed>/)")
    rows = []
    for run in runs:
        env_id, entry, seed = run.parent.parent.name, run.parent.name, int(run.name[1:])
        last, steps = last_eval(run), budget(run)
        why = None
        if last is None:
            why = "unfinished (no evaluation yet)"
        elif steps is not None and last[0] < steps:
            why = f"unfinished (evaluated up to step {last[0]} of {steps})"
        elif not (run / "checkpoints" / "latest").is_file():
            why = "no checkpoint to play (a run restored from a CSV?)"
        if why is not None:
            print(f"{env_id} {entry} s{seed}: {why}; left out", file=sys.stderr)
            continue
        step, ret, se = last
        ep = one_episode(run, env_id)
        m = ep["mean_action"]
        corner = ep["length"] <= 50 and bool(np.all(np.abs(m) >= 0.95))
        plus_one = corner and bool(np.all(m >= 0.95))
        rows.append({"env": env_id, "entry": entry, "seed": seed, "step": step,
                     "return_mean": round(ret, 2), "return_se": round(se, 2),
                     "episode_length": ep["length"],
                     "mean_action": " ".join(f"{x:+.2f}" for x in m),
                     "corner": int(corner), "plus_one_trap": int(plus_one)})
        mark = "  +1 TRAP" if plus_one else "  CORNER" if corner else ""
        print(f"{env_id} {entry} s{seed}: step {step} return {ret:.1f} +- {se:.1f}; "
              f"episode {ep['length']} steps, mean action {rows[-1]['mean_action']}{mark}")
    if not rows:
        raise SystemExit("no run with a checkpoint to play")
    # counted per (env, entry): the same entry on two envs is two samples
    counts: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        c = counts.setdefault((r["env"], r["entry"]), [0, 0])
        c[0] += r["corner"]
        c[1] += 1
    several_envs = len({env for env, _ in counts}) > 1

    def name(key: tuple[str, str]) -> str:
        return f"{key[1]} on {key[0]}" if several_envs else key[1]

    print()
    for key, (t, n) in counts.items():
        mine = [r for r in rows if (r["env"], r["entry"]) == key]
        corner = [r["seed"] for r in mine if r["corner"]]
        plus = [r["seed"] for r in mine if r["plus_one_trap"]]
        print(f"{name(key)}: {t} of {n} caught in a corner (seeds {corner}); in the +1 trap "
              f"{len(plus)} (seeds {plus})")
    keys = list(counts)
    for i, x in enumerate(keys):
        for y in keys[i + 1:]:
            (tx, nx), (ty, ny) = counts[x], counts[y]
            print(f"{name(x)} against {name(y)}: Fisher's exact test p = "
                  f"{fisher_two_sided(tx, nx - tx, ty, ny - ty):.3f}")
    if a.results is not None:
        write_rows(a.results / "init_trap.csv", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
