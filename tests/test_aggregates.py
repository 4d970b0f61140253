"""The aggregates across a suite's tasks (offpolicy.suites.aggregates, issue #69 item 6): IQM,
mean, probability of improvement and performance profiles on hand-computable inputs, the
stratified bootstrap's intervals, and the report's section on synthetic runs with known
answers. No rliable here: the cross-check against it is in docs/guides/aggregates.md."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

from offpolicy.errors import OffpolicyError
from offpolicy.suites import aggregates as A
from offpolicy.suites import runner, spec
from offpolicy.suites.report import write_report

# ---------------------------------------------------------------------- point estimates


def test_iqm_is_the_mean_of_the_middle_half_of_every_run_of_every_task():
    assert A.iqm([np.array([1.0, 2, 3, 4]), np.array([5.0, 6, 7, 8])]) == 4.5  # (3+4+5+6)/4
    # an outlier run does not move it: sorted [1..7, 1000], the middle four are 3..6
    assert A.iqm([np.array([1.0, 2, 3, 1000]), np.array([4.0, 5, 6, 7])]) == 4.5
    # 10 scores: int(2.5) = 2 dropped at each end, as scipy.stats.trim_mean(x, 0.25)
    assert A.iqm([np.arange(10.0)]) == 4.5
    from scipy import stats

    rng = np.random.default_rng(0)
    for sizes in [(3, 3, 3), (2, 5), (7,), (4, 1, 6)]:
        tasks = [rng.normal(size=n) for n in sizes]
        assert np.isclose(A.iqm(tasks), stats.trim_mean(np.concatenate(tasks), 0.25))


def test_mean_is_the_mean_of_the_tasks_means():
    assert A.mean([np.array([1.0, 3.0]), np.array([10.0, 20.0, 30.0])]) == 11.0  # (2 + 20) / 2


def test_probability_of_improvement_counts_pairs_and_half_ties():
    poi = A.probability_of_improvement
    lo, hi = [np.array([0.0, 1.0, 2.0])], [np.array([5.0, 6.0])]
    assert poi(hi, lo) == 1.0 and poi(lo, hi) == 0.0  # disjoint
    assert poi(lo, lo) == 0.5  # identical samples
    assert poi([np.full(3, 2.0)], [np.full(4, 2.0)]) == 0.5  # every pair tied
    # (2>1) + (2=2)/2 + (3>1) + (3>2) = 3.5 of 4 pairs
    assert poi([np.array([2.0, 3.0])], [np.array([1.0, 2.0])]) == 0.875
    # averaged over tasks, not pooled: 1, 0 and 0.875
    assert np.isclose(poi([hi[0], lo[0], np.array([2.0, 3.0])],
                          [lo[0], hi[0], np.array([1.0, 2.0])]), 1.875 / 3)
    from scipy import stats

    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 4, 6).astype(float), rng.integers(0, 4, 5).astype(float)  # ties
    u = stats.mannwhitneyu(x, y, alternative="greater").statistic
    assert np.isclose(poi([x], [y]), u / (6 * 5))
    with pytest.raises(ValueError, match="tasks"):
        poi([x], [y, y])


def test_performance_profile_is_the_fraction_of_runs_above_tau():
    tasks = [np.array([0.1, 0.2]), np.array([0.3, 0.4])]
    np.testing.assert_array_equal(A.performance_profile(tasks, [0.0, 0.15, 0.4, 1.0]),
                                  [1.0, 0.75, 0.0, 0.0])  # strictly above tau


# ---------------------------------------------------------------------- the bootstrap


def test_stratified_resampling_never_mixes_tasks():
    tasks = [np.array([0.0, 0.1, 0.2]), np.array([100.0, 101.0, 102.0, 103.0, 104.0])]
    boot = A.stratified_resample(tasks, 500, np.random.default_rng(0))
    assert [b.shape for b in boot] == [(500, 3), (500, 5)]  # each task keeps its run count
    for b, t in zip(boot, tasks):
        assert set(np.unique(b)) <= set(t)
    assert len(np.unique(boot[1])) == 5  # drawn with replacement from all of its runs
    # two tasks at 0 and 1, three runs each: every stratified resample pools three 0s and
    # three 1s, so its IQM is 0.5 exactly (a bootstrap pooling the tasks would spread it)
    assert A.interval(A.iqm, [np.zeros(3), np.ones(3)]) == (0.5, 0.5, 0.5)


def test_intervals_hold_the_estimate_and_shrink_with_more_runs():
    rng = np.random.default_rng(2)
    widths = []
    for n in (5, 40):
        tasks = [rng.normal(k, 1.0, n) for k in range(3)]
        for stat in (A.iqm, A.mean):
            point, lo, hi = A.interval(stat, tasks)
            assert lo <= point <= hi
        point, lo, hi = A.interval(A.iqm, tasks)
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 2  # sqrt(8) fewer: about 2.8 times narrower
    x, y = [rng.normal(0.5, 1.0, 10)], [rng.normal(0.0, 1.0, 10)]
    point, lo, hi = A.interval(A.probability_of_improvement, x, y)
    assert 0.0 <= lo <= point <= hi <= 1.0
    assert A.interval(A.iqm, [np.full(4, 2.0)]) == (2.0, 2.0, 2.0)  # no spread, no width


# the pooled seven sorted, one dropped at each end: (0.2 + 0.3 + 0.5 + 0.6 + 0.8) / 5 = 0.48;
# the interval as this module first computed it
REGRESSION = (0.48, 0.24, 0.74)


def test_intervals_are_deterministic_with_a_fixed_seed():
    """A regression value: default_rng(0), 2000 resamples, percentile 95%."""
    tasks = [np.array([0.1, 0.5, 0.9, 0.3]), np.array([0.2, 0.8, 0.6])]
    first = A.interval(A.iqm, tasks)
    assert first == A.interval(A.iqm, tasks)  # same seed, same numbers
    np.testing.assert_allclose(first, REGRESSION, atol=1e-12)
    assert A.interval(A.iqm, tasks, seed=1) != first


# ---------------------------------------------------------------------- normalisation


def test_minmax_normalisation_spans_every_run_of_a_task():
    finals = {"A": {"a": [3.0, 5.0], "b": [1.0, 2.0]}, "B": {"a": [7.0, 7.0], "b": [7.0]}}
    bounds = A.minmax_bounds(finals)
    assert bounds == {"A": (1.0, 5.0), "B": (7.0, 7.0)}
    norm = A.normalise(finals, bounds)
    assert list(norm) == ["A"]  # every run of B scored the same: nothing to scale by
    np.testing.assert_allclose(norm["A"]["a"], [0.5, 1.0])
    np.testing.assert_allclose(norm["A"]["b"], [0.0, 0.25])


# ---------------------------------------------------------------------- the report


def _fake_run(d: Path, final: float, steps: int = 20) -> None:
    d.mkdir(parents=True)
    with open(d / "eval.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "return_mean", "return_std", "return_se", "episodes", "wall_time"])
        w.writerow([steps // 2, final - 1000.0, 1.0, 0.5, 4, 1.0])  # only the final counts
        w.writerow([steps, final, 1.0, 0.5, 4, 1.0])


def _report(tmp_path: Path, finals: dict, seeds=(0, 1, 2), **over) -> str:
    d = {"name": "agg", "envs": list(finals), "seeds": list(seeds), "steps": 20,
         "eval": {"every": 10, "episodes": 4}, "entries": {"a": {"algo": "ddpg"},
                                                            "b": {"algo": "ddpg"}},
         "compare": [["a", "b"]]}
    d.update(over)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "agg.yaml"
    path.write_text(yaml.safe_dump(d))
    suite = spec.load(path)
    runs = runner.plan(suite, runner.default_layout(tmp_path / "runs"))
    for r in runs:
        if r.seed < len(finals[r.env][r.entry.name]):
            _fake_run(r.run_dir, finals[r.env][r.entry.name][r.seed])
    return write_report(suite, runs, tmp_path / "out", "r", "cmd")


# a dominates b on both tasks, on scales 100 times apart
FINALS = {"TaskA-v0": {"a": [3.0, 4.0, 5.0], "b": [0.0, 1.0, 2.0]},
          "TaskB-v0": {"a": [300.0, 400.0, 500.0], "b": [0.0, 100.0, 200.0]}}


def test_report_aggregates_two_tasks_with_known_answers(tmp_path):
    """Min-max per task: a's runs are 0.6, 0.8, 1.0 on each task and b's 0, 0.2, 0.4, so
    a's IQM (the middle four of six) and mean are 0.8 and b's 0.2; every run of a beats every
    run of b in every resample, so P(a > b) is 1 with the interval [1, 1]. The Welch table
    stays."""
    text = _report(tmp_path, FINALS)
    agg = text[text.index("## Aggregates across tasks"):]
    assert "Over 2 tasks (TaskA-v0, TaskB-v0)" in agg
    assert "min-max over every run of the task in this report" in agg
    assert "2000 resamples, seed 0" in agg
    assert "| a | 2 | 6 | 0.800 [" in agg and "| b | 2 | 6 | 0.200 [" in agg
    assert "| P(a > b) | 2 | 1.000 [1.000, 1.000] |" in agg
    assert "Final return, differences of means (Welch's t-test" in text
    assert text.index("| a - b | 3 / 3 |") < text.index("## Aggregates")
    assert (tmp_path / "out" / "r_profile.png").stat().st_size > 0
    assert "r_profile.png" in agg


def test_report_normalises_by_the_suites_scores(tmp_path):
    """``scores: {env: [random, reference]}``: a's runs are 0.3, 0.4, 0.5 on both tasks."""
    text = _report(tmp_path, FINALS, scores={"TaskA-v0": [0, 10], "TaskB-v0": [0, 1000]})
    agg = text[text.index("## Aggregates across tasks"):]
    assert "with the suite's `scores` per task: TaskA-v0 [0, 10]; TaskB-v0 [0, 1000]" in agg
    assert "| a | 2 | 6 | 0.400 [" in agg and "| b | 2 | 6 | 0.100 [" in agg
    # scores for one task only: min-max for both, and it says which task lacks them
    text = _report(tmp_path / "part", FINALS, scores={"TaskA-v0": [0, 10]})
    assert "the suite's `scores` miss TaskB-v0" in text and "| a | 2 | 6 | 0.800 [" in text


def test_one_task_is_per_task_and_one_run_has_no_aggregates(tmp_path):
    text = _report(tmp_path, {"TaskA-v0": FINALS["TaskA-v0"]})
    assert "One task, so these aggregates are per-task: over the runs of TaskA-v0 alone." in text
    assert "| P(a > b) | 1 | 1.000 [1.000, 1.000] |" in text
    out = tmp_path / "one"
    text = _report(out, {"TaskA-v0": {"a": [1.0], "b": [2.0]}}, seeds=[0])
    assert "Aggregates" not in text and not (out / "out" / "r_profile.png").exists()


def test_the_suites_scores_are_checked(tmp_path):
    for scores, what in [({"TaskC-v0": [0, 1]}, "unknown key 'TaskC-v0'"),
                         ({"TaskA-v0": [0]}, "expected [random, reference]"),
                         ({"TaskA-v0": [1, 1]}, "nothing to normalise by"),
                         ({"TaskA-v0": ["x", 1]}, "expected a number")]:
        with pytest.raises(OffpolicyError, match=r"scores"):
            try:
                _report(tmp_path, FINALS, scores=scores)
            except OffpolicyError as e:
                assert what in str(e), e
                raise
