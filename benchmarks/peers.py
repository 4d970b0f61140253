#!/usr/bin/env python
"""Peer baselines: DDPG, TD3, SAC and DQN from Stable-Baselines3 (PyTorch) and SBX (JAX), and
SB3's PPO.

This script runs the *peer* libraries side by side with our own library, for
the benchmarks.  It is executed **only** with the separate benchmark
interpreter (``.venv-bench/bin/python``, made by ``make bench-venv``), which holds
``stable-baselines3==2.9.2``, ``sbx-rl==0.28.0``, torch, jax and
``gymnasium[mujoco]``.  It deliberately does not import ``offpolicy``: the two
stacks live in different virtual environments so that neither pins the
other's dependencies.

Subcommands (each prints exactly one JSON object on the last line of stdout;
progress goes to stderr):

``throughput --lib sb3|sbx --env HalfCheetah-v5 --steps N --warmup W --seed S``
    Runs ``learn(W + N)`` and reports env steps per second over the N
    post-warm-up steps only (every one of them is one env step plus one
    gradient step).  ``steps_per_s_steady`` additionally skips the first few
    updates, which for SBX include XLA compilation.  Not for PPO.

``learn --lib sb3|sbx --env HalfCheetah-v5 --steps 100000 --seed S --run-dir DIR``
    Trains for ``--steps`` env steps and every ``--eval-every`` steps runs
    ``--eval-episodes`` deterministic episodes (no exploration noise) on a
    separate evaluation env; episode ``i`` is reset with
    ``seed + 10_000 + i``, so every evaluation sees the same start states.
    Rows are appended (and flushed) to ``DIR/eval.csv`` as they come, so a
    killed run keeps its partial curve, and after each evaluation the model,
    its optimizers, the replay and the RNG states are saved (without pickle)
    to ``DIR/checkpoint.npz``: the same command reruns a killed run from its
    last evaluation (a new training episode), and skips a finished one.
    On HalfCheetah, Hopper and Walker2d the final model's posture (is the
    body on its back? ``peer_common.posture``) goes to ``DIR/posture.json``.
    ``--warmup`` (random-action steps before the first update) defaults to
    10 000; PPO has none and refuses one.

DDPG configuration, chosen to match the DDPG baseline of the ACE paper
(Zhang & Yao, 2019), which follows Lillicrap et al. (2016):

* actor and critic MLPs with 400-300 hidden units and tanh activations
  (``net_arch=[400, 300]``; ``torch.nn.Tanh`` for SB3, ``flax.linen.tanh`` for
  SBX, whose policies take an activation *function* rather than a module
  class); the actor output is squashed by tanh in both libraries;
* batch size 64, replay buffer of 1e6 transitions, Polyak rate tau = 1e-3,
  gamma = 0.99, one gradient step per env step;
* Ornstein-Uhlenbeck exploration noise with theta = 0.15, sigma = 0.2
  (SB3's ``OrnsteinUhlenbeckActionNoise``, default dt = 1e-2 as in Lillicrap
  et al. and DeepRL); the noise is reset at each episode end;
* ``learning_starts = warmup``: during the warm-up SB3/SBX take uniformly
  random actions and do not train, like the paper's random warm-up;
* learning rate 1e-3 for actor *and* critic.  SB3's DDPG takes a single
  learning rate; SBX's DDPG takes ``learning_rate`` (actor) and
  ``qf_learning_rate`` (critic), both set to the same value for parity.  The
  paper's 1e-4 actor rate is therefore *not* reproduced; the value used is
  recorded in every output.

Known differences from the paper that the peers cannot express: the critic
takes the action at its input layer (not at the second layer), there is no L2
weight decay on the critic, and weights use each framework's default
initialisation (PyTorch: Kaiming-uniform; Flax: LeCun-normal) instead of the
orthogonal / x1e-3 output-layer scheme of the ACE authors' code that we use.

Time-limit truncation: both libraries use SB3's ``ReplayBuffer`` with
``handle_timeout_termination=True`` (the default); ``DummyVecEnv`` sets
``info["TimeLimit.truncated"] = truncated and not terminated`` and the buffer
samples ``dones * (1 - timeouts)``, so truncated episodes bootstrap.  SBX's
DDPG is TD3 with ``policy_delay=1``, one critic, and target-policy noise
clipped to 0, i.e. plain DDPG.

TD3, SAC and DQN (``--algo td3|sac|dqn``): SB3's defaults, which our ``--preset sb3``
reproduces (``peer_baselines.BASELINES``): TD3 400-300 relu, lr 1e-3, batch 256, tau 0.005,
policy delay 2, target noise 0.2 clipped at 0.5, plus Gaussian exploration N(0, 0.1^2) (SB3's
default has no exploration noise; the TD3 paper, the rl-zoo and ours use 0.1); SAC 256-256
relu, lr 3e-4, batch 256, tau 0.005, entropy coefficient learned from 1.0 with target -|A|; DQN
64-64 relu, lr 1e-4, batch 32, one update per 4 env steps, target copied every 10 000 steps,
epsilon 1 -> 0.05 over the first 10% of the run, gradient norm clipped at 10. ``throughput``
times the issue's protocol instead (``peer_baselines.THROUGHPUT``): TD3 and SAC with 256-256
networks and batch 256, DQN 64-64 with batch 32, every one with one update per env step.

PPO (``--algo ppo``, ``--lib sb3`` and ``learn`` only; SBX's PPO is not wired in: a usage
error), ``PPOConfig``: the settings of App. D of Novati & Koumoutsakos (2019), the refer-1m
grid's ``sb3-ppo`` (benchmarks/suites/refer-1m.preregistration.md), where SB3 can express them:

* gamma 0.995, GAE lambda 0.97, clip range 0.2, rollouts of 2048 env steps (one env), each
  followed by 10 epochs of minibatches of 64;
* separate policy and value MLPs, 64-64 tanh (``net_arch=dict(pi=[64, 64], vf=[64, 64])``,
  ``torch.nn.Tanh``); the policy is a Gaussian with a state-independent log std (from 0);
* one learning rate for both networks, 3e-4 annealed as ``eta / (1 + 5e-7 t)`` with ``t``
  the env steps so far (``peer_common.AnnealedRate``: SB3 hands a schedule
  ``progress_remaining``, so ``t = (1 - progress_remaining) * T`` with T the run's length,
  also after a resume, where SB3 adds the step it resumes at to ``learn()``'s total; SB3
  sets the rate before each update, at the step its rollout ended). SB3 has one optimiser:
  the paper's 1e-4 (policy) / 3e-4 (value) split cannot be expressed;
* observations standardised by running statistics (App. B's role):
  ``VecNormalize(norm_obs=True, norm_reward=False)`` (clipped at +-10, SB3's default),
  updated during training; evaluation standardises with the same statistics, frozen (read,
  never updated), and acts with the Gaussian's mean clipped to the action bounds;
* SB3's defaults for what the paper does not give: entropy coefficient 0, value-loss
  coefficient 0.5 (one loss, one Adam), gradient norm clipped at 0.5, advantages
  standardised per minibatch, orthogonal initialisation; time-limit truncations bootstrap
  from the value of the final observation; sampled actions are clipped to the bounds before
  the env sees them.

A PPO run stops at exactly ``--steps`` env steps (SB3 would finish the rollout past them and
train on it). It also writes ``DIR/train.csv`` (``peer_common.TRAIN_HEADER``, as our
library's train.csv names them): every 1000 env steps the running count of finished
training episodes and the mean undiscounted return of those finished since the previous row
(nan when none did), from the raw rewards (Monitor under VecNormalize; ``norm_reward=False``
anyway): the paper's own measure. Its checkpoint holds the policy and value networks, the
optimiser, the VecNormalize statistics, the counters, the RNG states and train.csv's running
count; it has no replay. A resumed PPO run starts a fresh rollout (and a new episode): the
partial rollout of the killed run is not saved, so its steps are collected again and the
episode it cut never ends in train.csv.

Evaluation timing: SB3 calls ``callback.on_step()`` right after the env step
and before that step's gradient update, so the evaluation at step ``k`` sees
the updates made after steps ``warmup + 1 .. k - 1``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import peer_common as pc
import torch
from peer_baselines import BASELINES, LIBS, THROUGHPUT, Lib, make_baseline
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.noise import OrnsteinUhlenbeckActionNoise

DISTRIBUTIONS = (
    "stable_baselines3",
    "sbx-rl",
    "torch",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "gymnasium",
    "mujoco",
    "numpy",
)


@dataclass(frozen=True)
class DDPGConfig:
    """DDPG hyper-parameters shared by both peers (see the module docstring)."""

    hidden: tuple[int, ...] = (400, 300)
    activation: str = "tanh"
    batch_size: int = 64
    buffer_size: int = 1_000_000
    learning_rate: float = 1e-3  # actor; SB3 has a single rate for both nets
    critic_learning_rate: float = 1e-3  # SBX's qf_learning_rate; SB3 uses learning_rate
    tau: float = 1e-3
    gamma: float = 0.99
    train_freq: int = 1
    gradient_steps: int = 1
    ou_theta: float = 0.15
    ou_sigma: float = 0.2
    ou_dt: float = 1e-2  # SB3 default, as in Lillicrap et al. / DeepRL
    device: str = "cpu"


@dataclass(frozen=True)
class PPOConfig:
    """SB3's PPO with the settings of App. D of Novati & Koumoutsakos (2019), where SB3 can
    express them (see the module docstring); the rest are SB3's defaults."""

    gamma: float = 0.995
    gae_lambda: float = 0.97
    clip_range: float = 0.2
    n_steps: int = 2048  # env steps per rollout
    n_epochs: int = 10
    batch_size: int = 64
    pi_hidden: tuple[int, ...] = (64, 64)  # separate policy and value networks
    vf_hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    learning_rate: float = 3e-4  # eta of eta / (1 + lr_anneal * t), t the env steps so far
    lr_anneal: float = 5e-7
    norm_obs: bool = True  # VecNormalize(norm_obs=True, norm_reward=False)
    clip_obs: float = 10.0  # VecNormalize's default
    ent_coef: float = 0.0  # SB3's defaults from here on
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantage: bool = True
    log_std_init: float = 0.0
    device: str = "cpu"


