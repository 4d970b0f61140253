"""Typed configs: one dataclass for the training loop, one per algorithm section.

Every field carries its help text and its constraints in ``metadata``; ``validate`` checks
them all and the CLI generates one flag per field from the same place (``--steps``,
``--ddpg.actor-lr``, ``--ace.num-actors``...). Resolution order: dataclass defaults <- the
algorithm's registry overrides (e.g. wide-ddpg's 800-600) <- ``--preset`` <- ``--config``
YAML <- command-line flags.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from offpolicy.errors import OffpolicyError, did_you_mean

# weight initialisations by name (offpolicy.networks.initializers)
INIT_SCHEMES = ("orthogonal", "refer", "smarties", "lillicrap", "torch", "flax")


def _f(default: Any, help: str, *, gt: float | None = None, ge: float | None = None,
       le: float | None = None, lt: float | None = None, choices: tuple | None = None) -> Any:
    meta = {"help": help, "gt": gt, "ge": ge, "le": le, "lt": lt, "choices": choices}
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata=meta)
    return field(default=default, metadata=meta)


MAX_SEED = 2**31 - 1  # seeds offset by small constants stay within JAX's and NumPy's range
RHO_MAX_LIMIT = 1e4  # the largest --refer-rho-max: stored importance weights are >= 1e-4


@dataclass
class TrainConfig:
    """The training loop, evaluation protocol, replay and logging (shared by all algorithms)."""

    env: str = _f("Pendulum-v1", "Gymnasium environment id")
    steps: int = _f(100_000, "environment steps to train for", ge=1)
    seed: int = _f(0, "random seed (networks, replay sampling, exploration, env resets)", ge=0,
                   le=MAX_SEED)
    warmup_steps: int = _f(
        0, "initial steps before updates: uniformly random actions for policies with host "
        "noise, the initial policy's samples for the others (see --warmup-actions); updates "
        "start once warm-up "
        "is over and the replay holds batch_size transitions (see --no-wait-for-batch) (ACE "
        "authors' code: no warm-up)", ge=0)
    warmup_actions: str = _f(
        "auto", "what acts during --warmup-steps: uniform (uniformly random actions, as SB3's "
        "learning_starts), policy (the initial policy: sampled, or with its exploration noise) "
        "or auto (uniform for policies with host exploration noise, policy for the others, "
        "whose replay may record the behaviour density that uniform actions lack)",
        choices=("auto", "uniform", "policy"))
    wait_for_batch: bool = _f(
        True, "updates wait until replay holds batch_size transitions; off: they start right "
        "after warm-up and sample with replacement from fewer (SB3's learning_starts; "
        "transition-sampling agents only)")
    updates_per_step: float = _f(1.0, "gradient updates per env step (replay ratio)", gt=0)
    num_envs: int = _f(
        1, "env copies stepped side by side with one batched policy call per step; K env steps "
        "give K x updates_per_step updates, so sample efficiency per env step is unchanged",
        ge=1, le=256)
    async_envs: bool = _f(False, "step the env copies in subprocesses (Gymnasium "
                          "AsyncVectorEnv) instead of in this process; they start from a "
                          "fork server, so a script that trains this way needs the "
                          "`if __name__ == '__main__':` guard")
    num_collectors: int = _f(
        0, "remote collectors (Ray actors, the 'distributed' extra), each with --num-envs env "
        "copies, sending chunks of steps to this process's learner; 0 = collect in this "
        "process", ge=0, le=1024)
    ray_address: str = _f(
        "", "a Ray cluster to join with --num-collectors (as `ray start --head` prints it; "
        "the RAY_ADDRESS variable too); empty = a local Ray instance for this run")
    ray_connect_timeout: float = _f(
        10.0, "seconds to wait for the cluster at --ray-address (or RAY_ADDRESS) to accept a "
        "connection before the run stops with one line, before its run directory is made "
        "(Ray itself would retry for many minutes)", gt=0)
    sync_every: int = _f(1, "with --num-collectors: updates between publications of the "
                         "acting parameters (collectors take the newest with their next "
                         "chunk)", ge=1)
    collect_steps: int = _f(
        0, "with --num-collectors: steps of each env copy per chunk a collector sends; 0 = "
        "--segment-length if set, else 50", ge=0)
    collector_replay: bool = _f(
        False, "with --num-collectors: each collector keeps its own FIFO replay and sends, per "
        "unroll of the agent's T steps, the fresh unroll and --collector-replay-unrolls "
        "unrolls sampled from it; the learner keeps no replay and learns from batches of the "
        "unrolls it receives (AQL's Algorithm 2, App. A1-A2; agents that learn from "
        "sequences without write-back: aql, uniform-q, qt-opt, exact-q)")
    collector_buffer_size: int = _f(100_000, "with --collector-replay: steps each collector's "
                                    "replay holds (AQL App. A2: 10^5)", ge=2)
    collector_replay_unrolls: int = _f(2, "with --collector-replay: R, the unrolls sampled "
                                       "uniformly from a collector's replay and sent with "
                                       "each fresh one (AQL App. A2: 2)", ge=0, le=64)
    max_collector_restarts: int = _f(
        3, "with --num-collectors: collector failures (a crash, a kill, an env exception) "
        "that are restarted before the run stops with an error", ge=0)
    pipeline: bool = _f(
        False, "overlap the env step with the update: act with parameters one update old "
        "(a departure from the papers' Algorithm 1 by one update; off by default)")
    segment_length: int = _f(
        0, "update cadence: 0 = updates_per_step updates after every env step; k > 0 = after "
        "every k steps of each env copy, one update on the segment just collected (agents "
        "that learn from sequences) and Poisson(replay_ratio) updates from replay (ACER "
        "Algorithm 1)", ge=0)
    replay_ratio: float = _f(4.0, "with segment_length > 0: mean number of replay updates "
                             "per segment (ACER's r)", ge=0)
    batch_size: int = _f(64, "minibatch size per update", ge=1)
    buffer_size: int = _f(1_000_000, "replay capacity in steps (ddpg and naf under --replay "
                                     "refer, refer1 or refer2, unless set: half of --steps, "
                                     "within [10 000, 2^18])", ge=2)
    eval_every: int = _f(10_000, "evaluate every N env steps (ACE protocol)", ge=1)
    eval_episodes: int = _f(20, "deterministic evaluation episodes per evaluation", ge=1)
    checkpoint_every: int = _f(10_000, "write the latest checkpoint every N env steps", ge=1)
    log_every: int = _f(1_000, "write train.csv / TensorBoard every N env steps", ge=1)
    replay: str = _f(
        "er", "experience replay: er (uniform), per (rank-based prioritized, Schaul et al. "
        "2016), refer (Remember-and-Forget, Novati & Koumoutsakos 2019: rules 1 and 2), "
        "refer1 (rule 1 only), refer2 (rule 2 only); not every algorithm takes every choice",
        choices=("er", "per", "refer", "refer1", "refer2"))
    refer_c: float = _f(4.0, "ReF-ER C of Eq. 13: c_max = 1 + C / (1 + A k)", gt=0)
    refer_anneal: float = _f(5e-7, "ReF-ER A of Eq. 13: anneals c_max and the learning "
                             "rates as 1 / (1 + A k), k gradient steps", ge=0)
    refer_far_fraction: float = _f(0.1, "ReF-ER D of Eq. 12: the target fraction of "
                                   "far-policy samples in replay", gt=0, lt=1)
    refer_beta0: float = _f(1.0, "ReF-ER initial penalty coefficient beta (1 = no penalty "
                            "yet; the authors' smarties starts at 0)", ge=0, le=1)
    refer_beta_step: float = _f(
        1e-3, "ReF-ER step eta of Eq. 12's beta update (the paper ties it to the learning "
        "rate, 1e-4-1e-5, which needs 1e4-1e5 updates to move beta)", gt=0, le=1)
    refer_rho_max: float = _f(1e3, "importance weights are computed from the log-ratio "
                              "clipped to +-log(rho_max)", gt=1, le=RHO_MAX_LIMIT)
    refer_forget: str = _f(
        "oldest", "which episodes ReF-ER's memory forgets when it holds --buffer-size steps: "
        "oldest (first in, first out: the paper's Alg. 1) or far-policy (the finished episode "
        "with the largest fraction of far-policy steps, unless the oldest is more than a "
        "memory's count of episodes older: the authors' smarties of the paper's time, "
        "ERoldSeqFilter farpolfrac); far-policy allocates twice --buffer-size slots, since an "
        "episode forgotten in the middle frees its slots only when the ring reaches them",
        choices=("oldest", "far-policy"))
    replay_diagnostics: bool = _f(
        False, "with --replay er or per: also store the behaviour policy and log rho, "
        "KL(mu || pi) and the far-policy fraction (ReF-ER's diagnostics; costs a little "
        "speed, always on with refer*)")
    per_alpha: float = _f(0.7, "PER priority exponent alpha (rank-based: 0.7)", ge=0)
    per_beta0: float = _f(0.5, "PER initial importance-sampling exponent, annealed "
                          "linearly to 1 over the run", ge=0, le=1)
    replay_statistics: bool = _f(
        False, "ReF-ER App. B: standardise states with the mean/std of replay at the first "
        "update and scale rewards by 1/sqrt(mean r^2 over replay), recomputed every 1000 "
        "updates (stored return targets are rescaled with it)")
    discretize: int = _f(
        0, "--discretize K: every continuous action dimension (also inside a Tuple/Dict) "
        "becomes K evenly spaced levels in [-1, 1] of the agent's box, e.g. K = 5: "
        "{-1, -0.5, 0, 0.5, 1}; 0 = off, else K >= 2; no effect without continuous actions",
        ge=0)
    observe_action_reward: bool = _f(
        False, "append the previous action and reward to every observation (zero at an "
        "episode's first step), in training, evaluation and inference alike: the input of "
        "pomdp-baselines' and R2D2's recurrent cores (what reveals a -V task's hidden "
        "positions together with the velocities); flat observations only")
    normalize_obs: bool = _f(False, "normalise observations with running mean/std")
    normalize_reward: bool = _f(False, "scale rewards by the running std of the return")
    clip_reward: float = _f(0.0, "clip the rewards stored in replay to [-c, c] (the DQN, A3C "
                            "and ACER Atari protocol: 1); episode returns and evaluations stay "
                            "unclipped; 0 = off", ge=0)
    save_replay: bool = _f(True, "include the replay buffer in checkpoints (needed to resume)")
    quiet: bool = _f(False, "no progress bar; one line per evaluation")
    wandb_project: str = _f(
        "", "log to Weights & Biases under this project (the 'wandb' extra): the scalars "
        "TensorBoard gets, the resolved config and curve.png; empty = off (wandb is then "
        "never imported)")
    wandb_entity: str = _f("", "with --wandb-project: the W&B entity (a team or user); empty "
                           "= your default entity")
    wandb_mode: str = _f(
        "auto", "with --wandb-project: online, offline (files under RUN_DIR/wandb that `wandb "
        "sync` uploads later) or disabled; auto = the WANDB_MODE variable, else online",
        choices=("auto", "online", "offline", "disabled"))


@dataclass
class CoreFields:
    """A recurrent core in front of the networks (issue 39; docs/guides/recurrent.md): the
    fields every algorithm that takes one shares (``--<algo>.core`` and the rest)."""

    core: str = _f("none", "a recurrent core in front of every network that reads "
                   "observations: none (feed-forward), lstm or gru", choices=("none", "lstm",
                                                                             "gru"))
    core_layers: int = _f(1, "recurrent layers of each core", ge=1, le=8)
    core_cells: int = _f(64, "cells (units) of each recurrent layer", ge=1)
    core_start: str = _f(
        "zero", "how a sampled window starts: zero (every output from a zero state over the "
        "last core_window observations, acting and learning alike: the ReF-ER authors' "
        "smarties) or stored (acting carries the state through the episode and replay records "
        "it; learning starts from the recorded state, core_burn_in steps without gradient: "
        "R2D2)", choices=("zero", "stored"))
    core_window: int = _f(16, "zero: observations each output is computed from (ReF-ER "
                          "Sec. 5.4: 16); stored: steps back-propagated through before each "
                          "sampled step (a sequence agent back-propagates through its "
                          "unroll)", ge=1, le=1000)
    core_burn_in: int = _f(0, "stored: steps unrolled from the recorded state without "
                           "gradient before the back-propagated ones (R2D2: 40)", ge=0,
                           le=1000)


@dataclass
class DeterministicActorCriticConfig:
    """Fields shared by the deterministic-policy families (DDPG, ACE): targets and noise."""

    tau: float = _f(1e-3, "soft target update rate", gt=0, le=1)
    gamma: float = _f(0.99, "discount factor", ge=0, le=1)
    noise: str = _f("ou", "exploration noise", choices=("ou", "gaussian", "none"))
    noise_sigma: float = _f(0.2, "noise scale (OU sigma or Gaussian std)", ge=0)
    noise_theta: float = _f(0.15, "OU mean reversion", ge=0)
    noise_dt: float = _f(1e-2, "OU time step (as in DeepRL and SB3)", gt=0)


@dataclass
class DDPGConfig(CoreFields, DeterministicActorCriticConfig):
    """DDPG as the ACE paper runs it (Lillicrap et al. 2016 with tanh, no L2)."""

    hidden: tuple[int, ...] = _f((400, 300), "hidden sizes of actor and critic")
    activation: str = _f("tanh", "hidden activation", choices=("tanh", "relu", "softsign"))
    init: str = _f(
        "orthogonal", "weight initialisation: orthogonal (ACE authors' DeepRL: gain 1, outputs "
        "1e-3), refer (ReF-ER App. A: Glorot uniform, outputs U(+-0.1/sqrt(fan_in))), "
        "smarties (refer with biases drawn as the weights, the ReF-ER authors' code), "
        "lillicrap (DDPG paper: U(+-1/sqrt(fan_in)), outputs U(+-3e-3)), torch (PyTorch's "
        "default, SB3), flax (Flax's default, SBX)", choices=INIT_SCHEMES)
    action_input_layer: int = _f(
        2, "where the action enters the critic: 2 = with the first hidden layer's output "
        "(Lillicrap et al., the ACE paper), 1 = with the state at the input (SB3, SBX)",
        choices=(1, 2))
    shared_encoder: bool = _f(False, "actor and critic share the first layer (Shared-DDPG)")
    actor_trains_encoder: bool = _f(
        True, "with a shared encoder: the actor's gradient also trains it (authors' code)")
    critic_l2: float = _f(0.0, "L2 weight decay on critic weights (Lillicrap: 1e-2)", ge=0)
    critic_l2_biases: bool = _f(
        False, "the critic's L2 decays its biases too (the ReF-ER authors' smarties)")
    actor_lr: float = _f(1e-4, "Adam step size of the actor", gt=0)
    critic_lr: float = _f(1e-3, "Adam step size of the critic", gt=0)
    simultaneous_update: bool = _f(
        False, "the actor's gradient from the critic before this update's critic step, as "
        "ReF-ER's Alg. 4 and the authors' smarties compute both (default: after it, as "
        "Lillicrap et al. and the ACE authors' code)")
    refer_truncation: float = _f(
        0.0, "with --replay refer*: the policy's Gaussian samples truncated at this many stds "
        "(ReF-ER App. A: 3; 0 = untruncated); rho and the KL keep the Gaussian's density, as "
        "the authors' smarties", ge=0)


@dataclass
class NAFConfig(CoreFields):
    """NAF (Gu et al. 2016); ``--preset paper`` is the ReF-ER paper's setup (App. A)."""

    hidden: tuple[int, ...] = _f((128, 128), "hidden sizes of the one network")
    activation: str = _f("relu", "hidden activation (the paper: softsign, --preset paper)",
                         choices=("tanh", "relu", "softsign"))
    init: str = _f("refer", "weight initialisation (see --ddpg.init)", choices=INIT_SCHEMES)
    lr: float = _f(1e-3, "Adam step size (the paper's 1e-4, tuned for 1e6-step MuJoCo runs, "
                   "is --preset paper; 1e-3 lets a 30k-step Pendulum run learn)", gt=0)
    gamma: float = _f(0.995, "discount factor", ge=0, le=1)
    tau: float = _f(0.005, "soft target update rate (the paper: 0.01)", gt=0, le=1)
    noise_sigma: float = _f(0.2, "std of the Gaussian exploration pi = m(s) + N(0, sigma^2)",
                            gt=0)


