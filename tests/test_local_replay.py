"""Actor-local replay (issue 39 item 1; AQL's Algorithm 2) with in-process fake collectors:
exactly one fresh and R replayed unrolls per unroll, FIFO eviction at capacity, the epsilon
split by collector index, the learner's queue, and the configurations it refuses."""

from __future__ import annotations

import numpy as np
import pytest
import toy_envs  # noqa: F401  (registers the toy envs)
from toy_envs import EPISODE_STEPS

from offpolicy import registry
from offpolicy.errors import OffpolicyError
from offpolicy.training.build import build, build_agent, build_collector
from offpolicy.training.distributed import CollectorProcess, LocalPool
from offpolicy.training.local_replay import WINDOW_PREFIX, UnrollQueue
from offpolicy.training.run import Run

T = 5  # the unroll: half a toy episode


def _config(num_collectors=2, num_envs=2, capacity=1000, unrolls=2, **train):
    agent = {"hidden": (8,), "proposal_hidden": (8,), "proposal_samples": 2,
             "uniform_samples": 2, "unroll_length": T}
    train = {"env": "toy_envs:ToyTruncate-v0", "num_collectors": num_collectors,
             "num_envs": num_envs, "collector_replay": True, "collect_steps": T,
             "collector_buffer_size": capacity, "collector_replay_unrolls": unrolls,
             "batch_size": 4, "steps": 400, "eval_every": 200, "eval_episodes": 1,
             "quiet": True} | train
    return registry.resolve("aql", train_overrides=train, agent_overrides=agent)


def _unrolls(chunk):
    return {k[len(WINDOW_PREFIX):]: v for k, v in chunk.items() if k.startswith(WINDOW_PREFIX)}


def test_each_unroll_sends_one_fresh_and_r_sampled_ones():
    run = _config(num_envs=3, unrolls=2, steps=390, eval_every=195)
    proc = CollectorProcess(run.to_dict(), index=1)
    payload = build(run).learner.acting_payload()
    sent = []
    for n in range(6):
        chunk = proc.collect(T, payload, n * T * 3)
        u = _unrolls(chunk)
        fresh = u["fresh"]
        # 10-step episodes, 5-step unrolls: every fresh unroll is one whole window
        assert fresh.sum() == 3 and (~fresh).sum() == 2 * 3
        assert u["obs"].shape[:2] == (T + 1, 9) and u["mask"][:, fresh].all()
        # the fresh windows are the 5 steps each env copy just took, in order
        steps = chunk["next_obs"][:, :, 0]  # [T, K]: t / k of each step's next observation
        np.testing.assert_allclose(u["obs"][1:, fresh, 0], steps, atol=1e-6)
        sent.append(u)
    # sampled unrolls come from what this collector stored, windows inside one episode
    for u in sent[1:]:
        obs = u["obs"][:, ~u["fresh"]]
        mask = u["mask"][:, ~u["fresh"]]
        for j in range(obs.shape[1]):
            valid = int(mask[:, j].sum())
            np.testing.assert_allclose(np.diff(obs[:valid + 1, j, 0]), 1 / EPISODE_STEPS,
                                       atol=1e-6)
    proc.close()


def test_a_fresh_unroll_sends_every_step_once_when_episodes_end_inside_it():
    """3-step episodes, 5-step unrolls: episode ends fall inside every unroll and whole
    episodes lie inside some; the fresh windows still hold each step just taken exactly
    once, each window inside one episode."""
    run = _config(num_envs=2, unrolls=1, env="toy_envs:ToyShort-v0")
    proc = CollectorProcess(run.to_dict(), index=0)
    payload = build(run).learner.acting_payload()
    for n in range(5):
        chunk = proc.collect(T, payload, n * T * 2)
        u = _unrolls(chunk)
        fresh, mask = u["fresh"], u["mask"]
        assert (~fresh).sum() == 2 and fresh.sum() > 2  # R x K sampled; pieces > copies
        assert mask[:, fresh].sum() == T * 2
        taken = sorted(map(tuple, chunk["next_obs"].reshape(-1, 3)[:, :2].round(5).tolist()))
        obs = u["obs"][:, fresh]
        got = sorted(tuple(obs[t + 1, j, :2].round(5).tolist())
                     for j in range(obs.shape[1]) for t in range(T) if mask[t, fresh][j] > 0)
        assert got == taken
        for j in range(obs.shape[1]):  # one episode per window: one phase
            valid = int(mask[:, fresh][:, j].sum())
            assert len(set(obs[:valid + 1, j, 1].round(5).tolist())) == 1
    proc.close()