def make_model(lib: Lib, env: gym.Env[Any, Any], cfg: DDPGConfig, warmup: int,
               seed: int) -> BaseAlgorithm:
    """Build the peer's DDPG with ``cfg`` on ``env``."""
    n_actions = int(np.prod(env.action_space.shape))  # type: ignore[arg-type]
    noise = OrnsteinUhlenbeckActionNoise(
        mean=np.zeros(n_actions),
        sigma=cfg.ou_sigma * np.ones(n_actions),
        theta=cfg.ou_theta,
        dt=cfg.ou_dt,
    )
    common: dict[str, Any] = dict(
        buffer_size=cfg.buffer_size,
        learning_starts=warmup,
        batch_size=cfg.batch_size,
        tau=cfg.tau,
        gamma=cfg.gamma,
        train_freq=cfg.train_freq,
        gradient_steps=cfg.gradient_steps,
        action_noise=noise,
        verbose=0,
        seed=seed,
        device=cfg.device,
    )
    if cfg.activation != "tanh":
        raise ValueError(f"unsupported activation {cfg.activation!r}")
    if lib == "sb3":
        from stable_baselines3 import DDPG as SB3DDPG

        if cfg.critic_learning_rate != cfg.learning_rate:
            raise ValueError("SB3 DDPG has a single learning rate for actor and critic")
        return SB3DDPG(
            "MlpPolicy",
            env,
            learning_rate=cfg.learning_rate,
            policy_kwargs=dict(net_arch=list(cfg.hidden), activation_fn=torch.nn.Tanh),
            **common,
        )
    if lib == "sbx":
        import flax.linen as nn
        from sbx import DDPG as SBXDDPG

        return SBXDDPG(
            "MlpPolicy",
            env,
            learning_rate=cfg.learning_rate,
            qf_learning_rate=cfg.critic_learning_rate,
            policy_kwargs=dict(net_arch=list(cfg.hidden), activation_fn=nn.tanh),
            **common,
        )
    raise ValueError(f"unknown lib {lib!r}")


