"""The ``offpolicy`` command: train, eval, plot, table, list.

Every bad input (unknown algorithm, env, flag or preset; invalid value; missing or corrupt
checkpoint; NaN/inf in data or losses; an environment that raises in ``reset()`` or ``step()``)
ends with one line ``offpolicy: error: ...`` on stderr and exit code 2, never a traceback
(``OFFPOLICY_TRACEBACK=1`` prints the whole trace before that line). The train flags are
generated from the config dataclasses: ``--steps`` for the loop, ``--<section>.<field>`` (e.g.
``--ace.num-actors``) for the algorithm.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import traceback
import typing
from pathlib import Path

from offpolicy import __version__, registry
from offpolicy import config as C
from offpolicy.errors import OffpolicyError, did_you_mean

# argparse reads "-1e-3" as a flag (its negative-number test knows no exponent): such a value
# after an option that takes one is joined to it, "--vracer.lr=-1e-3", which argparse reads
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


class _Parser(argparse.ArgumentParser):
    """argparse that raises OffpolicyError (one line) instead of printing usage and exiting."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        joined: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            action = self._option_string_actions.get(a)
            if (action is not None and action.nargs != 0 and i + 1 < len(args)
                    and _NEGATIVE_NUMBER.match(args[i + 1])):
                joined.append(f"{a}={args[i + 1]}")
                i += 2
                continue
            joined.append(a)
            i += 1
        return super().parse_known_args(joined, namespace)

    def error(self, message: str) -> typing.NoReturn:
        if message.startswith("unrecognized arguments:"):
            flags = [a for a in message.split(":", 1)[1].split() if a.startswith("-")]
            known = sorted(o for a in self._actions for o in a.option_strings if o.startswith("--"))
            bad = flags[0] if flags else message.split(":", 1)[1].strip()
            hint = did_you_mean(bad.split("=")[0], known)
            raise OffpolicyError(
                f"{self.prog}: unknown flag {bad}{hint} (valid: {', '.join(known)})")
        raise OffpolicyError(f"{self.prog}: {message}")


def _flag(prefix: str, name: str) -> str:
    return "--" + (prefix + "." if prefix else "") + name.replace("_", "-")


def _add_fields(parser: argparse.ArgumentParser, cls: type, prefix: str, defaults) -> None:
    group = parser.add_argument_group(f"{prefix or 'training'} options")
    for f in C.fields_of(cls):
        tp = C.field_type(cls, f)
        dest = (prefix + "." if prefix else "") + f.name
        default = getattr(defaults, f.name)
        help_ = f"{f.metadata.get('help', '')} (default: {default})"
        kw = dict(dest=dest, default=argparse.SUPPRESS, help=help_)
        if tp is bool:
            group.add_argument(_flag(prefix, f.name), action=argparse.BooleanOptionalAction, **kw)
        elif typing.get_origin(tp) is tuple:
            group.add_argument(_flag(prefix, f.name), type=int, nargs="+", metavar="N", **kw)
        else:
            choices = f.metadata.get("choices")
            group.add_argument(_flag(prefix, f.name), type=tp, choices=choices,
                               metavar=None if choices else f.name.upper(), **kw)


def _train_parser(algo: str) -> _Parser:
    spec = registry.get(algo)
    p = _Parser(prog=f"offpolicy train {algo}", description=spec.description,
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--run-dir", type=Path, default=argparse.SUPPRESS,
                   help="run directory (default: runs/<algo>-<env>-s<seed>)")
    p.add_argument("--config", type=Path, default=argparse.SUPPRESS,
                   help="YAML file with train: and section keys (as a run's config.yaml)")
    p.add_argument("--preset", choices=[*spec.presets, registry.NO_PRESET],
                   default=argparse.SUPPRESS,
                   help="named hyper-parameter preset: " + _describe_presets(spec))
    p.add_argument("--resume", action="store_true", default=False,
                   help="continue the run in --run-dir from its latest checkpoint")
    # the defaults shown are this algorithm's resolved ones (its own batch size, replay,
    # memory...), not the dataclasses'
    defaults = registry.resolve(algo)
    _add_fields(p, C.TrainConfig, "", defaults.train)
    _add_fields(p, spec.config_cls, spec.section, defaults.agent)
    return p


