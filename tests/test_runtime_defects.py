"""Defects found by trying the library as a new user would (issue: runtime for every family).

Each test failed before its fix:
* SIGTERM exited 130 (Ctrl-C's code): now 128 + SIGTERM = 143;
* a run killed before its first checkpoint left a directory that neither ``--resume`` nor a
  fresh start accepted; the first checkpoint came only after ``checkpoint_every`` steps;
* ``offpolicy eval`` / ``offpolicy.load`` read and verified ``replay.npz``, so a damaged replay
  blocked evaluating intact parameters;
* ``Agent.evaluate(0)`` silently ran the default count, ``evaluate(-1)`` raised a raw
  ValueError, ``Agent.act(nan_obs)`` returned NaN.
"""

from __future__ import annotations

import signal

import numpy as np
import pytest
from _helpers import (
    TINY_OVERRIDES,
    assert_one_line_error,
    latest_step,
    read_csv,
    run_cli,
    signal_when,
    start_cli,
)

import offpolicy
from offpolicy.errors import OffpolicyError

TRAIN = ["train", "ddpg", "--env", "Pendulum-v1", "--eval-every", "1000", "--eval-episodes",
         "2", "--ddpg.hidden", "32", "32", "--batch-size", "16", "--quiet"]


def test_sigterm_exits_143_with_a_checkpoint(tmp_path):
    p = start_cli(*TRAIN, "--steps", "20000", "--checkpoint-every", "500", "--run-dir", "T",
                  cwd=tmp_path)
    _, err = signal_when(lambda: (latest_step(tmp_path / "T") or 0) >= 500, p, signal.SIGTERM)
    assert p.returncode == 143, err
    assert "Traceback" not in err and "interrupted at step" in err


def test_first_checkpoint_comes_early(tmp_path):
    """checkpoint_every is 10 000 by default: the first checkpoint comes at step 1000 all the
    same (killed once it is there; the next would be at 10 000)."""
    from offpolicy.config import TrainConfig
    from offpolicy.training.schedule import FIRST_CHECKPOINT

    assert FIRST_CHECKPOINT == 1000 < TrainConfig().checkpoint_every
    p = start_cli(*TRAIN, "--steps", "20000", "--run-dir", "R", cwd=tmp_path)
    signal_when(lambda: latest_step(tmp_path / "R") is not None, p, signal.SIGKILL)
    assert latest_step(tmp_path / "R") == 1000


def _killed_before_first_checkpoint(tmp_path):
    """A run directory as a run killed during start-up leaves it: a config, no checkpoint."""
    p = start_cli(*TRAIN, "--steps", "20000", "--run-dir", "K", cwd=tmp_path)
    signal_when(lambda: (tmp_path / "K" / "config.yaml").exists(), p, signal.SIGKILL)
    assert latest_step(tmp_path / "K") is None
    return tmp_path / "K"


def test_resume_without_a_checkpoint_starts_from_step_0(tmp_path):
    _killed_before_first_checkpoint(tmp_path)
    proc = run_cli(*TRAIN, "--steps", "1000", "--run-dir", "K", "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "starting it from step 0" in proc.stderr
    assert [int(r["step"]) for r in read_csv(tmp_path / "K" / "eval.csv")] == [1000]
    assert latest_step(tmp_path / "K") == 1000


def test_fresh_start_accepts_a_run_killed_before_its_first_checkpoint(tmp_path):
    _killed_before_first_checkpoint(tmp_path)
    proc = run_cli(*TRAIN, "--steps", "1000", "--run-dir", "K", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "starting afresh" in proc.stderr
    # a directory with a real checkpoint is still refused without --resume
    proc = run_cli(*TRAIN, "--steps", "1000", "--run-dir", "K", cwd=tmp_path)
    assert_one_line_error(proc, "--resume")


def test_eval_and_load_never_read_replay(tmp_path):
    proc = run_cli(*TRAIN, "--steps", "1000", "--run-dir", "R", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ckpt = tmp_path / "R" / "checkpoints" / "step-000001000"
    (ckpt / "replay.npz").write_bytes(b"damaged")
    proc = run_cli("eval", "R", "--episodes", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "return" in proc.stdout
    agent = offpolicy.load(tmp_path / "R")
    assert agent.evaluate(1).shape == (1,)
    # resuming needs the replay, and says what is wrong with it
    proc = run_cli(*TRAIN, "--steps", "1500", "--run-dir", "R", "--resume", cwd=tmp_path)
    assert_one_line_error(proc, "corrupt replay")


@pytest.fixture(scope="module")
def small_agent():
    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, **TINY_OVERRIDES)
    agent.learn(50)
    return agent


@pytest.mark.parametrize("episodes", [0, -1, 1.5, True])
def test_evaluate_rejects_bad_episode_counts(small_agent, episodes):
    with pytest.raises(OffpolicyError, match="positive integer"):
        small_agent.evaluate(episodes)


def test_evaluate_runs_the_requested_count(small_agent):
    assert small_agent.evaluate(3).shape == (3,)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_act_rejects_non_finite_observations(small_agent, bad):
    obs = np.array([1.0, bad, 0.0], np.float32)
    with pytest.raises(OffpolicyError, match="NaN or inf"):
        small_agent.act(obs)
    assert np.isfinite(small_agent.act(np.zeros(3, np.float32))).all()


@pytest.mark.parametrize("steps", [0, -5, 2.5])
def test_learn_rejects_bad_step_counts(small_agent, steps):
    with pytest.raises(OffpolicyError, match="positive integer"):
        small_agent.learn(steps)


def test_python_api_resume_applies_the_cli_rules(tmp_path):
    over = dict(TINY_OVERRIDES, eval_every=100, checkpoint_every=100)
    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=3, run_dir=tmp_path / "R", **over)
    agent.learn(200)
    agent.run.save_checkpoint("latest")
    again = offpolicy.make("ddpg", run_dir=tmp_path / "R", resume=True, quiet=True)
    assert again.step == 200 and again.config.train.seed == 3
    assert len(again.run.replay) == 200
    with pytest.raises(OffpolicyError, match="cannot change seed"):
        offpolicy.make("ddpg", seed=4, run_dir=tmp_path / "R", resume=True)
    with pytest.raises(OffpolicyError, match="cannot change ddpg.actor_lr"):
        offpolicy.make("ddpg", run_dir=tmp_path / "R", resume=True, actor_lr=0.5)


def test_loaded_agent_learns_with_its_restored_state(tmp_path):
    over = dict(TINY_OVERRIDES, eval_every=100, normalize_reward=True)
    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, run_dir=tmp_path / "R", **over)
    agent.learn(300)
    agent.run.save_checkpoint("latest")
    loaded = offpolicy.load(tmp_path / "R")
    var = agent.run.reward_scale.rms.var
    loaded.learn(20)  # replay starts empty; statistics, keys and counters carry over
    assert loaded.step == 320 and len(loaded.run.replay) == 20
    assert loaded.run.reward_scale.rms.count > agent.run.reward_scale.rms.count - 1
    assert abs(float(loaded.run.reward_scale.rms.var) - float(var)) / float(var) < 0.5
