"""Actors (offpolicy.distributions): recorded densities, sampling, KL, hybrid layout, keys.

References are computed independently in float64 NumPy (math.erf / math.erfc), not with the
module's helpers. Everything runs under jit, a few compiled functions per actor (compiling is
the slow part on CPU; eager calls would compile op by op).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium import spaces

from offpolicy.distributions import (
    AdditiveNoise,
    Categorical,
    EpsilonGreedy,
    Gaussian,
    Hybrid,
    TruncatedGaussian,
)
from offpolicy.envs.spaces import ActionSpec
from offpolicy.normal_numerics import mills_moments, truncated_icdf

_erfc = np.vectorize(math.erfc, otypes=[np.float64])
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


# ---------------------------------------------------------------------- float64 references
def norm_cdf(x):
    return 0.5 * _erfc(-np.asarray(x, np.float64) / math.sqrt(2.0))


def norm_logpdf(x):
    x = np.asarray(x, np.float64)
    return -0.5 * x * x - LOG_SQRT_2PI


def trunc_log_mass(alpha, beta):
    """log(Phi(beta) - Phi(alpha)), from the upper tail where alpha > 0 (no cancellation)."""
    with np.errstate(divide="ignore"):
        upper = np.log(norm_cdf(-alpha) - norm_cdf(-beta))
        lower = np.log(norm_cdf(beta) - norm_cdf(alpha))
    return np.where(alpha > 0, upper, lower)


def trunc_cdf(x, m, s, low, high):
    alpha, beta, z = (low - m) / s, (high - m) / s, (np.asarray(x, np.float64) - m) / s
    if alpha > 0:  # mass in the upper tail: F = (Q(alpha) - Q(z)) / (Q(alpha) - Q(beta))
        return (norm_cdf(-alpha) - norm_cdf(-z)) / (norm_cdf(-alpha) - norm_cdf(-beta))
    return (norm_cdf(z) - norm_cdf(alpha)) / (norm_cdf(beta) - norm_cdf(alpha))


def trunc_moments(m, s, low, high):
    """Mean and std of N(m, s^2) truncated to [low, high]."""
    alpha, beta = (low - m) / s, (high - m) / s
    log_z = float(trunc_log_mass(np.float64(alpha), np.float64(beta)))
    pa, pb = math.exp(norm_logpdf(alpha) - log_z), math.exp(norm_logpdf(beta) - log_z)
    ez = pa - pb
    var = 1.0 + alpha * pa - beta * pb - ez * ez
    return m + s * ez, s * math.sqrt(max(var, 0.0))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def chi_square(counts, probs):
    expected = probs * counts.sum()
    keep = expected > 0
    return float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))


def chi_square_limit(dof):
    """About 6 sigma above the chi-square mean (normal approximation): fails only on a bug."""
    return dof + 6.0 * math.sqrt(2.0 * dof)


def _np(x):
    return np.asarray(x, np.float64)


@functools.cache
def _jitted_sample(actor):
    def f(k, *p):
        a, info = actor.sample(k, *p)
        return a, info, actor.log_prob(info, a)
    return jax.jit(f)


def sampled(actor, key, *params):
    """Sample and the recorded log-probability, under jit (compiled once per actor, shape)."""
    return _jitted_sample(actor)(jax.random.key(key), *params)


@functools.cache
def _jitted_bundle(actor):
    """Samples a from p; log p(a), log q(a), KL(p || q), their gradients w.r.t. p's mean and
    std; H(p) (and the truncated mean)."""
    def f(k, p, q):
        a, info = actor.sample(k, p["mean"], p["std"])

        def objective(p):
            logp, kl = actor.log_prob(p, a), actor.kl(p, q)
            return jnp.sum(logp) + jnp.sum(kl), (logp, kl)
        grads, (logp, kl) = jax.grad(objective, has_aux=True)(p)
        out = dict(a=a, info=info, logp=logp, logq=actor.log_prob(q, a), kl=kl, grads=grads,
                   entropy=actor.entropy(p))
        if isinstance(actor, TruncatedGaussian):
            out["mean"] = actor.mean(p)
        return out
    return jax.jit(f)


def _columns(pairs, n):
    """{"mean", "std"} [n, len(pairs)]: one (mean, std) per column, repeated over n rows."""
    return {"mean": jnp.broadcast_to(jnp.asarray([m for m, _ in pairs], jnp.float32),
                                     (n, len(pairs))),
            "std": jnp.broadcast_to(jnp.asarray([s for _, s in pairs], jnp.float32),
                                    (n, len(pairs)))}


B, M, N_ACT = 32, 3, 4
RNG = np.random.default_rng(0)  # NumPy at import: no JAX backend starts during collection
MEAN = RNG.normal(size=(B, M)).astype(np.float32)
STD = RNG.uniform(0.2, 1.0, (B, M)).astype(np.float32)
LOGITS = (RNG.normal(size=(B, N_ACT)) * 2.0).astype(np.float32)

# actor, behaviour_fields argument, sample parameters, action shape and dtype
ACTOR_CASES = {
    "gaussian": (Gaussian(), M, (MEAN, STD), (B, M), jnp.float32),
    "additive": (AdditiveNoise(sigma=0.3), M, (MEAN,), (B, M), jnp.float32),
    "categorical": (Categorical(), N_ACT, (LOGITS,), (B,), jnp.int32),
    "epsilon_greedy": (EpsilonGreedy(0.5), N_ACT, (LOGITS,), (B,), jnp.int32),
}  # TruncatedGaussian: in its own tests below (compiling it is costly)


def _check_fields(actor, size, info, batch):
    fields = actor.behaviour_fields(size)
    assert set(fields) == set(info)
    for k, (shape, dtype) in fields.items():
        assert info[k].shape == (batch,) + shape
        assert info[k].dtype == np.dtype(dtype) == np.float32


# ---------------------------------------------------------------------- every actor
@pytest.mark.parametrize("name", sorted(ACTOR_CASES))
def test_behaviour_fields_describe_info_and_same_key_same_action(name):
    actor, size, params, action_shape, action_dtype = ACTOR_CASES[name]
    action, info, logp = sampled(actor, 0, *params)
    assert action.shape == action_shape and action.dtype == action_dtype
    assert logp.shape == (B,) and bool(jnp.all(jnp.isfinite(logp)))
    _check_fields(actor, size, info, B)
    again, other = (np.asarray(sampled(actor, k, *params)[0]) for k in (0, 1))
    np.testing.assert_array_equal(np.asarray(action), again)
    assert not np.array_equal(np.asarray(action), other)


# ---------------------------------------------------------------------- Gaussian
def test_gaussian_log_prob_matches_reference():
    g = Gaussian()
    a, info, logp = sampled(g, 1, MEAN, STD)
    ref = np.sum(norm_logpdf((_np(a) - _np(MEAN)) / _np(STD)) - np.log(_np(STD)), axis=-1)
    np.testing.assert_allclose(np.asarray(logp), ref, rtol=1e-5, atol=1e-5)
    # raw (mean, std) parameters give the same as the recorded info; the mode is the mean
    np.testing.assert_allclose(np.asarray(jax.jit(g.log_prob)((MEAN, STD), a)), ref, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(g.mode(info)), np.asarray(MEAN))


GAUSS_P = [(0.3, 0.5), (-1.2, 2.0), (1.0, 0.4)]
GAUSS_Q = [(-0.1, 1.0), (0.4, 0.9), (0.6, 0.8)]


def test_gaussian_samples_kl_and_entropy_vs_monte_carlo():
    g, n = Gaussian(), 100_000
    p, q = _columns(GAUSS_P, n), _columns(GAUSS_Q, n)
    for key, src, dst, pairs in ((2, p, q, GAUSS_P), (3, q, p, GAUSS_Q)):  # both directions
        out = _jitted_bundle(g)(jax.random.key(key), src, dst)
        a = _np(out["a"])
        mu, sd = np.array(pairs).T
        assert np.all(np.abs(a.mean(0) - mu) < 5 * sd / math.sqrt(n))
        np.testing.assert_allclose(a.std(0), sd, rtol=0.02)
        lp = _np(out["logp"])
        d = lp - _np(out["logq"])
        assert abs(d.mean() - float(out["kl"][0])) < 5 * d.std() / math.sqrt(n) + 1e-4
        assert abs(-lp.mean() - float(out["entropy"][0])) < 5 * lp.std() / math.sqrt(n)
    # closed form, and asymmetric
    (mp, sp), (mq, sq) = np.array(GAUSS_P).T, np.array(GAUSS_Q).T
    kl_pq = np.sum(np.log(sq / sp) + (sp**2 + (mp - mq) ** 2) / (2 * sq**2) - 0.5)
    kl_qp = np.sum(np.log(sp / sq) + (sq**2 + (mq - mp) ** 2) / (2 * sp**2) - 0.5)
    assert float(out["kl"][0]) == pytest.approx(kl_qp, rel=1e-5)
    assert abs(kl_pq - kl_qp) > 1e-2


# ---------------------------------------------------------------------- truncated Gaussian
# One column per (mean, std): inside the box, near an edge, the box in a tail on either side
# (|alpha| up to ~30, where float64 references still work), a wide and a narrow std. Each column
# is paired with a different q for the KL checks.
TRUNC_P = ((0.0, 1.0), (0.5, 0.3), (3.0, 0.5), (-2.0, 0.1), (1.2, 0.3), (0.99, 0.5),
           (20.0, 1.0), (-1.05, 0.05), (0.0, 5.0), (0.3, 0.01))
TRUNC_Q = ((0.4, 0.8), (-0.5, 1.0), (2.0, 1.0), (-1.5, 0.2), (0.2, 0.5), (0.0, 2.0),
           (10.0, 2.0), (-1.0, 0.3), (1.0, 3.0), (0.35, 0.02))
# far beyond any float64 reference: boxes thousands of std away, std 1e6 or 1e-8 of the box
TRUNC_EXTREME = ((30.0, 0.01), (-1e4, 1.0), (0.0, 1e6), (0.999, 1e-4), (-3e3, 1e3),
                 (0.4, 1e-8), (1e6, 1e-3), (-5.0, 1e-6), (2.0, 150.0), (1.0, 1e-3))
N_TRUNC = 10_000


@functools.cache
def _trunc(key, p_pairs, q_pairs):
    """TruncatedGaussian's bundle on [N_TRUNC, columns] (cached: several tests share it)."""
    tg = TruncatedGaussian()
    p, q = _columns(p_pairs, N_TRUNC), _columns(q_pairs, N_TRUNC)
    return tg, p, q, _jitted_bundle(tg)(jax.random.key(key), p, q)


