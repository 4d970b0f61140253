"""The agent protocol: the one contract between an algorithm and the runtime.

An agent never touches an environment and the runtime never knows an algorithm's math. The
runtime (``offpolicy.training``) reads only what this protocol declares:

``data``
    what the update learns from: :func:`transitions` (one step each, with ``next_obs``),
    :func:`sequences` (windows of T consecutive steps of one episode, time-major, masked where
    the episode ended) or :func:`episodes` (whole episodes from their first step, padded to a
    maximum length and masked).
``behaviour_fields``
    ``{name: (shape, dtype)}``: what ``policy`` records about the action it actually took (a
    Gaussian's mean and std, a categorical's probabilities, the actor an ensemble chose), stored
    per step in replay so importance weights pi(a|s) / mu(a|s) can be computed later.
``writeback_fields``
    ``{name: (shape, dtype, initial)}``: per-step fields the update refreshes in replay
    (importance weights, far-policy flags, stored returns). Replay stores them next to the behaviour
    fields, fills a new step with ``initial`` and returns them in every batch.
``init(key) -> state``
    the agent's whole state as a pytree (parameters, targets, optimiser states).
``policy(params, obs[B, ...], key, explore) -> (action[B, m], behaviour_info)``
    pure and jittable; ``explore`` is a static Python bool. ``key`` is split once per jitted
    call by the runtime, never per step in Python. A deterministic policy ignores the key and
    returns its greedy action; its exploration noise is a host-side process
    (``exploration_noise``) because OU noise carries state across steps of one episode.
``update(state, batch, key) -> (state, metrics, writeback)``
    pure and jittable (compiled once). ``metrics`` are arrays (scalars or fixed-shape vectors,
    e.g. how often each actor of an ensemble wins) averaged over a logging interval by the
    runtime; ``writeback`` maps each of ``writeback_fields`` to an array shaped like the batch's
    step index ([B] for transitions, [T, B] for sequences and episodes).
``acting_params(state)``
    the part of the state the policy needs (what a remote collector would be sent).
``exploration_noise``
    ``acting.NoiseSpec`` for deterministic policies with additive host-side noise, else None.

Optional members: an agent that lacks one gets its default. They are read here only, once, into
the :class:`Contract` that :func:`check_agent` returns; the runtime reads the contract:

``learns_on_segments`` (default True)
    with ``--segment-length`` k, whether a sequences agent takes one update on the segment
    just collected before its replayed ones (ACER's Algorithm 1); False: replay only.
``stored_return`` (default None) and ``state_value(params, obs[B, ...]) -> V[B]``
    a ``stored_returns.StoredReturn`` when the agent keeps per-step return targets in replay
    (V-RACER's V^tbc); the learner fills a finished episode's targets and, for a truncated
    one, bootstraps them from ``state_value`` of the observation it was cut at.
``num_actors`` (default 0) and ``single_actor_policy(i)``
    an ensemble's size and a policy acting with actor i alone (``offpolicy eval
    --per-actor``, ACE's Table 3).
``inspect(params, obs[1, ...], key) -> dict`` and ``sub_actions`` (default None, ())
    what the policy considered at a state (AQL's proposal, ``offpolicy eval --proposal``).
``config.gamma`` (default 0.99), read by :func:`discount`
    the algorithm config's discount: the reward normaliser's running return uses it.
``core`` (default None)
    a :class:`CoreSpec` for an agent with a recurrent core. Its ``policy`` then takes, in
    place of obs, a ``networks.Context`` the runtime builds from the observations and the
    acting memory it keeps per env copy (the last ``window`` observations, or the carried
    state), and under ``stored`` returns the state after the step in its info
    (:data:`NEXT_CORE_STATE`, not stored); its ``data`` asks for a context
    (:meth:`DataSpec.with_context`).

Every agent is built as ``Agent(config, obs_shape, action_spec, context)``: the algorithm's
config section, the observation shape, the env's ``ActionSpec`` and an :class:`AgentContext`
with what the training loop decides for it (the replay choice and its constants, the segment
length). The agent's state may be any pytree (a dict, a NamedTuple or a ``flax.struct``
dataclass per role): the learner and checkpoints take it as it is. The package's agents keep
theirs in the dataclasses of :mod:`offpolicy.agents.types`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np

# the data specs and the keys an agent reads from a batch are replay's (replay/keys.py),
# handed on here as the contract's own
from offpolicy.replay.keys import CONTEXT_OBS as CONTEXT_OBS
from offpolicy.replay.keys import CONTEXT_POSITION as CONTEXT_POSITION
from offpolicy.replay.keys import CONTEXT_STATE as CONTEXT_STATE
from offpolicy.replay.keys import CORE_STATE, DataSpec, FieldSpecs
from offpolicy.replay.keys import DATA_KINDS as DATA_KINDS
from offpolicy.replay.keys import episodes as episodes
from offpolicy.replay.keys import sequences as sequences
from offpolicy.replay.keys import transitions as transitions
from offpolicy.replay.refer import ER, ReplaySettings
from offpolicy.replay.stored_returns import StoredReturn

NEXT_CORE_STATE = "next_core_state"  # policy info: the state after the step (not stored)


@dataclass(frozen=True)
class CoreSpec:
    """An agent's recurrent core(s), as the runtime sees them (the optional member ``core``).

    ``start`` 'zero': every core output comes from a zero state over the last ``window``
    observations of the episode (the step's own included), when acting and when learning
    alike (the ReF-ER authors' smarties); acting keeps those observations. 'stored': acting
    carries the state through the whole episode and records it before every step
    (:data:`CORE_STATE`, a behaviour field of ``state_size`` floats); learning starts a
    window from the state recorded at its first step, runs ``burn_in`` steps without
    gradient, then back-propagates (R2D2, Kapturowski et al. 2019). The state restarts from
    zero at every episode start, terminated or truncated."""

    start: str
    window: int
    burn_in: int
    state_size: int

    @property
    def stored(self) -> bool:
        return self.start == "stored"


@runtime_checkable
class Agent(Protocol):
    """The protocol every registered agent implements (checked in tests/test_protocol.py)."""

    data: DataSpec
    behaviour_fields: FieldSpecs
    writeback_fields: FieldSpecs
    exploration_noise: Any  # acting.NoiseSpec | None

    def init(self, key: jax.Array) -> Any: ...

    def policy(self, params: Any, obs: jax.Array, key: jax.Array, explore: bool
               ) -> tuple[jax.Array, dict[str, jax.Array]]: ...

    def update(self, state: Any, batch: dict[str, jax.Array], key: jax.Array
               ) -> tuple[Any, dict[str, jax.Array], dict[str, jax.Array]]: ...

    def acting_params(self, state: Any) -> Any: ...


@dataclass(frozen=True)
class AgentContext:
    """What the training loop decides for an agent, its constructor's fourth argument."""

    replay: ReplaySettings = field(default_factory=lambda: ER)  # --replay and its constants
    segment_length: int = 0  # --segment-length k: ACER learns from k-step windows
    # a remote collector's env copies among all collectors' (AQL's per-actor epsilon):
    # this process acts for copies acting_offset.. of acting_total (0: the batch is all)
    acting_offset: int = 0
    acting_total: int = 0
    # the loop's cadence, for schedules an agent keeps in env steps while it counts updates
    # (DQN's epsilon): --updates-per-step and --warmup-steps
    updates_per_step: float = 1.0
    warmup_steps: int = 0


DEFAULT_CONTEXT = AgentContext()


@dataclass(frozen=True)
class Contract:
    """An agent's optional members (module docstring), each with its default."""

    learns_on_segments: bool = True
    stored_return: StoredReturn | None = None
    state_value: Callable | None = None
    num_actors: int = 0
    single_actor_policy: Callable | None = None
    inspect: Callable | None = None
    sub_actions: tuple = ()
    core: CoreSpec | None = None


def contract(agent: Any) -> Contract:
    """The optional members ``agent`` has, defaults for the rest (no check: see
    :func:`check_agent`)."""
    defaults = Contract()
    return Contract(**{name: getattr(agent, name, getattr(defaults, name))
                       for name in Contract.__dataclass_fields__})


def discount(config: Any) -> float:
    """``config.gamma``, an algorithm config's optional member (module docstring): the
    reward normaliser's running return discounts with it; 0.99 for a config without one."""
    return float(getattr(config, "gamma", 0.99))


def check_agent(agent: Any) -> Contract:
    """Raise TypeError naming what ``agent`` lacks of the protocol; return its
    :class:`Contract` (``training/build.py`` builds every agent through this)."""
    if not isinstance(agent, Agent):
        missing = [n for n in ("data", "behaviour_fields", "writeback_fields",
                               "exploration_noise", "init", "policy", "update", "acting_params")
                   if not hasattr(agent, n)]
        raise TypeError(f"{type(agent).__name__} does not implement the agent protocol "
                        f"(missing: {', '.join(missing)})")
    if not isinstance(agent.data, DataSpec):
        raise TypeError(f"{type(agent).__name__}.data must be a DataSpec, got {agent.data!r}")
    specs = [("behaviour_fields", k, v, 2) for k, v in agent.behaviour_fields.items()]
    specs += [("writeback_fields", k, v, 3) for k, v in agent.writeback_fields.items()]
    for name, k, v, n in specs:
        if not (isinstance(k, str) and isinstance(v, tuple) and len(v) == n
                and isinstance(v[0], tuple)):
            what = "(shape, dtype)" if n == 2 else "(shape, dtype, initial)"
            raise TypeError(f"{type(agent).__name__}.{name}[{k!r}] must be {what}, got {v!r}")
        np.dtype(v[1])
    clash = set(agent.behaviour_fields) & set(agent.writeback_fields)
    if clash:
        raise TypeError(f"{type(agent).__name__}: fields both behaviour and write-back: "
                        f"{', '.join(sorted(clash))}")
    c = contract(agent)
    name = type(agent).__name__
    if c.stored_return is not None and not isinstance(c.stored_return, StoredReturn):
        raise TypeError(f"{name}.stored_return must be a StoredReturn, got {c.stored_return!r}")
    pairs = [(c.stored_return is not None, "stored_return", c.state_value, "state_value"),
             (c.num_actors > 0, "num_actors", c.single_actor_policy, "single_actor_policy"),
             (c.inspect is not None, "inspect", c.sub_actions, "sub_actions")]
    for present, member, partner, partner_name in pairs:
        if present and not partner:
            raise TypeError(f"{name} declares {member} but not {partner_name}")
    if c.core is not None:
        if not isinstance(c.core, CoreSpec):
            raise TypeError(f"{name}.core must be a CoreSpec, got {c.core!r}")
        stored = CORE_STATE in agent.behaviour_fields
        if stored != c.core.stored or agent.data.context_state != c.core.stored:
            raise TypeError(f"{name}: a stored core state needs the behaviour field "
                            f"{CORE_STATE!r} and a data spec with context_state, and only "
                            "it does")
    return c
