"""The ``offpolicy`` command: train, eval, plot, table, list, bench, suite, export.

Every bad input (unknown algorithm, env, flag or preset; invalid value; missing or corrupt
checkpoint; NaN/inf in data or losses; an environment that raises in ``reset()`` or ``step()``)
ends with one line ``offpolicy: error: ...`` on stderr and exit code 2, never a traceback
(``OFFPOLICY_TRACEBACK=1`` prints the whole trace before that line). The train flags are
generated from the config dataclasses: ``--steps`` for the loop, ``--<section>.<field>`` (e.g.
``--ace.num-actors``) for the algorithm.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import traceback
from pathlib import Path

from offpolicy import __version__, registry
from offpolicy.config import CoreFields
from offpolicy.errors import OffpolicyError, did_you_mean
from offpolicy.train_args import Parser as _Parser
from offpolicy.train_args import split_flags as _split_flags
from offpolicy.train_args import train_parser as _train_parser


def cmd_train(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: offpolicy train ALGO [--env ENV_ID] [--steps N] [--seed S] [--run-dir DIR] "
              "[--config FILE.yaml] [--preset NAME] [--resume] [--<section>.<field> VALUE ...]\n"
              "(--env defaults to Pendulum-v1, --steps to 100000)\n"
              f"algorithms: {', '.join(registry.ALGORITHMS)}\n"
              "see `offpolicy train ALGO --help` for every flag")
        return 0
    algo = argv[0]
    registry.get(algo)  # unknown algorithm: one-line error
    ns = vars(_train_parser(algo, full=False).parse_args(argv[1:]))
    section = registry.get(algo).section
    train_over, agent_over = _split_flags(ns, section)
    file_dict, preset = _config_file(ns)
    resume = ns["resume"]
    # a resumed run keeps its saved preset: no env default is added to what is compared
    run = registry.resolve(algo, preset=preset, file_dict=file_dict,
                           train_overrides=train_over, agent_overrides=agent_over,
                           env_default=not resume)
    tc = run.train
    from offpolicy.ray_address import check_run_address

    check_run_address(tc)  # build checks it too; here, before the runtime imports JAX
    if not preset and run.preset and run.preset == registry.env_preset(algo, tc.env):
        print(f"offpolicy: {algo} on {tc.env} uses --preset {run.preset} by default "
              f"(--preset {registry.NO_PRESET} for the defaults)", file=sys.stderr)
    from offpolicy.training.run import Run
    from offpolicy.training.rundir import RunDirectory, default_run_dir, resumed_config

    run_dir = ns.get("run_dir") or default_run_dir(run, new=not resume)
    if not resume:  # before the env is built: a taken directory is refused at once
        RunDirectory(run_dir).check_new()
    if resume and Path(run_dir).is_dir() and not (Path(run_dir) / "config.yaml").exists() \
            and not any(Path(run_dir).iterdir()):
        # killed before it wrote anything: there is nothing to continue
        print(f"offpolicy: {run_dir} is empty (the run stopped before its first checkpoint); "
              "starting it from step 0", file=sys.stderr)
        resume = False
        run = registry.resolve(algo, preset=preset, file_dict=file_dict,
                               train_overrides=train_over, agent_overrides=agent_over)
    if resume:
        fd = file_dict or {}
        preset_train, preset_agent = registry.get(algo).preset_fields(preset)
        run = resumed_config(run_dir, run, set(train_over) | set(fd.get("train") or {})
                             | preset_train, set(agent_over) | set(fd.get(section) or {})
                             | preset_agent)

    trainer = Run(run, run_dir, resume=resume)
    try:
        summary = trainer.train()
    finally:
        trainer.close()  # env copies (subprocesses with --async-envs) and evaluation envs
    if summary["status"] == "interrupted":
        print(f"interrupted at step {summary['step']}; checkpoint written. Resume with: "
              f"offpolicy train {algo} --run-dir {run_dir} --resume", file=sys.stderr)
        return 128 + int(summary["signal"] or signal.SIGINT)  # 130 for Ctrl-C, 143 for SIGTERM
    print(f"final return_mean {summary['final_return']:.2f} at step {summary['step']} "
          f"(best {summary['best_return']:.2f}); run directory: {run_dir}")
    return 0


def _config_file(ns: dict) -> tuple[dict | None, str | None]:
    """``--config``'s mapping (None without one) and the preset: ``--preset``, else the
    file's."""
    file_dict = registry.load_yaml(ns["config"]) if "config" in ns else None
    return file_dict, ns.get("preset") or (file_dict or {}).get("preset")


