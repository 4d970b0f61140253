"""A suite's report: the paper-style tables, curves and tests, from its run directories.

Per env: best and final evaluation return per entry (mean +- s.e. over seeds, ACE Table 1
style), Welch's t-tests of the suite's ``compare`` pairs with their 95% intervals and the
Bonferroni note, sample efficiency against the suite's ``threshold``, the train.csv
``metrics`` averaged and drawn (log scale). Files, under the report folder with stem S:
``S.md``, ``S.csv`` (every evaluation of every run), ``S_train.csv`` (the metrics, so that a
later session can rebuild finished runs from committed CSVs: :func:`restore_finished`),
``S_hosts.csv`` (which machine started or resumed each run, and at which step), ``S.png``
(one panel per env, s.e. bands) and ``S_<metric>.png``. After the envs, the aggregates across
tasks (:mod:`offpolicy.suites.aggregates`: IQM and mean of normalised final returns with
stratified bootstrap intervals, the probability of improvement of each ``compare`` pair) and
their performance profile, ``S_profile.png``.

Only finished runs enter the tables and curves (a run in progress would cut its row back to
the step it reached); the runs in progress are listed under the table; the CSV has every
evaluation.
"""

from __future__ import annotations

import csv
import json
import re
import sys
import warnings
from pathlib import Path

import numpy as np

from offpolicy.errors import OffpolicyError, did_you_mean
from offpolicy.suites import aggregates
from offpolicy.suites.host import FIELDS as HOST_FIELDS
from offpolicy.suites.host import host, hosts_of, machine, read_starts, write_starts
from offpolicy.suites.runner import RunSpec, finished
from offpolicy.suites.spec import Suite
from offpolicy.suites.stats import paired_t, welch  # noqa: F401  (the reports' tests)

PACKAGES = ("offpolicy", "jax", "jaxlib", "flax", "optax", "numpy", "gymnasium", "mujoco", "ray")


def has_evals(d: Path) -> bool:
    from offpolicy.plotting import read_eval

    try:
        return len(read_eval(d)["step"]) > 0
    except OffpolicyError:  # started, nothing evaluated yet
        return False


def seed_ranges(seeds: list[int]) -> str:
    """``[0, 1, 2, 3, 7]`` -> ``"0-3, 7"``."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive seeds
    for s in sorted(set(seeds)):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def seeds_line(groups: dict[str, list[Path]]) -> str:
    """When the rows have different seeds (a grid extended by a later run with other
    ``--seeds`` for some entries), one line saying which seeds each row holds."""
    seeds = {e: [int(d.name[1:]) for d in dirs] for e, dirs in groups.items()}
    if len({tuple(sorted(v)) for v in seeds.values()}) <= 1:
        return ""
    return ("\nSeeds per row (rows were extended with other `--seeds` and `--entries`; each "
            "run's log has its command): "
            + "; ".join(f"{e} {seed_ranges(v)}" for e, v in seeds.items()) + ".\n")


def final_comparisons(groups: dict[str, list[Path]], pairs, over_curve: bool = False) -> str:
    """A table of final-return differences for each (entry, against) pair with at least two
    finished runs on each side: difference of means, Welch's t, its df and p, and the 95%
    interval. No correction for testing several pairs: read p against 0.05 / pairs.
    ``over_curve``: the same for each run's mean return over all its evaluations (the area
    under its learning curve over its length) instead of its final return."""
    from offpolicy.plotting import read_eval

    def finals(entry, upto):
        out = []
        for d in groups.get(entry, []):
            e = read_eval(d)
            r = e["return_mean"][e["step"] <= upto]
            out.append(float(np.mean(r) if over_curve else r[-1]))
        return out

    rows = []
    for mine, other in pairs:
        dirs = groups.get(mine, []) + groups.get(other, [])
        if len(groups.get(mine, [])) < 2 or len(groups.get(other, [])) < 2:
            continue
        # runs of different lengths (in progress) are compared at the step all reached
        upto = min(int(read_eval(d)["step"][-1]) for d in dirs)
        a, b = finals(mine, upto), finals(other, upto)
        t, df, p, lo, hi = welch(a, b)
        rows.append(f"| {mine} - {other} | {len(a)} / {len(b)} | "
                    f"{np.mean(a) - np.mean(b):.1f} | {t:.2f} | {df:.1f} | {p:.3f} | "
                    f"[{lo:.1f}, {hi:.1f}] | {upto} |")
    what = "Mean return over evaluations" if over_curve else "Final return"
    return _tests_table(f"{what}, differences of means (Welch's t-test, two-sided, and its "
                        "95% interval", "runs", rows)


def _tests_table(title: str, count: str, rows: list[str]) -> str:
    """The table of a family of tests with the Bonferroni threshold for their number."""
    if not rows:
        return ""
    multiple = (f"{len(rows)} pairs tested, so p < {0.05 / len(rows):.3g} holds them all at 0.05 "
                "together, Bonferroni" if len(rows) > 1 else "one pair tested")
    return "\n".join(["", f"{title}; {multiple}):", "",
                      f"| difference | {count} | mean difference | t | df | p | 95% interval "
                      "| up to step |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|", *rows]) + "\n"


def _final_at(run_dir: Path, upto: int) -> float:
    """The run's last evaluation return at or before step ``upto``."""
    from offpolicy.plotting import read_eval

    e = read_eval(run_dir)
    return float(e["return_mean"][e["step"] <= upto][-1])


