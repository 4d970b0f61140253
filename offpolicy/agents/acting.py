"""Acting: the jitted policy on the host CPU, and host-side exploration noise.

Acting costs microseconds only if it never waits on a device round trip, so the policy runs on
the host CPU device (parameters are copied there when the default backend is a GPU), except in
the pipelined loop, whose parameters change every env step (:class:`HostPolicy`). Keys for
stochastic policies are split inside the jitted call, never per step in Python.

Exploration comes in two forms:

* stochastic policies sample inside ``policy(params, obs, key, explore=True)`` with the actors
  of ``offpolicy.distributions`` (Gaussian, truncated Gaussian, categorical, epsilon-greedy,
  hybrid) and record what they sampled;
* deterministic policies (DDPG, ACE) return their greedy action and the collector adds
  :class:`HostNoise` (Ornstein-Uhlenbeck or Gaussian, one process per env copy, in NumPy,
  seeded, with its state in checkpoints). OU noise is correlated over the steps of an episode,
  which is why it lives on the host next to the episode bookkeeping. With ``record=True`` the
  noise records the behaviour density of the action it produced: a Gaussian with mean = the
  greedy action and std = sigma (used by ReF-ER's DDPG, where mu and pi are such Gaussians).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from offpolicy.agents.base import CORE_STATE, NEXT_CORE_STATE, CoreSpec
from offpolicy.jax_setup import host_device
from offpolicy.networks import Context

NOISE_KINDS = ("ou", "gaussian", "none")


@dataclass(frozen=True)
class NoiseSpec:
    """Additive exploration noise of a deterministic policy."""

    kind: str = "ou"
    sigma: float = 0.2
    theta: float = 0.15  # OU mean reversion
    dt: float = 1e-2  # OU time step (as in DeepRL and SB3)


class HostNoise:
    """Additive noise for ``num_envs`` env copies, [K, m] per call, clipped to the box [-1, 1].

    OU (Lillicrap et al. 2016): x += -theta x dt + sigma sqrt(dt) N(0, 1), reset per episode.
    Gaussian: sigma N(0, 1), independent per step. ``none``: zeros.
    """

    def __init__(self, spec: NoiseSpec, dim: int, num_envs: int, rng: np.random.Generator):
        if spec.kind not in NOISE_KINDS:
            raise ValueError(f"unknown noise {spec.kind!r} (valid: {', '.join(NOISE_KINDS)})")
        self.spec, self.dim, self.num_envs, self.rng = spec, dim, num_envs, rng
        self.x = np.zeros((num_envs, dim), np.float64)

    def reset(self, env: int | None = None) -> None:
        """Restart the process of one env copy (episode end) or of all."""
        if env is None:
            self.x[:] = 0.0
        else:
            self.x[env] = 0.0

    def sample(self) -> np.ndarray:
        s = self.spec
        if s.kind == "ou":
            self.x = (self.x - s.theta * self.x * s.dt
                      + s.sigma * np.sqrt(s.dt) * self.rng.standard_normal(self.x.shape))
            return self.x.astype(np.float32)
        if s.kind == "gaussian":
            return (s.sigma * self.rng.standard_normal(self.x.shape)).astype(np.float32)
        return np.zeros(self.x.shape, np.float32)

    def __call__(self, action: np.ndarray) -> np.ndarray:
        """Greedy actions [K, m] -> explored actions in [-1, 1]."""
        a = action + self.sample()
        np.clip(a, -1.0, 1.0, out=a)
        return a

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "noise_x": self.x.tolist()}

    def load_state_dict(self, d: dict) -> None:
        self.rng.bit_generator.state = d["rng"]
        x = np.asarray(d["noise_x"], np.float64)
        self.x = x.reshape(self.num_envs, self.dim) if x.size == self.x.size else self.x * 0


def key_to_list(key: jax.Array) -> list[int]:
    """A raw ``jax.random.PRNGKey`` as JSON-friendly integers (checkpoints' meta.json)."""
    return np.asarray(key).astype(np.uint32).tolist()


class HostPolicy:
    """``agent.policy`` jitted on the host CPU: ``act(params, obs[B, ...], explore)`` returns
    NumPy (action, behaviour info). Stochastic policies draw from a key held here, split inside
    the jitted call (the returned key replaces it: no Python split per step).

    ``on_default_device=True`` (the pipelined loop) jits it on JAX's default device instead:
    there the parameters change after every env step, and copying them to the host each time
    (a wait for the update, then one transfer per leaf) cost more on a GPU than the act's own
    round trip (H200: 227 env steps/s pipelined with host acting against 504 with the default
    loop, ``throughput_baselines_h200.md``). On a CPU backend both are the same device."""

    def __init__(self, policy: Callable, seed: int, on_default_device: bool = False):
        self._dev = jax.devices()[0] if on_default_device else host_device()
        self._same_device = self._dev == jax.devices()[0]  # where the parameters are

        def act(params, obs, key, explore):
            key, sub = jax.random.split(key)
            action, info = policy(params, obs, sub, explore)
            return action, info, key

        self._act = jax.jit(act, static_argnums=3)
        self.key = jax.device_put(jax.random.PRNGKey(seed), self._dev)

    def host_params(self, params: Any) -> Any:
        return params if self._same_device else jax.device_put(params, self._dev)

    def act(self, params: Any, obs: np.ndarray, explore: bool
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        action, info, self.key = self._act(params, obs, self.key, explore)
        return np.asarray(action), {k: np.asarray(v) for k, v in info.items()}

    def state_dict(self) -> dict:
        return {"key": key_to_list(self.key)}

    def load_state_dict(self, d: dict) -> None:
        self.key = jax.device_put(np.asarray(d["key"], np.uint32), self._dev)


class HostMemory:
    """What a recurrent policy remembers of each of ``num_envs`` episodes in progress, on the
    host (NumPy), and the :class:`~offpolicy.networks.Context` it acts on
    (:class:`~offpolicy.agents.base.CoreSpec`):

    * ``zero``: the last ``window`` observations of each env copy (time-major [W, K, ...]) and
      how many of them belong to its episode; the core restarts from zero at the first one;
    * ``stored``: each copy's core state before its current observation ([K, S]), which the
      collector records as the behaviour field ``core_state``; the policy returns the state
      after the step, which :meth:`advance` keeps.

    :meth:`reset` at an episode's start (terminated or truncated alike), before its first
    observation is seen; :meth:`observe` once per new observation.
    """

    def __init__(self, spec: CoreSpec, num_envs: int):
        self.spec, self.num_envs = spec, num_envs
        self.carry = np.zeros((num_envs, spec.state_size if spec.stored else 0), np.float32)
        self.recent: np.ndarray | None = None  # zero: [W, K, ...], from the first observation
        self.count = np.zeros(num_envs, np.int64)  # observations of the episode so far

    def reset(self, env: int | None = None) -> None:
        """Env copy ``env`` (all when None) starts an episode."""
        which = slice(None) if env is None else env
        self.count[which] = 0
        if self.spec.stored:
            self.carry[which] = 0.0

    def observe(self, obs: np.ndarray):
        """The context for observations ``obs`` [K, ...] (normalised as the policy takes
        them), each the next of its env copy's episode."""
        k = self.num_envs
        self.count += 1
        if self.spec.stored:
            return Context(np.asarray(obs, np.float32)[None], np.zeros((1, k), bool),
                           self.carry.copy(), np.zeros(k, np.int32), np.zeros(k, np.int32))
        w = self.spec.window
        if self.recent is None:
            self.recent = np.zeros((w, *np.shape(obs)), np.float32)
        self.recent = np.roll(self.recent, -1, axis=0)
        self.recent[-1] = obs
        reset = np.zeros((w, k), bool)
        reset[w - np.minimum(self.count, w), np.arange(k)] = True
        return Context(self.recent.copy(), reset, self.carry,
                       np.zeros(k, np.int32), np.full(k, w - 1, np.int32), window=w)

    def recorded(self) -> dict[str, np.ndarray]:
        """What replay stores of the memory with the step about to be taken: the state before
        it (stored), nothing (zero)."""
        return {CORE_STATE: self.carry.copy()} if self.spec.stored else {}

    def advance(self, info: dict) -> dict:
        """Keep the state after the step from a policy's ``info`` (stored), and return the
        info without it."""
        if NEXT_CORE_STATE not in info:
            return info
        info = dict(info)
        self.carry = np.array(info.pop(NEXT_CORE_STATE), np.float32)  # writable: reset()
        return info
