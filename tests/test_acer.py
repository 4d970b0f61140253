"""ACER (offpolicy.agents.acer) against plain-Python/NumPy references written from the paper
(Wang et al., 2017: Sec. 3-5, Appendix A Algorithms 2 and 3, Appendix D).

* The maths functions: the trust-region projection (Eq. 11-12) against its definition and a
  brute-force solve, the policy objectives' gradients against the closed forms of Algorithm 2's
  g and Eq. 16, the KL gradients k, and the truncation-with-bias-correction identity (Eq. 7)
  by exact enumeration.
* The agent end to end: its losses, metrics, gradients and its Q^ret / Q^opc targets (recorded
  from inside the loss) against a backward loop written line by line as Algorithm 2 / 3, on
  windows with a termination inside, a truncation inside (padded tail, bootstrap from the final
  observation), a termination and a truncation at the window's end, and never-written padding.
* The SDN's consistency (Eq. 13), the average network's soft update, the ablation switches,
  an all-padded batch, and deterministic acting.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

from offpolicy import returns
from offpolicy.agents.acer import (
    ACER,
    ContinuousNetwork,
    continuous_policy_objective,
    correction_weight,
    discrete_kl,
    discrete_policy_objective,
    gaussian_stats,
    per_step_grad,
    trust_region,
)
from offpolicy.agents.base import AgentContext
from offpolicy.config import ACERConfig
from offpolicy.distributions import Gaussian
from offpolicy.envs.spaces import ActionSpec

HIDDEN = (16, 16)
GAMMA = 0.9
OBS_DIM = 3
NUM_ACTIONS = 4
ACTION_DIM = 2
T = 6
# one window per column: (valid steps, how the last valid step ends)
WINDOWS = (
    (T, None),  # inside a longer episode: bootstrap from V(x_T)
    (3, "terminated"),  # termination inside the window, then padding
    (4, "truncated"),  # time limit inside the window: bootstrap from the final obs, padding
    (T, "terminated"),  # termination at the window's last step
    (T, "truncated"),  # truncation at the window's last step
    (1, "truncated"),  # a single step
)
B = len(WINDOWS)


# --------------------------------------------------------------------------- helpers
def discrete_spec():
    return ActionSpec("discrete", shape=(), n=NUM_ACTIONS)


def continuous_spec():
    return ActionSpec.continuous(-np.ones(ACTION_DIM), np.ones(ACTION_DIM))


def make_agent(discrete: bool, **overrides) -> ACER:
    cfg = ACERConfig(hidden=HIDDEN, activation="tanh", gamma=GAMMA, **overrides)
    spec = discrete_spec() if discrete else continuous_spec()
    return ACER(cfg, (OBS_DIM,), spec, AgentContext(segment_length=T))


def perturbed(tree, key, scale):
    """The tree with N(0, scale^2) noise on every leaf (a policy away from uniform / zero mean,
    and an average network away from the current one, so the trust region has work to do)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    keys = jax.random.split(key, len(leaves))
    return jax.tree_util.tree_unflatten(
        treedef, [x + scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)])


def agent_and_state(discrete: bool, seed: int = 0, params_noise: float = 0.5,
                    average_noise: float = 0.3, **overrides):
    agent = make_agent(discrete, **overrides)
    k_init, k_p, k_a = jax.random.split(jax.random.PRNGKey(seed), 3)
    state = agent.init(k_init)
    params = perturbed(state.params, k_p, params_noise)
    average = perturbed(params, k_a, average_noise)
    return agent, state.replace(params=params, average=average, opt=agent.opt.init(params))


def window_flags():
    """mask, terminated, truncated [T, B] for WINDOWS."""
    mask, terminated, truncated = (np.zeros((T, B), np.float32) for _ in range(3))
    for b, (length, end) in enumerate(WINDOWS):
        mask[:length, b] = 1.0
        if end == "terminated":
            terminated[length - 1, b] = 1.0
        elif end == "truncated":
            truncated[length - 1, b] = 1.0
    return mask, terminated, truncated


def make_batch(rng, discrete: bool, net_apply=None, params=None) -> dict[str, np.ndarray]:
    """A batch in the ``sequences`` layout. Padded steps hold finite garbage (reward, action,
    discount, obs) and zero behaviour fields, as never-written replay slots do."""
    mask, terminated, truncated = window_flags()
    valid = mask > 0
    batch = {
        "obs": rng.normal(size=(T + 1, B, OBS_DIM)).astype(np.float32),
        "reward": rng.normal(size=(T, B)).astype(np.float32),
        "mask": mask,
        "terminated": terminated,
        "truncated": truncated,
        # 1 - terminated on real steps; padding's discount is garbage (never read)
        "discount": np.where(valid, 1.0 - terminated, rng.integers(0, 2, (T, B))).astype(
            np.float32),
    }
    if discrete:
        action = rng.integers(0, NUM_ACTIONS, (T, B))
        probs = rng.dirichlet(np.ones(NUM_ACTIONS), (T, B))
        batch["action"] = action[..., None].astype(np.float32)
        batch["probs"] = np.where(valid[..., None], probs, 0.0).astype(np.float32)
    else:
        # mu: near the current policy's mean, with its own std; a ~ mu
        phi, _ = net_apply({"params": params}, batch["obs"][:-1])
        mean = np.asarray(phi) + 0.3 * rng.normal(size=(T, B, ACTION_DIM))
        std = rng.uniform(0.2, 0.6, (T, B, ACTION_DIM))
        action = mean + std * rng.normal(size=(T, B, ACTION_DIM))
        batch["action"] = np.where(valid[..., None], action, 0.0).astype(np.float32)
        batch["mean"] = np.where(valid[..., None], mean, 0.0).astype(np.float32)
        batch["std"] = np.where(valid[..., None], std, 0.0).astype(np.float32)
    return batch


