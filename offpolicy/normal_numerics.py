"""Numerics of the normal distribution that the actors need in float32 on any backend: the
standard log-density, a stable log(exp(x) - exp(y)), the Mills-ratio moments of a truncated
normal (with their own derivative rule), the inverse of log Phi, and the inverse CDF of a
normal truncated to a box (with mirroring into the left tail, an exponential model of narrow
boxes and a Gauss-Legendre rule on moderate ones). Tested against float64 references in
tests/test_distributions.py.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtr, ndtri

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_LN2 = math.log(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_NARROW = 1e-2  # the sampler treats boxes narrower than this many std as exponential
# 16-point Gauss-Legendre rule on [-1, 1] (truncated normals on moderate boxes)
_GL_NODES, _GL_WEIGHTS = (np.asarray(v, np.float32)
                          for v in np.polynomial.legendre.leggauss(16))
_U_EPS = 2.0**-24  # uniforms are clipped to [eps, 1 - eps]: no log(0), no ndtri(0 or 1)


def f32(x: Any) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def std_normal_logpdf(z: jax.Array) -> jax.Array:
    """log phi(z) = -z^2 / 2 - log sqrt(2 pi)."""
    return -0.5 * z * z - LOG_SQRT_2PI


def _log_sub_exp(x: jax.Array, y: jax.Array) -> jax.Array:
    """log(exp(x) - exp(y)) for x >= y, stable (and with finite gradients) for all x - y."""
    d = jnp.minimum(y - x, -1e-30)  # <= 0
    near = d > -_LN2
    # log(-expm1(d)) is accurate for d near 0, log1p(-exp(d)) for d << 0; the double where keeps
    # the unused branch finite so gradients stay NaN-free
    a = jnp.log(-jnp.expm1(jnp.where(near, d, -1.0)))
    b = jnp.log1p(-jnp.exp(jnp.where(near, -1.0, d)))
    return x + jnp.where(near, a, b)


def _mills_j(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """J_n(x) = int_0^inf s^n exp(x s - s^2 / 2) ds for n = 0..3 and x <= 0, to float32
    precision at any depth, without cancellation.

    J_0 = Phi(x) / phi(x) is the Mills ratio M(x); integrating by parts, J_1 = 1 + x J_0,
    J_2 = J_0 + x J_1 and J_3 = 2 J_1 + x J_2. For y = -x > 2.5 all come from Laplace's
    continued fraction J_0 = 1 / t_0, t_k = y + (k + 1) / t_{k+1} (20 terms, relative error
    < 1e-8), which gives J_n = n! / (t_0 ... t_n) with no difference taken; below,
    J_0 = Phi(x) sqrt(2 pi) exp(x^2 / 2) and the recurrences lose at most a factor ~15.
    (``jax.scipy.special.erfcx`` is not used: in float32 it underflows to 0 near 9.2-9.4.)
    """
    y = -x
    far = y > 2.5
    yf = jnp.where(far, y, 2.5)
    t3 = yf
    for k in range(20, 3, -1):
        t3 = yf + k / t3
    t2 = yf + 3.0 / t3
    t1 = yf + 2.0 / t2
    t0 = yf + 1.0 / t1
    far_j = [1.0 / t0]
    for n, t in ((1, t1), (2, t2), (3, t3)):
        far_j.append(n * far_j[-1] / t)
    yn = jnp.where(far, 0.0, y)
    j0 = ndtr(-yn) * jnp.exp(0.5 * yn * yn) * _SQRT_2PI
    j1 = 1.0 - yn * j0
    j2 = j0 - yn * j1
    j3 = 2.0 * j1 - yn * j2
    return tuple(jnp.where(far, f, n) for f, n in zip(far_j, (j0, j1, j2, j3)))


@jax.custom_jvp
def mills_moments(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(J_0, J_1, J_2)(x) of :func:`_mills_j`, with the analytic derivatives dJ_n / dx =
    J_{n+1} (rather than autodiff through the continued fraction)."""
    return _mills_j(x)[:3]


@mills_moments.defjvp
def _mills_moments_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    j0, j1, j2, j3 = _mills_j(x)
    return (j0, j1, j2), (j1 * dx, j2 * dx, j3 * dx)


def _mills(x: jax.Array) -> jax.Array:
    """Mills ratio M(x) = Phi(x) / phi(x) for x <= 0 (see :func:`_mills_j`)."""
    return mills_moments(x)[0]


