"""Image observations: the Nature-CNN torso, Atari envs (the ``atari`` extra) and uint8 replay."""

from __future__ import annotations

import builtins

import gymnasium as gym
import jax
import numpy as np
import pytest

from offpolicy import registry
from offpolicy.envs.make import (
    action_spec,
    frame_stack,
    make_env,
    observation_dtype,
    observation_shape,
)
from offpolicy.envs.wrappers import ObsNormalizer
from offpolicy.errors import OffpolicyError
from offpolicy.networks import NatureCNN, is_image
from offpolicy.replay.samplers import gather
from offpolicy.replay.storage import Storage
from offpolicy.replay.table import Table
from offpolicy.training.collector import Collector
from offpolicy.training.learner import ActingState
from offpolicy.training.run import Run

PONG = "ALE/Pong-v5"


@pytest.fixture(scope="module")
def cnn():
    net = NatureCNN()
    frames = np.zeros((1, 84, 84, 4), np.uint8)
    return jax.jit(net.apply), jax.jit(net.init)(jax.random.PRNGKey(0), frames)


def test_nature_cnn_shapes_and_uint8_scaling(cnn):
    apply, params = cnn
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (3, 2, 84, 84, 4), dtype=np.uint8)  # [T, B, H, W, C]
    out = apply(params, frames[0])
    assert out.shape == (2, 512) and out.dtype == np.float32
    seq = apply(params, frames)
    assert seq.shape == (3, 2, 512)
    np.testing.assert_allclose(seq[0], out, rtol=1e-5, atol=1e-6)  # leading axes only reshape
    scaled = apply(params, frames.astype(np.float32) / 255.0)
    np.testing.assert_allclose(scaled, seq, rtol=1e-5, atol=1e-6)
    assert (np.asarray(seq) >= 0).all() and np.asarray(seq).any()  # ReLU, not all dead
    kernels = {k: v["kernel"].shape for k, v in params["params"].items()}
    assert kernels == {"Conv_0": (8, 8, 4, 32), "Conv_1": (4, 4, 32, 64),
                       "Conv_2": (3, 3, 64, 64), "Dense_0": (7 * 7 * 64, 512)}
    assert is_image((84, 84, 4)) and not is_image((17,))


def test_atari_env_frames_discrete_actions():
    pytest.importorskip("ale_py")
    env = make_env(PONG, seed=0)
    try:
        assert env.observation_space.shape == (84, 84, 4)
        assert env.observation_space.dtype == np.uint8
        assert isinstance(env.action_space, gym.spaces.Discrete)
        assert env.unwrapped._frameskip == 1  # the preprocessing skips the frames
        assert observation_dtype(env) == np.uint8 and observation_shape(env) == (84, 84, 4)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
        assert obs.flags.c_contiguous
        for _ in range(5):
            obs, reward, term, trunc, _ = env.step(env.action_space.sample())
            assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
            assert not (term or trunc)
        # the newest frame is last: it equals the previous stack's frames shifted by one
        prev = obs
        obs, *_ = env.step(0)
        np.testing.assert_array_equal(obs[..., :3], prev[..., 1:])
    finally:
        env.close()


def test_missing_atari_extra_is_one_line(monkeypatch):
    real_import = builtins.__import__

    def no_ale(name, *args, **kwargs):
        if name == "ale_py" or name.startswith("ale_py."):
            raise ModuleNotFoundError("No module named 'ale_py'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ale)
    with pytest.raises(OffpolicyError) as e:
        make_env(PONG, seed=0)
    msg = str(e.value)
    assert "\n" not in msg
    assert "pip install 'offpolicy[atari]'" in msg and PONG in msg


def test_replay_and_collector_keep_uint8_frames():
    pytest.importorskip("ale_py")
    probe = make_env(PONG, seed=0)
    spec, shape, dtype = action_spec(probe), observation_shape(probe), observation_dtype(probe)
    probe.close()
    # built the way run.py builds it: the 4 stacked frames stored once each
    replay = Table(Storage(64, shape, spec.flat_dim, {}, obs_dtype=dtype, num_streams=1,
                           frame_stack=frame_stack(probe)))
    assert replay.storage.obs.dtype == np.uint8 and replay.storage.obs.shape == (64, 84, 84)
    # the replay buffer is a sink; random actions need no policy
    collector = Collector(PONG, 1, 0, spec, replay, None,
                          ActingState(0, None, ObsNormalizer((), False)), None, {})
    seen = []  # the env's own stacked observations, in the order replay stores them
    try:
        collector.begin()
        seen.append(collector.obs[0].copy())
        for step in range(8):
            collector.step(*collector.random_actions(), step)
            seen.append(collector.obs[0].copy())
        assert collector.obs.dtype == np.uint8 and collector.obs_n.dtype == np.uint8
    finally:
        collector.close()
    idx = np.arange(8)
    batch = gather(replay.storage, idx)
    assert batch["obs"].dtype == np.uint8 and batch["next_obs"].dtype == np.uint8
    assert batch["obs"].shape == (8, 84, 84, 4)
    assert batch["obs"].any()  # real frames, not the zeros replay starts with
    np.testing.assert_array_equal(batch["obs"], np.stack(seen[:8]))
    np.testing.assert_array_equal(batch["next_obs"], np.stack(seen[1:]))


def test_normalize_obs_refused_for_frames():
    pytest.importorskip("ale_py")
    run = registry.resolve("ddpg", train_overrides={"env": PONG, "normalize_obs": True})
    with pytest.raises(OffpolicyError, match="--normalize-obs does not apply to image") as e:
        Run(run)
    assert "\n" not in str(e.value)
