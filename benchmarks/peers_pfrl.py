#!/usr/bin/env python
"""Peer baseline: ACER from PFRL 0.4.0 (PyTorch), for discrete and continuous actions.

Run **only** with the benchmark interpreter (``.venv-bench/bin/python``, made by
``make bench-venv``), which holds ``pfrl==0.4.0`` installed with ``--no-deps`` next to torch
2.13 (CPU) and Gymnasium; like ``peers.py`` it does not import ``offpolicy``.

Subcommands (each prints exactly one JSON object on the last line of stdout; progress goes
to stderr), with the CLI and output contract of ``peers.py``:

``throughput --env CartPole-v1 --steps N --warmup W --seed S``
    Runs W + N env steps with learning on throughout (PFRL's own cadence, below) and reports
    env steps per second over the N post-warm-up steps, and the number of optimiser steps
    (``updates``) made during them.  The warm-up is there to reach the steady state: with the
    default ``--replay-start 1000``, replay updates start once 1000 transitions of finished
    episodes are stored (``replay_active`` says whether they had when the clock started; on
    CartPole take ``--warmup`` a little above 1000, on HalfCheetah 1000 is exact).

``learn --env HalfCheetah-v5 --steps 100000 --seed S --run-dir DIR``
    Trains for ``--steps`` env steps; every ``--eval-every`` steps (and at the last step) runs
    ``--eval-episodes`` deterministic episodes (most probable action / Gaussian mean) on a
    separate env, episode ``i`` reset with ``seed + 10_000 + i``.  Rows ``step, return_mean,
    return_std, return_se, episodes, wall_time`` are appended (and flushed) to ``DIR/eval.csv``
    as they come; if it already holds the final step the run is skipped (a partial one is
    restarted: no checkpoint).  The evaluation at step n follows ``agent.observe`` of step n,
    i.e. it sees the updates that step triggered.

How PFRL's ACER is driven.  ``pfrl.agents.ACER`` is an ``AsyncAgent``: ``act(obs)`` /
``observe(obs, reward, done, reset)`` for ONE env, no ``batch_act``; its parallelism is
Hogwild processes (``experiments.train_agent_async``).  This script is that runner with one
process, in-process: the agent's shared model and optimiser state are moved to shared
memory exactly as ``train_agent_async`` does (ACER asserts it at every update) and
``process_idx = 0``.  Our side must therefore be run with ``--num-envs 1`` (and
``--batch-size 1``, below) for a like-for-like comparison.  Gymnasium's
``terminated`` is passed as ``done`` and ``truncated`` as ``reset``, so a time-limit end
bootstraps from V(s_T) (``is_state_terminal`` false) as ours does.

Update cadence and counting (pfrl/agents/acer.py, ``_observe_train``): after every ``t_max``
env steps *or at an episode end* (done or reset), one on-policy update on the steps since
the last update (fewer than ``t_max`` at an episode end; the counter restarts there), then
``n_times_replay`` replay updates, each on ONE window: ``sample_episodes(1, t_max)`` picks a
stored episode uniformly (not weighted by length) and a uniform window of ``t_max``
consecutive steps inside it (the whole episode if shorter).  Every update is one optimiser
step on one window, the loss averaged over its steps (``normalize_loss_by_steps``).  So
there are (1 + n_times_replay) / t_max updates per env step, more on envs with short
episodes.  ``replay_start_size`` gates only the replay updates: they are skipped while the
buffer holds fewer transitions than that, counting *finished* episodes only (an episode
enters replay when it ends; capacity evicts whole oldest episodes once it holds more
transitions than ``capacity``).  On-policy updates run from the first segment on.
``--warmup W`` of ``learn`` (default 0) additionally switches off every update for the first
W steps (``disable_online_update`` and ``n_times_replay = 0``), like our ``--warmup-steps``
for a stochastic policy (acting with the initial policy, recording it in replay).

Matched with ours (offpolicy/agents/acer.py defaults):

* discrete: shared MLP torso 128-128 ReLU, softmax policy head and Q head (one output per
  action) on it: ``nn.Sequential(torso, ACERDiscreteActionHead(pi, q))``, PFRL's own idiom
  (examples/atari/train_acer_ale.py); gamma 0.99, t_max = k = 20, n_times_replay = 4,
  truncation c = 10, trust region on, delta = 1, average network alpha = 0.99, entropy weight
  beta = 1e-3, Q^ret for the policy gradient (``use_Q_opc=False``);
* continuous: policy/value MLP 128-128 ReLU with a tanh-squashed mean head and a V head on the
  same torso (ours: ``ContinuousNetwork``; ``--value-net separate`` gives V its own 128-128
  MLP instead, with PFRL's stock ``ACERContinuousActionHead``), fixed std 0.3
  (``GaussianHeadWithFixedCovariance(0.3)``), advantage A(s, a) MLP 128-128 ReLU on
  concat(s, a), the stochastic dueling network with n = 5 samples
  (``ACERContinuousActionHead(n=5)``), t_max = 50, n_times_replay = 4, c = 5, alpha =
  0.995, delta = 1, Q^opc for the policy gradient (``use_Q_opc=True``, Sec. 5 / App. B);
  actions: the Gaussian sample in [-1, 1]^m units is rescaled affinely to the env's Box and
  clipped to it (the replay keeps the unclipped sample, as ours does);
* both: RMSProp with eps inside the square root (``SharedRMSpropEpsInsideSqrt``, as optax's
  ``rmsprop`` default ``eps_in_sqrt=True``), lr 7e-4, decay 0.99, eps 1e-5; global-norm
  gradient clipping at 10 (``max_grad_norm``); critic loss weight 0.5 on 1/2 (Q^ret - Q)^2
  (PFRL's ``Q_loss_coef`` 0.5 on ``mse_loss / 2``; continuous also 1/2 (V^target - V)^2);
  replay capacity 100 000 transitions; the average network is updated after every update,
  replayed ones included; initialisation as ours (orthogonal, gain 1, zero biases; output
  layers gain 1e-2 for logits / mean, 1.0 for Q, V and A); the trust region acts on the
  distribution's statistics phi: the probability vector for discrete actions (the paper's and
  ours: the head builds ``Categorical(probs=softmax(logits))``, so ACER differentiates with
  respect to the probabilities; ``--categorical-param logits`` gives PFRL's stock
  ``SoftmaxCategoricalHead``, i.e. phi = logits), the mean for continuous actions.

Runtime shims (this process only; site-packages is not patched):

* ``import pfrl`` imports every subpackage, and ``pfrl.wrappers`` / ``pfrl.envs`` do
  ``import gym`` (pfrl/wrappers/cast_observation.py, line 1: ``ModuleNotFoundError: No module
  named 'gym'``) although ACER never touches gym.  If ``gym`` is not installed, ``gym``,
  ``gym.spaces`` and ``gym.wrappers`` are aliased to Gymnasium's modules before importing
  pfrl.  (Installing ``gym==0.26.2 --no-deps`` also imports, but gym 0.26 cannot step an env
  under NumPy 2: ``np.bool8`` in its passive checker; it is not needed here.)
* The fixed-std Gaussian: ``GaussianHeadWithFixedCovariance`` gives ``Normal(loc, 0.3)``,
  whose scale does not require grad, and ACER's trust region
  (``compute_loss_with_kl_constraint``) asserts ``param.requires_grad`` for every statistic
  returned by ``get_params_of_distribution`` (loc *and* scale), so stock PFRL 0.4.0 cannot
  run ACER with a fixed covariance and the trust region (AssertionError at
  pfrl/agents/acer.py:221).  ``pfrl.agents.acer.get_params_of_distribution`` is wrapped to
  drop statistics that do not require grad: the trust region then acts on the mean only, as
  in the paper and ours.  For every other distribution (categorical, learned std) it returns
  what the original does.
* ``RMSpropEpsInsideSqrt.step`` uses the deprecated ``addcmul_(Number, Tensor, Tensor)``
  overloads; torch 2.13 still accepts them (a UserWarning, silenced here, as are torch's
  warnings on ACER's ``float(v)`` of a grad tensor and its (1,)-vs-() ``mse_loss`` shapes).

Differences that remain (cannot be expressed with PFRL's ACER without patching it):

* one env, batch of one window per update (PFRL has no batched acting or learning): run ours
  with ``--num-envs 1 --batch-size 1`` to match; ours' defaults (4 envs, 16 windows) differ;
* PFRL also updates at every episode end (segments cut at episode boundaries, the t_max
  counter restarting); ours updates every k steps per env, segments spanning episode ends
  with masks.  Same cadence when episode lengths are multiples of k (HalfCheetah: 1000);
* n_times_replay is a fixed 4 replay updates per on-policy update; ours draws Poisson(4);
* replay windows: PFRL samples an episode uniformly, then a window inside it (never past the
  episode's end, the unfinished episode excluded); ours samples a start step uniformly over
  stored steps, windows reaching an episode's end are masked there;
* ``replay_start_size`` (default here 1000) gates only replay updates and counts finished
  episodes; ours has no replay start (updates start once replay holds a batch and the
  warm-up is over);
* entropy: PFRL adds beta * H after the trust-region projection (not projected); ours adds
  its gradient to g before the projection (as OpenAI baselines);
* SDN: PFRL draws n fresh u ~ pi for every evaluation of Q~ (once for the taken action, once
  for the bias-correction sample a'); ours shares one draw between them;
* gradient clipping: ``clip_l2_grad_norm_`` scales by max_norm / (norm + 1e-6) (optax: by
  max_norm / norm); the categorical's log-probabilities are torch's (probabilities clamped
  at float32 eps), ours clamp at 1e-12;
* computation: PFRL runs one forward pass per step (batch 1) and one backward per window, in
  Python; random streams differ.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import peer_common as pc
import torch
from torch import nn

DISTRIBUTIONS = ("pfrl", "torch", "gymnasium", "mujoco", "numpy", "gym")


# --------------------------------------------------------------------------- pfrl import


def import_pfrl() -> Any:
    """``import pfrl`` with the two runtime shims of the module docstring."""
    if importlib.util.find_spec("gym") is None:
        import gymnasium.spaces
        import gymnasium.wrappers

        sys.modules.setdefault("gym", gymnasium)
        sys.modules.setdefault("gym.spaces", gymnasium.spaces)
        sys.modules.setdefault("gym.wrappers", gymnasium.wrappers)
    warnings.filterwarnings("ignore", message=r"This overload of add", category=UserWarning)
    warnings.filterwarnings("ignore", message=r"Using a target size", category=UserWarning)
    warnings.filterwarnings("ignore", message=r"Converting a tensor with requires_grad",
                            category=UserWarning)
    import pfrl
    from pfrl.agents import acer

    if not getattr(acer.get_params_of_distribution, "_peers_shim", False):
        original = acer.get_params_of_distribution

        def params_requiring_grad(distrib: Any) -> tuple[torch.Tensor, ...]:
            return tuple(p for p in original(distrib) if p.requires_grad)

        params_requiring_grad._peers_shim = True  # type: ignore[attr-defined]
        acer.get_params_of_distribution = params_requiring_grad
    return pfrl


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class ACERSettings:
    """PFRL ACER hyper-parameters matched to ours (see the module docstring)."""

    hidden: tuple[int, ...] = (128, 128)
    activation: str = "relu"
    gamma: float = 0.99
    t_max: int = 20  # k; continuous: 50
    n_times_replay: int = 4  # replay ratio r
    truncation: float = 10.0  # c; continuous: 5
    use_trust_region: bool = True
    trust_region_delta: float = 1.0
    trust_region_alpha: float = 0.99  # average network; continuous: 0.995
    beta: float = 1e-3  # entropy weight
    pi_loss_coef: float = 1.0
    q_loss_coef: float = 0.5  # PFRL's Q_loss_coef on mse_loss / 2
    use_q_opc: bool = False  # continuous: True
    lr: float = 7e-4
    rmsprop_alpha: float = 0.99
    rmsprop_eps: float = 1e-5  # inside the square root
    max_grad_norm: float = 10.0
    replay_capacity: int = 100_000
    replay_start_size: int = 1000
    disable_online_update: bool = False
    policy_std: float = 0.3  # continuous, fixed
    sdn_samples: int = 5  # continuous
    value_net: str = "shared"  # continuous: V on the policy torso (ours) or its own MLP
    categorical_param: str = "probs"  # discrete: trust region on probabilities or logits
    policy_out_scale: float = 1e-2
    value_out_scale: float = 1.0


def settings_for(env: gym.Env[Any, Any], args: argparse.Namespace) -> ACERSettings:
    """The defaults for the env's action kind, then the command line's overrides."""
    s = ACERSettings()
    if isinstance(env.action_space, gym.spaces.Box):
        s = replace(s, t_max=50, truncation=5.0, trust_region_alpha=0.995, use_q_opc=True)
    elif not isinstance(env.action_space, gym.spaces.Discrete):
        raise SystemExit(f"unsupported action space {env.action_space}")
    over: dict[str, Any] = {}
    for field in ("t_max", "n_times_replay", "replay_start_size", "value_net",
                  "categorical_param"):
        value = getattr(args, field, None)
        if value is not None:
            over[field] = value
    if getattr(args, "no_online_update", False):
        over["disable_online_update"] = True
    return replace(s, **over)


def runtime_info() -> dict[str, Any]:
    return {
        **pc.runtime_info(),
        "gym_shim": "gym" in sys.modules and sys.modules["gym"] is gym,
    }


# --------------------------------------------------------------------------- model and agent


def _linear(n_in: int, n_out: int, gain: float) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _mlp(n_in: int, hidden: tuple[int, ...], activation: str) -> tuple[nn.Sequential, int]:
    acts = {"relu": nn.ReLU, "tanh": nn.Tanh}
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [_linear(n_in, h, 1.0), acts[activation]()]
        n_in = h
    return nn.Sequential(*layers), n_in


class ProbsCategoricalHead(nn.Module):
    """Like ``pfrl.policies.SoftmaxCategoricalHead`` but parameterised by probabilities, so
    ACER's trust region (``get_params_of_distribution`` returns ``Categorical._param``) acts
    on the probability vector, as in the paper (Sec. 3.3) and ours."""

    def forward(self, logits: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(probs=torch.softmax(logits, dim=-1))


def build_model(env: gym.Env[Any, Any], s: ACERSettings) -> nn.Module:
    import_pfrl()
    from pfrl.action_value import SingleActionValue
    from pfrl.agents.acer import ACERContinuousActionHead, ACERDiscreteActionHead
    from pfrl.nn import ConcatObsAndAction
    from pfrl.policies import GaussianHeadWithFixedCovariance, SoftmaxCategoricalHead
    from pfrl.q_functions import DiscreteActionValueHead

    obs_dim = int(np.prod(env.observation_space.shape))  # type: ignore[arg-type]
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        n = int(space.n)
        torso, width = _mlp(obs_dim, s.hidden, s.activation)
        cat_head = ProbsCategoricalHead() if s.categorical_param == "probs" \
            else SoftmaxCategoricalHead()
        head = ACERDiscreteActionHead(
            pi=nn.Sequential(_linear(width, n, s.policy_out_scale), cat_head),
            q=nn.Sequential(_linear(width, n, s.value_out_scale), DiscreteActionValueHead()),
        )
        return nn.Sequential(torso, head)

    m = int(np.prod(space.shape))  # type: ignore[arg-type]
    adv_mlp, adv_width = _mlp(obs_dim + m, s.hidden, s.activation)
    adv = nn.Sequential(ConcatObsAndAction(), adv_mlp, _linear(adv_width, 1, s.value_out_scale))
    gaussian = GaussianHeadWithFixedCovariance(scale=s.policy_std)
    if s.value_net == "separate":
        pi_mlp, w = _mlp(obs_dim, s.hidden, s.activation)
        v_mlp, wv = _mlp(obs_dim, s.hidden, s.activation)
        return ACERContinuousActionHead(
            pi=nn.Sequential(pi_mlp, _linear(w, m, s.policy_out_scale), nn.Tanh(), gaussian),
            v=nn.Sequential(v_mlp, _linear(wv, 1, s.value_out_scale)),
            adv=adv,
            n=s.sdn_samples,
        )

    class SharedTorsoSDN(ACERContinuousActionHead):
        """``ACERContinuousActionHead`` whose pi and V read one torso (ours'
        ``ContinuousNetwork``); the forward is PFRL's, the torso computed once.  (Two
        ``nn.Sequential`` holding the same torso would apply PFRL's average-network soft
        update twice to it: ``soft_copy_param`` walks the state_dict, which lists it twice.)"""

        def __init__(self) -> None:
            torso, w = _mlp(obs_dim, s.hidden, s.activation)
            super().__init__(
                pi=nn.Sequential(_linear(w, m, s.policy_out_scale), nn.Tanh(), gaussian),
                v=_linear(w, 1, s.value_out_scale),
                adv=adv,
                n=s.sdn_samples,
            )
            self.torso = torso

        def forward(self, obs: torch.Tensor) -> tuple[Any, Any, torch.Tensor]:
            z = self.torso(obs)
            action_distrib = self.pi(z)
            v = self.v(z)

            def evaluator(action: torch.Tensor) -> torch.Tensor:  # as PFRL's forward
                adv_mean = sum(
                    self.adv((obs, action_distrib.sample())) for _ in range(self.n)
                ) / self.n
                return v + self.adv((obs, action)) - adv_mean

            return action_distrib, SingleActionValue(evaluator), v

    return SharedTorsoSDN()


def _phi(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def build_agent(env: gym.Env[Any, Any], s: ACERSettings) -> Any:
    """PFRL's ACER on one env, its shared state in shared memory as train_agent_async does."""
    pfrl = import_pfrl()
    from pfrl.agents.acer import ACER
    from pfrl.replay_buffers import EpisodicReplayBuffer

    model = build_model(env, s)
    opt = pfrl.optimizers.SharedRMSpropEpsInsideSqrt(
        model.parameters(), lr=s.lr, eps=s.rmsprop_eps, alpha=s.rmsprop_alpha
    )
    agent = ACER(
        model,
        opt,
        t_max=s.t_max,
        gamma=s.gamma,
        replay_buffer=EpisodicReplayBuffer(s.replay_capacity),
        beta=s.beta,
        phi=_phi,
        pi_loss_coef=s.pi_loss_coef,
        Q_loss_coef=s.q_loss_coef,
        use_trust_region=s.use_trust_region,
        trust_region_alpha=s.trust_region_alpha,
        trust_region_delta=s.trust_region_delta,
        truncation_threshold=s.truncation,
        disable_online_update=s.disable_online_update,
        n_times_replay=s.n_times_replay,
        replay_start_size=s.replay_start_size,
        normalize_loss_by_steps=True,
        act_deterministically=True,  # evaluation only; training always samples
        max_grad_norm=s.max_grad_norm,
        use_Q_opc=s.use_q_opc,
    )
    # pfrl.experiments.train_agent_async(use_shared_memory=True), verbatim in effect
    for attr in agent.shared_attributes:
        value = getattr(agent, attr)
        if isinstance(value, nn.Module):
            for v in value.state_dict().values():
                v.share_memory_()
        elif isinstance(value, torch.optim.Optimizer):
            for state in value.state_dict()["state"].values():
                for v in state.values():
                    if isinstance(v, torch.Tensor):
                        v.share_memory_()
    agent.process_idx = 0
    return agent