@dataclass
class VRACERConfig(CoreFields):
    """V-RACER (Novati & Koumoutsakos 2019, Sec. 2, Algorithm 3)."""

    hidden: tuple[int, ...] = _f((128, 128), "hidden sizes of the one network")
    activation: str = _f("softsign", "hidden activation", choices=("tanh", "relu", "softsign"))
    init: str = _f("refer", "weight initialisation (see --ddpg.init)", choices=INIT_SCHEMES)
    lr: float = _f(1e-4, "Adam step size (annealed by Eq. 13 under ReF-ER)", gt=0)
    gamma: float = _f(0.995, "discount factor", ge=0, le=1)
    initial_variance: float = _f(0.2, "initial variance of the state-independent diagonal "
                                 "Gaussian policy (learned)", gt=0)


@dataclass
class ACEConfig(DeterministicActorCriticConfig):
    """ACE and its variants (Zhang & Yao 2019): actor ensemble + latent tree search."""

    num_actors: int = _f(5, "ensemble size N", ge=1)
    shared_actor_layer: bool = _f(
        False, "the N actors share one hidden layer (the paper's text); False gives each actor "
        "its own 300-unit hidden layer (the authors' code, DeepRL ACE branch ActorModel: the "
        "default, since shared layers collapse the actors onto one action)")
    plan_depth: int = _f(1, "tree-search depth d (0 = Ensemble-DDPG)", ge=0, le=4)
    encoder_size: int = _f(400, "latent size of the shared encoder f_enc", ge=1)
    hidden: int = _f(300, "hidden units of f_q, f_rew, f_trans and the actors' shared layer", ge=1)
    activation: str = _f("tanh", "hidden activation", choices=("tanh", "relu"))
    actor_update: str = _f("all", "which actors the policy gradient trains: all (ACE) or the "
                           "one selected when acting (ACE-Alt)", choices=("all", "selected"))
    model: str = _f("value", "value: value-prediction model trained through f_q^d (ACE); "
                    "transition: latent transition model, search only when acting (TM-ACE)",
                    choices=("value", "transition"))
    actor_trains_encoder: bool = _f(True, "the actors' gradient also trains the shared encoder")
    reward_loss_weight: float = _f(1.0, "weight of the reward-grounding loss", ge=0)
    actor_lr: float = _f(1e-4, "Adam step size of the actors", gt=0)
    critic_lr: float = _f(1e-3, "Adam step size of encoder and model heads", gt=0)


