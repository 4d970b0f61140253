"""The documentation site (issue #32): every flag has help text, the generated CLI reference
covers every flag of every algorithm, every train.csv column is named on its page (the loop's
in docs/cli.md, an algorithm's under "What is logged" on the algorithm's page), and the strict
build fails on a broken internal link or a missing autodoc target (``make docs`` builds with
-W)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from offpolicy import config as C
from offpolicy import registry
from offpolicy.train_args import train_parser
from offpolicy.training import distributed
from offpolicy.training.build import build
from offpolicy.training.logger import RunLogger

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))


def test_every_flag_has_help_text():
    for cls in [C.TrainConfig, *{a.config_cls for a in registry.ALGORITHMS.values()}]:
        for f in C.fields_of(cls):
            assert f.metadata.get("help", "").strip(), f"{cls.__name__}.{f.name} has no help"
    for algo in registry.ALGORITHMS:
        for action in train_parser(algo)._actions:
            assert action.help and action.help.strip(), (algo, action.option_strings)


def test_the_cli_reference_names_every_flag_of_every_algorithm():
    from offpolicy_docs import cli_reference

    text = cli_reference()
    for algo in registry.ALGORITHMS:
        assert f"### `{algo}`" in text
        for action in train_parser(algo)._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag not in ("--help", "--run-dir", "--config",
                                                          "--preset", "--resume"):
                    assert f"`{flag}" in text or f"--no-{flag[2:]}" in text or \
                        flag.replace("--no-", "--") in text, (algo, flag)
    for command in ("train", "eval", "plot", "table", "list", "bench", "suite", "export"):
        assert f"### `offpolicy {command}`" in text


def _build(tmp_path: Path, page: str) -> subprocess.CompletedProcess:
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    pytest.importorskip("furo")
    src = tmp_path / "docs"
    src.mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "conf.py", src / "conf.py")
    shutil.copytree(ROOT / "docs" / "_ext", src / "_ext")
    shutil.copytree(ROOT / "docs" / "_inventories", src / "_inventories")
    shutil.copytree(ROOT / "docs" / "_static", src / "_static")
    (src / "cli.md").write_text("# The command line\n")  # the generated reference links it
    (src / "index.md").write_text("# Test\n\n```{toctree}\nother\ncli\nreference/flags\n```\n")
    (src / "other.md").write_text(page)
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           "html", "-D", "offpolicy_results=0", str(src),
                           str(tmp_path / "html")], capture_output=True,
                          text=True, timeout=600)


def test_the_strict_build_fails_on_a_broken_link_or_autodoc_target(tmp_path):
    ok = _build(tmp_path / "ok", "# Other\n\n[back](index.md), [flags](reference/flags.md)\n\n"
                "```{eval-rst}\n.. autofunction:: offpolicy.make\n```\n")
    assert ok.returncode == 0, ok.stderr
    broken = _build(tmp_path / "link", "# Other\n\n[gone](missing-page.md)\n")
    assert broken.returncode != 0 and "missing-page.md" in broken.stderr, broken.stderr
    anchor = _build(tmp_path / "anchor", "# Other\n\n[gone](index.md#no-such-heading)\n")
    assert anchor.returncode != 0 and "no-such-heading" in anchor.stderr, anchor.stderr
    autodoc = _build(tmp_path / "autodoc", "# Other\n\n```{eval-rst}\n"
                     ".. autofunction:: offpolicy.no_such_function\n```\n")
    assert autodoc.returncode != 0 and "no_such_function" in autodoc.stderr, autodoc.stderr


def test_pre_registrations_join_the_results_pages_and_links_reach_them(tmp_path):
    """The decisive grids' pre-registrations (benchmarks/suites/*.preregistration.md) are
    copied beside the reports, listed in the results index, and a hand-written page's link to
    one points at its copy (a link to a suite file stays a file link); every benchmarks/ link of
    docs/results.md names a committed file."""
    from offpolicy_docs import _RESULT_LINK, PREREGISTRATIONS, copy_results

    copy_results(tmp_path)
    plans = sorted(p.name for p in PREREGISTRATIONS.glob("*.preregistration.md"))
    assert {"refer-1m.preregistration.md", "acer-1m.preregistration.md",
            "aql-fig2-500k.preregistration.md", "ace-1m.preregistration.md"} <= set(plans)
    index = (tmp_path / "results" / "index.md").read_text()
    toctree = index.split("```{toctree}")[1]
    for name in plans:
        assert (tmp_path / "results" / name).read_text() == (PREREGISTRATIONS / name).read_text()
        assert f"* [{name}]({name})" in index and f"\n{name[:-len('.md')]}\n" in toctree
        assert f"[{name[:-len('.md')]}]" not in index  # not listed as a report
    assert _RESULT_LINK.sub("](results/", "[p](../benchmarks/suites/ace-1m.preregistration.md)"
                            " [y](../benchmarks/suites/ace-1m.yaml)") == (
        "[p](results/ace-1m.preregistration.md) [y](../benchmarks/suites/ace-1m.yaml)")
    targets = re.findall(r"\]\(\.\./(benchmarks/[^)#]+)", (DOCS / "results.md").read_text())
    assert len(targets) > 20
    for target in targets:
        assert (ROOT / target).is_file(), target


# ------------------------------------------------------------------ metric glossaries
# one env per action kind: an algorithm's metrics are read for each kind it takes
ENVS = {"continuous": "Pendulum-v1", "discrete": "CartPole-v1", "hybrid": "offpolicy/Platform-v0"}


def _named(path: Path, heading: str) -> set[str]:
    """Every `code` span of the section of ``path`` under ``heading`` (to the next one of its
    level or above)."""
    text = path.read_text()
    level = heading.split(" ")[0]
    assert f"\n{heading}\n" in text, f"{path.name} has no '{heading}' section"
    section = text.split(f"\n{heading}\n", 1)[1]
    section = re.split(rf"\n#{{1,{len(level)}}} ", section)[0]
    return set(re.findall(r"`([^`]+)`", section))


def _variants(algo: str) -> list[dict]:
    """Training overrides that cover what changes an algorithm's metrics: each action kind it
    takes, and ReF-ER (or its diagnostics under ER) where it takes ReF-ER."""
    spec = registry.get(algo)
    out = []
    for kind in spec.action_kinds:
        if kind not in ENVS:
            continue
        env = {"env": ENVS[kind]}
        if kind == "hybrid" and "continuous" not in spec.action_kinds:
            env["discretize"] = 5  # Platform's parameters, for an agent without continuous ones
        out.append(env)
        if "refer" in spec.replays:
            out += [env | {"replay": "refer"}, env | {"replay_diagnostics": True}]
    return out


@functools.cache
def _metrics(algo: str, train: tuple = ()) -> dict[str, tuple]:
    """The metrics one update of ``algo`` logs and their shapes, traced abstractly (no compile,
    no training) on small networks: names do not depend on sizes."""
    tiny = {f.name: (16,) * len(f.default) if isinstance(f.default, tuple) else 16
            for f in C.fields_of(registry.get(algo).config_cls)
            if f.name in ("hidden", "proposal_hidden", "encoder_size")}
    run = registry.resolve(algo, train_overrides={"buffer_size": 1000, "batch_size": 8,
                                                  "quiet": True, **dict(train)},
                           agent_overrides=tiny)
    return build(run, with_replay=False).learner.metric_shapes()


def _unnamed(metrics: dict[str, tuple], named: set[str]) -> list[str]:
    """Metrics missing from ``named``; a vector metric ``k`` is named as ``k_i`` (any suffix)."""
    return [k for k, shape in metrics.items()
            if not (k in named if not shape else any(n.startswith(k + "_") for n in named))]


@pytest.mark.parametrize("algo", list(registry.ALGORITHMS))
def test_every_logged_metric_is_named_on_the_algorithm_page(algo):
    page = DOCS / "algorithms" / f"{registry.get(algo).section}.md"
    assert page.exists(), f"{algo} has no page {page.relative_to(ROOT)}"
    named = _named(page, "## What is logged")
    for train in _variants(algo):
        missing = _unnamed(_metrics(algo, tuple(sorted(train.items()))), named)
        assert not missing, (f"{algo} {train} logs {missing}, which '## What is logged' in "
                             f"{page.relative_to(ROOT)} does not name")


def test_the_refer_page_names_what_refer_adds():
    named = _named(DOCS / "algorithms" / "refer.md", "## What is logged")
    for algo, spec in registry.ALGORITHMS.items():
        if "refer" in spec.replays:
            env = (("env", "Pendulum-v1"),)
            added = set(_metrics(algo, env + (("replay", "refer"),))) - set(_metrics(algo, env))
            missing = _unnamed({k: () for k in added}, named)
            assert not missing, f"{algo} --replay refer logs {missing}; refer.md does not name them"


def test_the_loop_columns_are_named_in_the_cli_guide():
    loop = RunLogger(None, [], 0, 0, True, "").train_columns + distributed.COLUMNS
    missing = set(loop) - _named(DOCS / "cli.md", "### train.csv columns")
    assert not missing, f"docs/cli.md '### train.csv columns' does not name {missing}"


def test_every_expected_results_row_is_a_report_run_with_its_command():
    """docs/expected.yaml: each command parses as the train command it shows, its report has
    runs at its --steps, and the flags the report says its entry and grid ran with are in it."""
    import shlex

    import yaml
    from offpolicy_docs import EXPECTED, EXPECTED_MARK, RESULTS, expected_rows

    from offpolicy.train_args import resolve_train

    pages = yaml.safe_load(EXPECTED.read_text())
    for algo in pages:
        assert EXPECTED_MARK in (DOCS / "algorithms" / f"{algo}.md").read_text(), algo
        for row in expected_rows(algo):
            argv = shlex.split(row["command"])
            assert argv[:2] == ["offpolicy", "train"], row
            resolve_train(argv[2], argv[3:])
            assert row["finals"], (algo, row["report"], row["entry"])
            report = (RESULTS / f"{row['report']}.md").read_text()
            m = re.search(rf"{re.escape(row['entry'])} = `offpolicy train (\S+)([^`]*)`", report)
            if m:  # the entry's own flags
                assert m.group(1) == argv[2], row
                for flag in shlex.split(m.group(2)):
                    assert flag in argv, (row, flag)
            grid = re.search(r"Every run gets `([^`]*)`", report)
            for flag in shlex.split(grid.group(1)) if grid else []:
                assert flag in argv, (row, flag)
    for page in (DOCS / "algorithms").glob("*.md"):
        assert page.stem in pages, f"{page.name} has no What to expect rows"


def test_architecture_lists_every_module_with_the_first_sentence_of_its_docstring():
    """docs/architecture.md's table of modules is the code's (issue #70): every module of the
    package has a docstring, and the table between the page's markers is the one the docs
    extension makes from them (`python docs/_ext/offpolicy_docs.py modules` rewrites it)."""
    from offpolicy_docs import ARCHITECTURE, PACKAGE, module_table, summary, with_module_table

    for path in sorted(PACKAGE.rglob("*.py")):
        assert summary(path), f"{path.relative_to(ROOT)} has no docstring"
    text = ARCHITECTURE.read_text()
    assert text == with_module_table(text), (
        "docs/architecture.md's table of modules differs from the docstrings: run "
        "`python docs/_ext/offpolicy_docs.py modules`")
    table = module_table()
    for name in ("`training/learner.py`", "`replay/`", "`__main__.py`", "`suites/spec.py`"):
        assert f"| {name} | " in table
    assert "| `agents/aql_proposal.py` | AQL's learned proposal (Van de Wiele et al. 2020, Sec. " \
           "4 and 5.1, App. A1): a distribution" in table  # "al." and "App." end no sentence
    assert "``" not in table and ":class:" not in table