def np64(x):
    return np.asarray(x, np.float64)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def gaussian_log_density(a, mean, std):
    return np.sum(-0.5 * ((a - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi), -1)


def project(g, k, delta):
    """Eq. 12 for one step, in NumPy."""
    kg = float(k @ g)
    return g - max(0.0, (kg - delta) / float(k @ k)) * k, kg > delta


def assert_trees_close(got, want, rtol=1e-4, atol_scale=1e-5):
    """Leaf by leaf, with an absolute tolerance relative to the largest entry of ``want``."""
    scale = max(float(np.max(np.abs(np.asarray(x)))) for x in jax.tree_util.tree_leaves(want))
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol,
                                                atol=atol_scale * scale), got, want)


@pytest.fixture
def recorded(monkeypatch):
    """Records the outputs of the return operators the agent calls (Q^ret, Q^opc), also from
    inside ``jit`` and ``grad`` (a debug callback receives the primal values)."""
    out: dict[str, np.ndarray] = {}

    def recording(name, operator):
        def wrapper(*args, **kwargs):
            result = operator(*args, **kwargs)
            jax.debug.callback(lambda x: out.__setitem__(name, np.asarray(x)), result)
            return result

        return wrapper

    for name in ("retrace", "q_opc"):
        monkeypatch.setattr(returns, name, recording(name, getattr(returns, name)))
    return out


def loss_and_grad(loss_fn, params, average, batch, key):
    """((loss, metrics), grads) of one of the agent's losses, jitted (compiled once: faster
    than running it op by op)."""
    out = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params, average, batch, key)
    jax.effects_barrier()
    return out


# --------------------------------------------------------------------------- Algorithm 2
def reference_discrete(agent: ACER, params, average, batch) -> dict:
    """Algorithm 2 on every column of the batch, as a plain loop over the window x_0..x_L
    (L = its valid steps) with the current network's outputs (theta' = theta)."""
    cfg, c = agent.config, agent.c
    logits, q = (np64(x) for x in agent.net.apply({"params": params}, batch["obs"]))
    avg_logits, _ = agent.net.apply({"params": average}, batch["obs"])
    f, f_avg = softmax(logits), softmax(np64(avg_logits))
    action = batch["action"][..., 0].astype(int)
    mu = np64(batch["probs"])
    qret, z = np.zeros((T, B)), np.zeros((T, B, NUM_ACTIONS))
    rho_taken, active, kl, entropy = (np.zeros((T, B)) for _ in range(4))
    for b, (length, _) in enumerate(WINDOWS):
        def value(i, b=b):
            return float(np.sum(q[i, b] * f[i, b]))  # V = sum_a Q(x, a) f(a|phi(x))

        ret = 0.0 if batch["terminated"][length - 1, b] else value(length)
        for i in range(length - 1, -1, -1):
            a, phi = action[i, b], f[i, b]
            rho = phi / mu[i, b]  # rho_i(a) for every a
            ret = batch["reward"][i, b] + GAMMA * ret
            qret[i, b] = ret
            v_i = value(i)
            g = np.zeros(NUM_ACTIONS)
            g[a] = min(c, rho[a]) * (ret - v_i) / phi[a]  # grad_phi log f(a|phi) = e_a / phi_a
            if cfg.bias_correction:
                for a2 in range(NUM_ACTIONS):
                    g[a2] += max(0.0, 1.0 - c / rho[a2]) * phi[a2] * (q[i, b, a2] - v_i) / phi[a2]
            g -= cfg.entropy_weight * (np.log(phi) + 1.0)  # grad_phi of H = -sum phi log phi
            k = -f_avg[i, b] / phi  # grad_phi KL(f(.|phi_avg) || f(.|phi))
            if cfg.trust_region:
                z[i, b], active[i, b] = project(g, k, cfg.trust_region_delta)
            else:
                z[i, b] = g
            rho_taken[i, b] = rho[a]
            kl[i, b] = np.sum(f_avg[i, b] * np.log(f_avg[i, b] / phi))
            entropy[i, b] = -np.sum(phi * np.log(phi))
            ret = min(1.0, rho[a]) * (ret - q[i, b, a]) + v_i  # rho-bar_i = min{1, rho_i}
    mask = np64(batch["mask"])
    denom = mask.sum()
    q_taken = np.take_along_axis(q[:-1], action[..., None], -1)[..., 0]
    policy_loss = -np.sum(mask[..., None] * f[:-1] * z) / denom
    value_loss = 0.5 * np.sum(mask * (qret - q_taken) ** 2) / denom
    metrics = {"policy_loss": policy_loss, "value_loss": value_loss,
               "rho_mean": np.sum(mask * rho_taken) / denom,
               "truncated_fraction": np.sum(mask * (rho_taken > c)) / denom,
               "kl_average": np.sum(mask * kl) / denom, "entropy": np.sum(mask * entropy) / denom,
               "trust_region_active": np.sum(mask * active) / denom,
               "q_mean": np.sum(mask * q_taken) / denom, "valid_fraction": mask.mean()}
    return {"qret": qret, "z": z, "loss": policy_loss + cfg.value_loss_weight * value_loss,
            "metrics": metrics}


