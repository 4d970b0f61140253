"""The ``offpolicy train`` flags: generated from the config dataclasses, parsed without
abbreviations, every error one line (:class:`~offpolicy.errors.OffpolicyError`).

Used by the ``offpolicy`` command and by experiment suites, which check every entry of a suite
as the train command it will run before any run starts.
"""

from __future__ import annotations

import argparse
import re
import sys
import typing
from pathlib import Path

from offpolicy import config as C
from offpolicy import registry
from offpolicy.errors import OffpolicyError, did_you_mean

# argparse reads "-1e-3" as a flag (its negative-number test knows no exponent): such a value
# after an option that takes one is joined to it, "--vracer.lr=-1e-3", which argparse reads
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


class Parser(argparse.ArgumentParser):
    """argparse that raises OffpolicyError (one line) instead of printing usage and exiting,
    and takes no abbreviated flags (``--step`` is not ``--steps``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        joined: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            action = self._option_string_actions.get(a)
            # one value only: joining the first of a list (--ddpg.hidden -5 3) leaves the rest
            # over as an unknown flag; argparse reads "-5" in a list as a value anyway
            if (action is not None and action.nargs in (None, "?") and i + 1 < len(args)
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
            name = bad.split("=")[0]
            hint = did_you_mean(name, known)
            # the flags of the section the misspelt one names (--ddpg.*), or all of them
            section = name[2:].split(".", 1)[0] + "." if "." in name else None
            near = [o for o in known if section and o.startswith(("--" + section,
                                                                   "--no-" + section))]
            where = (f"{section[:-1]} flags: {', '.join(near)}" if near
                     else f"valid: {', '.join(known)}")
            raise OffpolicyError(f"{self.prog}: unknown flag {bad}{hint} ({where}; every flag: "
                                 f"{self.prog} --help-all)")
        raise OffpolicyError(f"{self.prog}: {message}")


def _flag(prefix: str, name: str) -> str:
    return "--" + (prefix + "." if prefix else "") + name.replace("_", "-")


# the training flags `offpolicy train ALGO --help` shows; --help-all shows every flag ALGO takes
COMMON_TRAIN = ("env", "steps", "seed", "eval_every", "eval_episodes", "batch_size",
                "buffer_size", "replay", "warmup_steps", "updates_per_step", "num_envs", "quiet")
# flags that only mean something with one of these --replay choices: an algorithm without any
# of them does not take the flag (it would be recorded and never used)
REPLAY_FLAGS = {"refer_": ("refer", "refer1", "refer2"), "replay_diagnostics": ("refer",),
                "per_": ("per",)}


def applies(spec, name: str) -> bool:
    """Whether algorithm ``spec`` takes the training flag of field ``name``."""
    for prefix, replays in REPLAY_FLAGS.items():
        if name.startswith(prefix):
            return any(r in spec.replays for r in replays)
    return True


def _add_fields(parser: argparse.ArgumentParser, cls: type, prefix: str, defaults,
                shown=None, spec=None, title: str | None = None) -> None:
    """One flag per field of ``cls``; ``shown(name)`` False: parsed but left out of --help.
    With ``spec``, the training fields the algorithm does not take get no flag."""
    group = parser.add_argument_group(title or f"{prefix or 'training'} options")
    for f in C.fields_of(cls):
        if spec is not None and not applies(spec, f.name):
            continue
        tp = C.field_type(cls, f)
        dest = (prefix + "." if prefix else "") + f.name
        default = getattr(defaults, f.name)
        help_ = f"{f.metadata.get('help', '')} (default: {default})"
        if shown is not None and not shown(f.name):
            help_ = argparse.SUPPRESS
        kw = dict(dest=dest, default=argparse.SUPPRESS, help=help_)
        if tp is bool:
            group.add_argument(_flag(prefix, f.name), action=argparse.BooleanOptionalAction, **kw)
        elif typing.get_origin(tp) is tuple:
            group.add_argument(_flag(prefix, f.name), type=int, nargs="+", metavar="N", **kw)
        else:
            choices = f.metadata.get("choices")
            if spec is not None and f.name == "replay":
                choices = spec.replays  # the replays the agent implements
            group.add_argument(_flag(prefix, f.name), type=tp, choices=choices,
                               metavar=None if choices else f.name.upper(), **kw)


class _HelpAll(argparse.Action):
    """--help-all: every flag the algorithm takes, then exit."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help=None):
        super().__init__(option_strings, dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        train_parser(parser.algo, full=True).print_help()
        parser.exit()


def train_parser(algo: str, full: bool = True) -> Parser:
    """The flags of ``offpolicy train ALGO``. ``full`` False: its --help shows the common
    training flags and ALGO's own section (every flag still parses; --help-all lists them)."""
    spec = registry.get(algo)
    usage = (f"offpolicy train {algo} [--env ENV_ID] [--steps N] [--seed S] [--run-dir DIR] "
             "[--preset NAME] [--config FILE.yaml] [--resume] [--FLAG VALUE ...]")
    epilog = None if full else (
        f"Shown: the common training flags and {algo}'s own (--{spec.section}.*). Every flag "
        f"{algo} takes (replay, scale-out, normalisation, logging, ...): offpolicy train "
        f"{algo} --help-all")
    p = Parser(prog=f"offpolicy train {algo}", description=spec.description, usage=usage,
               epilog=epilog, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.algo = algo
    p.add_argument("--help-all", action=_HelpAll,
                   help="every flag this algorithm takes, then exit")
    p.add_argument("--run-dir", type=Path, default=argparse.SUPPRESS,
                   help="run directory (default: runs/<algo>-<env>-s<seed>)")
    p.add_argument("--config", type=Path, default=argparse.SUPPRESS,
                   help="YAML file with train: and section keys (as a run's config.yaml)")
    p.add_argument("--preset", choices=[*spec.presets, registry.NO_PRESET],
                   default=argparse.SUPPRESS,
                   help="named hyper-parameter preset: " + describe_presets(spec))
    p.add_argument("--resume", action="store_true", default=False,
                   help="continue the run in --run-dir from its latest checkpoint")
    # the defaults shown are this algorithm's resolved ones (its own batch size, replay,
    # memory...), not the dataclasses'
    defaults = registry.resolve(algo)
    _add_fields(p, C.TrainConfig, "", defaults.train,
                shown=None if full else (lambda name: name in COMMON_TRAIN), spec=spec,
                title=None if full else "common training options")
    _add_fields(p, spec.config_cls, spec.section, defaults.agent,
                title=f"{algo} options (--{spec.section}.*)")
    return p


def describe_presets(spec) -> str:
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


def split_flags(ns: dict, section: str) -> tuple[dict, dict]:
    """Parsed flags -> (training-loop overrides, algorithm-section overrides)."""
    train_names = {f.name for f in C.fields_of(C.TrainConfig)}
    train = {k: v for k, v in ns.items() if k in train_names}
    agent = {k.split(".", 1)[1]: v for k, v in ns.items() if k.startswith(section + ".")}
    return train, agent


def resolve_train(algo: str, flags: list[str]) -> registry.RunConfig:
    """The run an ``offpolicy train ALGO FLAGS...`` command would start (no ``--config`` or
    ``--resume`` handling): raises a one-line OffpolicyError for an unknown algorithm, flag,
    preset or value."""
    spec = registry.get(algo)
    ns = vars(train_parser(algo).parse_args(flags))
    train_over, agent_over = split_flags(ns, spec.section)
    file_dict = registry.load_yaml(ns["config"]) if "config" in ns else None
    return registry.resolve(algo, preset=ns.get("preset") or (file_dict or {}).get("preset"),
                            file_dict=file_dict, train_overrides=train_over,
                            agent_overrides=agent_over)
