"""ActionSpec: what the agent sees of an action space, and the map to and from the env.

Four kinds cover every family of the library:

* ``continuous``: a Box. The agent works in [-1, 1]^m; ``to_env`` rescales to [low, high].
* ``discrete``: a Discrete(n). The agent's action is an integer index in [0, n).
* ``multi_discrete``: a MultiDiscrete(nvec). One index per component.
* ``hybrid``: a Tuple or Dict of the kinds above (e.g. a discrete choice plus its continuous
  parameters, as in AQL's hybrid control). Components keep their order (Dict: sorted keys).

For replay every action is stored as one flat float32 vector of length ``flat_dim``:
continuous values as they are, discrete indices as floats; ``flatten``/``unflatten`` convert.

``discretized(K)`` (``--discretize K``) turns every continuous dimension into K evenly spaced
levels of the agent's box: a ``multi_discrete`` component with nvec (K,) * m whose ``to_env``
maps level i to -1 + 2 i / (K - 1) and then through the original rescaling to [low, high].

``sub_actions()`` lists the sub-actions in the flat vector's order (``("discrete", n)`` or
``("continuous", 1)``): what AQL's autoregressive proposal walks over.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from offpolicy.errors import OffpolicyError

KINDS = ("continuous", "discrete", "multi_discrete", "hybrid")


class SubAction(NamedTuple):
    """One sub-action of the flat action: ``("discrete", n)`` (an index in [0, n), stored as a
    float) or ``("continuous", 1)`` (a value in [-1, 1]). Compares equal to the plain tuple."""

    kind: str
    n: int


@dataclass(frozen=True)
class ActionSpec:
    kind: str
    shape: tuple[int, ...] = ()
    low: np.ndarray | None = None  # continuous (and discretized): the env's bounds
    high: np.ndarray | None = None
    n: int = 0  # discrete: number of actions
    nvec: tuple[int, ...] = ()  # multi_discrete
    components: tuple[ActionSpec, ...] = ()  # hybrid
    keys: tuple[str, ...] | None = None  # hybrid from a Dict space
    env_shape: tuple[int, ...] | None = None  # multi_discrete: the env's nvec shape
    levels: int = 0  # multi_discrete made by discretized(K) from a continuous Box: K; else 0
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

    def discretized(self, levels: int) -> ActionSpec:
        """Every continuous dimension (also inside a hybrid) as ``levels`` = K evenly spaced
        values of the agent's box; K = 0 returns the spec unchanged, as does a spec without a
        continuous part.

        A continuous(m) component becomes ``multi_discrete`` with nvec (K,) * m that keeps the
        Box's bounds: ``to_env`` maps level i to a = -1 + 2 i / (K - 1) in [-1, 1] (K = 5:
        {-1, -0.5, 0, 0.5, 1}) and a through the continuous rescaling to [low, high];
        ``from_env`` maps an env action to the nearest level. A hybrid keeps its layout with
        each continuous component replaced (Tuple(Discrete(3), Box(3)), K = 5 ->
        hybrid(discrete(3), multi_discrete([5, 5, 5]))).

        Why a transformation of the spec and not a Gymnasium ``ActionWrapper``: the map from
        the agent's action to the env's is already the spec's job (``to_env``), and every env
        the run creates (the probe, the training copies, also in ``AsyncVectorEnv``
        subprocesses, the evaluation envs) steps with the run's one spec, so discretizing the
        spec discretizes them all the same way with the envs left untouched; a wrapper would
        have to be applied at each of those construction sites (and rebuild Tuple/Dict spaces
        around the Box it replaces), and ``agent.act`` on a loaded run would return the
        wrapper's level indices instead of the env's actions.
        """
        levels = check_discretize(levels)
        if levels == 0:
            return self
        if self.kind == "continuous":
            m = int(self.shape[0])
            return ActionSpec("multi_discrete", shape=(m,), low=self.low, high=self.high,
                              nvec=(levels,) * m, levels=levels, _scale=self._scale,
                              _offset=self._offset)
        if self.kind == "hybrid":
            return replace(self, components=tuple(c.discretized(levels)
                                                  for c in self.components))
        return self

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

    @property
    def level_values(self) -> np.ndarray:
        """A discretized component's K levels in the agent's box, -1 + 2 i / (K - 1), float32."""
        if not self.levels:
            raise OffpolicyError(f"{self.describe()} is not a discretized continuous space")
        return (-1.0 + 2.0 * np.arange(self.levels) / (self.levels - 1)).astype(np.float32)

    def sub_actions(self) -> tuple[SubAction, ...]:
        """The sub-actions in the flat vector's order: ``("discrete", n)`` for a Discrete(n)
        and for each component of a multi_discrete (discretized ones included), ``("continuous",
        1)`` for each dimension of a Box; a hybrid concatenates its components'."""
        if self.kind == "continuous":
            return (SubAction("continuous", 1),) * int(self.shape[0])
        if self.kind == "discrete":
            return (SubAction("discrete", self.n),)
        if self.kind == "multi_discrete":
            return tuple(SubAction("discrete", n) for n in self.nvec)
        return tuple(s for c in self.components for s in c.sub_actions())

    def sub_action_indices(self) -> tuple[int, ...]:
        """The flat index each sub-action occupies. Every kind stores one sub-action as exactly
        one float (a discrete index, one continuous dimension) in ``sub_actions()`` order, so
        this is 0..D-1 with D = ``flat_dim`` = ``len(sub_actions())``: a flat action is the
        proposal's vector of sub-actions as it is, no gather needed."""
        return tuple(range(self.flat_dim))

    # ------------------------------------------------------------------ conversions
    def to_env(self, action: Any) -> Any:
        """Agent action -> env action (continuous: [-1, 1] -> [low, high], clipped;
        discretized: level index -> its value in [-1, 1] -> [low, high])."""
        if self.kind == "continuous":
            a = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
            # float32 rounding can land an ulp outside [low, high]: clip to the env's box
            return np.clip(a * self._scale + self._offset, self.low, self.high)
        if self.kind == "discrete":
            return int(np.asarray(action).reshape(()))
        if self.kind == "multi_discrete" and self.levels:  # level i -> -1 + 2 i / (K - 1)
            i = np.clip(np.rint(np.asarray(action, np.float32)), 0, self.levels - 1)
            a = self.level_values[i.astype(np.int64).reshape(self.shape)]
            return np.clip(a * self._scale + self._offset, self.low, self.high)
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
        if self.kind == "multi_discrete" and self.levels:  # the nearest level
            a = (np.asarray(action, np.float32).reshape(self.shape) - self._offset) / self._scale
            return np.clip(np.rint((a + 1.0) * (self.levels - 1) / 2.0), 0,
                           self.levels - 1).astype(np.float32)
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


def check_discretize(levels: Any) -> int:
    """``--discretize K``: 0 (off) or K >= 2 levels per continuous dimension."""
    if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or levels == 1 \
            or levels < 0:
        raise OffpolicyError(f"--discretize: must be 0 (off) or a number of levels >= 2, "
                             f"got {levels!r}")
    return int(levels)
