"""Typed agent state: what each agent's ``init`` returns and its jitted ``update`` takes and
returns (issue #70; the shape of SBX's ``RLTrainState`` and Stoix's ``systems/ddpg/types.py``).

One ``flax.struct`` dataclass per agent, one field per role: the online parameters, their
targets (or ACER's average), the optimiser states, counters, and the ReF-ER state
(``replay/refer.py``'s ``{"beta", "step"}``, None where the replay choice keeps none). A
field's value is a pytree: a network's Flax parameters are the dicts Flax makes, several
networks of fixed roles an :class:`ActorCritic`, and networks that vary with the
configuration (DDPG's encoders, AQL's core and proposal) a dict by network name. States are
immutable: an update builds the new one (``replace`` changes some fields).

The dicts the agents kept before their state was typed are these states' old forms: field
names are their keys, and a field that is None is a key the dict did not have. Hence:

* checkpoints (``training/checkpoint.py``, ``flax.serialization``): a state's state dict is
  that dict, so a checkpoint written before this module existed loads as it is (no
  conversion is needed), and one written now has the same layout;
* fields are declared in alphabetical order (:func:`agent_state` checks it), so a state
  flattens to the leaves of that dict (a dict flattens in the order of its sorted keys) in
  their order: the jitted update takes its arguments as before, and a flat list of leaves
  saved from the old state (``benchmarks/hybrid.py``'s peer checkpoints) fills the new one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.serialization
import flax.struct
import jax
import optax

Params = Any  # one network's (or several named networks') Flax parameters
OptState = optax.OptState
ReferState = dict  # replay/refer.py's {"beta": beta, "step": k}, or None without ReF-ER


def _to_state_dict(x) -> dict[str, Any]:
    """Every field that is not None, by name: the dict an agent kept before (module doc)."""
    return {f.name: flax.serialization.to_state_dict(getattr(x, f.name))
            for f in dataclasses.fields(x) if getattr(x, f.name) is not None}


def _from_state_dict(x, state: dict[str, Any]):
    """``x`` (the template) with each field restored from ``state``; a field ``x`` holds None
    is absent from ``state`` (a configuration without it)."""
    state = dict(state)
    restored = {}
    for f in dataclasses.fields(x):
        value = getattr(x, f.name)
        if value is None:
            if state.pop(f.name, None) is not None:
                raise ValueError(f"field {f.name} of {type(x).__name__} is not in this "
                                 "configuration")
            continue
        if f.name not in state:
            raise ValueError(f"missing field {f.name} of {type(x).__name__}")
        restored[f.name] = flax.serialization.from_state_dict(value, state.pop(f.name),
                                                              name=f.name)
    if state:
        raise ValueError(f"unknown field(s) of {type(x).__name__}: {', '.join(sorted(state))}")
    return x.replace(**restored)


def agent_state(cls):
    """``flax.struct.dataclass(cls)`` (a frozen pytree with ``replace``) whose state dict
    leaves out the fields that are None; its fields must be in alphabetical order (module
    docstring)."""
    names = list(cls.__annotations__)
    if names != sorted(names):
        raise TypeError(f"{cls.__name__}: declare the fields in alphabetical order "
                        f"({', '.join(sorted(names))}), the order of the dict it replaces")
    cls = flax.struct.dataclass(cls)
    flax.serialization.register_serialization_state(cls, _to_state_dict, _from_state_dict,
                                                    override=True)
    return cls


@agent_state
class ActorCritic:
    """An actor's and its critic ensemble's parameters (TD3's and SAC's online networks or
    targets); with a recurrent core, the critics' shared core is ``critic["core"]``."""

    actor: Params
    critic: Params


@agent_state
class TD3State:
    actor_loss: jax.Array  # the last actor step's loss (logged between delayed steps)
    actor_opt: OptState
    critic_opt: OptState
    params: ActorCritic
    target: ActorCritic  # phi', theta'_1, theta'_2
    updates: jax.Array  # critic updates so far: the actor steps on every policy_delay-th


@agent_state
class SACState:
    actor_opt: OptState
    alpha_opt: OptState
    critic_opt: OptState
    log_alpha: jax.Array  # the temperature, log alpha
    params: ActorCritic
    refer: ReferState | None  # with a replay that stores the behaviour policy
    target_critic: Params


@agent_state
class DQNState:
    opt: OptState
    params: Params
    target: Params  # theta^-, a copy every target_update_every updates
    updates: jax.Array  # the epsilon schedule's and the target copy's clock


@agent_state
class DDPGState:
    """DDPG's and ACE's: networks by name (DDPG's actor, critic and encoders; ACE's modules),
    each optimiser over its part of them (a shared encoder in the critic's, and the actor's
    with ``actor_trains_encoder``)."""

    actor_opt: OptState
    critic_opt: OptState
    params: Params
    refer: ReferState | None  # DDPG with a replay that stores the behaviour mean
    target: Params


@agent_state
class NAFState:
    opt: OptState
    params: Params
    refer: ReferState
    target: Params


@agent_state
class VRACERState:
    opt: OptState
    params: Params
    refer: ReferState


@agent_state
class ACERState:
    average: Params  # the average policy network theta_a (trust region)
    opt: OptState
    params: Params


@agent_state
class AQLState:
    params: Params  # {"q", "core" (with --aql.core), "proposal" (with a learned proposal)}
    proposal_opt: OptState | None  # with a learned proposal (search 'proposal')
    q_opt: OptState  # over Q and the core in front of it
    target_core: Params | None  # with target_update_every and a core
    target_q: Params | None  # with target_update_every
    updates: jax.Array
