"""ACER through the registry, the loop and the CLI: configuration errors, presets, the
replay-only cadence, checkpoint/resume of the average network, and the Atari smoke run."""

import jax
import numpy as np
import pytest
from _helpers import assert_one_line_error, run_cli

from offpolicy import registry
from offpolicy.errors import OffpolicyError
from offpolicy.training.run import Run


def _run(tmp_path, env="CartPole-v1", name="r", agent=None, resume=False, **train):
    """A tiny ACER run (16 hidden units, k = 5, 2 env copies, 2 windows per replayed update)."""
    cfg = {"env": env, "steps": 200, "seed": 0, "eval_every": 200, "eval_episodes": 2,
           "quiet": True, "segment_length": 5, "batch_size": 2, "num_envs": 2} | train
    return Run(registry.resolve("acer", train_overrides=cfg,
                                agent_overrides={"hidden": (16,)} | (agent or {})),
               tmp_path / name, resume=resume)


def test_defaults_and_presets_resolve():
    run = registry.resolve("acer")
    assert (run.train.segment_length, run.train.replay_ratio, run.train.num_envs) == (20, 4.0, 4)
    mujoco = registry.resolve("acer", preset="paper-mujoco")
    assert mujoco.train.segment_length == 50 and not mujoco.agent.on_policy_update
    assert mujoco.agent.truncation == 5.0 and mujoco.agent.average_decay == 0.995
    atari = registry.resolve("acer", preset="paper-atari")
    assert atari.agent.torso == "cnn" and atari.train.num_envs == 16
    assert atari.train.clip_reward == 1.0 and run.train.clip_reward == 0.0


def test_paper_constants_by_action_kind(tmp_path):
    discrete = _run(tmp_path, name="d").agent
    continuous = _run(tmp_path, env="Pendulum-v1", name="c").agent
    assert (discrete.c, discrete.alpha, discrete.data.length) == (10.0, 0.99, 5)
    assert (continuous.c, continuous.alpha) == (5.0, 0.995)


def test_segment_length_zero_is_refused():
    with pytest.raises(OffpolicyError, match="--segment-length must be >= 1"):
        Run(registry.resolve("acer", train_overrides={"env": "CartPole-v1",
                                                      "segment_length": 0}), None)


def test_replay_only_needs_a_positive_ratio(tmp_path):
    with pytest.raises(OffpolicyError, match="replay only"):
        _run(tmp_path, replay_ratio=0.0, agent={"on_policy_update": False})


def test_cnn_torso_needs_frames(tmp_path):
    with pytest.raises(OffpolicyError, match="needs image observations"):
        _run(tmp_path, agent={"torso": "cnn"})


def test_on_policy_and_replay_only_cadences_learn_and_log(tmp_path):
    for name, agent, ratio in (("onpolicy", {}, 0.0), ("replay", {"on_policy_update": False},
                                                        2.0)):
        r = _run(tmp_path, name=name, replay_ratio=ratio, agent=agent)
        r.train()
        assert r.step == 200 and r.learner.updates > 0
        assert r.learner.compile_count == 1
        header = (tmp_path / name / "train.csv").read_text().splitlines()[0].split(",")
        for col in ("rho_mean", "truncated_fraction", "kl_average", "entropy",
                    "trust_region_active"):
            assert col in header


def test_resume_restores_the_average_network(tmp_path):
    r = _run(tmp_path)
    r.train()
    average = jax.tree_util.tree_leaves(r.learner.state.average)
    params = jax.tree_util.tree_leaves(r.learner.state.params)
    assert any(not np.array_equal(a, p) for a, p in zip(average, params))
    again = _run(tmp_path, resume=True)
    for a, b in zip(average, jax.tree_util.tree_leaves(again.learner.state.average)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_cli_unknown_acer_flag_is_one_line(tmp_path):
    out = run_cli("train", "acer", "--env", "CartPole-v1", "--acer.trust-regio", "1",
                  cwd=tmp_path)
    line = assert_one_line_error(out, "unknown flag --acer.trust-regio; did you mean "
                                      "--acer.trust-region")
    # the misspelt flag's section is listed, not every flag of the command
    assert "(acer flags: --acer.activation" in line and "--batch-size" not in line
    assert line.endswith("every flag: offpolicy train acer --help-all)")


def test_atari_smoke(tmp_path):
    pytest.importorskip("ale_py")
    out = run_cli("train", "acer", "--env", "ALE/Pong-v5", "--steps", "48", "--num-envs", "1",
                  "--segment-length", "4", "--batch-size", "2", "--replay-ratio", "1",
                  "--eval-every", "48", "--eval-episodes", "1", "--buffer-size", "200",
                  "--run-dir", str(tmp_path / "pong"), "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    cfg = (tmp_path / "pong" / "config.yaml").read_text()
    assert "torso: auto" in cfg
    rows = (tmp_path / "pong" / "eval.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("48,")
    assert (tmp_path / "pong" / "checkpoints" / "latest").exists()


def test_continuous_acer_refuses_frames():
    from offpolicy.agents.acer import ACER
    from offpolicy.config import ACERConfig
    from offpolicy.envs.spaces import ActionSpec

    spec = ActionSpec.continuous(-np.ones(2), np.ones(2))
    with pytest.raises(OffpolicyError, match="continuous acer takes observation vectors"):
        ACER(ACERConfig(), (84, 84, 4), spec)
