"""AQL's learned proposal (Van de Wiele et al. 2020, Sec. 4 and 5.1, App. A1): a distribution over
the sub-actions of an action, autoregressive or independent, sampled and trained by the AQL
agent (:mod:`offpolicy.agents.aql`). Unlike the actors of :mod:`offpolicy.distributions`, it
holds parameters of its own (a parameter tree the agent trains) rather than reading a
network's outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from offpolicy.normal_numerics import LOG_SQRT_2PI, f32, std_normal_logpdf


@dataclass(frozen=True)
class Proposal:
    """AQL's proposal mu(a|s) over D sub-actions (Van de Wiele et al. 2020, Sec. 4, 5.1, App. A1),
    autoregressive or independent, as pure functions of a parameter tree.

    ``sub_actions`` lists the sub-actions in the flat action's order: ``("discrete", n)`` (a
    discrete or discretized sub-action, its value the index as a float) or ``("continuous",
    1)`` (a value in [-1, 1]). Sub-action d's statistics are a linear map of the state
    features and, when ``autoregressive``, of the encodings of sub-actions 1..d-1 (one-hot for a
    discrete one, the value for a continuous one; paper Sec. 5.1: "a linear transformation of a
    concatenation of features derived from the state and one-hot encodings of all previously
    sampled sub-actions"):

        mu(a|s) = prod_d mu_d(a_d | s, a_<d),
        mu_d = softmax(W_d [f(s), e(a_<d)] + b_d)                  (discrete: logits, K_d = n)
        mu_d = N(W_d [f(s), e(a_<d)] + b_d, std^2)                 (continuous: the mean, K_d = 1)

    with std = 0.5 (the paper's fixed variance 0.25). The state part W_d^s f(s) is computed once
    per state, not once per sample. A continuous sample is clipped to [-1, 1] (the action box);
    its log-density is the Gaussian's at the clipped value (the proposal is trained by maximum
    likelihood on actions inside the box, Eq. 3, so the clipped tails never enter a loss).
    Composite samples are i.i.d. given s. Shapes: features [..., F]; actions [..., S, D]
    (S actions per state).
    """

    sub_actions: tuple[tuple[str, int], ...]
    autoregressive: bool = True
    std: float = 0.5

    def __post_init__(self):
        if not self.sub_actions:
            raise ValueError("a proposal needs at least one sub-action")
        for kind, n in self.sub_actions:
            if kind not in ("discrete", "continuous") or n < 1 or (kind == "discrete" and n < 2):
                raise ValueError(f"invalid sub-action {(kind, n)!r}: ('discrete', n >= 2) or "
                                 "('continuous', 1)")

    @property
    def num_sub_actions(self) -> int:
        return len(self.sub_actions)

    def _width(self, d: int) -> int:
        """Width of sub-action d's statistics (and of its encoding)."""
        kind, n = self.sub_actions[d]
        return n if kind == "discrete" else 1

    def _prefix_width(self, d: int) -> int:
        return sum(self._width(j) for j in range(d)) if self.autoregressive else 0

    def init(self, key: jax.Array, feature_dim: int) -> list[dict[str, jax.Array]]:
        """Parameters: per sub-action, ``state`` [F, K_d], ``prefix`` [P_d, K_d] and ``bias``
        [K_d] (LeCun-uniform weights, zero bias)."""
        params = []
        for d, k in enumerate(jax.random.split(key, self.num_sub_actions)):
            width, prefix = self._width(d), self._prefix_width(d)
            bound = 1.0 / math.sqrt(feature_dim + prefix)
            ks, kp = jax.random.split(k)
            params.append({
                "state": jax.random.uniform(ks, (feature_dim, width), jnp.float32, -bound,
                                            bound),
                "prefix": jax.random.uniform(kp, (prefix, width), jnp.float32, -bound, bound),
                "bias": jnp.zeros((width,), jnp.float32)})
        return params

    def _encode(self, d: int, value: jax.Array) -> jax.Array:
        kind, n = self.sub_actions[d]
        if kind == "discrete":
            return jax.nn.one_hot(jnp.round(value).astype(jnp.int32), n, dtype=jnp.float32)
        return value[..., None]

    def _stats(self, params, d: int, state_part: jax.Array, prefix: jax.Array) -> jax.Array:
        """Sub-action d's logits or mean [..., S, K_d] from the state part [..., 1, K_d] and the
        prefix encodings [..., S, P_d]."""
        out = state_part + params[d]["bias"]
        if self.autoregressive and d > 0:
            out = out + prefix @ params[d]["prefix"]
        return out

    def _log_prob_d(self, d: int, stats: jax.Array, value: jax.Array) -> jax.Array:
        kind, _ = self.sub_actions[d]
        if kind == "discrete":
            logp = jax.nn.log_softmax(stats, axis=-1)
            idx = jnp.round(value).astype(jnp.int32)[..., None]
            return jnp.take_along_axis(logp, idx, axis=-1)[..., 0]
        z = (value - stats[..., 0]) / self.std
        return std_normal_logpdf(z) - math.log(self.std)

    def _entropy_d(self, d: int, stats: jax.Array) -> jax.Array:
        kind, _ = self.sub_actions[d]
        if kind == "discrete":
            logp = jax.nn.log_softmax(stats, axis=-1)
            return -jnp.sum(jnp.exp(logp) * logp, axis=-1)
        return jnp.full(stats.shape[:-1], math.log(self.std) + 0.5 + LOG_SQRT_2PI)

    def _walk(self, params, features, actions=None, key=None, num_samples=None):
        """Sub-action by sub-action: sample (``key``) or read (``actions``) each value; returns
        (values [..., D], log mu [...], the conditional entropies [..., D], and each
        sub-action's statistics given its prefix: logits [..., n_d] or the mean [..., 1])."""
        features = f32(features)
        if actions is not None:
            actions = f32(actions)
            shape = actions.shape[:-1]
        else:
            shape = features.shape[:-1] + (num_samples,)
            keys = jax.random.split(key, self.num_sub_actions)
        prefix = jnp.zeros(shape + (0,), jnp.float32)
        values, log_prob, entropies, all_stats = [], jnp.zeros(shape), [], []
        for d in range(self.num_sub_actions):
            state_part = (features @ params[d]["state"])[..., None, :]
            stats = self._stats(params, d, state_part, prefix)
            stats = jnp.broadcast_to(stats, shape + stats.shape[-1:])
            if actions is not None:
                value = actions[..., d]
            elif self.sub_actions[d][0] == "discrete":
                value = jax.random.categorical(keys[d], stats, axis=-1).astype(jnp.float32)
            else:
                noise = jax.random.normal(keys[d], shape, jnp.float32)
                value = jnp.clip(stats[..., 0] + self.std * noise, -1.0, 1.0)
            values.append(value)
            all_stats.append(stats)
            log_prob = log_prob + self._log_prob_d(d, stats, value)
            entropies.append(self._entropy_d(d, stats))
            if self.autoregressive:
                prefix = jnp.concatenate([prefix, self._encode(d, value)], axis=-1)
        return jnp.stack(values, axis=-1), log_prob, jnp.stack(entropies, axis=-1), all_stats

    def sample(self, params, features: jax.Array, key: jax.Array, num_samples: int
               ) -> tuple[jax.Array, jax.Array]:
        """``num_samples`` i.i.d. actions per state: (actions [..., N, D], log mu [..., N])."""
        actions, log_prob, _, _ = self._walk(params, features, key=key,
                                             num_samples=num_samples)
        return actions, log_prob

    def log_prob(self, params, features: jax.Array, actions: jax.Array) -> jax.Array:
        """log mu(a|s) [..., S] of given actions [..., S, D] (teacher forcing)."""
        return self._walk(params, features, actions=actions)[1]

    def entropy(self, params, features: jax.Array, actions: jax.Array) -> jax.Array:
        """The sum over d of the conditional entropies H(mu_d(.|s, a_<d)) along the prefixes of
        ``actions`` [..., S, D] -> [..., S]: the entropy term of AQL's proposal loss (Eq. 3) for
        an autoregressive proposal (for an independent one it is the exact entropy H(mu))."""
        return jnp.sum(self._walk(params, features, actions=actions)[2], axis=-1)

    def entropies(self, params, features: jax.Array, actions: jax.Array) -> jax.Array:
        """The conditional entropies H(mu_d(.|s, a_<d)) one by one, [..., S, D]."""
        return self._walk(params, features, actions=actions)[2]

    def probabilities(self, params, features: jax.Array, actions: jax.Array
                      ) -> list[jax.Array]:
        """Per sub-action d, its distribution given the prefix of ``actions`` [..., S, D]:
        probabilities [..., S, n] (discrete) or the mean [..., S, 1] (continuous); for the
        proposal figure (AQL Fig. 4)."""
        stats = self._walk(params, features, actions=actions)[3]
        return [jax.nn.softmax(s, -1) if kind == "discrete" else s
                for s, (kind, _) in zip(stats, self.sub_actions)]