def paired_comparisons(groups: dict[str, list[Path]], pairs) -> str:
    """For each (entry, against) pair declared paired (a run of a seed shares its initial
    draw, or in one loop its env and noise streams, or both, with the other's run of that seed,
    so the seed's difference removes what they share): the paired t-test of final returns over
    the seeds both have (at least two), at the last step all those runs reached."""
    from offpolicy.plotting import read_eval

    rows = []
    for mine, other in pairs:
        a = {int(d.name[1:]): d for d in groups.get(mine, [])}
        b = {int(d.name[1:]): d for d in groups.get(other, [])}
        seeds = sorted(set(a) & set(b))
        if len(seeds) < 2:
            continue
        upto = min(int(read_eval(x[s])["step"][-1]) for s in seeds for x in (a, b))
        fa, fb = ([_final_at(x[s], upto) for s in seeds] for x in (a, b))
        t, df, p, lo, hi = paired_t(fa, fb)
        rows.append(f"| {mine} - {other} | {seed_ranges(seeds)} | "
                    f"{np.mean(fa) - np.mean(fb):.1f} | {t:.2f} | {df:.0f} | {p:.3f} | "
                    f"[{lo:.1f}, {hi:.1f}] | {upto} |")
    return _tests_table("Final return, paired by seed (pairs whose runs of one seed share "
                        "their initial draw, or in one loop their env and noise streams, or "
                        "both; paired t-test, two-sided, and its 95% interval", "seeds", rows)


def sample_efficiency(groups: dict[str, list[Path]], threshold: float) -> str:
    """A table of, per entry: how many runs reached ``threshold``, the first evaluation step
    at which they did (mean +- s.e. over those runs) and the mean return over all of a run's
    evaluations (mean +- s.e. over runs)."""
    from offpolicy.plotting import read_eval

    def mse(x):  # one run has no standard error (the tables above say "(1 run)" too)
        x = np.asarray(x, float)
        if len(x) == 1:
            return f"{x[0]:.0f} (1 run)"
        return f"{x.mean():.0f} ± {x.std(ddof=1) / np.sqrt(len(x)):.0f}"

    lines = ["", f"Sample efficiency: the first evaluation with return >= {threshold:g}, and "
             "the mean return over all evaluations (area under the curve over its length).",
             "", f"| algorithm | runs reaching {threshold:g} | first step reaching it "
             "(mean ± s.e.) | mean return over evaluations (mean ± s.e.) |",
             "|---|---:|---:|---:|"]
    for entry, dirs in groups.items():
        firsts, means = [], []
        for d in dirs:
            e = read_eval(d)
            hit = np.flatnonzero(np.asarray(e["return_mean"]) >= threshold)
            if hit.size:
                firsts.append(e["step"][hit[0]])
            means.append(float(np.mean(e["return_mean"])))
        lines.append(f"| {entry} | {len(firsts)} / {len(dirs)} | "
                     f"{mse(firsts) if firsts else 'not reached'} | {mse(means)} |")
    return "\n".join(lines) + "\n"


