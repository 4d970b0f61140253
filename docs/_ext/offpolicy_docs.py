"""Pages generated at build time, so that they can never drift from the code and the results.

- ``reference/flags.md``: every command's usage, every training flag and every algorithm's
  flags (type, default, bounds or choices, help) and presets, from the registry and the
  config dataclasses (:func:`cli_reference`).
- ``results/``: the committed reports of ``benchmarks/results/`` (Markdown, plots, CSVs) and an
  index of them, each with the command that reproduced it, and the decisive grids'
  pre-registrations (``benchmarks/suites/*.preregistration.md``).
- Each algorithm page's "What to expect" table (the line ``<!-- expected-results -->``): the
  final return of the runs ``docs/expected.yaml`` names, from the committed report CSVs
  (:func:`expected_table`).
- architecture.md's table of modules, between ``<!-- modules -->`` and ``<!-- /modules -->``:
  every module of the package with the first sentence of its docstring
  (:func:`module_table`). The page keeps the table too, so that it reads on GitHub:
  ``python docs/_ext/offpolicy_docs.py modules`` rewrites it there, and tests/test_docs.py
  fails when it is not the code's.

Links from the hand-written pages to ``benchmarks/results/...`` and to
``benchmarks/suites/*.preregistration.md`` (right on GitHub) are pointed at the copies while
Sphinx reads the pages.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
RESULT_FILES = ("*.md", "*.png", "*.csv")
# the decisive grids' pre-registrations, beside their suite files (benchmarks/suites/)
PREREGISTRATIONS = ROOT / "benchmarks" / "suites"
PREREGISTRATION_FILES = "*.preregistration.md"


def _type_name(tp) -> str:
    if typing.get_origin(tp) is tuple:
        return "int ..."
    return getattr(tp, "__name__", str(tp))


def _bounds(meta: dict) -> str:
    parts = []
    for key, sign in (("gt", ">"), ("ge", ">="), ("le", "<="), ("lt", "<")):
        if meta.get(key) is not None:
            parts.append(f"{sign} {meta[key]:g}")
    if meta.get("choices"):
        parts.append(" \\| ".join(f"`{c}`" for c in meta["choices"]))
    return ", ".join(parts)


def _value(v) -> str:
    if isinstance(v, (tuple, list)):
        return " ".join(map(str, v))
    return str(v)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def flag_rows(cls, prefix: str, defaults) -> list[str]:
    """One Markdown table row per field of ``cls``: flag, type, default, bounds, help."""
    from offpolicy import config as C

    rows = []
    for f in C.fields_of(cls):
        flag = "--" + (prefix + "." if prefix else "") + f.name.replace("_", "-")
        tp = C.field_type(cls, f)
        if tp is bool:
            flag += f" / --no-{flag[2:]}"
        rows.append(f"| `{flag}` | {_type_name(tp)} | `{_value(getattr(defaults, f.name))}` | "
                    f"{_bounds(f.metadata)} | {_cell(f.metadata.get('help', ''))} |")
    return rows


def _usage(argv: list[str]) -> str:
    from offpolicy import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli.main(argv)
    return out.getvalue().rstrip()


def cli_reference() -> str:
    """The whole reference page, Markdown."""
    from offpolicy import cli, registry
    from offpolicy import config as C
    from offpolicy.train_args import describe_presets

    head = ["| flag | type | default | bounds / choices | help |", "|---|---|---|---|---|"]
    out = ["# Command-line reference", "",
           "Generated from the registry and the config dataclasses when the docs are built: "
           "every command, every flag with its type, default, bounds and help, every preset. "
           "The guide is [the command line](../cli.md).", "", "## Commands", ""]
    for name in cli.COMMANDS:
        out += [f"### `offpolicy {name}`", "", "```text", _usage([name, "--help"]), "```", ""]
    kinds = ("continuous", "discrete", "multi_discrete", "hybrid")
    replays = ("er", "per", "refer", "refer1", "refer2")
    out += ["## Can I use", "",
            "What each algorithm accepts, from the registry (an env whose actions an "
            "algorithm does not take is refused before the run starts; `--discretize K` turns "
            "continuous actions into discrete ones).", "",
            "| algorithm | " + " | ".join(kinds) + " | " + " | ".join(
                f"`--replay {r}`" for r in replays) + " | recurrent core | presets |",
            "|---|" + "---|" * (len(kinds) + len(replays) + 2)]
    for a in registry.ALGORITHMS.values():
        cells = ["yes" if k in a.action_kinds else "" for k in kinds]
        cells += ["yes" if r in a.replays else "" for r in replays]
        cells += [f"`--{a.section}.core`" if issubclass(a.config_cls, C.CoreFields) else ""]
        out.append(f"| `{a.name}` | " + " | ".join(cells) + f" | {', '.join(a.presets)} |")
    out += ["", "## Training flags", "",
            "Shared by every algorithm; the defaults shown are the dataclass's (each algorithm "
            "may set its own: see its section).", "", *head,
            *flag_rows(C.TrainConfig, "", C.TrainConfig()), ""]
    out += ["## Algorithms", ""]
    for a in registry.ALGORITHMS.values():
        resolved = registry.resolve(a.name)
        train_diff = [f"`--{f.name.replace('_', '-')} {_value(getattr(resolved.train, f.name))}`"
                      for f in C.fields_of(C.TrainConfig)
                      if getattr(resolved.train, f.name) != getattr(C.TrainConfig(), f.name)
                      and f.name != "env"]
        out += [f"### `{a.name}`", "", a.description, "",
                f"- actions: {', '.join(a.action_kinds)}",
                f"- `--replay`: {', '.join(a.replays)}"
                + ("" if "refer" in a.replays else " (so no `--refer-*` or `--replay-diagnostics`)")
                + ("" if "per" in a.replays else " (no `--per-*`)"),
                f"- `offpolicy train {a.name} --help`: the common training flags and the table "
                f"below; `offpolicy train {a.name} --help-all`: every flag it takes",
                f"- presets: {_cell(describe_presets(a).replace('%%', '%'))}",
                "- training defaults of its own: " + (", ".join(train_diff) or "none"), "",
                *head, *flag_rows(a.config_cls, a.section, resolved.agent), ""]
    return "\n".join(out) + "\n"


def _title(path: Path) -> str:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def _command(path: Path) -> str:
    m = re.search(r"^Command: `([^`]+)`", path.read_text(errors="replace"), re.M)
    return m.group(1) if m else ""


def copy_results(srcdir: Path) -> None:
    """``benchmarks/results`` into ``results/`` with an index page."""
    dest = srcdir / "results"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir()
    for pattern in RESULT_FILES:
        for p in sorted(RESULTS.glob(pattern)):
            shutil.copy2(p, dest / p.name)
    plans = sorted(PREREGISTRATIONS.glob(PREREGISTRATION_FILES))
    for p in plans:
        shutil.copy2(p, dest / p.name)
    reports = sorted(p for p in dest.glob("*.md")
                     if p.name != "index.md" and not p.name.endswith(".preregistration.md"))
    lines = ["# Results", "",
             "Every report committed under `benchmarks/results/`, with the command that "
             "reproduces it (run from a clone; `benchmarks/learning.py` and the peers' "
             "benchmarks need `make bench-venv`).", "",
             "| report | command |", "|---|---|"]
    for p in reports:
        cmd = _command(p)
        lines.append(f"| [{_cell(_title(p))}]({p.name}) | {f'`{_cell(cmd)}`' if cmd else ''} |")
    lines += ["", "Each decisive grid's pre-registration, written before its first run "
              "(`benchmarks/suites/`; its report opens with it):", "",
              *[f"* [{p.name}]({p.name})" for p in plans]]
    lines += ["", "```{toctree}", ":hidden:", "", *[p.stem for p in reports],
              *[p.name[:-len(".md")] for p in plans], "```", ""]
    (dest / "index.md").write_text("\n".join(lines))


def generate(app) -> None:
    srcdir = Path(app.srcdir)
    (srcdir / "reference").mkdir(exist_ok=True)
    (srcdir / "reference" / "flags.md").write_text(cli_reference())
    if app.config.offpolicy_results:
        copy_results(srcdir)


# a link to a report, or to a pre-registration beside its suite file (not to the suite file)
_RESULT_LINK = re.compile(r"\]\((?:\.\./)+benchmarks/"
                          r"(?:results/|suites/(?=[^)]*\.preregistration\.md\b))")
EXPECTED = ROOT / "docs" / "expected.yaml"
EXPECTED_MARK = "<!-- expected-results -->"


def expected_rows(algo: str) -> list[dict]:
    """``docs/expected.yaml``'s rows for an algorithm page, each with ``steps`` (the
    command's ``--steps``) and ``finals``: the evaluation return at that step of each seed
    whose run reached it (a run in progress is left out)."""
    import csv
    import shlex

    import yaml

    out = []
    for row in yaml.safe_load(EXPECTED.read_text()).get(algo, []):
        argv = shlex.split(row["command"])
        steps = int(argv[argv.index("--steps") + 1])
        with open(RESULTS / f"{row['report']}.csv", newline="") as f:
            evals = [r for r in csv.DictReader(f) if r["entry"] == row["entry"]
                     and r.get("env", row["env"]) == row["env"]]
        at: dict[str, float] = {}
        for r in evals:
            if int(r["step"]) == steps:
                at[r["seed"]] = float(r["return_mean"])
        out.append({**row, "steps": steps, "finals": [at[s] for s in sorted(at, key=int)]})
    return out


def expected_table(algo: str, link: bool = True) -> str:
    """The "What to expect" table of an algorithm page (Markdown)."""
    import numpy as np

    lines = ["| env | steps | final return (mean ± s.e.) | seeds | command | report |",
             "|---|---:|---:|---:|---|---|"]
    for row in expected_rows(algo):
        x = np.asarray(row["finals"], float)
        value = (f"{x.mean():.1f} ± {x.std(ddof=1) / np.sqrt(len(x)):.1f}" if len(x) > 1
                 else f"{x[0]:.1f}")
        report = (f"[{row['report']}](../../benchmarks/results/{row['report']}.md)" if link
                  else f"`{row['report']}`")
        lines.append(f"| {row['env']} | {row['steps']} | {value} | {len(x)} | "
                     f"`{_cell(row['command'])}` | {report} |")
    return "\n".join(lines)


def rewrite_links(app, docname: str, source: list[str]) -> None:
    """An algorithm page's expected-results line -> its table; ``](../../benchmarks/results/
    x.md)`` -> the copy under ``results/``."""
    if EXPECTED_MARK in source[0] and docname.startswith("algorithms/"):
        table = expected_table(docname.split("/", 1)[1], link=bool(app.config.offpolicy_results))
        source[0] = source[0].replace(EXPECTED_MARK, table)
    if docname == "architecture" and MODULES_BEGIN in source[0]:
        source[0] = with_module_table(source[0])
    depth = docname.count("/")
    source[0] = _RESULT_LINK.sub("](" + "../" * depth + "results/", source[0])


PACKAGE = ROOT / "offpolicy"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MODULES_BEGIN, MODULES_END = "<!-- modules -->", "<!-- /modules -->"


# words whose period ends no sentence ("et al. 2020", "App. A1", "Sec. 4", an initial)
_ABBREVIATIONS = {"al", "App", "Sec", "Secs", "Fig", "Eq", "Alg", "e.g", "i.e", "vs", "cf", "etc"}


def summary(path: Path) -> str:
    """The first sentence of a module's docstring, on one line, its reST roles and literals as
    Markdown code ("" without a docstring)."""
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    for m in re.finditer(r"(\S+)\.\s+(?=[A-Z`(\"])", text):
        word = m.group(1).lstrip("(\"'`")
        if word not in _ABBREVIATIONS and not re.fullmatch(r"[A-Z]", word):
            text = text[:m.end(1) + 1]
            break
    text = re.sub(r":\w+:`~([^`]+)`", lambda r: f"`{r.group(1).split('.')[-1]}`", text)
    return re.sub(r":\w+:`([^`]+)`", r"`\1`", text).replace("``", "`")


def module_table() -> str:
    """Every module of the package, a package's ``__init__.py`` as its folder, by path, with
    its summary (Markdown)."""
    rows = ["| module | what it is (its docstring) |", "|---|---|"]
    for path in sorted(PACKAGE.rglob("*.py"), key=lambda p: p.relative_to(PACKAGE).parts):
        rel = path.relative_to(PACKAGE).as_posix()
        name = rel.removesuffix("__init__.py") if rel.endswith("/__init__.py") else rel
        rows.append(f"| `{name}` | {_cell(summary(path))} |")
    return "\n".join(rows)


def with_module_table(text: str) -> str:
    """``text`` (architecture.md) with the table between its markers made anew."""
    head, rest = text.split(MODULES_BEGIN, 1)
    return f"{head}{MODULES_BEGIN}\n{module_table()}\n{MODULES_END}{rest.split(MODULES_END, 1)[1]}"


def setup(app):
    # -D offpolicy_results=0: a build without the results pages (the tests' small sites)
    app.add_config_value("offpolicy_results", True, "env", types=(bool, int))
    app.connect("builder-inited", generate)
    app.connect("source-read", rewrite_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["modules"]:
        sys.exit("usage: python docs/_ext/offpolicy_docs.py modules   (rewrites architecture.md's "
                 "table of modules from the docstrings)")
    ARCHITECTURE.write_text(with_module_table(ARCHITECTURE.read_text()))
