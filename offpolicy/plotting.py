"""Learning curves with standard-error bands and paper-style tables (ACE Table 1)."""

from __future__ import annotations

import csv
import math
import os
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from offpolicy.errors import OffpolicyError, did_you_mean

_NOTED: set[Path] = set()  # files whose incomplete last line was reported once already


def parse_csv(path: Path) -> tuple[list[str], list[list[str]], bool]:
    """(header, rows as strings, whether the last line is incomplete) of a run's CSV. Rows are
    written whole and flushed, so a run killed while writing leaves at most one incomplete
    line, the last, which has no newline yet."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise OffpolicyError(f"cannot read {path}: {e}") from e
    lines = text.splitlines()
    if not lines:
        return [], [], False
    incomplete = not text.endswith(("\n", "\r"))
    header, *rows = list(csv.reader(lines))
    if incomplete and not rows:  # the header itself was cut
        return [], [], True
    return header, rows, incomplete


EVAL_COLUMNS = ("return_mean", "return_se")  # what every reader of an eval.csv row uses


def read_eval_csv(path: Path, quiet: bool = False) -> list[dict[str, float]]:
    """The rows of an eval.csv (or train.csv) as floats (the one reader for these files:
    plots, tables, runs). An incomplete last line (a run killed while writing it) is skipped
    with a note on stderr (``quiet``: without); any other malformed row is a one-line error
    naming the file and the line."""
    path = Path(path)
    if not path.exists():
        return []
    header, rows, incomplete = parse_csv(path)
    if incomplete and rows:
        rows = rows[:-1]
        if not quiet and path not in _NOTED:
            _NOTED.add(path)
            print(f"offpolicy: note: {path}: skipped its incomplete last line {len(rows) + 2} "
                  "(the run stopped while writing it)", file=sys.stderr)
    if rows and "step" not in header:
        raise OffpolicyError(f"{path}: line 1 has no 'step' column (header: {','.join(header)})")
    out = []
    for n, fields in enumerate(rows, start=2):
        if not fields:
            continue  # a blank line
        if len(fields) != len(header):
            raise OffpolicyError(f"{path}, line {n}: {len(fields)} fields where the header has "
                                 f"{len(header)}")
        row = {}
        for k, v in zip(header, fields):
            if v == "":
                continue
            try:
                row[k] = float(v)
            except ValueError:
                raise OffpolicyError(f"{path}, line {n}: '{k}' is not a number: "
                                     f"{v[:40]!r}") from None
        if "step" not in row:
            raise OffpolicyError(f"{path}, line {n}: no step")
        if not math.isfinite(row["step"]) or row["step"] < 0:
            raise OffpolicyError(f"{path}, line {n}: step {fields[header.index('step')]!r} is "
                                 "not a step count")
        missing = [k for k in EVAL_COLUMNS if k not in row] if path.name == "eval.csv" else []
        if missing:
            raise OffpolicyError(f"{path}, line {n}: no {' or '.join(missing)} (an eval.csv row "
                                 f"holds {', '.join(EVAL_COLUMNS)})")
        out.append(row)
    return out


def last_eval(path: Path) -> tuple[int, float]:
    """(step, return_mean) of the newest complete row of an eval.csv, or (-1, nan)."""
    rows = read_eval_csv(path, quiet=True)
    if not rows:
        return -1, float("nan")
    return int(rows[-1]["step"]), rows[-1]["return_mean"]


def read_eval(run_dir: str | Path) -> dict[str, np.ndarray]:
    path = Path(run_dir) / "eval.csv"
    if not path.exists():
        raise OffpolicyError(f"no eval.csv in {run_dir}")
    rows = read_eval_csv(path)
    if not rows:
        raise OffpolicyError(f"{path} has no evaluations yet")
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def read_metric(run_dir: str | Path, metric: str) -> dict[str, np.ndarray]:
    """``step`` and ``return_mean`` (the metric, under the eval's key so that :func:`curves`
    reads both alike) of one train.csv column, e.g. ReF-ER's ``kl_mu_pi``."""
    path = Path(run_dir) / "train.csv"
    rows = read_eval_csv(path)
    if not rows:
        raise OffpolicyError(f"no train.csv rows in {run_dir}")
    if metric not in rows[0]:
        cols = [k for k in rows[0] if k not in ("step", "wall_time")]
        raise OffpolicyError(f"{path} has no column '{metric}'{did_you_mean(metric, cols)} "
                             f"(columns: {', '.join(cols)})")
    rows = [r for r in rows if metric in r]
    return {"step": np.array([r["step"] for r in rows]),
            "return_mean": np.array([r[metric] for r in rows])}