def make_ppo(env: gym.Env[Any, Any], cfg: PPOConfig, seed: int,
             total_steps: int) -> BaseAlgorithm:
    """SB3's PPO with ``cfg`` on ``env``, for a run of ``total_steps`` env steps (the
    learning rate's annealing reads it: :class:`peer_common.AnnealedRate`). The env is
    wrapped as ``VecNormalize(DummyVecEnv([Monitor(env)]), norm_reward=False)``: Monitor,
    under the normalisation, sees the raw rewards (``info["episode"]``, train.csv)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    if cfg.activation != "tanh":
        raise ValueError(f"unsupported activation {cfg.activation!r}")
    venv = VecNormalize(DummyVecEnv([lambda: Monitor(env)]), norm_obs=cfg.norm_obs,
                        norm_reward=False, clip_obs=cfg.clip_obs, gamma=cfg.gamma)
    return PPO(
        "MlpPolicy",
        venv,
        learning_rate=pc.AnnealedRate(cfg.learning_rate, cfg.lr_anneal, total_steps),
        n_steps=cfg.n_steps,
        batch_size=cfg.batch_size,
        n_epochs=cfg.n_epochs,
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        clip_range=cfg.clip_range,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        normalize_advantage=cfg.normalize_advantage,
        policy_kwargs=dict(net_arch=dict(pi=list(cfg.pi_hidden), vf=list(cfg.vf_hidden)),
                           activation_fn=torch.nn.Tanh, log_std_init=cfg.log_std_init),
        verbose=0,
        seed=seed,
        device=cfg.device,
    )


def runtime_info(lib: Lib) -> dict[str, Any]:
    """Threading / device facts that affect timings."""
    info = pc.runtime_info()
    if lib == "sbx":
        import jax

        info["jax_devices"] = [str(d) for d in jax.devices()]
    return info


# --------------------------------------------------------------------------- throughput


class _Clock(BaseCallback):
    """Records wall-clock times at the end of warm-up, at a later step and at the end."""

    def __init__(self, warmup: int, steady_from: int) -> None:
        super().__init__(verbose=0)
        self.warmup = warmup
        self.steady_from = steady_from
        self.t_warm: float | None = None
        self.t_steady: float | None = None
        self.t_end: float | None = None

    def _on_training_start(self) -> None:
        if self.warmup == 0:
            self.t_warm = time.perf_counter()
        if self.steady_from == 0:
            self.t_steady = time.perf_counter()

    def _on_step(self) -> bool:
        if self.num_timesteps == self.warmup:
            self.t_warm = time.perf_counter()
        if self.num_timesteps == self.steady_from:
            self.t_steady = time.perf_counter()
        return True

    def _on_training_end(self) -> None:
        self.t_end = time.perf_counter()


def config_of(algo: str, protocol: dict) -> Any:
    """The hyper-parameters of ``algo``: DDPG's, PPO's, or a baseline's from ``protocol``
    (``BASELINES`` to learn, ``THROUGHPUT`` to time)."""
    if algo == "ppo":
        return PPOConfig()
    return DDPGConfig() if algo == "ddpg" else protocol[algo]


def build(args: argparse.Namespace, env: gym.Env[Any, Any], warmup: int, cfg: Any
          ) -> BaseAlgorithm:
    """The peer's ``args.algo`` with the hyper-parameters ``cfg`` (:func:`config_of`).

    Its logger writes nowhere: left to itself, every ``learn`` makes an empty
    ``$TMPDIR/SB3-<date>`` folder (SB3's and SBX's default logger), one per run of a grid."""
    if args.algo == "ddpg":
        model = make_model(args.lib, env, cfg, warmup, args.seed)
    elif args.algo == "ppo":
        model = make_ppo(env, cfg, args.seed, args.steps)
    else:
        model = make_baseline(args.lib, args.algo, env, cfg, warmup, args.seed, args.variant)
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def cmd_throughput(args: argparse.Namespace) -> None:
    lib: Lib = args.lib
    steps: int = args.steps
    warmup: int = args.warmup
    if args.update != "own" or args.init != "own" or args.variant != "own":
        raise pc.UsageError("--update, --init and --variant apply to learn only")
    if args.algo == "ppo":
        raise pc.UsageError("throughput times one update per env step; --algo ppo is learn only")
    if steps <= 0 or warmup < 0:
        raise pc.UsageError("--steps must be > 0 and --warmup >= 0")
    # Skip the first updates (XLA compilation for SBX) for the steady-state rate.
    skip = min(100, steps // 10)
    env = gym.make(args.env)
    cfg = config_of(args.algo, THROUGHPUT)
    model = build(args, env, warmup, cfg)
    clock = _Clock(warmup, warmup + skip)
    t0 = time.perf_counter()
    model.learn(total_timesteps=warmup + steps, callback=clock)
    t1 = time.perf_counter()
    assert clock.t_warm is not None and clock.t_steady is not None and clock.t_end is not None
    seconds = clock.t_end - clock.t_warm
    pc.emit(
        {
            "lib": lib,
            "algo": args.algo,
            "env": args.env,
            "steps": steps,
            "warmup": warmup,
            "seed": args.seed,
            "steps_per_s": steps / seconds,
            "seconds": seconds,
            "steps_per_s_steady": (steps - skip) / (clock.t_end - clock.t_steady),
            "steady_skip": skip,
            "total_seconds": t1 - t0,
            "learning_rate": cfg.learning_rate,
            "config": asdict(cfg),
            **runtime_info(lib),
            "versions": pc.versions(DISTRIBUTIONS),
        }
    )


# --------------------------------------------------------------------------- learn


def deterministic_act(model: BaseAlgorithm) -> Callable[[Any], Any]:
    """The model's deterministic action (no exploration noise; PPO's: the Gaussian's mean,
    clipped to the action bounds) for a raw observation, standardised first with the
    training env's VecNormalize statistics where the model has one (PPO), frozen: this reads
    them and never updates them."""
    vec_normalize = model.get_vec_normalize_env()
    if vec_normalize is None:
        return lambda obs: model.predict(obs, deterministic=True)[0]
    return lambda obs: model.predict(vec_normalize.normalize_obs(obs), deterministic=True)[0]


def evaluate(model: BaseAlgorithm, env: gym.Env[Any, Any], episodes: int,
             seed_base: int) -> np.ndarray:
    """Undiscounted returns of ``episodes`` deterministic (noise-free) episodes."""
    return pc.evaluate(env, episodes, seed_base, deterministic_act(model))


class _EvalCallback(BaseCallback):
    """Evaluates every ``eval_every`` env steps and appends a row to ``eval.csv``."""

    def __init__(
        self,
        eval_env: gym.Env[Any, Any],
        csv_path: Path,
        eval_every: int,
        episodes: int,
        total_steps: int,
        seed_base: int,
        *,
        means: list[float] | None = None,
        wall_offset: float = 0.0,
        checkpoint: Callable[[int, float], None] | None = None,
        stop_at_end: bool = False,
    ) -> None:
        super().__init__(verbose=0)
        self.eval_env = eval_env
        self.csv_path = csv_path
        self.eval_every = eval_every
        self.episodes = episodes
        self.total_steps = total_steps
        self.seed_base = seed_base
        self.t_start = time.perf_counter()
        self.means: list[float] = list(means or [])  # a resumed run's earlier evaluations
        self.wall_offset = wall_offset  # the wall time of the run before it was resumed
        self.checkpoint = checkpoint  # called after each evaluation but the last
        # PPO: end learn() at total_steps (SB3 would finish the rollout, past the run's end,
        # and train on it)
        self.stop_at_end = stop_at_end

    def _on_training_start(self) -> None:
        self.t_start = time.perf_counter()

    def wall(self) -> float:
        return self.wall_offset + time.perf_counter() - self.t_start

    def _on_step(self) -> bool:
        n = self.num_timesteps
        if n % self.eval_every == 0 or n == self.total_steps:
            returns = evaluate(self.model, self.eval_env, self.episodes, self.seed_base)
            wall = self.wall()
            mean, std = pc.record_eval(self.csv_path, n, returns, wall)
            self.means.append(mean)
            pc.log(f"[{n}] return {mean:.1f} +- {std:.1f}  ({wall:.0f}s)")
            if self.checkpoint is not None and n < self.total_steps:
                self.checkpoint(n, wall)
        return not (self.stop_at_end and n >= self.total_steps)


class _TrainLog(BaseCallback):
    """PPO's ``train.csv`` (``peer_common.TRAIN_HEADER``): every ``every`` env steps, the
    running count of finished training episodes and the mean undiscounted return of those
    finished since the previous row, from the raw rewards Monitor adds up
    (``info["episode"]["r"]``). ``episodes`` and ``pending`` (returns not yet in a row) come
    from a resumed run's checkpoint."""

    def __init__(self, csv_path: Path, every: int, wall: Callable[[], float],
                 episodes: int = 0, pending: Any = ()) -> None:
        super().__init__(verbose=0)
        self.csv_path = csv_path
        self.every = every
        self.wall = wall
        self.episodes = episodes
        self.pending: list[float] = [float(r) for r in pending]

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                self.episodes += 1
                self.pending.append(float(info["episode"]["r"]))
        if self.num_timesteps % self.every == 0:
            pc.record_train(self.csv_path, self.num_timesteps, self.wall(), self.episodes,
                            self.pending)
            self.pending = []
        return True

    def state(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "pending": np.asarray(self.pending, np.float64)}


