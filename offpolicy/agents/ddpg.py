"""DDPG (Lillicrap et al. 2016) as the ACE paper runs it, plus Wide- and Shared-DDPG.

Networks (ACE paper, "Baseline Algorithms"; authors' code DeepRL ``DeterministicActorCritic``):
  actor   mu(s)   = tanh(W3 g(W2 g(W1 s)))            hidden (400, 300), g = tanh
  critic  Q(s, a) = W3' g(W2' [g(W1' s), a])           the action enters at the second layer
Wide-DDPG doubles the hidden sizes (800, 600). Shared-DDPG shares the first layer
z = g(W1 s) between actor and critic (the ACE encoder); the actor's gradient reaches z through
mu(z) only, the critic's state input is held fixed in the actor loss (as the authors' code).

Update for a batch (s, a, r, s', c), c = 0 if s' is terminal else 1 (truncation bootstraps):
  y          = r + gamma c Q'(s', mu'(s'))                               (target networks)
  L_critic   = 1/2 mean (Q(s, a) - y)^2 + l2 sum ||W_critic||^2          (Lillicrap Eq. 4)
  L_actor    = -mean Q(s, mu(s))                       (deterministic policy gradient, Eq. 3
                                                         of the ACE paper; after the critic step)
  theta'     <- tau theta + (1 - tau) theta'                              (soft target update)
Two Adam optimisers (actor 1e-4, critic 1e-3), tau = 1e-3, gamma = 0.99, batch 64.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from offpolicy.agents.acting import NoiseSpec
from offpolicy.agents.base import transitions
from offpolicy.config import DDPGConfig
from offpolicy.envs.spaces import ActionSpec
from offpolicy.networks import ACTIVATIONS, MLP, hidden_init, l2_kernels, soft_update, zeros


class Encoder(nn.Module):
    size: int
    activation: str

    @nn.compact
    def __call__(self, obs):
        return ACTIVATIONS[self.activation](
            nn.Dense(self.size, kernel_init=hidden_init, bias_init=zeros)(obs))


class ActorHead(nn.Module):
    hidden: tuple[int, ...]
    action_dim: int
    activation: str

    @nn.compact
    def __call__(self, z):
        return jnp.tanh(MLP(self.hidden, self.activation, out=self.action_dim)(z))


class CriticHead(nn.Module):
    hidden: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, z, action):
        x = jnp.concatenate([z, action], axis=-1)
        return MLP(self.hidden, self.activation, out=1)(x)[..., 0]


class DDPG:
    """DDPG agent (the protocol of ``agents/base.py``): learns from transitions, stores no
    behaviour fields, writes nothing back; exploration is host-side OU/Gaussian noise."""

    data = transitions()
    behaviour_fields: dict = {}
    writeback_fields: dict = {}

    def __init__(self, config: DDPGConfig, obs_shape: tuple[int, ...], spec: ActionSpec):
        self.config = config
        self.obs_shape = obs_shape
        self.spec = spec
        c = config
        first, rest = c.hidden[0], tuple(c.hidden[1:])
        self.encoder = Encoder(first, c.activation)
        self.actor_head = ActorHead(rest, spec.dim, c.activation)
        self.critic_head = CriticHead(rest, c.activation)
        shared = c.shared_encoder
        self._actor_enc = "encoder" if shared else "actor_encoder"
        self._critic_enc = "encoder" if shared else "critic_encoder"
        self.critic_keys = (self._critic_enc, "critic")
        self.actor_keys = ("actor",) + (
            (self._actor_enc,) if (not shared or c.actor_trains_encoder) else ())
        self.actor_opt = optax.adam(c.actor_lr)
        self.critic_opt = optax.adam(c.critic_lr)
        self.exploration_noise = NoiseSpec(c.noise, c.noise_sigma, c.noise_theta, c.noise_dt)

    # ------------------------------------------------------------------ networks
    def mu(self, params, obs):
        return self.actor_head.apply({"params": params["actor"]},
                                     self.encoder.apply({"params": params[self._actor_enc]}, obs))

    def q(self, params, obs, action):
        z = self.encoder.apply({"params": params[self._critic_enc]}, obs)
        return self.critic_head.apply({"params": params["critic"]}, z, action)

    def init(self, key: jax.Array) -> dict[str, Any]:
        k_enc, k_enc2, k_actor, k_critic = jax.random.split(key, 4)
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        enc = self.encoder.init(k_enc, obs)["params"]
        z = self.encoder.apply({"params": enc}, obs)
        params = {
            "actor": self.actor_head.init(k_actor, z)["params"],
            "critic": self.critic_head.init(k_critic, z, jnp.zeros((1, self.spec.dim)))["params"],
        }
        if self.config.shared_encoder:
            params["encoder"] = enc
        else:
            params["actor_encoder"] = enc
            params["critic_encoder"] = self.encoder.init(k_enc2, obs)["params"]
        return {
            "params": params,
            "target": params,
            "actor_opt": self.actor_opt.init({k: params[k] for k in self.actor_keys}),
            "critic_opt": self.critic_opt.init({k: params[k] for k in self.critic_keys}),
        }

    # ------------------------------------------------------------------ learning
    def bootstrap_target(self, target: dict, batch: dict) -> jax.Array:
        """y = r + gamma c Q'(s', mu'(s')) from the target networks (c = 0 at termination)."""
        next_obs = batch["next_obs"]
        q_next = self.q(target, next_obs, self.mu(target, next_obs))
        return jax.lax.stop_gradient(batch["reward"]
                                     + self.config.gamma * batch["discount"] * q_next)

    def critic_loss(self, cp: dict, params: dict, batch: dict, y: jax.Array):
        """1/2 mean (Q(s, a) - y)^2 + l2 sum ||W||^2 over the critic's kernels (biases excluded;
        with a shared encoder its kernel counts too, as the critic trains it)."""
        q = self.q({**params, **cp}, batch["obs"], batch["action"])
        loss = 0.5 * jnp.mean((q - y) ** 2)
        if self.config.critic_l2 > 0:
            loss = loss + self.config.critic_l2 * l2_kernels(cp)
        return loss, q

    def actor_loss(self, ap: dict, params: dict, obs: jax.Array) -> jax.Array:
        """-mean Q(sg(z_critic), mu(s)): the critic's state input is held fixed, so only mu(s)
        carries the gradient (with a shared encoder, the actor trains it through mu only)."""
        p = {**params, **ap}
        z = self.encoder.apply({"params": p[self._actor_enc]}, obs)
        a = self.actor_head.apply({"params": p["actor"]}, z)
        zc = jax.lax.stop_gradient(self.encoder.apply({"params": p[self._critic_enc]}, obs))
        return -jnp.mean(self.critic_head.apply({"params": params["critic"]}, zc, a))

    def update(self, state: dict, batch: dict, key: jax.Array) -> tuple[dict, dict, dict]:
        c = self.config
        params, target = state["params"], state["target"]
        y = self.bootstrap_target(target, batch)
        cp = {k: params[k] for k in self.critic_keys}
        (c_loss, q), grads = jax.value_and_grad(self.critic_loss, has_aux=True)(
            cp, params, batch, y)
        upd, critic_opt = self.critic_opt.update(grads, state["critic_opt"], cp)
        params = {**params, **optax.apply_updates(cp, upd)}

        ap = {k: params[k] for k in self.actor_keys}
        a_loss, grads = jax.value_and_grad(self.actor_loss)(ap, params, batch["obs"])
        upd, actor_opt = self.actor_opt.update(grads, state["actor_opt"], ap)
        params = {**params, **optax.apply_updates(ap, upd)}

        new_state = {
            "params": params,
            "target": soft_update(target, params, c.tau),
            "actor_opt": actor_opt,
            "critic_opt": critic_opt,
        }
        metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "q_mean": jnp.mean(q),
                   "target_mean": jnp.mean(y)}
        return new_state, metrics, {}

    # ------------------------------------------------------------------ acting
    def acting_params(self, state: dict) -> dict:
        p = state["params"]
        return {self._actor_enc: p[self._actor_enc], "actor": p["actor"]}

    def policy(self, params: dict, obs: jax.Array, key: jax.Array, explore: bool):
        """The greedy action mu(s); exploration noise is added on the host."""
        return self.mu(params, obs), {}
