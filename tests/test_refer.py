"""ReF-ER (replay/refer.py), the stored V^tbc targets (replay/stored_returns.py), the replay's
running far-policy count and whole-episode forgetting, Rule 1 in DDPG, NAF's quadratic Q."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from replay_tables import draw, far_count
from replay_tables import table as ReplayBuffer

from offpolicy import registry
from offpolicy.agents.naf import advantage
from offpolicy.envs.spaces import ActionSpec
from offpolicy.replay import refer, stored_returns
from offpolicy.replay.samplers import Uniform
from offpolicy.replay.stored_returns import StoredReturns
from offpolicy.returns import v_tbc
from offpolicy.training.build import build_agent

GAMMA = 0.9


# ---------------------------------------------------------------------- Eq. 12 and 13
def test_beta_fixed_points_and_c_max_schedule():
    beta = jnp.asarray(0.5)
    for _ in range(5000):
        beta = refer.update_beta(beta, jnp.asarray(0.3), 0.1, 1e-2)  # too many far samples
    assert float(beta) < 1e-10
    for _ in range(5000):
        beta = refer.update_beta(beta, jnp.asarray(0.05), 0.1, 1e-2)
    assert abs(float(beta) - 1.0) < 1e-5  # float32
    assert float(refer.c_max(jnp.asarray(0), 4.0, 5e-7)) == pytest.approx(5.0)
    assert float(refer.c_max(jnp.asarray(2_000_000), 4.0, 5e-7)) == pytest.approx(3.0)
    rho = jnp.asarray([0.1, 0.21, 1.0, 4.9, 5.0, 7.0])
    np.testing.assert_array_equal(refer.near_policy(rho, jnp.asarray(5.0)), [0, 1, 1, 1, 0, 0])


def test_far_fraction_settles_near_target():
    """A memory whose new samples are far-policy with probability growing with beta (a policy
    free to move drifts from its behaviours): Eq. 12 drives the far fraction of the memory,
    counted from the stored flags, to D."""
    rng = np.random.default_rng(0)
    n, target = 2000, 0.1
    flags = np.zeros(n)
    beta, fractions = 1.0, []
    for k in range(40_000):
        flags[k % n] = rng.random() < 0.3 * beta  # the refreshed sample's far flag
        frac = flags.mean()
        beta = float(refer.update_beta(jnp.asarray(beta), jnp.asarray(frac), target, 1e-3))
        fractions.append(frac)
    assert abs(np.mean(fractions[-10_000:]) - target) < 0.02


# ---------------------------------------------------------------------- replay bookkeeping
def test_counted_field_matches_a_scan_through_writes_and_wraparound():
    rng = np.random.default_rng(1)
    buf = ReplayBuffer(50, (2,), 1, {"far": ((), np.float32, 0.0)}, counted=("far",),
                       forget_whole_episodes=True)
    buf.start_episode(np.zeros(2))
    for t in range(400):
        end = rng.random() < 0.1
        buf.add(rng.normal(size=1), 0.0, end, False, rng.normal(size=2))
        if end:
            buf.start_episode(rng.normal(size=2))
        if t % 3 == 0 and len(buf):
            idx = draw(buf, 8)
            buf.write_back(idx, {}, {"far": (rng.random(8) < 0.5).astype(np.float32)})
        assert far_count(buf) == pytest.approx(buf.valid_values("far").sum())


def test_whole_episodes_leave_oldest_first():
    buf = ReplayBuffer(12, (1,), 1, forget_whole_episodes=True)
    ep = 0
    buf.start_episode(np.array([0.0]))
    for t in range(40):
        end = t % 4 == 3
        buf.add([0.0], float(ep), end, False, np.array([t + 1.0]))
        if end:
            ep += 1
            buf.start_episode(np.array([t + 1.0]))
        kept = buf.valid_values("reward")
        for e in np.unique(kept):  # every stored episode is whole: 4 steps, or the open one
            assert (kept == e).sum() == 4 or e == ep, (t, kept)
    st = buf.storage
    firsts = st.episode_first_slots(np.flatnonzero(st.valid))
    assert (st.reward[firsts] == st.reward[np.flatnonzero(st.valid)]).all()


class _ForgetReference:
    """Plain-Python model of a replay that forgets by far-policy fraction (the authors'
    smarties, ``MemoryProcessing::prune`` under ``farpolfrac``): episodes as lists of step
    keys, numbered in the order they finish (smarties numbers a sequence when it stores it),
    each ring's observation writes counted, and the ring's own whole-episode forgetting when it
    overwrites an episode's first observation."""

    def __init__(self, ring_slots, rings, memory):
        self.ring_slots, self.memory = ring_slots, memory
        self.writes = [0] * rings
        self.episodes = []  # dicts: id (in the order they finished), ring, first (the ring's
        # write number), steps, closed
        self.finished = 0
        self.open = [None] * rings
        self.far = {}  # step key -> far flag
        self.picks = {"far": 0, "oldest": 0}

    def alive(self):
        return [e for e in self.episodes if e["alive"]]

    def keys(self):
        return {k for e in self.alive() for k in e["steps"]}

    def _obs_write(self, ring):
        w = self.writes[ring]
        self.writes[ring] += 1
        for e in self.alive():
            if e["ring"] == ring and e["first"] == w - self.ring_slots:
                e["alive"] = False  # the ring overwrote its first observation
        return w

    def start(self, ring):
        e = {"id": None, "ring": ring, "steps": [], "closed": False, "alive": True}
        e["first"] = self._obs_write(ring)
        self.episodes.append(e)
        self.open[ring] = e

    def steps(self, keys, done):
        """One step of these rings ({ring: key}); ``done``: the rings whose episode ends."""
        for ring, key in keys.items():
            self._obs_write(ring)
            self.open[ring]["steps"].append(key)
            self.far[key] = 0.0
        for ring in done:  # the episodes that end here are stored first, then the memory pruned
            self.open[ring]["closed"] = True
            self.open[ring]["id"] = self.finished
            self.finished += 1
        while len(self.keys()) > self.memory:
            done_eps = sorted((e for e in self.alive() if e["closed"]), key=lambda e: e["id"])
            if not done_eps:
                break
            mean = [sum(self.far[k] for k in e["steps"]) / len(e["steps"]) for e in done_eps]
            pick = done_eps[mean.index(max(mean))]
            if done_eps[0]["id"] + len(done_eps) < pick["id"]:
                pick = done_eps[0]
            self.picks["oldest" if pick is done_eps[0] else "far"] += 1
            pick["alive"] = False


