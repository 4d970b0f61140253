"""TD3, SAC and DQN against hand references (issue #33): TD3's clipped double-Q target with
clipped smoothing noise and its delayed actor/target updates, SAC's squashed-Gaussian
log-density against a numerical density and its temperature's gradient sign, DQN's (Double,
n-step) targets against plain-Python loops, and PER on DQN's n-step windows."""

from __future__ import annotations

import math
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_same_tree

from offpolicy import config as C
from offpolicy.agents.base import AgentContext
from offpolicy.agents.dqn import DQN, linear_epsilon
from offpolicy.agents.sac import SAC, temperature_loss
from offpolicy.agents.td3 import TD3, smoothed_target_action
from offpolicy.distributions import SquashedGaussian
from offpolicy.envs.spaces import ActionSpec
from offpolicy.replay.refer import ReplaySettings

CONT = ActionSpec.continuous(-np.ones(2), np.ones(2))


def transitions_batch(rng, B=16, obs_dim=3, act_dim=2, discrete=0):
    action = (rng.integers(0, discrete, (B, 1)).astype(np.float32) if discrete
              else rng.uniform(-1, 1, (B, act_dim)).astype(np.float32))
    return {"obs": rng.normal(size=(B, obs_dim)).astype(np.float32), "action": action,
            "reward": rng.normal(size=B).astype(np.float32),
            "next_obs": rng.normal(size=(B, obs_dim)).astype(np.float32),
            "discount": (rng.uniform(size=B) > 0.3).astype(np.float32)}


# ---------------------------------------------------------------------- TD3
@pytest.mark.parametrize("seed", [0, 1])
def test_td3_target_is_the_min_of_the_twins_at_the_smoothed_target_action(seed):
    cfg = C.TD3Config(hidden=(8, 8), policy_noise=0.7, noise_clip=0.3, gamma=0.97)
    agent = TD3(cfg, (3,), CONT)
    state = agent.init(jax.random.PRNGKey(seed))
    # targets that differ from the online networks, so the test sees which are used
    target = jax.tree_util.tree_map(lambda x: x + 0.3, state.params)
    rng = np.random.default_rng(seed)
    batch = transitions_batch(rng)
    key = jax.random.PRNGKey(seed + 10)
    y = np.asarray(agent.target(target, batch, key))
    # the reference: the same noise draw, clipped by hand, element by element
    pi_next = np.asarray(agent.pi(target.actor, batch["next_obs"]))
    noise = np.asarray(cfg.policy_noise * jax.random.normal(key, pi_next.shape))
    ref = np.empty(len(y))
    for b in range(len(y)):
        a = [min(1.0, max(-1.0, pi_next[b, i] + min(cfg.noise_clip, max(-cfg.noise_clip,
                                                                        noise[b, i]))))
             for i in range(pi_next.shape[1])]
        q1, q2 = np.asarray(agent.q(target.critic, batch["next_obs"][b:b + 1],
                                    np.asarray([a], np.float32)))[:, 0]
        ref[b] = batch["reward"][b] + cfg.gamma * batch["discount"][b] * min(q1, q2)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    # the smoothing noise is clipped: never further than c from pi'(s'), always in the box
    a = np.asarray(smoothed_target_action(jnp.zeros((1000, 2)), key, 10.0, 0.3))
    assert np.abs(a).max() <= 0.3 + 1e-7 and np.isclose(np.abs(a).max(), 0.3)


@pytest.mark.parametrize("delay", [1, 2, 3])
def test_td3_updates_actor_and_targets_every_d_critic_updates(delay):
    agent = TD3(C.TD3Config(hidden=(8, 8), policy_delay=delay), (3,), CONT)
    state = agent.init(jax.random.PRNGKey(0))
    update = jax.jit(agent.update)
    rng = np.random.default_rng(0)
    actor_steps, target_steps, critic_steps = [], [], []
    for k in range(1, 7):
        new, _, _ = update(state, transitions_batch(rng), jax.random.PRNGKey(k))
        changed = [not all(np.array_equal(a, b) for a, b in zip(
            jax.tree_util.tree_leaves(part(new)), jax.tree_util.tree_leaves(part(state))))
            for part in (lambda s: s.params.actor, lambda s: s.target.actor,
                         lambda s: s.params.critic)]
        if changed[0]:
            actor_steps.append(k)
        if changed[1]:
            target_steps.append(k)
        if changed[2]:
            critic_steps.append(k)
        state = new
    expected = [k for k in range(1, 7) if k % delay == 0]
    assert actor_steps == expected and target_steps == expected
    assert critic_steps == list(range(1, 7))  # the critics learn at every update
    assert int(state.updates) == 6


