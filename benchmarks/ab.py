"""Paired throughput A/B of two checkouts of this library on one host: ``offpolicy bench`` of
each algorithm, the two trees alternating within every round (A then B, B then A in the next),
so that drift of the host hits both alike. Used for restructurings, whose acceptance is "no
slowdown": the median over rounds of the per-round ratio B / A of env steps/s.

    python benchmarks/ab.py --a /work/wt-old --b . --algos ddpg sac --rounds 5 \\
        --out benchmarks/results/throughput_ab_NAME

writes NAME.csv (one row per call) and NAME.md (medians, paired ratios, the command, the
machine). Pause training runs first: the numbers are only as quiet as the host.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from throughput import paired_ratios, this_machine

BENCH = {  # the flags of each algorithm's timing: SB3's sizes for TD3/SAC, the ACE paper's DDPG
    "ddpg": ["--env", "HalfCheetah-v5", "--bench-steps", "2000", "--bench-warmup", "1500"],
    "td3": ["--env", "HalfCheetah-v5", "--bench-steps", "2000", "--bench-warmup", "1500",
            "--batch-size", "256", "--td3.hidden", "256", "256"],
    "sac": ["--env", "HalfCheetah-v5", "--bench-steps", "2000", "--bench-warmup", "1500",
            "--batch-size", "256"],
}


def bench(tree: Path, algo: str, extra: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    cmd = [sys.executable, "-m", "offpolicy", "bench", algo, *BENCH.get(algo, []), *extra,
           "--rounds", "1", "--json"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
    if p.returncode != 0:
        sys.exit(f"ab: {tree}: {shlex.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def git_head(tree: Path) -> str:
    p = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return p.stdout.strip() or "?"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="the reference checkout (before)")
    ap.add_argument("--b", type=Path, required=True, help="the checkout under test (after)")
    ap.add_argument("--algos", nargs="+", default=["ddpg", "sac"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True, help="path stem of the .csv and .md")
    ap.add_argument("--extra", default="", help="more flags for every bench call")
    args = ap.parse_args(argv)
    extra = shlex.split(args.extra)
    heads = {"A": git_head(args.a), "B": git_head(args.b)}
    rows = []
    for r in range(args.rounds):
        for algo in args.algos:
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            for side in order:
                tree = args.a if side == "A" else args.b
                res = bench(tree, algo, extra)
                rows.append({"round": r + 1, "algo": algo, "side": side, "commit": heads[side],
                             "env_steps_per_s": res["env_steps_per_s"],
                             "update_per_s": res["update_per_s"], "time": time.time()})
                print(f"round {r + 1} {algo} {side} ({heads[side]}): "
                      f"{res['env_steps_per_s']:.1f} env steps/s, "
                      f"{res['update_per_s']:.1f} updates/s", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    given = shlex.join(sys.argv[1:] if argv is None else argv)
    lines = [f"# Throughput A/B: {heads['A']} (A) against {heads['B']} (B)", "",
             f"Command: `python benchmarks/ab.py {given}`",
             "", f"Machine: {this_machine()}, "
             f"Python {platform.python_version()}; each call `offpolicy bench ALGO "
             "--rounds 1 --json` with the flags in benchmarks/ab.py's BENCH, A and B "
             "alternating within each round.", "",
             "| algo | A env steps/s (median) | B env steps/s (median) | B / A per round | "
             "median B / A | updates/s B / A (median) |", "|---|---:|---:|---|---:|---:|"]
    for algo in args.algos:
        by = {side: [x for x in rows if x["algo"] == algo and x["side"] == side]
              for side in ("A", "B")}
        ratios = paired_ratios(by, "B", "A", "env_steps_per_s")
        upd = paired_ratios(by, "B", "A", "update_per_s")
        lines.append(
            f"| {algo} | {statistics.median(x['env_steps_per_s'] for x in by['A']):.1f} | "
            f"{statistics.median(x['env_steps_per_s'] for x in by['B']):.1f} | "
            f"{', '.join(f'{x:.3f}' for x in ratios)} | **{statistics.median(ratios):.3f}** | "
            f"{statistics.median(upd):.3f} |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