def cmd_bench(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: offpolicy bench ALGO [--env ENV_ID] [--bench-steps N] [--bench-warmup W] "
              "[--rounds R] [--json] [--config FILE.yaml] [--<section>.<field> VALUE ...]\n"
              "env steps/s with one update per step, update-only rate, XLA FLOPs per update and "
              "FLOP efficiency against a 1024x1024 NumPy matmul (default env HalfCheetah-v5)")
        return 0
    algo = argv[0]
    registry.get(algo)
    p = _train_parser(algo)
    p.prog = f"offpolicy bench {algo}"
    for action in p._actions:  # the benchmark's env default is not training's
        if action.dest == "env":
            action.help = "Gymnasium environment id (default: HalfCheetah-v5)"
    p.add_argument("--bench-steps", type=int, default=3000, help="timed env steps")
    p.add_argument("--bench-warmup", type=int, default=None,
                   help="steps before timing (default: 1000, or past the run's first update)")
    p.add_argument("--rounds", type=int, default=3, help="alternating loop/update segments")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    ns = vars(p.parse_args(argv[1:]))
    for k in ("bench_steps", "bench_warmup", "rounds"):
        if ns[k] is not None and ns[k] < 1:
            raise OffpolicyError(f"--{k.replace('_', '-')} must be >= 1, got {ns[k]}")
    section = registry.get(algo).section
    train_over, agent_over = _split_flags(ns, section)
    # the training flags that say how long a run is or where it lives time nothing here
    for given, why in ((ns.get("resume"), "--resume does not apply: a benchmark times a fresh "
                        "run"),
                       (ns.get("run_dir"), "--run-dir does not apply: a benchmark writes no run "
                        "directory"),
                       ("steps" in train_over, "--steps does not apply: --bench-steps sets the "
                        "timed env steps")):
        if given:
            raise OffpolicyError(f"offpolicy bench {algo}: {why}")
    file_dict, preset = _config_file(ns)
    from_file = (file_dict or {}).get("train")
    if not (isinstance(from_file, dict) and from_file.get("env")):
        train_over.setdefault("env", "HalfCheetah-v5")
    run = registry.resolve(algo, preset=preset, file_dict=file_dict, train_overrides=train_over,
                           agent_overrides=agent_over)
    from offpolicy.training.bench import measure

    res = measure(run, ns["bench_steps"], ns["bench_warmup"], ns["rounds"])
    if ns["json"]:
        import json

        print(json.dumps(res))
    else:
        print(f"{algo} on {res['env']}: {res['env_steps_per_s']:.1f} env steps/s, update-only "
              f"{res['update_per_s']:.1f}/s (loop ratio {res['loop_ratio']:.3f}); "
              f"{res['gflop_per_update']:.3f} GFLOP/update, FLOP efficiency "
              f"{res['flop_efficiency']:.2f} of {res['matmul_gflops']:.0f} GFLOP/s "
              f"(1024x1024 NumPy matmul)")
    return 0