@pytest.mark.parametrize("delay", [1, 2])
def test_td3_target_every_update_steps_both_targets_before_the_actor(delay):
    """SBX's order (target_every_update): after every critic step both targets move towards
    the new critics and the actor as it was before this update's (delayed) actor step; the
    actor and critic steps are those of the paper's order."""
    cfg = C.TD3Config(hidden=(8, 8), policy_delay=delay, tau=0.3)
    sbx, paper = TD3(replace(cfg, target_every_update=True), (3,), CONT), TD3(cfg, (3,), CONT)
    state = sbx.init(jax.random.PRNGKey(0))
    # targets apart from the online networks, so that every soft update shows
    state = state.replace(target=jax.tree_util.tree_map(lambda x: x + 0.5, state.target))
    rng = np.random.default_rng(1)
    for k in range(1, 5):
        batch, key = transitions_batch(rng), jax.random.PRNGKey(k)
        new, _, _ = jax.jit(sbx.update)(state, batch, key)
        ref, _, _ = jax.jit(paper.update)(state, batch, key)
        for part in ("actor", "critic"):  # the same learning steps
            for a, b in zip(jax.tree_util.tree_leaves(getattr(new.params, part)),
                            jax.tree_util.tree_leaves(getattr(ref.params, part))):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        # the targets: tau (critic after this step, actor before it) + (1 - tau) old target
        online = {"critic": new.params.critic, "actor": state.params.actor}
        for part in ("actor", "critic"):
            for t, o, old in zip(jax.tree_util.tree_leaves(getattr(new.target, part)),
                                 jax.tree_util.tree_leaves(online[part]),
                                 jax.tree_util.tree_leaves(getattr(state.target, part))):
                np.testing.assert_allclose(t, 0.3 * np.asarray(o) + 0.7 * np.asarray(old),
                                           rtol=1e-5, atol=1e-6)
        state = new


def test_td3_actor_min_q_ascends_the_smaller_twin():
    """actor_min_q (SBX's TD3): L_actor = -mean_b min_i Q_i(s_b, pi(s_b)), against the two
    critics evaluated one by one; off: Q_1's alone (Algorithm 1)."""
    cfg = C.TD3Config(hidden=(8, 8))
    sbx, paper = TD3(replace(cfg, actor_min_q=True), (3,), CONT), TD3(cfg, (3,), CONT)
    p = sbx.init(jax.random.PRNGKey(0)).params
    obs = 3 * np.random.default_rng(3).normal(size=(64, 3)).astype(np.float32)
    q = np.asarray(sbx.q(p.critic, obs, sbx.pi(p.actor, obs)))  # [2, B]
    assert (q[0] < q[1]).any() and (q[1] < q[0]).any()  # each twin is the smaller somewhere
    ref = -np.mean([min(q[0, b], q[1, b]) for b in range(obs.shape[0])])
    assert float(sbx.actor_loss(p.actor, p.critic, obs)) == pytest.approx(ref, rel=1e-5)
    assert float(paper.actor_loss(p.actor, p.critic, obs)) == \
        pytest.approx(-q[0].mean(), rel=1e-5)


