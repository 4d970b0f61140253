"""Recurrent cores with sequence replay (issue 39 item 2), the tests the issue asks for, which
follow the bugs users hit elsewhere (Acme #259, Tianshou #486/#584/#937, TorchRL's
slice-start flag):

* the state stored at step t is the state *before* observation t is processed;
* with parameters held fixed, the learner's unroll of a window (``stored``, and ``zero`` over
  the previous steps) reproduces the acting-time outputs of the same steps exactly, across
  episode starts inside the acting memory (terminated and truncated episodes alike);
* every sampled window starts where it says, no state leaks across windows batched
  together, steps inside a window stay in order;
* evaluation acts with the same state handling as training;
* recurrent updates compile once; --num-envs, --resume and remote collectors work.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import toy_envs  # noqa: F401  (registers the toy envs)
from _helpers import assert_one_line_error, run_cli

from offpolicy import registry
from offpolicy.agents.acting import HostMemory
from offpolicy.agents.base import CONTEXT_OBS, CONTEXT_POSITION, CONTEXT_STATE, CORE_STATE
from offpolicy.networks import Context
from offpolicy.training.build import build
from offpolicy.training.distributed import LocalPool
from offpolicy.training.evaluation import EVAL_SEED_OFFSET
from offpolicy.training.run import Run

ENVS = ("toy_envs:ToyTerminate-v0", "toy_envs:ToyTruncate-v0")  # 10-step episodes
SMALL = {"vracer": {"hidden": (16,)}, "ddpg": {"hidden": (16, 16)},
         "aql": {"hidden": (16,), "proposal_hidden": (16,), "proposal_samples": 4,
                 "uniform_samples": 4, "unroll_length": 5},
         "td3": {"hidden": (16, 16)}, "sac": {"hidden": (16, 16)}}


def _config(algo, start, env=ENVS[0], cells=6, kind="lstm", num_envs=2, window=4, **train):
    agent = SMALL[algo] | {"core": kind, "core_layers": 2, "core_cells": cells,
                           "core_start": start, "core_window": window,
                           "core_burn_in": 3 if start == "stored" else 0}
    train = {"env": env, "num_envs": num_envs, "batch_size": 8, "buffer_size": 4000,
             "eval_episodes": 2, "quiet": True, "replay_statistics": False,
             "steps": 200, "eval_every": 200} | train
    if algo == "ddpg":
        train.setdefault("replay_diagnostics", True)  # the acting mean is stored per step
    return registry.resolve(algo, train_overrides=train, agent_overrides=agent)


def _collect(parts, steps):
    """Act with the initial parameters for ``steps`` steps of each env copy (no update)."""
    c = parts.collector()
    c.begin()
    for i in range(steps):
        c.step(*c.act(i * c.num_envs), i * c.num_envs)
    return c


def _episodes(replay):
    """Each stored episode as its slots in order (first step first), per ring."""
    out = []
    for s in range(replay.num_streams):
        starts = list(replay.episode_starts(s))
        for first in starts:
            slots, t = [], first
            while replay.valid[t]:
                slots.append(t)
                if replay.terminated[t] or replay.truncated[t]:
                    break
                t = replay.offset(np.array(t), 1).item()
            if slots:  # the episode in progress may have no transition yet
                out.append(slots)
    return out


def _left_padded(prefixes: list[np.ndarray], length: int) -> tuple[np.ndarray, np.ndarray]:
    """Observation prefixes as one window [length, n, d], each right-aligned after padding,
    with a reset at its first real position: unrolled from zero, the final state of column j
    is the state after prefix j (an empty prefix is left all padding: handled by callers)."""
    d = next((x.shape[-1] for x in prefixes if len(x)), 3)
    obs = np.zeros((length, len(prefixes), d), np.float32)
    reset = np.zeros((length, len(prefixes)), bool)
    for j, x in enumerate(prefixes):
        if len(x):
            obs[length - len(x):, j] = x
            reset[length - len(x), j] = True
    return obs, reset


def _carries_after(core_cfg, params, prefixes: list[np.ndarray]) -> np.ndarray:
    """One core's state after unrolling each prefix [t, d] from zero (zeros for t = 0), all
    in one jitted call."""
    module = core_cfg.module(None)
    length = max(len(x) for x in prefixes) or 1
    obs, reset = _left_padded(prefixes, length)
    n = len(prefixes)
    ctx = Context(obs, reset, np.zeros((n, core_cfg.offset + module.state_size), np.float32),
                  np.zeros(n, np.int32), np.zeros(n, np.int32))
    final = np.array(jax.jit(lambda p, c: module.apply({"params": p}, c, final=True))(
        params, ctx))
    final[[len(x) == 0 for x in prefixes]] = 0.0
    return final


def _assert_states_before_observations(agent, params, replay, episodes) -> None:
    """The core state replay holds at each step of ``episodes`` (slots) is every core's state
    after the episode's earlier observations, computed here from zero."""
    prefixes, slots_of = [], []
    for slots in episodes:
        obs = replay.observations(np.array(slots))
        prefixes += [obs[:t] for t in range(len(slots))]
        slots_of += slots
    want = np.concatenate([_carries_after(agent.rec.core(name), params[name]["core"], prefixes)
                           for name in agent.rec.names], axis=-1)
    np.testing.assert_allclose(replay.extras[CORE_STATE][slots_of], want, atol=1e-5)


