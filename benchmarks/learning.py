"""Learning benchmarks with the ACE paper's protocol, resumable run by run.

    python benchmarks/learning.py --suite ddpg-peers --steps 100000 --seeds 0 1 2
    python benchmarks/learning.py --suite ace-family --steps 100000 --seeds 0 1 2

Protocol (ACE paper, "Experiments"): evaluate every 10 000 steps with 20 deterministic
episodes (no exploration noise) on a separate environment; report the best and the final
evaluation per run, mean +- standard error over seeds, and the learning curves.

Each run lives in ``benchmarks/runs/<suite>/<entry>/s<seed>``. Several drivers may work on
the same matrix at once (one per core): each takes a run with a lock file. A finished run is
skipped, an
unfinished one of ours continues with ``--resume`` from its latest checkpoint (a peer run
restarts: SB3/SBX have no checkpoint here). Runs go seed-major (every entry of seed 0 first),
so a stopped benchmark has balanced partial results. After every run the table
(``learning_<suite>.md``), the curves (``learning_<suite>.png``) and a CSV of all evaluations
(``learning_<suite>.csv``) are rewritten under ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from offpolicy.plotting import last_eval  # noqa: E402

SUITES = {
    "ddpg-peers": ["ddpg", "sbx-ddpg", "sb3-ddpg", "ddpg-lr1e-3"],
    "ace-family": ["ace", "ace-alt", "tm-ace", "ensemble-ddpg", "wide-ddpg", "shared-ddpg",
                   "ddpg"],
    # the issues' 20k-step Pendulum acceptance runs (use --env Pendulum-v1 --steps 20000)
    "pendulum": ["ddpg", "ace", "ace-alt", "tm-ace", "ensemble-ddpg"],
    # DDPG parity with SB3 (5-10 seeds; HalfCheetah-v5 and Hopper-v5) and the one-choice ablation
    "ddpg-parity": ["ddpg", "ddpg-sb3", "sb3-ddpg", "sbx-ddpg", "ddpg-input1", "ddpg-torch-init",
                    "ddpg-lr1e-3", "ddpg-gaussian"],
    # ReF-ER paper Fig. 1-5 analogue (--env HalfCheetah-v5 / Hopper-v5, 100k steps)
    "refer": ["ddpg-er", "ddpg-per", "ddpg-refer", "ddpg-refer1", "ddpg-refer2", "naf",
              "naf-refer", "vracer", "vracer-er", "ddpg-refer-mem50k"],
    # ACER (Wang et al. 2017): replay ratio 0 (on-policy), 1 and 4, the paper's Fig. 1 claim
    # (--env CartPole-v1 --steps 300000; --env LunarLander-v3 --steps 1000000 --eval-every 50000)
    "acer-replay": ["acer-r0", "acer-r1", "acer-r4"],
    # continuous ACER against no trust region and against replay ratio 0 (HalfCheetah-v5,
    # Hopper-v5, 200k steps)
    "acer-continuous": ["acer", "acer-no-trust-region", "acer-r0"],
    # the ACER issue's acceptance runs (--env CartPole-v1 --steps 300000; --env
    # InvertedPendulum-v5 --steps 200000)
    "acer": ["acer"],
    # ours (default: 4 env copies, 16 windows per replayed update; and matched to PFRL: one
    # env, one window) against PFRL 0.4.0's ACER (benchmarks/peers_pfrl.py), CartPole-v1
    "acer-peers": ["acer", "acer-1env", "pfrl-acer"],
    # the AQL issue's checks (--env CartPole-v1 --steps 100000; --env Pendulum-v1 --steps 50000
    # with the entries' --discretize 5): the defaults, and --preset small
    "aql": ["aql", "aql-small"],
    "aql-discretized": ["aql-d5", "aql-small-d5"],
    # Platform (hybrid actions, --env offpolicy/Platform-v0 --steps 200000): AQL against its
    # two baselines on the same budget, each on its plain command (the acceptance
    # command): on Platform the AQL family defaults to --preset small (registry.env_presets)
    "aql-platform": ["aql", "uniform-q", "qt-opt"],
    # the same with --preset small (64-unit networks, N 20 + M 80): the paper's sizes cost
    # about 1-2.5 s per update here, 3-9 hours per 200k-step run
    "aql-platform-small": ["aql-small", "uniform-q-small", "qt-opt-small"],
    # the AQL paper's Fig. 2 analogue (--env HalfCheetah-v5 and dm_control/cartpole-swingup-v0,
    # --steps 100000): discretized AQL (autoregressive, independent), AQL with Gaussian
    # proposals on the continuous actions, Uniform-Q (discretized, as in the paper), QT-Opt
    # (CEM on the continuous actions) and DDPG. The Q-learners run --preset small (64-unit
    # networks, N 20 + M 80, 2 unrolls per env step): 10-15 minutes per run on one core,
    # QT-Opt about 40; the 36 runs in about 8 core-hours (docs/algorithms/aql.md, "Sizing").
    # On a 1-D env (cartpole-swingup) aql-indep-small-d5 is the same model as aql-small-d5:
    # leave it out with --entries
    "aql-fig2": ["aql-small-d5", "aql-indep-small-d5", "aql-small", "uniform-q-small-d5",
                 "qt-opt-small", "ddpg"],
    # the same with the paper's sizes and its learner's replay ratio (--preset paper, 0.1
    # unrolls per env step, about 310 updates per 100k steps: ~8 core-hours, little learning)
    "aql-fig2-paper": ["aql-d5-paper", "aql-indep-d5-paper", "aql-paper", "uniform-q-d5-paper",
                       "qt-opt-paper", "ddpg"],
    # the ReF-ER issue's acceptance runs: --env Pendulum-v1 --steps 30000 (naf, ddpg-refer)
    # and --env InvertedPendulum-v5 --steps 100000 (vracer)
    "refer-pendulum": ["naf", "ddpg-refer"],
    "refer-vracer": ["vracer"],
    # issue 31 a): ReF-ER at the paper's budget (--steps 1000000 --env HalfCheetah-v5), every
    # memory at the paper's N = 2^18 (SUITE_FLAGS), so that ER and ReF-ER differ in the rules
    # only; about 1 core-hour per DDPG run and 1.5-2 per V-RACER run here
    "refer-1m": ["ddpg-er", "ddpg-refer", "vracer", "vracer-er"],
    # issue 31 b): the ACE family with the current default (separate actor layers), against
    # DDPG's two presets (--env HalfCheetah-v5 / Hopper-v5, 100k steps)
    "ace-separate": ["ace", "ace-alt", "tm-ace", "ensemble-ddpg", "ddpg", "ddpg-fast"],
    # issue 30's learning checks with 2 remote collectors, one entry per env: ddpg-c2
    # (--env Pendulum-v1 --steps 20000), aql-c2 (CartPole-v1, 100000), acer-c2 (CartPole-v1,
    # 300000), vracer-c2 (InvertedPendulum-v5, 100000)
    "distributed": ["ddpg-c2", "aql-c2", "acer-c2", "vracer-c2"],
}

# train.csv diagnostics plotted (log scale) and averaged per entry for these suites
SUITE_METRICS = {"refer": ["kl_mu_pi", "far_policy_fraction"],
                 "refer-1m": ["kl_mu_pi", "far_policy_fraction"],
                 "ace-separate": ["action_spread"],
                 "refer-pendulum": ["kl_mu_pi", "far_policy_fraction"],
                 "refer-vracer": ["kl_mu_pi", "far_policy_fraction"],
                 "acer-replay": ["kl_average", "rho_mean"],
                 "acer-continuous": ["kl_average", "trust_region_active"]}


# sample efficiency (ACER's Fig. 1 claim): per run, the first evaluation at or above the
# threshold, and the mean return over all evaluations (the area under the curve over its
# length); keyed by (suite, env)
SUITE_THRESHOLDS = {("acer-replay", "CartPole-v1"): 475.0,
                    ("distributed", "Pendulum-v1"): -200.0,
                    ("distributed", "CartPole-v1"): 475.0,
                    ("distributed", "InvertedPendulum-v5"): 900.0,
                    ("acer-replay", "LunarLander-v3"): 200.0,
                    ("acer-peers", "CartPole-v1"): 475.0,
                    # DDPG parity: a run that walks (HalfCheetah) or hops (Hopper) steadily
                    ("ddpg-parity", "HalfCheetah-v5"): 1000.0,
                    ("ddpg-parity", "Hopper-v5"): 1000.0}


# flags every run of ours in a suite gets, before the entry's own (which win). The ReF-ER
# MuJoCo matrix began (seeds 0-1) when every memory held the whole 100k-step run; its
# remaining seeds keep that memory, so that ER and ReF-ER differ only in the rules (the
# refer* default is half the run since, refer.md decision 9; ddpg-refer-mem50k measures it)
SUITE_FLAGS = {"refer": ["--buffer-size", "1000000"],
               "refer-1m": ["--buffer-size", "262144"]}

# entries that are one of our algorithms with extra flags: (algorithm, flags)
VARIANTS = {
    # the peers' learning rate (1e-3 for the actor too): like for like with SB3/SBX
    "ddpg-lr1e-3": ("ddpg", ["--ddpg.actor-lr", "1e-3"]),
    "ddpg-sb3": ("ddpg", ["--preset", "sb3"]),
    "ddpg-input1": ("ddpg", ["--ddpg.action-input-layer", "1"]),
    "ddpg-torch-init": ("ddpg", ["--ddpg.init", "torch"]),
    "ddpg-gaussian": ("ddpg", ["--ddpg.noise", "gaussian"]),
    "ddpg-fast": ("ddpg", ["--preset", "fast"]),
    "ddpg-c2": ("ddpg", ["--num-collectors", "2"]),
    "aql-c2": ("aql", ["--num-collectors", "2"]),
    "acer-c2": ("acer", ["--num-collectors", "2"]),
    "vracer-c2": ("vracer", ["--num-collectors", "2"]),
    # ReF-ER's comparison: the same DDPG (ACE-paper networks) with each replay; ER and PER
    # measure the KL and far-policy fraction too (--replay-diagnostics)
    "ddpg-er": ("ddpg", ["--replay-diagnostics"]),
    "ddpg-per": ("ddpg", ["--replay", "per", "--replay-diagnostics"]),
    "ddpg-refer": ("ddpg", ["--replay", "refer"]),
    "ddpg-refer1": ("ddpg", ["--replay", "refer1"]),
    "ddpg-refer2": ("ddpg", ["--replay", "refer2"]),
    # ReF-ER with the memory it gets by default in a 100k-step run (half the run, decision 9)
    "ddpg-refer-mem50k": ("ddpg", ["--replay", "refer", "--buffer-size", "50000"]),
    "naf-refer": ("naf", ["--replay", "refer"]),
    "vracer-er": ("vracer", ["--replay", "er"]),
    "acer-r0": ("acer", ["--replay-ratio", "0"]),
    "acer-r1": ("acer", ["--replay-ratio", "1"]),
    "acer-r4": ("acer", ["--replay-ratio", "4"]),
    "acer-no-trust-region": ("acer", ["--no-acer.trust-region"]),
    "acer-1env": ("acer", ["--num-envs", "1", "--batch-size", "1"]),
    "aql-small": ("aql", ["--preset", "small"]),
    "aql-d5": ("aql", ["--discretize", "5"]),
    "aql-small-d5": ("aql", ["--preset", "small", "--discretize", "5"]),
    "uniform-q-small": ("uniform-q", ["--preset", "small"]),
    "aql-d5-paper": ("aql", ["--preset", "paper", "--discretize", "5"]),
    "aql-indep-d5-paper": ("aql", ["--preset", "paper", "--discretize", "5",
                                   "--no-aql.autoregressive"]),
    "aql-paper": ("aql", ["--preset", "paper"]),
    "uniform-q-d5-paper": ("uniform-q", ["--preset", "paper", "--discretize", "5"]),
    "qt-opt-paper": ("qt-opt", ["--preset", "paper"]),
    "qt-opt-small": ("qt-opt", ["--preset", "small"]),
    "aql-indep-small-d5": ("aql", ["--preset", "small", "--discretize", "5",
                                   "--no-aql.autoregressive"]),
    "uniform-q-small-d5": ("uniform-q", ["--preset", "small", "--discretize", "5"]),
}


def finished(run_dir: Path, steps: int) -> bool:
    return last_eval(run_dir / "eval.csv")[0] >= steps


def claim(run_dir: Path) -> bool:
    """Take the run for this process (several drivers may share the matrix): an exclusive
    lock file holding our PID; a lock whose process is gone is stale and taken over."""
    lock = run_dir.parent / f".{run_dir.name}.lock"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                os.kill(int(lock.read_text().strip() or 0), 0)
                return False  # another live driver runs it
            except (ProcessLookupError, ValueError):
                lock.unlink(missing_ok=True)
                continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def release(run_dir: Path) -> None:
    (run_dir.parent / f".{run_dir.name}.lock").unlink(missing_ok=True)


def single_threaded_env() -> dict[str, str]:
    """One thread per run: learning curves do not depend on thread counts, and several runs
    side by side (one driver per core) with multi-threaded BLAS/OpenMP/XLA oversubscribe the
    cores badly (SB3 fell to 12 steps/s with 4 such runs on 2 cores)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                        "intra_op_parallelism_threads=1").strip()
    return env