def reference_discrete_grad(agent: ACER, params, batch, ref):
    """d theta = -(d phi / d theta) z* / N (Sec. 3.3, back-propagated z*) plus the critic's
    value_loss_weight (Q^ret - Q(x, a)) grad Q(x, a) / N (Eq. 6), N = valid steps."""
    mask = batch["mask"]
    denom = mask.sum()

    def probs_and_q(p):
        logits, q = agent.net.apply({"params": p}, batch["obs"][:-1])
        return jax.nn.softmax(logits, axis=-1), q

    @jax.jit
    def grad(p, z, qret):
        (_, q), vjp = jax.vjp(probs_and_q, p)
        onehot = jax.nn.one_hot(batch["action"][..., 0].astype(int), NUM_ACTIONS)
        q_taken = jnp.sum(q * onehot, -1)
        ct_probs = -mask[..., None] * z / denom
        ct_q = -agent.config.value_loss_weight * mask * (qret - q_taken) / denom
        return vjp((ct_probs, ct_q[..., None] * onehot))[0]

    return grad(params, jnp.asarray(ref["z"], jnp.float32), jnp.asarray(ref["qret"], jnp.float32))


def check_metrics(got, want, rtol=1e-4, atol=1e-5):
    for name, value in want.items():
        np.testing.assert_allclose(float(got[name]), value, rtol=rtol, atol=atol, err_msg=name)


DISCRETE_CASES = {
    "default": {},
    "no_trust_region": {"trust_region": False},
    "no_bias_correction": {"bias_correction": False},
}


@pytest.mark.parametrize("case", sorted(DISCRETE_CASES))
def test_discrete_loss_matches_algorithm_2(case, recorded):
    """Q^ret (recorded), the losses, every metric and the gradient of the loss against the
    Algorithm 2 loop; c = 1.5 so both terms of g act, entropy weight large enough to matter."""
    agent, state = agent_and_state(True, truncation=1.5, entropy_weight=0.05,
                                   trust_region_delta=0.5, **DISCRETE_CASES[case])
    batch = make_batch(np.random.default_rng(1), True)
    params, average = state.params, state.average
    ref = reference_discrete(agent, params, average, batch)
    # the batch exercises what it should: truncation, and both sides of the trust region
    assert 0 < ref["metrics"]["truncated_fraction"] < 1
    if agent.config.trust_region:
        assert 0 < ref["metrics"]["trust_region_active"] < 1

    (loss, metrics), grads = loss_and_grad(agent._discrete_loss, params, average, batch,
                                           jax.random.PRNGKey(0))
    np.testing.assert_allclose(recorded["retrace"], ref["qret"], rtol=1e-5, atol=1e-5)
    assert np.all(recorded["retrace"][batch["mask"] == 0] == 0)
    np.testing.assert_allclose(float(loss), ref["loss"], rtol=1e-4, atol=1e-6)
    check_metrics(metrics, ref["metrics"])
    assert_trees_close(grads, reference_discrete_grad(agent, params, batch, ref))


