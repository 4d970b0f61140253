"""Host-side acting: a jitted deterministic policy on the CPU plus exploration noise in NumPy.

Acting costs microseconds only if it never waits on a device round trip, so the policy runs on
the host CPU device (parameters are copied there when the default backend is a GPU) and the
noise processes are NumPy, seeded, with their state in checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from offpolicy.envs.platform import host_device


class OUNoise:
    """Ornstein-Uhlenbeck process x += theta (mu - x) dt + sigma sqrt(dt) N(0, 1), reset per
    episode (Lillicrap et al. 2016; dt = 1e-2 as in DeepRL and SB3)."""

    def __init__(self, dim: int, sigma: float, theta: float, dt: float, rng: np.random.Generator):
        self.dim, self.sigma, self.theta, self.dt, self.rng = dim, sigma, theta, dt, rng
        self.x = np.zeros(dim, np.float64)

    def reset(self) -> None:
        self.x = np.zeros(self.dim, np.float64)

    def __call__(self) -> np.ndarray:
        self.x = (self.x - self.theta * self.x * self.dt
                  + self.sigma * np.sqrt(self.dt) * self.rng.standard_normal(self.dim))
        return self.x.astype(np.float32)


class GaussianNoise:
    def __init__(self, dim: int, sigma: float, rng: np.random.Generator):
        self.dim, self.sigma, self.rng = dim, sigma, rng
        self.x = np.zeros(dim, np.float64)

    def reset(self) -> None:
        pass

    def __call__(self) -> np.ndarray:
        return (self.sigma * self.rng.standard_normal(self.dim)).astype(np.float32)


class NoNoise(GaussianNoise):
    def __call__(self) -> np.ndarray:
        return np.zeros(self.dim, np.float32)


def make_noise(kind: str, dim: int, sigma: float, theta: float, dt: float,
               rng: np.random.Generator):
    if kind == "ou":
        return OUNoise(dim, sigma, theta, dt, rng)
    if kind == "gaussian":
        return GaussianNoise(dim, sigma, rng)
    return NoNoise(dim, 0.0, rng)


class DeterministicActor:
    """Acts with ``policy(params, obs[B, ...]) -> (action[B, m] in [-1, 1], info)`` plus noise.

    ``act`` takes one observation and returns (action, info) as NumPy; ``act_batch`` takes a
    batch (evaluation runs its episodes side by side) and never adds noise.
    """

    def __init__(self, policy: Callable, noise, seed: int):
        dev = host_device()
        self._on_host = jax.default_backend() == "cpu"
        self._dev = dev
        self._policy = jax.jit(policy)
        self.noise = noise
        self.rng = noise.rng if noise is not None else np.random.default_rng(seed)

    def host_params(self, params: Any) -> Any:
        return params if self._on_host else jax.device_put(params, self._dev)

    def act(self, params: Any, obs: np.ndarray, explore: bool) -> tuple[np.ndarray, dict]:
        action, info = self._policy(params, obs[None])
        action = np.asarray(action)[0]
        if explore:
            action = self.explore(action)
        return action, {k: np.asarray(v)[0] for k, v in info.items()}

    def explore(self, action: np.ndarray) -> np.ndarray:
        """Add exploration noise to a greedy action; clip to the action box [-1, 1]."""
        a = action + self.noise()
        np.clip(a, -1.0, 1.0, out=a)
        return a

    def act_batch(self, params: Any, obs: np.ndarray) -> np.ndarray:
        action, _ = self._policy(params, obs)
        return np.asarray(action)

    def reset(self) -> None:
        self.noise.reset()

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "noise_x": self.noise.x.tolist()}

    def load_state_dict(self, d: dict) -> None:
        self.rng.bit_generator.state = d["rng"]
        self.noise.x = np.asarray(d["noise_x"], np.float64)
