"""AQL (offpolicy/agents/aql.py): the sampled argmax equals the exact argmax when N + M
covers a small action set; Peng's Q(lambda) targets of the update equal a plain loop on
random unrolls with terminations inside; CEM raises the maximum of a known quadratic Q over
its iterations; per-env epsilons; the update trains both networks and stays finite on
padding."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offpolicy import returns
from offpolicy.agents.aql import AQL
from offpolicy.config import AQLConfig
from offpolicy.envs.spaces import ActionSpec

SMALL = dict(hidden=(16, 16), proposal_hidden=(16,), proposal_samples=8, uniform_samples=64,
             unroll_length=5)


def _agent(spec, **over):
    return AQL(dataclasses.replace(AQLConfig(), **(SMALL | over)), (3,), spec)


def _md(nvec):
    return ActionSpec("multi_discrete", shape=(len(nvec),), nvec=tuple(nvec))


def test_sampled_argmax_equals_exact_argmax_on_a_small_action_set():
    spec = _md([3, 2])  # 6 actions; 64 uniform + 8 proposal samples cover them all
    exact = _agent(spec, search="exact")
    state = exact.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (50, 3))
    a_exact, q_exact, _ = exact.argmax(state.params, state.params["q"], obs,
                                       jax.random.PRNGKey(2))
    for search in ("proposal", "uniform"):
        for lookup in (False, True):
            agent = _agent(spec, search=search, lookup=lookup)
            assert (agent.table is not None) == lookup
            s = agent.init(jax.random.PRNGKey(0))  # same Q parameters (same key and layout)
            a, q, _ = agent.argmax(s.params, state.params["q"], obs,
                                   jax.random.PRNGKey(3))
            np.testing.assert_array_equal(np.asarray(a), np.asarray(a_exact))
            np.testing.assert_allclose(q, q_exact, rtol=1e-6)
    # and exact really is the maximum over every action
    every = exact.all_actions
    q_all = exact.q_values(state.params["q"], obs, jnp.broadcast_to(every, (50, 6, 2)))
    np.testing.assert_allclose(q_exact, np.max(np.asarray(q_all), -1), rtol=1e-6)


@pytest.mark.parametrize("spec", [
    _md([5, 5, 5]),  # 125 actions, 72 samples: the table holds actions no sample drew
    ActionSpec("hybrid", components=(ActionSpec("discrete", n=3),
                                     ActionSpec("multi_discrete", shape=(3,), nvec=(4, 4, 4),
                                                levels=4))),
])
def test_table_lookup_changes_nothing_but_the_work(spec):
    """Q looked up in the table of every action = Q of the candidates computed directly: same
    argmax, same value, same proposal statistics (ties aside, which random Q never has)."""
    over = dict(uniform_samples=64, proposal_samples=136)  # 200 >= 125 and 3 * 64 = 192
    plain, table = _agent(spec, lookup=False, **over), _agent(spec, **over)
    assert plain.table is None and table.table is not None
    state = plain.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (7, 4, 3))
    key = jax.random.PRNGKey(2)
    acts, _ = plain.candidates(state.params, obs, key)
    np.testing.assert_allclose(table.candidate_q_values(state.params["q"], obs, acts),
                               plain.q_values(state.params["q"], obs, acts), rtol=1e-5,
                               atol=1e-6)
    a0, q0, i0 = plain.argmax(state.params, state.params["q"], obs, key)
    a1, q1, i1 = table.argmax(state.params, state.params["q"], obs, key)
    np.testing.assert_array_equal(np.asarray(a0), np.asarray(a1))
    np.testing.assert_allclose(q0, q1, rtol=1e-5, atol=1e-6)
    for name in ("from_proposal", "q_gap", "first_uniform", "proposal_sample"):
        np.testing.assert_allclose(i0[name], i1[name], rtol=1e-5, atol=1e-6)


def test_table_is_not_built_when_the_samples_are_fewer_than_the_actions():
    assert _agent(_md([5, 5, 5])).table is None  # 125 actions > 8 + 64 samples
    assert _agent(_md([3, 2]), search="cem").table is None
    assert _agent(ActionSpec("continuous", shape=(2,))).table is None


@pytest.mark.parametrize("rows", [1, 7, 40, 42, 10_000])
def test_exact_search_in_chunks_is_the_brute_force_argmax(rows):
    """Chunks of exact_rows // states actions (1 action per chunk up to all at once; 42 rows
    at 6 states: chunks of 7, the last one padded with 3 copies of the last action) give the
    argmax over every action."""
    spec = _md([4, 3, 5])  # 60 actions
    agent = _agent(spec, search="exact", exact_rows=rows)
    state = agent.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (3, 2, 3))
    a, q, _ = agent.argmax(state.params, state.params["q"], obs, jax.random.PRNGKey(2))
    every = np.asarray(agent.all_actions)
    q_all = np.asarray(agent.q_values(state.params["q"], obs,
                                      jnp.broadcast_to(every, (3, 2, 60, 3))))
    np.testing.assert_array_equal(np.asarray(a), every[np.argmax(q_all, -1)])
    np.testing.assert_allclose(q, q_all.max(-1), rtol=1e-5, atol=1e-6)


def test_exact_search_breaks_ties_to_the_first_action_across_chunks():
    """A constant Q: every action ties, and the running max over chunks keeps the first."""
    agent = _agent(_md([4, 3, 5]), search="exact", exact_rows=42)  # 9 chunks at 6 states
    state = agent.init(jax.random.PRNGKey(0))
    q = jax.tree_util.tree_map(jnp.zeros_like, state.params["q"])
    obs = jax.random.normal(jax.random.PRNGKey(1), (3, 2, 3))
    a, v, _ = agent.argmax(state.params, q, obs, jax.random.PRNGKey(2))
    np.testing.assert_array_equal(np.asarray(a), np.zeros((3, 2, 3)))
    np.testing.assert_array_equal(np.asarray(v), np.zeros((3, 2)))


def _peng_reference(r, disc, next_q, mask, gamma, lam):
    t_len, b = r.shape
    g = np.zeros((t_len, b))
    for j in range(b):
        for t in reversed(range(t_len)):
            if mask[t, j] == 0:
                continue
            last = t + 1 >= t_len or mask[t + 1, j] == 0
            boot = next_q[t, j] if last else (1 - lam) * next_q[t, j] + lam * g[t + 1, j]
            g[t, j] = r[t, j] + gamma * disc[t, j] * boot
    return g


def test_update_targets_are_pengs_q_lambda(monkeypatch):
    agent = _agent(_md([3, 2]), search="exact")
    state = agent.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    t_len, b = 5, 4
    batch = {"obs": rng.normal(size=(t_len + 1, b, 3)).astype(np.float32),
             "action": rng.integers(0, 2, (t_len, b, 2)).astype(np.float32),
             "reward": rng.normal(size=(t_len, b)).astype(np.float32),
             "discount": np.ones((t_len, b), np.float32),
             "mask": np.ones((t_len, b), np.float32)}
    batch["discount"][2, 0] = 0.0  # a termination inside the window
    batch["mask"][3:, 0] = 0.0
    batch["mask"][4:, 1] = 0.0  # a window cut (truncation / end of data)
    captured = {}
    real = returns.lambda_returns

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        captured["g"] = out
        return out

    monkeypatch.setattr(returns, "lambda_returns", spy)
    agent.update(state, {k: jnp.asarray(v) for k, v in batch.items()}, jax.random.PRNGKey(1))
    # the reference's next values: Q(s_{t+1}, argmax_a Q(s_{t+1}, a)) over every action
    obs = jnp.asarray(batch["obs"][1:])
    every = jnp.broadcast_to(agent.all_actions, (t_len, b, 6, 2))
    next_q = np.max(np.asarray(agent.q_values(state.params["q"], obs, every)), -1)
    c = agent.config
    expected = _peng_reference(batch["reward"], batch["discount"], next_q, batch["mask"],
                               c.gamma, c.lambda_)
    np.testing.assert_allclose(np.asarray(captured["g"]), expected, rtol=1e-5, atol=1e-5)


def test_cem_raises_the_maximum_of_a_quadratic_over_iterations(monkeypatch):
    spec = ActionSpec.continuous(-np.ones(3), np.ones(3))
    target = jnp.array([0.3, -0.6, 0.8])
    best = []
    for iterations in (1, 2, 3):
        agent = _agent(spec, search="cem", cem_iterations=iterations, cem_samples=32,
                       cem_elites=4)
        monkeypatch.setattr(agent, "q_values", lambda p, obs, a: -jnp.sum((a - target) ** 2,
                                                                           -1))
        obs = jnp.zeros((200, 3))
        _, q, _ = agent.argmax(None, None, obs, jax.random.PRNGKey(0))
        best.append(float(jnp.mean(q)))
    assert best[0] < best[1] < best[2] <= 0.0, best


def test_per_env_epsilons():
    agent = _agent(_md([2]))
    np.testing.assert_allclose(agent.epsilons(20), [0.5, 0.5] + [0.05] * 18)
    np.testing.assert_allclose(agent.epsilons(4), [0.05] * 4)


@pytest.mark.parametrize("spec", [_md([3, 2]), ActionSpec.continuous(-np.ones(2), np.ones(2))])
def test_update_trains_q_and_proposal_and_is_finite_on_padding(spec):
    agent = _agent(spec)
    state = agent.init(jax.random.PRNGKey(0))
    t_len, b = 5, 3
    batch = {"obs": jnp.ones((t_len + 1, b, 3)), "action": jnp.zeros((t_len, b, spec.flat_dim)),
             "reward": jnp.ones((t_len, b)), "discount": jnp.ones((t_len, b)),
             "mask": jnp.zeros((t_len, b)).at[:2, 0].set(1.0)}
    new, metrics, wb = jax.jit(agent.update)(state, batch, jax.random.PRNGKey(1))
    assert wb == {}
    for k, v in metrics.items():
        assert np.all(np.isfinite(np.asarray(v))), k
    assert metrics["proposal_entropy"].shape == (spec.flat_dim,)
    for part in ("q", "proposal"):
        moved = [not np.allclose(a, b) for a, b in zip(
            jax.tree_util.tree_leaves(state.params[part]),
            jax.tree_util.tree_leaves(new.params[part]))]
        assert any(moved), part


def test_greedy_policy_is_the_argmax_and_exploring_takes_uniform_samples():
    agent = _agent(_md([3, 2]), search="exact", epsilon=1.0, explore_epsilon=1.0)
    state = agent.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (6, 3))
    greedy, _ = agent.policy(state.params, obs, jax.random.PRNGKey(2), False)
    a_star, _, _ = agent.argmax(state.params, state.params["q"], obs,
                                jax.random.split(jax.random.PRNGKey(2))[0])
    np.testing.assert_array_equal(greedy, a_star)
    explored = np.stack([np.asarray(agent.policy(state.params, obs, jax.random.PRNGKey(i),
                                                 True)[0]) for i in range(30)])
    assert len({tuple(x) for x in explored.reshape(-1, 2)}) == 6  # every action shows up


def test_proposal_figure_along_one_episode(tmp_path):
    from offpolicy import registry
    from offpolicy.plotting import plot_proposal
    from offpolicy.training.evaluation import trace_episode
    from offpolicy.training.run import Run

    run = Run(registry.resolve("aql", train_overrides={
        "env": "Pendulum-v1", "discretize": 5, "steps": 64, "eval_every": 64,
        "eval_episodes": 1, "batch_size": 4, "quiet": True},
        agent_overrides=SMALL | {"unroll_length": 4}), tmp_path / "r")
    run.train()
    trace = trace_episode(run, run.agent.inspect)
    assert trace["action"].shape == (200, 1) and trace["q_proposal"].shape == (200, 8)
    probs = trace["distributions"][0]
    assert probs.shape == (200, 5)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    out = plot_proposal(trace, run.agent.sub_actions, tmp_path / "p.png")
    assert out.stat().st_size > 10_000
    uniform = Run(registry.resolve("uniform-q", train_overrides={
        "env": "Pendulum-v1", "discretize": 5, "steps": 8, "quiet": True},
        agent_overrides=SMALL), None)
    with pytest.raises(Exception, match="needs a learned proposal"):
        trace_episode(uniform, uniform.agent.inspect)