# --------------------------------------------------------------------------- Algorithm 3
def reference_continuous(agent: ACER, params, average, batch, key) -> dict:
    """Algorithm 3 (fixed std) on every column, as a plain loop; the SDN draws u_1..u_n and a'
    are the agent's (the same key, split as the agent does: u's first, then a')."""
    cfg, c, m, n = agent.config, agent.c, agent.m, agent.config.sdn_samples
    std = cfg.policy_std
    net = agent.net
    phi, v = (np64(x) for x in net.apply({"params": params}, batch["obs"]))  # mean, V
    avg_phi = np64(net.apply({"params": average}, batch["obs"][:-1])[0])
    mean = phi[:-1]
    k_u, k_a = jax.random.split(key)
    u = mean + std * np64(jax.random.normal(k_u, (n, T, B, m)))  # [n, T, B, m]
    a_prime = mean + std * np64(jax.random.normal(k_a, (T, B, m)))
    action = np64(batch["action"])

    def advantage(actions):  # [T, B, m] -> A(x_i, a) [T, B]
        return np64(net.apply({"params": params}, batch["obs"][:-1],
                              jnp.asarray(actions[..., None, :], jnp.float32),
                              method=ContinuousNetwork.advantages))[..., 0]

    baseline = np.mean([advantage(uj) for uj in u], axis=0)
    q_tilde = v[:-1] + advantage(action) - baseline  # Eq. 13
    q_tilde_prime = v[:-1] + advantage(a_prime) - baseline
    mu_mean, mu_std = np64(batch["mean"]), np64(batch["std"])

    qret, qopc, z = np.zeros((T, B)), np.zeros((T, B)), np.zeros((T, B, m))
    value_terms, rho_all, active, kl = (np.zeros((T, B)) for _ in range(4))
    for b, (length, _) in enumerate(WINDOWS):
        ret = 0.0 if batch["terminated"][length - 1, b] else v[length, b]
        opc = ret
        for i in range(length - 1, -1, -1):
            mu_i, a, a2 = mean[i, b], action[i, b], a_prime[i, b]
            log_mu = gaussian_log_density(a, mu_mean[i, b], mu_std[i, b])
            rho = np.exp(gaussian_log_density(a, mu_i, std) - log_mu)
            rho2 = np.exp(gaussian_log_density(a2, mu_i, std)
                          - gaussian_log_density(a2, mu_mean[i, b], mu_std[i, b]))
            c_i = min(1.0, rho ** (1.0 / m))
            ret = batch["reward"][i, b] + GAMMA * ret
            opc = batch["reward"][i, b] + GAMMA * opc
            qret[i, b], qopc[i, b] = ret, opc
            v_i, q_i = v[i, b], q_tilde[i, b]
            # grad_mu log N(a; mu, s^2 I) = (a - mu) / s^2
            g = min(c, rho) * (opc - v_i) * (a - mu_i) / std**2
            if cfg.bias_correction:
                g += max(0.0, 1.0 - c / rho2) * (q_tilde_prime[i, b] - v_i) * (a2 - mu_i) / std**2
            k = (mu_i - avg_phi[i, b]) / std**2  # grad_mu KL(N(mu_avg, s) || N(mu, s))
            if cfg.trust_region:
                z[i, b], active[i, b] = project(g, k, cfg.trust_region_delta)
            else:
                z[i, b] = g
            v_target = min(1.0, rho) * (ret - q_i) + v_i  # Eq. 14
            value_terms[i, b] = (ret - q_i) ** 2 + (v_target - v_i) ** 2
            rho_all[i, b] = rho
            kl[i, b] = np.sum((mu_i - avg_phi[i, b]) ** 2) / (2 * std**2)
            ret = c_i * (ret - q_i) + v_i
            opc = (opc - q_i) + v_i
    mask = np64(batch["mask"])
    denom = mask.sum()
    policy_loss = -np.sum(mask[..., None] * mean * z) / denom
    value_loss = 0.5 * np.sum(mask * value_terms) / denom
    entropy = m * (np.log(std) + 0.5 * (1 + np.log(2 * np.pi)))
    metrics = {"policy_loss": policy_loss, "value_loss": value_loss,
               "rho_mean": np.sum(mask * rho_all) / denom,
               "truncated_fraction": np.sum(mask * (rho_all > c)) / denom,
               "kl_average": np.sum(mask * kl) / denom, "entropy": entropy,
               "trust_region_active": np.sum(mask * active) / denom,
               "q_mean": np.sum(mask * q_tilde) / denom, "valid_fraction": mask.mean()}
    return {"qret": qret, "qopc": qopc, "z": z, "u": u, "q_tilde": q_tilde, "rho": rho_all,
            "loss": policy_loss + cfg.value_loss_weight * value_loss, "metrics": metrics}


def reference_continuous_grad(agent: ACER, params, batch, ref):
    """-(d phi / d theta) z* / N plus value_loss_weight times the gradient of
    1/2 sum [(Q^ret - Q~(x, a))^2 + (V^target - V(x))^2] / N with the targets held fixed and
    the same u's (Algorithm 3's two d theta_v lines)."""
    cfg = agent.config
    mask = batch["mask"]
    denom = mask.sum()
    obs = batch["obs"][:-1]
    u = jnp.asarray(np.moveaxis(ref["u"], 0, -2), jnp.float32)  # [T, B, n, m]
    acts = jnp.concatenate([jnp.asarray(batch["action"])[..., None, :], u], axis=-2)
    qret = jnp.asarray(ref["qret"], jnp.float32)
    # V^target - V_i (the V_i is added back, held fixed, in the loss below)
    v_target = jnp.asarray(np.minimum(1.0, ref["rho"]) * (ref["qret"] - ref["q_tilde"]),
                           jnp.float32)

    def value_loss(p):
        _, v = agent.net.apply({"params": p}, obs)
        adv = agent.net.apply({"params": p}, obs, acts, method=ContinuousNetwork.advantages)
        q_tilde = v + adv[..., 0] - jnp.mean(adv[..., 1:], -1)
        target = v_target + jax.lax.stop_gradient(v)
        return 0.5 * jnp.sum(mask * ((qret - q_tilde) ** 2 + (target - v) ** 2)) / denom

    @jax.jit
    def grad(p, z):
        _, vjp = jax.vjp(lambda p: agent.net.apply({"params": p}, obs)[0], p)
        policy = vjp(-mask[..., None] * z / denom)[0]
        value = jax.grad(value_loss)(p)
        return jax.tree_util.tree_map(lambda a, b: a + cfg.value_loss_weight * b, policy, value)

    return grad(params, jnp.asarray(ref["z"], jnp.float32))


CONTINUOUS_CASES = {
    "default": {},
    "no_trust_region": {"trust_region": False},
    "no_bias_correction": {"bias_correction": False},
}


@pytest.mark.parametrize("case", sorted(CONTINUOUS_CASES))
def test_continuous_loss_matches_algorithm_3(case, recorded):
    """Q^ret with c_i = min(1, rho_i^(1/d)) and Q^opc (recorded), the SDN's Q~, V^target,
    Eq. 16's g, the trust region, every metric and the loss gradient against Algorithm 3."""
    agent, state = agent_and_state(False, truncation=1.0, **CONTINUOUS_CASES[case])
    params, average = state.params, state.average
    batch = make_batch(np.random.default_rng(2), False, agent.net.apply, params)
    key = jax.random.PRNGKey(3)
    ref = reference_continuous(agent, params, average, batch, key)
    assert 0 < ref["metrics"]["truncated_fraction"] < 1
    if agent.config.trust_region:
        assert 0 < ref["metrics"]["trust_region_active"] < 1

    (loss, metrics), grads = loss_and_grad(agent._continuous_loss, params, average, batch, key)
    for name in ("qret", "qopc"):
        got = recorded["retrace" if name == "qret" else "q_opc"]
        np.testing.assert_allclose(got, ref[name], rtol=1e-5, atol=1e-5, err_msg=name)
        assert np.all(got[batch["mask"] == 0] == 0)
    assert not np.allclose(ref["qret"], ref["qopc"])  # the traces differ: both are checked
    np.testing.assert_allclose(float(loss), ref["loss"], rtol=1e-4, atol=1e-6)
    check_metrics(metrics, ref["metrics"])
    assert_trees_close(grads, reference_continuous_grad(agent, params, batch, ref))


