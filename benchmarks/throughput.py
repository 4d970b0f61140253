"""Env steps per second with one update per step, side by side with SB3 and SBX.

    python benchmarks/throughput.py --suite all --rounds 3 [--resume]

Protocol (DESIGN.md "Performance rules"): HalfCheetah-v5, 400-300 tanh networks, batch 64, one
update per env step. Every entry runs in its own process, entries alternate within each
round (ours, SBX, SB3, ACE configurations...), and medians over rounds are reported, because
the machine is shared and noisy. For our entries the same process also measures:

* the update-only rate: the jitted update repeated on one batch (no env, no acting), timed in
  segments alternating with the loop's, so the loop's overhead is visible as
  ``loop_ratio = env_steps_per_s / update_per_s`` (offpolicy/training/bench.py);
* XLA's FLOP count of one update (``jit(...).lower(...).compile().cost_analysis()``);
* the machine's float32 matmul throughput: a 1024x1024 NumPy matmul, and from it
  ``flop_efficiency = flops_per_update * update_per_s / matmul_flops_per_s``.

The peers run through benchmarks/peers.py in a separate venv (``make bench-venv``), so that
torch never enters ours. Results: CSV rows per round, a markdown summary with medians and
ratios, the exact command, versions and the CPU model, and a bar plot.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ENV_ID = "HalfCheetah-v5"

# name -> (kind, algo, overrides); kind "ours" runs in this venv, "sb3"/"sbx" in the bench venv;
# override keys with a dot are training flags (--num-envs), the others the algorithm's section
ENTRIES = {
    "ours-ddpg": ("ours", "ddpg", {}),
    "sbx-ddpg": ("sbx", "ddpg", {}),
    "sb3-ddpg": ("sb3", "ddpg", {}),
    "ours-ace-5-1": ("ours", "ace", {"num_actors": 5, "plan_depth": 1}),
    "ours-ace-10-1": ("ours", "ace", {"num_actors": 10, "plan_depth": 1}),
    "ours-ace-5-2": ("ours", "ace", {"num_actors": 5, "plan_depth": 2}),
    # ReF-ER's bookkeeping (rho refresh, far-policy count, write-back) on the same DDPG
    "ours-ddpg-refer": ("ours", "ddpg", {".replay": "refer"}),
    # V-RACER with DDPG's networks and batch (one 400-300 tanh network, batch 64), and as
    # the paper runs it (128-128 softsign, batch 256)
    "ours-vracer-ddpg-nets": ("ours", "vracer", {"hidden": (400, 300), "activation": "tanh",
                                                 ".batch-size": 64}),
    "ours-vracer": ("ours", "vracer", {}),
    # ACER against PFRL 0.4.0's (benchmarks/peers_pfrl.py): one env, one k-step window per
    # update (PFRL's asynchronous agent acts on one env), k 20 / 50, replay ratio 4, the same
    # 128-128 networks; "env" names the entry's environment (default HalfCheetah-v5)
    "ours-acer-cartpole": ("ours", "acer", {"env": "CartPole-v1", ".num-envs": 1,
                                            ".batch-size": 1}),
    "pfrl-acer-cartpole": ("pfrl", "acer", {"env": "CartPole-v1"}),
    "ours-acer-cartpole-envs4": ("ours", "acer", {"env": "CartPole-v1"}),
    "ours-acer-cheetah": ("ours", "acer", {".num-envs": 1, ".batch-size": 1,
                                           ".segment-length": 50}),
    "pfrl-acer-cheetah": ("pfrl", "acer", {}),
    # TD3 and SAC (issue 33): SB3's SAC networks for both (256-256 relu), batch 256, one
    # update per env step; DQN on CartPole-v1: SB3's 64-64, batch 32, one update per env step
    "ours-td3": ("ours", "td3", {"hidden": (256, 256), ".batch-size": 256}),
    "sbx-td3": ("sbx", "td3", {}),
    "sb3-td3": ("sb3", "td3", {}),
    "ours-td3-pipeline": ("ours", "td3", {"hidden": (256, 256), ".batch-size": 256,
                                          ".pipeline": True}),
    "ours-sac": ("ours", "sac", {".batch-size": 256}),
    "ours-sac-pipeline": ("ours", "sac", {".batch-size": 256, ".pipeline": True}),
    "sbx-sac": ("sbx", "sac", {}),
    "sb3-sac": ("sb3", "sac", {}),
    "ours-dqn-cartpole": ("ours", "dqn", {"env": "CartPole-v1", ".batch-size": 32,
                                          ".updates-per-step": 1}),
    "sbx-dqn-cartpole": ("sbx", "dqn", {"env": "CartPole-v1"}),
    "sb3-dqn-cartpole": ("sb3", "dqn", {"env": "CartPole-v1"}),
    # AQL against exact Q on HalfCheetah-v5 discretized to 5 levels (5^6 = 15 625 actions):
    # one env step plus one update (--updates-per-step 1), the paper's sizes (256-256 Q,
    # N 100 + M 400 samples, 32 unrolls of 30 steps); updates start after 100 steps
    **{f"ours-{algo}-cheetah-d5": ("ours", algo, {".discretize": 5, ".updates-per-step": 1,
                                                 ".warmup-steps": 100})
       for algo in ("aql", "uniform-q", "qt-opt", "exact-q")},
}
# the runtime's two acting modes: K = 4 env copies, and the pipelined loop
MODES = {"envs4": {".num-envs": 4}, "pipeline": {".pipeline": True}}
for _name, (_kind, _algo, _over) in list(ENTRIES.items()):
    if _kind == "ours":
        for _mode, _flags in MODES.items():
            if _mode == "envs4" and _algo != "ddpg":
                continue
            if _algo in ("ddpg", "ace") and ".replay" not in _over:
                ENTRIES[f"{_name}-{_mode}"] = (_kind, _algo, {**_over, **_flags})
# issue 39: recurrent cores next to their feed-forward twins, on the partially observed tasks
# and with the configurations of the learning comparison (learning.py, suite "recurrent"):
# V-RACER and DDPG with ReF-ER on Pendulum-P (--preset lstm: ReF-ER Sec. 5.4's LSTM 2 x 32,
# a zero start over 16 steps; "stored": the recorded state, 16 steps of burn-in, then 16
# back-propagated), AQL on CartPole-P (an LSTM of 64 cells in the shared embedding)
_PENDULUM_P, _CARTPOLE_P = "offpolicy/Pendulum-P-v0", "offpolicy/CartPole-P-v0"
_STORED = {"core_start": "stored", "core_burn_in": 16}
_AQL_SMALL = {".preset": "small"}
_AQL_CORE = {"core": "lstm", "core_cells": 64, "core_window": 8}
for _algo, _ff, _rec in (("vracer", {}, {".preset": "lstm"}),
                         ("ddpg", {".preset": "refer"}, {".preset": "lstm"})):
    ENTRIES[f"ours-{_algo}-pendulum-p"] = ("ours", _algo, {"env": _PENDULUM_P, **_ff})
    ENTRIES[f"ours-{_algo}-pendulum-p-lstm-zero"] = ("ours", _algo, {"env": _PENDULUM_P, **_rec})
    ENTRIES[f"ours-{_algo}-pendulum-p-lstm-stored"] = ("ours", _algo,
                                                       {"env": _PENDULUM_P, **_rec, **_STORED})
ENTRIES["ours-aql-cartpole-p"] = ("ours", "aql", {"env": _CARTPOLE_P, **_AQL_SMALL})
ENTRIES["ours-aql-cartpole-p-lstm-zero"] = ("ours", "aql",
                                            {"env": _CARTPOLE_P, **_AQL_SMALL, **_AQL_CORE})
ENTRIES["ours-aql-cartpole-p-lstm-stored"] = ("ours", "aql", {
    "env": _CARTPOLE_P, **_AQL_SMALL, **_AQL_CORE, "core_start": "stored",
    "core_burn_in": 10})
RECURRENT = [n for n in ENTRIES if "pendulum-p" in n or "cartpole-p" in n]
BASE = ["ours-ddpg", "ours-ace-5-1", "ours-ace-10-1", "ours-ace-5-2"]
OURS = [name for name, (kind, _, _) in ENTRIES.items() if kind == "ours"]
# the same configurations without our XLA:CPU flags (offpolicy/jax_setup.py): an ablation
XLA_OFF = {"OFFPOLICY_XLA_DEFAULTS": "off"}
ABLATIONS = {f"{name}-xla-off": name for name in BASE}
SUITES = {
    "ddpg": ["ours-ddpg", "ours-ddpg-envs4", "ours-ddpg-pipeline", "sbx-ddpg", "sb3-ddpg"],
    "ace": ["ours-ace-5-1", "ours-ace-5-1-pipeline", "ours-ace-10-1", "ours-ace-10-1-pipeline",
            "ours-ace-5-2", "ours-ace-5-2-pipeline", "sbx-ddpg", "sb3-ddpg"],
    "all": ["ours-ddpg", "ours-ddpg-envs4", "sbx-ddpg", "sb3-ddpg", "ours-ace-5-1",
            "ours-ace-10-1", "ours-ace-5-2"],
    "xla": [n for pair in ABLATIONS.items() for n in pair[::-1]],
    "ours": OURS,  # no peers, e.g. on a GPU machine without the peers' venv
    "refer": ["ours-ddpg", "ours-ddpg-refer", "ours-vracer-ddpg-nets", "ours-vracer"],
    "acer": ["ours-acer-cartpole", "pfrl-acer-cartpole", "ours-acer-cartpole-envs4",
             "ours-acer-cheetah", "pfrl-acer-cheetah"],
    "baselines": ["ours-td3", "ours-td3-pipeline", "sbx-td3", "sb3-td3", "ours-sac",
                  "ours-sac-pipeline", "sbx-sac", "sb3-sac",
                  "ours-dqn-cartpole", "sbx-dqn-cartpole", "sb3-dqn-cartpole"],
    "aql": ["ours-aql-cheetah-d5", "ours-uniform-q-cheetah-d5", "ours-qt-opt-cheetah-d5",
            "ours-exact-q-cheetah-d5"],
    "recurrent": RECURRENT,
    # the pipelined loop against the default one (a GPU check: throughput_pipeline_h200.md)
    "pipeline": ["ours-td3", "ours-td3-pipeline", "ours-sac", "ours-sac-pipeline"],
}
# ours over a peer, paired per round (env steps/s), and --pipeline over the default loop
PEER_PAIRS = [("ours-acer-cartpole", "pfrl-acer-cartpole"),
              ("ours-acer-cheetah", "pfrl-acer-cheetah"),
              ("ours-aql-cheetah-d5", "ours-exact-q-cheetah-d5"),
              ("ours-td3", "sbx-td3"), ("ours-td3", "sb3-td3"),
              ("ours-td3-pipeline", "sbx-td3"), ("ours-td3-pipeline", "sb3-td3"),
              ("ours-sac", "sbx-sac"), ("ours-sac", "sb3-sac"),
              ("ours-sac-pipeline", "sbx-sac"), ("ours-sac-pipeline", "sb3-sac"),
              ("ours-dqn-cartpole", "sbx-dqn-cartpole"), ("ours-dqn-cartpole", "sb3-dqn-cartpole"),
              ("ours-td3-pipeline", "ours-td3"), ("ours-sac-pipeline", "ours-sac")]
# the issue's reference FLOP counts of a plain implementation (GFLOP per update, batch 64)
REFERENCE_GFLOP = {"ours-ace-5-1": 2.6, "ours-ace-10-1": 7.4, "ours-ace-5-2": 13.9,
                   "ours-ddpg": 0.19}
# what the summary of a suite with its own protocol says under its table
SUITE_NOTES = {
    "baselines": "TD3 and SAC on HalfCheetah-v5 with SB3's SAC networks (256-256 relu) for "
                 "both, batch 256; DQN on CartPole-v1 with SB3's 64-64 and batch 32; every "
                 "entry one update per env step (benchmarks/peers.py, THROUGHPUT); `-pipeline`: "
                 "ours with --pipeline (the env step overlaps the update). Bounds "
                 "(issue 33, acceptance 3): TD3 and SAC >= 1.15x SBX and >= 2.5x SB3; DQN >= "
                 "1.3x SBX.",
    "pipeline": "TD3 and SAC as in the suite `baselines` (256-256, batch 256, one update per "
                "env step), each with the default loop (the update fused with the next action: "
                "one dispatch and one wait per env step) and with --pipeline (the update "
                "dispatched before the env step, the next action computed after it with its "
                "parameters, on JAX's default device).",
    "aql": "Each env step is followed by one update (`--updates-per-step 1`), so 1 / (env "
           "steps/s) is the time of one env step plus one update. The update recomputes a* at "
           "all 31 x 32 states of the batch: AQL evaluates Q on N + M = 500 candidates per "
           "state (uniform-q 400, qt-opt 3 x 100), exact-q on all 15 625 (in chunks of about "
           "2^18 state-action rows, `--aql.exact-rows`). Bound (AQL issue, acceptance 3): AQL "
           ">= 10x exact-q. XLA's FLOP count of a scan counts its body once, so exact-q's "
           "GFLOP/update and FLOP efficiency are those of one chunk (its whole update is about "
           "15 625 / 500 x AQL's search, some 2.3 TFLOP).",
    "recurrent": "Recurrent cores (issue 39) next to their feed-forward twins on the "
                 "partially observed tasks: V-RACER (batch 256) and DDPG with ReF-ER (batch "
                 "128) on Pendulum-P, one update per env step; `-lstm-zero`: --preset lstm "
                 "(ReF-ER Sec. 5.4: LSTM 2 x 32, every output from a zero state over the last "
                 "16 steps, at acting and learning; the learning suite `recurrent` uses windows "
                 "of 8); `-lstm-stored`: the same core started from the state recorded while "
                 "acting, 16 steps of burn-in, 16 back-propagated. AQL (--preset small) on "
                 "CartPole-P with an LSTM of 64 cells in its shared embedding (zero: windows of "
                 "8; stored: burn-in 10, as in the learning suite), one update of 16 unrolls "
                 "every 8 env steps. The DDPG twin is --preset refer (128-128, no core); the "
                 "lstm preset's layers after the core are 32-32. XLA's FLOP count counts a "
                 "loop's body once: the stored entries unroll one loop over the window, so "
                 "their GFLOP/update and efficiency are undercounted; the zero entries unroll "
                 "their 16-step windows as straight-line code, so theirs are whole. Every "
                 "update compiles once (tests/test_recurrent.py).",
    "acer": "ACER updates once per segment plus Poisson(4) replayed windows, not once per env "
            "step, so the loop ratio and update-only columns are per update, not per step. "
            "PFRL's ACER is asynchronous (one process per env, no batched acting): ours runs "
            "--num-envs 1 --batch-size 1 for the comparison; `-envs4` is our default (4 env "
            "copies, 16 windows per replayed update). PFRL's torch runs one thread "
            "(peers_pfrl.py, as in the learning driver); ours runs XLA's default threads, so "
            "on these 2 cores ours could gain at most 2x from threads. Both sides: the same "
            "128-128 ReLU networks, k, c, delta, alpha and optimiser (the differences PFRL "
            "cannot express are listed in benchmarks/peers_pfrl.py).",
}
COLUMNS = ["round", "entry", "lib", "algo", "steps", "env_steps_per_s", "update_per_s",
           "gflop_per_update", "matmul_gflops", "flop_efficiency", "loop_ratio", "seconds",
           "xla_flags", "backend", "device", "machine"]


def run_entry(name: str, steps: int, warmup: int, peers_python: str) -> dict:
    # the ablation's arms must differ whatever the caller's environment says
    env = {k: v for k, v in os.environ.items() if k != "OFFPOLICY_XLA_DEFAULTS"}
    if name in ABLATIONS:
        env.update(XLA_OFF)
    kind, algo, over = ENTRIES[ABLATIONS.get(name, name)]
    over = dict(over)
    env_id = over.pop("env", ENV_ID)
    if kind == "ours":
        cmd = [sys.executable, "-m", "offpolicy", "bench", algo, "--env", env_id,
               "--bench-steps", str(steps), "--bench-warmup", str(warmup), "--json"]
        for k, v in over.items():
            flag = (f"--{k[1:]}" if k.startswith(".")
                    else f"--{algo}.{k.replace('_', '-')}")
            if v is True:
                cmd += [flag]
            else:
                cmd += [flag, *map(str, v)] if isinstance(v, tuple) else [flag, str(v)]
    elif kind == "pfrl":
        cmd = [peers_python, str(HERE / "peers_pfrl.py"), "throughput", "--env", env_id,
               "--steps", str(steps), "--warmup", str(warmup), "--seed", "0"]
    else:
        cmd = [peers_python, str(HERE / "peers.py"), "throughput", "--lib", kind, "--algo",
               algo, "--env", env_id, "--steps", str(steps), "--warmup", str(warmup),
               "--seed", "0"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["seconds"] = time.perf_counter() - t0
    if kind != "ours":  # compare against the peers' rate without their first (compiling) steps
        res["env_steps_per_s"] = res.get("steps_per_s_steady", res["steps_per_s"])
        res["lib"] = kind
    return res


def steps_for(name: str, ddpg_steps: int) -> tuple[int, int]:
    """(timed steps, warm-up steps): ACE is 5-70x heavier than DDPG, so it times fewer."""
    name = ABLATIONS.get(name, name)
    if name.endswith("-cheetah-d5"):  # one update per step of 0.5-40 s: a few steps, past
        # the 100 warm-up steps (the first update compiles during warm-up)
        return (3 if "exact" in name else 15), 102
    if "acer" in name:  # PFRL's replay starts after 1000 finished-episode steps: warm past it
        return ddpg_steps, 1100
    if name.startswith("ours-ace-5-2"):
        return max(ddpg_steps // 10, 200), 200
    if name.startswith("ours-ace"):
        return max(ddpg_steps // 4, 300), 300
    return ddpg_steps, 1100  # past TD3's 1000 warm-up steps: its first update is not timed


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def this_machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores"


def paired_ratios(by: dict[str, list[dict]], num: str, den: str, key: str) -> list[float]:
    """``key`` of entry ``num`` over entry ``den`` within each round both ran, in round order."""
    def per_round(name):
        return {int(r["round"]): float(r[key]) for r in by.get(name, [])}

    a, b = per_round(num), per_round(den)
    return [a[rnd] / b[rnd] for rnd in sorted(a.keys() & b.keys())]


def summarize(rows: list[dict], out_dir: Path, suite: str, command: str) -> str:
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["entry"], []).append(r)

    def med(name, key):
        vals = [float(r[key]) for r in by.get(name, []) if r.get(key) not in ("", None)]
        return float(np.median(vals)) if vals else float("nan")

    # the machine the rows were measured on (a summary may be regenerated elsewhere)
    machine = next((r["machine"] for r in rows if r.get("machine")), this_machine())
    title = {"acer": f"# Throughput ({suite}): ACER against PFRL 0.4.0, one env, k-step "
                     "windows, replay ratio 4 (CartPole-v1 k 20, HalfCheetah-v5 k 50)",
             "baselines": f"# Throughput ({suite}): TD3 and SAC on {ENV_ID} (256-256, batch "
                          "256), DQN on CartPole-v1 (64-64, batch 32), one update per env step",
             "aql": f"# Throughput ({suite}): AQL and its baselines on {ENV_ID} --discretize 5 "
                    "(15 625 actions), one env step plus one update of 32 unrolls x 30 steps",
             "pipeline": f"# Throughput ({suite}): the default loop against --pipeline, TD3 "
                         f"and SAC on {ENV_ID} (256-256, batch 256, one update per env step)",
             "recurrent": f"# Throughput ({suite}): recurrent cores against feed-forward "
                          "twins on the partially observed tasks (Pendulum-P, CartPole-P)"
             }.get(suite, f"# Throughput ({suite}), {ENV_ID}, batch 64, one update per env "
                          "step")
    lines = [title, "",
             f"Command: `{command}`", "",
             f"Machine: {machine}; date {time.strftime('%Y-%m-%d')}",
             f"Python {platform.python_version()}; rounds: {max(int(r['round']) for r in rows)}"
             " (entries alternate within each round; medians over rounds)", ""]
    accel = sorted({r.get("device", "") for r in rows if r.get("backend") not in ("cpu", "", None)})
    if accel:
        lines += [f"Accelerator: {', '.join(accel)}. The updates run there; the matmul peak and "
                  "FLOP efficiency columns are the host CPU's NumPy matmul, so efficiency is "
                  "not meaningful for these rows.", ""]
    lines += ["| entry | env steps/s | update-only/s | loop ratio | GFLOP/update | "
              "ref GFLOP | FLOP efficiency | matmul GFLOP/s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in by:
        def f(key, fmt, name=name):
            v = med(name, key)
            if np.isnan(v):
                return ""
            return format(v, ".3g" if fmt == ".1f" and abs(v) < 10 else fmt)

        ref = REFERENCE_GFLOP.get(name, "")
        lines.append(f"| {name} | {f('env_steps_per_s', '.1f')} | {f('update_per_s', '.1f')} | "
                     f"{f('loop_ratio', '.3f')} | {f('gflop_per_update', '.3f')} | {ref} | "
                     f"{f('flop_efficiency', '.2f')} | {f('matmul_gflops', '.1f')} |")
    for mine in ("ours-ddpg", "ours-ddpg-envs4", "ours-ddpg-pipeline"):
        ours = med(mine, "env_steps_per_s")
        if np.isnan(ours) or not any(p in by for p in ("sbx-ddpg", "sb3-ddpg")):
            continue
        lines += ["", f"Ratios of medians ({mine} over peer):"]
        for peer in ("sbx-ddpg", "sb3-ddpg"):
            p = med(peer, "env_steps_per_s")
            if not np.isnan(p):
                lines.append(f"- {peer}: {ours / p:.2f}x")
        # per-round paired ratios: robust to drift of the machine's speed
        for peer in ("sbx-ddpg", "sb3-ddpg"):
            pairs = paired_ratios(by, mine, peer, "env_steps_per_s")
            if pairs:
                lines.append(f"- {peer}, paired per round: "
                             + ", ".join(f"{x:.2f}" for x in pairs)
                             + f" (median {np.median(pairs):.2f}x)")
    for mine, peer in PEER_PAIRS:
        pairs = paired_ratios(by, mine, peer, "env_steps_per_s")
        if pairs:
            lines += ["", f"{mine} over {peer}, env steps/s paired per round: "
                      + ", ".join(f"{x:.2f}" for x in pairs)
                      + f" (median {np.median(pairs):.2f}x; ratio of medians "
                      f"{med(mine, 'env_steps_per_s') / med(peer, 'env_steps_per_s'):.2f}x)"]
    for mine in ("ours-ddpg-refer", "ours-vracer-ddpg-nets", "ours-vracer"):
        pairs = paired_ratios(by, mine, "ours-ddpg", "env_steps_per_s")
        if pairs:
            bound = ("; bound for ReF-ER's bookkeeping: >= 0.85x" if mine == "ours-ddpg-refer"
                     else "")
            lines += ["", f"{mine} over ours-ddpg (--replay er), env steps/s paired per round: "
                      + ", ".join(f"{x:.2f}" for x in pairs)
                      + f" (median {np.median(pairs):.2f}x{bound})"]
    for r in rows:  # the peers report their library versions; ours is in the jax column
        v = json.loads(r["versions"]) if r.get("versions") else ""
        while isinstance(v, str) and v:
            v = json.loads(v)
        if isinstance(v, dict) and v:
            lines += ["", "Peer versions: " + ", ".join(f"{k} {x}" for k, x in v.items())]
            break
    if suite in SUITE_NOTES:  # suites with their own protocol: their note, no DDPG bounds
        lines += ["", SUITE_NOTES[suite]]
        text = "\n".join(lines) + "\n"
        (out_dir / f"throughput_{suite}.md").write_text(text)
        plot(by, med, out_dir / f"throughput_{suite}.png")
        return text
    lines += ["", "Bounds (on the CPU): ours-ddpg >= 1.3x SBX and >= 2.0x SB3 (medians, with "
              "the same tanh 400-300 networks); ACE loop ratio >= 0.9 (default or --pipeline "
              "mode); ACE update efficiency >= 0.9x its own GEMMs' (benchmarks/gemm_shapes.py). "
              "`-envs4`: --num-envs 4, one update per env step as everywhere; `-pipeline`: "
              "--pipeline."]
    if not accel:  # against the host's matmul peak: meaningless for accelerator rows
        lines[-1] += (" Equivalent efficiency in reference FLOPs (ref GFLOP x update-only rate "
                      "/ matmul peak), i.e. how fast a plain implementation would have to run "
                      "to match:")
        for name, ref in REFERENCE_GFLOP.items():
            if name in by and name != "ours-ddpg":
                eq = ref * med(name, "update_per_s") / med(name, "matmul_gflops")
                lines.append(f"- {name}: {eq:.2f}")
    pairs = [(a, b) for a, b in ABLATIONS.items() if a in by and b in by]
    if pairs:
        lines += ["", "XLA:CPU flags (`offpolicy/jax_setup.py`: XLA_CPU_DEFAULTS) against none "
                  "(`OFFPOLICY_XLA_DEFAULTS=off`), update-only rate, paired per round:"]
        for off, on in pairs:
            ratios = paired_ratios(by, on, off, "update_per_s")
            lines.append(f"- {on}: " + ", ".join(f"{x:.2f}" for x in ratios)
                         + f" (median {np.median(ratios):.2f}x)")
    text = "\n".join(lines) + "\n"
    (out_dir / f"throughput_{suite}.md").write_text(text)
    plot(by, med, out_dir / f"throughput_{suite}.png")
    return text


def plot(by, med, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(by)
    env = [med(n, "env_steps_per_s") for n in names]
    upd = [med(n, "update_per_s") for n in names]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    ax.bar(x - 0.2, env, 0.4, label="env steps/s (1 update/step)")
    ax.bar(x + 0.2, [0 if np.isnan(u) else u for u in upd], 0.4, label="update-only/s")
    ax.set_xticks(x, names, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("per second (log scale), medians")
    ax.set_title("ACER vs PFRL" if any("acer" in n for n in names) else
                 "TD3, SAC (HalfCheetah-v5), DQN (CartPole-v1), one update per step"
                 if any("sac" in n for n in names) else
                 f"{ENV_ID} --discretize 5, one update per step" if any("-d5" in n for n in names)
                 else f"{ENV_ID}, batch 64")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=list(SUITES), default="all")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3000, help="timed DDPG steps per entry")
    p.add_argument("--peers-python", default=os.environ.get(
        "OFFPOLICY_BENCH_PYTHON", str(HERE.parent / ".venv-bench" / "bin" / "python")))
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    p.add_argument("--resume", action="store_true", help="keep finished rows of the CSV")
    a = p.parse_args()
    entries = SUITES[a.suite]
    peers = any(ENTRIES[ABLATIONS.get(e, e)][0] != "ours" for e in entries)
    if peers and not Path(a.peers_python).exists():
        print(f"peers' python {a.peers_python} not found: run `make bench-venv` or pass "
              "--peers-python", file=sys.stderr)
        return 2
    a.out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = a.out_dir / f"throughput_{a.suite}.csv"
    from learning import canonical_args  # without this machine's paths (--out-dir, ...)

    command = "python benchmarks/throughput.py " + " ".join(canonical_args(sys.argv[1:]))
    rows: list[dict] = []
    fields = COLUMNS + ["versions"]
    if a.resume and csv_path.exists():
        with open(csv_path, newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            fields = list(reader.fieldnames or fields)  # an older file keeps its columns
    done = {(int(r["round"]), r["entry"]) for r in rows}
    new = not (a.resume and csv_path.exists())
    with open(csv_path, "w" if new else "a", newline="") as f:
        w = csv.DictWriter(f, fields, extrasaction="ignore")
        if new:
            w.writeheader()
        for rnd in range(1, a.rounds + 1):
            for name in entries:
                if (rnd, name) in done:
                    continue
                steps, warmup = steps_for(name, a.steps)
                res = run_entry(name, steps, warmup, a.peers_python)
                row = {"round": rnd, "entry": name, "steps": steps, "machine": this_machine(),
                       **res,
                       "versions": json.dumps(res.get("versions", ""))}
                row = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
                w.writerow(row)
                f.flush()
                rows.append({k: str(v) for k, v in row.items()})
                print(f"round {rnd} {name:15s} {float(res['env_steps_per_s']):8.1f} env steps/s"
                      + (f"  update-only {res['update_per_s']:.1f}/s  "
                         f"eff {res['flop_efficiency']:.2f}" if "update_per_s" in res else ""),
                      flush=True)
    print(summarize(rows, a.out_dir, a.suite, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
