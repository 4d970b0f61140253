"""ActionSpec: the four action kinds, sampling, the agent <-> env maps and the errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError

BOX = spaces.Box(np.array([-2.0, 0.0, -1.0], np.float32), np.array([2.0, 10.0, 3.0], np.float32))
TUPLE = spaces.Tuple((spaces.Discrete(4), spaces.Box(-3.0, 1.0, (2,), np.float32)))
DICT = spaces.Dict({"z_param": spaces.Box(0.0, 4.0, (2,), np.float32),
                    "a_choice": spaces.Discrete(3),
                    "m_multi": spaces.MultiDiscrete([2, 5])})


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------- construction / flat_dim
@pytest.mark.parametrize("space, kind, flat_dim", [
    (BOX, "continuous", 3),
    (spaces.Box(-1.0, 1.0, (1,), np.float32), "continuous", 1),
    (spaces.Discrete(5), "discrete", 1),
    (spaces.MultiDiscrete([3, 2, 7]), "multi_discrete", 3),
    (TUPLE, "hybrid", 3),
    (DICT, "hybrid", 5),
])
def test_kind_and_flat_dim(space, kind, flat_dim):
    spec = ActionSpec.from_gym(space)
    assert spec.kind == kind
    assert spec.flat_dim == flat_dim
    assert spec.sample(_rng()).shape == (flat_dim,)
    assert spec.sample(_rng()).dtype == np.float32


def test_continuous_dim_and_bounds():
    spec = ActionSpec.from_gym(BOX)
    assert spec.dim == 3
    np.testing.assert_array_equal(spec.low, BOX.low)
    np.testing.assert_array_equal(spec.high, BOX.high)
    assert ActionSpec.from_gym(spaces.Discrete(3)).dim == 0


def test_dict_components_in_sorted_key_order():
    spec = ActionSpec.from_gym(DICT)
    assert spec.keys == ("a_choice", "m_multi", "z_param")
    assert [c.kind for c in spec.components] == ["discrete", "multi_discrete", "continuous"]
    assert [c.flat_dim for c in spec.components] == [1, 2, 2]


# ---------------------------------------------------------------------- sampling
def test_continuous_sample_in_agent_range():
    spec = ActionSpec.from_gym(BOX)
    x = np.stack([spec.sample(_rng(i)) for i in range(500)])
    assert x.min() >= -1.0 and x.max() <= 1.0
    assert x.min() < -0.9 and x.max() > 0.9  # covers the range, not a constant


def test_discrete_sample_integer_in_range():
    spec = ActionSpec.from_gym(spaces.Discrete(5))
    rng = _rng()
    x = np.concatenate([spec.sample(rng) for _ in range(500)])
    assert np.all(x == np.round(x))
    assert set(x.astype(int).tolist()) == {0, 1, 2, 3, 4}


def test_multi_discrete_sample_in_range():
    nvec = [3, 2, 7]
    spec = ActionSpec.from_gym(spaces.MultiDiscrete(nvec))
    rng = _rng()
    x = np.stack([spec.sample(rng) for _ in range(500)])
    assert np.all(x == np.round(x))
    for j, n in enumerate(nvec):
        assert set(x[:, j].astype(int).tolist()) == set(range(n))


@pytest.mark.parametrize("space", [BOX, spaces.Discrete(5), spaces.MultiDiscrete([3, 2, 7]),
                                   TUPLE, DICT], ids=["box", "discrete", "multi", "tuple", "dict"])
def test_sampled_actions_map_into_the_env_space(space):
    spec = ActionSpec.from_gym(space)
    rng = _rng(3)
    for _ in range(200):
        a = spec.to_env(spec.sample(rng))
        assert space.contains(a), (a, space)


def test_hybrid_sample_components_in_range():
    spec = ActionSpec.from_gym(TUPLE)
    rng = _rng()
    x = np.stack([spec.sample(rng) for _ in range(300)])
    assert set(x[:, 0].astype(int).tolist()) == {0, 1, 2, 3}
    assert np.all(x[:, 0] == np.round(x[:, 0]))
    assert x[:, 1:].min() >= -1.0 and x[:, 1:].max() <= 1.0


# ---------------------------------------------------------------------- conversions
def test_continuous_to_env_rescales_to_bounds():
    spec = ActionSpec.from_gym(BOX)
    np.testing.assert_allclose(spec.to_env(-np.ones(3)), BOX.low, atol=1e-6)
    np.testing.assert_allclose(spec.to_env(np.ones(3)), BOX.high, atol=1e-6)
    np.testing.assert_allclose(spec.to_env(np.zeros(3)), (BOX.low + BOX.high) / 2, atol=1e-6)
    np.testing.assert_allclose(spec.to_env(np.full(3, 0.5)),
                               BOX.low + 0.75 * (BOX.high - BOX.low), atol=1e-6)


def test_continuous_round_trip():
    spec = ActionSpec.from_gym(BOX)
    rng = _rng(1)
    for _ in range(100):
        a = rng.uniform(-1, 1, 3).astype(np.float32)
        env_a = spec.to_env(a)
        assert np.all(env_a >= BOX.low - 1e-5) and np.all(env_a <= BOX.high + 1e-5)
        np.testing.assert_allclose(spec.from_env(env_a), a, atol=1e-5)
        assert spec.from_env(env_a).dtype == np.float32
        e = rng.uniform(BOX.low, BOX.high).astype(np.float32)
        np.testing.assert_allclose(spec.to_env(spec.from_env(e)), e, atol=1e-5)


def test_continuous_clips_out_of_range_agent_actions():
    spec = ActionSpec.from_gym(BOX)
    np.testing.assert_allclose(spec.to_env(np.array([5.0, -7.0, 1.5])),
                               [BOX.high[0], BOX.low[1], BOX.high[2]], atol=1e-6)
    np.testing.assert_allclose(spec.to_env(np.array([-1e9, 1e9, -1.0001])), BOX.low * [1, 0, 1]
                               + BOX.high * [0, 1, 0], atol=1e-5)


def test_continuous_to_env_at_the_edges_stays_inside_the_box():
    rng = _rng(1)
    for _ in range(200):
        lo = rng.uniform(-10, 10, 3).astype(np.float32)
        hi = (lo + rng.uniform(0.01, 10, 3)).astype(np.float32)
        space = spaces.Box(lo, hi, dtype=np.float32)
        spec = ActionSpec.from_gym(space)
        for v in (-1.0, 1.0):
            a = spec.to_env(np.full(3, v, np.float32))
            assert space.contains(a), (v, a, lo, hi)


def test_discrete_round_trip():
    spec = ActionSpec.from_gym(spaces.Discrete(6))
    for i in range(6):
        flat = spec.from_env(i)
        assert flat.shape == (1,) and flat.dtype == np.float32 and flat[0] == i
        env_a = spec.to_env(flat)
        assert env_a == i and isinstance(env_a, int)
        assert spec.to_env(np.float32(i)) == i  # a scalar works too


def test_multi_discrete_round_trip():
    space = spaces.MultiDiscrete([3, 2, 7])
    spec = ActionSpec.from_gym(space)
    rng = _rng()
    for _ in range(50):
        e = space.sample()
        flat = spec.from_env(e)
        assert flat.dtype == np.float32 and flat.shape == (3,)
        back = spec.to_env(flat)
        assert back.dtype == np.int64
        np.testing.assert_array_equal(back, e)
        f = spec.sample(rng)
        np.testing.assert_array_equal(spec.from_env(spec.to_env(f)), f)


def test_multi_discrete_2d_nvec_maps_back_to_the_env_shape():
    space = spaces.MultiDiscrete([[2, 3], [4, 5]])
    try:
        spec = ActionSpec.from_gym(space)
    except OffpolicyError:
        return  # rejecting it is fine too
    a = spec.to_env(spec.sample(_rng()))
    assert space.contains(a), a


def test_tuple_hybrid_round_trip_and_clipping():
    spec = ActionSpec.from_gym(TUPLE)
    env_a = spec.to_env(np.array([2.0, -1.0, 1.0], np.float32))
    assert isinstance(env_a, tuple) and len(env_a) == 2
    assert env_a[0] == 2 and isinstance(env_a[0], int)
    np.testing.assert_allclose(env_a[1], [-3.0, 1.0], atol=1e-6)
    assert TUPLE.contains(env_a)
    # out-of-range continuous parameters are clipped to the bounds
    clipped = spec.to_env(np.array([1.0, 4.0, -9.0], np.float32))
    np.testing.assert_allclose(clipped[1], [1.0, -3.0], atol=1e-6)
    rng = _rng(2)
    for _ in range(50):
        f = spec.sample(rng)
        np.testing.assert_allclose(spec.from_env(spec.to_env(f)), f, atol=1e-5)
    e = (3, np.array([0.5, -2.5], np.float32))
    back = spec.to_env(spec.from_env(e))
    assert back[0] == 3
    np.testing.assert_allclose(back[1], e[1], atol=1e-5)


def test_dict_hybrid_round_trip():
    spec = ActionSpec.from_gym(DICT)
    flat = np.array([2.0, 1.0, 4.0, 0.0, 1.0], np.float32)  # a_choice, m_multi(2), z_param(2)
    env_a = spec.to_env(flat)
    assert isinstance(env_a, dict) and set(env_a) == {"a_choice", "m_multi", "z_param"}
    assert env_a["a_choice"] == 2
    np.testing.assert_array_equal(env_a["m_multi"], [1, 4])
    np.testing.assert_allclose(env_a["z_param"], [2.0, 4.0], atol=1e-6)
    assert DICT.contains(env_a)
    np.testing.assert_allclose(spec.from_env(env_a), flat, atol=1e-6)
    rng = _rng(4)
    for _ in range(50):
        f = spec.sample(rng)
        np.testing.assert_allclose(spec.from_env(spec.to_env(f)), f, atol=1e-5)


def test_split_returns_component_parts():
    spec = ActionSpec.from_gym(DICT)
    parts = spec.split(np.arange(10, dtype=np.float32).reshape(2, 5))
    assert [p.shape for p in parts] == [(2, 1), (2, 2), (2, 2)]
    np.testing.assert_array_equal(parts[2], [[3, 4], [8, 9]])


def test_describe():
    assert ActionSpec.from_gym(BOX).describe() == "continuous(3)"
    assert ActionSpec.from_gym(spaces.Discrete(4)).describe() == "discrete(4)"
    assert "hybrid(" in ActionSpec.from_gym(TUPLE).describe()


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("space, words", [
    (spaces.Box(-np.inf, np.inf, (2,), np.float32), "finite"),
    (spaces.Box(np.array([-1.0, -np.inf], np.float32), np.array([1.0, 1.0], np.float32)),
     "finite"),
    (spaces.Box(-1.0, 1.0, (2, 3), np.float32), "1-D"),
    (spaces.Box(-1.0, 1.0, (), np.float32), "1-D"),
    (spaces.Discrete(3, start=1), "start at 0"),
    (spaces.MultiBinary(3), "unsupported"),
    (spaces.Text(5), "unsupported"),
    (spaces.Tuple((spaces.Discrete(2), spaces.Tuple((spaces.Discrete(2),)))), "nested"),
    (spaces.Tuple((spaces.Discrete(2), spaces.Box(-np.inf, 0.0, (1,), np.float32))), "finite"),
], ids=["unbounded", "half-unbounded", "2d-box", "0d-box", "discrete-start", "multibinary",
        "text", "nested-hybrid", "hybrid-unbounded"])
def test_unsupported_spaces_raise(space, words):
    with pytest.raises(OffpolicyError, match=words):
        ActionSpec.from_gym(space)


def test_continuous_bounds_errors():
    with pytest.raises(OffpolicyError, match="high > low"):
        ActionSpec.continuous([0.0, 1.0], [1.0, 1.0])
    with pytest.raises(OffpolicyError, match="1-D"):
        ActionSpec.continuous([0.0, 1.0], [1.0, 2.0, 3.0])


def test_error_is_one_line():
    with pytest.raises(OffpolicyError) as e:
        ActionSpec.from_gym(spaces.Box(-np.inf, np.inf, (2,), np.float32))
    assert "\n" not in str(e.value)


def test_make_env_action_spec_for_pendulum():
    from offpolicy.envs.make import action_spec, make_env, observation_shape

    env = make_env("Pendulum-v1", seed=0)
    spec = action_spec(env)
    assert spec.kind == "continuous" and spec.flat_dim == 1
    assert observation_shape(env) == (3,)
    np.testing.assert_allclose(spec.to_env(np.ones(1)), [2.0])
    assert isinstance(env.action_space, gym.spaces.Box)