def updates_made(agent: Any) -> int:
    """Optimiser steps so far (SharedRMSpropEpsInsideSqrt counts them per parameter)."""
    first = next(iter(agent.optimizer.param_groups[0]["params"]))
    return int(agent.optimizer.state[first]["step"])


def env_action(space: gym.Space[Any], action: Any) -> Any:
    """The agent's action for ``env.step``: an int, or [-1, 1]^m rescaled to the Box and
    clipped to it (unbounded dimensions pass through)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(action)
    a = np.asarray(action, dtype=np.float64).reshape(space.shape)
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)
    finite = np.isfinite(low) & np.isfinite(high)
    a = np.where(finite, low + (a + 1.0) * 0.5 * (high - low), a)
    return np.clip(a, low, high).astype(space.dtype)


class Trainer:
    """Steps one training env with PFRL's act/observe protocol (train_agent_async's loop,
    with Gymnasium's terminated -> done and truncated -> reset)."""

    def __init__(self, env: gym.Env[Any, Any], agent: Any, seed: int) -> None:
        self.env, self.agent = env, agent
        self.obs, _ = env.reset(seed=seed)
        self.steps = 0
        self.episodes = 0
        self.episode_return = 0.0
        self.last_return: float | None = None

    def step(self) -> None:
        action = self.agent.act(self.obs)
        obs, reward, terminated, truncated, _ = self.env.step(
            env_action(self.env.action_space, action))
        self.agent.observe(obs, float(reward), bool(terminated), bool(truncated))
        self.steps += 1
        self.episode_return += float(reward)
        if terminated or truncated:
            self.episodes += 1
            self.last_return, self.episode_return = self.episode_return, 0.0
            obs, _ = self.env.reset()
        self.obs = obs


