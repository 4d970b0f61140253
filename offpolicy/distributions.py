"""Actors: stochastic action selection that records what it sampled from.

Agents call these inside their jitted ``policy(params, obs, key, explore)``. Every method is a
pure JAX function, jittable and batched over a leading batch axis ``[B, ...]``; the actors are
frozen dataclasses holding only static configuration, so they are hashable and may be closed
over or passed as static arguments to ``jax.jit``.

``sample(key, *params) -> (action, info)`` returns the action actually taken together with the
*behaviour information* ``info``: the parameters of the distribution mu the action was drawn
from. Replay stores ``info`` per step (declared by ``behaviour_fields``) so that an update can
later evaluate ``log mu(a|s) = actor.log_prob(info, a)`` for the stored action and form the
importance weight ``pi(a|s) / mu(a|s) = exp(log pi(a|s) - log mu(a|s))`` (ACER, ReF-ER,
Retrace, ...), with ``log pi`` from the current network through the same actor.

What each actor records (all float32; ``m`` action dimensions, ``n`` discrete actions):

* :class:`Gaussian` (diagonal normal): ``mean[m]``, ``std[m]``.
* :class:`TruncatedGaussian` (normal truncated to ``[low, high]^m``): ``mean[m]``, ``std[m]``,
  the parameters of the *untruncated* normal.
* :class:`SquashedGaussian` (a = tanh(u), u diagonal normal: SAC): ``mean[m]``, ``std[m]``
  of u and ``pre_tanh[m]``, u itself.
* :class:`Categorical`: ``probs[n]``.
* :class:`EpsilonGreedy`: ``probs[n] = (1 - eps) onehot(argmax q) + eps / n``.
* :class:`AdditiveNoise` (deterministic action + Gaussian noise, clipped to the box):
  ``mean[m]`` (the deterministic action) and ``std[m]`` (sigma).
* :class:`Hybrid` (Tuple/Dict of the above): its components' fields, each prefixed
  ``"<component name>."`` (``"0.probs"``, ``"1.mean"``, ...).

The methods that take distribution parameters (``log_prob``, ``mode``, ``entropy``, ``kl``)
accept either an ``info`` dict (as recorded, or built without sampling by ``actor.info(...)``)
or the raw ``sample`` parameters (a tuple ``(mean, std)``, or an array of logits / q-values).
Discrete actions are int32 ``[B]``, continuous ones float32 ``[B, m]``; a :class:`Hybrid` emits
the library's flat float32 action vector (see ``offpolicy.envs.spaces.ActionSpec``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from offpolicy.normal_numerics import (
    LOG_SQRT_2PI,
    f32,
    gauss_legendre,
    open_uniform,
    std_normal_logpdf,
    truncated_icdf,
    truncation,
)

Info = dict[str, jax.Array]
FieldSpecs = dict[str, tuple]

# ---------------------------------------------------------------------- continuous actors
@dataclass(frozen=True)
class Gaussian:
    """Diagonal Gaussian N(mean, diag(std^2)) on R^m (actions are not clipped: the env side
    clips, so the recorded density is exact for the stored action).

    * log p(a) = sum_i [ -(a_i - mu_i)^2 / (2 s_i^2) - log s_i - log sqrt(2 pi) ]
    * H = sum_i [ log s_i + (1 + log 2 pi) / 2 ]
    * KL(p || q) = sum_i [ log(s_q / s_p) + (s_p^2 + (mu_p - mu_q)^2) / (2 s_q^2) - 1/2 ]

    Records ``{"mean": [B, m], "std": [B, m]}``.
    """

    discrete: ClassVar[bool] = False

    def flat_dim(self, action_dim: int) -> int:
        """Width of the action in the library's flat float32 action vector."""
        return int(action_dim)

    def behaviour_fields(self, action_dim: int) -> FieldSpecs:
        m = (int(action_dim),)
        return {"mean": (m, np.float32), "std": (m, np.float32)}

    def info(self, mean: Any, std: Any) -> Info:
        """The behaviour info of N(mean, std^2) without sampling (std broadcast to mean)."""
        mean = f32(mean)
        return {"mean": mean, "std": jnp.broadcast_to(f32(std), mean.shape)}

    def _params(self, p: Any) -> tuple[jax.Array, jax.Array]:
        if isinstance(p, Mapping):
            return f32(p["mean"]), f32(p["std"])
        mean, std = p
        return f32(mean), f32(std)

    def sample(self, key: jax.Array, mean: Any, std: Any) -> tuple[jax.Array, Info]:
        """a = mean + std * eps, eps ~ N(0, I) (reparameterised)."""
        info = self.info(mean, std)
        eps = jax.random.normal(key, info["mean"].shape, jnp.float32)
        return info["mean"] + info["std"] * eps, info

    def log_prob(self, params: Any, action: jax.Array) -> jax.Array:
        mean, std = self._params(params)
        z = (f32(action) - mean) / std
        return jnp.sum(std_normal_logpdf(z) - jnp.log(std), axis=-1)

    def mode(self, params: Any) -> jax.Array:
        return self._params(params)[0]

    def entropy(self, params: Any) -> jax.Array:
        mean, std = self._params(params)
        return jnp.sum(jnp.broadcast_to(jnp.log(std) + 0.5 + LOG_SQRT_2PI, mean.shape), axis=-1)

    def kl(self, p: Any, q: Any) -> jax.Array:
        """KL(p || q), closed form; swap the arguments for KL(q || p)."""
        mp, sp = self._params(p)
        mq, sq = self._params(q)
        r = sp / sq
        d = (mp - mq) / sq
        return jnp.sum(-jnp.log(r) + 0.5 * (r * r + d * d) - 0.5, axis=-1)