def _describe_presets(spec) -> str:
    """``name (--flag value, ...)`` for each preset, as the help of ``--preset``."""

    def pair(prefix: str, name: str, value) -> str:
        flag = _flag(prefix, name)
        if isinstance(value, bool):  # BooleanOptionalAction: --x / --no-x
            return flag if value else "--no-" + flag[2:]
        shown = " ".join(map(str, value)) if isinstance(value, (tuple, list)) else value
        return f"{flag} {shown}"

    out = []
    for name, values in spec.presets.items():
        values = dict(values)
        pairs = [pair("", k, v) for k, v in (values.pop("train", None) or {}).items()]
        pairs += [pair(spec.section, k, v) for k, v in values.items()]
        out.append(f"{name} ({', '.join(pairs) or 'the defaults'})")
    out.append(f"{registry.NO_PRESET} (the defaults, also on an env with a default preset)")
    text = "; ".join(out)
    if spec.env_presets:
        text += ". Default on " + ", ".join(f"{env}: {name}"
                                            for env, name in spec.env_presets.items())
    return text.replace("%", "%%")  # argparse %-formats help strings


def _split_flags(ns: dict, section: str) -> tuple[dict, dict]:
    """Parsed flags -> (training-loop overrides, algorithm-section overrides)."""
    train_names = {f.name for f in C.fields_of(C.TrainConfig)}
    train = {k: v for k, v in ns.items() if k in train_names}
    agent = {k.split(".", 1)[1]: v for k, v in ns.items() if k.startswith(section + ".")}
    return train, agent


def cmd_train(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: offpolicy train ALGO --env ENV_ID [--steps N] [--seed S] [--run-dir DIR] "
              "[--config FILE.yaml] [--preset NAME] [--resume] [--<section>.<field> VALUE ...]\n"
              f"algorithms: {', '.join(registry.ALGORITHMS)}\n"
              "see `offpolicy train ALGO --help` for every flag")
        return 0
    algo = argv[0]
    registry.get(algo)  # unknown algorithm: one-line error
    ns = vars(_train_parser(algo).parse_args(argv[1:]))
    section = registry.get(algo).section
    train_over, agent_over = _split_flags(ns, section)
    file_dict = registry.load_yaml(ns["config"]) if "config" in ns else None
    preset = ns.get("preset") or (file_dict or {}).get("preset")
    resume = ns["resume"]
    # a resumed run keeps its saved preset: no env default is added to what is compared
    run = registry.resolve(algo, preset=preset, file_dict=file_dict,
                           train_overrides=train_over, agent_overrides=agent_over,
                           env_default=not resume)
    tc = run.train
    if not preset and run.preset and run.preset == registry.env_preset(algo, tc.env):
        print(f"offpolicy: {algo} on {tc.env} uses --preset {run.preset} by default "
              f"(--preset {registry.NO_PRESET} for the defaults)", file=sys.stderr)
    run_dir = ns.get("run_dir") or Path("runs") / f"{algo}-{tc.env.replace('/', '_')}-s{tc.seed}"
    if resume and Path(run_dir).is_dir() and not (Path(run_dir) / "config.yaml").exists() \
            and not any(Path(run_dir).iterdir()):
        # killed before it wrote anything: there is nothing to continue
        print(f"offpolicy: {run_dir} is empty (the run stopped before its first checkpoint); "
              "starting it from step 0", file=sys.stderr)
        resume = False
        run = registry.resolve(algo, preset=preset, file_dict=file_dict,
                               train_overrides=train_over, agent_overrides=agent_over)
    from offpolicy.training.run import Run
    from offpolicy.training.rundir import resumed_config

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


