"""The statistics of suite reports and verdicts: Welch's and the paired t-test, the bootstrap
interval of a difference of means, the smallest difference a grid's seeds could detect, and
Holm's adjustment. Each is tested against a plain loop or scipy (tests/test_learning_report.py,
tests/test_verdict.py)."""

from __future__ import annotations

import math

import numpy as np

ALPHA = 0.05
POWER = 0.8
RESAMPLES = 10_000


def welch(a, b, level: float = 0.95) -> tuple[float, float, float, float, float]:
    """Welch's t-test of mean(a) = mean(b) without assuming equal variances: (t, degrees of
    freedom by the Welch-Satterthwaite equation, two-sided p, and the ``level`` interval of
    mean(a) - mean(b), diff +- t_q(df) se, which excludes 0 exactly when p < 1 - level).
    scipy comes with jax."""
    from scipy import stats

    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0.0:
        nan = float("nan")
        return nan, nan, nan, nan, nan
    diff, se = a.mean() - b.mean(), np.sqrt(va + vb)
    t = diff / se
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf((1 + level) / 2, df) * se
    return (float(t), float(df), float(2.0 * stats.t.sf(abs(t), df)), float(diff - half),
            float(diff + half))


def paired_t(a, b, level: float = 0.95) -> tuple[float, float, float, float, float]:
    """Paired t-test of mean(a - b) = 0 over matched runs (a[i] and b[i] of one seed): (t,
    df = n - 1, two-sided p, and the ``level`` interval of the mean difference)."""
    from scipy import stats

    d = np.asarray(a, float) - np.asarray(b, float)
    se = d.std(ddof=1) / np.sqrt(len(d))
    if se == 0.0:
        nan = float("nan")
        return nan, nan, nan, nan, nan
    t, df = d.mean() / se, len(d) - 1
    half = stats.t.ppf((1 + level) / 2, df) * se
    return (float(t), float(df), float(2.0 * stats.t.sf(abs(t), df)),
            float(d.mean() - half), float(d.mean() + half))


def bootstrap_interval(a, b, level: float = 0.95, resamples: int = RESAMPLES,
                       seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of mean(a) - mean(b): each resample draws len(a)
    runs of a and len(b) of b with replacement (the seeds within each arm), ``resamples``
    times, from ``numpy.random.default_rng(seed)``."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    da = rng.choice(a, size=(resamples, len(a)), replace=True).mean(axis=1)
    db = rng.choice(b, size=(resamples, len(b)), replace=True).mean(axis=1)
    lo, hi = np.percentile(da - db, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def detectable_difference(a, b, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest difference of means Welch's two-sided test at ``alpha`` would detect with
    probability ``power``, given these seeds' standard deviations:
    (t_{1-alpha/2}(df) + t_{power}(df)) * sqrt(s_a^2 / n_a + s_b^2 / n_b), df by
    Welch-Satterthwaite."""
    from scipy import stats

    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0.0:
        return 0.0
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * math.sqrt(va + vb))


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: the i-th smallest of m times
    (m - i + 1) (i from 1), made non-decreasing, at most 1."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out