def save_figure(fig, out: str | Path) -> Path:
    """Write ``fig`` to ``out`` (format from its suffix, else PNG) through a temporary file
    beside it, then close it: a failed write (a full disk) leaves the old file or none, never
    a partial one."""
    import matplotlib.pyplot as plt

    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format=out.suffix[1:].lower() or "png")
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return out


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """curve.png of one run: mean evaluation return with its standard-error band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = read_eval(run_dir)
    cfg = run_config(run_dir)
    out = Path(out) if out else Path(run_dir) / "curve.png"
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(d["step"], d["return_mean"], marker="o", ms=3)
    ax.fill_between(d["step"], d["return_mean"] - d["return_se"],
                    d["return_mean"] + d["return_se"], alpha=0.25)
    ax.set_xlabel("environment steps")
    n = int(d["episodes"][-1])
    ax.set_ylabel(f"evaluation return (mean of {n} episodes)", fontsize=9)
    preset = cfg.get("preset")
    ax.set_title(f"{cfg.get('algo')}{' ' + preset if preset not in (None, 'None') else ''} on "
                 f"{cfg.get('train.env')}, seed {cfg.get('train.seed')} (band: s.e.)",
                 fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, out)


def plot_proposal(trace: dict, sub_actions: tuple, out: str | Path, title: str = "",
                  moments: int = 4, max_sub_actions: int = 3, std: float = 0.5) -> Path:
    """AQL's proposal figure (Van de Wiele et al. 2020, Fig. 4) along one greedy episode.

    ``trace`` holds per step t: ``action`` [S, D] (the greedy a*), ``q_proposal`` [S, N] (Q of
    the N proposal samples), ``q_uniform_max`` [S], ``distributions`` (per sub-action d:
    [S, n_d] probabilities given a*'s prefix, or [S, 1] a Gaussian's mean) and ``reward`` [S].
    The top panel is the episode: each sub-action's proposal entropy (discrete ones) and the
    reward per step. Below it, ``moments`` evenly spaced steps get one row each: the histogram
    of the Q values of the proposal samples (the best uniform sample as a dashed line), then
    the proposal over the first ``max_sub_actions`` sub-actions, the greedy choice in green
    (a continuous one as its Gaussian, of std ``std``, the proposal's).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = len(trace["reward"])
    if steps == 0:
        raise OffpolicyError("the episode has no steps to draw")
    shown = list(range(min(len(sub_actions), max_sub_actions)))
    rows = min(moments, steps)
    picks = np.unique(np.linspace(0, steps - 1, rows).round().astype(int))
    cols = 1 + len(shown)
    fig = plt.figure(figsize=(3.2 * cols, 2.2 * (len(picks) + 1)), dpi=100)
    grid = fig.add_gridspec(len(picks) + 1, cols)
    top = fig.add_subplot(grid[0, :])
    t = np.arange(steps)
    for d, (kind, _n) in enumerate(sub_actions[:max_sub_actions]):
        if kind == "discrete":
            p = np.clip(np.asarray(trace["distributions"][d]), 1e-12, 1.0)
            top.plot(t, -np.sum(p * np.log(p), -1), label=f"entropy of sub-action {d}")
    top.set_ylabel("entropy (nats)", fontsize=8)
    top.set_xlabel("episode step")
    twin = top.twinx()
    twin.plot(t, trace["reward"], color="0.5", lw=0.8, label="reward")
    twin.set_ylabel("reward", fontsize=8)
    lines = top.get_lines() + twin.get_lines()
    top.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="upper right")
    top.set_title(title or "proposal along one greedy episode")
    for row, step in enumerate(picks, start=1):
        ax = fig.add_subplot(grid[row, 0])
        ax.hist(np.asarray(trace["q_proposal"][step]), bins=20, color="tab:blue")
        ax.axvline(float(trace["q_uniform_max"][step]), color="k", ls="--", lw=1)
        ax.set_ylabel(f"step {step}", fontsize=8)
        ax.tick_params(labelsize=7)
        if row == 1:
            ax.set_title("Q of proposal samples (--: best uniform)", fontsize=8)
        for c, d in enumerate(shown, start=1):
            ax = fig.add_subplot(grid[row, c])
            kind, n = sub_actions[d]
            chosen = float(trace["action"][step][d])
            dist = np.asarray(trace["distributions"][d][step])
            if kind == "discrete":
                colors = ["tab:green" if i == int(round(chosen)) else "tab:gray"
                          for i in range(n)]
                ax.bar(np.arange(n), dist, color=colors)
                ax.set_ylim(0, 1)
            else:
                xs = np.linspace(-1, 1, 101)
                ax.plot(xs, np.exp(-0.5 * ((xs - dist[0]) / std) ** 2), color="tab:gray")
                ax.axvline(chosen, color="tab:green")
            ax.tick_params(labelsize=7)
            if row == 1:
                ax.set_title(f"proposal, sub-action {d}", fontsize=8)
    fig.tight_layout()
    out = Path(out)
    return save_figure(fig, out)


