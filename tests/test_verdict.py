"""The verdicts of pre-registered claims (offpolicy/suites/verdict.py) against plain loops and
hand numbers: the window statistic, the paper's training-episode measure, the bootstrap
interval, the detectable difference, Holm's adjustment and the rule."""

import csv
import math

import numpy as np
import pytest

from offpolicy.suites import verdict
from offpolicy.suites.spec import Claim, Decision


def _run(tmp_path, name, evals, train=None):
    d = tmp_path / name
    d.mkdir(parents=True)
    with open(d / "eval.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "return_mean", "return_std", "return_se", "episodes", "wall_time"])
        for step, r in evals:
            w.writerow([step, r, 0.0, 0.0, 20, 0.0])
    if train is not None:
        with open(d / "train.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "episodes", "episode_return"])
            for row in train:
                w.writerow(row)
    return d


def test_window_mean_takes_the_evaluations_of_the_last_window(tmp_path):
    d = _run(tmp_path, "s0", [(s, s / 10) for s in range(10, 110, 10)])
    assert verdict.window_mean(d, 100, 20) == pytest.approx((9 + 10) / 2)
    assert verdict.window_mean(d, 100, 45) == pytest.approx((6 + 7 + 8 + 9 + 10) / 5)
    assert verdict.window_mean(d, 80, 20) == pytest.approx((7 + 8) / 2)  # a longer run's tail out


def test_training_window_mean_weights_each_interval_by_its_episodes(tmp_path):
    # running episode counts 2, 5, 5, 9: the intervals finished 2, 3, 0 and 4 episodes
    d = _run(tmp_path, "s0", [(40, 0.0)],
             [(10, 2, 1.0), (20, 5, 2.0), (30, 5, "nan"), (40, 9, 4.0)])
    assert verdict.training_window_mean(d, 40, 25) == pytest.approx((3 * 2.0 + 4 * 4.0) / 7)
    assert verdict.training_window_mean(d, 40, 40) == pytest.approx(
        (2 * 1.0 + 3 * 2.0 + 4 * 4.0) / 9)
    assert math.isnan(verdict.training_window_mean(_run(tmp_path, "s1", [(40, 0.0)]), 40, 20))


def test_bootstrap_interval_is_the_plain_resampling_loop():
    a, b = [3.0, 5.0, 4.0, 9.0, 1.0], [2.0, 2.5, 0.0, 1.0]
    rng = np.random.default_rng(0)
    da = rng.choice(np.asarray(a), size=(10_000, 5), replace=True).mean(axis=1)
    db = rng.choice(np.asarray(b), size=(10_000, 4), replace=True).mean(axis=1)
    diffs = sorted(da - db)
    lo, hi = verdict.bootstrap_interval(a, b)
    assert lo == pytest.approx(np.percentile(diffs, 2.5))
    assert hi == pytest.approx(np.percentile(diffs, 97.5))
    # a plain loop over resamples, one draw at a time, lands on the same interval to sampling
    # noise: the interval is that of the difference of means
    loop = []
    r = np.random.default_rng(1)
    for _ in range(4000):
        loop.append(np.mean([a[r.integers(5)] for _ in range(5)])
                    - np.mean([b[r.integers(4)] for _ in range(4)]))
    assert np.percentile(loop, 2.5) == pytest.approx(lo, abs=0.35)
    assert np.percentile(loop, 97.5) == pytest.approx(hi, abs=0.35)


def test_the_detectable_difference_is_detected_with_the_stated_power():
    """Normal seeds with the same spread: a true difference of the detectable size is found by
    Welch's test at 0.05 in about 80% of simulated grids (the formula is a t approximation)."""
    from offpolicy.suites.report import welch

    rng = np.random.default_rng(0)
    n, sd = 5, 100.0
    a0, b0 = rng.normal(0, sd, n), rng.normal(0, sd, n)
    a0, b0 = (a0 - a0.mean()) / a0.std(ddof=1) * sd, (b0 - b0.mean()) / b0.std(ddof=1) * sd
    mde = verdict.detectable_difference(a0, b0)
    hits = 0
    trials = 2000
    for _ in range(trials):
        a, b = rng.normal(mde, sd, n), rng.normal(0, sd, n)
        hits += welch(a, b)[2] < 0.05
    assert hits / trials == pytest.approx(0.8, abs=0.06)


def test_holm_against_hand_numbers():
    # sorted 0.01, 0.02, 0.04 of m = 4 (and 0.5): 0.04, 0.06, 0.08, then max(0.08, 0.5)
    assert verdict.holm([0.02, 0.5, 0.01, 0.04]) == pytest.approx([0.06, 0.5, 0.04, 0.08])
    assert verdict.holm([0.9, 0.6]) == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize("diff, p, lo, hi, mean_b, want", [
    (500.0, 0.01, 100.0, 900.0, 3000.0, "reproduced"),
    (500.0, 0.08, -50.0, 900.0, 3000.0, "inconclusive"),  # the interval holds 0
    (500.0, 0.04, -5.0, 900.0, 3000.0, "inconclusive"),  # p and interval must both agree
    (-1800.0, 0.04, -2200.0, -1000.0, 3000.0, "not reproduced"),  # a significant reversal
    (-10.0, 0.9, -250.0, 250.0, 3000.0, "not reproduced"),  # below 10% of 3000 throughout
    (-10.0, 0.9, -250.0, 350.0, 3000.0, "inconclusive"),  # 350 > 300 is still possible
])
def test_the_verdict_rule(diff, p, lo, hi, mean_b, want):
    assert verdict.verdict(diff, p, lo, hi, mean_b, 0.1) == want


def test_a_decision_section_gives_one_line_per_primary_claim_and_task(tmp_path):
    evals = lambda r: [(s, r) for s in range(100, 1100, 100)]  # noqa: E731
    groups = {"Ant": {"new": [_run(tmp_path, f"n{i}", evals(100 + 10 * i)) for i in range(3)],
                      "old": [_run(tmp_path, f"o{i}", evals(10 * i)) for i in range(3)]}}
    d = Decision((Claim("C1", "new", "old"), Claim("C9", "new", "none"),
                  Claim("side", "old", "new", primary=False)), window=200)
    text = verdict.decision_section(d, groups, {"Ant": 1000}, (0, 1, 2, 3, 4))
    assert "**C1 on Ant** (new - old): reproduced (interim): difference 100.0" in text
    assert "**C9 on Ant** (new - none): pending (3 / 0 runs finished)." in text
    assert "side" in text and "**side" not in text  # secondary: in the table, no verdict line
    final = verdict.decision_section(
        Decision((Claim("C1", "new", "old", seeds=(0, 1, 2)),), window=200), groups,
        {"Ant": 1000}, (0, 1, 2, 3, 4))
    assert "reproduced: difference" in final and "interim" not in final.split("Verdicts:")[1]
