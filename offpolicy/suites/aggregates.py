"""Aggregates of a suite report across its tasks, as Agarwal et al. (2021), "Deep Reinforcement
Learning at the Edge of the Statistical Precipice" (NeurIPS), define them and the rliable
library computes them: the interquartile mean with stratified bootstrap intervals, the
probability of improvement, and performance profiles.

Scores are given per task: a sequence with one array per task, the runs on its last axis (the
tasks may have different numbers of runs; leading axes, where there are any, are bootstrap
replicates, so that one function computes the point estimate and its bootstrap distribution).
rliable takes a ``runs x tasks`` matrix, so where every task has the same number of runs each
function here gives rliable's number; with unequal counts the pooled statistics (IQM and the
profile) weight each task by its runs.

Checked against rliable 1.2.0 (``metrics.aggregate_iqm``, ``aggregate_mean``,
``probability_of_improvement``, ``library.get_interval_estimates`` and
``create_performance_profile``, 50 000 resamples each side) on random ``runs x tasks`` inputs:
the point estimates are identical and the interval ends differ by the resampling alone (about
0.001, or one step of a discrete statistic): docs/guides/aggregates.md. The known answers are
in tests/test_aggregates.py, which needs no rliable.

In a report (:func:`section`) each run's score is its final evaluation return, the table's
"final" (the last evaluation at or before the last step every run of that env reached),
normalised per task: ``(x - random) / (reference - random)`` with the suite's ``scores`` where
it gives them for every task, else min-max over every run of that task in the report (0 the
task's worst run, 1 its best), which makes the aggregates relative to the report's own entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

REPS = 2000  # bootstrap resamples (rliable's default for performance profiles)
SEED = 0  # numpy.random.default_rng(SEED) for every interval: a report is deterministic
LEVEL = 0.95
TRIM = 0.25  # the IQM drops this fraction of the scores at each end
PROFILE_POINTS = 101

Scores = Sequence[np.ndarray]


def _pooled(scores: Scores) -> np.ndarray:
    """Every run of every task along the last axis."""
    return np.concatenate([np.asarray(s, float) for s in scores], axis=-1)


def iqm(scores: Scores) -> np.ndarray:
    """Interquartile mean (rliable ``metrics.aggregate_iqm``): the mean of the middle 50% of
    all runs x tasks scores, ``scipy.stats.trim_mean(x, 0.25)`` of them pooled: sorted,
    ``int(0.25 n)`` dropped at each end."""
    x = np.sort(_pooled(scores), axis=-1)
    n = x.shape[-1]
    cut = int(TRIM * n)
    return x[..., cut:n - cut].mean(axis=-1)


def mean(scores: Scores) -> np.ndarray:
    """Mean of the tasks' mean scores (rliable ``metrics.aggregate_mean``)."""
    return np.mean([np.asarray(s, float).mean(axis=-1) for s in scores], axis=0)


def probability_of_improvement(x: Scores, y: Scores) -> np.ndarray:
    """P(X > Y) (rliable ``metrics.probability_of_improvement``): per task, the Mann-Whitney U
    statistic of X's runs against Y's over m x n, the fraction of pairs (x_i, y_j) with
    x_i > y_j, a tie counting 1/2; averaged over the tasks (``x`` and ``y`` list the same
    tasks in one order)."""
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} tasks and y {len(y)}")
    per_task = []
    for a, b in zip(x, y):
        a = np.asarray(a, float)[..., :, None]
        b = np.asarray(b, float)[..., None, :]
        per_task.append(((a > b) + 0.5 * (a == b)).mean(axis=(-2, -1)))
    return np.mean(per_task, axis=0)


def performance_profile(scores: Scores, taus) -> np.ndarray:
    """The score distribution (rliable ``library.create_performance_profile`` with
    ``use_score_distribution``): at each tau of ``taus``, the fraction of all runs x tasks
    whose score exceeds tau. Shape: leading axes, then ``len(taus)``."""
    x = _pooled(scores)
    taus = np.asarray(taus, float)
    return (x[..., None, :] > taus[:, None]).mean(axis=-1)