@dataclass
class ACERConfig:
    """ACER (Wang et al. 2017): Retrace, truncated importance sampling with bias correction,
    efficient trust region; discrete (Algorithm 2) and continuous (SDN, Algorithm 3)
    actions. The trajectory length k is the loop's ``--segment-length``."""

    hidden: tuple[int, ...] = _f((128, 128), "hidden sizes of the MLP torso (and of the "
                                 "continuous advantage network A(s, a))")
    activation: str = _f("relu", "hidden activation", choices=("tanh", "relu", "softsign"))
    torso: str = _f("auto", "feature extractor: mlp, cnn (Nature CNN, Mnih et al. 2015, for "
                    "84x84 image stacks) or auto (cnn for image observations)",
                    choices=("auto", "mlp", "cnn"))
    lr: float = _f(7e-4, "learning rate", gt=0)
    optimizer: str = _f("rmsprop", "rmsprop (A3C's: decay 0.99) or adam",
                        choices=("rmsprop", "adam"))
    rmsprop_eps: float = _f(1e-5, "RMSProp / Adam epsilon", gt=0)
    max_grad_norm: float = _f(10.0, "clip the global gradient norm (0 = off)", ge=0)
    gamma: float = _f(0.99, "discount factor", ge=0, le=1)
    truncation: float = _f(0.0, "c, the importance-weight truncation of Eq. 8-10 and 15-16; "
                           "0 = the paper's value for the action kind (10 discrete, 5 "
                           "continuous)", ge=0)
    bias_correction: bool = _f(True, "add the bias-correction term of Eq. 9 / 16 (ablation: "
                               "off = plain truncated importance sampling)")
    trust_region: bool = _f(True, "efficient trust region, Eq. 11-12 (ablation: off)")
    trust_region_delta: float = _f(1.0, "delta, the bound on the linearised KL to the "
                                   "average policy (Eq. 11)", gt=0)
    average_decay: float = _f(0.0, "alpha of the average policy network theta_a <- alpha "
                              "theta_a + (1 - alpha) theta; 0 = the paper's value (0.99 "
                              "discrete, 0.995 continuous)", ge=0, lt=1)
    on_policy_update: bool = _f(
        True, "Algorithm 1: one update on each segment just collected, then Poisson(replay "
        "ratio) replayed ones; False learns from replay only (the paper's MuJoCo runs, Sec. 6)")
    entropy_weight: float = _f(1e-3, "entropy regularisation weight (paper: 0.001)", ge=0)
    value_loss_weight: float = _f(0.5, "weight of the critic's loss 1/2 (Q^ret - Q)^2 against "
                                  "the policy term", gt=0)
    policy_std: float = _f(0.3, "continuous: std of the diagonal Gaussian policy (fixed, "
                           "Sec. 6; the initial value with --acer.learn-std)", gt=0)
    learn_std: bool = _f(False, "continuous: learn a state-independent std (the trust region "
                         "then covers the mean and the std)")
    sdn_samples: int = _f(5, "continuous: n, the samples u_i ~ pi of the stochastic dueling "
                          "network (Eq. 13)", ge=1)


