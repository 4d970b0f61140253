"""ActionSpec: what the agent sees of an action space, and the map to and from the env.

Four kinds cover every family of the library:

* ``continuous``: a Box. The agent works in [-1, 1]^m; ``to_env`` rescales to [low, high].
* ``discrete``: a Discrete(n). The agent's action is an integer index in [0, n).
* ``multi_discrete``: a MultiDiscrete(nvec). One index per component.
* ``hybrid``: a Tuple or Dict of the kinds above (e.g. a discrete choice plus its continuous
  parameters, as in AQL's hybrid control). Components keep their order (Dict: sorted keys).

For replay every action is stored as one flat float32 vector of length ``flat_dim``:
continuous values as they are, discrete indices as floats; ``flatten``/``unflatten`` convert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from offpolicy.errors import OffpolicyError

KINDS = ("continuous", "discrete", "multi_discrete", "hybrid")


@dataclass(frozen=True)
class ActionSpec:
    kind: str
    shape: tuple[int, ...] = ()
    low: np.ndarray | None = None  # continuous: env bounds
    high: np.ndarray | None = None
    n: int = 0  # discrete: number of actions
    nvec: tuple[int, ...] = ()  # multi_discrete
    components: tuple[ActionSpec, ...] = ()  # hybrid
    keys: tuple[str, ...] | None = None  # hybrid from a Dict space
    env_shape: tuple[int, ...] | None = None  # multi_discrete: the env's nvec shape
    _scale: np.ndarray | None = field(default=None, repr=False, compare=False)
    _offset: np.ndarray | None = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ construction
    @staticmethod
    def continuous(low: Any, high: Any) -> ActionSpec:
        low = np.asarray(low, dtype=np.float64)
        high = np.asarray(high, dtype=np.float64)
        if low.shape != high.shape or low.ndim != 1:
            raise OffpolicyError(f"continuous action bounds must be 1-D, got {low.shape}")
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise OffpolicyError(
                "continuous actions need finite bounds to rescale to [-1, 1]; "
                "wrap the env with gymnasium.wrappers.ClipAction or RescaleAction first"
            )
        if np.any(high <= low):
            raise OffpolicyError("continuous action bounds need high > low in every dimension")
        return ActionSpec(
            "continuous",
            shape=low.shape,
            low=low.astype(np.float32),
            high=high.astype(np.float32),
            _scale=((high - low) / 2.0).astype(np.float32),
            _offset=((high + low) / 2.0).astype(np.float32),
        )

    @staticmethod
    def from_gym(space: gym.Space) -> ActionSpec:
        if isinstance(space, gym.spaces.Box):
            if len(space.shape) != 1:
                raise OffpolicyError(f"Box action spaces must be 1-D, got shape {space.shape}")
            return ActionSpec.continuous(space.low, space.high)
        if isinstance(space, gym.spaces.Discrete):
            if int(space.start) != 0:
                raise OffpolicyError("Discrete action spaces must start at 0")
            return ActionSpec("discrete", shape=(), n=int(space.n))
        if isinstance(space, gym.spaces.MultiDiscrete):
            nvec = tuple(int(v) for v in np.asarray(space.nvec).ravel())
            return ActionSpec("multi_discrete", shape=(len(nvec),), nvec=nvec,
                              env_shape=tuple(space.nvec.shape))
        if isinstance(space, gym.spaces.Tuple):
            comps = tuple(ActionSpec.from_gym(s) for s in space.spaces)
            return ActionSpec._hybrid(comps, None)
        if isinstance(space, gym.spaces.Dict):
            keys = tuple(sorted(space.spaces))
            comps = tuple(ActionSpec.from_gym(space.spaces[k]) for k in keys)
            return ActionSpec._hybrid(comps, keys)
        raise OffpolicyError(
            f"unsupported action space {type(space).__name__}; "
            "valid: Box, Discrete, MultiDiscrete, Tuple/Dict of those"
        )

    @staticmethod
    def _hybrid(comps: tuple[ActionSpec, ...], keys: tuple[str, ...] | None) -> ActionSpec:
        if any(c.kind == "hybrid" for c in comps):
            raise OffpolicyError("nested hybrid action spaces are not supported")
        return ActionSpec("hybrid", shape=(sum(c.flat_dim for c in comps),), components=comps,
                          keys=keys)

    # ------------------------------------------------------------------ properties
    @property
    def flat_dim(self) -> int:
        """Length of the float32 vector that stores one action in replay."""
        if self.kind == "discrete":
            return 1
        if self.kind == "hybrid":
            return sum(c.flat_dim for c in self.components)
        return int(self.shape[0])

    @property
    def dim(self) -> int:
        """Number of continuous action dimensions (continuous kind)."""
        return int(self.shape[0]) if self.kind == "continuous" else 0

    # ------------------------------------------------------------------ conversions
    def to_env(self, action: Any) -> Any:
        """Agent action -> env action (continuous: [-1, 1] -> [low, high], clipped)."""
        if self.kind == "continuous":
            a = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
            # float32 rounding can land an ulp outside [low, high]: clip to the env's box
            return np.clip(a * self._scale + self._offset, self.low, self.high)
        if self.kind == "discrete":
            return int(np.asarray(action).reshape(()))
        if self.kind == "multi_discrete":
            return np.asarray(action, dtype=np.int64).reshape(self.env_shape or self.shape)
        parts = self.split(np.asarray(action, dtype=np.float32))
        env_parts = [c.to_env(p if c.kind != "discrete" else p[0]) for c, p in zip(self.components,
                                                                                 parts)]
        return dict(zip(self.keys, env_parts)) if self.keys is not None else tuple(env_parts)

    def from_env(self, action: Any) -> np.ndarray:
        """Env action -> the agent's flat float32 vector (inverse of ``to_env``)."""
        if self.kind == "continuous":
            return ((np.asarray(action, np.float32) - self._offset) / self._scale).astype(
                np.float32)
        if self.kind == "hybrid":
            items = [action[k] for k in self.keys] if self.keys is not None else list(action)
            return np.concatenate([c.from_env(a) for c, a in zip(self.components, items)])
        return np.asarray(action, dtype=np.float32).reshape(self.flat_dim)

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Split a flat hybrid action (last axis) into its components' flat parts."""
        sizes = np.cumsum([c.flat_dim for c in self.components])[:-1]
        return np.split(flat, sizes, axis=-1)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A uniformly random action, as the agent's flat float32 vector."""
        if self.kind == "continuous":
            return rng.uniform(-1.0, 1.0, self.shape).astype(np.float32)
        if self.kind == "discrete":
            return np.array([rng.integers(self.n)], dtype=np.float32)
        if self.kind == "multi_discrete":
            return np.array([rng.integers(n) for n in self.nvec], dtype=np.float32)
        return np.concatenate([c.sample(rng) for c in self.components])

    def describe(self) -> str:
        if self.kind == "continuous":
            return f"continuous({self.shape[0]})"
        if self.kind == "discrete":
            return f"discrete({self.n})"
        if self.kind == "multi_discrete":
            return f"multi_discrete({list(self.nvec)})"
        return "hybrid(" + ", ".join(c.describe() for c in self.components) + ")"