def cmd_eval(argv: list[str]) -> int:
    p = _Parser(prog="offpolicy eval", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                description="evaluate a run's checkpoint: deterministic episodes on the "
                "evaluation seeds")
    p.add_argument("run_dir", type=Path, help="a run directory, or an Agent.save directory")
    p.add_argument("--episodes", type=int, default=10, help="episodes to evaluate")
    p.add_argument("--checkpoint", choices=("latest", "best"), default="latest",
                   help="which checkpoint of a run directory")
    p.add_argument("--per-actor", action="store_true",
                   help="also evaluate each actor of an ensemble alone (ACE Table 3)")
    p.add_argument("--proposal", action="store_true",
                   help="AQL: draw the proposal along one greedy episode (the paper's Fig. 4) "
                   "to --out")
    p.add_argument("--out", type=Path, default=None,
                   help="with --proposal: the PNG to write (default RUN_DIR/proposal.png)")
    a = p.parse_args(argv)
    if a.episodes < 1:
        raise OffpolicyError(f"--episodes must be >= 1, got {a.episodes}")
    from offpolicy.api import load

    if a.out is not None and not a.proposal:
        raise OffpolicyError("--out applies with --proposal only (the figure it writes)")
    out_path = _figure_path(a.out or a.run_dir / "proposal.png") if a.proposal else None
    agent = load(a.run_dir, a.checkpoint)
    t = agent.run
    # refused before the evaluation, not after it
    if a.per_actor and not t.contract.num_actors:
        raise OffpolicyError(f"--per-actor needs an actor ensemble; {t.run.algo} has none")
    if a.proposal and t.contract.inspect is None:
        raise OffpolicyError(f"--proposal needs an AQL run; {t.run.algo} has no proposal")
    import numpy as np

    returns = t.evaluate(a.episodes)
    print(f"{t.run.algo} {t.run.train.env} step {t.step} ({a.checkpoint}): return "
          f"{returns.mean():.2f} +- {returns.std() / np.sqrt(a.episodes):.2f} (s.e. over "
          f"{a.episodes} episode{'s' if a.episodes != 1 else ''}; std {returns.std():.2f})")
    if a.per_actor:
        n = t.contract.num_actors
        print("| actor | return mean | return std |\n|---:|---:|---:|")
        for i in range(n):
            r = t.evaluate(a.episodes, policy=t.contract.single_actor_policy(i))
            print(f"| {i} | {r.mean():.2f} | {r.std():.2f} |")
    if a.proposal:
        from offpolicy.plotting import plot_proposal
        from offpolicy.training.evaluation import trace_episode

        trace = trace_episode(t, t.contract.inspect)
        with _writing(out_path):
            out = plot_proposal(trace, t.contract.sub_actions, out_path,
                                f"{t.run.algo} {t.run.train.env} step {t.step}",
                                std=t.agent.config.proposal_std)
        print(f"wrote {out} ({len(trace['reward'])} steps, return "
              f"{float(sum(trace['reward'])):.2f})")
    return 0


def cmd_export(argv: list[str]) -> int:
    from offpolicy.export import FORMATS, export

    p = _Parser(prog="offpolicy export", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                description="write a run's deterministic policy (observation normalisation "
                "included) as ONNX or as NumPy code, or its model card in the Hugging Face "
                "Hub's layout")
    p.add_argument("run_dir", type=Path, help="a run directory, or an Agent.save directory")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="onnx: policy.onnx (needs the export extra); numpy: policy.py + .json "
                   "+ .npz; card: README.md with the config, evaluations and curve")
    p.add_argument("--out", type=Path, default=None, help="the folder to write")
    p.add_argument("--hub", type=Path, default=None, metavar="DIR",
                   help="the model card with the checkpoint in DIR, ready for "
                   "huggingface_hub's upload_folder")
    p.add_argument("--checkpoint", choices=("latest", "best"), default="latest",
                   help="which checkpoint of a run directory")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file or non-empty folder")
    a = p.parse_args(argv)
    if a.hub is not None:
        if a.out is not None:
            raise OffpolicyError("--hub DIR names the folder to write: give --hub or --out, "
                                 "not both")
        if a.format not in (None, "card"):
            raise OffpolicyError(f"--hub writes the model card with the checkpoint; --format "
                                 f"{a.format} writes with --out DIR")
        fmt, out = "card", a.hub
    else:
        if a.format is None:
            raise OffpolicyError(f"--format is required ({', '.join(FORMATS)}), or --hub DIR")
        if a.out is None:
            raise OffpolicyError(f"--format {a.format} needs --out DIR (the folder to write)")
        fmt, out = a.format, a.out
    existed = out.exists()
    what = export(a.run_dir, fmt, out, a.checkpoint, a.force, hub=a.hub is not None)
    print(f"wrote {out}: {what}" + (" (replacing what was there)" if existed and a.force
                                    else ""))
    return 0


