"""Partially observed tasks (issue 39): -P keeps positions, -V keeps velocities, nothing else
changes (dynamics, rewards, time limits are the full task's)."""

import gymnasium as gym
import numpy as np
import pytest

from offpolicy.envs import partial
from offpolicy.envs.make import make_env
from offpolicy.errors import OffpolicyError


def _rollout(env, seed, actions):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, r, term, trunc, _ = env.step(a)
        out.append((obs, r, term, trunc))
        if term or trunc:
            break
    return out


@pytest.mark.parametrize("task,base,pos,vel", [
    ("Pendulum", "Pendulum-v1", [0, 1], [2]),
    ("CartPole", "CartPole-v1", [0, 2], [1, 3]),
    ("Hopper", "Hopper-v5", list(range(5)), list(range(5, 11))),
    ("HalfCheetah", "HalfCheetah-v5", list(range(8)), list(range(8, 17))),
])
def test_partial_views_are_slices_of_the_full_task(task, base, pos, vel):
    full = make_env(base, 0)
    rng = np.random.default_rng(0)
    actions = [full.action_space.sample() for _ in range(30)]
    if isinstance(full.action_space, gym.spaces.Box):
        actions = [rng.uniform(full.action_space.low, full.action_space.high).astype(np.float32)
                   for _ in range(30)]
    ref = _rollout(full, 3, actions)
    for keep, idx in (("P", pos), ("V", vel)):
        env = make_env(f"offpolicy/{task}-{keep}-v0", 0)
        assert env.observation_space.shape == (len(idx),)
        assert env.spec.max_episode_steps == gym.spec(base).max_episode_steps
        got = _rollout(env, 3, actions)
        assert len(got) == len(ref)
        np.testing.assert_array_equal(got[0], ref[0][idx])
        for (o, r, t, tr), (o_ref, r_ref, t_ref, tr_ref) in zip(got[1:], ref[1:]):
            np.testing.assert_array_equal(o, o_ref[idx])
            assert (r, t, tr) == (r_ref, t_ref, tr_ref)


def test_every_registered_id_builds_and_truncates_like_its_base():
    for env_id in partial.env_ids():
        env = make_env(env_id, 0)
        obs, _ = env.reset(seed=0)
        assert obs.shape == env.observation_space.shape
    env = make_env("offpolicy/Pendulum-V-v0", 0)
    env.reset(seed=1)
    steps, done = 0, False
    while not done:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        steps += 1
        done = term or trunc
    assert steps == 200 and trunc and not term


def test_ant_without_contact_forces_and_kwargs_pass_through():
    env = make_env("offpolicy/Ant-P-v0", 0)
    assert env.observation_space.shape == (13,)  # z, orientation, 8 joints (x, y hidden)
    env = make_env("offpolicy/Pendulum-P-v0", 0, g=9.81)
    assert env.unwrapped.g == 9.81


def test_wrapper_refuses_bad_indices():
    with pytest.raises(OffpolicyError, match="out of range"):
        partial.PartialObservation(gym.make("Pendulum-v1"), [3])
    with pytest.raises(OffpolicyError, match="more than positions"):
        partial.split(gym.make("Ant-v5").unwrapped, "Ant-v5")  # contact forces included


@pytest.mark.parametrize("env_id", ["offpolicy/Pendulum-V-v0", "offpolicy/CartPole-P-v0"])
def test_action_reward_observation_is_the_previous_step(env_id):
    """--observe-action-reward: observation t is [o_t, a_{t-1}, r_{t-1}], zeros after every
    reset; checked against a plain rollout of the same env (Box actions as given, Discrete
    one-hot) over several episodes."""
    plain = make_env(env_id, 0)
    env = make_env(env_id, 0, observe_action_reward=True)
    n_obs = plain.observation_space.shape[0]
    space = plain.action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    n_act = space.n if discrete else space.shape[0]
    assert env.observation_space.shape == (n_obs + n_act + 1,)
    assert env.action_space == space
    rng = np.random.default_rng(1)
    for episode in range(3):
        want, _ = plain.reset(seed=episode)
        got, _ = env.reset(seed=episode)
        np.testing.assert_array_equal(got, np.concatenate([want, np.zeros(n_act + 1)]))
        done = False
        while not done:
            a = (int(rng.integers(n_act)) if discrete
                 else rng.uniform(space.low, space.high).astype(np.float32))
            want, r_want, t_want, tr_want, _ = plain.step(a)
            got, r, t, tr, _ = env.step(a)
            flat = np.eye(n_act)[a] if discrete else a
            np.testing.assert_allclose(got, np.concatenate([want, flat, [r_want]]), rtol=1e-6)
            assert got.dtype == np.float32 and env.observation_space.contains(got)
            assert (r, t, tr) == (r_want, t_want, tr_want)
            done = t or tr


def test_action_reward_observation_refuses_frames():
    from offpolicy.envs.partial import ActionRewardObservation

    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(OffpolicyError, match="flat observation"):
        ActionRewardObservation(Frames())


def test_action_reward_observation_of_hybrid_actions():
    """Platform's Tuple(Discrete(3), Box(3)) action: the one-hot of the discrete part, then
    the parameters as given."""
    env = make_env("offpolicy/Platform-v0", 0, observe_action_reward=True)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs[-7:], 0.0)
    action = (2, np.array([1.0, 2.0, 3.0], np.float32))
    obs, reward, *_ = env.step(action)
    np.testing.assert_allclose(obs[-7:], [0, 0, 1, 1.0, 2.0, 3.0, reward], rtol=1e-6)


def test_action_reward_observation_in_async_env_copies():
    """Env copies in worker processes build the same observation (the flag travels with
    the factory), and an episode that ends inside a step starts the next from zeros while
    the step's own next observation keeps the last action and reward."""
    import toy_envs  # noqa: F401  (registers the toy envs; the workers get their specs)

    from offpolicy.envs.make import action_spec
    from offpolicy.envs.vector import EnvCopies

    env_id = "toy_envs:ToyTerminate-v0"  # 10-step episodes, Box(-2, 2) actions
    spec = action_spec(make_env(env_id))
    envs = EnvCopies(env_id, 2, 0, spec, True, observe_action_reward=True)
    try:
        obs = envs.reset(0)
        assert obs.shape == (2, 5)
        np.testing.assert_array_equal(obs[:, 3:], 0.0)
        for t in range(1, 13):
            a = np.full((2, 1), 0.25 * (t % 4) - 0.5, np.float32)
            next_obs, obs, reward, terminated, truncated = envs.step(a)
            np.testing.assert_allclose(next_obs[:, 3], spec.to_env(a[0])[0], rtol=1e-6)
            np.testing.assert_allclose(next_obs[:, 4], reward, rtol=1e-6)
            if t == 10:
                assert terminated.all()
                np.testing.assert_array_equal(obs[:, 3:], 0.0)  # the next episode's first
            else:
                np.testing.assert_array_equal(obs, next_obs)
    finally:
        envs.close()