@dataclass
class AQLConfig(CoreFields):
    """Amortized Q-learning (Van de Wiele et al. 2020) and its baselines: the argmax of Q over
    N proposal samples and M uniform samples (AQL), over uniform samples only (Uniform-Q), by
    the cross-entropy method (QT-Opt) or over every action (exact Q)."""

    search: str = _f("proposal", "how the argmax over actions is searched: proposal (AQL: N "
                     "samples of the learned proposal + M uniform ones), uniform (Uniform-Q), "
                     "cem (QT-Opt's cross-entropy method), exact (every action enumerated)",
                     choices=("proposal", "uniform", "cem", "exact"))
    autoregressive: bool = _f(True, "the proposal conditions sub-action d on sub-actions < d "
                              "(False: independent sub-actions, App. A3)")
    proposal_samples: int = _f(100, "N, actions drawn from the proposal per state", ge=1)
    uniform_samples: int = _f(400, "M, actions drawn uniformly per state", ge=1)
    proposal_std: float = _f(0.5, "std of a continuous sub-action's Gaussian proposal (the "
                             "paper's fixed variance 0.25)", gt=0)
    entropy_weight: float = _f(0.01, "lambda of the proposal loss -log mu(a*|s) - lambda H "
                               "(Eq. 3; the paper gives no value)", ge=0)
    cem_samples: int = _f(100, "QT-Opt: samples per CEM iteration (uniform at first)", ge=2)
    cem_elites: int = _f(10, "QT-Opt: the best samples a Gaussian per sub-action is fit to",
                         ge=1)
    cem_iterations: int = _f(3, "QT-Opt: CEM iterations", ge=1)
    exact_limit: int = _f(20_000, "exact Q: refuse action sets larger than this", ge=1)
    exact_rows: int = _f(2**18, "exact Q: (state, action) pairs evaluated at once; the actions "
                         "are searched in chunks of this many over the number of states "
                         "(bounds memory, not the result)", ge=1)
    lookup: bool = _f(True, "when a discrete action space has no more actions than the "
                      "searched samples, compute Q of every action once per state and look "
                      "the samples' values up (the same argmax and statistics, less work)")
    hybrid_embedding: str = _f("chosen", "a parameterised hybrid action enters Q as the one-hot "
                               "of the choice plus only that choice's parameter (chosen) or "
                               "with every parameter (full)", choices=("chosen", "full"))
    hidden: tuple[int, ...] = _f((256, 256), "Q network: the state layers, the last one also "
                                 "taking the action embedding")
    action_layer: int = _f(1, "the Q network's hidden layer at which the action embedding "
                           "joins: 1 = with the observation (the paper's Fig. 1); a later "
                           "layer runs the layers before it once per state, not per candidate "
                           "(cheaper, weaker state-action interactions)", ge=1)
    proposal_hidden: tuple[int, ...] = _f((256,), "the proposal's state features")
    activation: str = _f("relu", "hidden activation", choices=("tanh", "relu", "softsign"))
    q_lr: float = _f(2e-4, "Adam step size of the Q network (App. A2)", gt=0)
    proposal_lr: float = _f(2e-4, "Adam step size of the proposal (App. A2)", gt=0)
    gamma: float = _f(0.99, "discount factor", ge=0, le=1)
    lambda_: float = _f(0.8, "lambda of Peng's Q(lambda) over the unroll (App. A2)", ge=0, le=1)
    unroll_length: int = _f(30, "T, the length of the unrolls the update learns from", ge=1)
    target_update_every: int = _f(0, "copy Q to a target network every this many updates (0: "
                                  "no target network, the paper's choice)", ge=0)
    epsilon: float = _f(0.05, "epsilon-greedy exploration of most env copies", ge=0, le=1)
    explore_epsilon: float = _f(0.5, "epsilon of the first explore_fraction of env copies "
                                "(App. A2: the first 10 of 100 actors)", ge=0, le=1)
    explore_fraction: float = _f(0.1, "fraction of env copies (rounded down) that explore with "
                                 "explore_epsilon", ge=0, le=1)



