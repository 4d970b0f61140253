"""Candidate actions for Q networks over any ActionSpec (AQL, Van de Wiele et al. 2020, Sec. 4).

AQL evaluates Q(s, a) on many candidate actions per state: N actions proposed by mu(a|s) and
M drawn uniformly from A_1 x ... x A_D (Algorithm 2; N = 100, M = 400 on the Control Suite).
These helpers work on the library's flat float32 actions (``ActionSpec``: one float per
sub-action, in ``spec.sub_actions()`` order, a discrete index as a float, a continuous value
in [-1, 1]):

* :func:`uniform_actions` draws actions uniformly over every sub-action (jittable);
* :func:`embed` turns flat actions into the Q network's action input (jittable): one-hot for
  every discrete sub-action, the value for every continuous one; a parameterised hybrid
  action is embedded as the one-hot of its discrete choice plus only that choice's parameter;
* :func:`enumerate_actions` lists every action of a fully discrete spec (NumPy; exact Q over
  small spaces).

The spec is a static Python object: close over it (``jax.jit(lambda k: uniform_actions(k,
spec, (64,)))``); every layout decision is made at trace time, and the traced work is one
random draw, or one gather and one comparison, whatever the number of sub-actions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError

HYBRID_EMBEDDINGS = ("chosen", "full")


def sub_action_sizes(spec: ActionSpec) -> np.ndarray:
    """n per sub-action: the number of choices of a discrete one, 0 for a continuous one."""
    return np.array([n if kind == "discrete" else 0 for kind, n in spec.sub_actions()],
                    np.int64)


def uniform_actions(key: jax.Array, spec: ActionSpec, shape: int | Sequence[int] = ()
                    ) -> jax.Array:
    """Uniformly random flat actions, float32 [*shape, flat_dim].

    Each sub-action independently: a discrete one (also a discretized one) uniform over its
    indices 0..n-1 (as floats), a continuous one uniform in [-1, 1).
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    n = sub_action_sizes(spec).astype(np.float32)
    u = jax.random.uniform(key, (*shape, n.size), jnp.float32)  # [0, 1)
    # floor(u n) is uniform over 0..n-1; the minimum guards u n rounding up to n in float32
    index = jnp.minimum(jnp.floor(u * n), np.maximum(n - 1.0, 0.0))
    return jnp.where(n > 0, index, 2.0 * u - 1.0)


def _parameterised(spec: ActionSpec) -> tuple[int, int] | None:
    """``(k, K)`` when ``spec`` is a parameterised action: hybrid(discrete(k), P) with one
    parameter per discrete choice, P = continuous(k) (K = 0) or its discretization
    multi_discrete([K] * k) (K levels); else None."""
    if spec.kind != "hybrid" or len(spec.components) != 2:
        return None
    choice, param = spec.components
    if choice.kind != "discrete":
        return None
    if param.kind == "continuous" and param.dim == choice.n:
        return choice.n, 0
    if param.kind == "multi_discrete" and param.levels and len(param.nvec) == choice.n:
        return choice.n, param.levels
    return None


def _check_hybrid(hybrid: str) -> None:
    if hybrid not in HYBRID_EMBEDDINGS:
        raise OffpolicyError(f"invalid hybrid embedding {hybrid!r} "
                             f"(valid: {', '.join(HYBRID_EMBEDDINGS)})")


def embed_dim(spec: ActionSpec, hybrid: str = "chosen") -> int:
    """Width of :func:`embed`'s output: sum of n over discrete sub-actions plus the number of
    continuous ones; for a parameterised hybrid with ``"chosen"``, k + 1 (k + K discretized)."""
    _check_hybrid(hybrid)
    layout = _parameterised(spec)
    if hybrid == "chosen" and layout is not None:
        k, levels = layout
        return k + (levels or 1)
    return int(np.sum(np.maximum(sub_action_sizes(spec), 1)))


def _full_layout(spec: ActionSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per embedding slot: the sub-action it reads, the index it one-hot encodes, and whether
    it is a one-hot slot (else the continuous value is copied)."""
    source, level, one_hot = [], [], []
    for j, n in enumerate(sub_action_sizes(spec)):
        width = max(int(n), 1)
        source += [j] * width
        level += list(range(width))
        one_hot += [n > 0] * width
    return (np.array(source, np.int32), np.array(level, np.float32),
            np.array(one_hot, bool))


def embed(spec: ActionSpec, flat_actions: jax.Array, hybrid: str = "chosen") -> jax.Array:
    """The Q network's action input for flat actions [..., flat_dim] -> float32 [..., E],
    E = :func:`embed_dim`.

    Sub-actions in order: a discrete one (Discrete, each MultiDiscrete component, each
    discretized dimension) as its one-hot, a continuous one as its value. Hybrid actions:

    * ``"chosen"`` (default) for a parameterised action, hybrid(discrete(k), P) with P one
      parameter per choice (continuous(k), or multi_discrete([K] * k) after ``--discretize
      K``; Platform's layout): the one-hot of the choice c plus only P_c (its
      value, or its K-level one-hot). Feeding every parameter would make Q depend on the
      parameters of choices not taken, false dependencies the network has to learn away.
    * ``"full"``: every sub-action, as for any other spec.

    For every other hybrid layout ``"chosen"`` is the same as ``"full"``: without one
    parameter per choice there is no chosen parameter to single out.
    """
    _check_hybrid(hybrid)
    x = jnp.asarray(flat_actions, jnp.float32)
    if x.shape[-1:] != (spec.flat_dim,):
        raise OffpolicyError(f"embed: {spec.describe()} actions have {spec.flat_dim} values, "
                             f"got shape {tuple(x.shape)}")
    layout = _parameterised(spec)
    if hybrid == "chosen" and layout is not None:
        k, levels = layout
        choice = jnp.clip(jnp.round(x[..., 0]).astype(jnp.int32), 0, k - 1)
        chosen = jnp.take_along_axis(x[..., 1:], choice[..., None], axis=-1)  # [..., 1]
        if levels:
            chosen = jax.nn.one_hot(jnp.round(chosen[..., 0]).astype(jnp.int32), levels,
                                    dtype=jnp.float32)
        return jnp.concatenate([jax.nn.one_hot(choice, k, dtype=jnp.float32), chosen], -1)
    source, level, one_hot = _full_layout(spec)
    picked = jnp.take(x, source, axis=-1)  # [..., E]: each slot's sub-action
    return jnp.where(one_hot, (jnp.round(picked) == level).astype(jnp.float32), picked)


def enumerate_actions(spec: ActionSpec, limit: int) -> np.ndarray:
    """Every action of a fully discrete spec as flat float32 vectors [count, flat_dim], in
    lexicographic order of the sub-actions (the last one varies fastest, as
    ``itertools.product``). Raises when the spec has a continuous sub-action or more than
    ``limit`` actions (the count is the product of the sub-actions' n)."""
    subs = spec.sub_actions()
    if any(kind == "continuous" for kind, _ in subs):
        raise OffpolicyError(f"cannot enumerate the actions of {spec.describe()}: it has "
                             "continuous dimensions (--discretize K makes them discrete)")
    sizes = [n for _, n in subs]
    count = math.prod(sizes)
    if count > limit:
        raise OffpolicyError(f"{spec.describe()} has {count} actions, more than the limit "
                             f"of {limit} for enumerating them")
    return np.indices(sizes).reshape(len(sizes), -1).T.astype(np.float32)