@dataclass(frozen=True)
class TruncatedGaussian(Gaussian):
    """N(mean, diag(std^2)) truncated to the box [low, high]^m, sampled exactly.

    Per dimension, with alpha = (low - mu) / s, beta = (high - mu) / s and
    Z = Phi(beta) - Phi(alpha):

    * sample: a = mu + s Phi^-1(Phi(alpha) + u Z), u ~ U(eps, 1 - eps) (the inverse CDF),
      evaluated in float32 without cancellation (see :func:`truncated_icdf`): exact and finite
      even when the box lies thousands of standard deviations from the mean. The sample is not
      reparameterised (its gradient is stopped);
    * log p(a) = sum_i [ log N(a_i | mu_i, s_i^2) - log Z_i ] inside the box, -inf outside,
      with log Z relative to a reference point (see :class:`_Truncation`): accurate at any depth;
    * E[a] = mu + s (phi(alpha) - phi(beta)) / Z  (:meth:`mean`);
    * H = sum_i [ log(sqrt(2 pi e) s Z) + (alpha phi(alpha) - beta phi(beta)) / (2 Z) ];
    * KL(p || q) (same box) = E_p[log p - log q], with E_p[z] = (phi(alpha) - phi(beta)) / Z and
      E_p[z^2] = 1 + (alpha phi(alpha) - beta phi(beta)) / Z, z = (a - mu_p) / s_p.

    All of these are evaluated relative to a reference point without cancelling differences
    (:class:`_Truncation`, :meth:`_moments`), so they hold in float32 however far the box lies
    from the mean. Only the sampler loses a little when std exceeds the box width by orders of
    magnitude (the distribution is then nearly uniform): quantiles off by ~1e-5 of the box at
    std = 100 (high - low).

    Records ``{"mean", "std"}`` of the untruncated normal, like :class:`Gaussian`.
    """

    low: float = -1.0
    high: float = 1.0

    def __post_init__(self):
        if not self.low < self.high:
            raise ValueError(f"TruncatedGaussian needs low < high, got {self.low}, {self.high}")

    def sample(self, key: jax.Array, mean: Any, std: Any) -> tuple[jax.Array, Info]:
        info = self.info(mean, std)
        mean, std = info["mean"], info["std"]
        x = truncated_icdf(open_uniform(key, mean.shape), mean, std, self.low, self.high)
        return jax.lax.stop_gradient(x), info

    def log_prob(self, params: Any, action: jax.Array) -> jax.Array:
        mean, std = self._params(params)
        action = f32(action)
        g = truncation(mean, std, self.low, self.high)
        d = g.sign * (action - g.x_c) / std  # z' - c
        lp = -0.5 * d * (d + 2.0 * g.c) - jnp.log(std) - g.log_zc
        inside = (action >= self.low) & (action <= self.high)
        return jnp.sum(jnp.where(inside, lp, -jnp.inf), axis=-1)

    def mode(self, params: Any) -> jax.Array:
        return jnp.clip(self._params(params)[0], self.low, self.high)

    def _moments(self, mean, std):
        """(geometry, E[d], Var[d]) for d = z' - c (mirrored standard units, see _Truncation),
        in each regime without cancelling differences:

        * quad: t = z' - mid on [-w/2, w/2] has density ~ exp(-mid t - t^2 / 2); its mean and
          variance by the same Gauss-Legendre rule (two-pass variance);
        * tail: s = b - z' on [0, w] has density ~ exp(b s - s^2 / 2), so
          E[s^n] = I_n / I_0 with I_n = J_n(b) - r sum_j C(n, j) w^(n-j) J_j(a), r = exp(w mid)
          <= exp(-8) (:func:`mills_moments`);
        * straddle (Z > 0.47): with phi(a) / phi(b) = exp(w mid),
          E[z'] = (phi(a) - phi(b)) / Z = (phi(b) / Z) expm1(w mid),
          E[z'^2] = 1 + (a phi(a) - b phi(b)) / Z = 1 + (phi(b) / Z) (a expm1(w mid) - w).
        """
        g = truncation(mean, std, self.low, self.high)
        # straddle (c = 0); phi(b) / Z capped: its value only matters where this branch is taken
        pb = jnp.exp(jnp.minimum(-0.5 * g.b * g.b - g.log_zc, 80.0))
        em1 = jnp.expm1(g.w * g.mid)
        ez = pb * em1
        ed = ez
        var = 1.0 + pb * (g.a * em1 - g.w) - ez * ez
        # tail (c = b): moments of s = b - z' = -d
        b_t = jnp.minimum(g.b, 0.0)
        (jb0, jb1, jb2), (ja0, ja1, ja2) = g.jb, g.ja
        r = jnp.exp(g.w * (b_t - 0.5 * g.w))
        i0 = jnp.maximum(jb0 - r * ja0, 1e-30)
        i1 = jb1 - r * (g.w * ja0 + ja1)
        i2 = jb2 - r * (g.w * g.w * ja0 + 2.0 * g.w * ja1 + ja2)
        es = i1 / i0
        ed = jnp.where(g.tail, -es, ed)
        var = jnp.where(g.tail, i2 / i0 - es * es, var)
        # quad (c = mid)
        t, p = gauss_legendre(jnp.where(g.quad, g.w, 1.0), jnp.where(g.quad, g.mid, 0.0))
        p = p / jnp.sum(p, axis=-1, keepdims=True)
        et = jnp.sum(p * t, axis=-1)
        vt = jnp.sum(p * (t - et[..., None]) ** 2, axis=-1)
        ed = jnp.where(g.quad, et, ed)
        var = jnp.where(g.quad, vt, var)
        return g, ed, jnp.maximum(var, 0.0)

    def mean(self, params: Any) -> jax.Array:
        """E[a] = mu + s (phi(alpha) - phi(beta)) / Z, clipped to the box against rounding."""
        mean, std = self._params(params)
        g, ed, _ = self._moments(mean, std)
        return jnp.clip(g.x_c + g.sign * std * ed, self.low, self.high)

    def entropy(self, params: Any) -> jax.Array:
        """H = -E[log p] = log s + log(Z / phi(c)) + (Var[d] + E[d] (E[d] + 2c)) / 2."""
        mean, std = self._params(params)
        g, ed, var = self._moments(mean, std)
        return jnp.sum(jnp.log(std) + g.log_zc + 0.5 * (var + ed * (ed + 2.0 * g.c)), axis=-1)

    def kl(self, p: Any, q: Any) -> jax.Array:
        """KL(p || q) = -H(p) - E_p[log q] for two normals truncated to this box, where
        -E_p[log q] = log s_q + log(Z_q / phi(c_q)) + (Var_p[d_q] + E_p[d_q] (E_p[d_q] + 2 c_q)) / 2
        with d_q = sign_q (a - x_cq) / s_q = e + f d_p affine in p's d_p: E_p[d_q] = e + f E_p[d_p]
        and Var_p[d_q] = f^2 Var_p[d_p]."""
        mp, sp = self._params(p)
        mq, sq = self._params(q)
        gp, ed, var = self._moments(mp, sp)
        gq = truncation(mq, sq, self.low, self.high)
        neg_h = -(jnp.log(sp) + gp.log_zc + 0.5 * (var + ed * (ed + 2.0 * gp.c)))
        # d_q = e + f d_p (x_cp - x_cq is exact where both are bounds, so no rounding at 1.0)
        e = gq.sign * (gp.x_c - gq.x_c) / sq
        f = gp.sign * gq.sign * sp / sq
        edq = e + f * ed
        varq = f * f * var
        kl = neg_h + jnp.log(sq) + gq.log_zc + 0.5 * (varq + edq * (edq + 2.0 * gq.c))
        return jnp.sum(kl, axis=-1)