@pytest.mark.parametrize("env", ENVS)
def test_the_stored_state_is_the_state_before_the_observation(env):
    parts = build(_config("ddpg", "stored", env))
    _collect(parts, 35)
    agent, replay = parts.agent, parts.replay.storage
    params = parts.learner.acting_params()
    episodes = _episodes(replay)
    assert len(episodes) >= 6
    _assert_states_before_observations(agent, params, replay, episodes)
    firsts = [s[0] for s in episodes]
    np.testing.assert_array_equal(replay.extras[CORE_STATE][firsts], 0.0)  # from zero


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_an_actor_with_twin_critics_records_both_cores_states(algo):
    """TD3 and SAC act with the actor and the critics' core (``Recurrence.actor_acting_params``):
    the stored state of every step is both cores' state before its observation. From a zero
    state (nothing stored) acting gets the actor's parameters alone and still acts."""
    parts = build(_config(algo, "stored", ENVS[0]))
    _collect(parts, 30)
    agent, replay, learner = parts.agent, parts.replay.storage, parts.learner
    acting = learner.acting_params()
    assert set(acting) == {"actor", "critic_core"}
    assert agent.rec.names == ("actor", "critic")
    params = learner.state.params
    _assert_states_before_observations(agent, {"actor": params.actor, "critic": params.critic},
                                       replay, _episodes(replay))
    zero = build(_config(algo, "zero", ENVS[0]))
    assert (jax.tree.structure(zero.learner.acting_params())
            == jax.tree.structure(zero.learner.state.params.actor))
    _collect(zero, 12)  # acting without a stored state: the critics' core is not indexed
    assert zero.replay.storage.size > 0 and CORE_STATE not in zero.replay.storage.extras


@pytest.mark.parametrize("start,env,window", [(start, env, 4) for start in ("zero", "stored")
                                               for env in ENVS] + [("zero", ENVS[0], 1)])
def test_the_learners_unroll_reproduces_acting_outputs(start, env, window):
    """V-RACER records V(s_t) and the policy mean when acting: the learner's view of each
    sampled step's history gives the same numbers, also right after episode starts (and with
    a window of one step: no earlier steps in the context)."""
    parts = build(_config("vracer", start, env, window=window))
    _collect(parts, 40)
    agent, learner = parts.agent, parts.learner
    params = learner.state.params
    outputs = jax.jit(lambda p, b: agent.net.apply({"params": p},
                                                   agent.rec.transition_views(b)["obs"]))
    near_start = 0
    for _ in range(4):
        idx, batch = learner.sample()
        value, mean, _ = outputs(params, batch)
        np.testing.assert_allclose(np.asarray(value), batch["value"], atol=2e-5)
        np.testing.assert_allclose(np.asarray(mean), batch["mean"], atol=2e-5)
        near_start += int((batch[CONTEXT_POSITION] < 3).sum())
    assert near_start > 0 or window == 1  # windows cut at an episode start were among them