@dataclass
class TD3Config(CoreFields):
    """TD3 (Fujimoto et al. 2018, Algorithm 1): twin critics, clipped double-Q targets, target
    policy smoothing, delayed actor and target updates. The defaults are the paper's (Sec. 6.1
    and Table 3), with its 1000-step random start as ``--warmup-steps`` in the registry."""

    hidden: tuple[int, ...] = _f((400, 300), "hidden sizes of the actor and of each critic "
                                 "(the paper and SB3's TD3: 400-300, which --preset sb3 "
                                 "keeps; SBX's own default is 256-256)")
    activation: str = _f("relu", "hidden activation", choices=("tanh", "relu", "softsign"))
    init: str = _f("torch", "weight initialisation (see --ddpg.init; the authors' PyTorch "
                   "code keeps PyTorch's default)", choices=INIT_SCHEMES)
    actor_lr: float = _f(1e-3, "Adam step size of the actor", gt=0)
    critic_lr: float = _f(1e-3, "Adam step size of the twin critics", gt=0)
    gamma: float = _f(0.99, "discount factor", ge=0, le=1)
    tau: float = _f(5e-3, "soft target update rate (every policy_delay updates; every update "
                    "with --td3.target-every-update)", gt=0, le=1)
    exploration_sigma: float = _f(0.1, "std of the Gaussian exploration noise N(0, sigma^2) "
                                  "added on the host (actions in [-1, 1])", ge=0)
    policy_noise: float = _f(0.2, "std of the target policy smoothing noise (Eq. 14)", ge=0)
    noise_clip: float = _f(0.5, "the smoothing noise is clipped to [-c, c] (Eq. 14)", ge=0)
    policy_delay: int = _f(2, "d: the actor and the targets are updated every d critic "
                           "updates (Algorithm 1; the targets every update with "
                           "--td3.target-every-update)", ge=1)
    target_every_update: bool = _f(
        False, "soft-update both targets after every critic update, before the delayed actor "
        "step, as SBX's TD3 (0.28) does; off: every d updates after the actor step "
        "(Algorithm 1, SB3)")
    actor_min_q: bool = _f(
        False, "the actor ascends min(Q_1, Q_2)(s, pi(s)), as SBX's TD3 (0.28) does; off: "
        "Q_1 (Algorithm 1, SB3)")


