"""ACE: tree search against a plain-Python recursion of Eq. 17, actor gradients by hand,
ACE-Alt's selective update, TM-ACE's losses, compile-once."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offpolicy import registry
from offpolicy.envs.spaces import ActionSpec
from offpolicy.training.build import build_agent

OBS, M, GAMMA = 5, 2, 0.9
SPEC = ActionSpec.continuous(-np.ones(M), np.ones(M))


def make_agent(algo="ace", **over):
    over = {"encoder_size": 8, "hidden": 6, "num_actors": 3, "gamma": GAMMA, **over}
    run = registry.resolve(algo, agent_overrides=over)
    return build_agent(run, (OBS,), SPEC)


def random_params(agent, seed=0):
    """Initialised params with every leaf redrawn at unit scale, so values are far from 0."""
    params = agent.init(jax.random.PRNGKey(seed)).params
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    leaves = [0.5 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)]
    return jax.tree_util.tree_unflatten(tree, leaves)


# ---------------------------------------------------------------- plain NumPy reference
class Ref:
    """f_enc, f_q, f_rew, f_trans, f_mu_i written as [z, a] layers, one action at a time."""

    def __init__(self, p, num_actors):
        self.p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), p)
        self.N = num_actors

    def dense(self, name, x):
        d = self.p[name]
        return x @ d["kernel"] + d.get("bias", 0.0)

    def za(self, zname, aname, z, a):  # one Dense on the concatenation [z, a]
        w = np.concatenate([self.p[zname]["kernel"], self.p[aname]["kernel"]], axis=0)
        return np.concatenate([z, a]) @ w + self.p[zname]["bias"]

    def enc(self, s):
        return np.tanh(self.dense("enc", s))

    def f_q(self, z, a):
        return float(self.dense("q_out", np.tanh(self.za("q_z", "q_a", z, a)))[0])

    def f_rew(self, z, a):
        return float(self.dense("rew_out", np.tanh(self.za("rew_z", "rew_a", z, a)))[0])

    def f_trans(self, z, a):
        h = z + np.tanh(self.dense("trans_1", z))
        return h + np.tanh(self.za("trans_z", "trans_a", h, a))

    def mu(self, z, i):
        if "actor_w1" in self.p:  # each actor its own hidden layer (the default)
            hid = np.tanh(z @ self.p["actor_w1"][i] + self.p["actor_b1"][i])
            return np.tanh(hid @ self.p["actor_w2"][i] + self.p["actor_b2"][i])
        out = self.dense("actor_out", np.tanh(self.dense("actor_hidden", z)))
        return np.tanh(out.reshape(self.N, -1)[i])

    def q_d(self, z, a, d):
        """Eq. 17: f_q^d(z, a) = f_rew(z, a) + gamma max_i f_q^{d-1}(z1, f_mu_i(z1))."""
        if d == 0:
            return self.f_q(z, a)
        z1 = self.f_trans(z, a)
        return self.f_rew(z, a) + GAMMA * max(self.q_d(z1, self.mu(z1, i), d - 1)
                                              for i in range(self.N))


@pytest.mark.parametrize("shared", [False, True], ids=["separate", "shared"])
@pytest.mark.parametrize("depth", [0, 1, 2])
def test_tree_search_matches_python_recursion(depth, shared):
    agent = make_agent(plan_depth=max(depth, 1), shared_actor_layer=shared)
    p = random_params(agent, seed=depth)
    ref = Ref(p, agent.num_actors)
    rng = np.random.default_rng(depth)
    obs = rng.normal(size=(4, OBS)).astype(np.float32)
    acts = rng.uniform(-1, 1, size=(4, 3, M)).astype(np.float32)
    z = agent._call(p, type(agent.net).encode, obs)
    got = np.asarray(agent.q_tree(p, z, acts, depth))
    want = np.array([[ref.q_d(ref.enc(obs[b]), acts[b, k], depth) for k in range(3)]
                     for b in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_depth_zero_is_ensemble_ddpg_critic():
    ace = make_agent(plan_depth=1)
    ens = make_agent("ensemble-ddpg")
    p = random_params(ace)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(3, OBS)).astype(np.float32)
    z = ace._call(p, type(ace.net).encode, obs)
    b = ace._call(p, type(ace.net).actors, z)
    ens_params = {k: v for k, v in p.items() if not k.startswith(("rew", "trans"))}
    np.testing.assert_allclose(np.asarray(ace.q_tree(p, z, b, 0)),
                               np.asarray(ens._call(ens_params, type(ens.net).q, z, b)),
                               rtol=1e-6)
    assert set(ens.init(jax.random.PRNGKey(0)).params) == set(ens_params)


def _hand_actor_grad(agent, p, obs, weights):
    """Root-only actor gradient: dQ/db by central differences of the NumPy Eq. 17 with the
    inner-tree actions held at their unperturbed values, pulled back through f_mu by a VJP."""
    ref = Ref(p, agent.num_actors)
    d, N, B = agent.train_depth, agent.num_actors, obs.shape[0]

    def inner_actions(z, a, depth):
        """The actions the tree proposes below (z, a), at every level, as a nested list."""
        if depth == 0:
            return []
        z1 = ref.f_trans(z, a)
        acts = [ref.mu(z1, j) for j in range(N)]
        return [(a1, inner_actions(z1, a1, depth - 1)) for a1 in acts]

    def q_fixed(z, a, depth, inner):
        """Eq. 17 with every inner-tree action taken from ``inner`` (held fixed)."""
        if depth == 0:
            return ref.f_q(z, a)
        z1 = ref.f_trans(z, a)
        return ref.f_rew(z, a) + GAMMA * max(q_fixed(z1, a1, depth - 1, sub)
                                             for a1, sub in inner)

    cot = np.zeros((B, N, M))
    eps = 1e-5
    for bi in range(B):
        z = ref.enc(obs[bi].astype(np.float64))
        for i in range(N):
            b = ref.mu(z, i)
            inner = inner_actions(z, b, d)
            for k in range(M):
                e = np.zeros(M)
                e[k] = eps
                dq = (q_fixed(z, b + e, d, inner) - q_fixed(z, b - e, d, inner)) / (2 * eps)
                cot[bi, i, k] = -weights[bi, i] * dq / B

    ap = agent._actor_part(p)

    def actions(ap):
        pp = {**p, **ap}
        return agent._call(pp, type(agent.net).actors, agent._call(pp, type(agent.net).encode,
                                                                     obs))

    _, vjp = jax.vjp(actions, ap)
    return vjp(jnp.asarray(cot, jnp.float32))[0]


@pytest.mark.parametrize("algo,depth", [("ace", 1), ("ace", 2), ("ensemble-ddpg", 0)])
def test_actor_gradient_flows_through_root_actions_only(algo, depth):
    agent = make_agent(algo, plan_depth=depth) if algo == "ace" else make_agent(algo)
    p = random_params(agent, seed=3)
    obs = np.random.default_rng(1).normal(size=(3, OBS)).astype(np.float32)
    w = jnp.ones((3, agent.num_actors))
    got = jax.grad(agent.actor_loss, has_aux=True)(agent._actor_part(p), p, obs, w)[0]
    want = _hand_actor_grad(agent, p, obs, np.ones((3, agent.num_actors)))
    for k in got:
        if k == "enc":
            continue  # the encoder also enters f_q^d's input, which is held fixed; see below
        for leaf_g, leaf_w in zip(jax.tree_util.tree_leaves(got[k]),
                                  jax.tree_util.tree_leaves(want[k])):
            np.testing.assert_allclose(np.asarray(leaf_g), np.asarray(leaf_w),
                                       rtol=2e-3, atol=2e-5)
    # the encoder's actor gradient comes only through f_mu(z): identical to the VJP too
    for leaf_g, leaf_w in zip(jax.tree_util.tree_leaves(got["enc"]),
                              jax.tree_util.tree_leaves(want["enc"])):
        np.testing.assert_allclose(np.asarray(leaf_g), np.asarray(leaf_w), rtol=2e-3, atol=2e-5)


def test_ace_alt_updates_only_the_selected_actor():
    agent = make_agent("ace-alt", shared_actor_layer=True)
    p = random_params(agent, seed=5)
    batch = {"obs": np.random.default_rng(2).normal(size=(4, OBS)).astype(np.float32),
             "actor": np.array([1, 1, -1, 1], np.int32)}
    g = jax.grad(agent.actor_loss, has_aux=True)(agent._actor_part(p), p, batch["obs"],
                                                 agent.actor_weights(batch))[0]
    out = np.asarray(g["actor_out"]["kernel"]).reshape(agent.config.hidden, agent.num_actors, M)
    bias = np.asarray(g["actor_out"]["bias"]).reshape(agent.num_actors, M)
    assert np.abs(out[:, 1]).max() > 1e-6 and np.abs(bias[1]).max() > 1e-6
    for j in (0, 2):
        assert np.all(out[:, j] == 0) and np.all(bias[j] == 0)
    # and ACE (all actors) gives every actor a gradient
    ace = make_agent("ace", shared_actor_layer=True)
    g = jax.grad(ace.actor_loss, has_aux=True)(ace._actor_part(p), p, batch["obs"],
                                               ace.actor_weights(batch))[0]
    out = np.asarray(g["actor_out"]["kernel"]).reshape(ace.config.hidden, ace.num_actors, M)
    assert all(np.abs(out[:, j]).max() > 1e-6 for j in range(3))


def test_tm_ace_trains_q_alone_with_transition_loss():
    agent = make_agent("tm-ace", plan_depth=2)
    assert agent.train_depth == 0 and agent.act_depth == 2
    state = agent.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    batch = {"obs": rng.normal(size=(8, OBS)).astype(np.float32),
             "action": rng.uniform(-1, 1, (8, M)).astype(np.float32),
             "reward": rng.normal(size=8).astype(np.float32),
             "next_obs": rng.normal(size=(8, OBS)).astype(np.float32),
             "discount": np.ones(8, np.float32), "actor": np.zeros(8, np.int32)}
    state = jax.tree_util.tree_map(jnp.array, state)
    _, metrics, _ = agent.update(state, batch, jax.random.PRNGKey(0))
    assert {"transition_loss", "reward_loss", "critic_loss"} <= set(metrics)
    # the transition loss is 1/2 mean ||f_trans(z, a) - f_enc'(s')||^2
    p = state.params
    net = type(agent.net)
    z = agent._call(p, net.encode, batch["obs"])
    z1 = agent._call(p, net.trans, z, batch["action"][:, None])[:, 0]
    zt = agent._call(state.target, net.encode, batch["next_obs"])
    np.testing.assert_allclose(float(metrics["transition_loss"]),
                               0.5 * float(jnp.mean((z1 - zt) ** 2)), rtol=1e-5)


def test_policy_picks_argmax_of_tree_value_and_reports_actor():
    agent = make_agent(plan_depth=1)
    p = random_params(agent, seed=7)
    ref = Ref(p, agent.num_actors)
    obs = np.random.default_rng(3).normal(size=(5, OBS)).astype(np.float32)
    action, info = agent.policy(p, obs, jax.random.PRNGKey(0), False)
    for b in range(5):
        z = ref.enc(obs[b])
        vals = [ref.q_d(z, ref.mu(z, i), 1) for i in range(agent.num_actors)]
        k = int(np.argmax(vals))
        assert int(info["actor"][b]) == k
        np.testing.assert_allclose(np.asarray(action[b]), ref.mu(z, k), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("algo", ["ace", "ace-alt", "tm-ace", "ensemble-ddpg"])
def test_update_compiles_once_and_runs(tmp_path, algo):
    from offpolicy.training.run import Run

    run = registry.resolve(algo, train_overrides={
        "env": "Pendulum-v1", "steps": 300, "batch_size": 16, "eval_every": 300,
        "eval_episodes": 1, "log_every": 100, "quiet": True},
        agent_overrides={"encoder_size": 16, "hidden": 16, "num_actors": 3})
    t = Run(run, tmp_path / "run")
    summary = t.train()
    assert summary["status"] == "completed" and t.step == 300
    assert t.compile_count == 1
    chosen = t.replay.valid_values("actor")
    assert chosen.min() >= 0 and chosen.max() < 3
    header = (tmp_path / "run" / "train.csv").read_text().splitlines()[0]
    assert "critic_loss" in header and "actor_loss" in header
    # actor-diversity diagnostics, returned by the update as arrays (no reads of the run)
    rows = (tmp_path / "run" / "train.csv").read_text().splitlines()
    cols = dict(zip(header.split(","), rows[-1].split(","), strict=True))
    assert float(cols["action_spread"]) >= 0
    shares = [float(cols[f"chosen_fraction_{i}"]) for i in range(3)]
    assert sum(shares) == pytest.approx(1.0, abs=1e-5)


def test_cli_eval_per_actor_prints_one_row_per_actor(tmp_path):
    from _helpers import run_cli

    flags = ["--ace.num-actors", "3", "--ace.encoder-size", "16", "--ace.hidden", "16",
             "--batch-size", "16", "--eval-episodes", "1", "--quiet"]
    proc = run_cli("train", "ace", "--env", "Pendulum-v1", "--steps", "200", "--eval-every",
                   "200", "--run-dir", "R", *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("eval", "R", "--episodes", "2", "--per-actor", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["0", "1", "2"]
    # DDPG has no ensemble: a one-line error with exit code 2
    proc = run_cli("train", "ddpg", "--env", "Pendulum-v1", "--steps", "100", "--eval-every",
                   "100", "--eval-episodes", "1", "--ddpg.hidden", "8", "--quiet",
                   "--run-dir", "D", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("eval", "D", "--per-actor", "--episodes", "1", cwd=tmp_path)
    assert proc.returncode == 2 and "ensemble" in proc.stderr