@pytest.mark.parametrize("scheme", C.INIT_SCHEMES)
def test_a_jitted_init_draws_the_eager_init_bitwise(scheme):
    """The learner initialises with jax.jit(agent.init): for every initial law (and a
    recurrent core, and the Nature CNN) the same values as the agent's init run op by op."""
    agents = [TD3(C.TD3Config(hidden=(8, 8), init=scheme), (3,), CONT),
              TD3(C.TD3Config(hidden=(8,), init=scheme, core="lstm", core_cells=4,
                              core_window=4), (3,), CONT)]
    if scheme == C.INIT_SCHEMES[0]:
        agents.append(DQN(C.DQNConfig(), (84, 84, 4), ActionSpec("discrete", shape=(), n=4)))
    for agent in agents:
        key = jax.random.PRNGKey(5)
        assert_same_tree(jax.jit(agent.init)(key), agent.init(key))


# ---------------------------------------------------------------------- SAC
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_squashed_gaussian_log_prob_matches_a_numerical_density(seed):
    """log p(a) against the derivative of the CDF P(tanh(u) <= a) = Phi((atanh(a) - m) / s),
    taken numerically per dimension (the dimensions are independent)."""
    rng = np.random.default_rng(seed)
    m, s = rng.normal(size=3), rng.uniform(0.2, 1.5, 3)
    u = m + s * rng.normal(size=3)
    a = np.tanh(u)
    logp = float(SquashedGaussian().log_prob({"mean": m, "std": s}, u[None])[0])

    def cdf(x, i):
        return 0.5 * (1 + math.erf((math.atanh(x) - m[i]) / (s[i] * math.sqrt(2))))

    ref = 0.0
    for i in range(3):
        h = 1e-6 * (1 - abs(a[i]))
        ref += math.log((cdf(a[i] + h, i) - cdf(a[i] - h, i)) / (2 * h))
    assert logp == pytest.approx(ref, rel=1e-4, abs=1e-4)


def test_squashed_gaussian_log_prob_is_finite_where_tanh_saturates():
    u = np.asarray([[30.0, -40.0]], np.float32)
    logp = SquashedGaussian().log_prob({"mean": u, "std": np.ones(2)}, u)
    assert np.isfinite(np.asarray(logp)).all()


def test_squashed_gaussian_log_prob_with_sb3s_eps_matches_a_numpy_reference():
    """``eps`` > 0: log N(u) - sum log(1 - tanh(u)^2 + eps), SB3's formula, on random u (a
    plain NumPy reference in float64); a saturated dimension's correction is log(eps) with no
    gradient, where the exact one keeps pulling u back (gradient 2 of -log-det per unit u)."""
    rng = np.random.default_rng(4)
    m, s = rng.normal(size=(6, 3)), rng.uniform(0.2, 1.5, (6, 3))
    u = (m + s * rng.normal(size=(6, 3))).astype(np.float32)
    eps = 1e-6
    ref = (-0.5 * ((u - m) / s) ** 2 - np.log(s) - 0.5 * np.log(2 * np.pi)
           - np.log(1.0 - np.tanh(u.astype(np.float64)) ** 2 + eps)).sum(-1)
    got = SquashedGaussian().log_prob({"mean": m, "std": s}, u, eps)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-4)
    exact = SquashedGaussian().log_prob({"mean": m, "std": s}, u)
    assert not np.allclose(np.asarray(got), np.asarray(exact), atol=1e-7)

    def correction(x, e):  # log p minus the Gaussian term: -log-det of one saturated dim
        d = SquashedGaussian().log_prob({"mean": x, "std": jnp.ones(1)}, x, e)
        return d[0] + 0.5 * np.log(2 * np.pi)
    x = jnp.asarray([[20.0]])
    assert float(correction(x, eps)) == pytest.approx(-np.log(eps), rel=1e-6)
    assert float(jax.grad(lambda v: correction(v, eps))(x)[0, 0]) == 0.0
    assert float(jax.grad(lambda v: correction(v, 0.0))(x)[0, 0]) == pytest.approx(2.0, rel=1e-5)


def test_sac_log_det_eps_changes_the_update():
    """--sac.log-det-eps reaches log pi in the target, the actor loss and the temperature."""
    batch = transitions_batch(np.random.default_rng(0))
    out = []
    for eps in (0.0, 0.5):
        agent = SAC(C.SACConfig(hidden=(8, 8), log_det_eps=eps), (3,), CONT)
        state = agent.init(jax.random.PRNGKey(0))
        out.append(jax.jit(agent.update)(state, batch, jax.random.PRNGKey(1))[1])
    for k in ("target_mean", "actor_loss", "entropy"):  # entropy: the log pi alpha follows
        assert float(out[0][k]) != pytest.approx(float(out[1][k]), rel=1e-4), k