@pytest.mark.parametrize("start", ["zero", "stored"])
def test_sequence_windows_reproduce_the_acting_embedding(start):
    """AQL's unrolls: the learner's embedding of every step of a sampled window equals the
    one acting computed (replayed here through the same acting memory, episode by
    episode)."""
    parts = build(_config("aql", start, ENVS[1]))
    _collect(parts, 40)
    agent, learner, replay = parts.agent, parts.learner, parts.replay.storage
    core = learner.state.params["core"]
    embed = jax.jit(agent.embed)
    policy = jax.jit(lambda p, c: agent.policy(p, c, jax.random.PRNGKey(0), False)[1])
    acting = {}  # slot -> the embedding acting computed there
    for slots in _episodes(replay):
        memory = HostMemory(agent.core, 1)
        obs = replay.observations(np.array(slots))
        for t, slot in enumerate(slots):
            ctx = memory.observe(obs[t][None])
            acting[slot] = np.asarray(embed(core, ctx))[0]
            memory.advance(jax.device_get(policy(learner.acting_params(), ctx)))
    idx, batch = learner.sample()
    h = np.asarray(jax.jit(lambda c, b: agent.embed(c, agent.rec.sequence_view(b)["obs"]))(
        core, batch))  # [T+1, B, cells]
    checked = 0
    for t in range(idx.shape[0]):
        for b in range(idx.shape[1]):
            if batch["mask"][t, b] > 0 and idx[t, b] in acting:
                np.testing.assert_allclose(h[t, b], acting[idx[t, b]], atol=2e-5)
                checked += 1
    assert checked >= idx.size // 2