def test_truncated_log_prob_matches_reference_and_records_fields():
    tg, p, _, out = _trunc(6, TRUNC_P, TRUNC_Q)
    a, m, s = _np(out["a"][:64]), _np(p["mean"][:64]), _np(p["std"][:64])
    ref = np.sum(norm_logpdf((a - m) / s) - np.log(s) - trunc_log_mass((-1 - m) / s, (1 - m) / s),
                 axis=-1)
    np.testing.assert_allclose(np.asarray(out["logp"][:64]), ref, rtol=1e-5, atol=2e-4)
    for k in ("mean", "std"):  # what is recorded is p itself
        np.testing.assert_array_equal(np.asarray(out["info"][k]), np.asarray(p[k]))
    _check_fields(tg, len(TRUNC_P), out["info"], N_TRUNC)
    # the same key gives the same actions (a fresh call, not the cache), another key others
    again = _jitted_bundle(tg)(jax.random.key(6), p, _columns(TRUNC_Q, N_TRUNC))["a"]
    np.testing.assert_array_equal(np.asarray(again), np.asarray(out["a"]))
    assert not np.array_equal(np.asarray(_trunc(7, TRUNC_P, TRUNC_Q)[3]["a"]),
                              np.asarray(out["a"]))


def test_truncated_samples_match_distribution():
    _, _, _, out = _trunc(7, TRUNC_P, TRUNC_Q)
    a = _np(out["a"])
    assert a.min() >= -1.0 and a.max() <= 1.0
    for j, (m, s) in enumerate(TRUNC_P):
        m32, s32 = float(np.float32(m)), float(np.float32(s))
        mu, sd = trunc_moments(m32, s32, -1.0, 1.0)
        x = np.sort(a[:, j])
        assert abs(x.mean() - mu) < 5 * sd / math.sqrt(N_TRUNC) + 1e-6, (m, s)
        assert float(out["mean"][0, j]) == pytest.approx(mu, abs=1e-6 + 1e-5 * sd), (m, s)
        # Kolmogorov-Smirnov distance to the analytic CDF (0.1% critical value 1.95 / sqrt(n))
        cdf = trunc_cdf(x, m32, s32, -1.0, 1.0)
        emp = np.arange(1, N_TRUNC + 1) / N_TRUNC
        ks = np.max(np.maximum(emp - cdf, cdf - (emp - 1.0 / N_TRUNC)))
        assert ks < 1.95 / math.sqrt(N_TRUNC), (m, s, ks)


