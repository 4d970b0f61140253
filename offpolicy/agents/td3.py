"""TD3: Twin Delayed Deep Deterministic policy gradient (Fujimoto, van Hoof & Meger 2018,
"Addressing Function Approximation Error in Actor-Critic Methods", Algorithm 1).

Networks (Sec. 6.1): a deterministic actor pi_phi(s) = tanh(MLP(s)) and two critics
Q_theta1, Q_theta2 (each an MLP of [s, a], batched as one ``CriticEnsemble``), 400-300 relu,
with target copies phi', theta'_1, theta'_2.

For a batch (s, a, r, s', c), c = 0 if s' is terminal else 1 (truncation bootstraps):
  a~ = clip(pi_phi'(s') + clip(eps, -c_n, c_n), -1, 1),  eps ~ N(0, sigma~^2)     (Eq. 14)
  y  = r + gamma c min_{i=1,2} Q_theta'_i(s', a~)            (clipped double Q, Eq. 10)
  L_critic = sum_i mean (y - Q_theta_i(s, a))^2                     (Algorithm 1)
Every d-th critic update (delayed policy updates, Sec. 5.2):
  L_actor  = -mean Q_theta1(s, pi_phi(s))                 (deterministic policy gradient)
  theta'_i <- tau theta_i + (1 - tau) theta'_i,  phi' <- tau phi + (1 - tau) phi'
Two switches, not the paper's algorithm, make it SBX's TD3 (0.28) for comparisons:
``target_every_update`` (both targets step after every critic update instead, before the
delayed actor step) and ``actor_min_q`` (L_actor = -mean min_i Q_theta_i(s, pi_phi(s))).
Exploration: a = pi_phi(s) + N(0, 0.1^2) on the host, clipped to the box. Adam 1e-3 for both,
batch 100, tau 0.005, d = 2, sigma~ = 0.2, c_n = 0.5 (Sec. 6.1, Table 3).

``--replay per`` weights each critic's squared error by PER's importance weights and writes
back |y - Q_theta1(s, a)| as the new priority.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from offpolicy.agents.acting import NoiseSpec
from offpolicy.agents.base import DEFAULT_CONTEXT, AgentContext, transitions
from offpolicy.agents.recurrent import Recurrence
from offpolicy.agents.types import ActorCritic, TD3State
from offpolicy.config import TD3Config
from offpolicy.envs.spaces import ActionSpec
from offpolicy.networks import MLP, CoreConfig, CriticEnsemble, core_features, soft_update
from offpolicy.replay import refer
from offpolicy.replay.keys import ACTION, DISCOUNT, NEXT_OBS, OBS, REWARD


class Actor(nn.Module):
    """s -> tanh(MLP(s)) in [-1, 1]^m (the agent's action box)."""

    hidden: tuple[int, ...]
    action_dim: int
    activation: str
    init_scheme: str
    core: CoreConfig | None = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return jnp.tanh(MLP(self.hidden, self.activation, out=self.action_dim,
                            init_scheme=self.init_scheme)(core_features(self.core, obs)))


def clipped_double_q_target(q_next: jax.Array, reward: jax.Array, discount: jax.Array,
                            gamma: float) -> jax.Array:
    """y = r + gamma c min_i Q'_i(s', a~) (Eq. 10); ``q_next`` [2, B], the rest [B]."""
    return reward + gamma * discount * jnp.min(q_next, axis=0)


def smoothed_target_action(target_action: jax.Array, key: jax.Array, sigma: float,
                           clip: float) -> jax.Array:
    """a~ = clip(pi'(s') + clip(eps, -c, c), -1, 1), eps ~ N(0, sigma^2) (Eq. 14)."""
    eps = jnp.clip(sigma * jax.random.normal(key, target_action.shape), -clip, clip)
    return jnp.clip(target_action + eps, -1.0, 1.0)


class TD3:
    """TD3 on the agent protocol (``agents/base.py``): transitions, host-side Gaussian
    exploration, one jitted update whose actor and target step runs every ``policy_delay``
    calls (``lax.cond`` on the update counter in the state)."""

    writeback_fields: dict = {}

    def __init__(self, config: TD3Config, obs_shape: tuple[int, ...], spec: ActionSpec,
                 context: AgentContext = DEFAULT_CONTEXT):
        self.config, self.obs_shape, self.spec = config, tuple(obs_shape), spec
        self.replay = context.replay
        c = config
        self.rec = Recurrence(c, ("actor", "critic"), c.init, "td3")
        self.data, self.core = self.rec.data(transitions()), self.rec.spec
        self.behaviour_fields = self.rec.behaviour_fields
        self.actor = Actor(tuple(c.hidden), spec.dim, c.activation, c.init,
                           self.rec.core("actor"))
        self.critics = CriticEnsemble(2, tuple(c.hidden), c.activation, c.init,
                                      self.rec.core("critic"))
        self.actor_opt = optax.adam(c.actor_lr)
        self.critic_opt = optax.adam(c.critic_lr)
        self.exploration_noise = NoiseSpec("gaussian", c.exploration_sigma)

    def init(self, key: jax.Array) -> TD3State:
        k_actor, k_critic = jax.random.split(key)
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        act = jnp.zeros((1, self.spec.dim), jnp.float32)
        params = ActorCritic(self.actor.init(k_actor, obs)["params"],
                             self.critics.init(k_critic, obs, act)["params"])
        return TD3State(params=params, target=params,
                        actor_opt=self.actor_opt.init(params.actor),
                        critic_opt=self.critic_opt.init(params.critic),
                        updates=jnp.zeros((), jnp.int32),
                        actor_loss=jnp.zeros((), jnp.float32))

    def pi(self, actor_params, obs: jax.Array) -> jax.Array:
        return self.actor.apply({"params": actor_params}, obs)

    def q(self, critic_params, obs: jax.Array, action: jax.Array) -> jax.Array:
        """[2, B]: Q_theta1 and Q_theta2."""
        return self.critics.apply({"params": critic_params}, obs, action)

    # ------------------------------------------------------------------ learning
    def target(self, target: ActorCritic, batch: dict, key: jax.Array) -> jax.Array:
        c = self.config
        next_obs = batch[NEXT_OBS]
        a_next = smoothed_target_action(self.pi(target.actor, next_obs), key,
                                        c.policy_noise, c.noise_clip)
        y = clipped_double_q_target(self.q(target.critic, next_obs, a_next),
                                    batch[REWARD], batch[DISCOUNT], c.gamma)
        return jax.lax.stop_gradient(y)

    def critic_loss(self, critic_params, batch: dict, y: jax.Array, weights):
        q = self.q(critic_params, batch[OBS], batch[ACTION])
        return jnp.sum(jnp.mean(weights * (q - y[None]) ** 2, axis=1)), q

    def actor_loss(self, actor_params, critic_params, obs: jax.Array) -> jax.Array:
        """-mean Q_theta1(s, pi_phi(s)) (Algorithm 1); with ``actor_min_q`` the smaller of the
        twins, as SBX's TD3."""
        q = self.q(critic_params, obs, self.pi(actor_params, obs))
        return -jnp.mean(jnp.min(q, axis=0) if self.config.actor_min_q else q[0])

    def update(self, state: TD3State, batch: dict, key: jax.Array
               ) -> tuple[TD3State, dict, dict]:
        c = self.config
        params, target = state.params, state.target
        if self.rec.enabled:  # obs and next_obs: views of each step's history
            batch = self.rec.transition_views(batch)
        y = self.target(target, batch, key)
        (c_loss, q), grads = jax.value_and_grad(self.critic_loss, has_aux=True)(
            params.critic, batch, y, refer.per_weights(self.replay, batch))
        upd, critic_opt = self.critic_opt.update(grads, state.critic_opt, params.critic)
        params = params.replace(critic=optax.apply_updates(params.critic, upd))
        if c.target_every_update:  # SBX's order: both targets now, the actor step after
            target = soft_update(target, params, c.tau)

        def delayed(operand):
            """The actor step on the updated critic, then both targets (Algorithm 1)."""
            params, target, actor_opt, _ = operand
            a_loss, grads = jax.value_and_grad(self.actor_loss)(params.actor, params.critic,
                                                                batch[OBS])
            upd, actor_opt = self.actor_opt.update(grads, actor_opt, params.actor)
            params = params.replace(actor=optax.apply_updates(params.actor, upd))
            if not c.target_every_update:
                target = soft_update(target, params, c.tau)
            return params, target, actor_opt, a_loss

        updates = state.updates + 1
        params, target, actor_opt, a_loss = jax.lax.cond(
            updates % c.policy_delay == 0, delayed, lambda operand: operand,
            (params, target, state.actor_opt, state.actor_loss))
        new_state = TD3State(params=params, target=target, actor_opt=actor_opt,
                             critic_opt=critic_opt, updates=updates, actor_loss=a_loss)
        metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "q_mean": jnp.mean(q[0]),
                   "target_mean": jnp.mean(y)}
        return new_state, metrics, refer.priority(self.replay, jnp.abs(q[0] - y))

    # ------------------------------------------------------------------ acting
    def acting_params(self, state: TD3State) -> Any:
        """The actor's parameters (with a stored core state, also the critics' core)."""
        return self.rec.actor_acting_params(state.params.actor, state.params.critic)

    def policy(self, params, obs: jax.Array, key: jax.Array, explore: bool):
        """pi_phi(s); the exploration noise is added on the host."""
        actor = self.rec.actor_of(params)
        info = self.rec.actor_acting_info(params, obs, {})
        return self.pi(actor, obs), info