@dataclass(frozen=True)
class AdditiveNoise:
    """A deterministic action plus Gaussian noise, clipped to the box [low, high]^m:
    a = clip(mu + sigma * eps, low, high), eps ~ N(0, I).

    Records ``{"mean": mu, "std": sigma}`` (broadcast to [B, m]): the density of the
    *unclipped* Gaussian. Clipping puts a point mass on each bound, so the Gaussian density
    alone is exact only for actions strictly inside the box. :meth:`log_prob` accounts for the
    clipping per coordinate, which makes it exact with respect to the mixed base measure
    (Lebesgue inside the box plus a unit atom at each bound):

    * log N(a | mu, sigma^2)          if low < a < high,
    * log Phi((low - mu) / sigma)     if a <= low   (the mass clipped onto low),
    * log(1 - Phi((high - mu) / sigma)) = log Phi((mu - high) / sigma)   if a >= high,

    summed over coordinates. An importance weight pi(a) / mu(a) against this is meaningful only
    when pi is evaluated with respect to the same base measure (e.g. pi is itself an
    ``AdditiveNoise`` actor or the action lies strictly inside the box).

    ``sigma`` is the default noise scale; ``sample`` may override it (a scalar, [m] or [B, m],
    possibly traced, e.g. annealed). No ``entropy`` or ``kl``: for the mixed distribution they
    have no closed form.
    """

    sigma: float = 0.1
    low: float = -1.0
    high: float = 1.0
    discrete: ClassVar[bool] = False

    def __post_init__(self):
        if not self.low < self.high:
            raise ValueError(f"AdditiveNoise needs low < high, got {self.low}, {self.high}")

    def flat_dim(self, action_dim: int) -> int:
        return int(action_dim)

    def behaviour_fields(self, action_dim: int) -> FieldSpecs:
        m = (int(action_dim),)
        return {"mean": (m, np.float32), "std": (m, np.float32)}

    def info(self, action_mean: Any, sigma: Any = None) -> Info:
        mean = f32(action_mean)
        sigma = self.sigma if sigma is None else sigma
        return {"mean": mean, "std": jnp.broadcast_to(f32(sigma), mean.shape)}

    def _params(self, p: Any) -> tuple[jax.Array, jax.Array]:
        if isinstance(p, Mapping):
            return f32(p["mean"]), f32(p["std"])
        if isinstance(p, tuple):
            info = self.info(*p)
        else:
            info = self.info(p)
        return info["mean"], info["std"]

    def sample(self, key: jax.Array, action_mean: Any, sigma: Any = None
               ) -> tuple[jax.Array, Info]:
        info = self.info(action_mean, sigma)
        eps = jax.random.normal(key, info["mean"].shape, jnp.float32)
        return jnp.clip(info["mean"] + info["std"] * eps, self.low, self.high), info

    def log_prob(self, params: Any, action: jax.Array) -> jax.Array:
        mean, std = self._params(params)
        action = f32(action)
        inner = std_normal_logpdf((action - mean) / std) - jnp.log(std)
        at_low = log_ndtr((self.low - mean) / std)
        at_high = log_ndtr((mean - self.high) / std)
        lp = jnp.where(action <= self.low, at_low, jnp.where(action >= self.high, at_high, inner))
        return jnp.sum(lp, axis=-1)

    def mode(self, params: Any) -> jax.Array:
        """The deterministic action, clipped to the box."""
        return jnp.clip(self._params(params)[0], self.low, self.high)