# --------------------------------------------------------------------------- checkpoints
#
# What a peer model needs to continue (pc.save_checkpoint writes it without pickle): SB3's
# state dicts (policy with its target networks, the optimizers) and SAC's log entropy
# coefficient; SBX's flax train states (parameters, targets, optimizer states) and PRNG keys;
# for both the replay buffer's filled part (off-policy algorithms), the VecNormalize statistics
# (PPO), the step, update and episode counters, and the NumPy, torch and action-space RNG
# states. The training env is not saved: a resumed run starts a new episode (SB3 resets the env
# when learn() starts without a last observation), and PPO a new rollout (the partial one is
# not saved).

_BUFFER_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
_COUNTERS = ("num_timesteps", "_n_updates", "_episode_num", "_n_calls")


def _jax_holders(model: BaseAlgorithm) -> dict[str, Any]:
    """SBX: the objects whose flax train states and PRNG keys make up its learning state."""
    return {"model": model, "policy": model.policy}


def _is_jax_state(value: Any) -> bool:
    import jax
    from flax.training.train_state import TrainState

    return isinstance(value, (TrainState, jax.Array))


_RMS_FIELDS = ("mean", "var", "count")


def model_state(lib: Lib, model: BaseAlgorithm) -> dict[str, Any]:
    """Everything of ``model`` that a resumed run needs (see above), as a tree of arrays."""
    state: dict[str, Any] = {
        "counters": {k: getattr(model, k) for k in _COUNTERS if hasattr(model, k)},
        "numpy_rng": np.random.get_state(),
        "action_space_rng": model.action_space.np_random.bit_generator.state,
        "torch_rng": torch.get_rng_state(),
    }
    rb = getattr(model, "replay_buffer", None)  # off-policy algorithms only
    if rb is not None:
        filled = rb.buffer_size if rb.full else rb.pos
        state.update(buffer={k: getattr(rb, k)[:filled] for k in _BUFFER_FIELDS
                             if getattr(rb, k, None) is not None},
                     buffer_pos=rb.pos, buffer_full=rb.full)
    vec_normalize = model.get_vec_normalize_env()  # PPO's observation statistics
    if vec_normalize is not None:
        state["vec_normalize"] = {  # arrays, also where SB3 holds a scalar (ret_rms's moments)
            name: {k: np.asarray(getattr(getattr(vec_normalize, name), k), np.float64)
                   for k in _RMS_FIELDS}
            for name in ("obs_rms", "ret_rms")}
    if lib == "sb3":
        state["parameters"] = model.get_parameters()
        if getattr(model, "log_ent_coef", None) is not None:
            state["log_ent_coef"] = model.log_ent_coef
    else:
        from flax import serialization

        state["jax"] = {
            f"{owner}.{name}": serialization.to_state_dict(value)
            for owner, obj in _jax_holders(model).items()
            for name, value in vars(obj).items() if _is_jax_state(value)}
    return state