def train_command(entry: str, seed: int, steps: int, env: str, run_dir: Path,
                  eval_every: int = 10_000, suite_flags: list[str] | None = None) -> list[str]:
    """The `offpolicy train` command of one of our entries: the suite's flags first, so that
    an entry's own flags override them (argparse keeps the last)."""
    algo, flags = VARIANTS.get(entry, (entry, []))
    return [sys.executable, "-m", "offpolicy", "train", algo, "--env", env, "--steps",
            str(steps), "--seed", str(seed), "--run-dir", str(run_dir), "--quiet",
            "--eval-every", str(eval_every), "--eval-episodes", "20", *(suite_flags or []),
            *flags]


def run_one(entry: str, seed: int, steps: int, env: str, run_dir: Path, peers_python: str,
            log, eval_every: int = 10_000, suite_flags: list[str] | None = None) -> None:
    if entry.startswith("pfrl-"):
        cmd = [peers_python, str(HERE / "peers_pfrl.py"), "learn", "--env", env, "--steps",
               str(steps), "--seed", str(seed), "--run-dir", str(run_dir), "--eval-every",
               str(eval_every), "--eval-episodes", "20"]
    elif entry.startswith(("sb3-", "sbx-")):
        cmd = [peers_python, str(HERE / "peers.py"), "learn", "--lib", entry[:3], "--env", env,
               "--steps", str(steps), "--seed", str(seed), "--run-dir", str(run_dir),
               "--eval-every", str(eval_every), "--eval-episodes", "20", "--warmup", "64"]
    else:
        cmd = train_command(entry, seed, steps, env, run_dir, eval_every, suite_flags)
        if (run_dir / "checkpoints" / "latest").exists():
            cmd.append("--resume")
        elif run_dir.exists():  # started but never checkpointed: start again
            import shutil

            shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    print(f"[{time.strftime('%H:%M:%S')}] {' '.join(cmd)}", file=log, flush=True)
    out = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=single_threaded_env())
    if out.returncode != 0:
        print(f"run {entry} s{seed} failed with exit code {out.returncode}", file=log, flush=True)