# --------------------------------------------------------------------------- Eq. 11-12
def random_projection_case(rng, dim, active):
    g, k = rng.normal(size=dim), rng.normal(size=dim)
    if k @ g < 0:
        k = -k
    kg = float(k @ g)
    delta = kg * (0.3 if active else 1.7) + (0.0 if active else 0.1)
    return g, k, delta


@pytest.mark.parametrize("seed", range(4))
def test_trust_region_leaves_g_when_constraint_holds(seed):
    rng = np.random.default_rng(seed)
    gs, ks, deltas = zip(*(random_projection_case(rng, 5, active=False) for _ in range(8)))
    g, k = np.stack(gs), np.stack(ks)
    with jax.enable_x64(True):
        for i, delta in enumerate(deltas):
            z, active = trust_region(jnp.asarray(g[i]), jnp.asarray(k[i]), delta)
            np.testing.assert_array_equal(np.asarray(z), g[i])
            assert not bool(active)
        # also a negative k.g and k = 0
        z, active = trust_region(jnp.asarray(g[0]), jnp.asarray(-k[0]), 0.1)
        np.testing.assert_array_equal(np.asarray(z), g[0])
        z, active = trust_region(jnp.asarray(g[0]), jnp.zeros(5), 0.1)
        np.testing.assert_array_equal(np.asarray(z), g[0])
        assert not bool(active)


def brute_force_projection(g, k, delta):
    """argmin_z 1/2 ||g - z||^2 s.t. k.z <= delta, by a general constrained solver."""
    res = minimize(lambda z: 0.5 * np.sum((g - z) ** 2), np.zeros_like(g),
                   jac=lambda z: z - g, method="SLSQP",
                   constraints=[{"type": "ineq", "fun": lambda z: delta - k @ z,
                                 "jac": lambda z: -k}],
                   options={"ftol": 1e-14, "maxiter": 500})
    assert res.success, res.message
    return res.x


@pytest.mark.parametrize("seed", range(4))
def test_trust_region_solves_eq_11_when_active(seed):
    rng = np.random.default_rng(seed)
    cases = [random_projection_case(rng, dim, active=True) for dim in (1, 3, 6, 6)]
    with jax.enable_x64(True):
        for g, k, delta in cases:
            z, active = trust_region(jnp.asarray(g), jnp.asarray(k), delta)
            z = np.asarray(z)
            assert bool(active)
            assert k @ z == pytest.approx(delta, rel=1e-12)  # on the constraint's boundary
            np.testing.assert_allclose(z, brute_force_projection(g, k, delta), atol=1e-6)
            # no feasible point is closer to g (the projection onto a half-space)
            cand = z + rng.normal(size=(2000, len(g))) * rng.uniform(1e-3, 2.0, (2000, 1))
            feasible = cand[cand @ k <= delta]
            assert len(feasible) > 100
            assert np.all(np.sum((feasible - g) ** 2, -1) >= np.sum((z - g) ** 2) - 1e-12)


def test_trust_region_is_per_sample_over_the_last_axis():
    rng = np.random.default_rng(5)
    cases = [random_projection_case(rng, 4, active=bool(i % 2)) for i in range(6)]
    g = np.stack([c[0] for c in cases]).reshape(2, 3, 4)
    # one delta for all: rescale k so that each case keeps its side of the constraint
    k = np.stack([c[1] * 1.0 / c[2] for c in cases]).reshape(2, 3, 4)
    with jax.enable_x64(True):
        z, active = trust_region(jnp.asarray(g), jnp.asarray(k), 1.0)
        for idx in np.ndindex(2, 3):
            want, want_active = project(g[idx], k[idx], 1.0)
            np.testing.assert_allclose(np.asarray(z)[idx], want, rtol=1e-12, atol=1e-12)
            assert bool(active[idx]) == want_active
    assert np.asarray(active).tolist() == [[False, True, False], [True, False, True]]


def test_correction_weight():
    rho = jnp.asarray([0.0, 0.5, 2.0, 2.5, 10.0, jnp.inf])
    np.testing.assert_allclose(np.asarray(correction_weight(rho, 2.0)),
                               [0.0, 0.0, 0.0, 0.2, 0.8, 1.0], rtol=1e-6)


# --------------------------------------------------------------------------- g and k
def random_discrete_step(rng, shape=(5, 3)):
    probs = rng.dirichlet(np.ones(NUM_ACTIONS), shape)
    return {
        "probs": probs,
        "action": rng.integers(0, NUM_ACTIONS, shape),
        "qret": rng.normal(size=shape),
        "q": rng.normal(size=shape + (NUM_ACTIONS,)),
        "value": rng.normal(size=shape),
        "mu": rng.dirichlet(np.ones(NUM_ACTIONS), shape),
    }