def test_truncated_kl_and_entropy_vs_monte_carlo():
    for key, p_pairs, q_pairs in ((8, TRUNC_P, TRUNC_Q), (9, TRUNC_Q, TRUNC_P)):  # both ways
        _, _, _, out = _trunc(key, p_pairs, q_pairs)
        lp = _np(out["logp"])
        d = lp - _np(out["logq"])
        # each row's log-density sums over the independent columns: so do KL and entropy
        assert abs(d.mean() - float(out["kl"][0])) < 5 * d.std() / math.sqrt(N_TRUNC) + 1e-4
        assert abs(-lp.mean() - float(out["entropy"][0])) < 5 * lp.std() / math.sqrt(N_TRUNC)
        assert float(out["kl"][0]) > 0


def test_mills_moments_and_their_derivatives():
    """J_n(x) = int_0^inf s^n exp(x s - s^2/2) ds (J_0 the Mills ratio) and dJ_n/dx = J_{n+1},
    including 9.2 < -x / sqrt 2 < 9.4 where float32 erfcx underflows."""
    x = np.concatenate([-np.linspace(0.0, 30.0, 61), [-13.1, -13.2, -13.3]]).astype(np.float32)
    j, dj = jax.jit(lambda x: jax.jvp(mills_moments, (x,), (jnp.ones_like(x),)))(x)
    x64 = _np(x)
    j0 = math.sqrt(math.pi / 2) * _erfc(-x64 / math.sqrt(2.0)) * np.exp(x64 * x64 / 2)
    j1 = 1.0 + x64 * j0
    j2 = j0 + x64 * j1
    j3 = 2.0 * j1 + x64 * j2
    for got, want in zip(j + dj, (j0, j1, j2, j1, j2, j3)):
        np.testing.assert_allclose(_np(got), want, rtol=2e-5)