def cmd_bench(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: offpolicy bench ALGO [--env ENV_ID] [--bench-steps N] [--bench-warmup W] "
              "[--rounds R] [--json] [--<section>.<field> VALUE ...]\n"
              "env steps/s with one update per step, update-only rate, XLA FLOPs per update and "
              "FLOP efficiency against a 1024x1024 NumPy matmul (default env HalfCheetah-v5)")
        return 0
    algo = argv[0]
    registry.get(algo)
    p = _train_parser(algo)
    p.prog = f"offpolicy bench {algo}"
    p.add_argument("--bench-steps", type=int, default=3000, help="timed env steps")
    p.add_argument("--bench-warmup", type=int, default=1000, help="steps before timing")
    p.add_argument("--rounds", type=int, default=3, help="alternating loop/update segments")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    ns = vars(p.parse_args(argv[1:]))
    for k in ("bench_steps", "bench_warmup", "rounds"):
        if ns[k] < 1:
            raise OffpolicyError(f"--{k.replace('_', '-')} must be >= 1, got {ns[k]}")
    section = registry.get(algo).section
    train_over, agent_over = _split_flags(ns, section)
    train_over.setdefault("env", "HalfCheetah-v5")
    run = registry.resolve(algo, preset=ns.get("preset"), train_overrides=train_over,
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
    p = _Parser(prog="offpolicy eval", description="evaluate a run's checkpoint")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--checkpoint", choices=("latest", "best"), default="latest")
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

    agent = load(a.run_dir, a.checkpoint)
    t = agent.run
    returns = t.evaluate(a.episodes)
    print(f"{t.run.algo} {t.run.train.env} step {t.step} ({a.checkpoint}): return "
          f"{returns.mean():.2f} +- {returns.std():.2f} (std over {a.episodes} episodes)")
    if a.per_actor:
        n = t.contract.num_actors
        if not n:
            raise OffpolicyError(f"--per-actor needs an actor ensemble; {t.run.algo} has none")
        print("| actor | return mean | return std |\n|---:|---:|---:|")
        for i in range(n):
            r = t.evaluate(a.episodes, policy=t.contract.single_actor_policy(i))
            print(f"| {i} | {r.mean():.2f} | {r.std():.2f} |")
    if a.proposal:
        from offpolicy.plotting import plot_proposal
        from offpolicy.training.evaluation import trace_episode

        if t.contract.inspect is None:
            raise OffpolicyError(f"--proposal needs an AQL run; {t.run.algo} has no proposal")
        trace = trace_episode(t, t.contract.inspect)
        out = plot_proposal(trace, t.contract.sub_actions, a.out or a.run_dir / "proposal.png",
                            f"{t.run.algo} {t.run.train.env} step {t.step}",
                            std=t.agent.config.proposal_std)
        print(f"wrote {out} ({len(trace['reward'])} steps, return "
              f"{float(sum(trace['reward'])):.2f})")
    return 0


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
    from offpolicy.plotting import group_by_env, has_metric, plot_envs

    dirs = _run_dirs(a.runs)
    if a.metric:
        missing = [d for d in dirs if not has_metric(d, a.metric)]
        for d in missing:
            print(f"offpolicy: note: {d} has no train.csv column '{a.metric}'; left out",
                  file=sys.stderr)
        dirs = [d for d in dirs if d not in missing]
        if not dirs:
            raise OffpolicyError(f"no run has a train.csv column '{a.metric}'")
    existed = a.out.exists()
    try:
        a.out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OffpolicyError(f"cannot write {a.out}: {e}") from e
    out = plot_envs(group_by_env(dirs), a.out, a.title, a.metric, a.log)
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

    by_env = group_by_env(_run_dirs(a.runs))
    print("\n\n".join(f"{env}\n\n{format_table(table_rows(groups))}"
                      for env, groups in by_env.items()))
    return 0


def cmd_list(argv: list[str]) -> int:
    _Parser(prog="offpolicy list", description="algorithms, action kinds, presets").parse_args(
        argv)
    def presets(a) -> str:  # an env's default preset as "small on offpolicy/Platform-v0"
        env_defaults = "".join(f" ({name} on {env})" for env, name in a.env_presets.items())
        return ",".join(a.presets) + env_defaults

    rows = [(a.name, a.section, ",".join(a.action_kinds), presets(a), ",".join(a.replays),
             a.description) for a in registry.ALGORITHMS.values()]
    header = ("algorithm", "section", "action kinds", "presets", "--replay", "description")
    widths = [max(len(r[i]) for r in [header, *rows]) + 2 for i in range(5)]
    for r in [header, *rows]:
        print("".join(f"{c:<{w}}" for c, w in zip(r, widths)) + r[5])
    return 0


COMMANDS = {"train": cmd_train, "eval": cmd_eval, "plot": cmd_plot, "table": cmd_table,
            "list": cmd_list, "bench": cmd_bench}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: offpolicy {{{','.join(COMMANDS)}}} ...\n"
              "  train ALGO --env ENV_ID   train an agent (offpolicy train ALGO --help)\n"
              "  eval RUN_DIR              evaluate a checkpoint\n"
              "  plot RUN_DIR...           learning curves\n"
              "  table RUN_DIR...          best/final returns table\n"
              "  list                      algorithms, action kinds, presets\n"
              "  bench ALGO                throughput, update-only rate, FLOP efficiency\n"
              "  --version")
        return 0
    if argv[0] == "--version":
        print(f"offpolicy {__version__}")
        return 0
    cmd = COMMANDS.get(argv[0])
    try:
        if cmd is None:
            hint = did_you_mean(argv[0], COMMANDS, n=1)
            raise OffpolicyError(f"unknown command '{argv[0]}'{hint} "
                                 f"(valid: {', '.join(COMMANDS)}, --version)")
        return cmd(argv[1:])
    except OffpolicyError as e:
        if os.environ.get("OFFPOLICY_TRACEBACK", "") not in ("", "0"):
            traceback.print_exception(e)  # the whole chain, the env's own frames included
        print(f"offpolicy: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("offpolicy: interrupted", file=sys.stderr)
        return 130
