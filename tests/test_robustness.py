"""Regression tests for failure paths: same-step checkpoints, state after an exception,
one-line errors for malformed configs and run directories."""

import json

import numpy as np
import pytest
from _helpers import assert_one_line_error, run_cli

from offpolicy import registry
from offpolicy.errors import NonFiniteError
from offpolicy.training import checkpoint
from offpolicy.training.run import Run


def test_second_save_at_the_same_step_never_removes_the_pointed_checkpoint(tmp_path):
    state = {"w": np.arange(3.0)}
    first = checkpoint.save(tmp_path, "latest", 40, state, {})
    (tmp_path / ".tmp-step-000000040-dead").mkdir()  # a save killed half-way
    second = checkpoint.save(tmp_path, "latest", 40, {"w": np.arange(3.0) + 1}, {})
    assert first != second and not first.exists() and second.exists()
    assert not list(tmp_path.glob(".tmp-*"))
    restored, meta = checkpoint.load(checkpoint.locate(tmp_path, "latest"), state)
    np.testing.assert_array_equal(restored["w"], [1.0, 2.0, 3.0])
    assert meta["step"] == 40


def test_state_stays_usable_after_a_failure_mid_run(tmp_path):
    run = registry.resolve("ddpg", train_overrides={
        "env": "toy_envs:NaNObs-v0", "steps": 100, "batch_size": 4, "eval_every": 100,
        "quiet": True}, agent_overrides={"hidden": (8, 8)})
    t = Run(run, None)
    with pytest.raises(NonFiniteError):
        t.train()
    from offpolicy.api import Agent

    agent = Agent(t)
    assert np.all(np.isfinite(agent.act(np.zeros(t.obs_shape, np.float32))))
    assert t.step > 0 and t.step == len(t.replay)


@pytest.mark.parametrize("content, needle", [
    ("algo: ddpg\ntrain: [1, 2]\n", "mapping"),
    ("algo: ddpg\ntrain: {1: 2}\n", "mapping"),
    ("algo: ddpg\npreset: [a]\n", "preset"),
    (b"\xff\xfe\x00garbage", "cannot read"),
])
def test_malformed_config_files_are_one_line_errors(tmp_path, content, needle):
    path = tmp_path / "c.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    proc = run_cli("train", "ddpg", "--config", "c.yaml", "--steps", "10", cwd=tmp_path)
    assert_one_line_error(proc, needle)


def test_config_directory_run_dir_file_and_batch_larger_than_buffer(tmp_path):
    (tmp_path / "d").mkdir()
    assert_one_line_error(run_cli("train", "ddpg", "--config", "d", cwd=tmp_path), "not a file")
    (tmp_path / "f").write_text("x")
    assert_one_line_error(run_cli("train", "ddpg", "--run-dir", "f", "--steps", "10",
                                  cwd=tmp_path), "run directory")
    assert_one_line_error(run_cli("train", "ddpg", "--buffer-size", "10", "--batch-size", "64",
                                  cwd=tmp_path), "buffer-size")


def test_resume_refuses_a_changed_value_from_a_config_file(tmp_path):
    proc = run_cli("train", "ddpg", "--env", "Pendulum-v1", "--steps", "100", "--eval-every",
                   "100", "--eval-episodes", "1", "--ddpg.hidden", "8", "--quiet",
                   "--run-dir", "R", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "c.yaml").write_text(json.dumps({"algo": "ddpg", "ddpg": {"tau": 0.5}}))
    proc = run_cli("train", "ddpg", "--run-dir", "R", "--resume", "--config", "c.yaml",
                   cwd=tmp_path)
    assert_one_line_error(proc, "ddpg.tau")
