"""Platform (offpolicy/Platform-v0): hand-computed run/hop/leap trajectories, the episode ends
(gap, enemy, goal, time limit), returns in [0, 1], seeding, the spaces and the hybrid ActionSpec.

Expected values are worked out below from the dynamics in ``offpolicy/envs/platform.py``'s
docstring, with ``noise=False`` (no random slowing, enemy speed or jump error). Constants:
frame DT = 0.05, speed decay 0.99 per frame, gravity 9.8 (dvy = -0.49 per frame in the air),
level length W = 1035, bodies 20 x 30, platform tops at y = 40, enemy 1 starts at x = 230.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from _helpers import assert_one_line_error, run_cli
from gymnasium.utils.env_checker import check_env

from offpolicy.envs.make import action_spec, make_env
from offpolicy.envs.platform import ENV_ID, PlatformEnv

W = 1035.0
RUN, HOP, LEAP = 0, 1, 2
# a deterministic route to the goal (noise=False): run, leap over enemy 1, run to the edge, hop
# gap 1, run, hop over enemy 2, run to the edge, hop gap 2 onto platform 3, run to the goal
ROUTE = [(RUN, 10), (LEAP, 50), (RUN, 10), (HOP, 480), (RUN, 30), (HOP, 100), (RUN, 10),
         (HOP, 480), (RUN, 30)]


def _act(index: int, param: float) -> tuple[int, np.ndarray]:
    params = np.zeros(3, np.float32)
    params[index] = param
    return index, params


def _x(obs: np.ndarray) -> float:
    """The player's x from observation feature 0, (x + 20) / (W + 20)."""
    return float(obs[0]) * (W + 20.0) - 20.0


def _enemy1_x(frames: int) -> float:
    # enemy 1 starts at its platform's right end (230) moving left: frame 1 finds it at the end,
    # so it turns (dx = +30) and is clipped back to 230; frame 2 turns it again (dx = -30) and
    # from then on it moves 30 * 0.05 = 1.5 to the left per frame
    return 230.0 - 1.5 * (frames - 1)


# ---------------------------------------------------------------------- hand-computed steps
def test_run_trajectory():
    # run(2), 20 frames on the ground: the speed used for frame k's move is
    #   a_k = 0.99 a_{k-1} + 2 = 2 (1 - 0.99^k) / 0.01       (never reaches the cap of 70)
    # x_20 = 0.05 sum_k a_k = 0.05 * 200 * (20 - 0.99 (1 - 0.99^20) / 0.01); vx = 0.99 a_20
    x = 0.05 * 200.0 * (20 - 0.99 * (1 - 0.99**20) / 0.01)
    vx = 0.99 * 2.0 * (1 - 0.99**20) / 0.01
    env = PlatformEnv(noise=False)
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(_act(RUN, 2.0))
    expected = [(x + 20) / (W + 20), vx / 100, _enemy1_x(20) / W, 0.0,  # enemy dx = -30
                250 / 275, 275 / 275, 225 / 235, 0.0, 0.0, 20 / 200]
    np.testing.assert_allclose(obs, expected, rtol=1e-6, atol=1e-7)
    assert reward == pytest.approx(x / W, rel=1e-9)
    assert not terminated and not truncated
    assert x == pytest.approx(19.7279, abs=1e-4)  # the closed form, evaluated


@pytest.mark.parametrize("index, param, lift, speed", [
    # hop: lift 35, aim p / (2 * 35 / 9.8 + 1); hop(200) clears enemy 1 (it passes below)
    (HOP, 200.0, 35.0, 200.0 / (2 * 35 / 9.8 + 1)),
    # a jump changes vx by at most 30 in a frame: hop(720) from rest leaves at vx = 30
    (HOP, 720.0, 35.0, 30.0),
    # leap: lift 25, aim p / (2 * 25 / 9.8 + 1)
    (LEAP, 50.0, 25.0, 50.0 / (2 * 25 / 9.8 + 1)),
], ids=["hop200", "hop720-capped", "leap50"])
def test_jump_trajectory(index, param, lift, speed):
    # frame 1 pushes (vx, vy) = (speed, lift); then only gravity: at frame k
    #   vy = lift - 0.49 (k - 1),  y_k = 40 + 0.05 (lift k - 0.245 k (k - 1))
    # The player lands (overlaps platform 1, is put back on top, stops) at the first k with
    # y_k < 40, i.e. k - 1 > lift / 0.245: N = 144 for the hop, 104 for the leap.
    # x_N = 0.05 sum_{k=1..N} speed 0.99^(k-1) = 5 speed (1 - 0.99^N)
    frames = int(np.floor(lift / 0.245)) + 2
    assert frames == (144 if index == HOP else 104)
    x = 5.0 * speed * (1 - 0.99**frames)
    env = PlatformEnv(noise=False)
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(_act(index, param))
    assert not terminated and not truncated
    assert _x(obs) == pytest.approx(x, abs=1e-4)
    assert reward == pytest.approx(x / W, rel=1e-9)
    assert obs[1] == 0.0  # landing stops the player
    assert obs[9] == pytest.approx(frames / 200)
    assert obs[2] == pytest.approx(_enemy1_x(frames) / W, rel=1e-6)