def test_truncated_quantiles_are_exact_on_another_box():
    """The sampler's inverse CDF at fixed u against float64 bisection, box [-2, 0.5]."""
    low, high = -2.0, 0.5
    u = np.array([2.0**-24, 1e-6, 0.01, 0.3, 0.5, 0.77, 0.999, 1 - 2.0**-23], np.float32)
    cases = [(float(np.float32(m)), float(np.float32(s)))
             for m, s in TRUNC_P + ((0.0, 1e4), (1.5, 0.05), (-0.75, 1e-3))]
    uu = np.tile(u, len(cases))
    mm = np.repeat([m for m, _ in cases], len(u)).astype(np.float32)
    ss = np.repeat([s for _, s in cases], len(u)).astype(np.float32)
    x = _np(jax.jit(truncated_icdf, static_argnums=(3, 4))(
        jnp.asarray(uu), jnp.asarray(mm), jnp.asarray(ss), low, high)).reshape(len(cases), -1)
    for i, (m, s) in enumerate(cases):
        assert np.all(np.diff(x[i]) >= 0), (m, s)
        # reference quantile by bisection on the float64 CDF
        lo, hi = np.full(u.shape, low), np.full(u.shape, high)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            below = trunc_cdf(mid, m, s, low, high) < u
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        # to float32 resolution of the action, or 1e-5 of the distribution's width
        tol = 4e-7 + 1e-5 * trunc_moments(m, s, low, high)[1]
        np.testing.assert_allclose(x[i], 0.5 * (lo + hi), rtol=0, atol=tol, err_msg=f"{m}, {s}")


