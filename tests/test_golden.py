"""Behaviour preserved (issue #37, acceptance 1): every golden run reproduces the eval.csv and
train.csv recorded before the runtime was restructured (tests/golden_runs.py), and a run
directory checkpointed before it still resumes."""

from __future__ import annotations

import json
import shutil

import pytest
from _helpers import read_csv, run_cli
from golden_runs import GOLDEN, NAMES, cli_env_for_golden, fingerprint, produce, read_rows

RECORDED = json.loads((GOLDEN / "fingerprint.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_golden_run_reproduces(tmp_path, name):
    run_dir = produce(name, tmp_path, cli_env_for_golden())
    for f in ("eval.csv", "train.csv"):
        got, want = read_rows(run_dir / f), read_rows(GOLDEN / name / f)
        assert [list(r) for r in got[:1]] == [list(r) for r in want[:1]], f  # the columns
        assert [r["step"] for r in got] == [r["step"] for r in want], f
        if fingerprint() != RECORDED:
            differs = sorted(k for k in RECORDED if fingerprint().get(k) != RECORDED[k])
            pytest.skip(f"golden values were recorded with other {', '.join(differs)}: XLA:CPU "
                        "rounds differently there; structure checked only (re-record with "
                        "python tests/golden_runs.py on this machine to compare values)")
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"{name}/{f} row {i + 2} differs:\n got  {g}\n want {w}"


def test_a_run_checkpointed_before_the_restructuring_resumes(tmp_path):
    """tests/golden/run-before-37: a DDPG run written by the code of the golden runs, its
    latest checkpoint at step 400 (replay included)."""
    shutil.copytree(GOLDEN / "run-before-37", tmp_path / "R")
    p = run_cli("train", "ddpg", "--run-dir", "R", "--resume", "--steps", "600", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert [int(r["step"]) for r in read_csv(tmp_path / "R" / "eval.csv")] == [200, 400, 600]
    ev = run_cli("eval", "R", "--episodes", "2", cwd=tmp_path)
    assert ev.returncode == 0 and "step 600" in ev.stdout, ev.stderr
