"""--discretize K, the sub-action view and the candidate-action helpers for AQL.

* ``ActionSpec.discretized``: K evenly spaced levels of the agent's box, mapped to the env's
  bounds by ``to_env`` and back to the nearest level by ``from_env``; hybrids keep their layout;
* a run with ``--discretize 5`` on Pendulum-v1 acts through multi_discrete([5]) everywhere
  (training copies, warm-up, evaluation), with a uniform toy agent registered for the test;
* ``sub_actions`` / ``sub_action_indices`` per kind;
* ``uniform_actions`` (frequencies, ranges), ``embed`` (values per kind, hybrid "chosen" vs
  "full"), ``enumerate_actions`` (count, order, error), all jittable.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium import spaces

from offpolicy import registry
from offpolicy.agents.base import transitions
from offpolicy.envs.action_embedding import (
    embed,
    embed_dim,
    enumerate_actions,
    uniform_actions,
)
from offpolicy.envs.make import action_spec, make_env
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError
from offpolicy.training.run import Run

LEVELS5 = [-1.0, -0.5, 0.0, 0.5, 1.0]


def _spec(space) -> ActionSpec:
    return ActionSpec.from_gym(space)


def _box(low, high, n=1) -> spaces.Box:
    return spaces.Box(np.full(n, low, np.float32), np.full(n, high, np.float32))


CONT2 = _spec(_box(-1.0, 1.0, 2))
DISC3 = _spec(spaces.Discrete(3))
MULTI23 = _spec(spaces.MultiDiscrete([2, 3]))
HYB = _spec(spaces.Tuple((spaces.Discrete(3), _box(-1.0, 1.0, 3))))  # one parameter per choice


# ---------------------------------------------------------------------- discretized specs
def test_levels_for_k5_and_pendulum_bounds():
    env = make_env("Pendulum-v1", 0)
    spec = action_spec(env, 5)
    env.close()
    assert spec.kind == "multi_discrete" and spec.nvec == (5,) and spec.levels == 5
    assert spec.describe() == "multi_discrete([5])"
    assert spec.flat_dim == 1 and spec.dim == 0  # no continuous noise applies to it
    np.testing.assert_array_equal(spec.level_values, LEVELS5)
    env_values = [spec.to_env(np.array([i], np.float32)) for i in range(5)]
    np.testing.assert_array_equal(np.concatenate(env_values), [-2.0, -1.0, 0.0, 1.0, 2.0])
    assert all(v.shape == (1,) and v.dtype == np.float32 for v in env_values)


def test_levels_map_to_asymmetric_bounds_per_dimension():
    spec = _spec(spaces.Box(np.array([0.0, -3.0], np.float32),
                            np.array([10.0, 1.0], np.float32))).discretized(3)
    assert spec.nvec == (3, 3)
    np.testing.assert_allclose(spec.to_env(np.array([0, 2], np.float32)), [0.0, 1.0])
    np.testing.assert_allclose(spec.to_env(np.array([1, 1], np.float32)), [5.0, -1.0])
    np.testing.assert_allclose(spec.to_env(np.array([2, 0], np.float32)), [10.0, -3.0])


def test_from_env_rounds_to_the_nearest_level():
    spec = _spec(_box(-2.0, 2.0)).discretized(5)
    cases = {-2.0: 0, -1.6: 0, -1.4: 1, -0.6: 1, -0.4: 2, 0.3: 2, 0.6: 3, 1.49: 3, 1.51: 4,
             2.0: 4, 5.0: 4, -7.0: 0}
    for env_value, level in cases.items():
        got = spec.from_env(np.array([env_value], np.float32))
        assert got.dtype == np.float32 and got.tolist() == [level], env_value
    for i in range(5):  # round trip
        assert spec.from_env(spec.to_env(np.array([i], np.float32))).tolist() == [i]


def test_discretize_validation_and_no_op_cases():
    assert CONT2.discretized(0) is CONT2
    for spec in (DISC3, MULTI23):  # nothing continuous: unchanged
        assert spec.discretized(5) is spec
    for bad in (1, -1, 2.5, True):
        with pytest.raises(OffpolicyError, match="--discretize") as e:
            CONT2.discretized(bad)
        assert "\n" not in str(e.value)
    assert CONT2.discretized(2).level_values.tolist() == [-1.0, 1.0]


def test_hybrid_discretization_keeps_the_layout():
    d = HYB.discretized(5)
    assert d.describe() == "hybrid(discrete(3), multi_discrete([5, 5, 5]))"
    assert d.flat_dim == HYB.flat_dim == 4
    env_action = d.to_env(np.array([2, 0, 2, 4], np.float32))
    assert isinstance(env_action, tuple) and env_action[0] == 2
    np.testing.assert_array_equal(env_action[1], [-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(d.from_env((1, np.array([0.26, -0.76, 0.9], np.float32))),
                                  [1, 3, 0, 4])
    # a Dict keeps its keys; the Box inside is discretized to its own bounds
    dct = _spec(spaces.Dict({"choice": spaces.Discrete(2), "param": _box(0.0, 4.0, 2)}))
    dd = dct.discretized(3)
    assert dd.describe() == "hybrid(discrete(2), multi_discrete([3, 3]))"
    out = dd.to_env(np.array([1, 0, 2], np.float32))
    assert out["choice"] == 1
    np.testing.assert_array_equal(out["param"], [0.0, 4.0])


# ---------------------------------------------------------------------- a run with --discretize
@dataclass
class UniformConfig:
    pass


class UniformAgent:
    """Acts uniformly over the spec's sub-actions when exploring, the highest level when not;
    its update changes nothing."""

    data = transitions()
    behaviour_fields: dict = {}
    writeback_fields: dict = {}
    exploration_noise = None

    def __init__(self, config, obs_shape, spec, context=None):
        self.spec = spec

    def init(self, key):
        return {"w": jnp.zeros(())}

    def acting_params(self, state):
        return state

    def policy(self, params, obs, key, explore: bool):
        n = obs.shape[0]
        if explore:
            return uniform_actions(key, self.spec, (n,)), {}
        top = jnp.array([n_ - 1 for _, n_ in self.spec.sub_actions()], jnp.float32)
        return jnp.broadcast_to(top, (n, self.spec.flat_dim)) + 0.0 * params["w"], {}

    def update(self, state, batch, key):
        return state, {"loss": jnp.mean(batch["action"]) * 0.0}, {}


@pytest.fixture
def uniform_registered():
    registry.ALGORITHMS["toy-uniform"] = registry.Algorithm(
        "toy-uniform", "uniform", UniformConfig, f"{__name__}:UniformAgent",
        ("multi_discrete",), "uniform actions over a discrete spec (tests)")
    yield
    registry.ALGORITHMS.pop("toy-uniform")


def test_run_with_discretize_acts_through_levels_everywhere(uniform_registered, monkeypatch):
    """No registered algorithm takes multi_discrete actions yet (AQL will): a toy one does."""
    sent = []
    to_env = ActionSpec.to_env
    monkeypatch.setattr(ActionSpec, "to_env",
                        lambda self, a: sent.append(to_env(self, a)) or sent[-1])
    run = registry.resolve("toy-uniform", train_overrides={
        "env": "Pendulum-v1", "discretize": 5, "steps": 60, "warmup_steps": 20,
        "batch_size": 8, "eval_every": 60, "eval_episodes": 1, "num_envs": 2, "quiet": True})
    t = Run(run, None)
    assert t.spec.describe() == "multi_discrete([5])" and t.spec.levels == 5
    t.train(until=60)
    assert t._collector.envs.spec is t.spec and t._evaluator.spec is t.spec
    stored = t.replay.valid_values("action")[:, 0]
    assert set(np.unique(stored).tolist()) <= set(range(5)) and len(np.unique(stored)) > 1
    values = np.concatenate(sent)
    assert set(np.unique(values).tolist()) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert len(values) >= 60 + 200  # training steps + one evaluation episode (greedy: 2.0)
    assert t.eval_history and np.all(values[-200:] == 2.0)


def test_run_rejects_one_level_and_unsupported_kinds():
    with pytest.raises(OffpolicyError, match="--discretize"):
        Run(registry.resolve("ddpg", train_overrides={"discretize": 1}), None)
    with pytest.raises(OffpolicyError, match=r"multi_discrete\(\[5\]\)"):
        Run(registry.resolve("ddpg", train_overrides={"discretize": 5}), None)


def test_discretize_zero_is_the_default_and_negative_is_refused():
    assert registry.resolve("ddpg").train.discretize == 0
    with pytest.raises(OffpolicyError, match="--discretize: must be >= 0"):
        registry.resolve("ddpg", train_overrides={"discretize": -2})


# ---------------------------------------------------------------------- sub-actions
@pytest.mark.parametrize("spec, expected", [
    (CONT2, [("continuous", 1), ("continuous", 1)]),
    (DISC3, [("discrete", 3)]),
    (MULTI23, [("discrete", 2), ("discrete", 3)]),
    (HYB, [("discrete", 3), ("continuous", 1), ("continuous", 1), ("continuous", 1)]),
    (HYB.discretized(5), [("discrete", 3), ("discrete", 5), ("discrete", 5), ("discrete", 5)]),
    (CONT2.discretized(7), [("discrete", 7), ("discrete", 7)]),
])
def test_sub_actions_and_their_flat_indices(spec, expected):
    subs = spec.sub_actions()
    assert list(subs) == expected
    assert all(s.kind == k and s.n == n for s, (k, n) in zip(subs, expected))
    assert spec.sub_action_indices() == tuple(range(spec.flat_dim))
    assert len(subs) == spec.flat_dim


# ---------------------------------------------------------------------- uniform_actions
@pytest.mark.parametrize("spec", [DISC3, MULTI23, HYB.discretized(5)], ids=str)
def test_uniform_discrete_frequencies(spec):
    n_samples = 20_000
    a = np.asarray(uniform_actions(jax.random.PRNGKey(1), spec, n_samples))
    assert a.shape == (n_samples, spec.flat_dim) and a.dtype == np.float32
    for j, (_, n) in enumerate(spec.sub_actions()):
        assert np.all(a[:, j] == np.round(a[:, j]))
        counts = np.bincount(a[:, j].astype(int), minlength=n)
        assert counts.size == n  # nothing outside 0..n-1
        expected = n_samples / n
        chi2 = np.sum((counts - expected) ** 2 / expected)
        assert chi2 < 3 * (n - 1) + 15, (j, counts)  # df = n-1; far above the 99.9% point


def test_uniform_continuous_range_and_moments():
    a = np.asarray(uniform_actions(jax.random.PRNGKey(2), HYB, (100, 50)))
    assert a.shape == (100, 50, 4)
    x = a[..., 1:].ravel()
    assert x.min() >= -1.0 and x.max() <= 1.0 and x.min() < -0.99 and x.max() > 0.99
    assert abs(x.mean()) < 0.02 and abs(x.var() - 1 / 3) < 0.01  # U(-1, 1): 0 and 1/3
    hist, _ = np.histogram(x, bins=10, range=(-1, 1))
    assert hist.min() > 0.9 * x.size / 10
    counts = np.bincount(a[..., 0].astype(int).ravel(), minlength=3)
    assert counts.size == 3 and counts.min() > 0.3 * a[..., 0].size


def test_uniform_actions_jit_and_keys():
    spec = HYB.discretized(5)
    f = jax.jit(lambda k: uniform_actions(k, spec, (8, 4)))
    a = f(jax.random.PRNGKey(0))
    assert a.shape == (8, 4, 4)
    np.testing.assert_array_equal(a, uniform_actions(jax.random.PRNGKey(0), spec, (8, 4)))
    assert not np.array_equal(a, f(jax.random.PRNGKey(1)))
    assert uniform_actions(jax.random.PRNGKey(0), DISC3).shape == (1,)  # shape () -> one action


# ---------------------------------------------------------------------- embed
def test_embed_each_kind():
    c = jnp.array([[0.25, -1.0], [1.0, 0.5]])
    np.testing.assert_array_equal(embed(CONT2, c), c)
    assert embed_dim(CONT2) == 2
    d = embed(DISC3, jnp.array([[0.0], [2.0]]))
    np.testing.assert_array_equal(d, [[1, 0, 0], [0, 0, 1]])
    assert embed_dim(DISC3) == 3
    m = embed(MULTI23, jnp.array([[1.0, 0.0], [0.0, 2.0]]))
    np.testing.assert_array_equal(m, [[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]])
    assert embed_dim(MULTI23) == 5
    k = CONT2.discretized(5)
    np.testing.assert_array_equal(embed(k, jnp.array([[4.0, 1.0]])),
                                  [[0, 0, 0, 0, 1, 0, 1, 0, 0, 0]])
    assert embed_dim(k) == 10


def test_embed_hybrid_chosen_and_full():
    a = jnp.array([[1.0, 0.3, -0.7, 0.9], [2.0, 0.3, -0.7, 0.9], [0.0, 0.3, -0.7, 0.9]])
    chosen = embed(HYB, a)  # the default
    np.testing.assert_allclose(chosen, [[0, 1, 0, -0.7], [0, 0, 1, 0.9], [1, 0, 0, 0.3]])
    assert embed_dim(HYB) == embed_dim(HYB, "chosen") == 4
    full = embed(HYB, a, hybrid="full")
    np.testing.assert_allclose(full[0], [0, 1, 0, 0.3, -0.7, 0.9])
    assert embed_dim(HYB, "full") == 6
    # the chosen embedding ignores the parameters of the choices not taken
    other = a.at[:, 1].set(-0.1)
    np.testing.assert_array_equal(embed(HYB, other)[:2], chosen[:2])
    # discretized parameters: the chosen one's level as a one-hot
    d = HYB.discretized(5)
    x = jnp.array([[2.0, 0.0, 1.0, 3.0]])
    np.testing.assert_array_equal(embed(d, x), [[0, 0, 1, 0, 0, 0, 1, 0]])
    assert embed_dim(d) == 8
    np.testing.assert_array_equal(embed(d, x, "full"),
                                  [[0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0]])
    assert embed_dim(d, "full") == 3 + 3 * 5


def test_embed_other_hybrid_layouts_chosen_equals_full():
    others = [
        _spec(spaces.Tuple((spaces.Discrete(3), _box(-1.0, 1.0, 2)))),  # 2 params, 3 choices
        _spec(spaces.Tuple((_box(-1.0, 1.0, 3), spaces.Discrete(3)))),  # continuous first
        _spec(spaces.Tuple((spaces.Discrete(2), spaces.MultiDiscrete([4, 4])))),  # native
        _spec(spaces.Tuple((spaces.Discrete(2), _box(-1.0, 1.0, 2), spaces.Discrete(2)))),
    ]
    for spec in others:
        a = uniform_actions(jax.random.PRNGKey(3), spec, (6,))
        np.testing.assert_array_equal(embed(spec, a), embed(spec, a, "full"))
        assert embed_dim(spec) == embed_dim(spec, "full") == embed(spec, a).shape[-1]


def test_embed_shapes_jit_and_errors():
    spec = HYB.discretized(5)
    f = jax.jit(lambda k: embed(spec, uniform_actions(k, spec, (3, 7))))
    out = f(jax.random.PRNGKey(0))
    assert out.shape == (3, 7, embed_dim(spec)) and out.dtype == jnp.float32
    # every row: one choice and one level
    np.testing.assert_array_equal(out[..., :3].sum(-1), 1.0)
    np.testing.assert_array_equal(out[..., 3:].sum(-1), 1.0)
    for s in (CONT2, DISC3, MULTI23, HYB):
        a = uniform_actions(jax.random.PRNGKey(4), s, (5,))
        for mode in ("chosen", "full"):
            np.testing.assert_array_equal(jax.jit(lambda x, s=s, m=mode: embed(s, x, m))(a),
                                          embed(s, a, mode))
    with pytest.raises(OffpolicyError, match="chosen, full"):
        embed(HYB, jnp.zeros((1, 4)), hybrid="every")
    with pytest.raises(OffpolicyError, match="4 values"):
        embed(HYB, jnp.zeros((1, 3)))


# ---------------------------------------------------------------------- enumerate_actions
def test_enumerate_actions_count_and_order():
    got = enumerate_actions(MULTI23, limit=6)
    assert got.dtype == np.float32 and got.shape == (6, 2)
    np.testing.assert_array_equal(got, list(itertools.product(range(2), range(3))))
    np.testing.assert_array_equal(enumerate_actions(DISC3, 10), [[0], [1], [2]])
    d = HYB.discretized(5)
    all_actions = enumerate_actions(d, 1000)
    assert all_actions.shape == (3 * 5**3, 4)
    assert len({tuple(r) for r in all_actions.tolist()}) == len(all_actions)
    np.testing.assert_array_equal(all_actions[:2], [[0, 0, 0, 0], [0, 0, 0, 1]])
    np.testing.assert_array_equal(all_actions[-1], [2, 4, 4, 4])


def test_enumerate_actions_errors():
    with pytest.raises(OffpolicyError, match="375 actions.*limit of 374") as e:
        enumerate_actions(HYB.discretized(5), limit=374)
    assert "\n" not in str(e.value)
    with pytest.raises(OffpolicyError, match="continuous"):
        enumerate_actions(HYB, limit=10**6)
    with pytest.raises(OffpolicyError, match=r"\b5\*\*30\b|931322574615478515625"):
        enumerate_actions(_spec(_box(-1.0, 1.0, 30)).discretized(5), limit=10**6)



def test_env_copies_step_the_env_with_the_levels_values():
    """EnvCopies with the discretized spec steps plain Pendulum-v1 envs exactly as the level
    values themselves would (level 0 -> torque -2, level 4 -> +2)."""
    from offpolicy.envs.vector import EnvCopies

    probe = make_env("Pendulum-v1")
    spec = action_spec(probe, 5)
    probe.close()
    envs = EnvCopies("Pendulum-v1", 2, 3, spec)
    plain = [make_env("Pendulum-v1", 3 + i) for i in range(2)]
    try:
        envs.reset(3)
        for i, env in enumerate(plain):
            env.reset(seed=3 + i)
        for _ in range(3):
            got = envs.step(np.array([[0.0], [4.0]], np.float32))[0]
            want = [plain[0].step(np.array([-2.0], np.float32))[0],
                    plain[1].step(np.array([2.0], np.float32))[0]]
            np.testing.assert_array_equal(got, np.stack(want))
    finally:
        envs.close()
        for env in plain:
            env.close()


def test_async_env_copies_match_the_synchronous_ones_across_an_episode_end():
    """--async-envs: the subprocess copies (started by a fork server, not a fork of this
    JAX process) give the same transitions as the in-process ones, through Pendulum-v1's
    truncation at 200 steps and the same-step reset."""
    from offpolicy.envs.vector import EnvCopies

    probe = make_env("Pendulum-v1")
    spec = action_spec(probe)
    probe.close()
    sync, asyn = EnvCopies("Pendulum-v1", 2, 5, spec), EnvCopies("Pendulum-v1", 2, 5, spec, True)
    assert asyn._vec.context in ("forkserver", "spawn")  # never a fork of this process
    rng = np.random.default_rng(0)
    try:
        np.testing.assert_array_equal(sync.reset(5), asyn.reset(5))
        ended = 0
        for _ in range(203):
            a = rng.uniform(-1, 1, (2, 1)).astype(np.float32)
            for x, y in zip(sync.step(a), asyn.step(a)):
                np.testing.assert_allclose(x, y, rtol=1e-6)
            ended += int(x.any()) if x.dtype == bool else 0
        assert ended == 1  # both copies truncated together at step 200
    finally:
        sync.close()
        asyn.close()


def test_async_env_copies_know_envs_registered_in_this_process_and_platform():
    """A fresh worker does not inherit this process's registry: an id registered here at run
    time, and the library's own offpolicy/Platform-v0 (registered on first use), still work."""
    import gymnasium as gym

    from offpolicy.envs.platform import ENV_ID
    from offpolicy.envs.vector import EnvCopies

    gym.register("OffpolicyTestPendulum-v0",
                 entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",
                 max_episode_steps=20)
    try:
        for env_id, steps in (("OffpolicyTestPendulum-v0", 21), (ENV_ID, 5)):
            probe = make_env(env_id)
            spec = action_spec(probe)
            probe.close()
            envs = EnvCopies(env_id, 2, 0, spec, True)
            try:
                obs = envs.reset(0)
                assert obs.shape[0] == 2
                truncated = []
                for _ in range(steps):
                    a = np.zeros((2, spec.flat_dim), np.float32)
                    truncated.append(envs.step(a)[4])
                if env_id != ENV_ID:
                    assert np.asarray(truncated)[19].all()  # its registered time limit, 20
            finally:
                envs.close()
    finally:
        gym.registry.pop("OffpolicyTestPendulum-v0", None)