def restore_model(lib: Lib, model: BaseAlgorithm, state: dict[str, Any]) -> None:
    """Put ``state`` (from :func:`model_state`) into a freshly built ``model``."""
    if "buffer" in state:
        rb = model.replay_buffer
        assert rb is not None
        for k, v in state["buffer"].items():
            getattr(rb, k)[: len(v)] = v
        rb.pos, rb.full = int(state["buffer_pos"]), bool(state["buffer_full"])
    if "vec_normalize" in state:
        vec_normalize = model.get_vec_normalize_env()
        assert vec_normalize is not None
        for name, saved in state["vec_normalize"].items():
            rms = getattr(vec_normalize, name)
            rms.mean, rms.var = np.array(saved["mean"]), np.array(saved["var"])
            rms.count = float(saved["count"])  # ret_rms: unused (norm_reward=False), kept whole
    for k, v in state["counters"].items():
        setattr(model, k, int(v))
    np.random.set_state(state["numpy_rng"])
    model.action_space.np_random.bit_generator.state = state["action_space_rng"]
    torch.set_rng_state(state["torch_rng"])
    if lib == "sb3":
        model.set_parameters(state["parameters"], exact_match=True, device=model.device)
        if "log_ent_coef" in state:
            with torch.no_grad():
                model.log_ent_coef.copy_(state["log_ent_coef"])
    else:
        import jax.numpy as jnp
        from flax import serialization

        holders = _jax_holders(model)
        for key, saved in state["jax"].items():
            owner, name = key.split(".", 1)
            obj = holders[owner]
            current = getattr(obj, name)
            if isinstance(saved, np.ndarray):  # a PRNG key
                setattr(obj, name, jnp.asarray(saved, dtype=current.dtype))
            else:
                restored = serialization.from_state_dict(current, saved)
                setattr(obj, name, jax_tree_as(restored, current))