def mixed_configs(groups: dict[str, list[Path]]) -> str:
    """A warning for each entry whose runs do not share one configuration (but the seed,
    length and logging): a table row must average like with like."""
    from offpolicy import registry
    from offpolicy.plotting import group_by_env

    out = []
    for entry, dirs in groups.items():
        with_config = [d for d in dirs if (d / "config.yaml").exists()]
        if len(with_config) < 2:
            continue
        groups = group_by_env(with_config, registry.resolved_flat)
        parts = [label for env_groups in groups.values() for label in env_groups]
        if len(parts) > 1:
            out.append(f"\nWarning: the runs of {entry} do not share one configuration "
                       f"({'; '.join(parts)}): its row averages them together.\n")
    return "".join(out)


def hosts_line(by_env: dict[str, dict[str, list[Path]]]) -> str:
    """Which host ran which runs (their hosts files, :mod:`offpolicy.suites.host`), when that is
    not simply this machine: runs of a grid spread over sessions, machines or a lent GPU. ""
    when every run that has a record ran here, or none has one."""
    here, multi = host(), len(by_env) > 1
    ran: dict[str, dict[str, list[int]]] = {}  # host -> row label -> seeds
    for env, groups in by_env.items():
        for entry, dirs in groups.items():
            label = f"{entry} on {env}" if multi else entry
            for d in dirs:
                for h in hosts_of(d) or ["not recorded"]:
                    ran.setdefault(h, {}).setdefault(label, []).append(int(d.name[1:]))
    known = [h for h in ran if h != "not recorded"]
    if not known or (known == [here]):
        return ""
    order = known + (["not recorded"] if "not recorded" in ran else [])
    return ("\nHosts (from each run's hosts file; a run resumed on another machine is under "
            "both): "
            + "; ".join(f"{h}{' (this machine)' if h == here else ''}: "
                        + ", ".join(f"{label} s{seed_ranges(seeds)}"
                                    for label, seeds in ran[h].items())
                        for h in order) + ".\n")


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for p in PACKAGES:
        try:
            out.append(f"{p} {version(p)}")
        except PackageNotFoundError:
            continue
    return ", ".join(out)


def collect(runs: list[RunSpec]) -> dict[str, dict[str, list[Path]]]:
    """env -> entry -> run directories with at least one evaluation, in the suite's order."""
    out: dict[str, dict[str, list[Path]]] = {}
    for r in sorted(runs, key=lambda r: r.seed):
        if has_evals(r.run_dir):
            out.setdefault(r.env, {}).setdefault(r.entry.name, []).append(r.run_dir)
    order = {(r.env, r.entry.name): i for i, r in enumerate(runs)}
    return {env: dict(sorted(g.items(), key=lambda kv: order[(env, kv[0])]))
            for env, g in out.items()}


def check_metrics(suite: Suite, runs: list[RunSpec], metrics: list[str] | None = None
                  ) -> None:
    """A metric (``--metric``'s, else the suite's ``metrics``) that no run's train.csv has is
    refused (a typo, or another algorithm's column), naming the columns there are, once every
    entry has a run that logged: before that an entry yet to run may log it, and a note says
    it is not there yet."""
    from offpolicy.plotting import parse_csv

    own = metrics is None  # the suite's own metrics, not --metric's
    where = f"suite {suite.path or suite.name}: metrics" if own else "--metric"
    metrics = list(suite.metrics if metrics is None else metrics)

    headers: dict[str, list[set[str]]] = {}
    for r in runs:
        path = r.run_dir / "train.csv"
        header = parse_csv(path)[0] if path.exists() else []
        if header:
            headers.setdefault(r.entry.name, []).append(set(header))
    columns = sorted(set().union(*(h for hs in headers.values() for h in hs))
                     - {"step", "wall_time"})
    # A suite's own metric may belong to entries outside a --envs/--entries selection (a
    # recurrent suite's kl_mu_pi is V-RACER's, not AQL's): those count as not logged yet.
    names = {r.entry.name for r in runs} | (set(suite.entries) if own else set())
    waiting = sorted(names - set(headers))
    for m in metrics:
        if not headers or any(m in h for hs in headers.values() for h in hs):
            continue
        if not waiting:
            raise OffpolicyError(f"{where}: no run's train.csv has a column {m!r}"
                                 f"{did_you_mean(m, columns)} (columns: {', '.join(columns)})")
        print(f"offpolicy: note: {where}: no run's train.csv has a column {m!r} yet (entries "
              f"that have not logged: {', '.join(waiting)})", file=sys.stderr)