@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("entropy_weight", [0.0, 0.3])
def test_discrete_policy_gradient_is_algorithm_2_g(bias_correction, entropy_weight):
    """per_step_grad w.r.t. the probability vector phi equals Algorithm 2's g (with the sum
    over actions of Eq. 10) plus entropy_weight grad_phi H = -entropy_weight (log phi + 1)."""
    rng = np.random.default_rng(0)
    x = random_discrete_step(rng)
    c = 1.5
    with jax.enable_x64(True):
        got = np.asarray(per_step_grad(
            discrete_policy_objective, jnp.asarray(x["probs"]), jnp.asarray(x["action"]),
            jnp.asarray(x["qret"]), jnp.asarray(x["q"]), jnp.asarray(x["value"]),
            jnp.asarray(x["mu"]), c, bias_correction, entropy_weight))
    want = np.zeros_like(got)
    truncated = 0
    for idx in np.ndindex(x["action"].shape):
        phi, a, v = x["probs"][idx], x["action"][idx], x["value"][idx]
        rho = phi / x["mu"][idx]
        truncated += rho[a] > c
        want[idx][a] += min(c, rho[a]) * (x["qret"][idx] - v) / phi[a]
        if bias_correction:
            for b in range(NUM_ACTIONS):
                want[idx][b] += max(0.0, 1 - c / rho[b]) * phi[b] * (x["q"][idx][b] - v) / phi[b]
        want[idx] -= entropy_weight * (np.log(phi) + 1.0)
    assert 0 < truncated < x["action"].size
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_discrete_policy_gradient_with_zero_probabilities_is_finite():
    """pi(a) = 0 (a saturated softmax) with mu(a) = 0 too: rho(a) is 0, not 0/0, so the
    correction term leaves that action out and g stays finite."""
    probs = jnp.asarray([[0.0, 0.3, 0.7], [0.5, 0.5, 0.0]])
    mu = jnp.asarray([[0.0, 0.5, 0.5], [0.9, 0.1, 0.0]])
    g = per_step_grad(discrete_policy_objective, probs, jnp.asarray([1, 0]),
                      jnp.asarray([1.0, -1.0]), jnp.asarray([[5.0, 1.0, 2.0], [1.0, 3.0, 7.0]]),
                      jnp.asarray([0.5, 0.2]), mu, 0.8, True, 0.01)
    assert np.all(np.isfinite(np.asarray(g)))
    # the second step: rho = (0.556, 5, 0): only action 1 is corrected, weight 1 - 0.8 / 5
    want = np.asarray([min(0.8, 0.5 / 0.9) * (-1.0 - 0.2) / 0.5, (1 - 0.8 / 5) * (3.0 - 0.2)])
    np.testing.assert_allclose(np.asarray(g)[1, :2] + 0.01 * (np.log(0.5) + 1), want,
                               rtol=1e-5)


def test_discrete_kl_gradient_is_minus_ratio():
    rng = np.random.default_rng(1)
    phi, avg = rng.dirichlet(np.ones(NUM_ACTIONS), (2, 7))
    with jax.enable_x64(True):
        k = per_step_grad(lambda p: discrete_kl(jnp.asarray(avg), p), jnp.asarray(phi))
        kl = discrete_kl(jnp.asarray(avg), jnp.asarray(phi))
    np.testing.assert_allclose(np.asarray(k), -avg / phi, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(kl), np.sum(avg * np.log(avg / phi), -1), rtol=1e-12)


def random_continuous_step(rng, shape=(6, 4)):
    m = ACTION_DIM
    mean = rng.uniform(-0.8, 0.8, shape + (m,))
    beh_mean = mean + 0.3 * rng.normal(size=shape + (m,))
    beh_std = rng.uniform(0.2, 0.6, shape + (m,))
    return {
        "mean": mean, "beh_mean": beh_mean, "beh_std": beh_std,
        "action": beh_mean + beh_std * rng.normal(size=shape + (m,)),
        "sampled": mean + 0.3 * rng.normal(size=shape + (m,)),
        "qopc": rng.normal(size=shape), "q_sampled": rng.normal(size=shape),
        "value": rng.normal(size=shape),
    }


