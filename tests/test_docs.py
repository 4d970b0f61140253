"""The documentation site (issue #32): every flag has help text, the generated CLI reference
covers every flag of every algorithm, and the strict build fails on a broken internal link or
a missing autodoc target (``make docs`` builds with -W)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from offpolicy import config as C
from offpolicy import registry
from offpolicy.train_args import train_parser

ROOT = Path(__file__).resolve().parents[1]
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
    for command in ("train", "eval", "plot", "table", "list", "bench", "suite"):
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