@dataclass
class SACConfig(CoreFields):
    """SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications", Algorithm 1
    and Table 1): twin soft Q-functions with targets, a tanh-squashed Gaussian policy,
    automatic entropy tuning with target entropy -|A|."""

    hidden: tuple[int, ...] = _f((256, 256), "hidden sizes of the policy and of each Q network")
    activation: str = _f("relu", "hidden activation", choices=("tanh", "relu", "softsign"))
    init: str = _f("flax", "weight initialisation (see --ddpg.init)", choices=INIT_SCHEMES)
    actor_lr: float = _f(3e-4, "Adam step size of the policy", gt=0)
    critic_lr: float = _f(3e-4, "Adam step size of the twin Q networks", gt=0)
    alpha_lr: float = _f(3e-4, "Adam step size of log alpha (the temperature)", gt=0)
    gamma: float = _f(0.99, "discount factor", ge=0, le=1)
    tau: float = _f(5e-3, "soft target update rate", gt=0, le=1)
    initial_alpha: float = _f(1.0, "the temperature alpha at the start", gt=0)
    learn_alpha: bool = _f(True, "tune alpha to the target entropy (Eq. 18); off: alpha stays "
                           "at initial_alpha")
    target_entropy: float = _f(0.0, "the entropy target H-bar of Eq. 18; 0 = the paper's "
                               "-|A| (minus the action dimension)")
    log_std_min: float = _f(-20.0, "the policy's log std is clipped to [min, max]")
    log_std_max: float = _f(2.0, "upper clip of the policy's log std")
    log_det_eps: float = _f(0.0, "eps in log(1 - tanh(u)^2 + eps), the squashing's log-det "
                            "in log pi (App. C, Eq. 21): 0 = exact (any u), SB3 adds 1e-6 "
                            "(a saturated action's correction then stops at log eps and "
                            "its gradient at zero)", ge=0, lt=1)


