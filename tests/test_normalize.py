"""Observation/reward normalisation: running statistics against NumPy, and their checkpoint."""

import numpy as np

from offpolicy import registry
from offpolicy.envs.wrappers import ObsNormalizer, RewardScaler, RunningMeanStd
from offpolicy.training.run import Run


def test_running_mean_std_matches_numpy_over_chunks():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4))
    rms = RunningMeanStd((4,))
    for chunk in np.array_split(data, 37):
        rms.update(chunk)
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-6)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-3)


def test_obs_normalizer_standardises_and_clips():
    norm = ObsNormalizer((2,), enabled=True, clip=5.0)
    x = np.random.default_rng(1).normal([10.0, -4.0], [3.0, 0.5], size=(5000, 2))
    norm.update(x)
    z = norm(x)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-2)
    np.testing.assert_allclose(z.std(0), 1.0, atol=2e-2)
    assert np.abs(norm(np.array([1e6, -1e6]))).max() == 5.0
    off = ObsNormalizer((2,), enabled=False)
    assert off(x) is x


def test_reward_scaler_divides_by_return_std():
    scaler = RewardScaler(gamma=0.9, enabled=True)
    returns = []
    ret = 0.0
    for t in range(2000):
        r = float(np.sin(t) + 1.0)
        scaler.update(r, done=(t % 100 == 99))
        ret = ret * 0.9 + r
        returns.append(ret)
        if t % 100 == 99:
            ret = 0.0
    np.testing.assert_allclose(scaler(np.array([1.0]))[0], 1.0 / np.std(returns), rtol=0.05)


def test_normalised_run_saves_and_restores_statistics(tmp_path):
    over = {"env": "Pendulum-v1", "steps": 300, "batch_size": 16, "eval_every": 300,
            "eval_episodes": 1, "checkpoint_every": 300, "normalize_obs": True,
            "normalize_reward": True, "quiet": True}
    run = registry.resolve("ddpg", train_overrides=over, agent_overrides={"hidden": (16, 16)})
    t = Run(run, tmp_path / "r")
    t.train()
    assert t.obs_norm.rms.count > 300 and t.reward_scale.rms.count > 300
    run.train.steps = 400
    t2 = Run(run, tmp_path / "r", resume=True)
    np.testing.assert_array_equal(t2.obs_norm.rms.mean, t.obs_norm.rms.mean)
    np.testing.assert_array_equal(t2.reward_scale.rms.var, t.reward_scale.rms.var)
    assert t2.train()["step"] == 400


def test_clip_reward_clips_what_replay_stores_not_the_reported_returns(tmp_path):
    """--clip-reward c (the Atari protocol, c = 1): replay holds clip(r, -c, c); the episode
    returns the collector reports are the env's. Pendulum-v1's rewards lie in [-16.3, 0]."""
    over = {"env": "Pendulum-v1", "steps": 250, "batch_size": 16, "eval_every": 10**6,
            "eval_episodes": 1, "checkpoint_every": 10**6, "quiet": True, "clip_reward": 1.0}
    run = registry.resolve("ddpg", train_overrides=over, agent_overrides={"hidden": (16, 16)})
    t = Run(run, tmp_path / "r")
    t.train(final_eval=False)
    stored = t.replay.valid_values("reward")
    assert stored.min() >= -1.0 and stored.max() <= 0.0
    assert np.mean(stored == -1.0) > 0.5  # most Pendulum steps cost more than 1
    import csv

    with open(tmp_path / "r" / "train.csv") as f:  # the one finished 200-step episode
        logged = [float(r["episode_return"]) for r in csv.DictReader(f)
                  if r["episode_return"] not in ("", "nan")]
    assert len(logged) == 1 and logged[0] < -200.0 < stored[:200].sum()  # unclipped
