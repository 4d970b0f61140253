"""Remote collectors without Ray (issue #30): the chunks, the limiter's arithmetic, exactly-once
delivery and episode boundaries, restarts after a failure, with in-process collectors
(``LocalPool``) behind the same protocol as Ray's. tests/test_distributed_ray.py runs Ray."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
from _helpers import (
    TINY_FLAGS,
    TINY_OVERRIDES,
    assert_one_line_error,
    ray_processes,
    read_csv,
    run_cli,
    tiny_run,
)
from toy_envs import EPISODE_STEPS

from offpolicy import registry
from offpolicy.errors import OffpolicyError
from offpolicy.ray_address import check_ray_address
from offpolicy.replay.samplers import gather
from offpolicy.training import checkpoint
from offpolicy.training.distributed import LocalPool
from offpolicy.training.run import Run

TOY = "toy_envs:ToyTerminate-v0"  # obs[0] = t / k: consecutive steps of one episode


def _run(tmp_path=None, pool=LocalPool, **train):
    run = tiny_run(**({"env": TOY, "num_collectors": 2, "collect_steps": 10,
                       "eval_every": 200, "log_every": 100} | train))
    r = Run(run, tmp_path)
    r.pool_factory = pool
    return r


def _assert_no_transition_crosses_episodes(replay):
    """Every stored transition goes from step t of an episode to its step t + 1."""
    idx = np.flatnonzero(replay.storage.valid)
    b = gather(replay.storage, idx)
    np.testing.assert_allclose(b["next_obs"][:, 0] - b["obs"][:, 0], 1.0 / EPISODE_STEPS,
                               atol=1e-6)
    np.testing.assert_array_equal(b["discount"] == 0, b["next_obs"][:, 0] == 1.0)


def test_chunks_land_once_each_in_their_collectors_rings():
    r = _run(steps=400)
    summary = r.train()
    assert summary["step"] == 400 and r.replay.storage.num_streams == 2
    # 400 steps in chunks of 10: episodes of 10 steps, so 40 episodes, 20 per collector ring
    assert r.collection.episodes == 40 and len(r.replay) == 400
    # each ring: 200 transitions, 20 final observations, the next episode's first one
    assert (r.replay.storage.sizes == 221).all()
    _assert_no_transition_crosses_episodes(r.replay)
    r.close()


def test_the_limiter_holds_updates_per_stored_step(tmp_path):
    """Updates per stored env step equal --updates-per-step in every logging interval once
    learning has started (the credit carries the fractions between chunks)."""
    r = _run(tmp_path / "R", steps=700, updates_per_step=0.3, collect_steps=7, eval_every=700,
             log_every=140, checkpoint_every=700)
    r.train(until=700)
    rows = read_csv(tmp_path / "R" / "train.csv")
    measured = [float(x["replay_ratio"]) for x in rows[1:]]
    assert measured and all(abs(m - 0.3) <= 1 / 140 for m in measured), measured
    assert all(float(x["collector_restarts"]) == 0 for x in rows)
    r.close()


def test_a_failed_collector_restarts_and_no_transition_crosses_the_gap(tmp_path, capsys):
    """Collector 0's fourth chunk is lost mid-episode (chunks of 7 steps, episodes of 10): its
    rings' open episodes are closed, it restarts afresh, the run completes exactly."""
    r = _run(tmp_path / "R", steps=700, collect_steps=7, eval_every=700, log_every=140,
             checkpoint_every=700, pool=lambda run: LocalPool(run, fail={(0, 3)}))
    summary = r.train()
    assert summary["step"] == 700
    assert "collector 0 failed (RuntimeError: collector 0 lost" in capsys.readouterr().err
    assert r.collection.restarts == 1
    _assert_no_transition_crosses_episodes(r.replay)
    rows = read_csv(tmp_path / "R" / "train.csv")
    assert float(rows[-1]["collector_restarts"]) == 1
    r.close()


def test_too_many_failures_stop_with_one_line_and_a_checkpoint(tmp_path):
    r = _run(tmp_path / "R", steps=700, collect_steps=7, eval_every=700, log_every=140,
             checkpoint_every=700, max_collector_restarts=1,
             pool=lambda run: LocalPool(run, fail={(0, 3), (0, 6)}))
    with pytest.raises(OffpolicyError, match="2 failures exceed --max-collector-restarts 1"):
        r.train()
    assert checkpoint.has_checkpoint(tmp_path / "R")
    r.close()


def test_checks_before_any_collector_starts(monkeypatch):
    with pytest.raises(OffpolicyError, match="--pipeline"):
        Run(tiny_run(num_collectors=2, pipeline=True), None)
    with pytest.raises(OffpolicyError, match="--collect-steps 10 must equal --segment-length"):
        Run(registry.resolve("acer", train_overrides={
            "env": "CartPole-v1", "num_collectors": 2, "collect_steps": 10}), None)
    with pytest.raises(OffpolicyError, match="cannot reach the Ray cluster at 127.0.0.1:1"):
        Run(tiny_run(num_collectors=2, ray_address="127.0.0.1:1"), None)  # the Python API's
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(OffpolicyError, match=r"pip install 'offpolicy\[distributed\]'"):
        Run(tiny_run(num_collectors=2), None)


