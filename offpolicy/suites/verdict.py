"""Verdicts of a grid's pre-registered claims (DESIGN.md, "Decisive runs").

A suite with a :class:`~offpolicy.suites.spec.Decision` ends its report with one verdict per
claim and task. Per run, the statistic S is (the decision's ``statistic``) either ``window``:
the mean evaluation return over the evaluations in the last ``window`` steps, (steps - window,
steps], or ``best``: the best evaluation return of the run up to ``steps`` (the ACE paper's
Table 1), with the window mean reported beside it. Beside S, where the run logged it, the
paper's own measure for return curves binned in time (the ReF-ER paper's Fig. 1-5): the mean
return of the training episodes (with exploration) that finished in that window, weighted by
episode. Per comparison A - B: the difference of the means of S, Welch's two-sided p, a
bootstrap interval of the difference, the smallest difference these seeds could detect,
Holm's adjusted p over the primary superiority comparisons, and the verdict. For a claim whose
paper says A > B (``rule`` superior):

* reproduced: the difference favours A, p < alpha and the bootstrap interval excludes 0;
* not reproduced: the interval lies wholly below margin * |mean S of B| (no gain of practical
  size is consistent with the seeds; a significant reversal is one such case);
* inconclusive: otherwise.

For a claim whose paper says A is competitive with B, A >= B (``rule`` non-inferior):

* reproduced: the interval's lower end lies above -margin * |mean S of B| (no loss of
  practical size is consistent with the seeds, whatever p says);
* not reproduced: B is significantly better: the difference favours B, p < alpha and the
  interval lies wholly below 0;
* inconclusive: otherwise.

A non-inferiority verdict does not rest on p < alpha, so those comparisons stay out of Holm's
family.

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


def best_evaluation(run_dir: Path, steps: int) -> float:
    """S for ``statistic: best``: the run's best evaluation return at steps <= ``steps`` (the
    ACE paper's "best evaluation performance during training", Table 1)."""
    from offpolicy.plotting import read_eval

    e = read_eval(run_dir)
    inside = e["step"] <= steps
    if not inside.any():
        raise OffpolicyError(f"{run_dir}: no evaluation at or before step {steps}")
    return float(np.max(e["return_mean"][inside]))


