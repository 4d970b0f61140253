"""Learning benchmarks with the ACE paper's protocol, on the package's suite engine.

    python benchmarks/learning.py --suite ddpg-peers --steps 100000 --seeds 0 1 2
    python benchmarks/learning.py --suite ace-family --steps 100000 --seeds 0 1 2

What lives here is what needs the peers' bench venv (``make bench-venv``): the entries run by
Stable-Baselines3, SBX and PFRL (``sb3-``, ``sbx-``, ``pfrl-``), and the benchmark grids that
mix them with ours. Running, resuming and reporting are ``offpolicy.suites`` (the engine of
``offpolicy suite run``): each grid becomes a suite of one env, run by ``runner.run_local``
and reported by ``report.write_report``.

Protocol (ACE paper, "Experiments"): evaluate every 10 000 steps with 20 deterministic
episodes (no exploration noise) on a separate environment; report the best and the final
evaluation per run, mean +- standard error over seeds, and the learning curves.

Each run lives in ``benchmarks/runs/<suite>/<entry>/s<seed>`` (its output in ``s<seed>.log``
beside it). Several drivers may work on the same grid at once (one per core): each takes a run
with a lock file. A finished run is skipped, an unfinished one of ours continues with
``--resume`` from its latest checkpoint, an SB3/SBX one from the checkpoint ``peers.py`` writes
after each evaluation (a PFRL one restarts). Runs go seed-major, so a stopped benchmark has
balanced partial results. After every run the table (``learning_<suite>.md``), the curves
(``learning_<suite>.png``) and a CSV of all evaluations (``learning_<suite>.csv``) are
rewritten under ``benchmarks/results/``; the commands run are appended to
``learning_<suite>.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from offpolicy.suites import runner  # noqa: E402
from offpolicy.suites.report import restore_finished, write_report  # noqa: E402
from offpolicy.suites.spec import Claim, Decision, Entry, EnvPlan, Suite  # noqa: E402

SUITES = {
    "ddpg-peers": ["ddpg", "sbx-ddpg", "sb3-ddpg", "ddpg-lr1e-3"],
    "ace-family": ["ace", "ace-alt", "tm-ace", "ensemble-ddpg", "wide-ddpg", "shared-ddpg",
                   "ddpg"],
    # the issues' 20k-step Pendulum acceptance runs (use --env Pendulum-v1 --steps 20000)
    "pendulum": ["ddpg", "ace", "ace-alt", "tm-ace", "ensemble-ddpg"],
    # DDPG parity with SB3 (5-10 seeds; HalfCheetah-v5 and Hopper-v5) and the one-choice ablation
    "ddpg-parity": ["ddpg", "ddpg-sb3", "sb3-ddpg", "sbx-ddpg", "ddpg-input1", "ddpg-torch-init",
                    "ddpg-lr1e-3", "ddpg-gaussian"],
    # issue 33: our TD3 and SAC with SB3's defaults (--preset sb3) against SB3's and SBX's
    # (benchmarks/peers.py --algo td3|sac; HalfCheetah-v5 and Hopper-v5, 100k steps, 5 seeds);
    # sac-sb3-policy: our SAC's sb3 preset before its warm-up acted uniformly, as SB3's does
    # (its 100 warm-up steps sampled the initial policy). On HalfCheetah-v5 sac-sb3 links
    # sac-ablation's sac-sb3-uniform folder: the same runs (the same resolved config)
    "baselines-peers": ["td3-sb3", "sb3-td3", "sbx-td3", "sac-sb3", "sb3-sac", "sbx-sac",
                        "sac-sb3-policy"],
    # issue 33's loop ablation (HalfCheetah-v5, 40k steps, 5 seeds): SB3's TD3 loop driving
    # our jitted update, from SB3's initial weights and from ours (benchmarks/hybrid.py); our
    # loop with updates from step 101, as SB3's (--preset sb3 since the ablation) and waiting
    # for a full batch (step 256, before); SB3's TD3 itself from our initialiser's draw
    "td3-loop-ablation": ["td3-sb3", "td3-sb3-wait", "sb3-td3", "sb3-td3-ourupdate",
                          "sb3-td3-ourupdate-ourinit", "sb3-td3-ourinit"],
    # issue 33 on Hopper-v5: SBX's TD3 far ahead of SB3's and ours (2 seeds: 1374 against 386
    # and 295). With the same settings SBX's TD3 (0.28) differs from SB3's and ours in three
    # things: its initial law (Flax's Dense default: LeCun normal, zero biases; SB3 and our
    # --preset sb3: PyTorch's), its targets, soft-updated after every critic update rather than
    # every policy_delay updates, and its actor, which ascends the smaller twin rather than
    # Q_1 (and it halves the critic loss, which Adam all but cancels). Our TD3 with all three,
    # and with each, beside the three libraries; the other entries' runs are
    # baselines-peers' (link their folders: the same runs). The reverse: SBX's TD3 with SB3's
    # three choices (sbx-td3-sb3, benchmarks/sbx_variant.py)
    "td3-sbx-ablation": ["td3-sb3", "td3-sb3-sbx", "td3-sb3-flaxinit", "td3-sb3-sbxtarget",
                         "td3-sb3-minq", "sb3-td3", "sbx-td3", "sbx-td3-sb3"],
    # the same question for SAC's initial draw: SB3's SAC from our initialiser's draw
    # (--preset sb3: torch's law) beside SB3's own and ours (--env HalfCheetah-v5 / Hopper-v5;
    # ours as the sb3 preset ran then, its warm-up sampling the initial policy)
    "sac-init-ablation": ["sac-sb3-policy", "sb3-sac", "sb3-sac-ourinit"],
    # where our SAC and SB3's part (HalfCheetah-v5, 100k steps; ours as the sb3 preset ran
    # then, sac-sb3-policy; link it and sb3-sac to baselines-peers' folders: the same runs):
    # our SAC with SB3's 1e-6 inside the log-det of
    # log pi (the one formula the two updates differ in); SB3's SAC loop driving our jitted
    # update from SB3's draw (benchmarks/hybrid.py: as sb3-sac, the gap lies in our loop; as
    # sac-sb3-policy, in the update as compiled, the log-det's eps included); our SAC with SB3's
    # uniformly random warm-up actions (the preset's 100 warm-up steps sampled the initial
    # policy, as every stochastic policy's does under auto; SB3's learning_starts acts
    # uniformly): what --preset sb3 does since
    "sac-ablation": ["sac-sb3-policy", "sb3-sac", "sac-sb3-eps", "sb3-sac-ourupdate",
                     "sac-sb3-uniform"],
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
    # only; on a 2-core Xeon running two at once (2026-11-28) a V-RACER run took about 60 min,
    # the ReF-ER paper's DDPG (the *-appa entries) about 37
    # ddpg-refer-farpol forgets the most far-policy episode first (--refer-forget far-policy,
    # the authors' smarties; refer.md decision 8)
    # issue 68 extends it to the pre-registered grid (benchmarks/suites/
    # refer-1m.preregistration.md, which opens the report): the DDPG arms with the authors'
    # choices (--preset smarties), V-RACER's one-rule arms, NAF and SB3's PPO (App. D), on
    # HalfCheetah-v5 and Ant-v5 (--env), seeds 0-4
    "refer-1m": ["ddpg-er", "ddpg-refer", "vracer", "vracer-er", "ddpg-er-appa",
                 "ddpg-refer-appa", "ddpg-refer-farpol", "ddpg-er-smarties",
                 "ddpg-refer-smarties", "vracer-refer1", "vracer-refer2", "naf-er",
                 "naf-refer", "sb3-ppo"],
    # issue 31 b): the ACE family with the current default (separate actor layers), against
    # DDPG's two presets (--env HalfCheetah-v5 / Hopper-v5, 100k steps)
    "ace-separate": ["ace", "ace-alt", "tm-ace", "ensemble-ddpg", "ddpg", "ddpg-fast"],
    # issue 30's learning checks with 2 remote collectors, one entry per env: ddpg-c2
    # (--env Pendulum-v1 --steps 20000), aql-c2 (CartPole-v1, 100000), acer-c2 (CartPole-v1,
    # 300000), vracer-c2 (InvertedPendulum-v5, 100000)
    "distributed": ["ddpg-c2", "aql-c2", "acer-c2", "vracer-c2"],
    # issue 72 (8): our DQN with its defaults (SB3's) against SB3's DQN with its own, and our
    # classic-control preset (--preset classic: the rl-zoo's tuned Acrobot-v1 setting),
    # --env Acrobot-v1 --steps 100000, seeds 0-4 (docs/algorithms/dqn.md, Results)
    "dqn-acrobot": ["dqn", "sb3-dqn", "dqn-classic"],
}

# train.csv diagnostics plotted (log scale) and averaged per entry for these suites
SUITE_METRICS = {"refer": ["kl_mu_pi", "far_policy_fraction"],
                 "refer-1m": ["kl_mu_pi", "far_policy_fraction", "beta"],
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
                    ("ddpg-parity", "Hopper-v5"): 1000.0,
                    # Gymnasium's reward_threshold for Acrobot-v1
                    ("dqn-acrobot", "Acrobot-v1"): -100.0}


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
    "td3-sb3": ("td3", ["--preset", "sb3"]),
    # our TD3 as --preset sb3 ran before it started updates at step 101 (SB3's learning_starts)
    "td3-sb3-wait": ("td3", ["--preset", "sb3", "--wait-for-batch"]),
    "sac-sb3": ("sac", ["--preset", "sb3"]),
    # the sb3 preset as it ran before its warm-up acted uniformly (and with SB3's log-det eps)
    "sac-sb3-policy": ("sac", ["--preset", "sb3", "--warmup-actions", "policy"]),
    "sac-sb3-eps": ("sac", ["--preset", "sb3", "--warmup-actions", "policy",
                            "--sac.log-det-eps", "1e-6"]),
    "sac-sb3-uniform": ("sac", ["--preset", "sb3", "--warmup-actions", "uniform"]),
    # our TD3 with SB3's settings and SBX's initial law (Flax's Dense default), its target
    # cadence (after every critic update), its actor loss (the smaller twin), or all three
    "td3-sb3-flaxinit": ("td3", ["--preset", "sb3", "--td3.init", "flax"]),
    "td3-sb3-sbxtarget": ("td3", ["--preset", "sb3", "--td3.target-every-update"]),
    "td3-sb3-minq": ("td3", ["--preset", "sb3", "--td3.actor-min-q"]),
    "td3-sb3-sbx": ("td3", ["--preset", "sb3", "--td3.init", "flax",
                            "--td3.target-every-update", "--td3.actor-min-q"]),
    "ddpg-input1": ("ddpg", ["--ddpg.action-input-layer", "1"]),
    "ddpg-torch-init": ("ddpg", ["--ddpg.init", "torch"]),
    "ddpg-gaussian": ("ddpg", ["--ddpg.noise", "gaussian"]),
    "ddpg-fast": ("ddpg", ["--preset", "fast"]),
    "dqn-classic": ("dqn", ["--preset", "classic"]),
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
    # the ReF-ER paper's own DDPG (App. A-B: learning rates 1e-5 / 1e-4, L2, batch 128, gamma
    # 0.995, tau 0.01, 128-128 softsign, states and rewards scaled) with ReF-ER, and as its ER
    # baseline with OU noise (refer.md decision 7): does ReF-ER's gain need the paper's slower
    # learning rates? (issue 31 a's "find out why")
    "ddpg-refer-appa": ("ddpg", ["--preset", "refer"]),
    "ddpg-refer-farpol": ("ddpg", ["--replay", "refer", "--refer-forget", "far-policy"]),
    # issue 68: the paper's DDPG with every choice it leaves open taken from the authors' code
    # (docs/algorithms/refer.md, fidelity table), with ReF-ER and with plain ER
    "ddpg-refer-smarties": ("ddpg", ["--preset", "smarties", "--replay", "refer"]),
    "ddpg-er-smarties": ("ddpg", ["--preset", "smarties", "--replay", "er",
                                  "--replay-diagnostics"]),
    "vracer-refer1": ("vracer", ["--replay", "refer1"]),
    "vracer-refer2": ("vracer", ["--replay", "refer2"]),
    "naf-er": ("naf", ["--replay", "er", "--replay-diagnostics"]),
    "ddpg-er-appa": ("ddpg", ["--preset", "refer", "--replay", "er", "--ddpg.noise", "ou",
                              "--replay-diagnostics"]),
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


# final-return comparisons the report tests (entry, against): Welch's t-test and its interval
# of the difference of means (issue 20: is the gap to SB3 real?)
SUITE_COMPARISONS = {
    "ddpg-peers": [("ddpg", "sb3-ddpg"), ("ddpg", "sbx-ddpg"), ("ddpg-lr1e-3", "sb3-ddpg")],
    "baselines-peers": [("td3-sb3", "sb3-td3"), ("td3-sb3", "sbx-td3"), ("sac-sb3", "sb3-sac"),
                        ("sac-sb3", "sbx-sac"), ("sac-sb3-policy", "sb3-sac"),
                        ("sac-sb3", "sac-sb3-policy", "paired")],
    "ddpg-parity": [("ddpg", "sb3-ddpg"), ("ddpg-sb3", "sb3-ddpg"), ("ddpg-input1", "sb3-ddpg"),
                    ("ddpg", "sbx-ddpg"), ("ddpg-sb3", "sbx-ddpg"), ("ddpg-input1", "sbx-ddpg"),
                    ("ddpg-input1", "ddpg"), ("ddpg-torch-init", "ddpg"),
                    ("ddpg-lr1e-3", "ddpg"), ("ddpg-gaussian", "ddpg"),
                    # what SB3's learning rate and init cost on top of the action at the input
                    ("ddpg-sb3", "ddpg-input1"), ("sbx-ddpg", "sb3-ddpg")],
    # "paired": the runs of one seed share their initial draw (SB3's, or ours) or, in one
    # loop, the env and noise streams, or both: also tested paired by seed
    "td3-loop-ablation": [("sb3-td3-ourupdate", "sb3-td3", "paired"),
                          ("sb3-td3-ourupdate", "td3-sb3-wait"),
                          ("sb3-td3-ourupdate-ourinit", "sb3-td3-ourupdate", "paired"),
                          ("sb3-td3-ourupdate-ourinit", "td3-sb3-wait", "paired"),
                          ("sb3-td3-ourinit", "sb3-td3", "paired"),
                          ("sb3-td3-ourupdate-ourinit", "sb3-td3-ourinit", "paired"),
                          ("td3-sb3-wait", "sb3-td3"),
                          ("td3-sb3", "td3-sb3-wait", "paired"), ("td3-sb3", "sb3-td3"),
                          # the two libraries' TD3 from the same (our) initial draws
                          ("td3-sb3", "sb3-td3-ourinit", "paired")],
    # runs in one loop (ours, or SBX's): the same seed's share the env and noise streams (paired)
    "td3-sbx-ablation": [("td3-sb3-sbx", "sbx-td3"), ("td3-sb3-sbx", "td3-sb3", "paired"),
                         ("td3-sb3-flaxinit", "td3-sb3", "paired"),
                         ("td3-sb3-sbxtarget", "td3-sb3", "paired"),
                         ("td3-sb3-minq", "td3-sb3", "paired"),
                         ("td3-sb3", "sbx-td3"), ("sbx-td3", "sb3-td3"),
                         # SBX's loop and update with SB3's choices: as SBX, or as SB3?
                         ("sbx-td3-sb3", "sbx-td3", "paired"), ("sbx-td3-sb3", "sb3-td3")],
    "sac-init-ablation": [("sac-sb3-policy", "sb3-sac"),
                          ("sb3-sac-ourinit", "sb3-sac", "paired"),
                          ("sac-sb3-policy", "sb3-sac-ourinit", "paired")],
    # sac-sb3-eps, -policy and -uniform share our draw and loop, ourupdate and sb3-sac SB3's
    "sac-ablation": [("sac-sb3-policy", "sb3-sac"),
                     ("sac-sb3-eps", "sac-sb3-policy", "paired"),
                     ("sac-sb3-eps", "sb3-sac"), ("sb3-sac-ourupdate", "sb3-sac", "paired"),
                     ("sac-sb3-policy", "sb3-sac-ourupdate"),
                     ("sac-sb3-uniform", "sac-sb3-policy", "paired"),
                     ("sac-sb3-uniform", "sb3-sac")],
    # the first seven pairs are issue 68's pre-registered primary comparisons (13 over its two
    # tasks: NAF runs on HalfCheetah-v5 only; DECISIONS states them), the next three its
    # secondary ones; the rest came before it (issue 31 a)
    "refer-1m": [("ddpg-refer-smarties", "ddpg-er-smarties"), ("ddpg-refer", "ddpg-er"),
                 ("vracer", "vracer-er"), ("vracer", "vracer-refer1"),
                 ("vracer", "vracer-refer2"), ("vracer", "sb3-ppo"), ("naf-refer", "naf-er"),
                 ("ddpg-refer-smarties", "ddpg-refer-appa"),
                 ("ddpg-refer-smarties", "ddpg-refer"), ("ddpg-er-smarties", "ddpg-er"),
                 ("vracer", "ddpg-er"),
                 ("ddpg-refer-appa", "ddpg-er-appa"), ("ddpg-refer-appa", "ddpg-refer"),
                 ("ddpg-er-appa", "ddpg-er"), ("ddpg-refer-farpol", "ddpg-refer", "paired"),
                 ("ddpg-refer-farpol", "ddpg-er")],
    "dqn-acrobot": [("dqn", "sb3-dqn"), ("dqn-classic", "sb3-dqn"), ("dqn-classic", "dqn")],
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


PEER_PREFIXES = ("sb3-", "sbx-", "pfrl-")  # entries run by a peer library's script
# peer entries with flags of benchmarks/peers.py (name -> library, algorithm, flags)
PEER_VARIANTS = {
    "sb3-td3-ourupdate": ("sb3", "td3", ("--update", "ours")),
    "sb3-td3-ourupdate-ourinit": ("sb3", "td3", ("--update", "ours", "--init", "ours")),
    "sb3-td3-ourinit": ("sb3", "td3", ("--init", "ours")),
    "sb3-sac-ourinit": ("sb3", "sac", ("--init", "ours")),
    "sb3-sac-ourupdate": ("sb3", "sac", ("--update", "ours")),
    "sbx-td3-sb3": ("sbx", "td3", ("--variant", "sb3")),
}


def is_peer(entry: str) -> bool:
    return entry.startswith(PEER_PREFIXES)


def entry_of(name: str) -> Entry:
    """A grid's entry: one of our algorithms with its flags, or a peer library's script."""
    if name.startswith("pfrl-"):
        return Entry(name, "acer", peer="pfrl", note="benchmarks/peers_pfrl.py (PFRL 0.4.0)")
    if name in PEER_VARIANTS:
        lib, algo, flags = PEER_VARIANTS[name]
        return Entry(name, algo, flags, peer=lib, note=" ".join(
            ["benchmarks/peers.py --lib", lib, "--algo", algo, *flags]))
    if name.startswith(("sb3-", "sbx-")):
        algo = name[4:]  # sb3-td3 -> td3
        return Entry(name, algo, peer=name[:3],
                     note=f"benchmarks/peers.py --lib {name[:3]} --algo {algo}")
    algo, flags = VARIANTS.get(name, (name, []))
    return Entry(name, algo, tuple(flags))


# a grid's pre-registration (arms, tasks, seeds, budget, statistic, verdict rule), committed
# before its runs started: it opens the grid's report
PREREGISTRATION = {"refer-1m": HERE / "suites" / "refer-1m.preregistration.md"}


# a grid's pre-registered claims and the tasks they are decided on: after each run the verdicts
# over every task's finished runs are written to learning_<suite>_verdicts.md (Holm's
# adjustment runs over all tasks' primary comparisons, so the tasks' grids are read together)
_REFER_TASKS = ("HalfCheetah-v5", "Ant-v5")
DECISIONS = {
    "refer-1m": (Decision((
        Claim("C1 (authors' preset)", "ddpg-refer-smarties", "ddpg-er-smarties", _REFER_TASKS),
        Claim("C1 (library defaults)", "ddpg-refer", "ddpg-er", _REFER_TASKS),
        Claim("C2", "vracer", "vracer-er", _REFER_TASKS),
        Claim("C3 (vs Rule 1 only)", "vracer", "vracer-refer1", _REFER_TASKS),
        Claim("C3 (vs Rule 2 only)", "vracer", "vracer-refer2", _REFER_TASKS),
        Claim("C4", "naf-refer", "naf-er", ("HalfCheetah-v5",), seeds=(0, 1, 2)),
        Claim("C5", "vracer", "sb3-ppo", _REFER_TASKS),
        Claim("rules", "ddpg-refer-smarties", "ddpg-refer-appa", _REFER_TASKS, primary=False),
        Claim("defaults", "ddpg-refer-smarties", "ddpg-refer", _REFER_TASKS, primary=False),
        Claim("defaults", "ddpg-er-smarties", "ddpg-er", _REFER_TASKS, primary=False)),
        window=200_000), _REFER_TASKS),
}


def bench_suite(suite: str, env: str, steps: int, seeds, entries=None,
                eval_every: int = 10_000) -> Suite:
    """The grid ``suite`` on ``env`` as an ``offpolicy.suites.Suite``."""
    names = list(entries or SUITES[suite])
    prereg = PREREGISTRATION.get(suite)
    return Suite(suite, None, prereg.read_text().strip() if prereg else "", "", "",
                 (EnvPlan(env, steps, eval_every, tuple(names),
                          SUITE_THRESHOLDS.get((suite, env))),),
                 tuple(seeds), 20, tuple(SUITE_FLAGS.get(suite, ())),
                 {n: entry_of(n) for n in SUITES[suite]},
                 tuple(p[:2] for p in SUITE_COMPARISONS.get(suite, ())),
                 tuple(SUITE_METRICS.get(suite, ())),
                 paired=tuple(p[:2] for p in SUITE_COMPARISONS.get(suite, ())
                              if p[2:] == ("paired",)),
                 decision=DECISIONS[suite][0] if suite in DECISIONS else None)


def peer_command(peers_python: str):
    """The command of a peer run (an SB3/SBX or PFRL script in the bench venv)."""

    def command(run: runner.RunSpec) -> list[str]:
        common = ["--env", run.env, "--steps", str(run.steps), "--seed", str(run.seed),
                  "--run-dir", str(run.run_dir), "--eval-every", str(run.eval_every),
                  "--eval-episodes", str(run.eval_episodes)]
        if run.entry.peer == "pfrl":
            return [peers_python, str(HERE / "peers_pfrl.py"), "learn", *common]
        # DDPG: the ACE protocol's one batch of random steps; TD3 and SAC: SB3's 100; PPO has
        # no warm-up (peers.py refuses one)
        warmup = {"ddpg": ["--warmup", "64"], "ppo": []}.get(run.entry.algo,
                                                            ["--warmup", "100"])
        return [peers_python, str(HERE / "peers.py"), "learn", "--lib", run.entry.peer,
                "--algo", run.entry.algo, *run.entry.flags, *common, *warmup]

    return command


# flags with values that say what one driver does or where this machine keeps files, not what
# the grid is: a report's command leaves them out, so that it reruns on any clone (the runs in
# benchmarks/runs, the finished ones restored from the committed CSVs in benchmarks/results)
LOCAL_FLAGS = ("--entries", "--runs-root", "--out-dir", "--peers-python")


def canonical_args(argv: list[str]) -> list[str]:
    """``argv`` without the flags that choose what one driver does rather than the grid:
    --report-only, --include-running, and :data:`LOCAL_FLAGS` with their values."""
    out, skipping = [], False
    for x in argv:
        if x.startswith(tuple(f + "=" for f in LOCAL_FLAGS)):
            continue
        if x.startswith("--"):
            skipping = x in LOCAL_FLAGS
            if skipping or x in ("--report-only", "--include-running"):
                continue
        elif skipping:
            continue
        out.append(x)
    return out


def grid_name(suite: str, env: str) -> str:
    """One grid per (suite, env): HalfCheetah-v5 keeps the suite's plain name."""
    return suite if env == "HalfCheetah-v5" else f"{suite}_{env.replace('/', '_')}"