def _write_csvs(by_env, runs: list[RunSpec], out_dir: Path, stem: str, metrics) -> None:
    from offpolicy.plotting import read_eval, read_metric

    with open(out_dir / f"{stem}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["env", "entry", "seed", "step", "return_mean", "return_se", "episodes"])
        for env, groups in by_env.items():
            for entry, dirs in groups.items():
                for d in dirs:
                    e = read_eval(d)
                    for i in range(len(e["step"])):
                        w.writerow([env, entry, d.name[1:], int(e["step"][i]),
                                    e["return_mean"][i], e["return_se"][i],
                                    int(e["episodes"][i])])
    starts = [(env, entry, d, r) for env, groups in by_env.items()
              for entry, dirs in groups.items() for d in dirs for r in read_starts(d)]
    if starts:
        with open(out_dir / f"{stem}_hosts.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["env", "entry", "seed", *HOST_FIELDS])
            for env, entry, d, r in starts:
                w.writerow([env, entry, d.name[1:], *(r[k] for k in HOST_FIELDS)])
    else:  # no run has a record: an older file would describe other runs
        (out_dir / f"{stem}_hosts.csv").unlink(missing_ok=True)
    if not metrics:
        return
    with open(out_dir / f"{stem}_train.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["env", "entry", "seed", "step", *metrics])
        for env, groups in by_env.items():
            for entry, dirs in groups.items():
                for d in dirs:
                    cols = {}
                    for m in metrics:  # a column the run does not log stays empty
                        try:
                            cols[m] = read_metric(d, m)
                        except OffpolicyError:
                            pass
                    if not cols:
                        continue  # a run without the diagnostics (a peer's)
                    first = next(iter(cols.values()))
                    for i in range(len(first["step"])):
                        w.writerow([env, entry, d.name[1:], int(first["step"][i]),
                                    *(cols[m]["return_mean"][i] if m in cols else ""
                                      for m in metrics)])


def _metric_text(groups, metrics, pairs, stem: str, env_tag: str) -> str:
    from offpolicy.plotting import has_metric, read_metric

    text = ""
    for metric in metrics:
        means = {}
        for e, dirs in groups.items():
            have = [d for d in dirs if has_metric(d, metric)]
            if have:
                with warnings.catch_warnings():  # a run whose column is all NaN: NaN
                    warnings.simplefilter("ignore", RuntimeWarning)
                    means[e] = float(np.nanmean([np.nanmean(
                        read_metric(d, metric)["return_mean"]) for d in have]))
        if not means:
            continue
        text += (f"\nMean `{metric}` over each run's training (train.csv), mean over runs "
                 f"(plot: {stem}_{metric}.png{env_tag}): "
                 + ", ".join(f"{e} {v:.4g}" for e, v in means.items()) + ".\n")
        for a, b in pairs:
            if a in means and b in means and means[b] != 0:
                text += f"Ratio of mean `{metric}` ({a} / {b}): {means[a] / means[b]:.3g}.\n"
    return text


def write_report(suite: Suite, runs: list[RunSpec], out_dir: Path, stem: str, command: str,
                 metrics: list[str] | None = None, title: str | None = None,
                 include_running: bool = False, verdicts: bool = True) -> str:
    """Write the report files (module docstring) and return the Markdown. ``include_running``:
    the runs in progress join the tables, tests and curves (each row compared at the last step
    all its runs reached, marked): a partial reading of a grid that takes days. A suite with a
    decision ends with its verdicts (:mod:`offpolicy.suites.verdict`) unless ``verdicts`` is
    False (a caller that decides over several reports' grids at once)."""
    from offpolicy.plotting import format_table, has_metric, plot_envs, table_rows

    check_metrics(suite, runs, metrics)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = list(suite.metrics if metrics is None else metrics)
    by_env_all = collect(runs)
    if not by_env_all:
        text = f"# {title or 'Suite ' + suite.name}\n\nNo evaluation yet.\n"
        (out_dir / f"{stem}.md").write_text(text)
        return text
    from offpolicy.suites import verdict

    # a decision's paper measure needs the training episodes' returns after a restore too
    _write_csvs(by_env_all, runs, out_dir, stem,
                metrics + [c for c in verdict.TRAIN_COLUMNS if suite.decision and c not in metrics])
    steps = {r.run_dir: r.steps for r in runs}
    by_env: dict[str, dict[str, list[Path]]] = {}
    running: dict[str, list[str]] = {}
    from offpolicy.plotting import read_eval

    for env, groups in by_env_all.items():
        for entry, dirs in groups.items():
            for d in dirs:
                if finished(d, steps[d]) or include_running:
                    by_env.setdefault(env, {}).setdefault(entry, []).append(d)
                if not finished(d, steps[d]):
                    running.setdefault(env, []).append(
                        f"{entry} {d.name} at step {int(read_eval(d)['step'][-1])}")
    plans = {p.env: p for p in suite.envs}
    panels = {env: by_env.get(env, {}) for env in by_env_all}
    plot_envs(panels, out_dir / f"{stem}.png",
              f"{suite.name}: evaluation return, mean over seeds +- s.e.")
    for metric in metrics:  # the runs that log it (DDPG has no actor spread)
        having = {env: {e: [d for d in dirs if has_metric(d, metric)]
                        for e, dirs in groups.items()} for env, groups in panels.items()}
        having = {env: {e: dirs for e, dirs in groups.items() if dirs}
                  for env, groups in having.items()}
        if any(having.values()):
            plot_envs(having, out_dir / f"{stem}_{metric}.png",
                      f"{suite.name}: {metric}, mean over seeds +- s.e.", metric=metric,
                      log=True)
    every = {min(p.eval_every, p.steps) for p in suite.envs}
    lines = [f"# {title or 'Suite ' + suite.name}", ""]
    if suite.description:
        lines += [suite.description, ""]
    if suite.preregistration:
        lines += [suite.preregistration, ""]
    if suite.reference:
        lines += [f"Reference: {suite.reference}", ""]
    lines += [f"Command: `{command}`", "",
              "Protocol: evaluation every "
              + " / ".join(f"{e:,}".replace(",", " ") for e in sorted(every))
              + f" steps, {suite.eval_episodes} deterministic episodes on a separate env; best "
              "and final evaluation per run, mean ± standard error over runs. `steps` is the "
              "last step that every run of the row reached."
              + (f" Every run gets `{' '.join(suite.flags)}` (an entry's own flags override "
                 "it)." if suite.flags else ""), ""]
    if suite.cost:
        lines += [f"Budget: {suite.cost}", ""]
    lines += [f"Machine: {machine()}. Packages: {versions()}.", ""]
    text = "\n".join(lines) + hosts_line(by_env_all)
    multi = len(by_env_all) > 1
    for env, all_groups in by_env_all.items():
        groups = by_env.get(env, {})
        plan = plans.get(env)
        text += f"\n## {env}" + (f" ({plan.steps:,} steps)".replace(",", " ") if plan else "")
        text += "\n\n" + (format_table(table_rows(groups)) if groups else
                          "No finished run yet.") + "\n"
        named = [f"{e} = `{(suite.entries[e].command())}`" for e in all_groups
                 if e in suite.entries and (suite.entries[e].flags or suite.entries[e].peer
                                            or suite.entries[e].algo != e)]
        if named:
            text += "\nEntries: " + "; ".join(named) + ".\n"
        text += seeds_line(groups) + mixed_configs(groups)
        env_tag = f", panel {env}" if multi else ""
        text += _metric_text(groups, metrics, suite.compare, stem, env_tag)
        text += final_comparisons(groups, suite.compare)
        text += paired_comparisons(groups, suite.paired)
        threshold = plan.threshold if plan else None
        if threshold is not None and groups:
            text += sample_efficiency(groups, threshold)
            text += final_comparisons(groups, suite.compare, over_curve=True)
        if running.get(env):
            text += (("\nIn progress (in the table, the tests and the curves, each row at the "
                      "last step all its runs reached): " if include_running else
                      "\nIn progress (not in the table or the curves): ")
                     + ", ".join(running[env]) + ".\n")
    text += aggregates.section(aggregates.finals_of(by_env), suite.compare,
                               out_dir / f"{stem}_profile.png", suite.scores)
    if suite.decision is not None and verdicts and not include_running:
        text += verdict.decision_section(suite.decision, by_env,
                                         {env: plans[env].steps for env in by_env_all
                                          if env in plans}, suite.seeds)
        if suite.decision.beside is not None:  # the other grid's runs are not this report's
            text += (f"\nThe decision's `beside` table (each arm beside its twin in "
                     f"{suite.decision.beside.suite}) is drawn by benchmarks/learning.py, which "
                     "reads both grids' runs; it is not in this report.\n")
    (out_dir / f"{stem}.md").write_text(text)
    n_done = sum(len(d) for g in by_env.values() for d in g.values()) if not include_running \
        else sum(finished(r.run_dir, r.steps) for r in runs)
    (out_dir / f"{stem}.json").write_text(json.dumps({"finished": int(n_done),
                                                      "command": command}) + "\n")
    return text


def counts(runs: list[RunSpec]) -> tuple[int, int]:
    """(finished runs, runs in progress with at least one evaluation) of a selection."""
    done = sum(finished(r.run_dir, r.steps) for r in runs)
    running = sum(has_evals(r.run_dir) and not finished(r.run_dir, r.steps) for r in runs)
    return done, running


def previous(out_dir: Path, stem: str) -> tuple[int, str] | None:
    """(finished runs, command) of the report already in ``out_dir``, or None: from its
    ``S.json``, or for a report written before that file, from ``S.csv`` (a run counts as
    finished when it reached its entry's last step) and ``S.md``'s command line."""
    side = out_dir / f"{stem}.json"
    if side.exists():
        try:
            d = json.loads(side.read_text())
            return int(d["finished"]), str(d.get("command", ""))
        except (ValueError, KeyError, TypeError):
            pass
    path = out_dir / f"{stem}.csv"
    if not path.exists():
        return None
    last: dict[tuple, int] = {}
    top: dict[tuple, int] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            run = (r.get("env", ""), r.get("entry", ""), r.get("seed", ""))
            last[run] = max(last.get(run, 0), int(float(r.get("step", 0) or 0)))
    for (env, entry, _), step in last.items():
        top[(env, entry)] = max(top.get((env, entry), 0), step)
    n = sum(step == top[(env, entry)] for (env, entry, _), step in last.items())
    md = out_dir / f"{stem}.md"
    m = re.search(r"^Command: `([^`]+)`", md.read_text(errors="replace"), re.M) \
        if md.exists() else None
    return n, m.group(1) if m else ""


def restore_finished(runs: list[RunSpec], out_dir: Path, stem: str) -> list[str]:
    """Rebuild, from the committed CSVs under ``out_dir``, the run directories (eval.csv, and
    train.csv with the metrics) of runs that finished but are not on this machine: run
    directories are not committed, the CSVs are, so a grid that takes several sessions
    resumes where the last one stopped. CSVs without an ``env`` column (one env per file)
    match every env. A finished run here without its hosts file takes the committed one."""
    if not (out_dir / f"{stem}.csv").exists():
        return []

    def read(suffix: str) -> list[dict[str, str]]:
        path = out_dir / f"{stem}{suffix}.csv"
        if not path.exists():
            return []
        with open(path, newline="") as f:
            return list(csv.DictReader(f))

    rows, train_rows, host_rows = read(""), read("_train"), read("_hosts")

    def mine(table, run):
        return [r for r in table if r["entry"] == run.entry.name and r["seed"] == str(run.seed)
                and r.get("env", run.env) == run.env]

    restored = []
    for run in runs:
        evs, starts = mine(rows, run), mine(host_rows, run)
        if not evs or max(int(r["step"]) for r in evs) < run.steps:
            continue
        if (run.run_dir / "eval.csv").exists():  # here already; its hosts file may not be
            if starts and not read_starts(run.run_dir) and finished(run.run_dir, run.steps):
                write_starts(run.run_dir, starts)
            continue
        evs = [r for r in evs if int(r["step"]) <= run.steps]  # a longer run's tail stays out
        run.run_dir.mkdir(parents=True, exist_ok=True)
        with open(run.run_dir / "eval.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "return_mean", "return_std", "return_se", "episodes",
                        "wall_time"])
            for r in evs:
                n = int(r["episodes"])
                std = float(r["return_se"]) * n**0.5
                w.writerow([r["step"], r["return_mean"], std, r["return_se"], n, ""])
        tr = [r for r in mine(train_rows, run) if int(r["step"]) <= run.steps]
        if tr:  # the columns the run logged (another run's column is empty in its rows)
            keys = [k for k in tr[0] if k not in ("env", "entry", "seed")
                    and any(r[k] != "" for r in tr)]
            with open(run.run_dir / "train.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
                w.writeheader()
                for r in tr:
                    w.writerow(r)
        if starts:
            write_starts(run.run_dir, starts)
        restored.append(run.label)
    return restored
