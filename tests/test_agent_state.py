"""Typed agent state (issue #70, offpolicy/agents/types.py): every agent keeps its state in one
``flax.struct`` dataclass, whose checkpoint is the dict the agent kept before, and which
flattens to that dict's leaves in their order (tests/test_golden.py resumes a checkpoint of
every agent written before the state was typed)."""

from __future__ import annotations

import dataclasses

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_same_tree

from offpolicy import registry
from offpolicy.agents import types
from offpolicy.envs.spaces import ActionSpec
from offpolicy.training.build import build_agent

CONTINUOUS = ActionSpec.continuous(-np.ones(2), np.ones(2))
DISCRETE = ActionSpec("discrete", shape=(), n=3)
SMALL = {"ddpg": {"hidden": (8, 8)}, "naf": {"hidden": (8,)}, "vracer": {"hidden": (8,)},
         "acer": {"hidden": (8,)}, "td3": {"hidden": (8, 8)}, "sac": {"hidden": (8, 8)},
         "dqn": {"hidden": (8,)}, "ace": {"encoder_size": 8, "hidden": 8, "num_actors": 2},
         "aql": {"hidden": (8,), "proposal_hidden": (8,), "proposal_samples": 4,
                 "uniform_samples": 4}}
# (algorithm, replay, agent fields, actions): every optional part of a state, present and absent
CASES = [(a, "er", {}, None) for a in registry.ALGORITHMS if a != "toy-pg"] + [
    ("ddpg", "refer", {}, None), ("sac", "refer", {}, None), ("naf", "refer", {}, None),
    ("vracer", "per", {}, None), ("dqn", "per", {"n_step": 3}, None),
    ("acer", "er", {}, DISCRETE), ("aql", "er", {"target_update_every": 5}, None),
    ("td3", "er", {"hidden": (8,), "core": "lstm", "core_cells": 4, "core_window": 3,
                   "core_start": "stored", "core_burn_in": 1}, None),
    ("aql", "er", {"search": "exact", "target_update_every": 5, "core": "gru",
                   "core_cells": 4, "core_window": 3}, DISCRETE)]


def _agent(algo, replay, fields, action, **train):
    spec = registry.get(algo)
    run = registry.resolve(algo, train_overrides={"replay": replay, **train},
                           agent_overrides=SMALL.get(spec.section, {}) | fields)
    if action is None:
        action = CONTINUOUS if "continuous" in spec.action_kinds else DISCRETE
    return build_agent(run, (3,), action)


def _as_dict(x):
    """A typed state as the dict its agent kept before: each typed part a dict of its fields
    that are not None, by name (optimiser states and parameters as they are)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _as_dict(getattr(x, f.name)) for f in dataclasses.fields(x)
                if getattr(x, f.name) is not None}
    return x


@pytest.mark.parametrize(("algo", "replay", "fields", "action"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_a_state_checkpoints_and_flattens_as_the_dict_it_replaced(algo, replay, fields,
                                                                   action):
    state = _agent(algo, replay, fields, action).init(jax.random.PRNGKey(0))
    assert dataclasses.is_dataclass(state) and type(state).__module__ == types.__name__
    old = _as_dict(state)
    # the leaves in the old dict's order: the update compiles as before, flat copies fit
    assert_same_tree(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(old))
    # a checkpoint of the old dict loads into the typed state, and a new one is the same
    blob = flax.serialization.to_bytes(old)
    assert flax.serialization.to_bytes(state) == blob
    template = jax.tree_util.tree_map(jnp.zeros_like, state)
    assert_same_tree(flax.serialization.from_bytes(template, blob), state)


def test_a_checkpoint_of_another_configuration_is_refused():
    """A field that is None in this configuration (no ReF-ER state) must be absent from the
    checkpoint, and every other field present (the diagnostics keep the ReF-ER state and
    plain Adam)."""
    with_refer = _agent("sac", "er", {}, None, replay_diagnostics=True).init(
        jax.random.PRNGKey(0))
    without = _agent("sac", "er", {}, None).init(jax.random.PRNGKey(0))
    assert without.refer is None and "refer" not in flax.serialization.to_state_dict(without)
    with pytest.raises(ValueError, match="refer of SACState is not in this configuration"):
        flax.serialization.from_bytes(without, flax.serialization.to_bytes(with_refer))
    with pytest.raises(ValueError, match="missing field refer of SACState"):
        flax.serialization.from_bytes(with_refer, flax.serialization.to_bytes(without))
    stray = {**flax.serialization.to_state_dict(without), "extra": 1}
    with pytest.raises(ValueError, match="unknown field.*extra"):
        flax.serialization.from_state_dict(without, stray)


def test_fields_are_declared_in_alphabetical_order():
    class Unsorted:
        params: dict
        opt: dict

    with pytest.raises(TypeError, match="alphabetical order"):
        types.agent_state(Unsorted)