def set_warmup(agent: Any, s: ACERSettings, on: bool) -> None:
    """No update at all while ``on`` (our --warmup-steps for a stochastic policy)."""
    agent.disable_online_update = True if on else s.disable_online_update
    agent.n_times_replay = 0 if on else s.n_times_replay


def setup(seed: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    pfrl = import_pfrl()
    pfrl.utils.set_random_seed(seed)


# --------------------------------------------------------------------------- throughput


def cmd_throughput(args: argparse.Namespace) -> None:
    steps, warmup = args.steps, args.warmup
    if steps <= 0 or warmup < 0:
        raise pc.UsageError("--steps must be > 0 and --warmup >= 0")
    setup(args.seed)
    env = gym.make(args.env)
    s = settings_for(env, args)
    agent = build_agent(env, s)
    trainer = Trainer(env, agent, args.seed)
    t0 = time.perf_counter()
    while trainer.steps < warmup:
        trainer.step()
    replay_active = len(agent.replay_buffer) >= s.replay_start_size
    u0 = updates_made(agent)
    t_warm = time.perf_counter()
    while trainer.steps < warmup + steps:
        trainer.step()
    t_end = time.perf_counter()
    updates = updates_made(agent) - u0
    seconds = t_end - t_warm
    pc.emit(
        {
            "lib": "pfrl",
            "algo": "acer",
            "env": args.env,
            "steps": steps,
            "warmup": warmup,
            "seed": args.seed,
            "steps_per_s": steps / seconds,
            "seconds": seconds,
            "updates": updates,
            "updates_per_step": updates / steps,
            "replay_active": replay_active,
            "replay_transitions": len(agent.replay_buffer),
            "episodes": trainer.episodes,
            "total_seconds": t_end - t0,
            "config": asdict(s),
            **runtime_info(),
            "versions": pc.versions(DISTRIBUTIONS),
        }
    )


# --------------------------------------------------------------------------- learn


def evaluate(agent: Any, env: gym.Env[Any, Any], episodes: int, seed_base: int) -> np.ndarray:
    """Undiscounted returns of ``episodes`` deterministic episodes (PFRL's eval mode:
    argmax / Gaussian mean); the training episode in progress is left untouched."""
    with agent.eval_mode():
        return pc.evaluate(env, episodes, seed_base,
                           lambda obs: env_action(env.action_space, agent.act(obs)),
                           agent.observe)


def cmd_learn(args: argparse.Namespace) -> None:
    run_dir = Path(args.run_dir)
    if args.steps <= 0 or args.eval_every <= 0 or args.eval_episodes <= 0 or args.warmup < 0:
        raise pc.UsageError("--steps, --eval-every and --eval-episodes must be > 0, --warmup >= 0")
    env = gym.make(args.env)
    s = settings_for(env, args)
    settings = pc.learn_settings("pfrl", "acer", args, asdict(s))
    if pc.skip_finished(run_dir, settings, args.steps, "pfrl", args.seed):
        return

    # Fresh start (a partial eval.csv from a killed run is discarded: no checkpoint).
    setup(args.seed)
    csv_path = pc.start_run(run_dir, settings, pc.versions(DISTRIBUTIONS), runtime_info())

    eval_env = gym.make(args.env)
    agent = build_agent(env, s)
    trainer = Trainer(env, agent, args.seed)
    set_warmup(agent, s, args.warmup > 0)
    means: list[float] = []
    t0 = time.perf_counter()
    while trainer.steps < args.steps:
        trainer.step()
        n = trainer.steps
        if n == args.warmup:
            set_warmup(agent, s, False)
        if n % args.eval_every == 0 or n == args.steps:
            returns = evaluate(agent, eval_env, args.eval_episodes,
                               args.seed + pc.EVAL_SEED_OFFSET)
            wall = time.perf_counter() - t0
            mean, std = pc.record_eval(csv_path, n, returns, wall)
            means.append(mean)
            pc.log(f"[{n}] return {mean:.1f} +- {std:.1f}  updates {updates_made(agent)}  "
                f"replay {len(agent.replay_buffer)}  ({wall:.0f}s)")
    seconds = time.perf_counter() - t0
    pc.emit(
        {
            **pc.learn_summary("pfrl", args.seed, means, run_dir, seconds),
            "updates": updates_made(agent),
            "skipped": False,
            "versions": pc.versions(DISTRIBUTIONS),
        }
    )


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--lib", choices=("pfrl",), default="pfrl", help="(only pfrl)")
        p.add_argument("--env", default="CartPole-v1")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--t-max", dest="t_max", type=int, default=None,
                       help="k (default: 20 discrete, 50 continuous)")
        p.add_argument("--replay-ratio", dest="n_times_replay", type=int, default=None,
                       help="n_times_replay (default 4)")
        p.add_argument("--replay-start", dest="replay_start_size", type=int, default=None,
                       help="replay_start_size: replay updates wait for this many "
                            "transitions of finished episodes (default 1000)")
        p.add_argument("--no-online-update", action="store_true",
                       help="disable_online_update: replay updates only")
        p.add_argument("--value-net", dest="value_net", choices=("shared", "separate"),
                       default=None, help="continuous: V on the policy torso (default, ours) "
                       "or its own MLP (PFRL's stock ACERContinuousActionHead)")
        p.add_argument("--categorical-param", dest="categorical_param",
                       choices=("probs", "logits"), default=None,
                       help="discrete: trust region on probabilities (default, ours) or on "
                            "logits (PFRL's SoftmaxCategoricalHead)")

    return pc.build_parser(
        __doc__,
        common,
        cmd_throughput=cmd_throughput,
        throughput_help="env steps/s of ACER after warm-up, learning on",
        throughput_warmup_help="untimed steps (learning on)",
        cmd_learn=cmd_learn,
        learn_help="train ACER with periodic deterministic evaluation",
        learn_warmup=dict(
            default=0, help="first steps without any update (acting with the initial policy)"
        ),
    )


def main(argv: list[str] | None = None) -> None:
    pc.run_cli(build_parser(), argv)


if __name__ == "__main__":
    main()