GAUSSIAN = Gaussian()


@dataclass(frozen=True)
class SquashedGaussian:
    """a = tanh(u), u ~ N(mean, diag(std^2)): SAC's bounded policy (Haarnoja et al. 2018,
    App. C, "Enforcing Action Bounds"), on the agent's box [-1, 1]^m.

    * log p(a) = log N(u | mean, std^2) - sum_i log(1 - tanh(u_i)^2)                (Eq. 21)
      with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2 u)), finite for any u;
    * KL(p || q) = the Gaussians' KL (tanh is a bijection: the log-det terms cancel), and so
      does the Jacobian in a density ratio p(a) / q(a) at one action.

    Records ``{"mean": [B, m], "std": [B, m], "pre_tanh": [B, m]}``: u itself, since
    atanh(a) loses u once a rounds to +-1 in float32.
    """

    discrete: ClassVar[bool] = False

    def flat_dim(self, action_dim: int) -> int:
        return int(action_dim)

    def behaviour_fields(self, action_dim: int) -> FieldSpecs:
        m = (int(action_dim),)
        return {"mean": (m, np.float32), "std": (m, np.float32), "pre_tanh": (m, np.float32)}

    def sample(self, key: jax.Array, mean: Any, std: Any) -> tuple[jax.Array, Info]:
        """a = tanh(mean + std * eps), eps ~ N(0, I) (reparameterised)."""
        u, info = GAUSSIAN.sample(key, mean, std)
        return jnp.tanh(u), {**info, "pre_tanh": u}

    def log_prob(self, params: Any, pre_tanh: jax.Array, eps: float = 0.0) -> jax.Array:
        """log p(tanh(u)) [B] of the action whose pre-squash value is ``pre_tanh`` u. With
        ``eps`` > 0 the log-det is SB3's log(1 - a^2 + eps), a = tanh(u): once a rounds to
        +-1 it stays at log(eps), with no gradient."""
        u = f32(pre_tanh)
        if eps > 0:
            log_det = jnp.log(1.0 - jnp.tanh(u) ** 2 + eps)
        else:
            log_det = 2.0 * (np.log(2.0) - u - jax.nn.softplus(-2.0 * u))
        return GAUSSIAN.log_prob(params, u) - jnp.sum(log_det, axis=-1)

    def mode(self, params: Any) -> jax.Array:
        """tanh(mean): the deterministic action SAC evaluates with."""
        return jnp.tanh(GAUSSIAN.mode(params))

    def kl(self, p: Any, q: Any) -> jax.Array:
        return GAUSSIAN.kl(p, q)