def test_temperature_gradient_raises_alpha_when_the_entropy_is_below_target():
    log_alpha = jnp.asarray(0.0)
    target_entropy = -2.0
    low_entropy = jnp.full(8, 5.0)  # -log pi = -5 < -2: too little entropy
    high_entropy = jnp.full(8, -5.0)  # -log pi = 5 > -2
    g_low = jax.grad(temperature_loss)(log_alpha, low_entropy, target_entropy)
    g_high = jax.grad(temperature_loss)(log_alpha, high_entropy, target_entropy)
    assert g_low < 0 < g_high  # gradient descent raises alpha, resp. lowers it
    assert float(g_low) == pytest.approx(-(5.0 + target_entropy))


def test_sac_update_raises_alpha_for_a_nearly_deterministic_policy():
    cfg = C.SACConfig(hidden=(8, 8), log_std_min=-10.0, log_std_max=-9.0)  # std ~ e^-9
    agent = SAC(cfg, (3,), CONT)
    state = agent.init(jax.random.PRNGKey(0))
    new, metrics, _ = jax.jit(agent.update)(state, transitions_batch(np.random.default_rng(0)),
                                            jax.random.PRNGKey(1))
    assert float(new.log_alpha) > float(state.log_alpha)
    assert float(metrics["entropy"]) < agent.target_entropy


def test_sac_refer_ratio_is_one_for_the_policy_that_acted():
    """Under ReF-ER, a step stored by the current policy has rho = 1 and KL = 0 (the squash's
    Jacobian cancels in the ratio)."""
    agent = SAC(C.SACConfig(hidden=(8, 8)), (3,), CONT,
                AgentContext(ReplaySettings("refer")))
    state = agent.init(jax.random.PRNGKey(0))
    batch = transitions_batch(np.random.default_rng(0))
    action, info = agent.policy(agent.acting_params(state), jnp.asarray(batch["obs"]),
                                jax.random.PRNGKey(3), True)
    batch = {**batch, "action": np.asarray(action), **{k: np.asarray(v) for k, v in
                                                       info.items()},
             "far_fraction": np.float32(0.0)}
    _, metrics, wb = jax.jit(agent.update)(state, batch, jax.random.PRNGKey(1))
    np.testing.assert_allclose(np.asarray(wb["rho"]), 1.0, rtol=1e-5)
    assert float(metrics["kl_mu_pi"]) == pytest.approx(0.0, abs=1e-6)


# ---------------------------------------------------------------------- DQN
def _dqn(**kw):
    cfg = C.DQNConfig(hidden=(8, 8), **kw)
    return DQN(cfg, (3,), ActionSpec("discrete", shape=(), n=4))