def _figure_path(path: Path) -> Path:
    """A figure file to write: its format from the suffix (PNG when there is none, as
    matplotlib does), checked before any work."""
    from matplotlib.backend_bases import FigureCanvasBase

    if not str(path) or path.name in ("", ".", "..") or path.is_dir():
        raise OffpolicyError(f"--out: expected a file name such as curves.png, got '{path}'")
    if not path.suffix:
        path = path.with_name(path.name + ".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise OffpolicyError(f"--out {path}: cannot write '{path.suffix}' figures (valid: "
                             f"{', '.join('.' + f for f in sorted(formats))})")
    return path


@contextlib.contextmanager
def _writing(path: Path):
    """Make ``path``'s missing folders for the block, and take them away again if it fails."""
    made = [d for d in [path.parent, *path.parent.parents] if not d.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OffpolicyError(f"cannot write {path}: {e}") from e
    try:
        yield
    except BaseException as e:
        for d in made:  # deepest first
            with contextlib.suppress(OSError):
                d.rmdir()
        if isinstance(e, OSError):
            raise OffpolicyError(f"cannot write {path}: {e}") from e
        raise


def _run_dirs(paths: list[Path]) -> list[Path]:
    out = []
    for p in paths:
        if (p / "eval.csv").exists():
            out.append(p)
        elif p.is_dir():
            out.extend(sorted(d.parent for d in p.rglob("eval.csv")))
        else:
            raise OffpolicyError(f"{p} is not a run directory")
    if not out:
        raise OffpolicyError("no run directories (with eval.csv) found")
    return out


def _leave_out(dirs: list[Path], keep, lacking: str) -> list[Path]:
    """The runs ``keep(run)`` holds for; the others are named in one note (all of them: one
    line error)."""
    missing = [d for d in dirs if not keep(d)]
    if len(missing) == len(dirs):
        raise OffpolicyError(f"no run has {lacking}: " + ", ".join(str(d) for d in dirs))
    if missing:  # one line, however many
        which = ", ".join(str(d) for d in missing)
        print(f"offpolicy: note: left out {len(missing)} run{'s' * (len(missing) > 1)} "
              f"without {lacking}: {which}", file=sys.stderr)
    return [d for d in dirs if d not in missing]


def _evaluated(dirs: list[Path]) -> list[Path]:
    """The runs with an evaluation: one just started has only eval.csv's header."""
    from offpolicy.plotting import read_eval_csv

    return _leave_out(dirs, lambda d: bool(read_eval_csv(d / "eval.csv", quiet=True)),
                      "an evaluation yet")


def cmd_plot(argv: list[str]) -> int:
    p = _Parser(prog="offpolicy plot", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                description="learning curves, mean +- standard error over seeds: runs are "
                "grouped by env (one panel each) and by configuration (the resolved config "
                "but the seed, length and logging)")
    p.add_argument("runs", type=Path, nargs="+",
                   help="run directories, or folders searched for them")
    p.add_argument("--out", type=Path, default=Path("curves.png"), help="the PNG to write")
    p.add_argument("--title", default="", help="a title above the panels")
    p.add_argument("--metric", help="plot this train.csv column instead of the evaluation "
                   "return (e.g. kl_mu_pi, far_policy_fraction, beta, c_max, rho_mean); runs "
                   "without it are left out and named")
    p.add_argument("--log", action="store_true", help="logarithmic y axis")
    a = p.parse_args(argv)
    target = _figure_path(a.out)
    from offpolicy.plotting import group_by_env, has_metric, plot_envs, read_eval_csv

    dirs = _run_dirs(a.runs)
    if a.metric:
        dirs = _leave_out(dirs, lambda d: has_metric(d, a.metric),
                          f"a train.csv column '{a.metric}'")
        dirs = _leave_out(dirs, lambda d: bool(read_eval_csv(d / "train.csv", quiet=True)),
                          "a train.csv row yet")
    else:
        dirs = _evaluated(dirs)
    existed = target.exists()
    with _writing(target):
        groups = group_by_env(dirs, registry.resolved_flat)
        out = plot_envs(groups, target, a.title, a.metric, a.log)
    print(f"wrote {out}" + (" (replacing the file there)" if existed else ""))
    return 0


def cmd_table(argv: list[str]) -> int:
    p = _Parser(prog="offpolicy table",
                description="best and final evaluation per configuration (ACE Table 1 style), "
                "one table per env; runs are grouped by env and by configuration (the "
                "resolved config but the seed, length and logging)")
    p.add_argument("runs", type=Path, nargs="+",
                   help="run directories, or folders searched for them")
    a = p.parse_args(argv)
    from offpolicy.plotting import format_table, group_by_env, table_rows

    by_env = group_by_env(_evaluated(_run_dirs(a.runs)), registry.resolved_flat)
    print("\n\n".join(f"{env}\n\n{format_table(table_rows(groups))}"
                      for env, groups in by_env.items()))
    return 0


def cmd_list(argv: list[str]) -> int:
    _Parser(prog="offpolicy list", description="algorithms, action kinds, presets").parse_args(
        argv)
    import textwrap

    for a in registry.ALGORITHMS.values():
        env_defaults = "".join(f" ({name} on {env})" for env, name in a.env_presets.items())
        print(f"{a.name:<15}{a.description}")
        core = (f"; recurrent core: --{a.section}.core lstm|gru"
                if issubclass(a.config_cls, CoreFields) else "")
        details = (f"actions: {', '.join(a.action_kinds)}; presets: {', '.join(a.presets)}"
                   f"{env_defaults}; --replay: {', '.join(a.replays)}{core}; flags: "
                   f"--{a.section}.*")
        print(textwrap.indent(textwrap.fill(details, 85), " " * 15))
    return 0


def _suite_parser(prog: str, description: str, report: bool) -> _Parser:
    p = _Parser(prog=prog, description=description)
    p.add_argument("suite", help="a shipped suite's name (offpolicy suite list) or a YAML path")
    p.add_argument("--seeds", type=int, nargs="+", help="instead of the suite's seeds")
    p.add_argument("--steps", type=int, help="instead of every env's steps")
    p.add_argument("--envs", nargs="+", help="a subset of the suite's envs")
    p.add_argument("--entries", nargs="+", help="a subset of the suite's entries")
    p.add_argument("--paper", action="store_true",
                   help="the paper's budget (the suite's 'paper:' steps and seeds)")
    p.add_argument("--out", type=Path, help="the suite's folder (default: runs/suites/<name>)")
    if report:
        p.add_argument("--metric", nargs="+", help="train.csv columns to draw and average "
                                                   "(default: the suite's metrics)")
        p.add_argument("--include-running", action="store_true",
                       help="runs in progress join the tables, tests and curves (each row at "
                            "the last step all its runs reached)")
        p.add_argument("--force", action="store_true",
                       help="replace a report that covers more finished runs than this "
                            "selection")
    else:
        p.add_argument("--jobs", type=int, default=1, help="runs at once, each a process "
                       "(default 1; about one per core)")
        p.add_argument("--ray-address", help="run each run as a task on this Ray cluster "
                       "('auto': the one this machine belongs to)")
        p.add_argument("--ray-connect-timeout", type=float, default=10.0, metavar="SECONDS",
                       help="Ray: how long the cluster at --ray-address may take to accept a "
                            "connection before the suite stops with one line (default 10)")
        p.add_argument("--retries", type=int, default=3,
                       help="Ray: attempts after a lost node or a failed run (default 3)")
        p.add_argument("--dry-run", action="store_true",
                       help="check the suite and print its runs; start none")
    return p


def _suite_plan(a):
    from offpolicy.suites import runner, spec

    suite = spec.load(a.suite).select(seeds=a.seeds, steps=a.steps, envs=a.envs,
                                      entries=a.entries, paper=a.paper)
    out = a.out or Path("runs") / "suites" / suite.name
    return suite, out, runner.plan(suite, runner.default_layout(out))


def _check_suite_folder(out: Path) -> None:
    """``--out`` is a folder, or can become one: refused in one line before any run when it,
    or the nearest of its parents that exists, is a file or cannot be written."""
    existing = next(p for p in [out, *out.absolute().parents] if p.exists() or p == p.parent)
    if not existing.is_dir():
        what = "is a file" if existing == out else f"cannot be made: {existing} is a file"
        raise OffpolicyError(f"--out {out} {what}, not a folder (the suite's runs and report "
                             "go in a folder)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OffpolicyError(f"--out {out}: cannot write in {existing} (permission denied)")


def _suite_run_command(a) -> str:
    """The ``offpolicy suite run`` command of a report's selection (what reruns its grid)."""
    parts = ["offpolicy suite run", a.suite]
    for flag, value in (("--seeds", a.seeds), ("--steps", a.steps), ("--envs", a.envs),
                        ("--entries", a.entries), ("--out", a.out)):
        if value is not None:
            parts += [flag, *map(str, value if isinstance(value, list) else [value])]
    return " ".join(parts + (["--paper"] if a.paper else []))


def cmd_suite(argv: list[str]) -> int:
    usage = ("usage: offpolicy suite {list,run,report} ...\n"
             "  list                  the shipped suites, their runs and budgets\n"
             "  run SUITE [--jobs J] [--ray-address ADDR [--ray-connect-timeout S]] [--seeds ..]\n"
             "      [--steps N] [--envs ..] [--entries ..] [--paper] [--out DIR]\n"
             "                        run (or finish) the grid, then report\n"
             "  report SUITE [--out DIR] [--metric M ..]   tables, curves, tests from the runs")
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    what, rest = argv[0], argv[1:]
    from offpolicy.suites import report, runner, spec

    if what == "list":
        _Parser(prog="offpolicy suite list", description="the shipped suites").parse_args(rest)
        import textwrap

        for name, path in spec.available().items():
            s = spec.load(path)
            envs = ", ".join(e.env for e in s.envs)
            print(f"{name:<15}" + textwrap.fill(s.description, 85, subsequent_indent=" " * 15,
                                                break_on_hyphens=False))
            n_seeds = len(s.seeds)
            details = (f"{s.num_runs()} runs, {s.env_steps():,} env steps ({n_seeds} "
                       f"seed{'' if n_seeds == 1 else 's'}) on {envs}"
                       .replace(",", " ").replace("  ", ", ")
                       + (f". {s.cost}" if s.cost else ""))
            print(textwrap.indent(textwrap.fill(details, 85, break_on_hyphens=False), " " * 15))
        return 0
    if what not in ("run", "report"):
        hint = did_you_mean(what, ["list", "run", "report"], n=1)
        raise OffpolicyError(f"unknown suite command '{what}'{hint} (valid: list, run, report)")
    p = _suite_parser(f"offpolicy suite {what}", "run a suite's grid, then write its report"
                      if what == "run" else "write a suite's report from its runs",
                      what == "report")
    a = p.parse_args(rest)
    suite, out, runs = _suite_plan(a)
    command = _suite_run_command(a) if what == "report" else "offpolicy suite run " + " ".join(rest)
    if what == "report":
        for metric in a.metric or []:  # each draws report_<metric>.png
            spec.safe_name(suite.path or suite.name, "--metric", metric)
        if a.out is not None and not Path(a.out).is_dir():
            raise OffpolicyError(f"--out {a.out}: no such folder (the folder `offpolicy suite "
                                 f"run {a.suite} --out ...` wrote its runs to)")
        done, running = report.counts(runs)
        before = report.previous(out, "report")
        was = (f"; the report there ({before[0]} finished runs) was written by `{before[1]}`"
               if before else "")
        if done == 0 and not (a.include_running and running):
            raise OffpolicyError(f"suite report: no finished run of {suite.name} in {out} for "
                                 f"this selection ({len(runs)} planned, {running} in progress)"
                                 f"{was}; nothing written")
        if before and before[0] > done and not a.force:
            raise OffpolicyError(f"suite report: {out / 'report.md'} covers {before[0]} finished "
                                 f"runs, this selection {done}{was}: rerun that command, or "
                                 "--force to replace it; nothing written")
        text = report.write_report(suite, runs, out, "report", command, a.metric,
                                   include_running=a.include_running)
        print(text)
        print(f"report: {out / 'report.md'}: {done} finished runs of {len(runs)} planned, "
              f"{running} in progress (+ report.csv, report.png)", file=sys.stderr)
        return 0
    if a.retries < 0:
        raise OffpolicyError(f"--retries must be 0 or more, got {a.retries}")
    if a.jobs < 1:
        raise OffpolicyError(f"--jobs must be at least 1, got {a.jobs}")
    if not 0 < a.ray_connect_timeout < float("inf"):  # NaN too
        raise OffpolicyError(f"--ray-connect-timeout must be > 0, got {a.ray_connect_timeout}")
    _check_suite_folder(out)
    if a.ray_address:  # before the check builds any env: an unreachable cluster says so first
        from offpolicy.ray_address import check_ray_address

        check_ray_address(a.ray_address, a.ray_connect_timeout)
    spec.check(suite)
    report.check_metrics(suite, runs)  # a grid under way: refused now, not in its last report
    done, todo = runner.split_finished(runs)
    print(f"offpolicy: suite {suite.name}: {len(runs)} runs, {len(done)} finished, "
          f"{len(todo)} to run or resume; folder {out}", file=sys.stderr)
    if suite.peers:
        print(f"offpolicy: note: suite {suite.name} leaves out its peer entries "
              f"{', '.join(suite.peers)} (benchmarks/learning.py runs them, in the peers' bench "
              "venv)", file=sys.stderr)
    if a.dry_run:
        for r in todo:
            print(shlex.join(["offpolicy", *runner.train_command(r)[3:]]))
        return 0
    def rewrite(_run=None):
        """A partial report after every run (a long suite shows its state), unless the report
        already there covers more finished runs than this selection (another selection's)."""
        before = report.previous(out, "report")
        if before and before[0] > report.counts(runs)[0]:
            if not noted:
                noted.append(True)
                print(f"offpolicy: note: {out / 'report.md'} covers {before[0]} finished runs "
                      f"(`{before[1]}`), more than this selection: left as it is", file=sys.stderr)
            return
        report.write_report(suite, runs, out, "report", command)

    noted: list[bool] = []

    if a.ray_address:
        outcome = runner.run_ray(runs, a.ray_address, a.retries, after_each=rewrite,
                                 connect_timeout=a.ray_connect_timeout)
    else:
        outcome = runner.run_local(runs, a.jobs, after_each=rewrite)
    if outcome.stopped:
        print(f"offpolicy: suite stopped; run the same command again to finish the "
              f"{len(runs) - len(outcome.done) - len(outcome.ran)} runs left", file=sys.stderr)
        return outcome.exit_code()
    rewrite()
    for run, why in outcome.failed:
        print(f"offpolicy: failed: {run.label}: {why}", file=sys.stderr)
    if outcome.busy:
        print(f"offpolicy: {len(outcome.busy)} runs are being run by another driver: "
              + ", ".join(r.label for r in outcome.busy), file=sys.stderr)
    print(f"offpolicy: suite {suite.name}: {len(outcome.ran)} runs finished now, "
          f"{len(outcome.done)} before, {len(outcome.failed)} failed; report: "
          f"{out / 'report.md'}", file=sys.stderr)
    return outcome.exit_code()


COMMANDS = {"train": cmd_train, "eval": cmd_eval, "plot": cmd_plot, "table": cmd_table,
            "list": cmd_list, "bench": cmd_bench, "suite": cmd_suite, "export": cmd_export}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: offpolicy {{{','.join(COMMANDS)}}} ...\n"
              "  train ALGO [--env ENV_ID] train an agent (offpolicy train ALGO --help)\n"
              "  eval RUN_DIR              evaluate a checkpoint\n"
              "  plot RUN_DIR...           learning curves\n"
              "  table RUN_DIR...          best/final returns table\n"
              "  list                      algorithms, action kinds, presets\n"
              "  bench ALGO                throughput, update-only rate, FLOP efficiency\n"
              "  suite {list,run,report}   experiment grids from papers, local or on Ray\n"
              "  export RUN_DIR            the policy as ONNX or NumPy; a Hub model card\n"
              "  --version")
        return 0
    if argv[0] == "--version":
        print(f"offpolicy {__version__}")
        return 0
    cmd = COMMANDS.get(argv[0])
    from offpolicy.training.signals import Terminated, terminated, terminating

    try:
        if cmd is None:
            hint = did_you_mean(argv[0], COMMANDS, n=1)
            raise OffpolicyError(f"unknown command '{argv[0]}'{hint} "
                                 f"(valid: {', '.join(COMMANDS)}, --version)")
        with terminating():  # a training loop takes SIGTERM over, and checkpoints
            code = cmd(argv[1:])
            if not terminated():
                return code
            raise Terminated  # one that was dropped (raised in a gc callback)
    except Terminated:
        print("offpolicy: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except OffpolicyError as e:
        if os.environ.get("OFFPOLICY_TRACEBACK", "") not in ("", "0"):
            traceback.print_exception(e)  # the whole chain, the env's own frames included
        print(f"offpolicy: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("offpolicy: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `offpolicy list | head`: the reader has gone, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