# ---------------------------------------------------------------------- discrete actors
class _DiscreteBase:
    """Shared maths of actors that record ``probs[B, n]`` of a categorical over n actions.

    * log p(a) = log probs[a]
    * H = -sum_k p_k log p_k
    * KL(p || q) = sum_k p_k (log p_k - log q_k)   (terms with p_k = 0 are 0)
    """

    discrete: ClassVar[bool] = True

    def flat_dim(self, num_actions: int) -> int:
        return 1

    def behaviour_fields(self, num_actions: int) -> FieldSpecs:
        return {"probs": ((int(num_actions),), np.float32)}

    def _log_probs(self, p: Any) -> jax.Array:  # pragma: no cover - overridden
        raise NotImplementedError

    def log_prob(self, params: Any, action: jax.Array) -> jax.Array:
        logp = self._log_probs(params)
        idx = jnp.asarray(action).astype(jnp.int32)[..., None]
        return jnp.take_along_axis(logp, idx, axis=-1)[..., 0]

    def mode(self, params: Any) -> jax.Array:
        return jnp.argmax(self._log_probs(params), axis=-1).astype(jnp.int32)

    def entropy(self, params: Any) -> jax.Array:
        logp = self._log_probs(params)
        p = jnp.exp(logp)
        return -jnp.sum(jnp.where(p > 0, p * logp, 0.0), axis=-1)

    def kl(self, p: Any, q: Any) -> jax.Array:
        """KL(p || q), exact; swap the arguments for KL(q || p)."""
        logp, logq = self._log_probs(p), self._log_probs(q)
        pp = jnp.exp(logp)
        return jnp.sum(jnp.where(pp > 0, pp * (logp - logq), 0.0), axis=-1)


def _log_probs_from_info(p: Mapping) -> jax.Array:
    if "logits" in p:
        return jax.nn.log_softmax(f32(p["logits"]), axis=-1)
    return jnp.log(f32(p["probs"]))