@dataclass
class DQNConfig:
    """DQN (Mnih et al. 2015) with Double DQN (van Hasselt et al. 2016) and the dueling
    architecture (Wang et al. 2016) as options, n-step returns and a linear epsilon schedule.
    The defaults are SB3's DQN; ``--preset paper`` is the Nature paper's Atari setting."""

    hidden: tuple[int, ...] = _f((64, 64), "hidden sizes of the Q network (after the Nature "
                                 "CNN on image observations)")
    activation: str = _f("relu", "hidden activation", choices=("tanh", "relu", "softsign"))
    torso: str = _f("auto", "feature extractor: mlp, cnn (Nature CNN) or auto (cnn for image "
                    "observations)", choices=("auto", "mlp", "cnn"))
    init: str = _f("torch", "weight initialisation (see --ddpg.init)", choices=INIT_SCHEMES)
    lr: float = _f(1e-4, "step size", gt=0)
    optimizer: str = _f("adam", "adam, or rmsprop (the Nature paper's: decay 0.95, "
                        "centred, epsilon 0.01)", choices=("adam", "rmsprop"))
    max_grad_norm: float = _f(10.0, "clip the global gradient norm (0 = off)", ge=0)
    loss: str = _f("huber", "TD loss: huber (the paper's error clipping to [-1, 1]) or mse",
                   choices=("huber", "mse"))
    gamma: float = _f(0.99, "discount factor", ge=0, le=1)
    n_step: int = _f(1, "n of the n-step return target (returns.n_step_returns); n > 1 "
                     "learns from windows of n steps", ge=1, le=100)
    double: bool = _f(False, "Double DQN: the online network picks argmax_a Q(s', a), the "
                      "target network values it (van Hasselt et al. 2016, Eq. 4)")
    dueling: bool = _f(False, "dueling heads Q = V + A - mean_a A (Wang et al. 2016, Eq. 9)")
    target_update_every: int = _f(2_500, "copy the online network to the target network "
                                  "every this many updates (SB3: every 10 000 env steps at "
                                  "one update per 4)", ge=1)
    epsilon_start: float = _f(1.0, "epsilon at the first step", ge=0, le=1)
    epsilon_end: float = _f(0.05, "epsilon after the decay", ge=0, le=1)
    epsilon_decay_steps: int = _f(10_000, "env steps over which epsilon decays linearly "
                                  "from epsilon_start to epsilon_end", ge=1)