@pytest.mark.parametrize("given, message", [
    ({"sync_every": 4}, "--sync-every applies to remote collectors, and this run has none"),
    ({"ray_address": "127.0.0.1:1"}, "--ray-address applies to remote collectors"),
    ({"collector_replay": True}, "--collector-replay applies to remote collectors"),
    ({"collect_steps": 30}, "--collect-steps applies to remote collectors"),
    ({"num_collectors": 2, "collector_replay_unrolls": 4},
     "--collector-replay-unrolls applies to the collectors' own replay: give "
     "--collector-replay too"),
])
def test_collector_fields_without_collectors_are_refused(given, message):
    """A collector's flag (or config-file field) in a run without collectors would be recorded
    in config.yaml and never read: refused in one line, by flag and by file alike."""
    with pytest.raises(OffpolicyError, match=message):
        registry.resolve("aql", train_overrides={"env": "CartPole-v1", **given})
    with pytest.raises(OffpolicyError, match=message):
        registry.resolve("aql", file_dict={"train": {"env": "CartPole-v1", **given}})


def test_a_presets_collector_fields_are_not_blamed_on_a_flag():
    """AQL's paper-distributed preset sets remote collectors and their replay; with
    --num-collectors 0 the refusal names what the run lacks (build's), not a flag the user
    never gave; a default value given explicitly is not refused."""
    run = registry.resolve("aql", preset="paper-distributed", train_overrides={
        "env": "CartPole-v1", "num_collectors": 0, "sync_every": 1})
    assert run.train.num_collectors == 0 and run.train.collector_replay
    with pytest.raises(OffpolicyError, match="--collector-replay keeps a replay in every "
                                             "remote collector: give --num-collectors K"):
        Run(run, None)


@pytest.mark.usefixtures("ray_turn")
def test_an_unreachable_ray_address_is_one_line_within_seconds(tmp_path):
    """Issue 73: nothing listens at 127.0.0.1:1 (Ray itself retried it for minutes, printing
    multi-line warnings): one line, exit 2, in seconds, no run directory, no Ray process."""
    pytest.importorskip("ray")
    before = ray_processes()
    start = time.monotonic()
    done = run_cli("train", "ddpg", "--env", TOY, *TINY_FLAGS, "--num-collectors", "2",
                   "--ray-address", "127.0.0.1:1", "--run-dir", "R", cwd=tmp_path)
    assert time.monotonic() - start < 30, done.stderr[-2000:]
    assert_one_line_error(done, "cannot reach the Ray cluster at 127.0.0.1:1: "
                                "ConnectionRefusedError")
    assert not (tmp_path / "R").exists()
    assert not ray_processes() - before


def test_the_ray_address_probe(monkeypatch):
    """A port that accepts passes; a closed one, a silent one (no answer within the timeout)
    and a malformed address are one line each."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_ray_address(f"127.0.0.1:{port}", 5)
    with pytest.raises(OffpolicyError, match=f"at 127.0.0.1:{port}: ConnectionRefusedError"):
        check_ray_address(f"127.0.0.1:{port}", 5)
    with pytest.raises(OffpolicyError, match="expected HOST:PORT"):
        check_ray_address("head-node", 5)

    def silent(address, timeout):
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    with pytest.raises(OffpolicyError, match=r"no answer within 0.5 s \(--ray-connect-timeout"):
        check_ray_address("ray://head-node", 0.5)


def test_chunks_are_multiples_the_run_lands_on():
    with pytest.raises(OffpolicyError, match=r"multiple of --num-envs 1 x 50 steps per "
                                             "collector chunk.*use 950 or 1000"):
        registry.resolve("ddpg", train_overrides={"num_collectors": 2, "steps": 970,
                                                  **{k: v for k, v in TINY_OVERRIDES.items()
                                                     if k != "hidden"}})


def test_aql_gives_the_first_tenth_of_all_collectors_copies_the_exploring_epsilon():
    """App. A2: 'the first 10 actors use epsilon = 0.5 and the remaining 0.05' (of 100)."""
    import gymnasium as gym

    from offpolicy.agents.aql import AQL
    from offpolicy.agents.base import AgentContext
    from offpolicy.envs.spaces import ActionSpec

    run = registry.resolve("aql", train_overrides={"env": "CartPole-v1"})
    spec = ActionSpec.from_gym(gym.spaces.Discrete(2))
    eps = [float(AQL(run.agent, (4,), spec, AgentContext(acting_offset=i, acting_total=20))
                 .epsilons(1)[0]) for i in range(20)]
    np.testing.assert_allclose(eps, [0.5, 0.5] + [0.05] * 18)
    assert eps == [float(e) for e in AQL(run.agent, (4,), spec).epsilons(20)]