@pytest.mark.parametrize("double", [False, True])
def test_dqn_one_step_target_against_a_loop(double):
    agent = _dqn(double=double, gamma=0.9)
    state = agent.init(jax.random.PRNGKey(0))
    target = agent.init(jax.random.PRNGKey(7)).params  # an unrelated target network
    batch = transitions_batch(np.random.default_rng(1), discrete=4)
    _, _, g = agent.targets(state.params, target, batch)
    q_online = np.asarray(agent.q_values(state.params, batch["next_obs"]))
    q_target = np.asarray(agent.q_values(target, batch["next_obs"]))
    for b in range(len(g)):
        if double:  # the online network picks, the target network values (Eq. 4)
            v = q_target[b][int(np.argmax(q_online[b]))]
        else:
            v = max(q_target[b])
        ref = batch["reward"][b] + 0.9 * batch["discount"][b] * v
        assert float(g[b]) == pytest.approx(float(ref), rel=1e-5, abs=1e-5)
    if double:  # the test can tell the two apart
        assert not np.allclose(q_target[np.arange(len(g)), q_online.argmax(1)],
                               q_target.max(1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dqn_n_step_target_against_a_loop(seed):
    n, B, gamma = 3, 8, 0.9
    agent = _dqn(n_step=n, gamma=gamma)
    state = agent.init(jax.random.PRNGKey(seed))
    rng = np.random.default_rng(seed)
    terminated = rng.uniform(size=(n, B)) < 0.2
    mask = np.ones((n, B), np.float32)
    for b in range(B):  # a window pads (mask 0) after its episode's last step
        ends = np.flatnonzero(terminated[:, b] | (rng.uniform(size=n) < 0.15))
        if ends.size:
            mask[ends[0] + 1:, b] = 0.0
    batch = {"obs": rng.normal(size=(n + 1, B, 3)).astype(np.float32),
             "action": rng.integers(0, 4, (n, B, 1)).astype(np.float32),
             "reward": rng.normal(size=(n, B)).astype(np.float32),
             "discount": (~terminated).astype(np.float32), "mask": mask}
    _, a0, g = agent.targets(state.params, state.params, batch)
    v = np.asarray(agent.q_values(state.params, batch["obs"][1:])).max(-1)  # [n, B]
    for b in range(B):
        ret, disc = 0.0, 1.0
        for t in range(n):
            ret += disc * batch["reward"][t, b]
            disc *= gamma * batch["discount"][t, b]
            last = t == n - 1 or mask[t + 1, b] == 0
            if last:
                ret += disc * v[t, b]
                break
        assert float(g[b]) == pytest.approx(ret, rel=1e-5, abs=1e-5)
    np.testing.assert_array_equal(np.asarray(a0), batch["action"][0, :, 0])


def test_dueling_heads_keep_the_advantage_mean_at_zero():
    """Q = V + A - mean_a A (Wang et al. 2016, Eq. 9): a per-action shift d of the advantage
    head moves Q by d - mean(d) (a constant shift not at all), a shift of V moves every Q."""
    agent = _dqn(dueling=True)
    params = agent.init(jax.random.PRNGKey(0)).params
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    z = np.asarray(agent.q_values(params, obs))
    assert set(params) == {"Torso_0", "Dense_0", "Dense_1"}
    v_head, a_head = params["Dense_0"], params["Dense_1"]
    assert v_head["bias"].shape == (1,) and a_head["bias"].shape == (z.shape[-1],)
    shifted = {**params, "Dense_0": {**v_head, "bias": v_head["bias"] + 7.0}}
    np.testing.assert_allclose(np.asarray(agent.q_values(shifted, obs)) - z, 7.0, rtol=1e-5)
    d = np.random.default_rng(1).normal(size=z.shape[-1]).astype(np.float32) + 1.0
    moved = {**params, "Dense_1": {**a_head, "bias": a_head["bias"] + d}}
    np.testing.assert_allclose(np.asarray(agent.q_values(moved, obs)) - z,
                               np.broadcast_to(d - d.mean(), z.shape), atol=1e-5)
    flat = {**params, "Dense_1": {**a_head, "bias": a_head["bias"] + 5.0}}
    np.testing.assert_allclose(np.asarray(agent.q_values(flat, obs)), z, atol=1e-5)


def test_dqn_epsilon_decays_linearly_in_env_steps():
    agent = DQN(C.DQNConfig(hidden=(8,), epsilon_start=1.0, epsilon_end=0.1,
                            epsilon_decay_steps=1000), (3,),
                ActionSpec("discrete", shape=(), n=2),
                AgentContext(updates_per_step=0.25, warmup_steps=100))
    # updates u happen at env step 100 + 4 u
    for u, step in [(0, 100), (100, 500), (225, 1000), (1000, 4100)]:
        eps = float(agent.epsilon(jnp.asarray(u)))
        assert eps == pytest.approx(float(linear_epsilon(step, 1.0, 0.1, 1000)))
    assert float(agent.epsilon(jnp.asarray(10_000))) == pytest.approx(0.1)


def test_dqn_target_network_is_copied_every_c_updates():
    agent = _dqn(target_update_every=3)
    state = agent.init(jax.random.PRNGKey(0))
    update = jax.jit(agent.update)
    rng = np.random.default_rng(0)
    for k in range(1, 7):
        state, _, _ = update(state, transitions_batch(rng, discrete=4), jax.random.PRNGKey(k))
        same = all(np.array_equal(a, b) for a, b in zip(
            jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(state.target)))
        assert same == (k % 3 == 0), k


def test_dqn_with_n_step_windows_and_per_trains(tmp_path):
    """PER over n-step windows: slots drawn by priority start the windows, each window's
    first step gets the new priority."""
    from offpolicy import registry
    from offpolicy.training.run import Run

    run = registry.resolve("dqn", train_overrides={
        "env": "CartPole-v1", "steps": 400, "batch_size": 8, "eval_every": 400,
        "eval_episodes": 1, "quiet": True, "replay": "per", "updates_per_step": 1.0,
        "warmup_steps": 20}, agent_overrides={"hidden": (8,), "n_step": 3, "double": True})
    r = Run(run, tmp_path / "run")
    per = r.learner.replay.sampler.selector.per  # the table's prioritized selector's ranking
    assert per is not None
    drawn, written = [], []
    sample, update = per.sample, per.update

    def spy_sample(n, step):
        idx, weight = sample(n, step)
        drawn.append(np.array(idx))
        return idx, weight

    def spy_update(idx, priority):
        written.append((np.array(idx), np.array(priority)))
        update(idx, priority)

    per.sample, per.update = spy_sample, spy_update
    r.train(final_eval=False)
    assert r.learner.updates > 300 and len(drawn) == len(written) == r.learner.updates
    for start, (slots, priority) in zip(drawn, written):
        # only each window's first step (the drawn slot) gets a priority, |Q(s_0, a_0) - G|
        np.testing.assert_array_equal(slots, start)
        assert np.isfinite(priority).all() and (priority >= 0).all()
    assert len({float(p) for _, ps in written for p in ps}) > 100  # TD errors, not a constant


@pytest.mark.parametrize("wait", [True, False])
def test_updates_start_after_warmup_or_once_replay_holds_a_batch(tmp_path, wait):
    """SB3 updates from the step after its warm-up (``learning_starts``), sampling with
    replacement from fewer transitions than a batch: ``--no-wait-for-batch``. By default
    updates wait for a full batch: 100 warm-up steps and batch 64 give the first update at
    step 101 either way, batch 160 at step 160 (waiting) or 101 (not)."""
    from offpolicy import registry
    from offpolicy.training.run import Run

    counts = {}
    for batch in (64, 160):
        run = registry.resolve("td3", train_overrides={
            "env": "Pendulum-v1", "steps": 200, "batch_size": batch, "eval_every": 200,
            "eval_episodes": 1, "quiet": True, "warmup_steps": 100, "wait_for_batch": wait,
            "updates_per_step": 1.0}, agent_overrides={"hidden": (8,)})
        r = Run(run, tmp_path / f"b{batch}")
        r.train(final_eval=False)
        counts[batch] = r.learner.updates
    assert counts[64] == 100
    assert counts[160] == (41 if wait else 100)


@pytest.mark.parametrize("algo,train,match", [
    ("acer", {"env": "CartPole-v1"}, "learns from sequences"),
    ("ddpg", {"replay_statistics": True}, "--replay-statistics"),
])
def test_no_wait_for_batch_is_refused_where_it_is_not_defined(tmp_path, algo, train, match):
    """One-line errors before any step: sequence agents wait for whole windows anyway, and
    replay statistics read at the first update would come from a handful of transitions."""
    from offpolicy import registry
    from offpolicy.errors import OffpolicyError
    from offpolicy.training.run import Run

    run = registry.resolve(algo, train_overrides={**train, "wait_for_batch": False,
                                                  "steps": 8, "quiet": True})
    with pytest.raises(OffpolicyError, match=match):
        Run(run, tmp_path / "run")


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_the_sb3_preset_starts_updates_after_warmup_as_sb3_does(algo):
    """SB3 updates from the step after learning_starts (100) whatever its batch (256): the
    preset does not wait for a full batch; the papers' presets do."""
    from offpolicy import registry

    sb3 = registry.resolve(algo, preset="sb3").train
    assert (sb3.warmup_steps, sb3.batch_size, sb3.wait_for_batch) == (100, 256, False)
    assert registry.resolve(algo, preset="paper").train.wait_for_batch


def test_sacs_sb3_preset_warms_up_uniformly_unless_replay_records_the_behaviour():
    """SAC's sb3 preset acts uniformly during its 100 warm-up steps (SB3's learning_starts);
    under ReF-ER or --replay-diagnostics, which record each action's behaviour density, the
    preset's warm-up samples the initial policy; a flag asking for uniform there stays (and
    build refuses it). TD3's warm-up is uniform through auto (host noise)."""
    from offpolicy import registry

    def warmup(algo, preset, **train):
        return registry.resolve(algo, preset=preset, train_overrides=train).train.warmup_actions

    assert warmup("sac", "sb3") == "uniform" and warmup("sac", "paper") == "auto"
    assert warmup("sac", "sb3", replay="per") == "uniform"
    assert warmup("sac", "sb3", replay="refer") == "policy"
    assert warmup("sac", "sb3", replay="refer2") == "policy"
    assert warmup("sac", "sb3", replay_diagnostics=True) == "policy"
    assert warmup("sac", "sb3", replay="refer", warmup_actions="uniform") == "uniform"
    assert warmup("sac", "sb3", replay="refer", warmup_actions="auto") == "auto"
    from_file = registry.resolve("sac", preset="sb3", file_dict={"train": {
        "replay": "refer", "warmup_actions": "uniform"}}).train
    assert from_file.warmup_actions == "uniform"
    assert warmup("td3", "sb3") == "auto"


def test_a_saved_config_without_warmup_actions_loads_with_what_the_run_did(tmp_path):
    """A config.yaml saved before --warmup-actions existed ran with auto (SAC's sb3 preset
    sampled its initial policy): it loads so, though the preset now warms up uniformly, and
    resuming it with the preset names both values."""
    from offpolicy import registry
    from offpolicy.errors import OffpolicyError

    saved = registry.resolve("sac", preset="sb3").to_dict()
    del saved["train"]["warmup_actions"]
    old = registry.RunConfig.from_dict(saved)
    assert old.train.warmup_actions == "auto"
    assert registry.resolved_flat("sac", "sb3", "HalfCheetah-v5")["train.warmup_actions"] == \
        "auto"
    requested = registry.resolve("sac", preset="sb3")
    train_fields, _ = registry.get("sac").preset_fields("sb3")
    with pytest.raises(OffpolicyError, match="warmup_actions \\(the run has 'auto', now "
                                             "'uniform'\\)"):
        old.resumed_with(requested, train_fields)
    again = registry.resolve("sac", preset="sb3", train_overrides={"warmup_actions": "auto"})
    assert old.resumed_with(again, train_fields | {"warmup_actions"}).train.warmup_actions == \
        "auto"
    # the same for --wait-for-batch: before it, updates waited for a full batch (TD3's sb3
    # preset has started at step 101 since)
    td3 = registry.resolve("td3", preset="sb3").to_dict()
    del td3["train"]["wait_for_batch"]
    assert registry.RunConfig.from_dict(td3).train.wait_for_batch
    assert registry.resolved_flat("td3", "sb3", "Hopper-v5")["train.wait_for_batch"] == "True"
    assert not registry.resolve("td3", preset="sb3").train.wait_for_batch


@pytest.mark.parametrize("algo,warmup_actions,uniform", [
    ("sac", "auto", 0), ("sac", "uniform", 30), ("sac", "policy", 0),
    ("td3", "auto", 30), ("td3", "uniform", 30), ("td3", "policy", 0)])
def test_warmup_actions_choose_what_acts_during_warmup(tmp_path, monkeypatch, algo,
                                                      warmup_actions, uniform):
    """``--warmup-actions``: auto keeps uniformly random warm-up actions for deterministic
    policies (TD3) and the initial policy's samples for stochastic ones (SAC); uniform is
    SB3's learning_starts for both; policy lets the initial policy act from the first step."""
    from offpolicy import registry
    from offpolicy.training.collector import Collector
    from offpolicy.training.run import Run

    drawn = []
    random_actions = Collector.random_actions

    def spy(self):
        drawn.append(1)
        return random_actions(self)

    monkeypatch.setattr(Collector, "random_actions", spy)
    run = registry.resolve(algo, train_overrides={
        "env": "Pendulum-v1", "steps": 40, "batch_size": 8, "eval_every": 40,
        "eval_episodes": 1, "quiet": True, "warmup_steps": 30,
        "warmup_actions": warmup_actions}, agent_overrides={"hidden": (8,)})
    r = Run(run, tmp_path / "run")
    r.train(final_eval=False)
    assert len(drawn) == uniform and r.learner.updates == 10


def test_uniform_warmup_is_refused_where_replay_records_the_behaviour_policy(tmp_path):
    """ReF-ER on SAC records (m, s, u) of each action: a uniform warm-up action has none."""
    from offpolicy import registry
    from offpolicy.errors import OffpolicyError
    from offpolicy.training.run import Run

    run = registry.resolve("sac", preset="sb3", train_overrides={
        "env": "Pendulum-v1", "steps": 8, "quiet": True, "replay": "refer",
        "warmup_actions": "uniform"})
    with pytest.raises(OffpolicyError, match="--warmup-actions policy"):
        Run(run, tmp_path / "run")
    ok = registry.resolve("sac", preset="sb3", train_overrides={
        "env": "Pendulum-v1", "steps": 8, "quiet": True, "warmup_actions": "uniform"})
    Run(ok, tmp_path / "ok").close()


@pytest.mark.parametrize("algo,env,agent", [
    ("td3", "Pendulum-v1", {"hidden": (8,)}),
    ("sac", "Pendulum-v1", {"hidden": (8,)}),
    ("dqn", "CartPole-v1", {"hidden": (8,), "n_step": 2}),
])
def test_runs_with_env_copies_and_the_pipelined_loop(tmp_path, algo, env, agent):
    from offpolicy import registry
    from offpolicy.training.run import Run

    run = registry.resolve(algo, train_overrides={
        "env": env, "steps": 240, "batch_size": 8, "eval_every": 240, "eval_episodes": 1,
        "quiet": True, "num_envs": 2, "pipeline": True, "warmup_steps": 20,
        "updates_per_step": 1.0}, agent_overrides=agent)
    r = Run(run, tmp_path / "run")
    result = r.train()
    assert result["status"] == "completed" and np.isfinite(result["final_return"])
    assert r.learner.updates >= 200


def test_dqn_learns_from_atari_frames_with_the_nature_cnn(tmp_path):
    pytest.importorskip("ale_py")
    from offpolicy import registry
    from offpolicy.training.run import Run

    run = registry.resolve("dqn", train_overrides={
        "env": "ALE/Pong-v5", "steps": 120, "batch_size": 4, "buffer_size": 1000,
        "eval_every": 120, "eval_episodes": 1, "quiet": True, "warmup_steps": 40,
        "updates_per_step": 1.0})
    r = Run(run, tmp_path / "run")
    r.train(final_eval=False)
    assert r.learner.updates >= 70
    assert "NatureCNN_0" in r.learner.state.params["Torso_0"]


@pytest.mark.parametrize("algo,preset", [("dqn", "paper"), ("acer", "paper-atari")])
def test_the_atari_presets_write_their_large_replay_less_often(algo, preset):
    """A latest checkpoint holds the whole replay (5-7 GiB of frames for these presets): they
    write one every 100 000 steps, which --checkpoint-every still sets; other settings keep
    10 000."""
    from offpolicy import registry

    atari = registry.resolve(algo, preset=preset).train
    assert atari.checkpoint_every == registry.ATARI_CHECKPOINT_EVERY == 100_000
    assert atari.checkpoint_every % atari.num_envs == 0
    own = registry.resolve(algo, preset=preset, train_overrides={"checkpoint_every": 20_000})
    assert own.train.checkpoint_every == 20_000
    assert registry.resolve(algo).train.checkpoint_every == 10_000
