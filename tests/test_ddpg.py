"""The DDPG update against hand-written references: the bootstrap target, the critic's L2
penalty, the deterministic policy gradient and Shared-DDPG's stop-gradient on the critic's
state input (ACE paper baselines; Lillicrap et al. 2016 Eq. 4)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offpolicy import registry
from offpolicy.agents.ddpg import DDPG
from offpolicy.envs.spaces import ActionSpec

OBS, M, B = 5, 2, 6


def make_agent(algo="ddpg", **over):
    run = registry.resolve(algo, agent_overrides={"hidden": (8, 7), **over})
    return DDPG(run.agent, (OBS,), ActionSpec.continuous(-np.ones(M), np.ones(M)))


def random_params(agent, seed=0):
    params = agent.init(jax.random.PRNGKey(seed)).params
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    return jax.tree_util.tree_unflatten(
        tree, [0.5 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])


def batch(seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(B, OBS)).astype(np.float32),
            "action": rng.uniform(-1, 1, (B, M)).astype(np.float32),
            "reward": rng.normal(size=B).astype(np.float32),
            "next_obs": rng.normal(size=(B, OBS)).astype(np.float32),
            "discount": np.array([1, 0, 1, 1, 0, 1], np.float32),
            "mean": rng.uniform(-1, 1, (B, M)).astype(np.float32)}


def np_mlp(p, x, layers, out_tanh):
    """Dense layers in order, tanh between them (and on the output if ``out_tanh``)."""
    for i, name in enumerate(layers):
        x = x @ np.asarray(p[name]["kernel"], np.float64) + np.asarray(p[name]["bias"])
        if i < len(layers) - 1 or out_tanh:
            x = np.tanh(x)
    return x


def np_mu(agent, p, s):
    z = np.tanh(s @ np.asarray(p[agent._actor_enc]["Dense_0"]["kernel"], np.float64)
                + np.asarray(p[agent._actor_enc]["Dense_0"]["bias"]))
    mlp = p["actor"]["MLP_0"]
    return np_mlp(mlp, z, sorted(mlp), out_tanh=True)


def np_q(agent, p, s, a):
    z = np.tanh(s @ np.asarray(p[agent._critic_enc]["Dense_0"]["kernel"], np.float64)
                + np.asarray(p[agent._critic_enc]["Dense_0"]["bias"]))
    mlp = p["critic"]["MLP_0"]
    return np_mlp(mlp, np.concatenate([z, a], -1), sorted(mlp), out_tanh=False)[:, 0]


@pytest.mark.parametrize("algo", ["ddpg", "shared-ddpg"])
def test_target_is_r_plus_gamma_c_q_target(algo):
    agent = make_agent(algo)
    p, b = random_params(agent), batch()
    y = np.asarray(agent.bootstrap_target(p, b))
    s1 = b["next_obs"].astype(np.float64)
    want = b["reward"] + agent.config.gamma * b["discount"] * np_q(agent, p, s1,
                                                                    np_mu(agent, p, s1))
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    assert y[1] == pytest.approx(b["reward"][1])  # terminated: no bootstrap


@pytest.mark.parametrize("l2", [0.0, 1e-2])
def test_critic_loss_with_l2_on_kernels_only(l2):
    agent = make_agent(critic_l2=l2)
    p, b = random_params(agent, 3), batch(1)
    y = jnp.asarray(np.random.default_rng(2).normal(size=B), jnp.float32)
    cp = {k: p[k] for k in agent.critic_keys}
    loss, _ = agent.critic_loss(cp, p, b, y)
    q = np_q(agent, p, b["obs"].astype(np.float64), b["action"].astype(np.float64))
    kernels = sum(float(np.sum(np.asarray(leaf, np.float64) ** 2))
                  for path, leaf in jax.tree_util.tree_leaves_with_path(cp)
                  if "kernel" in jax.tree_util.keystr(path))
    want = 0.5 * np.mean((q - np.asarray(y)) ** 2) + l2 * kernels
    assert float(loss) == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize("algo", ["ddpg", "shared-ddpg"])
def test_actor_gradient_enters_through_mu_only(algo):
    """grad of -mean Q(sg(z_c), mu(s)) = VJP of mu with cotangent -dQ/da / B: with a shared
    encoder the critic's own use of z carries no actor gradient."""
    agent = make_agent(algo)
    p, b = random_params(agent, 5), batch(3)
    obs = jnp.asarray(b["obs"])
    ap = {k: p[k] for k in agent.actor_keys}
    got = jax.grad(agent.actor_loss)(ap, p, obs)

    zc = agent.encode(p, agent._critic_enc, obs)

    def q_of_a(a):
        return agent.critic_head.apply({"params": p["critic"]}, zc, a)

    def mu_of(ap_):
        return agent.mu({**p, **ap_}, obs)

    a, vjp = jax.vjp(mu_of, ap)
    dq_da = jax.vmap(jax.grad(lambda ai, zi: agent.critic_head.apply(
        {"params": p["critic"]}, zi[None], ai[None])[0]))(a, zc)
    want = vjp(-dq_da / B)[0]
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)
    assert q_of_a(a).shape == (B,)
    if algo == "shared-ddpg":
        enc = np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(got["encoder"])])
        assert np.abs(enc).max() > 0  # the actor trains the shared encoder through mu