def test_the_local_replay_forgets_first_in_first_out():
    run = _config(num_envs=1, capacity=24, unrolls=1)
    collector, local = build_collector(run, 0)
    proc = CollectorProcess(run.to_dict(), index=0)
    payload = build(run).learner.acting_payload()
    phases = []  # each step's episode phase (obs[1]), in the order taken
    for n in range(12):
        chunk = proc.collect(T, payload, n * T)
        phases += chunk["next_obs"][:, 0, 1].tolist()
    replay = proc.local.replay
    assert replay.storage.size == 24  # full: the oldest slots were overwritten
    kept = set(replay.valid_values("obs")[:, 1].tolist())  # float32 values, compared exactly
    # what it holds are the newest steps' episodes only
    assert kept <= set(phases[-24:])
    assert not set(phases[:-30]) & kept
    for _ in range(5):  # and the sampled unrolls come from what it holds
        u = proc.local.unroll_batch()
        assert set(u["obs"][0, ~u["fresh"], 1].tolist()) <= kept
    proc.close()
    collector.close()


def test_the_epsilon_split_follows_the_collector_index():
    """App. A2: the first 10% of actors explore with epsilon 0.5, over all collectors' env
    copies (20 collectors of one env copy: collectors 0 and 1), as build_collector builds
    each collector's agent."""
    run = _config(num_collectors=20, num_envs=1)
    parts = build(run)
    eps = [float(build_agent(run, parts.obs_shape, parts.spec, i * 1, 20 * 1).epsilons(1)[0])
           for i in range(20)]
    np.testing.assert_allclose(eps, [0.5, 0.5] + [0.05] * 18)


def test_the_queue_hands_out_each_unroll_once_oldest_first():
    q = UnrollQueue(batch_size=3)
    for start in (0, 2, 4):
        q.put({"reward": np.arange(start, start + 2, dtype=np.float32)[None].repeat(T, 0),
               "context_position": np.array([start, start + 1], np.int32),
               "fresh": np.array([True, False])})
    first, second = q.take(), q.take()
    assert q.take() is None and len(q) == 0
    np.testing.assert_array_equal(first["reward"][0], [0, 1, 2])
    np.testing.assert_array_equal(second["reward"][0], [3, 4, 5])
    np.testing.assert_array_equal(second["context_position"], [3, 4, 5])


def test_a_run_learns_from_the_unrolls_as_they_come():
    """(1 + R) unrolls of T steps per env copy and chunk; one update per batch of them."""
    r = Run(_config(num_collectors=2, num_envs=1, unrolls=2, steps=200, eval_every=200,
                    batch_size=4))
    r.pool_factory = LocalPool
    r.train()
    # 40 chunks of 5 steps (one env copy each), each with 1 fresh + 2 sampled unrolls (the
    # fresh steps are stored before sampling): 120 unrolls, batches of 4
    assert r.learner.updates == (200 // T) * 3 // 4
    assert r.replay.capacity == 2 * 2  # the learner keeps no replay (two slots per ring)
    assert r.compile_count == 1
    r.close()


@pytest.mark.parametrize("algo,train,match", [
    ("aql", {"num_collectors": 0}, "--num-collectors"),
    ("ddpg", {}, "does not learn that way"),
    ("acer", {}, "acer with --segment-length 20 learns on the latest segment"),
    ("aql", {"collect_steps": 7}, "--collect-steps must equal"),
    ("aql", {"segment_length": T}, "aql with --segment-length 5 learns on the latest"),
    ("aql", {"replay_statistics": True}, "--replay-statistics does not apply"),
    ("aql", {"collector_buffer_size": 10}, "--collector-buffer-size 10 is too small"),
])
def test_collector_replay_refuses_what_it_cannot_serve(algo, train, match):
    base = {"env": "toy_envs:ToyTruncate-v0", "collector_replay": True, "num_collectors": 2,
            "collect_steps": T, "steps": 70 if train.get("collect_steps") == 7 else 100}
    agent = {"unroll_length": T} if algo == "aql" else {}
    with pytest.raises(OffpolicyError, match=match):  # by resolve (flags) or by build
        build(registry.resolve(algo, train_overrides=base | train, agent_overrides=agent))


def test_a_restarted_collector_starts_with_an_empty_replay():
    """A collector lost at its 4th chunk is restarted with an empty replay (the paper's actors
    keep nothing either); the run goes on to its end."""
    pools = []

    def pool(run):
        pools.append(LocalPool(run, fail={(0, 3)}))
        return pools[-1]

    r = Run(_config(num_collectors=2, num_envs=1, steps=100, eval_every=100))
    r.pool_factory = pool
    r.train()
    assert r.step == 100 and r.collection.restarts == 1
    restarted, kept = pools[0].procs
    # collector 0 lost its first 3 chunks' steps with its replay; collector 1 kept all of its
    assert len(kept.local.replay) > len(restarted.local.replay) > 0
    r.close()