@dataclass(frozen=True)
class Categorical(_DiscreteBase):
    """Categorical over n actions with probabilities softmax(logits).

    ``sample(key, logits[B, n]) -> (action[B] int32, {"probs": softmax(logits)})``. Parameters
    given as raw logits (or an info dict with ``"logits"``) use log_softmax, accurate for
    learning; a recorded info uses log(probs).
    """

    def info(self, logits: Any) -> Info:
        return {"probs": jax.nn.softmax(f32(logits), axis=-1)}

    def _log_probs(self, p: Any) -> jax.Array:
        if isinstance(p, Mapping):
            return _log_probs_from_info(p)
        return jax.nn.log_softmax(f32(p), axis=-1)

    def sample(self, key: jax.Array, logits: Any) -> tuple[jax.Array, Info]:
        logits = f32(logits)
        action = jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
        return action, self.info(logits)


@dataclass(frozen=True)
class EpsilonGreedy(_DiscreteBase):
    """Epsilon-greedy over q-values [B, n]: argmax q (first of ties) with probability 1 - eps,
    else uniform over all n actions. Records the exact action probabilities
    ``probs = (1 - eps) onehot(argmax q) + eps / n``.

    ``epsilon`` is the default; ``sample(key, q, epsilon)`` may override it (a scalar or [B],
    possibly traced, e.g. annealed or one epsilon per env copy as in Ape-X).
    """

    epsilon: float = 0.05

    def info(self, q: Any, epsilon: Any = None) -> Info:
        q = f32(q)
        n = q.shape[-1]
        eps = f32(self.epsilon if epsilon is None else epsilon)
        eps = jnp.reshape(eps, eps.shape + (1,) * (q.ndim - eps.ndim)) if eps.ndim else eps
        greedy = jax.nn.one_hot(jnp.argmax(q, axis=-1), n, dtype=jnp.float32)
        return {"probs": (1.0 - eps) * greedy + eps / n}

    def _log_probs(self, p: Any) -> jax.Array:
        if isinstance(p, Mapping):
            return _log_probs_from_info(p)
        info = self.info(*p) if isinstance(p, tuple) else self.info(p)
        return jnp.log(info["probs"])

    def mode(self, params: Any) -> jax.Array:
        """argmax q (first of ties) for q-values; argmax probs for an info dict."""
        if isinstance(params, Mapping):
            return super().mode(params)
        q = params[0] if isinstance(params, tuple) else params
        return jnp.argmax(f32(q), axis=-1).astype(jnp.int32)

    def sample(self, key: jax.Array, q: Any, epsilon: Any = None) -> tuple[jax.Array, Info]:
        q = f32(q)
        batch, n = q.shape[:-1], q.shape[-1]
        eps = f32(self.epsilon if epsilon is None else epsilon)
        k_explore, k_action = jax.random.split(key)
        explore = jax.random.uniform(k_explore, batch, jnp.float32) < eps
        random_action = jax.random.randint(k_action, batch, 0, n, jnp.int32)
        greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
        return jnp.where(explore, random_action, greedy), self.info(q, epsilon)


