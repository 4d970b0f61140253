"""Recurrent cores for agents (``--<algo>.core lstm|gru``): what an agent needs to put a
:class:`~offpolicy.networks.RecurrentCore` in front of its networks.

One :class:`Recurrence` per agent knows its cores (one per network that reads observations:
DDPG's, TD3's and SAC's actor and critic, NAF's and V-RACER's one network, AQL's shared
embedding), where
each one's state sits in the flat carry, and how the two ways of starting a window work
(:class:`~offpolicy.agents.base.CoreSpec`):

* ``zero``: every output is computed from a zero state over the last ``window`` observations
  of its episode (the ReF-ER authors' smarties, ReF-ER Sec. 5.4: "LSTM networks (2 layers of
  32 cells with back-propagation window of 16 steps)"), when acting and when learning, so
  the learner reproduces exactly what the actor computed (with parameters and observation
  statistics held fixed: under ``--normalize-obs`` acting normalised each observation as it
  arrived, the learner with the statistics of its update);
* ``stored``: acting carries the state through the episode and replay records it before
  every step; a sampled window starts from the recorded state, unrolls ``burn_in`` steps
  without gradient, then back-propagates (R2D2, Kapturowski et al. 2019, Sec. 3: "stored
  state" with "burn-in").

Learning. A transitions agent's sample t gets a context of up to ``window - 1`` earlier steps
(zero) or ``burn_in + window - 1`` (stored) of its episode; its ``obs`` and ``next_obs``
become :class:`~offpolicy.networks.Context` views of that one window (the outputs at t and
t + 1), which the agent's networks take wherever they took observations. A sequences agent's
window of T steps gets a context of up to ``window - 1`` (zero) or ``burn_in`` (stored) steps
before it, and its ``obs`` [T+1, B] becomes one view of span T + 1. Windows never cross an
episode start, so no state leaks from one episode into the next, and a batch's windows are
unrolled side by side, each from its own start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from offpolicy.agents.base import (
    CONTEXT_OBS,
    CONTEXT_POSITION,
    CONTEXT_STATE,
    CORE_STATE,
    NEXT_CORE_STATE,
    CoreSpec,
    DataSpec,
)
from offpolicy.errors import OffpolicyError
from offpolicy.networks import Context, CoreConfig, core_state_size
from offpolicy.replay.keys import NEXT_OBS, OBS, REWARD


class Recurrence:
    """An agent's cores, from its config's ``core*`` fields. ``names``: one core per network
    that reads observations, in the order their states are stacked in the carry."""

    def __init__(self, config: Any, names: tuple[str, ...], init_scheme: str, section: str):
        self.enabled = getattr(config, "core", "none") != "none"
        self.names = names
        self.configs: dict[str, CoreConfig] = {}
        self.spec: CoreSpec | None = None
        if not self.enabled:
            return
        c = config
        if c.core_start == "zero" and c.core_burn_in:
            raise OffpolicyError(f"--{section}.core-burn-in applies to --{section}.core-start "
                                 "stored (a zero start computes every output from zero over "
                                 f"its --{section}.core-window observations)")
        size = core_state_size(c.core, c.core_layers, c.core_cells)
        for i, name in enumerate(names):
            self.configs[name] = CoreConfig(c.core, c.core_layers, c.core_cells, i * size,
                                            init_scheme)
        self.window, self.burn_in = c.core_window, c.core_burn_in
        self.spec = CoreSpec(c.core_start, c.core_window, c.core_burn_in, size * len(names))

    def core(self, name: str) -> CoreConfig | None:
        """The core of network ``name`` (None without cores)."""
        return self.configs.get(name)

    @property
    def stored(self) -> bool:
        return self.spec is not None and self.spec.stored

    def data(self, base: DataSpec) -> DataSpec:
        """``base`` with the context the cores read (unchanged without cores)."""
        if not self.enabled:
            return base
        if self.stored:
            back = self.burn_in + (self.window - 1 if base.kind == "transitions" else 0)
        else:
            back = self.window - 1
        return base.with_context(back, self.stored)

    @property
    def behaviour_fields(self) -> dict:
        """The recorded core state (stored) as a behaviour field."""
        return {CORE_STATE: ((self.spec.state_size,), np.float32)} if self.stored else {}

    # ------------------------------------------------------------------ learning views
    def _context(self, batch: dict, positions, span: int, grad_from) -> Context:
        obs = batch[CONTEXT_OBS]
        batch_size = obs.shape[1]
        carry = (batch[CONTEXT_STATE] if self.stored
                 else jnp.zeros((batch_size, self.spec.state_size), jnp.float32))
        return Context(obs, jnp.zeros(obs.shape[:2], bool), carry, grad_from, positions,
                       span=span, window=0 if self.stored else self.window)

    def transition_views(self, batch: dict) -> dict:
        """``batch`` with ``obs`` and ``next_obs`` as views of its context: the outputs at
        the sampled step t and at t + 1. Stored: gradient from the last ``window`` steps up
        to t (the earlier ones are the burn-in)."""
        p = batch[CONTEXT_POSITION]
        grad_from = jnp.maximum(p - (self.window - 1), 0)
        return {**batch, OBS: self._context(batch, p, 0, grad_from),
                NEXT_OBS: self._context(batch, p + 1, 0, grad_from)}

    def sequence_view(self, batch: dict) -> dict:
        """``batch`` with ``obs`` as a view of span T + 1 of its context (the window's
        observations); stored: gradient from the window's first step on."""
        p = batch[CONTEXT_POSITION]
        span = batch[REWARD].shape[0] + 1
        return {**batch, OBS: self._context(batch, p, span, p)}

    # ------------------------------------------------------------------ acting
    def advance(self, params_by_core: dict[str, Any], ctx: Context) -> jnp.ndarray:
        """Stored: every core's state after the acting step ``ctx`` (one position), flat
        [B, S] in the carry's order; ``params_by_core``: each core's parameters."""
        return jnp.concatenate(
            [self.configs[n].module(None).apply({"params": params_by_core[n]}, ctx, final=True)
             for n in self.names], axis=-1)

    # An actor and twin critics with one shared critic core (TD3, SAC; critic["core"]):
    # acting runs the actor and, with a stored core state, records the critics' core state
    # too.
    def actor_acting_params(self, actor: Any, critic: Any) -> Any:
        """What acting needs: the actor's parameters, and with a stored core state also the
        critics' core."""
        return {"actor": actor, "critic_core": critic["core"]} if self.stored else actor

    def actor_of(self, acting: Any) -> Any:
        """The actor's parameters in what ``actor_acting_params`` returned."""
        return acting["actor"] if self.stored else acting

    def actor_acting_info(self, acting: Any, ctx, info: dict) -> dict:
        """``acting_info`` for ``actor_acting_params``' layout (actor and critic cores)."""
        return self.acting_info(lambda: {"actor": acting["actor"]["core"],
                                         "critic": acting["critic_core"]}, ctx, info)

    def acting_info(self, cores: Callable[[], dict[str, Any]], ctx, info: dict) -> dict:
        """A policy's info plus the state after the step (stored mode only); ``cores()``
        gives each core's parameters by name."""
        if not self.stored or not isinstance(ctx, Context):
            return info
        return {**info, NEXT_CORE_STATE: self.advance(cores(), ctx)}