def stratified_resample(scores: Scores, reps: int, rng: np.random.Generator
                        ) -> list[np.ndarray]:
    """``reps`` stratified bootstrap resamples (rliable ``StratifiedBootstrap``, over runs, not
    tasks): each task's runs drawn with replacement from that task's own runs, independently
    per task, as many as it has; one ``(reps, runs)`` array per task."""
    out = []
    for s in scores:
        s = np.asarray(s, float)
        out.append(s[rng.integers(0, len(s), size=(reps, len(s)))])
    return out


def interval(statistic: Callable[..., np.ndarray], *samples: Scores, reps: int = REPS,
             seed: int = SEED, level: float = LEVEL) -> tuple:
    """(estimate, lower, upper): ``statistic`` of the samples and its percentile bootstrap
    interval at ``level`` over ``reps`` stratified resamples (rliable
    ``library.get_interval_estimates``, method 'percentile'); several samples (the two of a
    probability of improvement) are resampled independently of each other
    (``StratifiedIndependentBootstrap``). From ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    point = statistic(*samples)
    boot = statistic(*[stratified_resample(s, reps, rng) for s in samples])
    lo, hi = np.percentile(boot, [100 * (1 - level) / 2, 100 * (1 + level) / 2], axis=0)
    return point, lo, hi


def minmax_bounds(finals: dict[str, dict[str, Sequence[float]]]) -> dict[str, tuple]:
    """task -> (lowest, highest) score of any run of any entry on it."""
    out = {}
    for task, entries in finals.items():
        x = np.concatenate([np.asarray(v, float) for v in entries.values()])
        out[task] = (float(x.min()), float(x.max()))
    return out


def normalise(finals: dict[str, dict[str, Sequence[float]]], bounds: dict[str, tuple]
              ) -> dict[str, dict[str, np.ndarray]]:
    """``(x - low) / (high - low)`` with each task's (low, high); a task whose bounds are
    equal (every run scored the same, under min-max) is left out."""
    return {task: {e: (np.asarray(v, float) - bounds[task][0])
                   / (bounds[task][1] - bounds[task][0]) for e, v in entries.items()}
            for task, entries in finals.items() if bounds[task][1] != bounds[task][0]}


def finals_of(by_env: dict[str, dict[str, list[Path]]]) -> dict[str, dict[str, list[float]]]:
    """env -> entry -> each run's final evaluation return: its last evaluation at or before
    the last step every run of the env reached (the tables' "final" for finished runs)."""
    from offpolicy.plotting import read_eval

    out = {}
    for env, groups in by_env.items():
        evals = {e: [read_eval(d) for d in dirs] for e, dirs in groups.items() if dirs}
        if not evals:
            continue
        upto = min(int(ev["step"][-1]) for evs in evals.values() for ev in evs)
        out[env] = {e: [float(ev["return_mean"][ev["step"] <= upto][-1]) for ev in evs]
                    for e, evs in evals.items()}
    return out


def _fmt(point, lo, hi) -> str:
    return f"{float(point):.3f} [{float(lo):.3f}, {float(hi):.3f}]"


def section(finals: dict[str, dict[str, Sequence[float]]], pairs, profile_png: Path,
            reference: dict[str, Sequence[float]] | None = None, reps: int = REPS,
            seed: int = SEED) -> str:
    """The report's "Aggregates across tasks" (Markdown), and the performance profile in
    ``profile_png``; "" (and no plot, an older one removed) when no entry has two runs on a
    task. ``finals``: task -> entry -> per-run scores (:func:`finals_of`); ``pairs``: the
    suite's ``compare``; ``reference``: the suite's ``scores``, task -> (random, reference)."""
    kept = {t: {e: v for e, v in g.items() if len(v) >= 2} for t, g in finals.items()}
    kept = {t: g for t, g in kept.items() if g}
    if not kept:
        profile_png.unlink(missing_ok=True)
        return ""
    reference = reference or {}
    if all(t in reference for t in kept):
        bounds = {t: tuple(float(v) for v in reference[t]) for t in kept}
        how = ("(x - random) / (reference - random), with the suite's `scores` per task: "
               + "; ".join(f"{t} [{bounds[t][0]:g}, {bounds[t][1]:g}]" for t in kept))
    else:
        bounds = minmax_bounds(kept)
        how = ("min-max over every run of the task in this report (0 its worst run, 1 its best)"
               ", so the aggregates are relative to this report's entries"
               + (f" (the suite's `scores` miss {', '.join(t for t in kept if t not in reference)})"
                  if reference else ""))
    norm = normalise(kept, bounds)
    dropped = [t for t in kept if t not in norm]
    if not norm:
        profile_png.unlink(missing_ok=True)
        return ("\n## Aggregates across tasks\n\nEvery run of each task scored the same: "
                "min-max normalisation leaves nothing to aggregate.\n")
    entries = list(dict.fromkeys(e for g in norm.values() for e in g))
    per_entry = {e: [t for t in norm if e in norm[t]] for e in entries}
    one = len(norm) == 1
    level = f"{LEVEL:.0%}"
    lines = ["", "## Aggregates across tasks", "",
             ("One task, so these aggregates are per-task: over the runs of "
              f"{next(iter(norm))} alone." if one else
              f"Over {len(norm)} tasks ({', '.join(norm)}).")
             + " After Agarwal et al. (2021), \"Deep RL at the Edge of the Statistical "
             "Precipice\" (rliable): each run's score is its final evaluation return (the "
             f"tables' final), normalised per task: {how}. Only entries with two runs or more "
             f"on a task enter. Intervals: {level} percentile, stratified bootstrap (each "
             f"task's runs resampled within the task), {reps} resamples, seed {seed}."
             + (f" Left out, every run scoring the same: {', '.join(dropped)}." if dropped
                else ""), "",
             f"| entry | tasks | runs | IQM [{level} interval] | mean [{level} interval] |",
             "|---|---:|---:|---:|---:|"]
    scores = {e: [norm[t][e] for t in per_entry[e]] for e in entries}
    for e in entries:
        runs = sum(len(s) for s in scores[e])
        lines.append(f"| {e} | {len(per_entry[e])} | {runs} | "
                     f"{_fmt(*interval(iqm, scores[e], reps=reps, seed=seed))} | "
                     f"{_fmt(*interval(mean, scores[e], reps=reps, seed=seed))} |")
    if len({tuple(v) for v in per_entry.values()}) > 1:
        lines += ["", "Entries cover different tasks: compare their rows with that in mind."]
    rows = []
    for a, b in pairs:
        common = [t for t in norm if a in norm[t] and b in norm[t]]
        if not common:
            continue
        x, y = [norm[t][a] for t in common], [norm[t][b] for t in common]
        rows.append(f"| P({a} > {b}) | {len(common)} | "
                    f"{_fmt(*interval(probability_of_improvement, x, y, reps=reps, seed=seed))}"
                    " |")
    if rows:
        lines += ["", "Probability of improvement for each `compare` pair: P(X > Y), the "
                  "chance that a run of X scores above a run of Y on a task (ties count 1/2; "
                  "the Mann-Whitney U over m x n), averaged over the tasks both have; both "
                  "entries resampled independently, stratified by task. 0.5: no difference.",
                  "", f"| pair | tasks | P(X > Y) [{level} interval] |", "|---|---:|---:|",
                  *rows]
    lines += ["", f"Performance profile ({profile_png.name}): the fraction of each entry's runs "
              "(over its tasks) whose normalised score exceeds tau, with "
              f"{level} stratified bootstrap bands.", ""]
    plot_profiles(scores, profile_png, reps=reps, seed=seed)
    return "\n".join(lines)


def plot_profiles(scores: dict[str, Scores], out: Path, reps: int = REPS, seed: int = SEED
                  ) -> Path:
    """Each entry's performance profile over tau from min(0, lowest score) to max(1, highest),
    with its bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from offpolicy.plotting import save_figure

    pooled = np.concatenate([_pooled(s) for s in scores.values()])
    taus = np.linspace(min(0.0, pooled.min()), max(1.0, pooled.max()), PROFILE_POINTS)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for e, s in scores.items():
        point, lo, hi = interval(lambda x: performance_profile(x, taus), s, reps=reps,
                                 seed=seed)
        line, = ax.plot(taus, point, label=e)
        ax.fill_between(taus, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("normalised score tau")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"Performance profiles, {LEVEL:.0%} stratified bootstrap bands")
    fig.tight_layout()
    return save_figure(fig, out)
