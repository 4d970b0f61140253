"""SAC: Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications", Algorithm 1, the version with twin Q-functions and a learned temperature).

Networks (Table 1): a policy pi_phi(a|s), a = tanh(u), u ~ N(m_phi(s), s_phi(s)^2) with
log s clipped to [-20, 2] (``distributions.SquashedGaussian``), and two soft Q-functions
Q_theta1, Q_theta2 of [s, a] (one ``CriticEnsemble``) with target copies; 256-256 relu.

For a batch (s, a, r, s', c), c = 0 if s' is terminal else 1, and alpha = exp(log alpha):
  a' ~ pi_phi(.|s'),  y = r + gamma c (min_i Q_theta'_i(s', a') - alpha log pi_phi(a'|s'))
  J_Q(theta_i) = 1/2 mean (Q_theta_i(s, a) - y)^2                          (Eq. 5, per Q)
  a~ = tanh(m_phi(s) + s_phi(s) eps), eps ~ N(0, I)                     (reparameterised)
  J_pi(phi)    = mean (alpha log pi_phi(a~|s) - min_i Q_theta_i(s, a~))     (Eq. 7 and 9)
  J(alpha)     = -mean log alpha (log pi_phi(a~|s) + H-bar)                  (Eq. 18)
  theta'_i <- tau theta_i + (1 - tau) theta'_i                               (every update)
H-bar = -|A| (Table 1); the temperature is learned through log alpha, as the authors' code.
log pi(a~|s) takes the squashing's log-det exactly (App. C, Eq. 21); ``--sac.log-det-eps``
gives SB3's log(1 - tanh(u)^2 + eps) instead (the ReF-ER ratio below keeps the exact one: the
log-dets cancel in it).
Three Adam optimisers (3e-4), batch 256, tau 0.005, gamma 0.99, one update per env step.

Replay. ``per``: each Q's squared error is weighted by PER's importance weights, |y - Q_1|
written back. ``refer`` / ``refer1`` / ``refer2`` (ReF-ER, Novati & Koumoutsakos 2019):
SAC's behaviour policy is the Gaussian in u-space it sampled from, so every step stores
(m_t, s_t, u_t) and
  log rho_t = log N(u_t | m_phi(s_t), s_phi(s_t)^2) - log N(u_t | m_t, s_t^2)
(tanh's Jacobian is the same in both and cancels), KL(mu_t || pi) the Gaussians' KL (the
squashed distributions' KL, tanh being a bijection). Rule 1 zeroes a far-policy sample's
terms in J_Q (both Q-functions) and in J_pi; the temperature's J(alpha) keeps every sample
(it matches the policy's entropy, not the returns). Rule 2 turns the policy loss into
beta J_pi + (1 - beta) mean KL(mu_t || pi) (Eq. 10-11). Under ReF-ER the policy's and the
Q-functions' learning rates anneal as eta / (1 + A k) (Eq. 13).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from offpolicy.agents.base import DEFAULT_CONTEXT, AgentContext, transitions
from offpolicy.agents.recurrent import Recurrence
from offpolicy.agents.types import ActorCritic, SACState
from offpolicy.config import SACConfig
from offpolicy.distributions import SquashedGaussian
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError
from offpolicy.networks import MLP, CoreConfig, CriticEnsemble, core_features, soft_update
from offpolicy.replay import refer
from offpolicy.replay.keys import ACTION, DISCOUNT, NEXT_OBS, OBS, REWARD

SQUASHED = SquashedGaussian()


class GaussianPolicy(nn.Module):
    """s -> (mean [B, m], std [B, m]) of u, log std clipped to [log_std_min, log_std_max]."""

    hidden: tuple[int, ...]
    action_dim: int
    activation: str
    init_scheme: str
    log_std_min: float
    log_std_max: float
    core: CoreConfig | None = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = MLP(self.hidden, self.activation, out=2 * self.action_dim,
                  init_scheme=self.init_scheme, out_scale=1.0)(core_features(self.core, obs))
        mean, log_std = jnp.split(out, 2, axis=-1)
        return mean, jnp.exp(jnp.clip(log_std, self.log_std_min, self.log_std_max))


def temperature_loss(log_alpha: jax.Array, log_pi: jax.Array, target_entropy: float
                     ) -> jax.Array:
    """J(alpha) = -mean log alpha (log pi(a~|s) + H-bar) (Eq. 18, through log alpha): its
    gradient is -mean(log pi + H-bar), so alpha grows while the entropy -log pi is below
    the target H-bar and shrinks while it is above."""
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_pi + target_entropy))


class SAC:
    """SAC on the agent protocol (``agents/base.py``): transitions; a stochastic policy that
    samples while exploring and acts with tanh(m(s)) when evaluated."""

    exploration_noise = None

    def __init__(self, config: SACConfig, obs_shape: tuple[int, ...], spec: ActionSpec,
                 context: AgentContext = DEFAULT_CONTEXT):
        c = config
        if c.log_std_min >= c.log_std_max:
            raise OffpolicyError(f"--sac.log-std-min ({c.log_std_min}) must be below "
                                 f"--sac.log-std-max ({c.log_std_max})")
        self.config, self.obs_shape, self.spec = config, tuple(obs_shape), spec
        self.replay = replay = context.replay
        self.rec = Recurrence(c, ("actor", "critic"), c.init, "sac")
        self.data, self.core = self.rec.data(transitions()), self.rec.spec
        self.policy_net = GaussianPolicy(tuple(c.hidden), spec.dim, c.activation, c.init,
                                         c.log_std_min, c.log_std_max, self.rec.core("actor"))
        self.critics = CriticEnsemble(2, tuple(c.hidden), c.activation, c.init,
                                      self.rec.core("critic"))
        self.target_entropy = float(c.target_entropy or -spec.dim)
        self.behaviour_fields, self.writeback_fields = {}, {}
        if replay.tracks_behaviour:
            self.behaviour_fields = SQUASHED.behaviour_fields(spec.dim)
            self.writeback_fields = {refer.RHO: ((), np.float32, 1.0),
                                     refer.FAR: ((), np.float32, 0.0)}
        self.behaviour_fields = {**self.behaviour_fields, **self.rec.behaviour_fields}
        if replay.refer:  # Eq. 13's annealed learning rates
            self.actor_opt = refer.annealed_adam(c.actor_lr, replay.anneal)
            self.critic_opt = refer.annealed_adam(c.critic_lr, replay.anneal)
        else:
            self.actor_opt = optax.adam(c.actor_lr)
            self.critic_opt = optax.adam(c.critic_lr)
        self.alpha_opt = optax.adam(c.alpha_lr)

    def init(self, key: jax.Array) -> SACState:
        k_pi, k_q = jax.random.split(key)
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        act = jnp.zeros((1, self.spec.dim), jnp.float32)
        params = ActorCritic(self.policy_net.init(k_pi, obs)["params"],
                             self.critics.init(k_q, obs, act)["params"])
        log_alpha = jnp.asarray(np.log(self.config.initial_alpha), jnp.float32)
        return SACState(params=params, target_critic=params.critic, log_alpha=log_alpha,
                        actor_opt=self.actor_opt.init(params.actor),
                        critic_opt=self.critic_opt.init(params.critic),
                        alpha_opt=self.alpha_opt.init(log_alpha),
                        refer=(refer.init_state(self.replay) if self.replay.tracks_behaviour
                               else None))

    def stats(self, actor_params, obs: jax.Array) -> dict[str, jax.Array]:
        mean, std = self.policy_net.apply({"params": actor_params}, obs)
        return {"mean": mean, "std": std}

    def q(self, critic_params, obs: jax.Array, action: jax.Array) -> jax.Array:
        """[2, B]: Q_theta1 and Q_theta2."""
        return self.critics.apply({"params": critic_params}, obs, action)

    # ------------------------------------------------------------------ learning
    def target(self, state: SACState, batch: dict, key: jax.Array) -> jax.Array:
        """y = r + gamma c (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(.|s')."""
        next_obs = batch[NEXT_OBS]
        pi_next = self.stats(state.params.actor, next_obs)
        a_next, info = SQUASHED.sample(key, pi_next["mean"], pi_next["std"])
        log_pi_next = SQUASHED.log_prob(pi_next, info["pre_tanh"], self.config.log_det_eps)
        q_next = jnp.min(self.q(state.target_critic, next_obs, a_next), axis=0)
        soft_value = q_next - jnp.exp(state.log_alpha) * log_pi_next
        y = batch[REWARD] + self.config.gamma * batch[DISCOUNT] * soft_value
        return jax.lax.stop_gradient(y)

    def critic_loss(self, critic_params, batch: dict, y: jax.Array, weights):
        q = self.q(critic_params, batch[OBS], batch[ACTION])
        return 0.5 * jnp.sum(jnp.mean(weights * (q - y[None]) ** 2, axis=1)), q

    def actor_loss(self, actor_params, critic_params, obs: jax.Array, alpha: jax.Array,
                   key: jax.Array, weights, beta, behaviour: dict | None):
        """alpha log pi(a~|s) - min_i Q_i(s, a~), weighted; with Rule 2, beta times it plus
        (1 - beta) KL(mu_t || pi)."""
        pi = self.stats(actor_params, obs)
        action, info = SQUASHED.sample(key, pi["mean"], pi["std"])
        log_pi = SQUASHED.log_prob(pi, info["pre_tanh"], self.config.log_det_eps)
        q = jnp.min(self.q(critic_params, obs, action), axis=0)
        loss = jnp.mean(weights * (alpha * log_pi - q))
        if behaviour is not None:
            loss = beta * loss + (1.0 - beta) * jnp.mean(SQUASHED.kl(behaviour, pi))
        return loss, log_pi

    def update(self, state: SACState, batch: dict, key: jax.Array
               ) -> tuple[SACState, dict, dict]:
        c, r = self.config, self.replay
        params = state.params
        if self.rec.enabled:  # obs and next_obs: views of each step's history
            batch = self.rec.transition_views(batch)
        k_target, k_actor = jax.random.split(key)
        weights, critic_w, beta = 1.0, refer.per_weights(r, batch), 1.0
        refer_state, metrics, writeback = state.refer, {}, {}
        if r.tracks_behaviour:  # rho and KL with the pre-update policy (Algorithm 4)
            pi = jax.lax.stop_gradient(self.stats(params.actor, batch[OBS]))
            behaviour = {"mean": batch["mean"], "std": batch["std"]}
            log_rho = (SQUASHED.log_prob(pi, batch["pre_tanh"])
                       - SQUASHED.log_prob(behaviour, batch["pre_tanh"]))
            rho = refer.importance_weight(log_rho, 0.0, r.rho_max)
            wt = refer.weighting(r, state.refer, rho, batch)
            weights, critic_w, beta = wt.rule_weights, wt.weights, wt.beta
            refer_state, writeback = wt.state, wt.writeback
            metrics = wt.metrics(SQUASHED.kl(behaviour, pi))

        y = self.target(state, batch, k_target)
        (c_loss, q), grads = jax.value_and_grad(self.critic_loss, has_aux=True)(
            params.critic, batch, y, critic_w)
        upd, critic_opt = self.critic_opt.update(grads, state.critic_opt, params.critic)
        params = params.replace(critic=optax.apply_updates(params.critic, upd))

        alpha = jnp.exp(state.log_alpha)
        penalty = {"mean": batch["mean"], "std": batch["std"]} if r.rule2 else None
        (a_loss, log_pi), grads = jax.value_and_grad(self.actor_loss, has_aux=True)(
            params.actor, params.critic, batch[OBS], alpha, k_actor, weights, beta, penalty)
        upd, actor_opt = self.actor_opt.update(grads, state.actor_opt, params.actor)
        params = params.replace(actor=optax.apply_updates(params.actor, upd))

        log_alpha, alpha_opt = state.log_alpha, state.alpha_opt
        if c.learn_alpha:
            t_loss, grad = jax.value_and_grad(temperature_loss)(log_alpha, log_pi,
                                                                self.target_entropy)
            upd, alpha_opt = self.alpha_opt.update(grad, alpha_opt, log_alpha)
            log_alpha = optax.apply_updates(log_alpha, upd)
        else:
            t_loss = temperature_loss(log_alpha, log_pi, self.target_entropy)

        new_state = SACState(params=params, log_alpha=log_alpha,
                             target_critic=soft_update(state.target_critic, params.critic,
                                                       c.tau),
                             actor_opt=actor_opt, critic_opt=critic_opt, alpha_opt=alpha_opt,
                             refer=refer_state)
        metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "alpha_loss": t_loss,
                   "alpha": alpha, "entropy": -jnp.mean(log_pi), "q_mean": jnp.mean(q[0]),
                   "target_mean": jnp.mean(y), **metrics}
        return new_state, metrics, writeback | refer.priority(r, jnp.abs(q[0] - y))

    # ------------------------------------------------------------------ acting
    def acting_params(self, state: SACState) -> Any:
        """The policy's parameters (with a stored core state, also the critics' core)."""
        return self.rec.actor_acting_params(state.params.actor, state.params.critic)

    def policy(self, params, obs: jax.Array, key: jax.Array, explore: bool):
        """Samples a = tanh(u) while exploring, else tanh(m(s)); records (m, s, u) for
        ReF-ER."""
        actor = self.rec.actor_of(params)
        pi = self.stats(actor, obs)
        if explore:
            action, info = SQUASHED.sample(key, pi["mean"], pi["std"])
        else:
            action, info = SQUASHED.mode(pi), {**pi, "pre_tanh": pi["mean"]}
        info = info if self.replay.tracks_behaviour else {}
        return action, self.rec.actor_acting_info(params, obs, info)
