"""The verdicts of pre-registered claims (offpolicy/suites/verdict.py) against plain loops and
hand numbers: the window statistic, the best evaluation, the paper's training-episode measure,
the bootstrap interval, the detectable difference, Holm's adjustment and the rules (superiority
and non-inferiority)."""

import csv
import math

import numpy as np
import pytest

from offpolicy.errors import OffpolicyError
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


def test_best_evaluation_is_the_highest_evaluation_up_to_the_budget(tmp_path):
    d = _run(tmp_path, "s0", [(10, 5.0), (20, 9.0), (30, 7.0), (40, 12.0)])
    assert verdict.best_evaluation(d, 30) == 9.0  # a longer run's later evaluations left out
    assert verdict.best_evaluation(d, 40) == 12.0
    assert verdict.statistic(d, 40, Decision((), window=20, statistic="best")) == 12.0
    assert verdict.statistic(d, 40, Decision((), window=20)) == pytest.approx((7 + 12) / 2)
    with pytest.raises(OffpolicyError, match="no evaluation at or before step 5"):
        verdict.best_evaluation(d, 5)


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


@pytest.mark.parametrize("diff, p, lo, hi, mean_b, want", [
    (100.0, 0.7, -250.0, 450.0, 3000.0, "reproduced"),  # -250 above -10% of 3000 = -300
    (500.0, 0.01, 100.0, 900.0, 3000.0, "reproduced"),  # a significant gain is no loss
    (-100.0, 0.5, -350.0, 150.0, 3000.0, "inconclusive"),  # a loss of -350 still possible
    (-200.0, 0.03, -290.0, -110.0, 3000.0, "reproduced"),  # a loss, but within the margin
    (-900.0, 0.01, -1300.0, -500.0, 3000.0, "not reproduced"),  # B significantly better
    (-900.0, 0.07, -1300.0, -20.0, 3000.0, "inconclusive"),  # p must agree
    (-900.0, 0.04, -1300.0, 20.0, 3000.0, "inconclusive"),  # and the interval
    (-10.0, 0.9, -280.0, 260.0, -3000.0, "reproduced"),  # the margin is of |mean S of B|
])
def test_the_non_inferiority_rule(diff, p, lo, hi, mean_b, want):
    assert verdict.verdict(diff, p, lo, hi, mean_b, 0.1, rule="non-inferior") == want


def test_a_decision_on_the_best_evaluation_with_a_non_inferiority_claim(tmp_path):
    """S is each run's best evaluation, the window mean beside it; the non-inferiority claim
    stays out of Holm's family (C1's adjusted p is its own p, a family of one)."""
    from scipy import stats

    def curve(best, last):  # evaluations every 100 steps to 1000: the best at 500, the
        return [(s, best if s == 500 else last if s > 800 else 0.0)  # last two at ``last``
                for s in range(100, 1100, 100)]

    groups = {"Ant": {
        "new": [_run(tmp_path, f"n{i}", curve(b, 100.0)) for i, b in enumerate([119, 120, 121])],
        "old": [_run(tmp_path, f"o{i}", curve(b, 5.0)) for i, b in enumerate([10, 20, 30])],
        "ref": [_run(tmp_path, f"r{i}", curve(b, 90.0)) for i, b in enumerate([124, 125, 126])]}}
    d = Decision((Claim("C1", "new", "old"), Claim("C2", "new", "ref", rule="non-inferior")),
                 window=200, statistic="best")
    text = verdict.decision_section(d, groups, {"Ant": 1000}, (0, 1, 2))
    p1 = stats.ttest_ind([119, 120, 121], [10, 20, 30], equal_var=False).pvalue
    p2 = stats.ttest_ind([119, 120, 121], [124, 125, 126], equal_var=False).pvalue
    assert p2 < 0.05  # ref is significantly better, by less than 10% of 125
    assert "S per run: the best evaluation return of the run" in text
    assert "| window mean A - B | verdict |" in text
    c1 = next(line for line in text.splitlines() if line.startswith("| C1 |"))
    assert c1.split(" | ")[4:8] == ["120.0 ± 0.6", "20.0 ± 5.8", "100.0", f"{p1:.3f}"]
    assert c1.split(" | ")[7] == c1.split(" | ")[8] == f"{p1:.3f}"  # Holm over C1 alone
    assert c1.endswith(" | - | 95.0 | reproduced |")  # window means 100 - 5
    c2 = next(line for line in text.splitlines() if line.startswith("| C2 "))
    assert c2.startswith("| C2 (non-inferiority) | Ant | new - ref | 3 / 3 | 120.0 ± 0.6 | "
                         f"125.0 ± 0.6 | -5.0 | {p2:.3f} |  | [")
    assert c2.endswith(" | - | 10.0 | reproduced |")
    assert ("**C2 on Ant** (new - ref, non-inferiority margin -12.5): reproduced: difference "
            "-5.0") in text
    assert "survives Holm" in text.split("**C1")[1].split("\n")[0]


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


def test_beside_sets_each_arm_beside_its_twin_without_a_test(tmp_path):
    """``decision.beside``: S of each arm (here the best evaluation) beside its twin's in the
    other grid, per task, with the difference of the means and no p or verdict; a twin with no
    finished run leaves a dash; no ``beside``, no section."""
    from offpolicy.suites.spec import Beside

    curve = lambda best: [(100, 0.0), (200, best), (300, 1.0)]  # noqa: E731
    here = {"Ant": {"new": [_run(tmp_path, f"n{i}", curve(b)) for i, b in enumerate([10, 14])],
                    "other": [_run(tmp_path, "x0", curve(3))]}}
    twins = {"Ant": {"old": [_run(tmp_path, f"o{i}", curve(b)) for i, b in enumerate([2, 4, 6])]}}
    d = Decision((Claim("C1", "new", "other"),), window=100, statistic="best",
                 beside=Beside("old-grid", (("new", "old"), ("other", "gone"))))
    text = verdict.beside_section(d, here, twins, {"Ant": 300})
    assert "## Beside old-grid (a description, no test)" in text
    rows = [line for line in text.splitlines() if line.startswith("| Ant |")]
    assert rows == ["| Ant | new | 2 | 12.0 ± 2.0 | old | 3 | 4.0 ± 1.2 | 8.0 |",
                    "| Ant | other | 1 | 3.0 (1 run) | gone | 0 | - |  |"]
    assert "reproduced" not in text and " p " not in text
    assert verdict.beside_section(Decision((), window=100), here, twins, {"Ant": 300}) == ""