def test_windows_are_ordered_start_where_marked_and_do_not_leak():
    parts = build(_config("vracer", "stored", ENVS[0], batch_size=8))
    _collect(parts, 40)
    agent, learner, replay = parts.agent, parts.learner, parts.replay.storage
    idx, batch = learner.sample()
    p = batch[CONTEXT_POSITION]
    for b in range(len(idx)):
        start = replay.offset(np.array(idx[b]), -int(p[b])).item()
        # the context runs from its start, step after step, to the sampled step
        slots = replay.offset(np.full(int(p[b]) + 1, start), np.arange(int(p[b]) + 1))
        np.testing.assert_array_equal(batch[CONTEXT_OBS][:p[b] + 1, b],
                                      replay.observations(slots))
        assert slots[-1] == idx[b]
        np.testing.assert_array_equal(batch[CONTEXT_STATE][b], replay.extras[CORE_STATE][start])
        if p[b] < agent.rec.burn_in + agent.rec.window - 1:  # cut at the episode's start
            assert start in replay.episode_starts(start // replay.stream_capacity)
    params = learner.state.params
    value = jax.jit(lambda p, b: agent.net.apply({"params": p},
                                                 agent.rec.transition_views(b)["obs"])[0])
    keys = (CONTEXT_OBS, CONTEXT_POSITION, CONTEXT_STATE)
    full = np.asarray(value(params, {k: batch[k] for k in keys}))
    order = np.random.default_rng(0).permutation(len(idx))
    for b in order[:3]:  # each window alone gives what it gave in the batch
        alone = {k: (batch[k][:, b:b + 1] if k == CONTEXT_OBS else batch[k][b:b + 1])
                 for k in keys}
        np.testing.assert_allclose(np.asarray(value(params, alone))[0], full[b], atol=1e-5)
    shuffled = {k: (batch[k][:, order] if k == CONTEXT_OBS else batch[k][order]) for k in keys}
    np.testing.assert_allclose(np.asarray(value(params, shuffled)), full[order], atol=1e-5)


@pytest.mark.parametrize("start,observe", [("zero", False), ("stored", False),
                                           ("zero", True)])
def test_evaluation_acts_with_the_training_state_handling(start, observe):
    """Run.evaluate's returns equal a plain loop that recomputes every action from the
    episode's observations so far (stored: from zero over all of them; zero: over the last
    window); with --observe-action-reward each observation ends with the previous action
    and reward."""
    run = Run(_config("vracer", start, ENVS[0], eval_episodes=3,
                      observe_action_reward=observe))
    returns = run.evaluate()
    agent = run.agent
    params = run.learner.acting_params()
    from offpolicy.envs.make import make_env

    env = make_env(ENVS[0], observe_action_reward=observe)
    act = jax.jit(lambda p, c: agent.policy(p, c, jax.random.PRNGKey(0), False)[0])
    length = 12  # longer than an episode: every prefix fits, left-padded, reset at its start
    for i in range(3):
        obs, _ = env.reset(seed=run.train_cfg.seed + EVAL_SEED_OFFSET + i)
        seen, total, done = [], 0.0, False
        while not done:
            seen.append(obs)
            window = np.asarray(seen[-agent.rec.window:] if start == "zero" else seen)
            padded, reset = _left_padded([window], length)
            ctx = Context(padded, reset, np.zeros((1, agent.core.state_size), np.float32),
                          np.zeros(1, np.int32), np.full(1, length - 1, np.int32))
            action = np.asarray(act(params, ctx))[0]
            obs, r, term, trunc, _ = env.step(run.spec.to_env(action))
            total += r
            done = term or trunc
        assert total == pytest.approx(returns[i], abs=1e-4)
    run.close()


def test_observe_action_reward_reaches_replay_and_the_core():
    """--observe-action-reward: every stored observation of an episode ends with the action
    (in env units) and the reward of the step before it, zeros at the episode's first; the
    core's input and the networks are built for the longer observation; an Agent refuses the
    env's own observation with a line naming the flag."""
    from offpolicy.api import Agent
    from offpolicy.errors import OffpolicyError

    parts = build(_config("ddpg", "zero", ENVS[0], observe_action_reward=True))
    assert parts.obs_shape == (3 + 1 + 1,)
    c = _collect(parts, 25)
    replay = parts.replay.storage
    episodes = _episodes(replay)
    assert len(episodes) >= 4
    for slots in episodes:
        obs = replay.observations(np.array(slots))
        np.testing.assert_array_equal(obs[0, 3:], 0.0)
        for t in range(1, len(slots)):
            prev = slots[t - 1]
            env_action = parts.spec.to_env(replay.action[prev])
            np.testing.assert_allclose(obs[t, 3:4], env_action, rtol=1e-6)
            assert obs[t, 4] == pytest.approx(replay.reward[prev], rel=1e-6)
    c.close()
    run = Run(_config("ddpg", "zero", ENVS[0], observe_action_reward=True))
    agent = Agent(run)
    assert np.shape(agent.act(np.zeros(5, np.float32), first=True)) == (1,)
    with pytest.raises(OffpolicyError, match="--observe-action-reward"):
        agent.act(np.zeros(3, np.float32))
    agent.close()


@pytest.mark.parametrize("algo,start", [("vracer", "zero"), ("ddpg", "stored"),
                                        ("aql", "stored")])
def test_recurrent_updates_compile_once_and_resume(tmp_path, algo, start):
    run = Run(_config(algo, start, ENVS[1], steps=300, eval_every=150, checkpoint_every=150,
                      warmup_steps=20), tmp_path / "r")
    run.train(until=150)
    assert run.learner.updates > 0 and run.compile_count == 1
    run.close()
    resumed = Run(_config(algo, start, ENVS[1], steps=300, eval_every=150,
                          checkpoint_every=150, warmup_steps=20), tmp_path / "r", resume=True)
    assert resumed.step == 150
    summary = resumed.train()
    assert summary["step"] == 300 and resumed.compile_count == 1
    resumed.close()


def test_remote_collectors_carry_the_core_state():
    """In-process remote collectors (the protocol Ray's follow): the stored state of every
    step is the state before its observation, across chunks (here with the previous action
    and reward observed too: remote collectors build their envs as the learner's)."""
    run = Run(_config("ddpg", "stored", ENVS[0], num_envs=1, num_collectors=2,
                      collect_steps=7, steps=140, eval_every=140, warmup_steps=200,
                      observe_action_reward=True))
    run.pool_factory = LocalPool
    run.train()
    agent, replay = run.agent, run.replay.storage
    params = run.learner.acting_params()  # no update ran (warm-up): the acting parameters
    _assert_states_before_observations(agent, params, replay, _episodes(replay)[:6])
    assert replay.observations(np.array([0])).shape == (1, 5)
    run.close()


def test_bad_core_choices_are_one_line_errors(tmp_path):
    proc = run_cli("train", "vracer", "--env", "Pendulum-v1", "--vracer.core", "lstm",
                   "--vracer.core-burn-in", "4", "--run-dir", tmp_path / "a", cwd=tmp_path)
    assert_one_line_error(proc, "core-burn-in")
    proc = run_cli("train", "ace", "--env", "Pendulum-v1", "--ace.core", "lstm",
                   "--run-dir", tmp_path / "b", cwd=tmp_path)
    assert_one_line_error(proc, "--ace.core")