def _inv_log_ndtr(log_p: jax.Array) -> jax.Array:
    """x with log Phi(x) = log_p, for log_p <= log(1/2) (so x <= 0).

    ``ndtri(exp(log_p))`` (float32-exact) while exp(log_p) > e^-60; deeper, the asymptotic
    x = -sqrt(t - log(t - log t)), t = -2 log_p - log(2 pi) (from log Phi(x) ~ -x^2/2 - log|x|
    - log sqrt(2 pi)), within ~1e-3 relative: only the tail sampler goes that deep, and it
    refines the result by Newton steps.
    """
    log_p = jnp.minimum(log_p, -_LN2)
    deep = log_p < -60.0
    x_direct = ndtri(jnp.exp(jnp.maximum(log_p, -60.0)))
    t = -2.0 * jnp.minimum(log_p, -60.0) - 2.0 * LOG_SQRT_2PI
    return jnp.where(deep, -jnp.sqrt(t - jnp.log(t - jnp.log(t))), x_direct)


def gauss_legendre(w: jax.Array, mid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Nodes t_i and weighted values p_i = (w / 2) omega_i exp(-mid t_i - t_i^2 / 2) of the
    16-point Gauss-Legendre rule for int_{-w/2}^{w/2} exp(-mid t - t^2 / 2) dt = Z / phi(mid)
    (the normal density on [mid - w/2, mid + w/2] relative to phi(mid)). For w < 4 and
    w |mid| < 8 the exponent stays within +-6 and the rule is exact to < 1e-10."""
    t = 0.5 * w[..., None] * _GL_NODES
    return t, 0.5 * w[..., None] * _GL_WEIGHTS * jnp.exp(-t * (mid[..., None] + 0.5 * t))


class _Truncation(NamedTuple):
    """N(mean, std^2) truncated to [low, high], in mirrored standard units.

    z' = sign (x - mean) / std with sign = -1 where the box lies mostly above the mean, so that
    the box [a, b] always has its midpoint mid <= 0 (the mass leans towards b); w = b - a.
    Z = Phi(b) - Phi(a) is never formed directly; instead ``log_zc = log(Z / phi(c))`` relative
    to a reference point c chosen by regime, where it is O(1) and free of cancellation:

    * quad (w < 4 and w |mid| < 8, a moderate box): c = mid, Z / phi(mid) by Gauss-Legendre
      quadrature (:func:`gauss_legendre`);
    * tail (otherwise, b <= 0: the mean well outside the box): c = b,
      Z / phi(b) = M(b) - exp(w mid) M(a), M the Mills ratio (no underflow at any depth, and
      exp(w mid) <= exp(-8), so no cancellation);
    * straddle (otherwise: a < 0 < b and w >= 4): c = 0, Z = Phi(b) - Phi(a) > 0.47 from
      ``log_ndtr``.

    ``x_c`` is c in action units and ``x_end`` the bound at b (high, or low where mirrored).
    """

    sign: jax.Array
    a: jax.Array
    b: jax.Array
    w: jax.Array
    mid: jax.Array
    c: jax.Array
    x_c: jax.Array
    x_end: jax.Array
    log_zc: jax.Array
    quad: jax.Array
    tail: jax.Array
    jb: tuple  # mills_moments(min(b, 0))
    ja: tuple  # mills_moments(min(b, 0) - w)


def _mirror(mean: jax.Array, std: jax.Array, low: float, high: float):
    """(sign, a, b, w, mid, x_end) of :class:`_Truncation`."""
    alpha, beta = (low - mean) / std, (high - mean) / std
    flip = alpha + beta > 0
    sign = jnp.where(flip, -1.0, 1.0)
    a = jnp.where(flip, -beta, alpha)
    b = jnp.where(flip, -alpha, beta)
    w = (high - low) / std
    mid = sign * (0.5 * (low + high) - mean) / std
    return sign, a, b, w, mid, jnp.where(flip, low, high)


def truncation(mean: jax.Array, std: jax.Array, low: float, high: float) -> _Truncation:
    sign, a, b, w, mid, x_end = _mirror(mean, std, low, high)
    quad = (w < 4.0) & (w * mid > -8.0)
    tail = (b <= 0) & ~quad
    # every branch is evaluated on inputs where it is finite, so gradients stay NaN-free
    _, p = gauss_legendre(jnp.where(quad, w, 1.0), jnp.where(quad, mid, 0.0))
    lz_quad = jnp.log(jnp.sum(p, axis=-1))
    b_t = jnp.minimum(b, 0.0)
    jb, ja = mills_moments(b_t), mills_moments(b_t - w)
    z_tail = jb[0] - jnp.exp(w * (b_t - 0.5 * w)) * ja[0]
    lz_tail = jnp.log(jnp.maximum(z_tail, 1e-30))
    lz_straddle = _log_sub_exp(log_ndtr(b), log_ndtr(a)) + LOG_SQRT_2PI
    return _Truncation(
        sign=sign, a=a, b=b, w=w, mid=mid,
        c=jnp.where(quad, mid, jnp.where(tail, b, 0.0)),
        x_c=jnp.where(quad, 0.5 * (low + high), jnp.where(tail, x_end, mean)),
        x_end=x_end,
        log_zc=jnp.where(quad, lz_quad, jnp.where(tail, lz_tail, lz_straddle)),
        quad=quad, tail=tail, jb=jb, ja=ja)


def truncated_icdf(u: jax.Array, mean: jax.Array, std: jax.Array, low: float, high: float
                    ) -> jax.Array:
    """The u-quantile (u in (0, 1)) of N(mean, std^2) truncated to [low, high], in float32.

    In mirrored standard units (see :class:`_Truncation`) z' is the u'-quantile, u' = u (or
    1 - u where mirrored, so that the action increases with u). Regimes: narrow (w < 1e-2),
    tail (b <= 0, not narrow), straddle (a < 0 < b, not narrow). The tail and narrow regimes
    sample the distance s = b - z' >= 0 from the bound at b, where the mass is, so the result
    keeps full precision right at the bound: s is the v-quantile of S, v = 1 - u'.

    * tail: Phi(b - s) = Phi(b) - v Z, i.e. log g(s) = log T with g(s) = Phi(b - s) / phi(b) =
      exp(b s - s^2 / 2) M(b - s) and T = u' M(b) + v exp(w mid) M(a); started from the plain
      inverse CDF, three Newton steps s += (log g(s) - log T) M(b - s) (log g is concave);
    * narrow: the density of s is exp(-k s), k = -mid, up to a factor within w^2 / 8 (< 1.3e-5)
      of 1: a truncated exponential, s = -log(1 - v (1 - exp(-k w))) / k;
    * straddle: z' = Phi^-1(Phi(a) + u' Z) from whichever tail mass is smaller, the left
      P_L = Phi(a) + u' Z or the right P_R = Phi(-b) + v Z, both in log space.
    """
    sign, a, b, w, mid, x_end = _mirror(mean, std, low, high)
    narrow = w < _NARROW
    tail = (b <= 0) & ~narrow
    flip = sign < 0
    # u' and v = 1 - u': whichever is small is exact (u itself, or 1 - u rounded only when
    # large), so both tails of the quantile keep full precision
    v = jnp.where(flip, u, 1.0 - u)
    u = jnp.where(flip, 1.0 - u, u)
    # straddle: the smaller of the left and right tail masses, in log space
    log_pa, log_pb = log_ndtr(a), log_ndtr(b)
    log_z = _log_sub_exp(log_pb, log_pa)
    log_pl = jnp.logaddexp(log_pa, jnp.log(u) + log_z)
    log_pr = jnp.logaddexp(log_ndtr(-b), jnp.log(v) + log_z)
    left = log_pl <= log_pr
    # tail: log T, and the plain inverse CDF as the Newton start
    b_t = jnp.minimum(b, 0.0)
    log_t = jnp.log(u * _mills(b_t) + v * jnp.exp(w * (b_t - 0.5 * w)) * _mills(b_t - w))
    # one inverse-normal-CDF evaluation serves both regimes
    x = _inv_log_ndtr(jnp.where(tail, log_t + std_normal_logpdf(b_t),
                                jnp.minimum(log_pl, log_pr)))
    z = jnp.where(left, x, -x)
    s = jnp.clip(b_t - x, 0.0, w)
    for _ in range(3):
        m = _mills(b_t - s)
        s = s + (b_t * s - 0.5 * s * s + jnp.log(m) - log_t) * m
    # narrow
    k = -mid
    tiny = k * w < 1e-30
    k_safe = jnp.where(tiny, 1.0, k)
    s_narrow = jnp.where(tiny, v * w,
                         -jnp.log1p(v * jnp.expm1(-jnp.where(tiny, 1.0, k * w))) / k_safe)
    from_end = x_end - sign * std * jnp.clip(jnp.where(narrow, s_narrow, s), 0.0, w)
    x = jnp.where(narrow | tail, from_end, mean + sign * std * jnp.clip(z, a, b))
    return jnp.clip(x, low, high)


def open_uniform(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.clip(jax.random.uniform(key, shape, jnp.float32), _U_EPS, 1.0 - _U_EPS)