@pytest.mark.parametrize("bias_correction", [True, False])
def test_continuous_policy_gradient_is_eq_16_fixed_std(bias_correction):
    """grad_mu of the objective = min(c, rho) (Q^opc - V) (a - mu) / s^2
    + [1 - c / rho']_+ (Q~(a') - V) (a' - mu) / s^2 (Eq. 16, fixed std s; no entropy term)."""
    rng = np.random.default_rng(2)
    x = random_continuous_step(rng)
    c, s = 1.0, 0.3
    args = [jnp.asarray(x[k], jnp.float32) for k in ("action", "sampled", "qopc", "q_sampled",
                                                    "value", "beh_mean", "beh_std")]
    got = per_step_grad(continuous_policy_objective, jnp.asarray(x["mean"], jnp.float32), *args,
                        c, bias_correction, 0.1, ACTION_DIM, s)
    rho = np.exp(gaussian_log_density(x["action"], x["mean"], s)
                 - gaussian_log_density(x["action"], x["beh_mean"], x["beh_std"]))
    rho2 = np.exp(gaussian_log_density(x["sampled"], x["mean"], s)
                  - gaussian_log_density(x["sampled"], x["beh_mean"], x["beh_std"]))
    assert 0 < np.mean(rho > c) < 1 and 0 < np.mean(rho2 > c) < 1
    want = (np.minimum(c, rho) * (x["qopc"] - x["value"]))[..., None] * (
        x["action"] - x["mean"]) / s**2
    if bias_correction:
        want += (np.maximum(0.0, 1 - c / rho2) * (x["q_sampled"] - x["value"]))[..., None] * (
            x["sampled"] - x["mean"]) / s**2
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_continuous_policy_gradient_learned_std():
    """With phi = [mean, std]: grad_s log N(a; mu, s) = ((a - mu)^2 - s^2) / s^3 per
    dimension, and the entropy adds entropy_weight / s."""
    rng = np.random.default_rng(3)
    x = random_continuous_step(rng)
    std = rng.uniform(0.2, 0.5, x["mean"].shape)
    c, ew = 1.0, 0.1
    phi = np.concatenate([x["mean"], std], -1)
    args = [jnp.asarray(x[k], jnp.float32) for k in ("action", "sampled", "qopc", "q_sampled",
                                                    "value", "beh_mean", "beh_std")]
    got = np.asarray(per_step_grad(continuous_policy_objective, jnp.asarray(phi, jnp.float32),
                                   *args, c, True, ew, ACTION_DIM, None))
    rho = np.exp(gaussian_log_density(x["action"], x["mean"], std)
                 - gaussian_log_density(x["action"], x["beh_mean"], x["beh_std"]))
    rho2 = np.exp(gaussian_log_density(x["sampled"], x["mean"], std)
                  - gaussian_log_density(x["sampled"], x["beh_mean"], x["beh_std"]))
    w1 = (np.minimum(c, rho) * (x["qopc"] - x["value"]))[..., None]
    w2 = (np.maximum(0.0, 1 - c / rho2) * (x["q_sampled"] - x["value"]))[..., None]
    d1, d2 = x["action"] - x["mean"], x["sampled"] - x["mean"]
    want_mean = w1 * d1 / std**2 + w2 * d2 / std**2
    want_std = w1 * (d1**2 - std**2) / std**3 + w2 * (d2**2 - std**2) / std**3 + ew / std
    np.testing.assert_allclose(got[..., :ACTION_DIM], want_mean, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[..., ACTION_DIM:], want_std, rtol=1e-4, atol=1e-4)
    mean, s = gaussian_stats(jnp.asarray(phi, jnp.float32), ACTION_DIM, None)
    np.testing.assert_array_equal(np.asarray(mean), x["mean"].astype(np.float32))
    np.testing.assert_array_equal(np.asarray(s), std.astype(np.float32))