def write_verdicts(suite: str, steps: int, seeds, eval_every: int, runs_root: Path,
                   out_dir: Path, command: str) -> Path | None:
    """``learning_<suite>_verdicts.md``: the grid's pre-registration, then the verdicts of its
    claims over the finished runs of every task (runs here, or restored from the committed
    CSVs); None for a grid without a decision."""
    if suite not in DECISIONS:
        return None
    from offpolicy.suites.report import collect
    from offpolicy.suites.verdict import decision_section

    decision, tasks = DECISIONS[suite]
    groups_by_env, steps_by_env = {}, {}
    for env in tasks:
        name = grid_name(suite, env)
        grid = runner.plan(bench_suite(suite, env, steps, seeds, None, eval_every),
                           lambda e, entry, seed, name=name: runs_root / name / entry / f"s{seed}")
        restore_finished(grid, out_dir, f"learning_{name}")
        done = {r.run_dir for r in grid if runner.finished(r.run_dir, r.steps)}
        groups_by_env[env] = {entry: [d for d in dirs if d in done]
                              for entry, dirs in collect(grid).get(env, {}).items()}
        steps_by_env[env] = steps
    prereg = PREREGISTRATION.get(suite)
    text = "\n".join([f"# Verdicts: {suite} ({', '.join(tasks)})", "",
                      f"Command (each task's grid, `--env` one of {', '.join(tasks)}): "
                      f"`{command}`", "", prereg.read_text().strip() if prereg else ""])
    text += "\n" + decision_section(decision, groups_by_env, steps_by_env, tuple(seeds))
    path = out_dir / f"learning_{suite}_verdicts.md"
    path.write_text(text)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=list(SUITES), required=True)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--entries", nargs="+", help="a subset of the suite's entries")
    p.add_argument("--eval-every", type=int, default=10_000,
                   help="env steps between evaluations (the ACE protocol: 10 000)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument("--runs-root", type=Path, default=HERE / "runs")
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    p.add_argument("--peers-python", default=os.environ.get(
        "OFFPOLICY_BENCH_PYTHON", str(HERE.parent / ".venv-bench" / "bin" / "python")))
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--include-running", action="store_true",
                   help="with --report-only: runs in progress join the tables, tests and curves "
                        "(written as learning_<suite>_partial.*)")
    a = p.parse_args()
    unknown = [e for e in a.entries or [] if e not in SUITES[a.suite]]
    if unknown:
        p.error(f"not in suite {a.suite}: {', '.join(unknown)} "
                f"(its entries: {', '.join(SUITES[a.suite])})")
    suite = bench_suite(a.suite, a.env, a.steps, a.seeds, a.entries, a.eval_every)
    name = grid_name(a.suite, a.env)
    root = a.runs_root / name

    def layout(env, entry, seed):
        return root / entry / f"s{seed}"

    runs = runner.plan(suite, layout)
    # the report covers the whole grid: with --entries, the other entries' finished runs
    # (another driver's, or restored from the committed CSVs) keep their rows
    full = bench_suite(a.suite, a.env, a.steps, a.seeds, None, a.eval_every)
    grid = runner.plan(full, layout) if a.entries else runs
    a.out_dir.mkdir(parents=True, exist_ok=True)
    # the command that runs the grid (without --entries, which picks what this driver runs):
    # --report-only redraws a report under its canonical command after several drivers
    # shared the runs
    command = "python benchmarks/learning.py " + " ".join(canonical_args(sys.argv[1:]))
    stem, title = f"learning_{name}", f"Learning benchmark: {a.suite} on {a.env}"
    restored = restore_finished(grid, a.out_dir, stem)
    if restored:
        print(f"restored from {a.out_dir}: {', '.join(restored)}", file=sys.stderr)

    def after_each(run: runner.RunSpec) -> None:
        lines = runner.start_lines(run.log_path)  # "[date time] command", one per start
        with open(a.out_dir / f"{stem}.log", "a") as log:
            print(lines[-1] if lines else f"[{time.strftime('%H:%M:%S')}] {run.label}",
                  file=log)
        write_report(full, grid, a.out_dir, stem, command, title=title, verdicts=False)
        write_verdicts(a.suite, a.steps, a.seeds, a.eval_every, a.runs_root, a.out_dir,
                       verdicts_command)

    # the verdicts' command names no --env: each task's grid runs with its own
    verdicts_command = " ".join(x for x in command.split() if x not in ("--env", a.env))
    if not a.report_only:
        outcome = runner.run_local(runs, a.jobs, peer_command(a.peers_python),
                                   after_each=after_each)
        for run, why in outcome.failed:
            print(f"failed: {run.label}: {why}", file=sys.stderr)
        if outcome.stopped or outcome.failed:
            if not outcome.stopped:
                write_report(full, grid, a.out_dir, stem, command, title=title, verdicts=False)
            return outcome.exit_code()
    if a.include_running:
        stem, title = stem + "_partial", title + " (runs in progress included)"
    print(write_report(full, grid, a.out_dir, stem, command, title=title,
                       include_running=a.include_running, verdicts=False))
    if not a.include_running:
        verdicts = write_verdicts(a.suite, a.steps, a.seeds, a.eval_every, a.runs_root,
                                  a.out_dir, verdicts_command)
        if verdicts:
            print(f"verdicts: {verdicts}", file=sys.stderr)
    print(json.dumps({"runs_root": str(root)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