def report(suite: str, runs_root: Path, out_dir: Path, command: str, env: str,
           steps: int | None = None, name: str | None = None) -> str:
    """Rewrite the suite's table, curves and CSV. With ``steps``, the table and the curves use
    the finished runs only (a run in progress would cut its row back to the step it reached)
    and the runs in progress are listed under the table; the CSV always has every evaluation.
    ``name``: the files' stem (default: the suite)."""
    name = name or suite
    import numpy as np

    from offpolicy.errors import OffpolicyError
    from offpolicy.plotting import format_table, plot_groups, read_eval, read_metric, table_rows

    def has_evals(d: Path) -> bool:
        try:
            return len(read_eval(d)["step"]) > 0
        except OffpolicyError:  # started, nothing evaluated yet
            return False

    groups = {}
    for entry in SUITES[suite]:
        dirs = [d for d in sorted((runs_root / entry).glob("s*")) if has_evals(d)]
        if dirs:
            groups[entry] = dirs
    if not groups:
        return "no finished evaluations yet"
    with open(out_dir / f"learning_{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["entry", "seed", "step", "return_mean", "return_se", "episodes"])
        for entry, dirs in groups.items():
            for d in dirs:
                e = read_eval(d)
                for i in range(len(e["step"])):
                    w.writerow([entry, d.name[1:], int(e["step"][i]), e["return_mean"][i],
                                e["return_se"][i], int(e["episodes"][i])])
    metrics = SUITE_METRICS.get(suite, [])
    if metrics:  # the diagnostics too, so that a later session can rebuild finished runs
        with open(out_dir / f"learning_{name}_train.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["entry", "seed", "step", *metrics])
            for entry, dirs in groups.items():
                for d in dirs:
                    cols = [read_metric(d, m) for m in metrics]
                    for i in range(len(cols[0]["step"])):
                        w.writerow([entry, d.name[1:], int(cols[0]["step"][i]),
                                    *(c["return_mean"][i] for c in cols)])
    running = []
    if steps is not None:
        done: dict[str, list[Path]] = {}
        for e, dirs in groups.items():
            for d in dirs:
                if finished(d, steps):
                    done.setdefault(e, []).append(d)
                else:
                    running.append(f"{e} {d.name} at step {int(read_eval(d)['step'][-1])}")
        groups = done
    plot_groups(groups, out_dir / f"learning_{name}.png", f"{env}: mean over seeds +- s.e.")
    metric_text = ""
    for metric in SUITE_METRICS.get(suite, []):
        plot_groups(groups, out_dir / f"learning_{name}_{metric}.png",
                    f"{env}: {metric}, mean over seeds +- s.e.", metric=metric, log=True)
        means = {e: float(np.mean([np.mean(read_metric(d, metric)["return_mean"])
                                   for d in dirs])) for e, dirs in groups.items()}
        metric_text += (f"\nMean `{metric}` over each run's training (train.csv), mean over "
                        f"runs (plot: learning_{name}_{metric}.png): "
                        + ", ".join(f"{e} {v:.4g}" for e, v in means.items()) + ".\n")
        for er, ref in (("ddpg-er", "ddpg-refer"), ("naf", "naf-refer"),
                        ("ddpg-er", "ddpg-refer-mem50k"), ("vracer-er", "vracer")):
            if metric == "kl_mu_pi" and er in means and ref in means:
                metric_text += (f"Ratio of ReF-ER's to ER's mean KL ({ref} / {er}): "
                                f"{means[ref] / means[er]:.3g}.\n")
    metric_text += final_comparisons(groups, SUITE_COMPARISONS.get(suite, []))
    threshold = SUITE_THRESHOLDS.get((suite, env))
    if threshold is not None and groups:
        metric_text += sample_efficiency(groups, threshold)
        metric_text += final_comparisons(groups, SUITE_COMPARISONS.get(suite, []),
                                         over_curve=True)
    first = next(iter(groups.values()))[0] if groups else None
    every = int(read_eval(first)["step"][0]) if first is not None else 10_000
    text = (f"# Learning benchmark: {suite} on {env}\n\nCommand: `{command}`\n\n"
            f"Protocol: evaluation every {every:,} steps".replace(",", " ")
            + ", 20 deterministic episodes on a separate "
            "env; best and final evaluation per run, mean +- standard error over runs. "
            "`steps` is the last step that every run of the row reached."
            + (f" Every run of ours also gets `{' '.join(SUITE_FLAGS[suite])}` (an "
               "entry's own flags override it)."
               if suite in SUITE_FLAGS else "") + "\n\n"
            + (format_table(table_rows(groups)) if groups else "No finished run yet.") + "\n"
            + entries_legend(groups) + seeds_line(groups) + metric_text)
    if running:
        text += ("\nIn progress (not in the table or the curves): " + ", ".join(running)
                 + ".\n")
    (out_dir / f"learning_{name}.md").write_text(text)
    return text


def seed_ranges(seeds: list[int]) -> str:
    """``[0, 1, 2, 3, 7]`` -> ``"0-3, 7"``."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive seeds
    for s in sorted(set(seeds)):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def seeds_line(groups: dict) -> str:
    """When the rows have different seeds (a matrix extended by a later driver with other
    ``--seeds`` for some entries), one line saying which seeds each row holds; the log has
    every run's exact command."""
    seeds = {e: [int(d.name[1:]) for d in dirs] for e, dirs in groups.items()}
    if len({tuple(sorted(v)) for v in seeds.values()}) <= 1:
        return ""
    return ("\nSeeds per row (rows were extended by the same script with other `--seeds` and "
            "`--entries`; the .log has every run's command): "
            + "; ".join(f"{e} {seed_ranges(v)}" for e, v in seeds.items()) + ".\n")


PEER_PREFIXES = ("sb3-", "sbx-", "pfrl-")  # entries run by a peer library's script


def is_peer(entry: str) -> bool:
    return entry.startswith(PEER_PREFIXES)


def entry_command(entry: str) -> str:
    """What an entry runs, for the report's legend: our flags, or the peer script."""
    if entry.startswith("pfrl-"):
        return "benchmarks/peers_pfrl.py (PFRL 0.4.0)"
    if entry.startswith(("sb3-", "sbx-")):
        return f"benchmarks/peers.py --lib {entry[:3]}"
    algo, flags = VARIANTS.get(entry, (entry, []))
    return " ".join(["offpolicy train", algo, *flags])


def entries_legend(groups: dict) -> str:
    """One line naming what each entry of the table runs (only those with flags or peers)."""
    named = [f"{e} = `{entry_command(e)}`" for e in groups
             if e in VARIANTS or is_peer(e)]
    return ("\nEntries: " + "; ".join(named) + ".\n") if named else ""


# final-return comparisons the report tests (entry, against): Welch's t-test and its interval
# of the difference of means (issue 20: is the gap to SB3 real?)
SUITE_COMPARISONS = {
    "ddpg-peers": [("ddpg", "sb3-ddpg"), ("ddpg", "sbx-ddpg"), ("ddpg-lr1e-3", "sb3-ddpg")],
    "ddpg-parity": [("ddpg", "sb3-ddpg"), ("ddpg-sb3", "sb3-ddpg"), ("ddpg-input1", "sb3-ddpg"),
                    ("ddpg", "sbx-ddpg"), ("ddpg-sb3", "sbx-ddpg"), ("ddpg-input1", "sbx-ddpg"),
                    ("ddpg-input1", "ddpg"), ("ddpg-torch-init", "ddpg"),
                    ("ddpg-lr1e-3", "ddpg"), ("ddpg-gaussian", "ddpg"),
                    # what SB3's learning rate and init cost on top of the action at the input
                    ("ddpg-sb3", "ddpg-input1"), ("sbx-ddpg", "sb3-ddpg")],
    "refer-1m": [("ddpg-refer", "ddpg-er"), ("vracer", "vracer-er"), ("vracer", "ddpg-er")],
    "ace-separate": [("ace", "ddpg"), ("ace", "ddpg-fast"), ("ace-alt", "ddpg"),
                     ("tm-ace", "ddpg"), ("ensemble-ddpg", "ddpg"), ("ace", "ensemble-ddpg")],
    "refer": [("ddpg-refer", "ddpg-er"), ("naf-refer", "naf"), ("vracer", "vracer-er"),
              ("ddpg-refer-mem50k", "ddpg-er"), ("ddpg-refer-mem50k", "ddpg-refer")],
    # the AQL paper's Fig. 2 claims: a learned proposal beats uniform search (same
    # discretization), the autoregressive proposal beats the independent one; on the
    # continuous actions, AQL's Gaussian proposal against CEM (QT-Opt); and the best AQL
    # against its Gaussian variant and against DDPG
    "aql-fig2": [("aql-small-d5", "uniform-q-small-d5"), ("aql-small-d5", "aql-indep-small-d5"),
                 ("aql-small", "qt-opt-small"), ("aql-small-d5", "aql-small"),
                 ("aql-small-d5", "ddpg")],
}


def welch(a, b, level: float = 0.95) -> tuple[float, float, float, float, float]:
    """Welch's t-test of mean(a) = mean(b) without assuming equal variances: (t, degrees of
    freedom by the Welch-Satterthwaite equation, two-sided p, and the ``level`` interval of
    mean(a) - mean(b), diff +- t_q(df) se, which excludes 0 exactly when p < 1 - level).
    scipy comes with jax."""
    import numpy as np
    from scipy import stats

    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0.0:
        nan = float("nan")
        return nan, nan, nan, nan, nan
    diff, se = a.mean() - b.mean(), np.sqrt(va + vb)
    t = diff / se
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf((1 + level) / 2, df) * se
    return (float(t), float(df), float(2.0 * stats.t.sf(abs(t), df)), float(diff - half),
            float(diff + half))


def final_comparisons(groups: dict[str, list[Path]], pairs, over_curve: bool = False) -> str:
    """A table of final-return differences for each (entry, against) pair with at least two
    finished runs on each side: difference of means, Welch's t, its df and p, and the 95%
    interval. No correction for testing several pairs: read p against 0.05 / pairs.
    ``over_curve``: the same for each run's mean return over all its evaluations (the area
    under its learning curve over its length) instead of its final return."""
    import numpy as np

    from offpolicy.plotting import read_eval

    def finals(entry):
        returns = [read_eval(d)["return_mean"] for d in groups.get(entry, [])]
        return [float(np.mean(r) if over_curve else r[-1]) for r in returns]

    rows = []
    for mine, other in pairs:
        a, b = finals(mine), finals(other)
        if len(a) < 2 or len(b) < 2:
            continue
        t, df, p, lo, hi = welch(a, b)
        rows.append(f"| {mine} - {other} | {len(a)} / {len(b)} | "
                    f"{np.mean(a) - np.mean(b):.1f} | {t:.2f} | {df:.1f} | {p:.3f} | "
                    f"[{lo:.1f}, {hi:.1f}] |")
    if not rows:
        return ""
    what = "Mean return over evaluations" if over_curve else "Final return"
    return "\n".join(["", f"{what}, differences of means (Welch's t-test, two-sided, and "
                      f"its 95% interval; {len(rows)} pairs tested, so p < {0.05 / len(rows):.3g} "
                      "holds them all at 0.05 together, Bonferroni):", "",
                      "| difference | runs | mean difference | t | df | p | 95% interval |",
                      "|---|---:|---:|---:|---:|---:|---:|", *rows]) + "\n"


def sample_efficiency(groups: dict[str, list[Path]], threshold: float) -> str:
    """A table of, per entry: how many runs reached ``threshold``, the first evaluation step
    at which they did (mean +- s.e. over those runs) and the mean return over all of a run's
    evaluations (mean +- s.e. over runs)."""
    import numpy as np

    from offpolicy.plotting import read_eval

    def mse(x):
        x = np.asarray(x, float)
        se = x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else 0.0
        return f"{x.mean():.0f} ± {se:.0f}"

    lines = ["", f"Sample efficiency: the first evaluation with return >= {threshold:g}, and "
             "the mean return over all evaluations (area under the curve over its length).",
             "", f"| algorithm | runs reaching {threshold:g} | first step reaching it "
             "(mean ± s.e.) | mean return over evaluations (mean ± s.e.) |",
             "|---|---:|---:|---:|"]
    for entry, dirs in groups.items():
        firsts, means = [], []
        for d in dirs:
            e = read_eval(d)
            hit = np.flatnonzero(np.asarray(e["return_mean"]) >= threshold)
            if hit.size:
                firsts.append(e["step"][hit[0]])
            means.append(float(np.mean(e["return_mean"])))
        lines.append(f"| {entry} | {len(firsts)} / {len(dirs)} | "
                     f"{mse(firsts) if firsts else 'not reached'} | {mse(means)} |")
    return "\n".join(lines) + "\n"


def restore_finished(name: str, root: Path, out_dir: Path, steps: int) -> list[str]:
    """Rebuild, from the committed CSVs of ``out_dir``, the run directories (eval.csv, and
    train.csv with the suite's diagnostics) of runs that reached ``steps`` but are not on this
    machine: run directories are not committed, the CSVs are, so a benchmark that takes
    several sessions resumes where the last one stopped."""
    evals, trains = out_dir / f"learning_{name}.csv", out_dir / f"learning_{name}_train.csv"
    if not evals.exists():
        return []
    with open(evals, newline="") as f:
        rows = list(csv.DictReader(f))
    train_rows = []
    if trains.exists():
        with open(trains, newline="") as f:
            train_rows = list(csv.DictReader(f))
    restored = []
    for entry, seed in sorted({(r["entry"], r["seed"]) for r in rows}):
        run = [r for r in rows if r["entry"] == entry and r["seed"] == seed]
        run_dir = root / entry / f"s{seed}"
        if max(int(r["step"]) for r in run) < steps or (run_dir / "eval.csv").exists():
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "eval.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "return_mean", "return_std", "return_se", "episodes",
                        "wall_time"])
            for r in run:
                n = int(r["episodes"])
                std = float(r["return_se"]) * n**0.5
                w.writerow([r["step"], r["return_mean"], std, r["return_se"], n, ""])
        mine = [r for r in train_rows if r["entry"] == entry and r["seed"] == seed]
        if mine:
            with open(run_dir / "train.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=[k for k in mine[0] if k not in ("entry",
                                                                                  "seed")])
                w.writeheader()
                for r in mine:
                    w.writerow({k: v for k, v in r.items() if k not in ("entry", "seed")})
        restored.append(f"{entry} s{seed}")
    return restored


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=list(SUITES), required=True)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--entries", nargs="+", help="a subset of the suite's entries")
    p.add_argument("--eval-every", type=int, default=10_000,
                   help="env steps between evaluations (the ACE protocol: 10 000)")
    p.add_argument("--runs-root", type=Path, default=HERE / "runs")
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    p.add_argument("--peers-python", default=os.environ.get(
        "OFFPOLICY_BENCH_PYTHON", str(HERE.parent / ".venv-bench" / "bin" / "python")))
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args()
    entries = a.entries or SUITES[a.suite]
    # one matrix per (suite, env): HalfCheetah-v5 keeps the suite's plain name
    name = a.suite if a.env == "HalfCheetah-v5" else f"{a.suite}_{a.env.replace('/', '_')}"
    root = a.runs_root / name
    a.out_dir.mkdir(parents=True, exist_ok=True)
    # the command that runs the matrix: --report-only redraws a report under its canonical
    # command after several drivers shared the runs
    command = "python benchmarks/learning.py " + " ".join(x for x in sys.argv[1:]
                                                          if x != "--report-only")
    restored = restore_finished(name, root, a.out_dir, a.steps)
    if restored:
        print(f"restored from {a.out_dir}: {', '.join(restored)}", file=sys.stderr)
    if not a.report_only:
        with open(a.out_dir / f"learning_{name}.log", "a") as log:
            for seed in a.seeds:
                for entry in entries:
                    run_dir = root / entry / f"s{seed}"
                    if finished(run_dir, a.steps) or not claim(run_dir):
                        continue
                    try:
                        run_one(entry, seed, a.steps, a.env, run_dir, a.peers_python, log,
                                a.eval_every, SUITE_FLAGS.get(a.suite))
                    finally:
                        release(run_dir)
                    report(a.suite, root, a.out_dir, command, a.env, a.steps, name)
    print(report(a.suite, root, a.out_dir, command, a.env, a.steps, name))
    print(json.dumps({"runs_root": str(root)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