def test_continuous_kl_gradient_fixed_std():
    """k = grad_mu KL(N(mu_avg, s^2) || N(mu, s^2)) = (mu - mu_avg) / s^2, through
    gaussian_stats as the agent forms it."""
    rng = np.random.default_rng(4)
    mu, mu_avg = rng.uniform(-1, 1, (2, 5, ACTION_DIM))
    s = 0.3

    def kl(p):
        return Gaussian().kl((jnp.asarray(mu_avg, jnp.float32), jnp.full(mu_avg.shape, s)),
                             gaussian_stats(p, ACTION_DIM, s))

    k = per_step_grad(kl, jnp.asarray(mu, jnp.float32))
    np.testing.assert_allclose(np.asarray(k), (mu - mu_avg) / s**2, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- Eq. 7
@pytest.mark.parametrize("seed", range(3))
def test_bias_correction_is_unbiased_by_enumeration(seed):
    """One state, n actions: E_mu[min(c, rho) h(a)] + E_pi[[1 - c/rho]_+ h(a)] = E_mu[rho h(a)]
    for h(a) = grad log pi(a) Q(a) (Eq. 7), summed exactly over the actions; and the agent's
    objective implements it: E_{a ~ mu} of its gradient w.r.t. the probability vector with
    Q^ret := Q(a) equals the untruncated E_mu[rho grad log f(a) (Q(a) - V)], which is Q - V
    (while plain truncation, bias_correction=False, is biased)."""
    n = 6
    rng = np.random.default_rng(seed)
    pi, mu = rng.dirichlet(np.ones(n), 2)
    q = rng.normal(size=n)
    rho = pi / mu
    c = float(np.median(rho))  # some rho(a) > c, some below
    assert np.any(rho > c) and np.any(rho < c)

    def grad_log_pi(a):  # w.r.t. the logits of a softmax policy: e_a - pi
        return np.eye(n)[a] - pi

    truncated = sum(mu[a] * min(c, rho[a]) * grad_log_pi(a) * q[a] for a in range(n))
    correction = sum(pi[a] * max(0.0, 1 - c / rho[a]) * grad_log_pi(a) * q[a] for a in range(n))
    untruncated = sum(mu[a] * rho[a] * grad_log_pi(a) * q[a] for a in range(n))
    np.testing.assert_allclose(truncated + correction, untruncated, rtol=1e-12, atol=1e-12)
    assert not np.allclose(truncated, untruncated, atol=1e-3)

    for value in (0.0, float(rng.normal())):
        with jax.enable_x64(True):
            def expected_grad(bias_correction, value=value):
                per_action = per_step_grad(
                    discrete_policy_objective, jnp.broadcast_to(jnp.asarray(pi), (n, n)),
                    jnp.arange(n), jnp.asarray(q), jnp.broadcast_to(jnp.asarray(q), (n, n)),
                    jnp.full(n, value), jnp.broadcast_to(jnp.asarray(mu), (n, n)), c,
                    bias_correction, 0.0)
                return np.asarray(jnp.asarray(mu) @ per_action)  # sum_a mu(a) g(a)

            unbiased = sum(mu[a] * rho[a] * np.eye(n)[a] / pi[a] * (q[a] - value)
                           for a in range(n))
            np.testing.assert_allclose(unbiased, q - value, rtol=1e-12)
            np.testing.assert_allclose(expected_grad(True), unbiased, rtol=1e-10, atol=1e-12)
            assert not np.allclose(expected_grad(False), unbiased, atol=1e-3)


# --------------------------------------------------------------------------- theta_a
@pytest.mark.parametrize("discrete", [True, False])
def test_average_network_moves_by_one_minus_alpha_of_the_gap(discrete):
    """theta_a <- alpha theta_a + (1 - alpha) theta after every update (two in a row), with the
    paper's alpha (0.99 discrete, 0.995 continuous)."""
    agent, state = agent_and_state(discrete, average_noise=1.0)
    assert agent.alpha == (0.99 if discrete else 0.995)
    assert agent.c == (10.0 if discrete else 5.0)
    rng = np.random.default_rng(4)
    batch = make_batch(rng, discrete, agent.net.apply, state.params)
    update = jax.jit(agent.update)
    for i in range(2):
        old = state.average
        state, metrics, _ = update(state, batch, jax.random.PRNGKey(i))
        assert float(metrics["grad_norm"]) > 0
        gap = jax.tree_util.tree_map(lambda o, p: np64(p) - np64(o), old, state.params)
        moved = jax.tree_util.tree_map(lambda o, a: np64(a) - np64(o), old, state.average)
        jax.tree_util.tree_map(
            lambda mv, gp: np.testing.assert_allclose(mv, (1 - agent.alpha) * gp, rtol=1e-4,
                                                      atol=5e-7), moved, gap)
        assert max(float(np.max(np.abs(x))) for x in jax.tree_util.tree_leaves(moved)) > 1e-3


def test_average_decay_override():
    agent = make_agent(True, average_decay=0.5, truncation=3.0)
    assert agent.alpha == 0.5 and agent.c == 3.0


# --------------------------------------------------------------------------- robustness
@pytest.mark.parametrize("discrete", [True, False])
def test_update_on_all_padded_batch_is_finite_and_inert(discrete):
    """A batch of never-written replay slots (mask 0, zero obs, actions and behaviour fields:
    log mu = -inf, rho = inf or NaN if read) changes nothing and produces no NaN."""
    agent = make_agent(discrete)
    state = agent.init(jax.random.PRNGKey(0))
    batch = {"obs": np.zeros((T + 1, B, OBS_DIM), np.float32),
             "action": np.zeros((T, B, 1 if discrete else ACTION_DIM), np.float32)}
    for name in ("reward", "discount", "terminated", "truncated", "mask"):
        batch[name] = np.zeros((T, B), np.float32)
    for name, (shape, dtype) in agent.behaviour_fields.items():
        batch[name] = np.zeros((T, B, *shape), dtype)
    new, metrics, writeback = jax.jit(agent.update)(state, batch, jax.random.PRNGKey(1))
    assert writeback == {}
    for leaf in jax.tree_util.tree_leaves((new, metrics)):
        assert np.all(np.isfinite(np.asarray(leaf)))
    assert float(metrics["grad_norm"]) == 0.0 and float(metrics["loss"]) == 0.0
    assert float(metrics["valid_fraction"]) == 0.0
    jax.tree_util.tree_map(np.testing.assert_array_equal, new.params, state.params)


# --------------------------------------------------------------------------- acting
def test_policy_discrete_mode_and_sample():
    agent, state = agent_and_state(True, params_noise=1.0)
    obs = np.random.default_rng(0).normal(size=(16, OBS_DIM)).astype(np.float32)
    logits, _ = agent.net.apply({"params": state.params}, obs)
    action, info = agent.policy(state.params, obs, jax.random.PRNGKey(0), False)
    assert action.shape == (16, 1) and action.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(action[:, 0]), np.argmax(np.asarray(logits), -1))
    assert len(set(np.asarray(action[:, 0]).tolist())) > 1  # not a constant argmax
    np.testing.assert_allclose(np.asarray(info["probs"]), softmax(np64(logits)), rtol=1e-5,
                               atol=1e-7)
    action, info = agent.policy(state.params, obs, jax.random.PRNGKey(0), True)
    assert action.shape == (16, 1) and set(info) == set(agent.behaviour_fields)


def test_policy_continuous_mean_and_sample():
    agent, state = agent_and_state(False, params_noise=1.0)
    obs = np.random.default_rng(0).normal(size=(16, OBS_DIM)).astype(np.float32)
    phi, _ = agent.net.apply({"params": state.params}, obs)
    action, info = agent.policy(state.params, obs, jax.random.PRNGKey(0), False)
    np.testing.assert_array_equal(np.asarray(action), np.asarray(phi))
    np.testing.assert_array_equal(np.asarray(info["mean"]), np.asarray(phi))
    np.testing.assert_allclose(np.asarray(info["std"]), 0.3)
    action, info = agent.policy(state.params, obs, jax.random.PRNGKey(0), True)
    assert action.shape == (16, ACTION_DIM)
    assert not np.allclose(np.asarray(action), np.asarray(phi))
    np.testing.assert_array_equal(np.asarray(info["mean"]), np.asarray(phi))
