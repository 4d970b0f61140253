"""Verdicts of a grid's pre-registered claims (DESIGN.md, "Decisive runs").

A suite with a :class:`~offpolicy.suites.spec.Decision` ends its report with one verdict per
claim and task. Per run, the statistic S is the mean evaluation return over the evaluations in
the last ``window`` steps, (steps - window, steps]; beside it, where the run logged it, the
paper's own measure for return curves binned in time (the ReF-ER paper's Fig. 1-5): the mean
return of the training episodes (with exploration) that finished in that window, weighted by
episode. Per comparison A - B (the paper says A > B): the difference of the means of S,
Welch's two-sided p, a bootstrap interval of the difference, the smallest difference these
seeds could detect, Holm's adjusted p over the primary comparisons, and the verdict:

* reproduced: the difference favours A, p < alpha and the bootstrap interval excludes 0;
* not reproduced: the interval lies wholly below margin * |mean S of B| (no gain of practical
  size is consistent with the seeds; a significant reversal is one such case);
* inconclusive: otherwise.

A verdict is *interim* until both arms have every seed of the grid, *pending* while an arm has
fewer than two finished runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from offpolicy.errors import OffpolicyError
from offpolicy.suites.spec import Claim, Decision
from offpolicy.suites.stats import (
    ALPHA,
    POWER,
    RESAMPLES,
    bootstrap_interval,
    detectable_difference,
    holm,
    welch,
)

# train.csv columns the paper's measure needs: the mean return of the episodes finished in each
# logging interval, and the running count of episodes (their difference: how many finished)
TRAIN_COLUMNS = ("episode_return", "episodes")


def window_mean(run_dir: Path, steps: int, window: int) -> float:
    """S: the run's mean evaluation return over the evaluations at steps in
    (steps - window, steps]."""
    from offpolicy.plotting import read_eval

    e = read_eval(run_dir)
    inside = (e["step"] > steps - window) & (e["step"] <= steps)
    if not inside.any():
        raise OffpolicyError(f"{run_dir}: no evaluation in the last {window} of {steps} steps")
    return float(np.mean(e["return_mean"][inside]))


def training_window_mean(run_dir: Path, steps: int, window: int) -> float:
    """The paper's binned measure: the mean return of the training episodes that finished in
    (steps - window, steps], weighted by episode, from train.csv's per-interval means and
    running episode count; nan for a run that did not log them (a peer's, or a run restored
    from an older CSV)."""
    from offpolicy.plotting import read_metric

    try:
        ret = read_metric(run_dir, "episode_return")
        count = read_metric(run_dir, "episodes")
    except OffpolicyError:
        return math.nan
    step = np.asarray(ret["step"], float)
    r = np.asarray(ret["return_mean"], float)
    n = np.diff(np.concatenate([[0.0], np.asarray(count["return_mean"], float)]))
    inside = (step > steps - window) & (step <= steps) & (n > 0) & np.isfinite(r)
    if not inside.any():
        return math.nan
    return float(np.sum(r[inside] * n[inside]) / np.sum(n[inside]))


def verdict(diff: float, p: float, lo: float, hi: float, mean_b: float, margin: float,
            alpha: float = ALPHA) -> str:
    """The pre-registered rule (module docstring) for a comparison whose paper says A > B."""
    if diff > 0 and p < alpha and lo > 0:
        return "reproduced"
    if hi < margin * abs(mean_b):
        return "not reproduced"
    return "inconclusive"


def _claims_on(decision: Decision, env: str) -> list[Claim]:
    return [c for c in decision.claims if not c.envs or env in c.envs]


def _mse(x) -> str:
    x = np.asarray(x, float)
    if len(x) == 1:
        return f"{x[0]:.1f} (1 run)"
    return f"{x.mean():.1f} ± {x.std(ddof=1) / np.sqrt(len(x)):.1f}"


def decision_section(decision: Decision, groups_by_env: dict[str, dict[str, list[Path]]],
                     steps_by_env: dict[str, int], seeds: tuple[int, ...]) -> str:
    """The report's closing section: a table of every claim's comparison per task (finished
    runs only) and one verdict line per primary claim and task."""
    rows = []  # (claim, env, a_values, b_values, a_train, b_train)
    for env, steps in steps_by_env.items():
        groups = groups_by_env.get(env, {})
        for claim in _claims_on(decision, env):
            a, b = groups.get(claim.a, []), groups.get(claim.b, [])
            rows.append((claim, env, [window_mean(d, steps, decision.window) for d in a],
                         [window_mean(d, steps, decision.window) for d in b],
                         [training_window_mean(d, steps, decision.window) for d in a],
                         [training_window_mean(d, steps, decision.window) for d in b]))
    stats = {}  # the comparisons with two finished runs a side
    for i, (_, _, a, b, _, _) in enumerate(rows):
        if len(a) >= 2 and len(b) >= 2:
            _, _, p, _, _ = welch(a, b)
            lo, hi = bootstrap_interval(a, b)
            stats[i] = (float(np.mean(a) - np.mean(b)), p, lo, hi, detectable_difference(a, b))
    tested = [i for i in stats if rows[i][0].primary]
    adjusted = dict(zip(tested, holm([stats[i][1] for i in tested])))
    window = f"{decision.window:,}".replace(",", " ")
    lines = ["", "## Verdicts (pre-registered)", "",
             f"S per run: the mean evaluation return over the last {window} steps. Per "
             "comparison A - B (the paper says A > B): difference of the means of S, Welch's "
             "two-sided p, Holm's adjusted p over the primary comparisons tested so far, the "
             f"bootstrap 95% interval ({RESAMPLES} resamples of the seeds within each arm), "
             f"the smallest difference these seeds could detect (alpha {ALPHA}, power "
             f"{POWER}), and the paper's own measure (training episodes finishing in the same "
             "window, episode-weighted) where both arms logged it. Verdict: reproduced if the "
             f"difference favours A with p < {ALPHA} and the interval excludes 0; not "
             f"reproduced if the interval lies below {decision.margin:g} x |mean S of B|; "
             "inconclusive otherwise; interim until both arms have the pre-registered seeds "
             f"({', '.join(map(str, seeds))} unless the claim names fewer).", "",
             "| claim | task | A - B | runs | S of A | S of B | difference | p | Holm p | "
             "bootstrap 95% | detectable | training episodes A - B | verdict |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    verdicts = []
    for i, (claim, env, a, b, ta, tb) in enumerate(rows):
        runs = f"{len(a)} / {len(b)}"
        kind = "" if claim.primary else " (secondary)"
        if i not in stats:
            status = "pending"
            lines.append(f"| {claim.label}{kind} | {env} | {claim.a} - {claim.b} | {runs} | "
                         f"{_mse(a) if a else '-'} | {_mse(b) if b else '-'} | | | | | | | "
                         f"{status if claim.primary else ''} |")
            if claim.primary:
                verdicts.append(f"- **{claim.label} on {env}** ({claim.a} - {claim.b}): pending "
                                f"({runs} runs finished).")
            continue
        diff, p, lo, hi, mde = stats[i]
        finite_a = [x for x in ta if math.isfinite(x)]
        finite_b = [x for x in tb if math.isfinite(x)]
        train = (f"{np.mean(finite_a) - np.mean(finite_b):.1f} ({len(finite_a)} / "
                 f"{len(finite_b)})" if finite_a and finite_b else "-")
        wanted = len(claim.seeds or seeds)
        complete = len(a) >= wanted and len(b) >= wanted
        if claim.primary:
            v = verdict(diff, p, lo, hi, float(np.mean(b)), decision.margin)
            holm_p = adjusted[i]
            v_text = v if complete else f"{v} (interim)"
            survives = ""
            if v == "reproduced":
                survives = ("; survives Holm" if holm_p < ALPHA else "; not after Holm "
                            f"(adjusted p {holm_p:.3f})")
            verdicts.append(f"- **{claim.label} on {env}** ({claim.a} - {claim.b}): {v_text}: "
                            f"difference {diff:.1f}, 95% bootstrap [{lo:.1f}, {hi:.1f}], Welch "
                            f"p {p:.3f}{survives}; detectable {mde:.1f}; {runs} runs.")
        else:
            v_text, holm_p = "", math.nan
        lines.append(f"| {claim.label}{kind} | {env} | {claim.a} - {claim.b} | {runs} | "
                     f"{_mse(a)} | {_mse(b)} | {diff:.1f} | {p:.3f} | "
                     f"{'' if math.isnan(holm_p) else f'{holm_p:.3f}'} | [{lo:.1f}, {hi:.1f}] | "
                     f"{mde:.1f} | {train} | {v_text} |")
    return "\n".join(lines + ["", "Verdicts:", "", *verdicts]) + "\n"
