"""The Python examples of the README and the docs run as written (issue #32, acceptance 3),
with small budgets substituted for the long ones, each in an empty folder."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import cli_env

ROOT = Path(__file__).resolve().parents[1]
# what the test shortens: training lengths and evaluation episodes
SMALL = [(re.compile(r"\.learn\((\d[\d_]*)\)"), ".learn(400)"),
         (re.compile(r"episodes=\d+"), "episodes=1")]


def python_blocks(path: Path, after: str | None = None) -> list[str]:
    text = path.read_text()
    if after is not None:
        text = text.split(after, 1)[1]
    return re.findall(r"```python\n(.*?)```", text, re.S)


def small(code: str) -> str:
    for pattern, replacement in SMALL:
        code = pattern.sub(replacement, code)
    return code


EXAMPLES = {
    "README": python_blocks(ROOT / "README.md", "## The Python API")[0],
    "getting-started": python_blocks(ROOT / "docs" / "getting-started.md")[0],
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_python_example_runs(tmp_path, name):
    code = small(EXAMPLES[name])
    assert "learn(400)" in code
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{name} example failed:\n{code}\n{proc.stderr[-3000:]}"
