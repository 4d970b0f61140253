"""A toy stochastic agent that exercises the runtime paths no family used before: sampling with
a key inside ``policy``, behaviour info (categorical probabilities) stored in replay, learning
from ``sequences(T)`` with a return operator, and an importance weight written back to replay.

ToyPG is an off-policy actor-critic over a linear softmax policy and a linear value:
  rho_t  = pi(a_t | s_t) / mu(a_t | s_t)              mu = the stored behaviour probabilities
  G_t    = lambda-return over the window (offpolicy.returns.lambda_returns)
  L      = - sum_t m_t min(rho_t, c) log pi(a_t|s_t) sg(G_t - V(s_t)) / sum m
           + 1/2 sum_t m_t (sg(G_t) - V(s_t))^2 / sum m - entropy_weight H(pi(.|s_t))
The update writes rho_t (under the parameters before the step) back into replay's ``rho``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from offpolicy.agents.base import DEFAULT_CONTEXT, AgentContext, sequences
from offpolicy.config import _f
from offpolicy.distributions import Categorical
from offpolicy.returns import lambda_returns


@dataclass
class ToyPGConfig:
    gamma: float = _f(0.9, "discount factor", ge=0, le=1)
    lr: float = _f(0.05, "Adam step size", gt=0)
    sequence_length: int = _f(4, "window length T", ge=1)
    lambda_: float = _f(0.9, "lambda of the lambda-return", ge=0, le=1)
    rho_clip: float = _f(1.0, "truncation c of the importance weight", gt=0)
    entropy_weight: float = _f(0.01, "entropy bonus", ge=0)


class ToyState(NamedTuple):
    """Typed state, one field per role (as new agents hold it): the contract, the learner's
    donation and checkpoints take any pytree."""

    params: dict
    opt: Any


class ToyPG:
    writeback_fields = {"rho": ((), np.float32, 1.0)}
    exploration_noise = None

    def __init__(self, config: ToyPGConfig, obs_shape: tuple[int, ...], spec,
                 context: AgentContext = DEFAULT_CONTEXT):
        self.config, self.obs_dim, self.n = config, obs_shape[0], spec.n
        self.data = sequences(config.sequence_length)
        self.actor = Categorical()
        self.behaviour_fields = self.actor.behaviour_fields(self.n)
        self.opt = optax.adam(config.lr)

    def init(self, key):
        params = {"pi": jnp.zeros((self.obs_dim, self.n)), "v": jnp.zeros((self.obs_dim,))}
        return ToyState(params, self.opt.init(params))

    def acting_params(self, state: ToyState):
        return state.params

    def policy(self, params, obs, key, explore: bool):
        logits = obs @ params["pi"]
        if explore:
            action, info = self.actor.sample(key, logits)
        else:
            action = jnp.argmax(logits, axis=-1)
            info = {"probs": jax.nn.softmax(logits)}
        return action[:, None].astype(jnp.float32), info

    def update(self, state, batch, key):
        c = self.config
        obs, mask = batch["obs"], batch["mask"]  # [T+1, B, d], [T, B]
        action = batch["action"][..., 0].astype(jnp.int32)  # [T, B]
        log_mu = jnp.log(jnp.take_along_axis(batch["probs"], action[..., None], -1)[..., 0])
        denom = jnp.maximum(mask.sum(), 1.0)

        def loss(params):
            logp_all = jax.nn.log_softmax(obs[:-1] @ params["pi"])
            logp = jnp.take_along_axis(logp_all, action[..., None], -1)[..., 0]
            rho = jnp.exp(logp - log_mu)
            v = obs @ params["v"]  # [T+1, B]
            g = lambda_returns(batch["reward"], c.gamma * batch["discount"],
                               jax.lax.stop_gradient(v[1:]), c.lambda_, mask)
            adv = jax.lax.stop_gradient(g - v[:-1])
            pg = -jnp.sum(mask * jax.lax.stop_gradient(jnp.minimum(rho, c.rho_clip)) * logp
                          * adv) / denom
            value = 0.5 * jnp.sum(mask * (jax.lax.stop_gradient(g) - v[:-1]) ** 2) / denom
            entropy = -jnp.sum(mask * jnp.sum(jnp.exp(logp_all) * logp_all, -1)) / denom
            return pg + value - c.entropy_weight * entropy, (rho, value)

        (total, (rho, value)), grads = jax.value_and_grad(loss, has_aux=True)(state.params)
        upd, opt = self.opt.update(grads, state.opt, state.params)
        params = optax.apply_updates(state.params, upd)
        rho = jax.lax.stop_gradient(rho)
        metrics = {"loss": total, "value_loss": value,
                   "rho_mean": jnp.sum(mask * rho) / denom}
        return ToyState(params, opt), metrics, {"rho": rho}


def register() -> bool:
    """Add ``toy-pg`` to the registry (tests only); True if this call added it."""
    from offpolicy import registry

    if "toy-pg" in registry.ALGORITHMS:
        return False
    registry.ALGORITHMS["toy-pg"] = registry.Algorithm(
        "toy-pg", "toy", ToyPGConfig, "toy_agents:ToyPG", ("discrete",),
        "toy off-policy actor-critic over sequences (tests)", presets={"paper": {}})
    return True