def test_shared_encoder_without_actor_training_is_critic_only():
    agent = make_agent("shared-ddpg", actor_trains_encoder=False)
    assert agent.actor_keys == ("actor",) and "encoder" in agent.critic_keys


def test_update_returns_protocol_triple_and_moves_targets_by_tau():
    agent = make_agent()
    state = agent.init(jax.random.PRNGKey(0))
    new, metrics, writeback = agent.update(state, batch(), jax.random.PRNGKey(1))
    assert writeback == {} and {"critic_loss", "actor_loss", "q_mean"} <= set(metrics)
    tau = agent.config.tau
    for t0, p1, t1 in zip(jax.tree_util.tree_leaves(state.target),
                          jax.tree_util.tree_leaves(new.params),
                          jax.tree_util.tree_leaves(new.target)):
        np.testing.assert_allclose(np.asarray(t1), np.asarray(t0 + tau * (p1 - t0)),
                                   rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------- issue 20 options
def _layers(params):
    """(path, kernel, bias) of every linear layer."""
    out = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        if jax.tree_util.keystr(path).endswith("['kernel']"):
            bias_path = jax.tree_util.keystr(path)[:-len("['kernel']")]
            out.append((bias_path, np.asarray(leaf), path))
    flat = {jax.tree_util.keystr(p): np.asarray(v)
            for p, v in jax.tree_util.tree_leaves_with_path(params)}
    return [(name, k, flat[name + "['bias']"]) for name, k, _ in out]


@pytest.mark.parametrize("scheme", ["orthogonal", "refer", "lillicrap", "torch", "flax"])
def test_initialisation_schemes(scheme):
    agent = make_agent(init=scheme, hidden=(64, 48))
    params = agent.init(jax.random.PRNGKey(0)).params
    for name, kernel, bias in _layers(params):
        fan_in, output = kernel.shape[0], "Dense_1" in name and "MLP" in name  # 48 -> out
        bound = 1 / np.sqrt(fan_in)
        if scheme == "torch" or (scheme == "lillicrap" and not output):
            assert np.abs(kernel).max() <= bound and np.abs(bias).max() <= bound
            assert np.abs(kernel).max() > 0.8 * bound and np.abs(bias).max() > 0
        elif scheme == "lillicrap":
            assert np.abs(kernel).max() <= 3e-3 and np.abs(bias).max() <= 3e-3
        else:
            assert not bias.any()
        if scheme == "orthogonal" and not output:
            gram = kernel.T @ kernel if kernel.shape[0] >= kernel.shape[1] else kernel @ kernel.T
            np.testing.assert_allclose(gram, np.eye(len(gram)), atol=1e-4)
        if scheme == "refer" and output:
            assert np.abs(kernel).max() <= 0.1 * bound


def test_action_at_the_critic_input_matches_a_reference():
    agent = make_agent(action_input_layer=1)
    p = random_params(agent)
    assert p["critic_encoder"]["Dense_0"]["kernel"].shape == (OBS + M, 8)
    rng = np.random.default_rng(3)
    s, a = rng.normal(size=(B, OBS)), rng.uniform(-1, 1, (B, M))
    x = np.concatenate([s, a], -1)
    z = np.tanh(x @ np.asarray(p["critic_encoder"]["Dense_0"]["kernel"], np.float64)
                + np.asarray(p["critic_encoder"]["Dense_0"]["bias"]))
    mlp = p["critic"]["MLP_0"]
    want = np_mlp(mlp, z, sorted(mlp), out_tanh=False)[:, 0]
    got = agent.q(p, s.astype(np.float32), a.astype(np.float32))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    # the actor's gradient reaches the actor only, through Q(s, mu(s))
    ap = {k: p[k] for k in agent.actor_keys}
    g = jax.grad(agent.actor_loss)(ap, p, s.astype(np.float32))
    assert set(g) == {"actor", "actor_encoder"}
    assert all(np.abs(np.asarray(x)).max() > 0 for x in jax.tree_util.tree_leaves(g))
    state = agent.init(jax.random.PRNGKey(0))
    new, _, _ = agent.update(state, batch(), jax.random.PRNGKey(1))
    assert new.params["critic_encoder"]["Dense_0"]["kernel"].shape == (OBS + M, 8)


def test_action_at_input_needs_separate_first_layers_and_sb3_preset_resolves():
    from offpolicy.errors import OffpolicyError

    with pytest.raises(OffpolicyError, match="action-input-layer 1"):
        make_agent("shared-ddpg", action_input_layer=1)
    run = registry.resolve("ddpg", preset="sb3")
    assert (run.agent.action_input_layer, run.agent.init, run.agent.actor_lr,
            run.agent.critic_lr) == (1, "torch", 1e-3, 1e-3)
    # fast: the paper's configuration but for where the action enters the critic
    fast, paper = registry.resolve("ddpg", preset="fast"), registry.resolve("ddpg")
    assert fast.agent == dataclasses.replace(paper.agent, action_input_layer=1)
    assert fast.train == paper.train