def statistic(run_dir: Path, steps: int, decision: Decision) -> float:
    """The decision's S of one run: :func:`best_evaluation` or :func:`window_mean`."""
    if decision.statistic == "best":
        return best_evaluation(run_dir, steps)
    return window_mean(run_dir, steps, decision.window)


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
            alpha: float = ALPHA, rule: str = "superior") -> str:
    """The pre-registered rule (module docstring) for a comparison whose paper says A > B
    (``rule`` superior) or A >= B within the margin (``rule`` non-inferior)."""
    if rule == "non-inferior":
        if lo > -margin * abs(mean_b):
            return "reproduced"
        if diff < 0 and p < alpha and hi < 0:
            return "not reproduced"
        return "inconclusive"
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
    best = decision.statistic == "best"
    rows = []  # (claim, env, a_values, b_values, a_train, b_train, a_window, b_window)
    for env, steps in steps_by_env.items():
        groups = groups_by_env.get(env, {})
        for claim in _claims_on(decision, env):
            a, b = groups.get(claim.a, []), groups.get(claim.b, [])
            rows.append((claim, env, [statistic(d, steps, decision) for d in a],
                         [statistic(d, steps, decision) for d in b],
                         [training_window_mean(d, steps, decision.window) for d in a],
                         [training_window_mean(d, steps, decision.window) for d in b],
                         [window_mean(d, steps, decision.window) for d in a] if best else [],
                         [window_mean(d, steps, decision.window) for d in b] if best else []))
    stats = {}  # the comparisons with two finished runs a side
    for i, (_, _, a, b, *_) in enumerate(rows):
        if len(a) >= 2 and len(b) >= 2:
            _, _, p, _, _ = welch(a, b)
            lo, hi = bootstrap_interval(a, b)
            stats[i] = (float(np.mean(a) - np.mean(b)), p, lo, hi, detectable_difference(a, b))
    tested = [i for i in stats if rows[i][0].primary and rows[i][0].rule == "superior"]
    adjusted = dict(zip(tested, holm([stats[i][1] for i in tested])))
    window = f"{decision.window:,}".replace(",", " ")
    inferior = any(c.rule == "non-inferior" for c in decision.claims)
    if best:
        s_text = (f"the best evaluation return of the run; beside it (secondary) its mean "
                  f"evaluation return over the last {window} steps")
    else:
        s_text = f"the mean evaluation return over the last {window} steps"
    claim_text = "the paper says A > B"
    holm_text = "the primary comparisons"
    rule_text = (f"Verdict: reproduced if the difference favours A with p < {ALPHA} and the "
                 f"interval excludes 0; not reproduced if the interval lies below "
                 f"{decision.margin:g} x |mean S of B|; inconclusive otherwise; ")
    if inferior:
        claim_text += ", or A >= B in a non-inferiority claim"
        holm_text = "the primary superiority comparisons"
        rule_text += (f"in a non-inferiority claim: reproduced if the interval's lower end lies "
                      f"above -{decision.margin:g} x |mean S of B|, not reproduced if B is "
                      f"better with p < {ALPHA} and the interval lies below 0, inconclusive "
                      "otherwise; ")
    lines = ["", "## Verdicts (pre-registered)", "",
             f"S per run: {s_text}. Per comparison A - B ({claim_text}): difference of the "
             f"means of S, Welch's two-sided p, Holm's adjusted p over {holm_text} tested so "
             f"far, the bootstrap 95% interval ({RESAMPLES} resamples of the seeds within each "
             f"arm), the smallest difference these seeds could detect (alpha {ALPHA}, power "
             f"{POWER}), and the paper's own measure (training episodes finishing in the same "
             f"window, episode-weighted) where both arms logged it. {rule_text}interim until "
             f"both arms have the pre-registered seeds ({', '.join(map(str, seeds))} unless "
             "the claim names fewer).", "",
             "| claim | task | A - B | runs | S of A | S of B | difference | p | Holm p | "
             "bootstrap 95% | detectable | training episodes A - B | "
             + ("window mean A - B | " if best else "") + "verdict |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
             + ("---:|" if best else "") + "---|"]
    verdicts = []
    for i, (claim, env, a, b, ta, tb, wa, wb) in enumerate(rows):
        runs = f"{len(a)} / {len(b)}"
        kind = "" if claim.primary else " (secondary)"
        if claim.rule == "non-inferior":
            kind += " (non-inferiority)"
        if i not in stats:
            status = "pending"
            lines.append(f"| {claim.label}{kind} | {env} | {claim.a} - {claim.b} | {runs} | "
                         f"{_mse(a) if a else '-'} | {_mse(b) if b else '-'} | | | | | | | "
                         + ("| " if best else "") +
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
        holm_p = adjusted.get(i, math.nan)
        if claim.primary:
            v = verdict(diff, p, lo, hi, float(np.mean(b)), decision.margin, rule=claim.rule)
            v_text = v if complete else f"{v} (interim)"
            survives, rule = "", ""
            if claim.rule == "non-inferior":
                rule = f", non-inferiority margin -{decision.margin * abs(np.mean(b)):.1f}"
            elif v == "reproduced":
                survives = ("; survives Holm" if holm_p < ALPHA else "; not after Holm "
                            f"(adjusted p {holm_p:.3f})")
            verdicts.append(f"- **{claim.label} on {env}** ({claim.a} - {claim.b}{rule}): "
                            f"{v_text}: difference {diff:.1f}, 95% bootstrap [{lo:.1f}, "
                            f"{hi:.1f}], Welch p {p:.3f}{survives}; detectable {mde:.1f}; "
                            f"{runs} runs.")
        else:
            v_text, holm_p = "", math.nan
        second = f"{np.mean(wa) - np.mean(wb):.1f} | " if best else ""
        lines.append(f"| {claim.label}{kind} | {env} | {claim.a} - {claim.b} | {runs} | "
                     f"{_mse(a)} | {_mse(b)} | {diff:.1f} | {p:.3f} | "
                     f"{'' if math.isnan(holm_p) else f'{holm_p:.3f}'} | [{lo:.1f}, {hi:.1f}] | "
                     f"{mde:.1f} | {train} | {second}{v_text} |")
    return "\n".join(lines + ["", "Verdicts:", "", *verdicts]) + "\n"


def beside_section(decision: Decision, groups_by_env: dict[str, dict[str, list[Path]]],
                   twin_groups_by_env: dict[str, dict[str, list[Path]]],
                   steps_by_env: dict[str, int]) -> str:
    """The decision's ``beside`` table: on each task, each arm's S (finished runs, mean ± s.e.)
    beside its twin's in the grid ``decision.beside.suite`` and the difference of the means.
    A description with no p, interval or verdict: the two grids differ in a setting that was
    not randomised against anything else. Empty without ``beside``."""
    b = decision.beside
    if b is None:
        return ""
    lines = ["", f"## Beside {b.suite} (a description, no test)", "",
             f"Each arm's S (as in the verdicts) beside its twin's in `{b.suite}`, over the "
             "finished runs of each (mean ± s.e.), and the difference of the means. The two "
             "grids differ in a setting that was not randomised against anything else, so the "
             "difference is described, not tested.", "",
             f"| task | arm | runs | S | twin in {b.suite} | runs | S of twin | arm - twin |",
             "|---|---|---:|---:|---|---:|---:|---:|"]
    for env, steps in steps_by_env.items():
        here, there = groups_by_env.get(env, {}), twin_groups_by_env.get(env, {})
        for arm, twin in b.pairs:
            a = [statistic(d, steps, decision) for d in here.get(arm, [])]
            t = [statistic(d, steps, decision) for d in there.get(twin, [])]
            diff = f"{np.mean(a) - np.mean(t):.1f}" if a and t else ""
            lines.append(f"| {env} | {arm} | {len(a)} | {_mse(a) if a else '-'} | {twin} | "
                         f"{len(t)} | {_mse(t) if t else '-'} | {diff} |")
    return "\n".join(lines) + "\n"
