"""Issue 72, item 1: the Python API in the shape SB3 users expect: ``make`` takes an env id, a
``gymnasium.Env`` or a callable; ``predict`` over one observation or a batch; ``learn``
returns the newest evaluation and train metrics."""

import gymnasium as gym
import numpy as np
import pytest

import offpolicy
from offpolicy.api import env_id
from offpolicy.errors import OffpolicyError

TINY = dict(hidden=(8, 8), batch_size=8, warmup_steps=20, eval_every=100, eval_episodes=1,
            quiet=True)


class Spinner(gym.Env):
    """A one-dimensional env without a spec (not made by gymnasium.make)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([np.sin(self.t / 5), np.cos(self.t / 5)], np.float32)
        return obs, float(-abs(action[0] - obs[0])), False, self.t >= 30, {}


@pytest.mark.parametrize("env", [
    lambda: gym.make("Pendulum-v1"),                 # a factory
    gym.make("Pendulum-v1"),                         # an Env with a spec
    Spinner(),                                       # an Env without one
], ids=["callable", "env-with-spec", "env-without-spec"])
def test_make_takes_an_env_object_or_a_factory(env):
    agent = offpolicy.make("ddpg", env=env, seed=0, **TINY)
    out = agent.learn(100)
    assert agent.config.train.env.startswith("offpolicy-user/")
    assert out["run_dir"] is None and out["eval"]["step"] == 100
    assert np.isfinite(out["eval"]["return_mean"])
    assert out["train"] is not None and "critic_loss" in out["train"]
    assert env_id(env) == agent.config.train.env  # the same object: registered once
    agent.close()


def test_a_bad_env_is_one_line():
    with pytest.raises(OffpolicyError, match="env must be an id, a gymnasium.Env or a callable"):
        offpolicy.make("ddpg", env=3)
    with pytest.raises(OffpolicyError, match="returned int, not a gymnasium.Env"):
        offpolicy.make("ddpg", env=lambda: 3)
    with pytest.raises(OffpolicyError, match="async_envs and num_collectors need a registered"):
        offpolicy.make("ddpg", env=lambda: gym.make("Pendulum-v1"), num_collectors=2)


@pytest.mark.parametrize("algo", ["ddpg", "sac"])
def test_predict_on_a_batch_equals_act_row_by_row(algo):
    agent = offpolicy.make(algo, env="Pendulum-v1", seed=0, **TINY)
    agent.learn(40)
    obs = np.random.default_rng(0).uniform(-1, 1, size=(16, 3)).astype(np.float32)
    actions, state = agent.predict(obs, deterministic=True)
    assert actions.shape == (16, 1) and state is None
    np.testing.assert_allclose(actions, np.stack([agent.act(o) for o in obs]), atol=1e-6)
    one, _ = agent.predict(obs[0])
    assert one.shape == (1,) and np.allclose(one, actions[0], atol=1e-6)
    if algo == "sac":  # a stochastic policy explores when asked
        sampled, _ = agent.predict(obs, deterministic=False)
        assert not np.allclose(sampled, actions)
    with pytest.raises(OffpolicyError, match=r"expected \(3,\) or \[B, \*\(3,\)\]"):
        agent.predict(np.zeros((4, 5)))
    agent.close()


def test_predict_carries_a_recurrent_memory_as_state():
    agent = offpolicy.make("td3", env="Pendulum-v1", seed=0, core="lstm", core_cells=8,
                           core_window=4, **{**TINY, "hidden": (8,)})
    agent.learn(40)
    rng = np.random.default_rng(1)
    obs = rng.uniform(-1, 1, size=(3, 2, 3)).astype(np.float32)  # 3 steps of 2 episodes
    state, batch = None, []
    for t in range(3):
        a, state = agent.predict(obs[t], state=state, episode_start=[t == 0, t == 0])
        batch.append(a)
    assert state is not None
    one = [agent.act(obs[t, 1], first=t == 0) for t in range(3)]  # the second episode alone
    np.testing.assert_allclose(np.stack([b[1] for b in batch]), np.stack(one), atol=1e-5)
    agent.close()
