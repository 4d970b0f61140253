"""AQL's proposal (offpolicy.agents.aql_proposal.Proposal): autoregressive sampling and
log-probabilities agree (sampled frequencies against exp(log mu)) for categorical, Gaussian and
hybrid sub-actions; log mu normalises; the independent variant ignores the prefix; entropy is
the sum of the conditional entropies along the prefix."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offpolicy.agents.aql_proposal import Proposal

N = 40_000


def _setup(sub_actions, autoregressive=True, seed=0, scale=3.0):
    p = Proposal(tuple(sub_actions), autoregressive=autoregressive)
    params = p.init(jax.random.PRNGKey(seed), 4)
    # larger weights than the init so that the prefix visibly changes the conditionals
    params = jax.tree_util.tree_map(lambda x: x * scale, params)
    features = jax.random.normal(jax.random.PRNGKey(seed + 1), (4,))
    return p, params, features


@pytest.mark.parametrize("autoregressive", [True, False])
def test_categorical_frequencies_match_exp_log_prob(autoregressive):
    p, params, f = _setup([("discrete", 3), ("discrete", 2), ("discrete", 3)], autoregressive)
    actions, log_prob = p.sample(params, f, jax.random.PRNGKey(7), N)
    every = np.array(list(itertools.product(range(3), range(2), range(3))), np.float32)
    probs = np.exp(np.asarray(p.log_prob(params, f, jnp.asarray(every))))
    assert probs.sum() == pytest.approx(1.0, abs=1e-5)
    a = np.asarray(actions).astype(int)
    counts = np.array([np.sum(np.all(a == e, axis=-1)) for e in every.astype(int)])
    # each frequency within 4 binomial standard errors of its probability
    se = np.sqrt(probs * (1 - probs) / N)
    assert np.all(np.abs(counts / N - probs) <= 4 * se + 1e-4), (counts / N, probs)
    # sample's own log-probabilities are those of teacher forcing
    np.testing.assert_allclose(log_prob, p.log_prob(params, f, actions), atol=1e-5)


def test_autoregressive_conditionals_depend_on_the_prefix_and_independent_do_not():
    for autoregressive in (True, False):
        p, params, f = _setup([("discrete", 3), ("discrete", 3)], autoregressive)
        second = [np.asarray(p.probabilities(params, f, jnp.array([[k, 0.0]]))[1])[0]
                  for k in range(3)]
        differ = not np.allclose(second[0], second[1], atol=1e-6)
        assert differ == autoregressive


def test_gaussian_sub_action_density_and_conditional_mean():
    p, params, f = _setup([("discrete", 2), ("continuous", 1)], scale=1.0)
    actions, _ = p.sample(params, f, jax.random.PRNGKey(3), N)
    a = np.asarray(actions)
    for k in range(2):
        rows = a[a[:, 0] == k]
        mean = float(np.asarray(p.probabilities(params, f, jnp.array([[k, 0.0]]))[1])[0, 0])
        # the histogram of the unclipped interior against exp(log mu_2(x | k)) on bins
        inside = rows[(rows[:, 1] > -0.95) & (rows[:, 1] < 0.95), 1]
        edges = np.linspace(-0.95, 0.95, 11)
        hist, _ = np.histogram(inside, edges)
        dens = np.exp(-0.5 * ((edges[:-1] + edges[1:]) / 2 - mean) ** 2 / 0.25) / math.sqrt(
            2 * math.pi * 0.25)
        expected = dens * np.diff(edges) * len(rows)
        assert np.all(np.abs(hist - expected) <= 5 * np.sqrt(expected) + 0.02 * expected)
        # clipped to the box
        assert rows[:, 1].min() >= -1.0 and rows[:, 1].max() <= 1.0


def test_hybrid_joint_log_prob_factorises():
    p, params, f = _setup([("discrete", 3), ("continuous", 1), ("discrete", 2)], scale=1.0)
    actions, log_prob = p.sample(params, f, jax.random.PRNGKey(5), 64)
    a = np.asarray(actions)
    first, mean, third = (np.asarray(x) for x in p.probabilities(params, f, actions))
    rows = np.arange(64)
    manual = (np.log(first[rows, a[:, 0].astype(int)])
              - 0.5 * ((a[:, 1] - mean[:, 0]) / 0.5) ** 2 - math.log(0.5 * math.sqrt(2 * math.pi))
              + np.log(third[rows, a[:, 2].astype(int)]))
    np.testing.assert_allclose(log_prob, manual, rtol=1e-4, atol=1e-4)


def test_entropy_is_the_sum_of_conditional_entropies():
    p, params, f = _setup([("discrete", 3), ("continuous", 1)], scale=1.0)
    actions = jnp.array([[1.0, 0.3], [2.0, -0.4]])
    stats = p.probabilities(params, f, actions)
    q = np.asarray(stats[0])
    expected = -np.sum(q * np.log(q), -1) + math.log(0.5) + 0.5 + 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(p.entropy(params, f, actions), expected, rtol=1e-5)


def test_batched_over_states_and_jittable():
    p, params, _ = _setup([("discrete", 3), ("continuous", 1)])
    features = jax.random.normal(jax.random.PRNGKey(9), (5, 4))
    sample = jax.jit(p.sample, static_argnums=3)
    actions, log_prob = sample(params, features, jax.random.PRNGKey(1), 7)
    assert actions.shape == (5, 7, 2) and log_prob.shape == (5, 7)
    grads = jax.grad(lambda q: -jnp.mean(p.log_prob(q, features, actions)))(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree_util.tree_leaves(grads))


def test_bad_sub_actions_raise():
    with pytest.raises(ValueError):
        Proposal((("discrete", 1),))
    with pytest.raises(ValueError):
        Proposal(())
