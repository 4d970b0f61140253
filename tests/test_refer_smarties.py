"""The authors' preset (``--preset smarties``, issue 68): its beta / c_max / learning-rate
recursion against a plain loop of Eq. 12-13 as smarties runs it (edaef91), and the DDPG
choices it switches on (initialisation, L2 on biases, simultaneous update, truncation)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offpolicy import registry
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError
from offpolicy.networks import MLP, l2_kernels
from offpolicy.replay import refer
from offpolicy.training.build import build_agent


def smarties_schedule(far_fractions, C, A, D, eta, beta0, step):
    """Eq. 12-13 as smarties (edaef91, Learner_offPolicy.h/.cpp) runs them, one gradient step
    k at a time: batch k uses beta_k and c_k = 1 + C / (1 + A k); its Adam step has the rate
    eta / (1 + A (k + 1)); then beta_{k+1} = (1 - step) beta_k + step [n_far / N <= D]."""
    beta, out = beta0, []
    for k, f in enumerate(far_fractions):
        out.append((beta, 1.0 + C / (1.0 + A * k), eta / (1.0 + A * (k + 1))))
        beta = (1.0 - step) * beta + (step if f <= D else 0.0)
    return np.array(out)


def test_the_authors_preset_runs_beta_c_and_eta_as_the_plain_loop():
    run = registry.resolve("ddpg", preset="smarties")
    tc = run.train
    assert (tc.replay, tc.refer_beta0, tc.refer_beta_step) == ("refer", 0.0, 1e-4)
    assert (tc.warmup_steps, tc.buffer_size, tc.batch_size) == (2**18, 2**18, 128)
    settings = registry.replay_settings(tc)
    rng = np.random.default_rng(0)
    steps = 10_000
    # far fractions around D, in runs, so that beta climbs and falls
    far = np.repeat(rng.uniform(0.0, 2 * settings.far_fraction, steps // 50), 50)
    far = far.astype(np.float32)

    def one(state, f):
        rho = jnp.ones(4)  # the rule quantities below do not depend on the batch's rho
        _, beta, new, cmax, _ = refer.rules(settings, state, rho, f)
        return new, (beta, cmax)

    _, (beta, cmax) = jax.lax.scan(jax.jit(one), refer.init_state(settings), jnp.asarray(far))
    lr = refer.annealed_lr(run.agent.critic_lr, settings.anneal)
    eta = np.array([lr(k) for k in range(steps)])
    want = smarties_schedule(far, settings.c, settings.anneal, settings.far_fraction,
                             run.agent.critic_lr, 0.0, 1e-4)
    np.testing.assert_allclose(np.asarray(beta), want[:, 0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(cmax), want[:, 1], rtol=1e-6)
    np.testing.assert_allclose(eta, want[:, 2], rtol=1e-6)
    assert want[:, 0].max() > 0.2  # the loop went somewhere: beta rose from 0


def test_the_authors_preset_keeps_its_settings_under_plain_replay():
    er = registry.resolve("ddpg", preset="smarties", train_overrides={"replay": "er"})
    assert (er.agent.noise, er.agent.noise_dt, er.train.warmup_steps) == ("ou", 1.0, 2**18)
    with pytest.raises(OffpolicyError, match="refer-truncation needs --replay refer"):
        registry.resolve("ddpg", train_overrides={"replay": "er"},
                         agent_overrides={"refer_truncation": 3.0})


def test_smarties_init_draws_biases_as_the_weights():
    net = MLP((64, 32), "softsign", out=3, init_scheme="smarties")
    p = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 10)))["params"]
    for name, fan_in, fan_out in (("Dense_0", 10, 64), ("Dense_1", 64, 32)):
        bound = np.sqrt(6.0 / (fan_in + fan_out))
        for leaf in ("kernel", "bias"):
            x = np.asarray(p[name][leaf])
            assert np.abs(x).max() <= bound and np.abs(x).max() > 0.5 * bound, (name, leaf)
    out = np.sqrt(1.0 / 32) * 0.1
    for leaf in ("kernel", "bias"):
        x = np.asarray(p["Dense_2"][leaf])
        assert np.abs(x).max() <= out and np.abs(x).max() > 0.3 * out
    assert float(l2_kernels(p, biases=True)) == pytest.approx(
        sum(float(np.sum(np.asarray(v) ** 2)) for v in jax.tree_util.tree_leaves(p)), rel=1e-5)
    assert float(l2_kernels(p)) < float(l2_kernels(p, biases=True))


def _ddpg(**agent):
    run = registry.resolve("ddpg", train_overrides={"replay": "er"},
                           agent_overrides={"hidden": (16, 16), **agent})
    return build_agent(run, (3,), ActionSpec.continuous(-np.ones(2), np.ones(2)))


def _batch(seed=5):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(8, 3)).astype(np.float32),
            "action": rng.uniform(-1, 1, size=(8, 2)).astype(np.float32),
            "reward": rng.normal(size=8).astype(np.float32),
            "next_obs": rng.normal(size=(8, 3)).astype(np.float32),
            "discount": np.ones(8, np.float32)}


def test_a_simultaneous_update_ascends_the_critic_before_its_step():
    b = _batch()
    key = jax.random.PRNGKey(1)
    simultaneous = _ddpg(simultaneous_update=True, critic_lr=1e-2)
    state = simultaneous.init(jax.random.PRNGKey(0))
    new, _, _ = simultaneous.update(state, b, key)
    # the same actor step against a critic that does not move (a vanishing critic rate)
    frozen = _ddpg(critic_lr=1e-30)
    ref, _, _ = frozen.update(state, b, key)
    sequential = _ddpg(critic_lr=1e-2)
    seq, _, _ = sequential.update(state, b, key)
    for k in simultaneous.actor_keys:
        for x, y in zip(jax.tree_util.tree_leaves(new.params[k]),
                        jax.tree_util.tree_leaves(ref.params[k])):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-8)
    assert any(not np.allclose(np.asarray(x), np.asarray(z)) for x, z in zip(
        jax.tree_util.tree_leaves(new.params["actor"]),
        jax.tree_util.tree_leaves(seq.params["actor"])))


def test_truncated_exploration_stays_within_three_sigma():
    run = registry.resolve("ddpg", preset="smarties", agent_overrides={"hidden": (16, 16)})
    agent = build_agent(run, (3,), ActionSpec.continuous(-np.ones(2), np.ones(2)))
    state = agent.init(jax.random.PRNGKey(0))
    params = agent.acting_params(state)
    obs = jnp.zeros((4096, 3))
    a, info = agent.policy(params, obs, jax.random.PRNGKey(3), True)
    z = (np.asarray(a) - np.asarray(info["mean"])) / agent.sigma
    assert np.abs(z).max() <= 3.0 + 1e-5 and np.abs(z).max() > 2.5
    assert np.std(z) == pytest.approx(0.986, abs=0.03)  # a 3-sigma truncated normal's std
