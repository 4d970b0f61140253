"""The examples of the README and the docs run as written (issue #32, acceptance 3), with small
budgets substituted for the long ones (tests/doc_snippets.py).

Every block marked ``<!-- runnable -->`` in docs/ runs, and the README's Quick start Python
block; each page's blocks in order in one empty folder, all of them in ONE subprocess (one
interpreter and one JAX start). Every algorithm page has at least one such example, so no
page's example can rot unnoticed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import cli_env
from doc_snippets import SMALL_STEPS, runnable_blocks, shell_commands, small

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _readme_api_block() -> str:
    text = (ROOT / "README.md").read_text().split("## Quick start", 1)[1]
    return re.findall(r"```python\n(.*?)```", text, re.S)[0]


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


EXAMPLES: dict[str, list[tuple[str, str, str]]] = {
    "README.md": [("python", _readme_api_block(), "")]}
EXAMPLES |= {str(p.relative_to(ROOT)): blocks for p in _pages() if (blocks := runnable_blocks(p))}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("examples")
    (tmp / "examples.json").write_text(json.dumps(EXAMPLES))
    (tmp / "run").mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "doc_snippets.py"),
                           str(tmp / "examples.json"), str(tmp / "results.json")],
                          cwd=tmp / "run", env=cli_env(), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp / "results.json").read_text())


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_example_runs(results, name):
    r = results[name]
    assert r["ok"], f"{name}: an example failed\n{r['error']}"


def test_every_algorithm_page_has_a_runnable_example():
    for page in sorted((DOCS / "algorithms").glob("*.md")):
        blocks = runnable_blocks(page)
        assert any(not file and (lang == "python" or "offpolicy train" in code)
                   for lang, code, file in blocks), \
            f"{page.name} has no <!-- runnable --> example (tests/doc_snippets.py)"


def test_budgets_are_shortened():
    for name, blocks in EXAMPLES.items():
        for lang, code, file in blocks:
            if lang == "python" and not file:
                calls = re.findall(r"\.learn\(([^,)]*)", small(code))  # the steps
                assert all(c == str(SMALL_STEPS) for c in calls), (name, calls)
    argv = shell_commands("offpolicy train ace --env HalfCheetah-v5 --steps 100000 \\\n"
                          "    --eval-episodes 20  # a comment\n"
                          "python -m offpolicy eval runs/x --episodes 20\n")
    assert argv[0][:4] == ["train", "ace", "--env", "HalfCheetah-v5"]
    assert argv[0][argv[0].index("--steps") + 1] == str(SMALL_STEPS)
    assert argv[0].count("--steps") == 1 and argv[0].count("--eval-episodes") == 1
    assert argv[1] == ["eval", "runs/x", "--episodes", "1"]
    with pytest.raises(ValueError, match="offpolicy command"):
        shell_commands("make train\n")
