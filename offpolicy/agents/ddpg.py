"""DDPG (Lillicrap et al. 2016) as the ACE paper runs it, plus Wide- and Shared-DDPG.

Networks (ACE paper, "Baseline Algorithms"; authors' code DeepRL ``DeterministicActorCritic``):
  actor   mu(s)   = tanh(W3 g(W2 g(W1 s)))            hidden (400, 300), g = tanh
  critic  Q(s, a) = W3' g(W2' [g(W1' s), a])           the action enters at the second layer
                    (--ddpg.action-input-layer 1: W3' g(W2' g(W1' [s, a])), as SB3 and SBX)
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

Replay (``--replay``, ReF-ER paper Sec. 3 and Algorithm 4; ``offpolicy/replay/refer.py``).
Every step stores the behaviour mean m_t = mu(s_t) it acted with; mu_t = N(m_t, sigma^2 I) and
pi = N(mu(s), sigma^2 I) with sigma = ``noise_sigma`` (0.2), so
  log rho_t = sum [(a_t - m_t)^2 - (a_t - mu(s_t))^2] / (2 sigma^2),
  KL(mu_t || pi) = sum (m_t - mu(s_t))^2 / (2 sigma^2)   (symmetric here: both stds are sigma).
* refer / refer1 / refer2: the policy samples a = mu(s) + sigma N(0, I) itself (no OU noise,
  as the paper: "with ReF-ER we do not use temporally-correlated noise"); the stored action is
  the unclipped sample, the env clips it, so rho is the exact Gaussian ratio. Rule 1 zeroes a
  far-policy sample's critic TD term and its DPG term (Algorithm 4: both g^Q and g^DPG are 0);
  Rule 2 adds the KL term to the actor only: L_actor = beta mean(w * -Q(s, mu(s))) + (1 - beta)
  mean KL(mu_t || pi). Both learning rates anneal as eta / (1 + A k) (Eq. 13).
* per: the critic loss is weighted by PER's importance weights and |TD| is written back.
* er / per: exploration as configured (OU by default), nothing stored per step; with
  ``--replay-diagnostics`` rho, the far-policy flag and the KL are computed all the same, as
  diagnostics (the paper's Fig. 2 compares ER's KL with ReF-ER's).

Recurrent cores (``--ddpg.core lstm``; ReF-ER Sec. 5.4 reruns DDPG with "LSTM networks (2
layers of 32 cells with back-propagation window of 16 steps)": ``--preset lstm``): the actor
and the critic each get their own core in front of their first layer (one shared core with
Shared-DDPG), reading the step's history (``agents/recurrent.py``); the action still joins
the critic at its second layer.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from offpolicy.agents.acting import NoiseSpec
from offpolicy.agents.base import DEFAULT_CONTEXT, AgentContext, transitions
from offpolicy.agents.recurrent import Recurrence
from offpolicy.agents.types import DDPGState
from offpolicy.config import DDPGConfig
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError
from offpolicy.networks import (
    ACTIVATIONS,
    MLP,
    CoreConfig,
    Dense,
    core_features,
    l2_kernels,
    soft_update,
)
from offpolicy.replay import refer
from offpolicy.replay.keys import ACTION, DISCOUNT, NEXT_OBS, OBS, REWARD


class Encoder(nn.Module):
    size: int
    activation: str
    init_scheme: str = "orthogonal"
    core: CoreConfig | None = None

    @nn.compact
    def __call__(self, obs):
        x = core_features(self.core, obs)
        return ACTIVATIONS[self.activation](Dense(self.size, self.init_scheme)(x))


class ActorHead(nn.Module):
    hidden: tuple[int, ...]
    action_dim: int
    activation: str
    init_scheme: str = "orthogonal"

    @nn.compact
    def __call__(self, z):
        return jnp.tanh(MLP(self.hidden, self.activation, out=self.action_dim,
                            init_scheme=self.init_scheme)(z))


class CriticHead(nn.Module):
    hidden: tuple[int, ...]
    activation: str
    init_scheme: str = "orthogonal"
    action_at_input: bool = False  # the action already entered with the state (SB3)

    @nn.compact
    def __call__(self, z, action):
        x = z if self.action_at_input else jnp.concatenate([z, action], axis=-1)
        return MLP(self.hidden, self.activation, out=1, init_scheme=self.init_scheme)(x)[..., 0]


class DDPG:
    """DDPG agent (the protocol of ``agents/base.py``): learns from transitions, stores the
    behaviour mean it acted with and writes back each sampled step's importance weight and
    far-policy flag; exploration is host-side OU/Gaussian noise, or, with ReF-ER, Gaussian
    sampling inside the policy."""

    data = transitions()

    def __init__(self, config: DDPGConfig, obs_shape: tuple[int, ...], spec: ActionSpec,
                 context: AgentContext = DEFAULT_CONTEXT):
        self.config = config
        self.obs_shape = obs_shape
        self.spec = spec
        self.replay = replay = context.replay
        self.behaviour_fields, self.writeback_fields = {}, {}
        if replay.tracks_behaviour:
            self.behaviour_fields = {"mean": ((spec.dim,), np.float32)}
            self.writeback_fields = {refer.RHO: ((), np.float32, 1.0),
                                     refer.FAR: ((), np.float32, 0.0)}
        c = config
        first, rest = c.hidden[0], tuple(c.hidden[1:])
        self.actor_head = ActorHead(rest, spec.dim, c.activation, c.init)
        self.action_at_input = c.action_input_layer == 1
        self.critic_head = CriticHead(rest, c.activation, c.init, self.action_at_input)
        shared = c.shared_encoder
        if shared and self.action_at_input:
            raise OffpolicyError("--ddpg.action-input-layer 1 needs separate actor and critic "
                                 "first layers (shared-ddpg shares the state-only first layer)")
        self._actor_enc = "encoder" if shared else "actor_encoder"
        self._critic_enc = "encoder" if shared else "critic_encoder"
        self.rec = Recurrence(config, tuple(dict.fromkeys(
            (self._actor_enc, self._critic_enc))), c.init, "ddpg")
        if self.rec.enabled and self.action_at_input:
            raise OffpolicyError("--ddpg.core needs the action at the critic's second layer "
                                 "(--ddpg.action-input-layer 2): the core reads observations "
                                 "only")
        self.data, self.core = self.rec.data(transitions()), self.rec.spec
        self.behaviour_fields = {**self.behaviour_fields, **self.rec.behaviour_fields}
        # one encoder module per network (their cores' states sit at different offsets)
        self.encoders = {n: Encoder(first, c.activation, c.init, self.rec.core(n))
                         for n in (self._actor_enc, self._critic_enc)}
        self.critic_keys = (self._critic_enc, "critic")
        self.actor_keys = ("actor",) + (
            (self._actor_enc,) if (not shared or c.actor_trains_encoder) else ())
        if replay.refer:  # Eq. 13's annealed learning rates; Gaussian exploration in policy()
            self.actor_opt = refer.annealed_adam(c.actor_lr, replay.anneal)
            self.critic_opt = refer.annealed_adam(c.critic_lr, replay.anneal)
            self.exploration_noise = None
        else:
            self.actor_opt = optax.adam(c.actor_lr)
            self.critic_opt = optax.adam(c.critic_lr)
            self.exploration_noise = NoiseSpec(c.noise, c.noise_sigma, c.noise_theta,
                                               c.noise_dt)
        self.sigma = max(c.noise_sigma, 1e-3)  # the std of mu and pi (rho, KL)

    # ------------------------------------------------------------------ networks
    def encode(self, params, which: str, x):
        """The first layer of network ``which`` (its encoder's key) on ``x``."""
        return self.encoders[which].apply({"params": params[which]}, x)

    def mu(self, params, obs):
        return self.actor_head.apply({"params": params["actor"]},
                                     self.encode(params, self._actor_enc, obs))

    def q(self, params, obs, action):
        x = jnp.concatenate([obs, action], axis=-1) if self.action_at_input else obs
        z = self.encode(params, self._critic_enc, x)
        return self.critic_head.apply({"params": params["critic"]}, z, action)

    def init(self, key: jax.Array) -> DDPGState:
        k_enc, k_enc2, k_actor, k_critic = jax.random.split(key, 4)
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        enc = self.encoders[self._actor_enc].init(k_enc, obs)["params"]
        z = self.encoders[self._actor_enc].apply({"params": enc}, obs)
        act = jnp.zeros((1, self.spec.dim))
        params = {
            "actor": self.actor_head.init(k_actor, z)["params"],
            "critic": self.critic_head.init(k_critic, z, act)["params"],
        }
        if self.config.shared_encoder:
            params["encoder"] = enc
        else:
            params["actor_encoder"] = enc
            critic_in = jnp.concatenate([obs, act], -1) if self.action_at_input else obs
            params["critic_encoder"] = self.encoders["critic_encoder"].init(
                k_enc2, critic_in)["params"]
        return DDPGState(
            params=params,
            target=params,
            actor_opt=self.actor_opt.init({k: params[k] for k in self.actor_keys}),
            critic_opt=self.critic_opt.init({k: params[k] for k in self.critic_keys}),
            refer=refer.init_state(self.replay) if self.replay.tracks_behaviour else None,
        )

    # ------------------------------------------------------------------ learning
    def bootstrap_target(self, target: dict, batch: dict) -> jax.Array:
        """y = r + gamma c Q'(s', mu'(s')) from the target networks (c = 0 at termination)."""
        next_obs = batch[NEXT_OBS]
        q_next = self.q(target, next_obs, self.mu(target, next_obs))
        return jax.lax.stop_gradient(batch[REWARD]
                                     + self.config.gamma * batch[DISCOUNT] * q_next)

    def critic_loss(self, cp: dict, params: dict, batch: dict, y: jax.Array,
                    weights: jax.Array | float = 1.0):
        """1/2 mean w (Q(s, a) - y)^2 + l2 sum ||W||^2 over the critic's kernels (biases too
        with ``critic_l2_biases``; with a shared encoder its layer counts too, as the critic
        trains it).
        ``weights``: Rule 1's near-policy mask times PER's importance weights (1 for ER)."""
        q = self.q({**params, **cp}, batch[OBS], batch[ACTION])
        loss = 0.5 * jnp.mean(weights * (q - y) ** 2)
        if self.config.critic_l2 > 0:
            loss = loss + self.config.critic_l2 * l2_kernels(cp, self.config.critic_l2_biases)
        return loss, q

    def actor_loss(self, ap: dict, params: dict, obs: jax.Array,
                   weights: jax.Array | float = 1.0, beta: jax.Array | float = 1.0,
                   behaviour_mean: jax.Array | None = None) -> jax.Array:
        """-mean Q(sg(z_critic), mu(s)): the critic's state input is held fixed, so only mu(s)
        carries the gradient (with a shared encoder, the actor trains it through mu only).
        ReF-ER: beta mean(w * -Q) + (1 - beta) mean KL(mu_t || pi) (Eq. 10-11), the KL term
        given ``behaviour_mean``."""
        p = {**params, **ap}
        z = self.encode(p, self._actor_enc, obs)
        a = self.actor_head.apply({"params": p["actor"]}, z)
        if self.action_at_input:  # the critic's parameters are not differentiated here
            q = self.q(params, obs, a)
        else:
            zc = jax.lax.stop_gradient(self.encode(p, self._critic_enc, obs))
            q = self.critic_head.apply({"params": params["critic"]}, zc, a)
        loss = -jnp.mean(weights * q)
        if behaviour_mean is None:
            return loss
        return beta * loss + (1.0 - beta) * jnp.mean(self.kl(behaviour_mean, a))

    def kl(self, behaviour_mean: jax.Array, mean: jax.Array) -> jax.Array:
        """KL(mu_t || pi) [B] for two Gaussians of std sigma."""
        return refer.fixed_std_kl(behaviour_mean, mean, self.sigma)

    def log_ratio(self, batch: dict, mean: jax.Array) -> jax.Array:
        """log pi(a_t|s_t) - log mu_t(a_t|s_t) [B]."""
        return refer.fixed_std_log_ratio(batch[ACTION], batch["mean"], mean, self.sigma)

    def update(self, state: DDPGState, batch: dict, key: jax.Array
               ) -> tuple[DDPGState, dict, dict]:
        c, r = self.config, self.replay
        params, target = state.params, state.target
        if self.rec.enabled:  # obs and next_obs: views of each step's history
            batch = self.rec.transition_views(batch)
        # Rule 1 masks both steps, PER weights the critic's only, Rule 2 penalises the actor
        weights, critic_w, beta = 1.0, refer.per_weights(r, batch), 1.0
        refer_state, metrics, writeback = state.refer, {}, {}
        if r.tracks_behaviour:
            # rho and KL with the pre-update actor, refreshed in replay (Algorithm 4)
            mean = jax.lax.stop_gradient(self.mu(params, batch[OBS]))
            rho = refer.importance_weight(self.log_ratio(batch, mean), 0.0, r.rho_max)
            wt = refer.weighting(r, state.refer, rho, batch)
            weights, critic_w, beta = wt.rule_weights, wt.weights, wt.beta
            refer_state, writeback = wt.state, wt.writeback
            metrics = wt.metrics(self.kl(batch["mean"], mean))

        y = self.bootstrap_target(target, batch)
        cp = {k: params[k] for k in self.critic_keys}
        (c_loss, q), grads = jax.value_and_grad(self.critic_loss, has_aux=True)(
            cp, params, batch, y, critic_w)
        upd, critic_opt = self.critic_opt.update(grads, state.critic_opt, cp)
        before = params  # the actor ascends this critic with --ddpg.simultaneous-update
        params = {**params, **optax.apply_updates(cp, upd)}

        ap = {k: params[k] for k in self.actor_keys}
        penalty = batch["mean"] if r.rule2 else None
        critic = {**params, **{k: before[k] for k in self.critic_keys}} \
            if c.simultaneous_update else params
        a_loss, grads = jax.value_and_grad(self.actor_loss)(ap, critic, batch[OBS], weights,
                                                            beta, penalty)
        upd, actor_opt = self.actor_opt.update(grads, state.actor_opt, ap)
        params = {**params, **optax.apply_updates(ap, upd)}

        new_state = DDPGState(params=params, target=soft_update(target, params, c.tau),
                              actor_opt=actor_opt, critic_opt=critic_opt, refer=refer_state)
        metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "q_mean": jnp.mean(q),
                   "target_mean": jnp.mean(y), **metrics}
        return new_state, metrics, writeback | refer.priority(r, jnp.abs(q - y))

    # ------------------------------------------------------------------ acting
    def acting_params(self, state: DDPGState) -> dict:
        """The actor's parameters (and, with a stored core state, the critic's first layer,
        whose core state acting records too)."""
        p = state.params
        keys = (self._actor_enc, "actor") + ((self._critic_enc,) if self.rec.stored else ())
        return {k: p[k] for k in keys}

    def policy(self, params: dict, obs: jax.Array, key: jax.Array, explore: bool):
        """The greedy action mu(s) and its behaviour mean; exploration noise is added on the
        host, except with ReF-ER, where exploring samples mu(s) + sigma N(0, I) here."""
        mean = self.mu(params, obs)
        info = {"mean": mean} if "mean" in self.behaviour_fields else {}
        info = self.rec.acting_info(lambda: {n: params[n]["core"] for n in self.rec.names},
                                    obs, info)
        if explore and self.exploration_noise is None:
            cut = self.config.refer_truncation
            noise = (jax.random.truncated_normal(key, -cut, cut, mean.shape) if cut > 0
                     else jax.random.normal(key, mean.shape))
            return mean + self.sigma * noise, info
        return mean, info
