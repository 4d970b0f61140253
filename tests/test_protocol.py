"""The agent protocol (agents/base.py) and the runtime paths that families build on.

* every registered agent satisfies ``base.Agent`` and its declarations match what its policy
  and update really return;
* a toy stochastic agent (tests/toy_agents.py) learns a small task through ``sequences(T)``
  sampling, behaviour info stored in replay and a write-back field, end to end;
* the write-back path puts the update's values at the sampled steps, under the masks;
* ``--num-envs`` and ``--pipeline`` keep the number of updates per env step.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import toy_agents
from _helpers import assert_same_tree, tiny_run

from offpolicy import registry
from offpolicy.agents import base
from offpolicy.errors import OffpolicyError
from offpolicy.training.run import Run


@pytest.fixture(autouse=True)
def toy_pg_registered():
    """``toy-pg`` is in the registry during these tests only (``offpolicy list`` etc. must not
    see it elsewhere)."""
    added = toy_agents.register()
    yield
    if added:
        registry.ALGORITHMS.pop("toy-pg")

TINY = {"ddpg": {"hidden": (16, 16)}, "ace": {"encoder_size": 16, "hidden": 16,
                                               "num_actors": 3},
        "aql": {"hidden": (16, 16), "proposal_hidden": (16,), "proposal_samples": 4,
                "uniform_samples": 4, "unroll_length": 4},
        "acer": {"hidden": (16,)}, "td3": {"hidden": (16, 16)}, "sac": {"hidden": (16, 16)},
        "dqn": {"hidden": (16, 16)}}


def _tiny(algo, **train):
    spec = registry.get(algo)
    # Pendulum for all; discretized (5 levels) for agents that take no continuous actions
    # (a multi_discrete action), CartPole for those that take one discrete action only
    env = "Pendulum-v1"
    if "continuous" not in spec.action_kinds:
        train = {"discretize": 5, **train}
    if spec.action_kinds == ("discrete",):
        env, train = "CartPole-v1", {k: v for k, v in train.items() if k != "discretize"}
    return registry.resolve(
        algo, train_overrides={"env": env, "batch_size": 8, "eval_episodes": 1,
                               "quiet": True, **train},
        agent_overrides=TINY.get(spec.section, {}))


@pytest.mark.parametrize("algo", [a for a in registry.ALGORITHMS if a != "toy-pg"])
def test_every_registered_agent_implements_the_protocol(algo):
    r = Run(_tiny(algo), None)
    agent = r.agent
    assert isinstance(agent, base.Agent)
    base.check_agent(agent)
    assert agent.data.kind in base.DATA_KINDS
    # the policy returns flat actions and exactly the declared behaviour fields
    obs = np.zeros((2, *r.obs_shape), np.float32)
    action, info = jax.jit(agent.policy, static_argnums=3)(
        agent.acting_params(r.state), obs, jax.random.PRNGKey(0), True)
    assert action.shape == (2, r.spec.flat_dim)
    assert set(info) == set(agent.behaviour_fields)
    for k, (shape, dtype) in agent.behaviour_fields.items():
        assert info[k].shape == (2, *shape) and info[k].dtype == np.dtype(dtype)
    # the update returns (state, metrics, writeback) with the declared write-back fields
    _, batch = r.learner.example_batch()
    state, metrics, wb = jax.eval_shape(agent.update, r.state, batch, jax.random.PRNGKey(0))
    assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(r.state)
    assert set(wb) == set(agent.writeback_fields) and metrics
    # the learner initialises with one compiled program: the same values as the agent's own
    # init run op by op, in distinct buffers (donation needs them)
    assert_same_tree(r.state, agent.init(jax.random.PRNGKey(r.run.train.seed)))
    leaves = jax.tree_util.tree_leaves(r.state)
    assert len({x.unsafe_buffer_pointer() for x in leaves}) == len(leaves)


def test_check_agent_names_what_is_missing():
    class Half:
        data = base.transitions()

        def init(self, key):
            return {}

    with pytest.raises(TypeError, match="policy"):
        base.check_agent(Half())
    with pytest.raises(ValueError, match="length"):
        base.sequences(0)


def _toy_run(**train):
    return registry.resolve("toy-pg", train_overrides={
        "env": "toy_envs:ToyGuess-v0", "batch_size": 16, "eval_episodes": 10,
        "eval_every": 1000, "log_every": 500, "quiet": True, **train})


def test_toy_stochastic_agent_learns_through_sequences_and_writeback():
    r = Run(_toy_run(steps=3000, seed=0), None)
    assert r.agent.data == base.sequences(4)
    before = float(np.mean(r.evaluate(10)))
    summary = r.train()
    assert summary["status"] == "completed" and r.compile_count == 1
    # random guessing earns 8/3 per episode, the optimal policy 8
    assert before < 5.0 and summary["final_return"] >= 7.5, (before, summary)
    # behaviour probabilities are stored with every step; rho was written back
    probs = r.replay.valid_values("probs")
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    rho = r.replay.valid_values("rho")
    assert np.mean(rho != 1.0) > 0.5 and np.all(rho > 0)


def test_writeback_lands_at_the_sampled_steps_under_the_mask():
    r = Run(_toy_run(steps=200, seed=1), None)
    r.train(until=200, final_eval=False)
    learner, replay = r.learner, r.replay.storage
    replay.extras["rho"][:] = -1.0
    idx, batch = learner.sample()
    params = jax.device_get(learner.acting_params())  # the update donates the state
    learner.update(idx, batch)
    # expected: pi/mu under the parameters before the update, at the valid steps only
    obs, act = batch["obs"][:-1], batch["action"][..., 0].astype(int)
    logits = obs @ np.asarray(params["pi"])
    pi = np.exp(logits - logits.max(-1, keepdims=True))
    pi /= pi.sum(-1, keepdims=True)
    taken = np.take_along_axis(pi, act[..., None], -1)[..., 0]
    mu = np.take_along_axis(batch["probs"], act[..., None], -1)[..., 0]
    mask = batch["mask"] > 0
    np.testing.assert_allclose(replay.extras["rho"][idx[mask]], (taken / mu)[mask], rtol=1e-5)
    untouched = np.ones(replay.capacity, bool)
    untouched[idx[mask]] = False
    assert np.all(replay.extras["rho"][untouched] == -1.0)


def test_replay_write_rejects_unknown_fields():
    r = Run(_toy_run(steps=50), None)
    with pytest.raises(OffpolicyError, match="no field"):
        r.replay.write_back(np.zeros(2, np.int64), {}, {"nope": np.zeros(2)})


@pytest.mark.parametrize("num_envs, pipeline", [(1, True), (3, False), (3, True)])
def test_num_envs_and_pipeline_keep_updates_per_env_step(num_envs, pipeline):
    run = tiny_run(steps=300, num_envs=num_envs, pipeline=pipeline, eval_every=300,
                   log_every=100, checkpoint_every=9_999)
    r = Run(run, None)
    summary = r.train(until=300)
    assert summary["status"] == "completed" and r.step == 300
    assert len(r.replay) == 300 and r.compile_count == 1
    # updates start once replay holds a batch (16 transitions); then one per env step
    start = 16 if num_envs == 1 else 18
    assert abs(r.learner.updates - (300 - start)) <= num_envs + 1, r.learner.updates
    if num_envs > 1:
        assert r.replay.storage.num_streams == num_envs
        assert set(np.unique(r.replay.storage.sizes)) <= {100, 101, 102, 103, 104, 105, 106}


def test_segment_cadence_updates_on_segments_and_from_replay():
    r = Run(_toy_run(steps=400, seed=2, num_envs=2, segment_length=8, replay_ratio=2.0,
                     warmup_steps=50), None)
    calls = []  # the sampled steps' shape of every update (the toy writes rho back each time)
    inner = r.replay.write_back
    r.replay.write_back = lambda *a: (calls.append(a[0].shape), inner(*a))
    summary = r.train()
    assert summary["status"] == "completed" and r.step == 400
    traces = r.learner.compilations
    assert traces["step_segment"] == 1 and traces["step"] == 1 and traces["step_act"] == 0
    segments = [s for s in calls if s == (8, 4)]  # T = 8, two windows per env copy
    assert len(segments) == 400 // 16 - 50 // 16  # one per segment once warm-up is over
    replayed = len(calls) - len(segments)
    assert 1.0 * len(segments) < replayed < 3.0 * len(segments)  # Poisson(2) per segment
    # the stochastic agent warmed up with its own policy: finite importance weights only
    assert np.isfinite(r.replay.storage.extras["rho"]).all()


def test_segment_cadence_refuses_pipeline_and_too_long_segments():
    with pytest.raises(OffpolicyError, match="pipeline"):
        Run(_toy_run(steps=50, segment_length=8, pipeline=True), None)
    with pytest.raises(OffpolicyError, match="too long"):
        Run(_toy_run(steps=50, segment_length=600, buffer_size=1000), None)