def test_parameter_is_clipped_to_its_range():
    a, b = PlatformEnv(noise=False), PlatformEnv(noise=False)
    a.reset(seed=0)
    b.reset(seed=0)
    np.testing.assert_array_equal(a.step(_act(RUN, 1000.0))[0], b.step(_act(RUN, 30.0))[0])
    # the other actions' entries are ignored
    a.reset(seed=0)
    b.reset(seed=0)
    obs_a = a.step((HOP, np.array([7.0, 200.0, 99.0], np.float32)))[0]
    np.testing.assert_array_equal(obs_a, b.step(_act(HOP, 200.0))[0])


# ---------------------------------------------------------------------- episode ends
def test_touching_an_enemy_terminates():
    # run(30) from rest: frame 1 a = 30 (moves 1.5), frame 2 a = 0.99*30 + 30 = 59.7 (2.985),
    # then the standing cap 70 (3.5 per frame). Player at global frame K >= 2:
    #   x_K = 4.485 + 3.5 (K - 2); enemy 1: 230 - 1.5 (K - 1)
    # They overlap when enemy - player < 20: 234.015 - 5 K < 20, K >= 43: the 3rd frame of
    # the 3rd run, at x = 147.985.
    env = PlatformEnv(noise=False)
    env.reset(seed=0)
    total, xs = 0.0, []
    for _ in range(2):
        obs, reward, terminated, truncated, _ = env.step(_act(RUN, 30.0))
        assert not terminated
        total += reward
        xs.append(_x(obs))
    np.testing.assert_allclose(xs, [67.485, 137.485], atol=1e-4)
    obs, reward, terminated, truncated, _ = env.step(_act(RUN, 30.0))
    assert terminated and not truncated
    assert obs[9] == pytest.approx(3 / 200)
    assert _x(obs) == pytest.approx(147.985, abs=1e-4)
    assert reward == pytest.approx((147.985 - 137.485) / W, abs=1e-9)
    assert total + reward == pytest.approx(147.985 / W, abs=1e-9)


def test_falling_into_a_gap_terminates():
    # hop(200) over enemy 1 (x_h = 5 v (1 - 0.99^144), v = 200 / (70 / 9.8 + 1)), then runs
    # at 30: the first run moves 1.5 + 2.985 + 18 * 3.5, the second 20 * 3.5. In the third,
    # the player leaves platform 1 at the first frame k with x > 250 (3.5 per frame); the
    # next frame it is in the air: gravity takes y below 40 at once and it moves 0.05 * 69.3.
    x = 5.0 * 200.0 / (70 / 9.8 + 1) * (1 - 0.99**144)
    x += 1.5 + 2.985 + 18 * 3.5 + 70.0
    k = int(np.floor((250.0 - x) / 3.5)) + 1
    x_end = x + 3.5 * k + 0.05 * 69.3
    env = PlatformEnv(noise=False)
    env.reset(seed=0)
    total = 0.0
    for action in [(HOP, 200.0), (RUN, 30.0), (RUN, 30.0)]:
        obs, reward, terminated, _, _ = env.step(_act(*action))
        assert not terminated
        total += reward
    obs, reward, terminated, truncated, _ = env.step(_act(RUN, 30.0))
    assert terminated and not truncated
    assert obs[9] == pytest.approx((k + 1) / 200)
    assert 250.0 < _x(obs) < 455.0  # in gap 1
    assert _x(obs) == pytest.approx(x_end, abs=1e-4)
    assert total + reward == pytest.approx(x_end / W, abs=1e-6)