# fields that do not change what a run learns: runs that differ only in these are seeds of one
# configuration (steps: runs of different lengths are compared at the steps they share)
NOT_CONFIG = {"train.seed", "train.steps", "train.quiet", "train.log_every",
              "train.checkpoint_every", "train.save_replay", "train.async_envs",
              "train.ray_address", "train.ray_connect_timeout", "train.wandb_project",
              "train.wandb_entity", "train.wandb_mode"}


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    """A config dict as config.yaml holds it, flattened: ``train.replay`` -> its value as text."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = (" ".join(map(str, v)) if isinstance(v, (list, tuple))
                                   else f"{v:g}" if isinstance(v, float) else str(v))
    return out


def run_config(run_dir: Path) -> dict[str, str]:
    """A run's resolved config (config.yaml), flattened (``train.replay``, ``ddpg.actor_lr``,
    ``preset``...); for a directory without one (a peer's run), its folder names it."""
    import yaml

    path = Path(run_dir) / "config.yaml"
    try:
        cfg = yaml.safe_load(path.read_text()) if path.exists() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise OffpolicyError(f"cannot read {path}: {' '.join(str(e).split())[:200]}") from e
    if not isinstance(cfg, dict):
        return {"algo": Path(run_dir).parent.name or Path(run_dir).name, "train.env": "?"}
    return flatten(cfg)


def _short(field: str) -> str:
    return field.rsplit(".", 1)[-1]


def _labels(keys: list[dict[str, str]]) -> list[str]:
    """Names for configurations of one env: the algorithm, then what differs between its
    configurations (``ddpg preset=fast``, ``naf replay=per``). A field a preset explains (it
    varies only where the preset does) is left to the preset's name."""
    labels = []
    for key in keys:
        algo = key.get("algo", "?")
        same = [k for k in keys if k.get("algo", "?") == algo]
        fields = sorted({f for k in same for f in k} - {"algo"})
        varying = [f for f in fields if len({k.get(f) for k in same}) > 1]
        if "preset" in varying:
            varying = [f for f in varying if f == "preset" or any(
                len({k.get(f) for k in same if k.get("preset") == p}) > 1
                for p in {k.get("preset") for k in same})]
        labels.append(" ".join([algo] + [f"{_short(f)}={key.get(f)}" for f in varying]))
    return labels


Resolved = Callable[[Any, Any, Any], "dict[str, str] | None"]


def _fill_missing(cfgs: list[dict[str, str]], resolved: Resolved | None = None
                  ) -> list[dict[str, str]]:
    """Fields a newer version added to config.yaml (``train.sync_every``,
    ``train.warmup_actions``...) are missing from older runs. Such a run is filled with the
    values it loads with: ``resolved(algo, preset, env)`` gives that flattened config
    (``registry.resolved_flat``: what its algorithm and preset resolve to today, but for the
    fields whose value a preset changed since they were added, which keep the value such runs
    had); without it, or where it gives None, among runs of one algorithm and env a field that
    every run having it sets to one value is taken to have that value."""
    by: dict[tuple, list[dict[str, str]]] = defaultdict(list)
    for cfg in cfgs:
        by[(cfg.get("algo"), cfg.get("train.env"))].append(cfg)
    defaults: dict[tuple, dict[str, str] | None] = {}
    for (algo, env), group in by.items():
        fields = set().union(*group) - {"preset"}
        for c in group:
            missing = fields - set(c)
            if not missing:
                continue
            key = (algo, c.get("preset"), env)
            if key not in defaults:
                defaults[key] = resolved(*key) if resolved is not None else None
            loads_with = defaults[key]
            for f in missing:
                if loads_with is not None and f in loads_with:
                    c[f] = loads_with[f]
                else:
                    values = {g[f] for g in group if f in g}
                    if len(values) == 1:
                        c[f] = next(iter(values))
    return cfgs


def _identity(cfg: dict[str, str], *also_ignored: str) -> tuple:
    """What makes two runs the same configuration (env aside): every field but NOT_CONFIG."""
    return tuple(sorted((k, v) for k, v in cfg.items() if k not in NOT_CONFIG
                        and k != "train.env" and k not in also_ignored))


def group_by_env(run_dirs: list[Path], resolved: Resolved | None = None
                 ) -> dict[str, dict[str, list[Path]]]:
    """Runs grouped by env, then by configuration (the resolved config but for the seed, the
    length and logging): env -> label -> run directories. Labels name the algorithm and what
    differs between its configurations; runs of different envs never share a group.
    ``resolved``: what fills fields older runs lack (:func:`_fill_missing`)."""
    by_env: dict[str, dict[tuple, list[Path]]] = defaultdict(dict)
    configs: dict[tuple, dict[str, str]] = {}
    cfgs = _fill_missing([run_config(r) for r in run_dirs], resolved)
    # a run written before config.yaml named the preset (preset: None) is the same
    # configuration as one that names it when every resolved field agrees
    named = defaultdict(set)
    for cfg in cfgs:
        if cfg.get("preset", "None") != "None":
            named[_identity(cfg, "preset")].add(cfg["preset"])
    for r, cfg in zip(run_dirs, cfgs):
        if cfg.get("preset", "None") == "None" and len(named[_identity(cfg, "preset")]) == 1:
            cfg["preset"] = next(iter(named[_identity(cfg, "preset")]))
        key = _identity(cfg)
        configs[key] = dict(key)
        by_env[cfg.get("train.env", "?")].setdefault(key, []).append(Path(r))
    out = {}
    for env, groups in by_env.items():
        keys = list(groups)
        labels = _labels([configs[k] for k in keys])
        out[env] = {label: groups[k] for label, k in sorted(zip(labels, keys))}
    return dict(sorted(out.items()))


def group_runs(run_dirs: list[Path]) -> dict[str, list[Path]]:
    """Runs of one env grouped by configuration (label -> run directories); refuses runs of
    several envs (:func:`group_by_env` keeps them apart)."""
    by_env = group_by_env(run_dirs)
    if len(by_env) > 1:
        raise OffpolicyError(f"these runs are on {len(by_env)} envs ({', '.join(by_env)}); "
                             "compare one env at a time")
    return next(iter(by_env.values()), {})


def curves(groups: dict[str, list[Path]], metric: str | None = None
           ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per group: steps, mean over seeds, standard error over seeds (common steps only) of the
    evaluation return, or of a train.csv ``metric``."""
    out = {}
    for name, runs in groups.items():
        evals = [read_eval(r) if metric is None else read_metric(r, metric) for r in runs]
        steps = sorted(set.intersection(*[set(e["step"].tolist()) for e in evals]))
        if not steps:
            continue
        m = np.array([[e["return_mean"][list(e["step"]).index(s)] for s in steps] for e in evals])
        se = m.std(0, ddof=1) / np.sqrt(len(runs)) if len(runs) > 1 else np.zeros(len(steps))
        out[name] = (np.array(steps), m.mean(0), se)
    return out


def _draw(ax, groups: dict[str, list[Path]], metric: str | None, log: bool) -> None:
    drawn = curves(groups, metric)
    for name, (steps, mean, se) in drawn.items():
        n = len(groups[name])
        # a curve of one or two points is drawn with markers, so that it shows
        ax.plot(steps, mean, label=f"{name} (n={n})", marker="o" if len(steps) <= 2 else None)
        ax.fill_between(steps, mean - se, mean + se, alpha=0.2)
    ax.set_xlabel("environment steps")
    what = "evaluation return" if metric is None else metric
    ax.set_ylabel(f"{what} (mean over seeds, shaded: s.e.)")
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    else:  # e.g. a suite's env none of whose runs has evaluated yet
        ax.text(0.5, 0.5, "no evaluations yet", ha="center", va="center",
                transform=ax.transAxes, color="0.5")


def has_metric(run_dir: Path, metric: str) -> bool:
    """Whether a run's train.csv has the column ``metric``."""
    path = Path(run_dir) / "train.csv"
    header = parse_csv(path)[0] if path.exists() else []
    return metric in header


def plot_groups(groups: dict[str, list[Path]], out: str | Path, title: str = "",
                metric: str | None = None, log: bool = False) -> Path:
    """One env's groups on one axis."""
    return plot_envs({"": groups}, out, title, metric, log)


def plot_envs(by_env: dict[str, dict[str, list[Path]]], out: str | Path, title: str = "",
              metric: str | None = None, log: bool = False) -> Path:
    """One panel per env (:func:`group_by_env`), titled with it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(by_env), 1)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4.5 * rows), dpi=110,
                             squeeze=False)
    for ax, (env, groups) in zip(axes.ravel(), by_env.items()):
        _draw(ax, groups, metric, log)
        if env:
            ax.set_title(env)
    for ax in axes.ravel()[len(by_env):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, out)


def table_rows(groups: dict[str, list[Path]]) -> list[dict]:
    """ACE Table 1 style: best and final evaluation per run, mean +- s.e. over runs.

    Runs still in progress are compared at the last step that every run of the group reached
    (``steps``): "final" is each run's evaluation at that step and "best" its best evaluation up
    to it. The standard error needs two runs or more (NaN otherwise)."""
    rows = []
    for name, runs in groups.items():
        evals = [read_eval(r) for r in runs]
        last_step = min(int(e["step"][-1]) for e in evals)
        best, final = [], []
        for e in evals:
            upto = e["step"] <= last_step
            best.append(e["return_mean"][upto].max())
            final.append(e["return_mean"][upto][-1])
        best, final = np.array(best), np.array(final)

        def se(x):
            return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")

        rows.append({"algorithm": name, "runs": len(runs), "steps": last_step,
                     "cut": any(int(e["step"][-1]) > last_step for e in evals),
                     "best_mean": float(best.mean()), "best_se": se(best),
                     "final_mean": float(final.mean()), "final_se": se(final)})
    return rows


def _mean_se(mean: float, se: float) -> str:
    """One decimal for returns of 10 or more, three below (Platform's are in [0, 1])."""
    d = 1 if abs(mean) >= 10 else 3
    return f"{mean:.{d}f} ± {se:.{d}f}" if np.isfinite(se) else f"{mean:.{d}f} (1 run)"


def format_table(rows: list[dict], markdown: bool = True) -> str:
    head = "| algorithm | runs | steps | best (mean ± s.e.) | final (mean ± s.e.) |"
    lines = [head, "|---|---:|---:|---:|---:|"]
    for r in rows:
        mark = "*" if r.get("cut") else ""
        lines.append(f"| {r['algorithm']} | {r['runs']} | {r['steps']}{mark} | "
                     f"{_mean_se(r['best_mean'], r['best_se'])} | "
                     f"{_mean_se(r['final_mean'], r['final_se'])} |")
    if any(r.get("cut") for r in rows):
        lines.append("\n* runs of different lengths: compared up to the last step every run of "
                     "the row reached")
    return "\n".join(lines)