def jax_tree_as(tree: Any, like: Any) -> Any:
    """``tree`` with every leaf a JAX array of the dtype of the same leaf of ``like``."""
    import jax
    import jax.numpy as jnp

    return jax.tree_util.tree_map(lambda a, b: jnp.asarray(a, dtype=jnp.asarray(b).dtype),
                                  tree, like)


def _as_tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array))


TRAIN_LOG_EVERY = 1000  # PPO's train.csv: one row per this many env steps (ours: --log-every)
DEFAULT_WARMUP = 10_000  # learn's --warmup of the off-policy algorithms; PPO has none


def cmd_learn(args: argparse.Namespace) -> None:
    cfg = config_of(args.algo, BASELINES)
    lib: Lib = args.lib
    run_dir = Path(args.run_dir)
    ppo = args.algo == "ppo"
    if args.steps <= 0 or args.eval_every <= 0 or args.eval_episodes <= 0:
        raise pc.UsageError("--steps, --eval-every and --eval-episodes must be > 0")
    if ppo and lib != "sb3":
        raise pc.UsageError("--algo ppo is defined for --lib sb3 only")
    if args.warmup is None:
        args.warmup = 0 if ppo else DEFAULT_WARMUP
    if ppo and args.warmup != 0:
        raise pc.UsageError("PPO has no warm-up (it learns from its first rollout): "
                            "leave --warmup out")

    hybrid_update = args.update == "ours"
    sb3_ablation = lib == "sb3" and args.algo in ("td3", "sac")  # benchmarks/hybrid.py's
    if hybrid_update and not sb3_ablation:
        raise pc.UsageError("--update ours is defined for --lib sb3 --algo td3 or sac only")
    if args.init != "own" and not sb3_ablation:
        raise pc.UsageError("--init ours is defined for --lib sb3 --algo td3 or sac only")
    if args.variant != "own" and (lib != "sbx" or args.algo != "td3"):
        raise pc.UsageError("--variant sb3 is defined for --lib sbx --algo td3 only")
    settings = pc.learn_settings(lib, args.algo, args, asdict(cfg))
    if hybrid_update or args.init != "own":  # recorded only then: plain runs keep theirs
        settings.update(update=args.update, init=args.init)
    if args.variant != "own":
        settings.update(variant=args.variant)
    if pc.skip_finished(run_dir, settings, args.steps, lib, args.seed):
        return

    env = gym.make(args.env)
    eval_env = gym.make(args.env)
    model = build(args, env, args.warmup, cfg)
    hybrid = None
    if hybrid_update:
        from hybrid import OurUpdate

        hybrid = OurUpdate(model, args.env, args.seed, args.init, args.algo)
    elif args.init == "ours":
        from hybrid import our_initial_draw

        our_initial_draw(model, args.env, args.seed, args.algo)

    train_log: _TrainLog | None = None  # PPO's train.csv, made below

    def full_state() -> dict[str, Any]:
        state = model_state(lib, model)
        if train_log is not None:
            state["train_log"] = train_log.state()
        return state if hybrid is None else {**state, "ours": hybrid.state_tree()}

    # A killed run continues from the checkpoint of its last evaluation; otherwise (none, or
    # one written with other settings) it starts afresh.
    resumed = pc.load_checkpoint(run_dir, settings, _as_tensor)
    if resumed is None:
        csv_path = pc.start_run(run_dir, settings, pc.versions(DISTRIBUTIONS), runtime_info(lib))
        means: list[float] = []
        wall_offset, start = 0.0, 0
    else:
        meta, state = resumed
        start, wall_offset = int(meta["step"]), float(meta["wall_time"])
        csv_path, means = pc.continue_run(run_dir, start)
        restore_model(lib, model, state)
        if hybrid is not None:
            hybrid.restore(state["ours"])
        pc.log(f"resuming {run_dir} at step {start} (its checkpoint)")
    callback = _EvalCallback(
        eval_env,
        csv_path,
        args.eval_every,
        args.eval_episodes,
        args.steps,
        args.seed + pc.EVAL_SEED_OFFSET,
        means=means,
        wall_offset=wall_offset,
        checkpoint=lambda step, wall: pc.save_checkpoint(
            run_dir, step, wall, settings, full_state()),
        stop_at_end=ppo,
    )
    callbacks: list[BaseCallback] = [callback]
    if ppo:  # the training episodes' returns, the paper's own measure
        if resumed is None:
            train_log = _TrainLog(pc.start_train_csv(run_dir), TRAIN_LOG_EVERY, callback.wall)
        else:
            saved = resumed[1]["train_log"]
            train_log = _TrainLog(run_dir / pc.TRAIN_CSV, TRAIN_LOG_EVERY, callback.wall,
                                  int(saved["episodes"]), saved["pending"])
        callbacks.insert(0, train_log)  # a step's row before its evaluation and checkpoint
    model.learn(total_timesteps=args.steps - start, callback=CallbackList(callbacks),
                reset_num_timesteps=resumed is None)
    pc.end_run(run_dir)
    if args.env.startswith(pc.PLANAR_ENVS):  # the final actor's posture (its model is not kept)
        pose = pc.posture(eval_env, min(5, args.eval_episodes), args.seed + pc.EVAL_SEED_OFFSET,
                          deterministic_act(model))
        (run_dir / pc.POSTURE_FILE).write_text(json.dumps(pose, indent=2) + "\n")
    pc.emit({**pc.learn_summary(lib, args.seed, callback.means, run_dir, callback.wall()),
             "skipped": False, "resumed_at": start or None})


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--lib", choices=LIBS, required=True)
        p.add_argument("--algo", choices=("ddpg", *BASELINES, "ppo"), default="ddpg",
                       help="ppo: --lib sb3 and learn only")
        p.add_argument("--env", default="HalfCheetah-v5")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--update", choices=("own", "ours"), default="own",
                       help="learn only, --lib sb3 --algo td3 or sac: 'ours' runs our jitted "
                       "update inside SB3's loop (benchmarks/hybrid.py, issue 33's ablations)")
        p.add_argument("--init", choices=("own", "ours"), default="own",
                       help="learn only, --lib sb3 --algo td3 or sac: start from SB3's "
                       "initial weights (own) or from our initialiser's draw (ours)")
        p.add_argument("--variant", choices=("own", "sb3"), default="own",
                       help="learn only, --lib sbx --algo td3: 'sb3' is SBX's TD3 with SB3's "
                       "initial law, delayed targets and Q_1 actor loss (benchmarks/"
                       "sbx_variant.py, issue 33's reverse ablation)")

    return pc.build_parser(
        __doc__,
        common,
        cmd_throughput=cmd_throughput,
        throughput_help="env steps/s after warm-up",
        throughput_warmup_help="untimed random-action steps",
        cmd_learn=cmd_learn,
        learn_help="train with periodic deterministic evaluation",
        learn_warmup=dict(default=None, help="random-action steps before the first update "
                          f"(default {DEFAULT_WARMUP}; --algo ppo: none, and none allowed)"),
    )


def main(argv: list[str] | None = None) -> None:
    pc.run_cli(build_parser(), argv)


if __name__ == "__main__":
    main()