def test_reaching_the_goal_terminates_with_return_one():
    env = PlatformEnv(noise=False)
    env.reset(seed=0)
    total = 0.0
    for i, action in enumerate(ROUTE):
        obs, reward, terminated, truncated, _ = env.step(_act(*action))
        total += reward
        assert terminated == (i == len(ROUTE) - 1)
        assert not truncated
    assert obs[0] == 1.0  # x = W
    assert total == pytest.approx(1.0, abs=1e-12)


def test_time_limit_truncates():
    assert gym.spec(ENV_ID).max_episode_steps == 200
    env = make_env(ENV_ID, seed=0, noise=False)
    env.reset(seed=0)
    # stand still on platform 3 (the route without its last run) until the limit
    for action in ROUTE[:-1]:
        env.step(_act(*action))
    for t in range(len(ROUTE) - 1, 200):
        _, reward, terminated, truncated, _ = env.step(_act(RUN, 0.0))
        assert not terminated
        assert truncated == (t == 199)
        assert reward == 0.0


# ---------------------------------------------------------------------- returns, spaces, seeds
def _random_episode(env: gym.Env, seed: int, prefix: int = 0):
    """A uniformly random policy, after ``prefix`` steps of the route (so that episodes reach
    platforms 2 and 3 too); returns (return, final obs, every obs)."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    total, seen, t = 0.0, [obs], 0
    while True:
        action = _act(*ROUTE[t]) if t < prefix else env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        total, t = total + reward, t + 1
        seen.append(obs)
        if terminated or truncated:
            return total, obs, seen


def test_random_policy_returns_are_in_zero_one():
    env = make_env(ENV_ID)
    space = env.observation_space
    returns = []
    for seed in range(150):
        total, last, seen = _random_episode(env, seed, prefix=seed % len(ROUTE))
        returns.append(total)
        assert 0.0 <= total <= 1.0
        # the rewards telescope: the return is the final x over W
        assert total == pytest.approx(_x(last) / W, abs=1e-5)
        assert all(space.contains(o) for o in seen)
    assert max(returns) > 0.4  # the episodes went past gap 1


def test_reset_seed_reproduces_the_episode():
    env_a, env_b = make_env(ENV_ID), make_env(ENV_ID)
    for seed in (0, 7):
        ra, la, sa = _random_episode(env_a, seed, prefix=2)
        rb, lb, sb = _random_episode(env_b, seed, prefix=2)
        assert ra == rb
        np.testing.assert_array_equal(np.stack(sa), np.stack(sb))
    # same actions, other seeds: the noise differs
    a, b = PlatformEnv(), PlatformEnv()
    a.reset(seed=1)
    b.reset(seed=2)
    assert not np.array_equal(a.step(_act(RUN, 5.0))[0], b.step(_act(RUN, 5.0))[0])


def test_spaces_and_gymnasium_checker():
    env = PlatformEnv()
    assert env.action_space == gym.spaces.Tuple((
        gym.spaces.Discrete(3),
        gym.spaces.Box(np.zeros(3, np.float32), np.array([30, 720, 430], np.float32))))
    assert env.observation_space == gym.spaces.Box(0.0, 1.0, (10,), np.float32)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs.shape == (10,)
    with pytest.raises(ValueError, match="0 \\(run\\)"):
        env.step((3, np.zeros(3, np.float32)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Gymnasium recommends [-1, 1] Boxes; the parameters keep the reference's ranges
        warnings.filterwarnings("ignore", message=".*symmetric and normalized space")
        check_env(PlatformEnv(), skip_render_check=True)


def test_hybrid_action_spec_round_trip():
    env = make_env(ENV_ID, seed=0)
    spec = action_spec(env)
    assert spec.kind == "hybrid" and spec.describe() == "hybrid(discrete(3), continuous(3))"
    assert spec.flat_dim == 4
    for _ in range(50):
        index, params = env.action_space.sample()
        back_index, back_params = spec.to_env(spec.from_env((index, params)))
        assert back_index == index
        np.testing.assert_allclose(back_params, params, rtol=1e-6, atol=1e-4)
    # and the agent's side: any flat action maps to a valid env action
    rng = np.random.default_rng(0)
    for _ in range(50):
        assert env.action_space.contains(spec.to_env(spec.sample(rng)))


def test_ddpg_refuses_hybrid_actions(tmp_path):
    proc = run_cli("train", "ddpg", "--env", ENV_ID, "--steps", "10", "--run-dir", "R",
                   cwd=tmp_path)
    line = assert_one_line_error(proc, "does not support hybrid actions")
    assert "hybrid(discrete(3), continuous(3))" in line
    assert not (tmp_path / "R").exists()
