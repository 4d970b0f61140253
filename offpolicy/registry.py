"""Algorithm name -> config section, overrides, presets, supported action kinds, agent builder."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from offpolicy import config as C
from offpolicy.errors import OffpolicyError, did_you_mean


@dataclass(frozen=True)
class Algorithm:
    name: str
    section: str  # config section and CLI flag prefix, e.g. "ddpg" -> --ddpg.actor-lr
    config_cls: type
    builder: str  # "module:Class" of the agent, imported lazily
    action_kinds: tuple[str, ...]
    description: str
    overrides: dict[str, Any] = field(default_factory=dict)
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    replays: tuple[str, ...] = ("er",)  # the --replay choices the agent implements
    train_overrides: dict[str, Any] = field(default_factory=dict)  # its own loop defaults
    # env id -> the preset a new run on that env gets when nothing names one (--preset none
    # opts out): for envs outside the paper whose defaults would not fit a CPU budget
    env_presets: dict[str, str] = field(default_factory=dict)

    def preset_fields(self, preset: str | None) -> tuple[set[str], set[str]]:
        """(training fields, algorithm fields) a preset sets (a preset's ``train`` entry
        holds loop fields, the rest are the algorithm section's)."""
        values = dict(self.presets.get(preset, {})) if preset else {}
        return set(values.pop("train", {})), set(values)


_ALL_REPLAYS = ("er", "per", "refer", "refer1", "refer2")
NO_PRESET = "none"  # --preset none: the algorithm's defaults, no env default either

REFER_MEMORY_MAX = 2**18  # the ReF-ER paper's N (App. A)
REFER_MEMORY_MIN = 10_000
MUJOCO_EPISODE = 1_000  # Gymnasium's MuJoCo time limit
# the agents whose refer* memory defaults to half the run: a deterministic mean with fixed
# exploration (DDPG and its variants, NAF). V-RACER keeps 1e6: with half the run, one of three
# InvertedPendulum-v5 seeds collapsed at 100k once its memory held only balanced episodes
REFER_HALF_MEMORY = frozenset({"ddpg", "naf"})


# training fields config.yaml gained after runs were saved without them, and whose value a
# preset changed since, with the value those runs had: a saved config that lacks one loads
# with it, whatever the preset sets today. Before --warmup-actions a stochastic policy's
# warm-up sampled it (auto; SAC's sb3 preset now acts uniformly, as SB3 does); before
# --wait-for-batch updates waited for a full batch (TD3's and SAC's sb3 presets now start at
# step 101, as SB3 does)
SAVED_BEFORE: dict[str, Any] = {"warmup_actions": "auto", "wait_for_batch": True}


def refer_memory(steps: int, num_envs: int = 1) -> int:
    """The default memory of DDPG and NAF under ``--replay refer*`` when no flag, preset or
    file sets ``--buffer-size``: half the run, within [10 000, 2^18], and at least one
    1000-step episode per env copy (episodes leave the memory whole, Alg. 1).

    ReF-ER forgets (Alg. 1: whole episodes leave first in, first out) and Rule 2 (Eq. 12)
    keeps a fraction D of the *memory* far-policy. A memory that holds the whole run keeps
    the policy near its first behaviours; the paper's 2^18 memory holds a few percent of a
    1e6-1e7-step run. Half of a 20k-100k-step run lets the memory turn over once while it
    still holds enough episodes; the floor keeps 50 Pendulum or 10 MuJoCo episodes (refer.md,
    decision 9)."""
    return int(max(min(REFER_MEMORY_MAX, max(REFER_MEMORY_MIN, steps // 2)),
                   num_envs * (MUJOCO_EPISODE + 1)))


# ReF-ER paper App. A-B: 128-128 softsign MLPs, its initialisation, memory 2^18, states and
# rewards scaled by replay's contents
_REFER_COMMON = {"hidden": (128, 128), "activation": "softsign", "init": "refer"}
_REFER_TRAIN = {"buffer_size": REFER_MEMORY_MAX, "replay_statistics": True}
_DDPG_PRESETS = {
    "paper": {},  # the ACE paper's DDPG: tanh, no L2
    "lillicrap": {"activation": "relu", "critic_l2": 1e-2, "init": "lillicrap"},  # DDPG paper
    # SB3's DDPG choices on the ACE paper's setting (400-300 tanh, batch 64, tau 1e-3, OU):
    # the action at the critic's input, PyTorch's initialisation, one learning rate 1e-3
    "sb3": {"action_input_layer": 1, "init": "torch", "actor_lr": 1e-3, "critic_lr": 1e-3},
    # the paper's DDPG with the action at the critic's input: the one choice of the parity
    # ablation that changed learning (HalfCheetah-v5 at 100k steps, 10 seeds: 2220 against
    # 1057; level with SB3 on Hopper-v5, where paper is ahead; docs/algorithms/ddpg.md,
    # "Parity with SB3")
    "fast": {"action_input_layer": 1},
    # ReF-ER paper App. A (DDPG): critic lr 1e-4 with L2 1e-4, actor 1e-5, batch 128,
    # gamma 0.995, tau 0.01, Gaussian exploration sigma 0.2, ReF-ER replay
    "refer": {**_REFER_COMMON, "critic_lr": 1e-4, "critic_l2": 1e-4, "actor_lr": 1e-5,
              "gamma": 0.995, "tau": 0.01, "noise": "gaussian", "noise_sigma": 0.2,
              "train": {**_REFER_TRAIN, "batch_size": 128, "replay": "refer"}},
    # ReF-ER as its authors ran it (issue 68; docs/algorithms/refer.md, "Fidelity to the
    # authors' code"): App. A-B where the paper is explicit, the authors' smarties (edaef91,
    # the commit nearest ICML 2019) where it is silent or ambiguous: beta from 0 by a fixed
    # 1e-4 (Learner_offPolicy.h/.cpp), a 2^18-step warm-up with the initial policy before the
    # first update (minTotObsNum; App. B's statistics come from it), the action at the
    # critic's input and biases drawn as the weights (its MLPs), L2 as 1/2 1e-4 ||theta||^2
    # on every critic parameter (its Adam), both gradients from the pre-update networks (Alg.
    # 4), samples truncated at 3 std (App. A), and App. A's OU for the ER baseline with the
    # code's time step (an AR(1) of decay 0.85 = 1 - theta)
    "smarties": {**_REFER_COMMON, "init": "smarties", "critic_lr": 1e-4, "critic_l2": 5e-5,
                 "critic_l2_biases": True, "actor_lr": 1e-5, "gamma": 0.995, "tau": 0.01,
                 "noise": "ou", "noise_sigma": 0.2, "noise_theta": 0.15, "noise_dt": 1.0,
                 "action_input_layer": 1, "simultaneous_update": True,
                 "refer_truncation": 3.0,
                 "train": {**_REFER_TRAIN, "batch_size": 128, "replay": "refer",
                           "refer_beta0": 0.0, "refer_beta_step": 1e-4,
                           "warmup_steps": REFER_MEMORY_MAX, "warmup_actions": "policy"}},
    # the AQL paper's D3PG baseline (Sec. 5, App. A2): distributed DDPG with 100 collectors,
    # OU exploration (theta 0.15, sigma 0.2), Adam 2e-4 for actor and critic, batch 32,
    # gamma 0.99 (D4PG without the distributional critic, as Barth-Maron et al. define D3PG)
    "d3pg": {"noise": "ou", "noise_theta": 0.15, "noise_sigma": 0.2, "actor_lr": 2e-4,
             "critic_lr": 2e-4, "gamma": 0.99, "train": {"num_collectors": 100,
                                                         "batch_size": 32}},
}
# ReF-ER Sec. 5.4 (the partially observed flow): "we only substitute the MLPs used for function
# approximation with LSTM networks (2 layers of 32 cells with back-propagation window of 16
# steps)", every output from a zero state over the last 16 steps (the authors' smarties); the
# layers after the core are cut to 32 units (DDPG keeps two, so that the action still enters
# the critic below its output layer)
_LSTM = {"core": "lstm", "core_layers": 2, "core_cells": 32, "core_start": "zero",
         "core_window": 16}
_DDPG_PRESETS["lstm"] = {**_DDPG_PRESETS["refer"], **_LSTM, "hidden": (32, 32)}
# V-RACER: the paper's network and App. B scaling by default; "paper" adds its 2^18 memory
# (the default 1e6 keeps every step of a 20k-100k run; learning starts at one batch)
_ONE_NET_PRESETS = {"paper": {"train": {"buffer_size": REFER_MEMORY_MAX}},
                    "lstm": {**_LSTM, "hidden": (32,)}}
_NAF_PRESETS = {"paper": {"lr": 1e-4, "activation": "softsign", "tau": 0.01,
                          "train": {"buffer_size": REFER_MEMORY_MAX}}}
_NAF_PRESETS["lstm"] = {**_NAF_PRESETS["paper"], **_LSTM, "hidden": (32,)}
_ACE_PRESETS = {"paper": {}, "n10-d1": {"num_actors": 10}, "n5-d2": {"plan_depth": 2}}
_CONT = ("continuous",)
_ALL_KINDS = ("continuous", "discrete", "multi_discrete", "hybrid")
_DISCRETE_KINDS = ("discrete", "multi_discrete", "hybrid")
# AQL (App. A2): unrolls of 30 steps, 32 per batch; one update per 16 env steps (two unrolls
# sampled per env step, each step learned from about 60 times: CartPole-v1 and Pendulum-v1
# --discretize 5 learn in 100k / 50k steps; one unroll per step left CartPole at 472, one per 4
# steps left Pendulum at -922). The paper's learner sees each step about 3 times (an actor
# sends its fresh unroll and 2 replayed ones: 0.1 unrolls per env step): --preset paper.
# Rewards scaled by the return's running std: the paper's learning rate is for the Control
# Suite's rewards in [0, 1] (Pendulum-v1's -16..0 left Q's action dependence unlearned at 50k)
_AQL_TRAIN = {"batch_size": 32, "updates_per_step": 1 / 16, "normalize_reward": True}


def _aql(name: str, search: str, kinds: tuple[str, ...], description: str) -> Algorithm:
    """AQL and its baselines: one agent, the argmax found by ``search``."""
    return Algorithm(name, "aql", C.AQLConfig, "offpolicy.agents.aql:AQL", kinds, description,
                     overrides={"search": search}, presets=_AQL_PRESETS,
                     train_overrides=_AQL_TRAIN, env_presets=_AQL_ENV_PRESETS)


# "paper": the paper's sizes (the defaults) with its learner's replay ratio, 0.1 unrolls per env
# step (each step learned about 3 times: cheap enough for big action spaces, slow to learn);
# "small": quick runs on a CPU, the learning-time search 5x smaller (N 20, M 80), 16 unrolls
# per update every 8 env steps (CartPole-v1 reaches 500 in about 40k steps, 2 minutes here)
# "lstm": App. A1's recurrent core ("a recurrent LSTM core with 256 cells" ends the shared
# state embedding on DeepMind Lab), trained as R2D2 (cited as the kin of the exact-Q ablation):
# windows start from the state recorded while acting, 40 steps of burn-in
_AQL_PRESETS = {"paper": {"train": {"updates_per_step": 0.1 / 32}},
                "small": {"hidden": (64, 64), "proposal_hidden": (64,),
                          "proposal_samples": 20, "uniform_samples": 80,
                          "train": {"batch_size": 16, "updates_per_step": 0.125}},
                "lstm": {"core": "lstm", "core_layers": 1, "core_cells": 256,
                         "core_start": "stored", "core_burn_in": 40},
                # App. A1-A2's distributed system: 100 collectors, each with its own FIFO
                # replay of 10^5 steps, sending every unroll of 30 steps with 2 sampled ones;
                # the learner learns from batches of 32 unrolls as they arrive
                "paper-distributed": {"train": {
                    "num_collectors": 100, "collector_replay": True,
                    "collector_buffer_size": 100_000, "collector_replay_unrolls": 2,
                    "collect_steps": 30, "batch_size": 32}}}
# Platform (hybrid actions; not one of the paper's tasks, 9 state features): the Control Suite
# sizes cost about 2.5 s per update on one core here, some 9 hours per 200k-step run, and its
# literature (P-DQN, MP-DQN) uses small networks; --preset small solves it in 3 of 3 seeds
# (docs/algorithms/aql.md, "Platform")
_AQL_ENV_PRESETS = {"offpolicy/Platform-v0": "small"}
# the Atari presets' memories hold 0.8-1M frames (5.3-6.6 GiB): a checkpoint writes all of it
# (about 20 s at 300 MiB/s, this machine's disk: 2 ms per env step if written every 10 000)
ATARI_CHECKPOINT_EVERY = 100_000
# ACER (Wang et al. 2017): Algorithm 1's cadence over K env copies, k-step windows; the
# papers' setups: Atari (Sec. 4: k 20, c 10, alpha 0.99, 16 threads with 50 000-frame memories,
# rewards clipped to [-1, 1] as in DQN and A3C) and MuJoCo (Sec. 6: k 50, c 5, alpha 0.995,
# replay only, 5 000-frame memories per thread)
_ACER_TRAIN = {"segment_length": 20, "replay_ratio": 4.0, "num_envs": 4, "batch_size": 16,
               "buffer_size": 100_000}
_ACER_PRESETS = {
    "paper-atari": {"torso": "cnn", "truncation": 10.0, "average_decay": 0.99,
                    "entropy_weight": 1e-3, "trust_region_delta": 1.0,
                    "train": {"segment_length": 20, "replay_ratio": 4.0, "num_envs": 16,
                              "batch_size": 16, "buffer_size": 800_000, "clip_reward": 1.0,
                              "checkpoint_every": ATARI_CHECKPOINT_EVERY}},
    "paper-mujoco": {"truncation": 5.0, "average_decay": 0.995, "policy_std": 0.3,
                     "learn_std": False, "on_policy_update": False,
                     "train": {"segment_length": 50, "replay_ratio": 4.0, "num_envs": 16,
                               "batch_size": 16, "buffer_size": 80_000}},
}

# TD3 (Fujimoto et al. 2018, Sec. 6.1): batch 100 and 1000 random steps first ("10000 for
# HalfCheetah-v1 and Ant-v1"); "sb3": SB3's TD3 defaults (batch 256, 100 random steps and
# updates from step 101, before replay holds a batch, as SB3's learning_starts; the same 400-300
# networks and learning rate; PyTorch's initialisation is the default here too)
_TD3_TRAIN = {"batch_size": 100, "warmup_steps": 1000}
_SB3_START = {"warmup_steps": 100, "wait_for_batch": False}
_TD3_PRESETS = {"paper": {}, "sb3": {"train": {"batch_size": 256, **_SB3_START}}}
# SAC (Haarnoja et al. 2018b, Table 1): batch 256, one update per env step; "sb3": SB3's SAC
# (PyTorch's initialisation, 100 warm-up steps of uniformly random actions, updates from step
# 101). Under ReF-ER or --replay-diagnostics its warm-up samples the initial policy instead
# (replay records the behaviour density, which uniform actions lack: resolve)
_SAC_TRAIN = {"batch_size": 256}
_SAC_PRESETS = {"paper": {}, "sb3": {"init": "torch",
                                     "train": {**_SB3_START, "warmup_actions": "uniform"}}}
# DQN: SB3's defaults (batch 32, one update per 4 env steps, 100 steps before learning, target
# copied every 10 000 env steps = 2 500 updates); "paper": the Nature paper's Atari setting
# (Extended Data Table 1: RMSProp 2.5e-4, replay 1M, target every 10 000 updates, epsilon 1 ->
# 0.1 over 1M frames = 250k agent steps with the frame skip 4, 50 000 random steps first,
# rewards clipped); "zoo-cartpole": the rl-zoo's tuned CartPole-v1 setting (lr 2.3e-3, batch
# 64, 256-256, 1000 steps first, epsilon to 0.04 over 8 000 steps; its 128 gradient steps per
# 256 env steps become 0.5 updates per step, the target refreshed every 128 updates)
_DQN_TRAIN = {"batch_size": 32, "updates_per_step": 0.25, "warmup_steps": 100}
_DQN_PRESETS = {
    "sb3": {},
    "paper": {"lr": 2.5e-4, "optimizer": "rmsprop", "torso": "cnn", "target_update_every":
              10_000, "epsilon_end": 0.1, "epsilon_decay_steps": 250_000,
              "train": {"batch_size": 32, "updates_per_step": 0.25, "warmup_steps": 50_000,
                        "buffer_size": 1_000_000, "clip_reward": 1.0,
                        "checkpoint_every": ATARI_CHECKPOINT_EVERY}},
    "zoo-cartpole": {"lr": 2.3e-3, "hidden": (256, 256), "target_update_every": 128,
                     "epsilon_end": 0.04, "epsilon_decay_steps": 8_000,
                     "train": {"batch_size": 64, "updates_per_step": 0.5, "warmup_steps": 1000,
                               "buffer_size": 100_000}},
}
# "cartpole": the zoo's setting made to stay solved for 100k steps: Double DQN and the target
# copied every 500 updates (1 000 env steps) instead of 128. Probed on seeds 0-2 at 100k steps
# (final evaluation): the zoo's setting 184 / 124 / 105, with Double DQN 103 / 500 / 21, with
# Double DQN and the target every 500 updates 500 / 500 / 471 (lr 5e-4 or 1e-3 instead: one
# seed of three at 500); docs/algorithms/dqn.md
_DQN_PRESETS["cartpole"] = {**_DQN_PRESETS["zoo-cartpole"], "double": True,
                            "target_update_every": 500}
# "classic": the rl-zoo's tuned Acrobot-v1 setting, also its LunarLander one (lr 6.3e-4, batch
# 128, replay 50 000, 256-256, learning from the start: here from the first full batch,
# epsilon 1 -> 0.1 over 12 000 steps = 12% of its 100k, the target copied every 250 env steps);
# its 4 gradient steps every 4 env steps become one update per env step, so the target is
# copied every 250 updates. The defaults (SB3's) copy the target every 10 000 env steps, ten
# times in a 100k-step run, and Q-learning's horizon grows by one step per copy: on Acrobot-v1
# (about 80 steps to the goal) neither they nor SB3's own DQN learn in 100k steps.
# docs/algorithms/dqn.md
_DQN_PRESETS["classic"] = {"lr": 6.3e-4, "hidden": (256, 256), "target_update_every": 250,
                           "epsilon_end": 0.1, "epsilon_decay_steps": 12_000,
                           "train": {"batch_size": 128, "updates_per_step": 1.0,
                                     "warmup_steps": 0, "buffer_size": 50_000}}

ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in [
    Algorithm("ddpg", "ddpg", C.DDPGConfig, "offpolicy.agents.ddpg:DDPG", _CONT,
              "DDPG, actor and critic 400-300 (ACE paper baseline)", presets=_DDPG_PRESETS,
              replays=_ALL_REPLAYS),
    Algorithm("wide-ddpg", "ddpg", C.DDPGConfig, "offpolicy.agents.ddpg:DDPG", _CONT,
              "DDPG with 800-600 hidden units", overrides={"hidden": (800, 600)},
              presets=_DDPG_PRESETS, replays=_ALL_REPLAYS),
    Algorithm("shared-ddpg", "ddpg", C.DDPGConfig, "offpolicy.agents.ddpg:DDPG", _CONT,
              "DDPG whose actor and critic share a 400-unit first layer",
              overrides={"shared_encoder": True}, presets=_DDPG_PRESETS, replays=_ALL_REPLAYS),
    Algorithm("naf", "naf", C.NAFConfig, "offpolicy.agents.naf:NAF", _CONT,
              "NAF: quadratic advantage, one network (ReF-ER paper setup)",
              presets=_NAF_PRESETS, replays=_ALL_REPLAYS,
              train_overrides={"batch_size": 256, "replay_statistics": True}),
    Algorithm("vracer", "vracer", C.VRACERConfig, "offpolicy.agents.vracer:VRACER", _CONT,
              "V-RACER: off-policy PG with stored V^tbc targets, ReF-ER by default",
              presets=_ONE_NET_PRESETS, replays=_ALL_REPLAYS,
              train_overrides={"batch_size": 256, "replay": "refer", "replay_statistics": True}),
    Algorithm("acer", "acer", C.ACERConfig, "offpolicy.agents.acer:ACER",
              ("discrete", "continuous"),
              "ACER: Retrace, truncated IS with bias correction, efficient trust region, SDN",
              presets=_ACER_PRESETS, train_overrides=_ACER_TRAIN),
    Algorithm("td3", "td3", C.TD3Config, "offpolicy.agents.td3:TD3", _CONT,
              "TD3: twin critics, clipped double-Q, target smoothing, delayed actor updates",
              presets=_TD3_PRESETS, replays=("er", "per"), train_overrides=_TD3_TRAIN),
    Algorithm("sac", "sac", C.SACConfig, "offpolicy.agents.sac:SAC", _CONT,
              "SAC: twin soft Q, tanh-squashed Gaussian policy, learned temperature",
              presets=_SAC_PRESETS, replays=_ALL_REPLAYS, train_overrides=_SAC_TRAIN),
    Algorithm("dqn", "dqn", C.DQNConfig, "offpolicy.agents.dqn:DQN", ("discrete",),
              "DQN with Double DQN, dueling heads and n-step returns as options",
              presets=_DQN_PRESETS, replays=("er", "per"), train_overrides=_DQN_TRAIN),
    _aql("aql", "proposal", _ALL_KINDS,
         "Amortized Q-learning: argmax over N proposal + M uniform samples"),
    _aql("uniform-q", "uniform", _ALL_KINDS,
         "Q-learning with the argmax over M uniform samples (AQL's ablation)"),
    _aql("qt-opt", "cem", _ALL_KINDS,
         "Q-learning with the argmax by the cross-entropy method (QT-Opt)"),
    _aql("exact-q", "exact", _DISCRETE_KINDS,
         "Q-learning with the exact argmax over every action (small action sets)"),
    Algorithm("ensemble-ddpg", "ace", C.ACEConfig, "offpolicy.agents.ace:ACE", _CONT,
              "ACE without tree search (d=0): N actors, argmax over the critic",
              overrides={"plan_depth": 0}, presets={"paper": {}}),
    Algorithm("ace", "ace", C.ACEConfig, "offpolicy.agents.ace:ACE", _CONT,
              "actor ensemble + look-ahead tree search over a value-prediction model",
              presets=_ACE_PRESETS),
    Algorithm("ace-alt", "ace", C.ACEConfig, "offpolicy.agents.ace:ACE", _CONT,
              "ACE updating only the actor selected when acting",
              overrides={"actor_update": "selected"}, presets=_ACE_PRESETS),
    Algorithm("tm-ace", "ace", C.ACEConfig, "offpolicy.agents.ace:ACE", _CONT,
              "ACE with a latent transition model; tree search only when acting",
              overrides={"model": "transition"}, presets=_ACE_PRESETS),
]}


def get(name: str) -> Algorithm:
    if not isinstance(name, str):  # e.g. `algo: 7` in a hand-edited config.yaml
        raise OffpolicyError(f"algorithm: expected a name such as ddpg, got {name!r}")
    if name not in ALGORITHMS:
        hint = did_you_mean(name, ALGORITHMS)
        raise OffpolicyError(
            f"unknown algorithm '{name}'{hint} (valid: {', '.join(ALGORITHMS)})")
    return ALGORITHMS[name]


@dataclass
class RunConfig:
    """Everything a run needs: the algorithm name, the loop config and the algorithm config."""

    algo: str
    train: C.TrainConfig
    agent: Any  # the section's dataclass
    preset: str | None = None

    @property
    def section(self) -> str:
        return get(self.algo).section

    def to_dict(self) -> dict[str, Any]:
        d = {"algo": self.algo, "preset": self.preset, "train": C.to_dict(self.train)}
        d[self.section] = C.to_dict(self.agent)
        return d

    # training fields a resumed run may change; every other field must match the saved run
    RESUME_CHANGEABLE = frozenset({"steps", "quiet", "checkpoint_every", "log_every",
                                   "ray_connect_timeout", "wandb_project", "wandb_entity",
                                   "wandb_mode"})

    def resumed_with(self, requested: RunConfig, train_fields: set[str] = frozenset(),
                     agent_fields: set[str] = frozenset(), where: str = "the run") -> RunConfig:
        """This (saved) run continued with what the user set now: ``requested`` holds the
        newly resolved config and ``train_fields`` / ``agent_fields`` the names set
        explicitly (by flag, file or preset). Changing an algorithm or any field outside
        :attr:`RESUME_CHANGEABLE` raises; the changeable ones are taken over."""
        if requested.algo != self.algo:
            raise OffpolicyError(f"cannot resume: {where} is a {self.algo} run, "
                                 f"not {requested.algo}")
        new_t, old_t = C.to_dict(requested.train), C.to_dict(self.train)
        new_a, old_a = C.to_dict(requested.agent), C.to_dict(self.agent)
        changed = [(k, old_t[k], new_t[k]) for k in train_fields
                   if k in new_t and new_t[k] != old_t[k] and k not in self.RESUME_CHANGEABLE]
        changed += [(f"{self.section}.{k}", old_a[k], new_a[k]) for k in agent_fields
                    if k in new_a and new_a[k] != old_a[k]]
        if changed:
            # the saved value and the requested one: a preset whose value changed since the
            # run was saved resumes with the saved value given as a flag
            raise OffpolicyError(
                "cannot change " + ", ".join(f"{k} (the run has {o!r}, now {n!r})"
                                             for k, o, n in sorted(changed))
                + f" when resuming {where} "
                f"(changeable: {', '.join(sorted(self.RESUME_CHANGEABLE))})")
        out = copy.deepcopy(self)
        for k in self.RESUME_CHANGEABLE & set(train_fields):
            setattr(out.train, k, getattr(requested.train, k))
        check_step_multiples(out.train, set(train_fields))
        return out

    @staticmethod
    def from_dict(d: dict[str, Any], where: str = "config") -> RunConfig:
        """A saved run's config (config.yaml, a checkpoint's meta): a field it lacks takes
        the value the run had before the field existed (:data:`SAVED_BEFORE`), not the one
        its preset sets today."""
        if not isinstance(d, dict) or "algo" not in d:
            raise OffpolicyError(f"{where}: expected a mapping with an 'algo' key")
        if isinstance(d.get("train"), dict):
            d = {**d, "train": {**SAVED_BEFORE, **d["train"]}}
        # a saved config names its preset (or null): no env default is added on reload
        return resolve(d["algo"], preset=d.get("preset"), file_dict=d, where=where,
                       env_default=False)


def env_preset(algo: str, env: str) -> str | None:
    """The preset a new ``algo`` run on ``env`` gets when nothing names one (or None)."""
    return get(algo).env_presets.get(env)


def resolve(algo: str, preset: str | None = None, file_dict: dict[str, Any] | None = None,
            train_overrides: dict[str, Any] | None = None,
            agent_overrides: dict[str, Any] | None = None, where: str = "config",
            env_default: bool = True) -> RunConfig:
    """Build and validate a RunConfig: defaults <- algorithm <- preset <- file <- overrides.

    With no preset and ``env_default``, the env's default preset applies
    (``Algorithm.env_presets``: AQL's ``small`` on Platform) and is recorded in the run's
    config; ``preset="none"`` means the algorithm's defaults."""
    spec = get(algo)
    if preset == NO_PRESET:
        preset = None
    elif preset is None and env_default and spec.env_presets:
        env = ((train_overrides or {}).get("env")
               or ((file_dict or {}).get("train") or {}).get("env")
               or spec.train_overrides.get("env") or C.TrainConfig().env)
        preset = spec.env_presets.get(env) if isinstance(env, str) else None
    train = C.TrainConfig()
    agent = C.apply_overrides(spec.config_cls(), copy.deepcopy(spec.overrides), spec.section)
    C.apply_overrides(train, copy.deepcopy(spec.train_overrides), "train")
    if preset is not None:
        if not isinstance(preset, str) or preset not in spec.presets:
            raise OffpolicyError(
                f"unknown preset '{preset}' for {algo} (valid: {', '.join(spec.presets)})")
        values = dict(spec.presets[preset])
        C.apply_overrides(train, values.pop("train", {}), "train")
        C.apply_overrides(agent, values, spec.section)
    if file_dict:
        extra = set(file_dict) - {"algo", "preset", "train", spec.section}
        if extra:
            raise OffpolicyError(
                f"{where}: unknown section(s) {', '.join(sorted(extra))} for {algo} "
                f"(valid: algo, preset, train, {spec.section})")
        if file_dict.get("algo", algo) != algo:
            raise OffpolicyError(
                f"{where}: is for algorithm '{file_dict['algo']}', not '{algo}'")
        C.apply_overrides(train, file_dict.get("train") or {}, f"{where}:train")
        C.apply_overrides(agent, file_dict.get(spec.section) or {}, f"{where}:{spec.section}")
    C.apply_overrides(train, train_overrides or {}, "train")
    C.apply_overrides(agent, agent_overrides or {}, spec.section)
    sources = [spec.train_overrides, spec.preset_fields(preset)[0],
               (file_dict or {}).get("train") or {}, train_overrides or {}]
    if (train.replay.startswith("refer") and spec.section in REFER_HALF_MEMORY
            and not any("buffer_size" in s for s in sources)):
        train.buffer_size = refer_memory(train.steps, train.num_envs)
    C.validate(train)
    C.validate(agent, spec.section)
    _check_core_fields(agent, spec, set((file_dict or {}).get(spec.section) or {})
                       | set(agent_overrides or {}))
    if train.replay not in spec.replays:
        raise OffpolicyError(f"--replay {train.replay} is not available for {algo} "
                             f"(valid: {', '.join(spec.replays)})")
    # a preset's uniform warm-up (SAC's sb3) gives way to the initial policy's samples where
    # replay records the behaviour density (ReplaySettings.tracks_behaviour), which uniform
    # actions lack; asked for by flag or file, build refuses it there instead
    if (train.warmup_actions == "uniform" and "warmup_actions" in sources[1]
            and replay_settings(train).tracks_behaviour
            and not any("warmup_actions" in s for s in sources[2:])):
        train.warmup_actions = "policy"
    if train.refer_forget != "oldest" and not train.replay.startswith("refer"):
        raise OffpolicyError(f"--refer-forget {train.refer_forget} needs --replay refer, "
                             f"refer1 or refer2 (it forgets by the far-policy flags ReF-ER "
                             f"keeps), not --replay {train.replay}")
    # a preset's truncation (smarties) waits for ReF-ER; asked for by flag or file without it,
    # it would be recorded and never used
    if (isinstance(agent, C.DDPGConfig) and agent.refer_truncation > 0
            and not train.replay.startswith("refer")
            and any("refer_truncation" in (d or {}) for d in
                    (agent_overrides, (file_dict or {}).get(spec.section)))):
        raise OffpolicyError(f"--{spec.section}.refer-truncation needs --replay refer, refer1 or "
                             f"refer2 (it truncates the policy's own samples), not --replay "
                             f"{train.replay}")
    if train.batch_size > train.buffer_size:
        raise OffpolicyError(f"--batch-size ({train.batch_size}) must not exceed --buffer-size "
                             f"({train.buffer_size})")
    check_step_multiples(train, set().union(*sources))
    _check_collector_fields(train, set().union(*sources[2:]))
    if preset is None and spec.presets.get("paper") == {}:
        preset = "paper"  # the defaults are the paper's setting: config.yaml says which
    return RunConfig(algo, train, agent, preset)


def _check_core_fields(cfg: Any, spec: Algorithm, given: set[str]) -> None:
    """A recurrent core's fields set (by file or flag, to other than their defaults) without
    a core do nothing: refused, rather than recorded in config.yaml as if they applied."""
    if not isinstance(cfg, C.CoreFields) or cfg.core != "none":
        return
    defaults = spec.config_cls()
    for f in C.fields_of(C.CoreFields):
        if (f.name != "core" and {f.name, f.name.replace("_", "-")} & given
                and getattr(cfg, f.name) != getattr(defaults, f.name)):
            flag = f"--{spec.section}.{f.name.replace('_', '-')}"
            raise OffpolicyError(f"{flag} {getattr(cfg, f.name)} applies to a recurrent core, "
                                 f"and this {spec.name} has none: give --{spec.section}.core "
                                 "lstm or gru, or leave it out")


# fields that only remote collectors read (the first group), or only a collector's own replay
COLLECTOR_FIELDS = ("ray_address", "ray_connect_timeout", "sync_every", "collect_steps",
                    "collector_replay", "max_collector_restarts")
COLLECTOR_REPLAY_FIELDS = ("collector_buffer_size", "collector_replay_unrolls")


def _check_collector_fields(train: C.TrainConfig, given: set[str]) -> None:
    """A remote collector's field set by flag or file (to other than its default) in a run
    with no collectors, or a collector replay's without ``--collector-replay``, would do
    nothing: refused, rather than recorded in config.yaml as if it applied. A preset's are not
    blamed on a flag the user never gave (build refuses what the run then lacks)."""
    defaults = C.TrainConfig()

    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    def set_here(name: str) -> bool:
        return ({name, name.replace("_", "-")} & given
                and getattr(train, name) != getattr(defaults, name))

    if not train.num_collectors:
        for name in COLLECTOR_FIELDS + COLLECTOR_REPLAY_FIELDS:
            if set_here(name):
                raise OffpolicyError(
                    f"{flag(name)} applies to remote collectors, and this run has none: give "
                    f"--num-collectors N (Ray actors, the 'distributed' extra), or leave "
                    f"{flag(name)} out")
    elif not train.collector_replay:
        for name in COLLECTOR_REPLAY_FIELDS:
            if set_here(name):
                raise OffpolicyError(f"{flag(name)} applies to the collectors' own replay: give "
                                     f"--collector-replay too, or leave {flag(name)} out")


STEP_MULTIPLES = ("steps", "eval_every", "checkpoint_every")


def chunk_steps(train: C.TrainConfig) -> int:
    """Steps of each env copy in one remote collector's chunk (``--collect-steps``, default
    the segment length, else 50)."""
    return train.collect_steps or train.segment_length or 50


def check_step_multiples(train: C.TrainConfig, explicit: set[str]) -> None:
    """The K env copies (``--num-envs``) step together, K env steps per iteration (remote
    collectors: a chunk of K x ``chunk_steps`` at a time): a run, its evaluations and its
    checkpoints land on the asked step only at multiples of it. A value set explicitly (flag,
    file, preset) that is not one is refused, with the two nearest valid values, rather than
    overshot; a default that is not one becomes the multiple below it (``--num-envs 3``:
    evaluations every 9999 steps), which config.yaml records."""
    k = train.num_envs * (chunk_steps(train) if train.num_collectors else 1)
    what = (f"--num-envs {train.num_envs} x {chunk_steps(train)} steps per collector chunk"
            if train.num_collectors else f"--num-envs {train.num_envs}")
    for name in STEP_MULTIPLES:
        value = getattr(train, name)
        if value % k and name not in explicit:
            setattr(train, name, max(k, value - value % k))
        elif value % k:
            below, above = value - value % k, value - value % k + k
            near = f"{below} or {above}" if below else f"{above}"
            raise OffpolicyError(
                f"--{name.replace('_', '-')} {value} is not a multiple of {what} (the env "
                f"copies step together, so the run would overshoot it): use {near}")


def load_yaml(path) -> dict[str, Any]:
    """A config file (``--config``, a run's ``config.yaml``) as a mapping; one-line errors."""
    from pathlib import Path

    import yaml

    path = Path(path)
    if not path.is_file():
        raise OffpolicyError(f"config file {path} does not exist or is not a file")
    try:
        d = C.load_yaml_text(path.read_text()) or {}
    except (OSError, UnicodeDecodeError) as e:
        raise OffpolicyError(f"cannot read config file {path}: {e}") from e
    except yaml.YAMLError as e:
        raise OffpolicyError(f"config file {path} is not valid YAML: {str(e).splitlines()[0]}") \
            from e
    if not isinstance(d, dict):
        raise OffpolicyError(f"config file {path} must hold a mapping")
    odd = [k for k in d if not isinstance(k, str)]
    if odd:
        raise OffpolicyError(f"config file {path}: keys must be names, got {odd[0]!r}")
    return d


def replay_settings(tc: C.TrainConfig):
    """The ``--replay`` choice and its constants, as agents and the learner take them."""
    from offpolicy.replay.refer import ReplaySettings

    return ReplaySettings(tc.replay, tc.refer_c, tc.refer_anneal, tc.refer_far_fraction,
                          tc.refer_beta0, tc.refer_beta_step, tc.refer_rho_max, tc.per_alpha,
                          tc.per_beta0, tc.replay_diagnostics)


def resolved_flat(algo: Any, preset: Any, env: Any) -> dict[str, str] | None:
    """The flattened config (``plotting.flatten``) that a saved run of ``algo`` and ``preset``
    on ``env`` loads with when its config.yaml lacks fields (:meth:`RunConfig.from_dict`), or
    None where they do not resolve (a peer's folder name, a preset since removed):
    ``plotting.group_by_env`` fills the fields an older run's config.yaml lacks from it."""
    from offpolicy.plotting import flatten

    try:
        run = resolve(str(algo), preset=None if preset in (None, "None") else str(preset),
                      file_dict={"train": dict(SAVED_BEFORE)},
                      train_overrides={"env": env} if env and env != "?" else None)
    except (OffpolicyError, KeyError, ValueError, TypeError):
        return None
    return flatten(run.to_dict())