# ---------------------------------------------------------------------- generic helpers
def fields_of(cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(cls))


def field_type(cls: type, f: dataclasses.Field) -> Any:
    return typing.get_type_hints(cls)[f.name]


def coerce(cls: type, name: str, value: Any, where: str) -> Any:
    """Convert a YAML/CLI value to the field's type, with a one-line error."""
    f = {f.name: f for f in fields_of(cls)}[name]
    tp = field_type(cls, f)
    try:
        if tp is bool:
            if isinstance(value, str):
                low = value.lower()
                if low not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return low in ("true", "1", "yes")
            if not isinstance(value, bool):
                raise ValueError(value)
            return value
        if tp is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if tp is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if tp is str:
            if not isinstance(value, str):
                raise ValueError(value)
            return value
        if typing.get_origin(tp) is tuple:
            if isinstance(value, (int, str)):
                value = [value]
            return tuple(_integer(v) for v in value)
    except (TypeError, ValueError) as e:
        raise OffpolicyError(f"{where}: invalid value {value!r} (expected {_type_name(tp)})") \
            from e
    return value


def _integer(v: Any) -> int:
    """An int from an int, an integral float or a string of one (YAML, the CLI); 1.5, True and
    'abc' are errors, not truncated."""
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(v)
    return int(v)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is tuple:
        return "a list of integers"
    return getattr(tp, "__name__", str(tp))


MAX_SIZE = 2**20  # a layer width or count beyond which a config is a typo, not a network

_BOUNDS = (("gt", lambda a, b: a > b, ">"), ("ge", lambda a, b: a >= b, ">="),
           ("lt", lambda a, b: a < b, "<"), ("le", lambda a, b: a <= b, "<="))


def validate(cfg: Any, prefix: str = "") -> None:
    """Check every field against its metadata constraints; raise a one-line error."""
    for f in fields_of(type(cfg)):
        v = getattr(cfg, f.name)
        m = f.metadata
        flag = "--" + (prefix + "." if prefix else "") + f.name.replace("_", "-")
        if m.get("choices") and v not in m["choices"]:
            raise OffpolicyError(
                f"{flag}: invalid choice {v!r} (valid: {', '.join(map(str, m['choices']))})")
        values = v if isinstance(v, tuple) else (v,)
        if isinstance(v, tuple) and not v:
            raise OffpolicyError(f"{flag}: needs at least one value")
        for x in values:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                continue
            if isinstance(x, float) and not math.isfinite(x):
                raise OffpolicyError(f"{flag}: must be finite, got {x}")
            for key, ok, word in _BOUNDS:
                bound = m.get(key)
                if bound is not None and not ok(x, bound):
                    raise OffpolicyError(f"{flag}: must be {word} {bound}, got {x}")
        if isinstance(v, tuple) and any(not 1 <= x <= MAX_SIZE for x in v):
            raise OffpolicyError(f"{flag}: sizes must be between 1 and {MAX_SIZE}, got {list(v)}")


def load_yaml_text(text: str) -> Any:
    """``yaml.safe_load``, but a key given twice in one mapping raises ``yaml.YAMLError`` (one
    line naming the key and its lines): PyYAML keeps the last silently, so a typo'd copy of a
    setting would win unseen. Config files and suites read YAML through this."""
    import yaml

    return yaml.load(text, Loader=_unique_key_loader())


@functools.cache
def _unique_key_loader() -> type:
    import yaml

    class DuplicateKeyError(yaml.YAMLError):
        pass

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # keys a '<<' merge brings may be overridden: that is its use
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    try:
                        first = seen.get(key)
                    except TypeError:  # an unhashable key: the base class reports it
                        continue
                    if first is not None:
                        raise DuplicateKeyError(f"key {key!r} appears twice in one mapping "
                                                f"(lines {first} and {line})")
                    seen[key] = line
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def apply_overrides(cfg: Any, overrides: dict[str, Any], where: str) -> Any:
    names = {f.name for f in fields_of(type(cfg))}
    if not isinstance(overrides, dict) or not all(isinstance(k, str) for k in overrides):
        raise OffpolicyError(f"{where}: expected a mapping of option names to values, "
                             f"got {overrides!r}")
    for k, v in overrides.items():
        key = k.replace("-", "_")
        if key not in names:
            hint = did_you_mean(key, sorted(names))
            raise OffpolicyError(
                f"{where}: unknown key '{k}'{hint} (valid: {', '.join(sorted(names))})")
        setattr(cfg, key, coerce(type(cfg), key, v, f"{where}.{k}"))
    return cfg


def to_dict(cfg: Any) -> dict[str, Any]:
    out = {}
    for f in fields_of(type(cfg)):
        v = getattr(cfg, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out