def test_truncated_extreme_parameters_stay_finite():
    """Samples, densities, KL, entropy, mean and the gradients of log_prob and KL (which needs
    the moments that entropy and mean use too) stay finite at any parameters."""
    for p_pairs, q_pairs in ((TRUNC_P, TRUNC_EXTREME), (TRUNC_EXTREME, TRUNC_P)):
        _, _, _, out = _trunc(10, p_pairs, q_pairs)
        a = _np(out["a"])
        assert np.all(np.isfinite(a)) and a.min() >= -1.0 and a.max() <= 1.0
        for k in ("logp", "logq", "kl", "entropy", "mean"):
            assert bool(jnp.all(jnp.isfinite(out[k]))), k
        assert all(bool(jnp.all(jnp.isfinite(g))) for g in out["grads"].values())
    # (the last p is TRUNC_EXTREME) the mass sits at the near bound
    assert np.all(a[:, 0] > 0.999) and np.all(a[:, 1] < -0.998)


# ---------------------------------------------------------------------- discrete
def test_categorical_log_prob_and_histogram():
    cat = Categorical()
    a, info, logp = sampled(cat, 10, LOGITS)
    probs = softmax(_np(LOGITS))
    np.testing.assert_allclose(np.asarray(logp), np.log(probs[np.arange(B), np.asarray(a)]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(info["probs"]), probs, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(cat.mode(info)), np.argmax(probs, -1))
    # empirical histogram of one row's distribution
    n = 100_000
    a, _, _ = sampled(cat, 11, jnp.broadcast_to(LOGITS[0], (n, N_ACT)))
    counts = np.bincount(np.asarray(a), minlength=N_ACT)
    assert chi_square(counts, probs[0]) < chi_square_limit(N_ACT - 1)


def test_categorical_kl_and_entropy_exact():
    cat = Categorical()
    lp, lq = RNG.normal(size=(3, 6)), RNG.normal(size=(3, 6))
    lp[0, 2] = -1e9  # a zero-probability action: 0 log 0 = 0
    p, q = softmax(lp), softmax(lq)

    def f(lp, lq):
        pi, qi = cat.info(lp), cat.info(lq)
        return cat.kl(pi, qi), cat.kl(qi, pi), cat.entropy(pi), cat.kl(lq, pi)
    kl_pq, kl_qp, ent, kl_logits = jax.jit(f)(jnp.asarray(lp, jnp.float32),
                                              jnp.asarray(lq, jnp.float32))
    with np.errstate(divide="ignore"):
        logp = np.where(p > 0, np.log(p), -np.inf)
    safe = np.where(p > 0, logp, 0.0)
    ref_pq = np.sum(p * (safe - np.log(q)), -1)
    ref_qp = np.sum(q * (np.log(q) - safe), -1)
    np.testing.assert_allclose(np.asarray(kl_pq), ref_pq, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(kl_qp)[1:], ref_qp[1:], rtol=1e-4, atol=1e-6)
    assert float(kl_qp[0]) > 10  # q puts mass where p has none
    np.testing.assert_allclose(np.asarray(ent), -np.sum(p * safe, -1), rtol=1e-5)
    # raw logits give the same as recorded probabilities
    np.testing.assert_allclose(np.asarray(kl_logits), np.asarray(kl_qp), rtol=1e-4, atol=1e-6)


def test_epsilon_greedy_probs_log_prob_and_histogram():
    eps = 0.3
    eg = EpsilonGreedy(eps)
    q = jnp.array([[1.0, 3.0, 3.0, 0.0]])  # a tie: the first argmax (index 1) is greedy
    expected = np.array([eps / 4, 1 - eps + eps / 4, eps / 4, eps / 4])
    n = 100_000
    a, info, logp = sampled(eg, 12, jnp.broadcast_to(q, (n, N_ACT)))
    np.testing.assert_allclose(np.asarray(info["probs"][0]), expected, rtol=1e-6)
    a = np.asarray(a)
    np.testing.assert_allclose(np.asarray(logp), np.log(expected[a]), rtol=1e-6)
    assert chi_square(np.bincount(a, minlength=N_ACT), expected) < chi_square_limit(N_ACT - 1)
    assert int(eg.mode(q)[0]) == 1 and int(eg.mode(info)[0]) == 1
    # epsilon per row (e.g. one per env copy), traced: 0 is greedy, 1 uniform
    epsilons = jnp.tile(jnp.array([0.0, 1.0]), B // 2)
    a, info, logp = sampled(eg, 13, LOGITS, epsilons)
    greedy = np.argmax(np.asarray(LOGITS), -1)
    np.testing.assert_array_equal(np.asarray(a)[::2], greedy[::2])
    np.testing.assert_allclose(np.asarray(info["probs"])[1::2], 0.25)
    np.testing.assert_allclose(np.asarray(info["probs"])[::2],
                               np.eye(N_ACT)[greedy[::2]], atol=1e-7)
    np.testing.assert_allclose(np.asarray(logp)[1::2], math.log(0.25), rtol=1e-6)


# ---------------------------------------------------------------------- additive noise
def test_additive_noise_log_prob_with_point_masses():
    an = AdditiveNoise(sigma=0.3)
    s = float(np.float32(0.3))
    a, info, logp = sampled(an, 14, MEAN)
    a, m = _np(a), _np(MEAN)
    assert np.any(a == 1.0) and np.any(a == -1.0) and np.all(np.abs(a) <= 1.0)
    with np.errstate(divide="ignore"):
        ref = np.where(a >= 1.0, np.log(norm_cdf((m - 1.0) / s)),
                       np.where(a <= -1.0, np.log(norm_cdf((-1.0 - m) / s)),
                                norm_logpdf((a - m) / s) - math.log(s))).sum(-1)
    np.testing.assert_allclose(np.asarray(logp), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(info["std"]), s)
    np.testing.assert_allclose(np.asarray(an.mode(info)), np.clip(m, -1, 1), rtol=1e-6)
    # the point masses: the fraction of clipped samples is the Gaussian tail mass, which is
    # exp(log_prob) of the bound
    mu = np.array([0.8, -0.9, 1.3], np.float32)
    n = 100_000
    x, info, logp = sampled(an, 15, jnp.broadcast_to(jnp.asarray(mu), (n, M)))
    x = _np(x)
    p_high, p_low = norm_cdf((_np(mu) - 1.0) / s), norm_cdf((-1.0 - _np(mu)) / s)
    for frac, p in ((np.mean(x == 1.0, 0), p_high), (np.mean(x == -1.0, 0), p_low)):
        assert np.all(np.abs(frac - p) < 5 * np.sqrt(p * (1 - p) / n) + 1e-4)
    # the mixed density is exact: a row clipped high, low, high has probability exp(log_prob)
    event = (x[:, 0] == 1.0) & (x[:, 1] == -1.0) & (x[:, 2] == 1.0)
    p_event = p_high[0] * p_low[1] * p_high[2]
    assert abs(event.mean() - p_event) < 5 * math.sqrt(p_event * (1 - p_event) / n)
    np.testing.assert_allclose(np.exp(_np(logp)[event]), p_event, rtol=1e-4)
    # an explicit (traced) sigma overrides the default
    _, info, _ = sampled(an, 16, MEAN, jnp.float32(0.1))
    np.testing.assert_allclose(np.asarray(info["std"]), 0.1)


# ---------------------------------------------------------------------- hybrid
TUPLE = spaces.Tuple((spaces.Discrete(4), spaces.Box(-3.0, 1.0, (2,), np.float32)))


def test_hybrid_log_prob_is_sum_and_layout_round_trips():
    spec = ActionSpec.from_gym(TUPLE)
    hyb = Hybrid.from_spec(spec)
    assert hyb.names == ("0", "1") and hyb.flat_dim == spec.flat_dim == 3
    fields = hyb.behaviour_fields()
    assert {k: v[0] for k, v in fields.items()} == {"0.probs": (4,), "1.mean": (2,),
                                                     "1.std": (2,)}
    cat, gau = Categorical(), Gaussian()
    params = (LOGITS, (MEAN[:, :2], STD[:, :2]))
    params_q = (LOGITS[::-1], (MEAN[::-1, :2], STD[::-1, :2]))

    def f(key, params, params_q):
        flat, info = hyb.sample(key, params)
        parts = hyb.split(flat)
        info_q = hyb.info(params_q)
        c, g = (hyb.component_info(info, n) for n in hyb.names)
        cq, gq = (hyb.component_info(info_q, n) for n in hyb.names)
        return dict(
            flat=flat, info=info, parts=parts, round_trip=hyb.flatten(parts),
            logp=hyb.log_prob(info, flat),
            logp_parts=cat.log_prob(c, parts[0]) + gau.log_prob(g, parts[1]),
            kl=hyb.kl(info, info_q), kl_parts=cat.kl(c, cq) + gau.kl(g, gq),
            entropy=hyb.entropy(info), entropy_parts=cat.entropy(c) + gau.entropy(g),
            mode=hyb.mode(info))
    out = jax.jit(f)(jax.random.key(17), params, params_q)
    flat = np.asarray(out["flat"])
    assert flat.shape == (B, 3) and flat.dtype == np.float32
    assert set(out["info"]) == set(fields)
    idx = flat[:, 0]
    assert np.all(idx == np.round(idx)) and np.all((idx >= 0) & (idx < 4))
    assert out["parts"][0].dtype == jnp.int32 and out["parts"][1].shape == (B, 2)
    np.testing.assert_array_equal(np.asarray(out["round_trip"]), flat)
    for k in ("logp", "kl", "entropy"):
        np.testing.assert_allclose(np.asarray(out[k]), np.asarray(out[k + "_parts"]), rtol=1e-6)
    # the log-probability against independent references
    m, s = _np(MEAN[:, :2]), _np(STD[:, :2])
    ref = (np.log(softmax(_np(LOGITS))[np.arange(B), idx.astype(int)])
           + np.sum(norm_logpdf((flat[:, 1:] - m) / s) - np.log(s), -1))
    np.testing.assert_allclose(np.asarray(out["logp"]), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["mode"])[:, 1:], m, rtol=1e-6)
    # the library's flat layout: ActionSpec splits it and maps it to the env the same way
    env_action = spec.to_env(flat[0])
    assert env_action[0] == int(out["parts"][0][0]) and env_action[1].shape == (2,)
    for got, want in zip(spec.split(flat), (flat[:, :1], flat[:, 1:])):
        np.testing.assert_array_equal(got, want)
    assert spec.from_env(env_action)[0] == flat[0, 0]


def test_hybrid_named_components_and_other_actors():
    dict_space = spaces.Dict({"z_param": spaces.Box(0.0, 4.0, (2,), np.float32),
                              "a_choice": spaces.Discrete(3)})
    eg, an = EpsilonGreedy(0.2), AdditiveNoise(sigma=0.5)
    hyb = Hybrid.from_spec(ActionSpec.from_gym(dict_space), continuous=an, discrete=eg)
    assert hyb.names == ("a_choice", "z_param")
    assert set(hyb.behaviour_fields()) == {"a_choice.probs", "z_param.mean", "z_param.std"}

    def f(key, params):
        flat, info = hyb.sample(key, params)
        parts = hyb.split(flat)
        parts_lp = (eg.log_prob(hyb.component_info(info, "a_choice"), parts[0])
                    + an.log_prob(hyb.component_info(info, "z_param"), parts[1]))
        return flat, hyb.log_prob(info, flat), parts_lp
    # components given as a bare array (q-values) and a one-element tuple (default sigma)
    flat, logp, parts_lp = jax.jit(f)(jax.random.key(18), (LOGITS[:, :3], (MEAN[:, :2],)))
    assert np.any(np.abs(np.asarray(flat[:, 1:])) == 1.0)  # clipped coordinates: point masses
    np.testing.assert_allclose(np.asarray(logp), np.asarray(parts_lp), rtol=1e-6)
    with pytest.raises(ValueError, match="multi_discrete"):
        Hybrid.from_spec(ActionSpec.from_gym(spaces.Tuple((spaces.MultiDiscrete([2, 3]),))))
    with pytest.raises(ValueError, match="unique"):
        Hybrid((("x", Gaussian(), 1), ("x", Categorical(), 2)))
    dotted = Hybrid((("x", Gaussian(), 1), ("x.y", Categorical(), 2)))
    info = {"x.mean": 0, "x.std": 1, "x.y.probs": 2}
    assert dotted.component_info(info, "x") == {"mean": 0, "std": 1}
    assert dotted.component_info(info, "x.y") == {"probs": 2}