@pytest.mark.parametrize("rings", [1, 3])
def test_forgetting_the_most_far_policy_episode_follows_a_plain_reference(tmp_path, rings):
    """--refer-forget far-policy: after every step the replay holds exactly the steps the
    reference keeps (the finished episode with the largest far fraction leaves while more than
    ``memory`` steps are stored, the oldest instead once it is more than a memory's count of
    episodes older; the ring still forgets what it overwrites), the far count matches, and a
    save / load half-way keeps the episodes' ages."""
    rng = np.random.default_rng(11)
    memory = 60
    fields = {"far": ((), np.float32, 0.0)}

    def make():
        return ReplayBuffer(2 * memory, (1,), 1, fields, counted=("far",),
                            num_streams=rings, seed=3, memory=memory)

    buf, ref = make(), _ForgetReference(2 * memory // rings, rings, memory)
    for s in range(rings):
        buf.start_episode(np.zeros(1), s)
        ref.start(s)
    key, length = 0, np.zeros(rings, int)
    for t in range(900):
        if t == 450:  # a resumed run continues exactly
            buf.save(tmp_path / "r.npz")
            buf = make()
            buf.load(tmp_path / "r.npz")
        done = (rng.random(rings) < 0.15) | (length == 12)  # episodes within a ring's 40 slots
        length = np.where(done, 0, length + 1)
        keys = {s: key + s for s in range(rings)}
        key += rings
        buf.add_batch(np.zeros((rings, 1)), np.array([float(keys[s]) for s in range(rings)]),
                      done, np.zeros(rings, bool), np.zeros((rings, 1)))
        ref.steps(keys, np.flatnonzero(done))
        for s in np.flatnonzero(done):
            buf.start_episode(np.zeros(1), int(s))
            ref.start(int(s))
        if t % 2 == 0:  # write-back: sampled steps' new far flags (a third far)
            idx = draw(buf, 16)
            flags = (rng.random(16) < 0.3).astype(np.float32)
            buf.write_back(idx, {}, {"far": flags})
            for i, f in zip(idx, flags):
                ref.far[int(buf.storage.reward[i])] = float(f)
        held = {int(r) for r in buf.valid_values("reward")}
        assert held == ref.keys(), t
        assert len(buf) <= memory
        assert far_count(buf) == pytest.approx(sum(ref.far[k] for k in held))
    assert ref.picks["far"] > 20 and ref.picks["oldest"] > 0, ref.picks
    assert buf.remover.pruned == ref.picks["far"] + ref.picks["oldest"]


def test_far_policy_forgetting_needs_refer_and_doubles_the_rings(tmp_path):
    from offpolicy.errors import OffpolicyError
    from offpolicy.training.run import Run

    with pytest.raises(OffpolicyError, match="--refer-forget far-policy needs --replay refer"):
        registry.resolve("ddpg", train_overrides={"refer_forget": "far-policy"})
    run = registry.resolve("ddpg", train_overrides={
        "env": "Pendulum-v1", "steps": 2000, "eval_every": 2000, "eval_episodes": 1,
        "quiet": True, "replay": "refer", "refer_forget": "far-policy", "buffer_size": 1000,
        "batch_size": 32}, agent_overrides={"hidden": (8, 8)})
    t = Run(run, tmp_path / "d")
    t.train()
    r = t.replay
    assert (r.capacity, r.memory) == (2000, 1000)
    assert 800 <= len(r) <= 1000 and r.remover.pruned >= 4  # 200-step episodes, whole
    assert far_count(r) == pytest.approx(r.valid_values("far").sum())


# ---------------------------------------------------------------------- V^tbc store
def _episode(rng, n, terminated):
    spec = stored_returns.StoredReturn(GAMMA)
    fields = {"value": ((), np.float32), "v": ((), np.float32, np.nan),
              "v_tbc": ((), np.float32, np.nan), "rho": ((), np.float32, 1.0)}
    buf = ReplayBuffer(64, (1,), 1, fields, forget_whole_episodes=True)
    buf.start_episode(np.zeros(1))
    for t in range(n):
        last = t == n - 1
        buf.add([0.0], rng.normal(), last and terminated, last and not terminated,
                np.zeros(1), value=rng.normal())
    (first, last), = buf.storage.take_closed_episodes()
    return spec, buf.storage, first, last


def _reference(buf, slots, terminated, final_value=0.0, gamma=GAMMA):
    """Eq. 8 as a plain float64 loop: V^tbc after the last step is 0 at termination and
    V(s_T) (``final_value``) at truncation."""
    v = np.where(np.isnan(buf.extras["v"][slots]), buf.extras["value"][slots],
                 buf.extras["v"][slots]).astype(np.float64)
    rho = buf.extras["rho"][slots].astype(np.float64)
    nxt = 0.0 if terminated else float(final_value)
    out = np.zeros(len(slots))
    for i in reversed(range(len(slots))):
        nxt = v[i] + min(1.0, rho[i]) * (float(buf.reward[slots[i]]) + gamma * nxt - v[i])
        out[i] = nxt
    return out, v, rho


@pytest.mark.parametrize("terminated", [True, False])
def test_close_episode_is_the_v_tbc_recursion(terminated):
    spec, buf, first, last = _episode(np.random.default_rng(2), 9, terminated)
    buf.extras["rho"][:9] = np.random.default_rng(3).uniform(0.2, 2.0, 9)
    final = 3.7  # V(s_T) of the state a truncated episode was cut at
    stored_returns.close_episode(buf, spec, first, last, final_value=final)
    slots = buf.episode_slots(first, last)
    want, v, rho = _reference(buf, slots, terminated, final)
    np.testing.assert_allclose(buf.extras["v_tbc"][slots], want, rtol=1e-5, atol=1e-5)
    # the same recursion as returns.v_tbc over the whole episode as one window
    disc = GAMMA * (1.0 - buf.terminated[slots])
    got = v_tbc(buf.reward[slots][:, None], disc[:, None], v[:, None].astype(np.float32),
                np.full((9, 1), final, np.float32), rho[:, None].astype(np.float32))
    np.testing.assert_allclose(np.asarray(got)[:, 0], want, rtol=1e-5, atol=1e-5)


def test_a_truncated_episode_bootstraps_from_the_state_it_was_cut_at():
    """The verification's case (#34): 3 steps, rewards 0, V(s_t) = 0 while acting, truncated
    where V(s_T) = 10, gamma 0.9: Eq. 8 gives [7.29, 8.1, 9.0] (the value of s_{T-1} gave 0)."""
    spec = stored_returns.StoredReturn(0.9)
    fields = {"value": ((), np.float32), "v": ((), np.float32, np.nan),
              "v_tbc": ((), np.float32, np.nan), "rho": ((), np.float32, 1.0)}
    buf = ReplayBuffer(16, (1,), 1, fields, forget_whole_episodes=True).storage
    buf.start_episode(np.zeros(1))
    for t in range(3):
        buf.add([0.0], 0.0, False, t == 2, np.full(1, t + 1.0), value=0.0)
    (first, last), = buf.take_closed_episodes()
    stored_returns.close_episode(buf, spec, first, last, final_value=10.0)
    slots = buf.episode_slots(first, last)
    np.testing.assert_allclose(buf.extras["v_tbc"][slots], [7.29, 8.1, 9.0], rtol=1e-6)
    np.testing.assert_array_equal(buf.next_observations(np.array([last])), [[3.0]])


@pytest.mark.parametrize("terminated", [True, False])
def test_refresh_then_propagate_equals_recomputing_the_episode(terminated):
    rng = np.random.default_rng(4)
    spec, buf, first, last = _episode(rng, 12, terminated)
    stored_returns.close_episode(buf, spec, first, last)
    slots = buf.episode_slots(first, last)
    for t in (7, 3, 11):  # sampled steps: new v_t, rho_t, then Eq. 8 at t and propagation
        s = slots[t]
        buf.extras["v"][s], buf.extras["rho"][s] = rng.normal(), rng.uniform(0.3, 1.7)
        nxt = stored_returns.next_targets(buf, spec, np.array([s]))[0]
        if np.isnan(nxt):
            nxt = 0.0  # V(s_T) = 0 here: the episode was closed with final_value 0
        new = buf.extras["v"][s] + min(1.0, buf.extras["rho"][s]) * (
            buf.reward[s] + GAMMA * nxt - buf.extras["v"][s])
        delta = new - buf.extras["v_tbc"][s]
        buf.extras["v_tbc"][s] = new
        stored_returns.propagate(buf, spec, np.array([s]), np.array([delta]), tol=0.0)
        want = _reference(buf, slots, terminated)[0]
        np.testing.assert_allclose(buf.extras["v_tbc"][slots][:t + 1], want[:t + 1],
                                   rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------- Rule 1 in DDPG
def _ddpg(kind):
    run = registry.resolve("ddpg", train_overrides={"replay": kind},
                           agent_overrides={"hidden": (16, 16)})
    return build_agent(run, (3,), ActionSpec.continuous(-np.ones(2), np.ones(2)))


def _batch(agent, state, far_rows):
    rng = np.random.default_rng(5)
    obs = rng.normal(size=(8, 3)).astype(np.float32)
    mean = np.asarray(agent.mu(state.params, obs))
    behaviour = mean.copy()
    behaviour[far_rows] += 1.5  # far from the current policy: rho outside (1/c_max, c_max)
    return {"obs": obs, "action": (mean + 0.05).astype(np.float32),
            "reward": rng.normal(size=8).astype(np.float32),
            "next_obs": rng.normal(size=(8, 3)).astype(np.float32),
            "discount": np.ones(8, np.float32), "mean": behaviour.astype(np.float32),
            "far_fraction": np.float32(0.05)}


def test_rule1_zeroes_exactly_the_far_policy_samples():
    agent = _ddpg("refer1")
    state = agent.init(jax.random.PRNGKey(0))
    far_rows = [1, 4]
    b = _batch(agent, state, far_rows)
    _, _, wb = agent.update(state, b, jax.random.PRNGKey(1))
    np.testing.assert_array_equal(np.asarray(wb["far"]), np.isin(np.arange(8), far_rows))
    # far samples' data do not reach the update: change their rewards and states' targets
    b2 = dict(b, reward=b["reward"].copy(), next_obs=b["next_obs"].copy())
    b2["reward"][far_rows] += 100.0
    b2["next_obs"][far_rows] += 3.0
    new1, _, _ = agent.update(state, b, jax.random.PRNGKey(1))
    new2, _, _ = agent.update(state, b2, jax.random.PRNGKey(1))
    for x, y in zip(jax.tree_util.tree_leaves(new1.params),
                    jax.tree_util.tree_leaves(new2.params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
    # ... whereas plain ER uses them
    er = _ddpg("er")
    n1, _, _ = er.update(state, b, jax.random.PRNGKey(1))
    n2, _, _ = er.update(state, b2, jax.random.PRNGKey(1))
    assert any(not np.allclose(x, y) for x, y in zip(
        jax.tree_util.tree_leaves(n1.params), jax.tree_util.tree_leaves(n2.params)))


def test_rule2_penalty_pulls_the_actor_towards_behaviour():
    agent = _ddpg("refer2")
    state = agent.init(jax.random.PRNGKey(0))
    state = state.replace(refer={**state.refer, "beta": jnp.asarray(0.0)})  # penalty only
    b = _batch(agent, state, [0, 1, 2, 3, 4, 5, 6, 7])
    p = state.params
    ap = {k: p[k] for k in agent.actor_keys}
    g = jax.grad(agent.actor_loss)(ap, p, b["obs"], 1.0, 0.0, b["mean"])
    eps = 1e-3  # a small step down the gradient lowers the KL to the behaviour means
    ap2 = jax.tree_util.tree_map(lambda x, d: x - eps * d, ap, g)
    kl = lambda q: float(jnp.mean(agent.kl(b["mean"], agent.mu({**p, **q}, b["obs"]))))  # noqa
    assert kl(ap2) < kl(ap)


# ---------------------------------------------------------------------- NAF
def test_naf_q_is_maximised_at_the_mean_and_p_is_positive_definite():
    run = registry.resolve("naf", agent_overrides={"hidden": (16, 16), "activation": "tanh"})
    agent = build_agent(run, (4,), ActionSpec.continuous(-np.ones(3), np.ones(3)))
    state = agent.init(jax.random.PRNGKey(0))
    # larger output weights so that L is far from its near-zero initialisation
    params = jax.tree_util.tree_map(lambda x: x * 5.0 if x.ndim == 2 else x, state.params)
    obs = np.random.default_rng(6).normal(size=(5, 4)).astype(np.float32)
    value, mean, lower = agent.net.apply({"params": params}, obs)
    low = np.asarray(lower, np.float64)
    assert (np.diagonal(low, axis1=1, axis2=2) > 0).all() and np.allclose(low, np.tril(low))
    p = low @ np.swapaxes(low, 1, 2)
    assert (np.linalg.eigvalsh(p) > 0).all()
    np.testing.assert_allclose(np.asarray(agent.q(params, obs, mean)), np.asarray(value),
                               rtol=1e-6, atol=1e-6)
    rng = np.random.default_rng(7)
    for _ in range(20):
        a = rng.uniform(-1, 1, (5, 3)).astype(np.float32)
        assert (np.asarray(agent.q(params, obs, a)) <= np.asarray(value) + 1e-6).all()
    a = rng.uniform(-1, 1, (5, 3))
    want = -0.5 * np.einsum("bi,bij,bj->b", a - mean, p, a - mean)
    np.testing.assert_allclose(np.asarray(advantage(mean, lower, a)), want, rtol=1e-4,
                               atol=1e-5)


# ---------------------------------------------------------------------- runs end to end
@pytest.mark.parametrize("algo,replay", [("ddpg", "per"), ("vracer", "refer"),
                                         ("naf", "refer2")])
def test_replay_choices_run_and_write_back(tmp_path, algo, replay):
    from offpolicy.training.run import Run

    section = {"hidden": (8, 8)}
    run = registry.resolve(algo, train_overrides={
        "env": "Pendulum-v1", "steps": 600, "eval_every": 600, "eval_episodes": 1,
        "quiet": True, "replay": replay, "batch_size": 32}, agent_overrides=section)
    t = Run(run, tmp_path / algo)
    t.train()
    r = t.replay
    if replay == "per":  # priorities moved off the initial maximum for sampled steps
        per = t.replay.sampler.selector.per
        assert len(per) == len(r) and t.learner.updates > 0
        live = per.priority[per.valid]
        # new steps enter at the running maximum; without updates every one would still hold it
        assert (live != per.max_priority).any()
        assert np.isfinite(live).all() and (live > 0).all()
    else:
        assert far_count(r) == pytest.approx(r.valid_values("far").sum())
        assert (r.valid_values("rho") != 1.0).any()  # refreshed by the updates
    if algo == "vracer":  # finished episodes have targets, refreshed ones moved
        assert np.isfinite(r.valid_values("v_tbc")).mean() > 0.5
        assert np.isfinite(r.valid_values("v")).any()


def test_propagating_a_batch_equals_one_sample_at_a_time():
    """Samples sharing an episode (and duplicates) in one batch: the same targets as
    propagating their changes one by one."""
    rng = np.random.default_rng(8)
    spec, buf, first, last = _episode(rng, 30, True)
    buf.extras["rho"][:30] = rng.uniform(0.5, 1.5, 30)
    stored_returns.close_episode(buf, spec, first, last)
    slots = buf.episode_slots(first, last)
    idx = slots[[25, 10, 25, 3, 17]]
    delta = rng.normal(size=5)
    one_by_one = buf.extras["v_tbc"].copy()
    for i in (0, 1, 3, 4):  # the duplicate (index 2) counts once, with its first delta
        buf.extras["v_tbc"][:] = one_by_one
        stored_returns.propagate(buf, spec, idx[i:i + 1], delta[i:i + 1], tol=0.0)
        one_by_one = buf.extras["v_tbc"].copy()
    stored_returns.close_episode(buf, spec, first, last)  # back to the closed targets
    assert not np.allclose(buf.extras["v_tbc"][slots], one_by_one[slots])
    stored_returns.propagate(buf, spec, idx, delta, tol=0.0)
    np.testing.assert_allclose(buf.extras["v_tbc"][slots], one_by_one[slots], rtol=1e-5,
                               atol=1e-5)


def _ring_of_episodes(rng, capacity=2000, streams=2):
    """A replay of two rings that have wrapped, episodes of 100-300 steps (the oldest ones
    forgotten), rho spread as a full memory's (some at the smallest weight stored), closed
    targets kept in float64; and the slots of each episode still in it, newest first, from
    the buffer's own record of closed episodes (an older record whose slots a newer episode
    took is gone)."""
    spec = stored_returns.StoredReturn(0.99)
    fields = {"value": ((), np.float32), "v": ((), np.float32, np.nan),
              "v_tbc": ((), np.float64, np.nan), "rho": ((), np.float32, 1.0)}
    table = ReplayBuffer(capacity, (1,), 1, fields, forget_whole_episodes=True,
                         num_streams=streams)
    buf = table.storage
    records = []
    for _ in range(8):
        for s in range(streams):
            n = int(rng.integers(100, 300))
            table.start_episode(np.zeros(1), stream=s)
            for t in range(n):
                table.add([0.0], rng.normal(), t == n - 1 and rng.random() < 0.5, t == n - 1,
                          np.zeros(1), stream=s, value=rng.normal())
            records += buf.take_closed_episodes()
    live, taken = [], set()
    for first, last in reversed(records):
        slots = buf.episode_slots(first, last)
        if buf.valid[slots].all() and not taken & set(slots.tolist()):
            live.append(slots)
        taken |= set(slots.tolist())
    rho = rng.lognormal(0.0, 0.8, buf.extras["rho"].shape).clip(1e-3, 1e3)
    rho[rng.random(rho.shape) < 0.05] = stored_returns.RHO_FLOOR  # the smallest weight stored
    buf.extras["rho"][:] = rho
    for e in live:
        stored_returns.close_episode(buf, spec, int(e[0]), int(e[-1]))
    return spec, buf, live


def _propagated_one_by_one(buf, spec, live, idx, delta):
    """Algorithm 3 as a plain loop: each distinct sampled step (its first delta) adds
    delta * prod gamma min(1, rho) to every earlier step of its episode, in float64."""
    out = buf.extras["v_tbc"].copy()
    where = {int(slot): (e, t) for e in live for t, slot in enumerate(e)}
    seen = set()
    for i, d in zip(idx, delta):
        if int(i) in seen:
            continue
        seen.add(int(i))
        e, t = where[int(i)]
        for j in range(t - 1, -1, -1):
            d *= spec.gamma * min(1.0, float(buf.extras["rho"][e[j]]))
            out[e[j]] += d
    return out


@pytest.mark.parametrize("chunk", [16, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_propagation_over_many_episodes_equals_a_plain_loop(seed, chunk):
    """Batches over the episodes of two wrapped rings (several samples per episode, a
    duplicate, an episode's first and last steps): the plain loop to float64 rounding with
    tol 0; with the default, fewer steps touched (changes dropped once below tol of their
    episode's largest, rows finishing at different chunks) and every target within tol times
    the largest change times the samples of its episode."""
    rng = np.random.default_rng(seed)
    spec, buf, live = _ring_of_episodes(rng)
    assert len(live) >= 8 and any(e[-1] < e[0] for e in live)  # some episode wraps its ring
    closed = buf.extras["v_tbc"].copy()
    idx = Uniform(0).draw(buf, 48)[0]
    idx[:3] = [live[0][0], live[1][-1], idx[3]]  # a first step, a last step, a duplicate
    delta = rng.normal(size=48) * 10.0
    want = _propagated_one_by_one(buf, spec, live, idx, delta)
    stored_returns.propagate(buf, spec, idx, delta, tol=0.0, chunk=chunk)
    np.testing.assert_allclose(buf.extras["v_tbc"], want, rtol=1e-12, atol=1e-9)
    exact = int((buf.extras["v_tbc"] != closed).sum())
    buf.extras["v_tbc"][:] = closed
    stored_returns.propagate(buf, spec, idx, delta, chunk=chunk)
    assert (buf.extras["v_tbc"] != closed).sum() < exact  # it dropped what was small
    np.testing.assert_allclose(buf.extras["v_tbc"], want, rtol=0,
                               atol=48 * 1e-6 * np.abs(delta).max())


def test_an_episode_longer_than_its_ring_propagates_back_to_its_oldest_stored_step():
    """An episode in progress that outgrew its ring (an env without a time limit) has lost
    its first step: its transitions' episode starts at the ring's oldest slot, and a change
    propagates back to that step as the plain loop over its stored steps, oldest first."""
    rng = np.random.default_rng(9)
    spec = stored_returns.StoredReturn(GAMMA)
    fields = {"value": ((), np.float32), "v": ((), np.float32, np.nan),
              "v_tbc": ((), np.float64, np.nan), "rho": ((), np.float32, 1.0)}
    table = ReplayBuffer(20, (1,), 1, fields, forget_whole_episodes=True)
    table.start_episode(np.zeros(1))
    for _ in range(35):
        table.add([0.0], rng.normal(), False, False, np.zeros(1), value=rng.normal())
    buf = table.storage
    valid = np.flatnonzero(buf.valid)
    oldest = buf.oldest_slot(0)
    assert not buf.episode_starts(0).size and buf.valid[oldest] and valid.size == 19
    np.testing.assert_array_equal(buf.episode_first_slots(valid), np.full(valid.size, oldest))
    stored = (oldest + np.arange(19)) % 20  # the episode's steps still stored, oldest first
    buf.extras["rho"][stored] = rng.uniform(0.3, 1.7, 19)
    buf.extras["v_tbc"][stored] = rng.normal(size=19)
    idx, delta = stored[[15, 6]], np.array([2.0, -1.5])
    want = _propagated_one_by_one(buf, spec, [stored], idx, delta)
    stored_returns.propagate(buf, spec, idx, delta, tol=0.0)
    np.testing.assert_allclose(buf.extras["v_tbc"], want, rtol=1e-12, atol=1e-12,
                               equal_nan=True)


def test_a_refreshed_target_survives_a_far_policy_stretch():
    """The probe's case (#36): 25 steps, rewards 1, values 0, rho = 1e-3 (its floor)
    everywhere, gamma 0.995, terminated; refresh steps 0 and 24 as V-RACER's update does
    (v <- 5, rho <- 1, Eq. 8 from the stored next target), then propagate: V^tbc[0] is
    Eq. 8's 1.000996 (the float32 product underflowed and reverted it to 0.001)."""
    gamma = 0.995
    spec = stored_returns.StoredReturn(gamma)
    fields = {"value": ((), np.float32), "v": ((), np.float32, np.nan),
              "v_tbc": ((), np.float32, np.nan), "rho": ((), np.float32, 1.0)}
    buf = ReplayBuffer(64, (1,), 1, fields, forget_whole_episodes=True).storage
    buf.start_episode(np.zeros(1))
    for t in range(25):
        buf.add([0.0], 1.0, t == 24, False, np.zeros(1), value=0.0)
    (first, last), = buf.take_closed_episodes()
    slots = buf.episode_slots(first, last)
    buf.extras["rho"][slots] = 1e-3
    stored_returns.close_episode(buf, spec, first, last)
    idx = slots[[0, 24]]
    buf.extras["v"][idx], buf.extras["rho"][idx] = 5.0, 1.0
    nxt = stored_returns.next_targets(buf, spec, idx)
    new = 5.0 + (1.0 + gamma * np.nan_to_num(nxt) * (~np.isnan(nxt)) - 5.0)  # rhobar = 1
    delta = new - buf.extras["v_tbc"][idx]
    buf.extras["v_tbc"][idx] = new
    stored_returns.propagate(buf, spec, idx, delta)
    want = _reference(buf, slots, True, gamma=gamma)[0]
    assert want[0] == pytest.approx(1.000996, abs=1e-6)
    np.testing.assert_allclose(buf.extras["v_tbc"][slots], want, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_write_back_and_propagation_equal_eq8_in_float64(seed):
    """Acceptance (#36): the learner's write-back path (refreshed v, rho and V^tbc of sampled
    steps, then propagation with its default tolerance) leaves every stored target equal to
    a float64 loop of Eq. 8 over the refreshed values to 1e-5 relative, on random episodes
    with rho at its 1e-3 floor for 30+ steps."""
    from offpolicy.replay.refer import REFER

    rng = np.random.default_rng(seed)
    gamma = 0.995
    spec = stored_returns.StoredReturn(gamma)
    fields = {"value": ((), np.float32), "v": ((), np.float32, np.nan),
              "v_tbc": ((), np.float32, np.nan), "rho": ((), np.float32, 1.0)}
    buf = ReplayBuffer(512, (1,), 1, fields, forget_whole_episodes=True).storage
    n, stretch = 120, (30, 30 + int(rng.integers(30, 60)))
    buf.start_episode(np.zeros(1))
    for t in range(n):
        buf.add([0.0], rng.normal(), t == n - 1, False, np.zeros(1), value=rng.normal())
    (first, last), = buf.take_closed_episodes()
    slots = buf.episode_slots(first, last)
    rho = rng.lognormal(0.0, 1.0, n).clip(1e-3, 1e3)
    rho[stretch[0]:stretch[1]] = 1e-3
    buf.extras["rho"][slots] = rho
    stored_returns.close_episode(buf, spec, first, last)
    for _ in range(6):  # updates: a batch of sampled steps refreshed, written back, propagated
        idx = slots[rng.choice(n, 16, replace=False)]
        v_new = rng.normal(size=16).astype(np.float32)
        rho_new = np.where(rng.random(16) < 0.5, 1e-3, rng.lognormal(0, 1, 16)).astype(
            np.float32).clip(1e-3, 1e3)
        nxt = stored_returns.next_targets(buf, spec, idx)
        boot = np.where(np.isnan(nxt), 0.0, nxt)  # terminated: 0 after the last step
        target = v_new + np.minimum(1.0, rho_new) * (buf.reward[idx] + gamma * boot - v_new)
        delta = target - buf.extras["v_tbc"][idx]
        buf.write(idx, {"v": v_new, "rho": rho_new, "v_tbc": target})
        stored_returns.propagate(buf, spec, idx, delta)
        want = _reference(buf, slots, True, gamma=gamma)[0]
        np.testing.assert_allclose(buf.extras["v_tbc"][slots], want, rtol=1e-5, atol=1e-5)
    assert REFER.rho_max == 1e3  # the floor above is the clip of the importance weight


def test_prioritized_ranking_travels_with_the_replay_file(tmp_path):
    from offpolicy.replay.prioritized import PERSettings, Prioritized
    from offpolicy.replay.samplers import Sampler

    def build():
        selector = Prioritized(PERSettings(seed=4))
        return ReplayBuffer(64, (1,), 1, sampler=Sampler(selector)), selector.per

    buf, per = build()
    buf.start_episode(np.zeros(1))
    for t in range(40):
        buf.add([0.0], 0.0, t % 10 == 9, False, np.ones(1) * t)
        if t % 10 == 9:
            buf.start_episode(np.zeros(1))
    idx, _ = per.sample(8, 0)
    per.update(idx, np.arange(8.0))
    buf.save(tmp_path / "r.npz")
    buf2, per2 = build()
    buf2.load(tmp_path / "r.npz")
    np.testing.assert_array_equal(per.sample(16, 5)[0], per2.sample(16, 5)[0])


def test_episodes_abandoned_at_a_resume_get_their_targets():
    rng = np.random.default_rng(9)
    spec = stored_returns.StoredReturn(GAMMA)
    fields = {"value": ((), np.float32), "v": ((), np.float32, np.nan),
              "v_tbc": ((), np.float32, np.nan), "rho": ((), np.float32, 1.0)}
    table = ReplayBuffer(64, (1,), 1, fields, forget_whole_episodes=True, num_streams=2)
    for s in range(2):
        table.start_episode(np.zeros(1), s)
    for t in range(5):  # stream 0 ends an episode at t = 2 and starts another
        ended = np.array([t == 2, False])
        table.add_batch(np.zeros((2, 1)), rng.normal(size=2), ended, np.zeros(2, bool),
                        np.zeros((2, 1)), {"value": rng.normal(size=2).astype(np.float32)})
        if ended[0]:
            table.start_episode(np.zeros(1), 0)
    buf = table.storage
    closed = buf.take_closed_episodes()
    assert len(closed) == 1
    buf.close_episode()  # a resume: both open episodes are abandoned
    abandoned = buf.take_closed_episodes()
    assert len(abandoned) == 2
    for first, last in abandoned:
        stored_returns.close_episode(buf, spec, first, last)
        slots = buf.episode_slots(first, last)
        assert np.isfinite(buf.extras["v_tbc"][slots]).all()
    assert not buf.truncated.any()  # the data themselves are untouched


@pytest.mark.parametrize("train,match", [({"buffer_size": 150}, "fewer than one 200-step"),
                                         ({"normalize_reward": True}, "--replay-statistics")])
def test_stored_return_agents_refuse_configs_that_lose_targets(tmp_path, train, match):
    from offpolicy.errors import OffpolicyError
    from offpolicy.training.run import Run

    run = registry.resolve("vracer", train_overrides={"env": "Pendulum-v1", "batch_size": 32,
                                                      **train})
    with pytest.raises(OffpolicyError, match=match):
        Run(run, tmp_path / "v")
    assert not (tmp_path / "v").exists()


def test_refer_memory_defaults_to_half_the_run_unless_set():
    """decision 9: for DDPG and NAF under refer* the memory turns over once in the run (half of
    --steps, within [1e4, 2^18]); a flag, a preset or a config file that sets --buffer-size
    wins; ER and V-RACER keep 1e6."""
    def size(algo, preset=None, file_dict=None, **train):
        return registry.resolve(algo, preset=preset, file_dict=file_dict,
                                train_overrides=train).train.buffer_size

    assert size("ddpg", replay="refer", steps=30_000) == 15_000
    assert size("ddpg", replay="refer1", steps=100_000) == 50_000
    assert size("naf", replay="refer2", steps=2_000) == 10_000
    assert size("ddpg", replay="refer", steps=10_000_000) == 2**18
    assert size("wide-ddpg", replay="refer", steps=40_000) == 20_000
    assert size("vracer", steps=100_000) == 1_000_000  # ReF-ER by default, memory 1e6
    assert size("vracer", replay="er", steps=30_000) == 1_000_000
    assert size("ddpg", steps=30_000) == 1_000_000
    assert size("ddpg", replay="per", steps=30_000) == 1_000_000
    assert size("ddpg", replay="refer", steps=30_000, buffer_size=123_456) == 123_456
    assert size("ddpg", preset="refer", steps=30_000) == 2**18
    assert size("vracer", preset="paper", steps=30_000) == 2**18
    assert size("ddpg", file_dict={"train": {"buffer_size": 40_000}}, replay="refer",
                steps=30_000) == 40_000
    assert size("naf", replay="refer", steps=20_000, num_envs=16) == 16 * 1001  # an episode each
    # a saved run keeps its resolved memory when resumed with another --steps
    saved = registry.resolve("ddpg", train_overrides={"replay": "refer", "steps": 30_000})
    d = saved.to_dict()
    d["train"]["steps"] = 100_000
    assert registry.RunConfig.from_dict(d).train.buffer_size == 15_000
    longer = registry.resolve("ddpg", train_overrides={"replay": "refer", "steps": 100_000})
    assert longer.train.buffer_size == 50_000
    resumed = saved.resumed_with(longer, {"steps", "replay"}, set())
    assert (resumed.train.steps, resumed.train.buffer_size) == (100_000, 15_000)


def test_the_learner_bootstraps_truncated_episodes_with_the_network():
    """V-RACER's learner closes a truncated episode with V(s_T) of its current network on the
    stored final observation (normalised as its batches are), and a terminated one with 0."""
    from offpolicy.agents.base import check_agent
    from offpolicy.agents.vracer import VRACER
    from offpolicy.config import VRACERConfig
    from offpolicy.envs.wrappers import ObsNormalizer, RewardScaler
    from offpolicy.training.learner import Learner

    spec_a = ActionSpec.continuous(np.full(1, -1.0), np.full(1, 1.0))
    agent = VRACER(VRACERConfig(hidden=(8,)), (3,), spec_a)
    fields = dict(agent.behaviour_fields) | dict(agent.writeback_fields)
    buf = ReplayBuffer(64, (3,), 1, fields, forget_whole_episodes=True, counted=("far",),
                       extensions=[StoredReturns(agent.stored_return)])
    norm = ObsNormalizer((3,), True)
    norm.rms.mean, norm.rms.var = np.array([1.0, -2.0, 0.5]), np.array([4.0, 1.0, 9.0])
    learner = Learner(agent, check_agent(agent), buf, 4, 0, norm, RewardScaler(0.995, False))
    rng = np.random.default_rng(5)
    ends = []
    for terminated in (False, True, False):  # truncated, terminated, truncated
        buf.start_episode(rng.normal(size=3))
        for t in range(4):
            last = t == 3
            buf.add([0.1], rng.normal(), last and terminated, last and not terminated,
                    rng.normal(size=3), mean=[0.0], std=[1.0], value=rng.normal())
        ends.append(terminated)
    closed = [(0, 3), (5, 8), (10, 13)]  # 4 steps and the final observation per episode
    learner.sample()  # the stored targets of the episodes that ended first
    params = agent.acting_params(learner.state)
    st = buf.storage
    for (first, last), terminated in zip(closed, ends):
        final = agent.state_value(params, norm(st.next_observations(np.array([last]))))[0]
        slots = st.episode_slots(first, last)
        want = _reference(st, slots, terminated, float(final), gamma=0.995)[0]
        np.testing.assert_allclose(st.extras["v_tbc"][slots], want, rtol=1e-5, atol=1e-5)