# ---------------------------------------------------------------------- composition
@dataclass(frozen=True)
class Hybrid:
    """Independent actors over the components of a Tuple/Dict action space.

    ``components`` is a tuple of ``(name, actor, size)``: ``size`` is what the actor's
    ``behaviour_fields`` takes (m for a continuous actor, n for a discrete one). The action is
    the library's flat float32 vector (``ActionSpec.flatten`` layout): components in order,
    continuous values as they are, a discrete index as one float. Its density factorises:

    * log p(a) = sum_c log p_c(a_c),  H = sum_c H_c,  KL(p || q) = sum_c KL(p_c || q_c).

    ``info`` holds each component's fields under ``"<name>.<field>"``.
    """

    components: tuple[tuple[str, Any, int], ...]

    def __post_init__(self):
        names = [c[0] for c in self.components]
        if not names:
            raise ValueError("Hybrid needs at least one component")
        if len(set(names)) != len(names):
            raise ValueError(f"Hybrid component names must be unique, got {names}")

    @classmethod
    def from_spec(cls, spec: Any, continuous: Any = None, discrete: Any = None) -> Hybrid:
        """One actor per component of a hybrid ``ActionSpec`` (names: the Dict keys, else
        "0", "1", ...); continuous components get ``continuous`` (default Gaussian()),
        discrete ones ``discrete`` (default Categorical())."""
        continuous = Gaussian() if continuous is None else continuous
        discrete = Categorical() if discrete is None else discrete
        names = spec.keys if spec.keys is not None else [str(i) for i in
                                                         range(len(spec.components))]
        comps = []
        for name, c in zip(names, spec.components):
            if c.kind == "continuous":
                comps.append((name, continuous, c.dim))
            elif c.kind == "discrete":
                comps.append((name, discrete, c.n))
            else:
                raise ValueError(f"Hybrid.from_spec: unsupported component kind {c.kind!r}")
        return cls(tuple(comps))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c[0] for c in self.components)

    @property
    def flat_dim(self) -> int:
        return sum(actor.flat_dim(size) for _, actor, size in self.components)

    def behaviour_fields(self) -> FieldSpecs:
        out: FieldSpecs = {}
        for name, actor, size in self.components:
            out.update({f"{name}.{k}": v for k, v in actor.behaviour_fields(size).items()})
        return out

    def component_info(self, info: Mapping, name: str) -> Info:
        """The fields of component ``name`` in ``info``, prefix removed (field names have no
        dots, so a component "x" does not take the fields of a component "x.y")."""
        prefix = f"{name}."
        return {k[len(prefix):]: v for k, v in info.items()
                if k.startswith(prefix) and "." not in k[len(prefix):]}

    def split(self, flat: jax.Array) -> tuple[jax.Array, ...]:
        """Flat action [B, flat_dim] -> component actions (int32 [B] for discrete ones)."""
        flat = f32(flat)
        parts, start = [], 0
        for _, actor, size in self.components:
            width = actor.flat_dim(size)
            part = flat[..., start:start + width]
            start += width
            parts.append(jnp.round(part[..., 0]).astype(jnp.int32) if actor.discrete else part)
        return tuple(parts)

    def flatten(self, actions: tuple) -> jax.Array:
        """Component actions -> flat float32 action [B, flat_dim] (inverse of :meth:`split`)."""
        parts = []
        for (_, actor, _), a in zip(self.components, actions):
            a = f32(a)
            parts.append(a[..., None] if actor.discrete else a)
        return jnp.concatenate(parts, axis=-1)

    @staticmethod
    def _call(fn, p):
        return fn(*p) if isinstance(p, tuple) else fn(p)

    def info(self, params: tuple) -> Info:
        """Prefixed behaviour info from per-component parameters, without sampling."""
        out: Info = {}
        for (name, actor, _), p in zip(self.components, params):
            out.update({f"{name}.{k}": v for k, v in self._call(actor.info, p).items()})
        return out

    def sample(self, key: jax.Array, params: tuple) -> tuple[jax.Array, Info]:
        """``params[c]`` are component c's ``sample`` arguments after the key (a tuple, or one
        array); one subkey per component."""
        if len(params) != len(self.components):
            raise ValueError(f"Hybrid.sample: {len(params)} parameter sets for "
                             f"{len(self.components)} components")
        keys = jax.random.split(key, len(self.components))
        actions, info = [], {}
        for k, (name, actor, _), p in zip(keys, self.components, params):
            a, i = self._call(lambda *args, k=k, actor=actor: actor.sample(k, *args), p)
            actions.append(a)
            info.update({f"{name}.{f}": v for f, v in i.items()})
        return self.flatten(tuple(actions)), info

    def _components_info(self, info: Any) -> list:
        if isinstance(info, Mapping):
            return [self.component_info(info, name) for name in self.names]
        return list(info)  # raw per-component parameters

    def log_prob(self, info: Any, flat_action: jax.Array) -> jax.Array:
        actions = self.split(flat_action)
        return sum(actor.log_prob(i, a) for (_, actor, _), i, a in
                   zip(self.components, self._components_info(info), actions))

    def mode(self, params: Any) -> jax.Array:
        return self.flatten(tuple(actor.mode(i) for (_, actor, _), i in
                                  zip(self.components, self._components_info(params))))

    def entropy(self, info: Any) -> jax.Array:
        return sum(actor.entropy(i) for (_, actor, _), i in
                   zip(self.components, self._components_info(info)))

    def kl(self, p: Any, q: Any) -> jax.Array:
        """KL(p || q) = sum of the components' KLs."""
        return sum(actor.kl(ip, iq) for (_, actor, _), ip, iq in
                   zip(self.components, self._components_info(p), self._components_info(q)))


__all__ = ["AdditiveNoise", "Categorical", "EpsilonGreedy", "Gaussian", "Hybrid",
           "TruncatedGaussian"]
