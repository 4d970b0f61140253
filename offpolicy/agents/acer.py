"""ACER: actor-critic with experience replay (Wang et al., 2017, "Sample Efficient
Actor-Critic with Experience Replay"), discrete (Sec. 3, Algorithm 2) and continuous (Sec. 5,
Algorithm 3) actions.

Data: windows of k consecutive steps (``sequences(k)``, k = the loop's ``--segment-length``)
with the behaviour policy mu stored per step (``probs`` for a categorical, ``mean``/``std`` for
a Gaussian). The loop runs Algorithm 1: after every k steps of each of the K env copies, one
update on the segment just collected (on-policy) and Poisson(r) updates on windows sampled
from replay (r = ``--replay-ratio``; 0 is on-policy, A3C-like training with Q baselines).

Discrete (Algorithm 2). One network, shared torso, softmax policy pi = f(.|phi(x)) with phi
the probability vector, and Q(x, .). V(x) = sum_a pi(a|x) Q(x, a). For a window x_0..x_k:
  Q^ret_i = r_i + gamma [V(x_{i+1}) + rhobar_{i+1} (Q^ret_{i+1} - Q(x_{i+1}, a_{i+1}))]  (Eq. 5)
  rhobar = min(1, rho), Q^ret_{k-1} = r + gamma V(x_k) (0 past a termination)
  g_i = min(c, rho_i) (Q^ret_i - V_i) grad_phi log f(a_i|phi)                           (Eq. 10)
      + sum_a [1 - c / rho_i(a)]_+ pi(a|x_i) (Q(x_i, a) - V_i) grad_phi log f(a|phi)
      + entropy_weight grad_phi H(f(.|phi))
  k_i = grad_phi KL(f(.|phi_avg(x_i)) || f(.|phi))
  z*_i = g_i - max(0, (k_i.g_i - delta) / ||k_i||^2) k_i                               (Eq. 12)
  policy loss  -mean_i phi(x_i) . sg(z*_i)      (back-propagates z* through the network)
  critic loss  value_loss_weight mean_i 1/2 (Q^ret_i - Q(x_i, a_i))^2                  (Eq. 6)

Continuous (Algorithm 3). Gaussian policy N(phi(x), diag(sigma^2)), sigma fixed (0.3) or
learned (then phi = (mean, std)); V(x) from the policy network's torso; a separate advantage
network A(x, a) makes the Stochastic Dueling Network
  Q~(x, a) = V(x) + A(x, a) - 1/n sum_j A(x, u_j),  u_j ~ pi(.|x) (no gradient to pi)    (Eq. 13)
  Q^ret: traces c_i = min(1, rho_i^(1/d)), Q^opc: traces 1 (App. B), both with Q := Q~
  g_i = min(c, rho_i) (Q^opc_i - V_i) grad_phi log f(a_i|phi)                            (Eq. 16)
      + [1 - c / rho'_i]_+ (Q~(x_i, a'_i) - V_i) grad_phi log f(a'_i|phi),  a'_i ~ pi
  critic loss  1/2 (Q^ret_i - Q~(x_i, a_i))^2 + 1/2 (V^target_i - V_i)^2,
  V^target_i = min(1, rho_i) (Q^ret_i - Q~(x_i, a_i)) + V_i                             (Eq. 14)
and the same trust region on phi.

All quantities inside Q^ret / Q^opc / V^target / g are computed with the current parameters
(theta' of Algorithms 2-3) and held constant (stop-gradient). After the optimiser step the
average network follows theta_a <- alpha theta_a + (1 - alpha) theta (every update, replayed
ones too). The averaged tree is the whole network (its Q head is never read).

Decisions the paper leaves open (docs/algorithms/acer.md): one synchronous learner over K env
copies instead of asynchronous threads; the losses are means over the valid steps of a batch
(the paper sums per thread); the entropy gradient joins g before the projection (as OpenAI
baselines does); RMSProp (A3C's optimiser) with global-norm clipping.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from offpolicy import returns
from offpolicy.agents.base import AgentContext, sequences
from offpolicy.agents.types import ACERState
from offpolicy.config import ACERConfig
from offpolicy.distributions import Categorical, Gaussian
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError
from offpolicy.networks import MLP, Dense, Torso, soft_update, softplus_init, use_cnn
from offpolicy.replay.keys import ACTION, DISCOUNT, MASK, OBS, REWARD

CATEGORICAL = Categorical()
GAUSSIAN = Gaussian()
_TINY = 1e-12


# --------------------------------------------------------------------------- the maths
def trust_region(g: jax.Array, k: jax.Array, delta: float) -> tuple[jax.Array, jax.Array]:
    """ACER's efficient trust-region projection (Eq. 11-12), per sample over the last axis:

        z* = argmin_z 1/2 ||g - z||^2  s.t.  k.z <= delta
           = g - max(0, (k.g - delta) / ||k||^2) k.

    Args:
      g: [..., D] the policy gradient with respect to the distribution's statistics phi.
      k: [..., D] grad_phi KL(f(.|phi_avg) || f(.|phi)).
      delta: the bound delta > 0.

    Returns:
      (z* [..., D], active [...]: whether the constraint bound, i.e. k.g > delta).
    """
    kg = jnp.sum(k * g, axis=-1, keepdims=True)
    kk = jnp.sum(k * k, axis=-1, keepdims=True)
    scale = jnp.maximum(0.0, (kg - delta) / jnp.maximum(kk, _TINY))
    return g - scale * k, kg[..., 0] > delta


def correction_weight(rho: jax.Array, c: float) -> jax.Array:
    """[1 - c / rho]_+ = [(rho - c) / rho]_+ of Eq. 7-10 and 16 (0 where rho <= c, including
    rho = 0; 1 where rho = +inf)."""
    return jnp.where(rho > c, 1.0 - c / jnp.where(rho > c, rho, 1.0), 0.0)


def discrete_policy_objective(probs: jax.Array, action: jax.Array, qret: jax.Array,
                              q: jax.Array, value: jax.Array, behaviour_probs: jax.Array,
                              c: float, bias_correction: bool, entropy_weight: float
                              ) -> jax.Array:
    """The per-step surrogate whose gradient with respect to ``probs`` (phi, the categorical's
    probability vector) is Algorithm 2's g (Eq. 10 with the sum over all actions a) plus the
    entropy term:

        g = min(c, rho(a_i)) (Q^ret - V) grad log phi[a_i]
            + sum_a [1 - c / rho(a)]_+ pi(a) (Q(a) - V) grad log phi[a]
            + entropy_weight grad H(phi),        rho(a) = pi(a) / mu(a),  pi = sg(phi).

    Args:
      probs: [..., n] phi (differentiated).
      action: [...] int, the action taken.
      qret: [...] Q^ret; q: [..., n] Q(x, .); value: [...] V(x); behaviour_probs: [..., n] mu.
      c: truncation; bias_correction: include the sum over actions; entropy_weight.

    Returns:
      [...] the objective per step (only its gradient is meaningful).
    """
    pi = jax.lax.stop_gradient(probs)
    rho_all = jnp.where(pi > 0, pi / behaviour_probs, 0.0)  # 0 where pi is 0, even if mu is
    log_phi = jnp.log(jnp.maximum(probs, _TINY))
    log_phi_a = jnp.take_along_axis(log_phi, action[..., None], -1)[..., 0]
    rho = jnp.take_along_axis(rho_all, action[..., None], -1)[..., 0]
    coef = jax.lax.stop_gradient(jnp.minimum(c, rho) * (qret - value))
    objective = coef * log_phi_a
    if bias_correction:
        coef_all = jax.lax.stop_gradient(correction_weight(rho_all, c) * pi
                                         * (q - value[..., None]))
        objective = objective + jnp.sum(coef_all * log_phi, axis=-1)
    if entropy_weight:
        objective = objective - entropy_weight * jnp.sum(probs * log_phi, axis=-1)
    return objective


def discrete_kl(average_probs: jax.Array, probs: jax.Array) -> jax.Array:
    """KL(f(.|phi_avg) || f(.|phi)) of two probability vectors [..., n]; its gradient in
    ``probs`` is -phi_avg / phi (the k of Eq. 12)."""
    return jnp.sum(average_probs * (jnp.log(jnp.maximum(average_probs, _TINY))
                                    - jnp.log(jnp.maximum(probs, _TINY))), axis=-1)


def gaussian_stats(phi: jax.Array, action_dim: int, fixed_std: float | None
                   ) -> tuple[jax.Array, jax.Array]:
    """(mean, std) from the statistics phi: the mean alone (fixed std) or [mean, std]."""
    if fixed_std is not None:
        return phi, jnp.full_like(phi, fixed_std)
    return phi[..., :action_dim], phi[..., action_dim:]


def continuous_policy_objective(phi: jax.Array, action: jax.Array, sampled: jax.Array,
                                qopc: jax.Array, q_sampled: jax.Array, value: jax.Array,
                                behaviour_mean: jax.Array, behaviour_std: jax.Array,
                                c: float, bias_correction: bool, entropy_weight: float,
                                action_dim: int, fixed_std: float | None) -> jax.Array:
    """The per-step surrogate whose gradient in ``phi`` is Eq. 16's g (plus the entropy term):

        g = min(c, rho) (Q^opc - V) grad log f(a|phi)
            + [1 - c / rho']_+ (Q~(x, a') - V) grad log f(a'|phi),   a' ~ pi (given),
        rho = f(a|sg phi) / mu(a), rho' = f(a'|sg phi) / mu(a').

    Args:
      phi: [..., D] statistics (D = m with a fixed std, 2m with a learned one).
      action: [..., m] a_i; sampled: [..., m] a'_i.
      qopc: [...] Q^opc; q_sampled: [...] Q~(x, a'); value: [...] V(x).
      behaviour_mean, behaviour_std: [..., m] mu's parameters.
    """
    mean, std = gaussian_stats(phi, action_dim, fixed_std)
    pi = (jax.lax.stop_gradient(mean), jax.lax.stop_gradient(std))
    mu = (behaviour_mean, behaviour_std)
    rho = jnp.exp(GAUSSIAN.log_prob(pi, action) - GAUSSIAN.log_prob(mu, action))
    coef = jax.lax.stop_gradient(jnp.minimum(c, rho) * (qopc - value))
    objective = coef * GAUSSIAN.log_prob((mean, std), action)
    if bias_correction:
        rho_s = jnp.exp(GAUSSIAN.log_prob(pi, sampled) - GAUSSIAN.log_prob(mu, sampled))
        coef_s = jax.lax.stop_gradient(correction_weight(rho_s, c) * (q_sampled - value))
        objective = objective + coef_s * GAUSSIAN.log_prob((mean, std), sampled)
    if entropy_weight and fixed_std is None:
        objective = objective + entropy_weight * GAUSSIAN.entropy((mean, std))
    return objective


def per_step_grad(objective, phi: jax.Array, *args) -> jax.Array:
    """grad_phi of a per-step objective, for every step at once (the steps are independent,
    so the gradient of the sum is the per-step gradient)."""
    return jax.grad(lambda p: jnp.sum(objective(p, *args)))(phi)


# --------------------------------------------------------------------------- networks
class DiscreteNetwork(nn.Module):
    """x -> (logits [..., n], Q(x, .) [..., n]) over one shared torso (Sec. 3.1)."""

    hidden: tuple[int, ...]
    activation: str
    cnn: bool
    num_actions: int

    @nn.compact
    def __call__(self, obs):
        z = Torso(self.hidden, self.activation, self.cnn)(obs)
        logits = Dense(self.num_actions, output=True, out_scale=1e-2)(z)
        q = Dense(self.num_actions, output=True, out_scale=1.0)(z)
        return logits, q


class ContinuousNetwork(nn.Module):
    """The policy-value network x -> (phi, V) and the advantage network (x, a) -> A (Sec. 5.1,
    Sec. 6: "an additional small network computes the stochastic A values")."""

    hidden: tuple[int, ...]
    activation: str
    cnn: bool
    action_dim: int
    learn_std: bool
    initial_std: float

    def setup(self):
        self.torso = Torso(self.hidden, self.activation, self.cnn)
        self.mean_head = Dense(self.action_dim, output=True, out_scale=1e-2)
        self.value_head = Dense(1, output=True, out_scale=1.0)
        self.advantage = MLP(self.hidden, self.activation, out=1, out_scale=1.0)
        if self.learn_std:
            self.raw_std = self.param("raw_std", softplus_init(self.initial_std),
                                      (self.action_dim,))

    def __call__(self, obs):
        """(phi [..., D], V [...]); phi = mean, or [mean, softplus(raw_std)] when learned."""
        z = self.torso(obs)
        mean = jnp.tanh(self.mean_head(z))
        if self.learn_std:
            std = jnp.broadcast_to(jax.nn.softplus(self.raw_std), mean.shape)
            phi = jnp.concatenate([mean, std], axis=-1)
        else:
            phi = mean
        return phi, self.value_head(z)[..., 0]

    def advantages(self, obs, actions):
        """A(x, a) [..., S] for actions [..., S, m] (S actions per observation)."""
        obs = jnp.broadcast_to(obs[..., None, :], actions.shape[:-1] + obs.shape[-1:])
        return self.advantage(jnp.concatenate([obs, actions], axis=-1))[..., 0]

    def init_all(self, obs, actions):
        return self(obs), self.advantages(obs, actions)


# --------------------------------------------------------------------------- the agent
class ACER:
    """ACER over ``sequences(k)``; discrete or continuous by the action space."""

    exploration_noise = None
    writeback_fields: dict = {}

    def __init__(self, config: ACERConfig, obs_shape: tuple[int, ...], spec: ActionSpec,
                 context: AgentContext | None = None):
        segment_length = (context or AgentContext(segment_length=20)).segment_length
        if segment_length < 1:
            raise OffpolicyError("acer learns from k-step trajectories: --segment-length must "
                                 "be >= 1 (the paper: 20 on Atari, 50 on MuJoCo)")
        self.config, self.obs_shape, self.spec = config, tuple(obs_shape), spec
        self.discrete = spec.kind == "discrete"
        self.data = sequences(segment_length)
        self.learns_on_segments = bool(config.on_policy_update)
        cnn = use_cnn(config.torso, self.obs_shape, "acer")
        if cnn and not self.discrete:  # A(x, a) concatenates x with the action
            raise OffpolicyError("continuous acer takes observation vectors (its advantage "
                                 f"network reads [x, a]); this env gives frames {self.obs_shape}")
        hidden = tuple(config.hidden)
        self.c = config.truncation or (10.0 if self.discrete else 5.0)
        self.alpha = config.average_decay or (0.99 if self.discrete else 0.995)
        if self.discrete:
            self.n = spec.n
            self.net = DiscreteNetwork(hidden, config.activation, cnn, spec.n)
            self.behaviour_fields = CATEGORICAL.behaviour_fields(spec.n)
        else:
            self.m = spec.dim
            self.fixed_std = None if config.learn_std else float(config.policy_std)
            self.net = ContinuousNetwork(hidden, config.activation, cnn, spec.dim,
                                         config.learn_std, float(config.policy_std))
            self.behaviour_fields = GAUSSIAN.behaviour_fields(spec.dim)
        make = optax.rmsprop if config.optimizer == "rmsprop" else optax.adam
        kw = {"decay": 0.99} if config.optimizer == "rmsprop" else {}
        opt = make(config.lr, eps=config.rmsprop_eps, **kw)
        self.opt = (optax.chain(optax.clip_by_global_norm(config.max_grad_norm), opt)
                    if config.max_grad_norm > 0 else opt)

    # ------------------------------------------------------------------ state
    def init(self, key: jax.Array) -> ACERState:
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        if self.discrete:
            params = self.net.init(key, obs)["params"]
        else:
            actions = jnp.zeros((1, 1, self.m), jnp.float32)
            params = self.net.init(key, obs, actions, method=ContinuousNetwork.init_all)["params"]
        return ACERState(params=params, average=params, opt=self.opt.init(params))

    def acting_params(self, state: ACERState) -> dict:
        return state.params

    # ------------------------------------------------------------------ acting
    def _stats(self, params, obs):
        if self.discrete:
            logits, _ = self.net.apply({"params": params}, obs)
            return logits
        phi, _ = self.net.apply({"params": params}, obs)
        return gaussian_stats(phi, self.m, self.fixed_std)

    def policy(self, params: dict, obs: jax.Array, key: jax.Array, explore: bool):
        """Samples pi (exploring) or takes its mode; records pi's parameters (mu)."""
        if self.discrete:
            logits = self._stats(params, obs)
            if explore:
                action, info = CATEGORICAL.sample(key, logits)
            else:
                action, info = CATEGORICAL.mode(logits), CATEGORICAL.info(logits)
            return action[:, None].astype(jnp.float32), info
        mean, std = self._stats(params, obs)
        if explore:
            return GAUSSIAN.sample(key, mean, std)
        return mean, GAUSSIAN.info(mean, std)

    # ------------------------------------------------------------------ learning
    def update(self, state: ACERState, batch: dict, key: jax.Array
               ) -> tuple[ACERState, dict, dict]:
        loss_fn = self._discrete_loss if self.discrete else self._continuous_loss
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.average, batch, key)
        upd, opt = self.opt.update(grads, state.opt, state.params)
        params = optax.apply_updates(state.params, upd)
        # theta_a <- alpha theta_a + (1 - alpha) theta, after every update (Algorithms 2-3)
        average = soft_update(state.average, params, 1.0 - self.alpha)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **metrics}
        return ACERState(params=params, average=average, opt=opt), metrics, {}

    def _project(self, g, k):
        if self.config.trust_region:
            return trust_region(g, k, self.config.trust_region_delta)
        return g, jnp.zeros(g.shape[:-1], bool)

    def _discrete_loss(self, params, average, batch, key):
        c, cfg = self.c, self.config
        mask = batch[MASK]
        denom = jnp.maximum(jnp.sum(mask), 1.0)
        action = batch[ACTION][..., 0].astype(jnp.int32)  # [T, B]
        logits, q_all = self.net.apply({"params": params}, batch[OBS])  # [T+1, B, n]
        avg_logits, _ = self.net.apply({"params": average}, batch[OBS][:-1])
        probs_all = jax.nn.softmax(logits, axis=-1)
        probs, q = probs_all[:-1], q_all[:-1]
        pi_sg, q_sg = jax.lax.stop_gradient(probs_all), jax.lax.stop_gradient(q_all)
        values_all = jnp.sum(pi_sg * q_sg, axis=-1)  # V(x) = sum_a pi(a|x) Q(x, a)
        value = values_all[:-1]
        q_taken_sg = jnp.take_along_axis(q_sg[:-1], action[..., None], -1)[..., 0]
        # padding (even never-written slots) reads as on-policy: rho = 1 there (pi / pi could
        # be 0 / 0 once pi puts exactly 0 on an action)
        valid = mask[..., None] > 0
        mu = jnp.where(valid, jnp.maximum(batch["probs"], _TINY), pi_sg[:-1])
        rho_all = jnp.where(valid, pi_sg[:-1] / mu, 1.0)
        rho = jnp.take_along_axis(rho_all, action[..., None], -1)[..., 0]
        qret = returns.retrace(batch[REWARD], cfg.gamma * batch[DISCOUNT], q_taken_sg,
                               values_all[1:], rho, 1.0, mask=mask)
        qret = jax.lax.stop_gradient(qret)

        g = per_step_grad(discrete_policy_objective, pi_sg[:-1], action, qret, q_sg[:-1],
                          value, mu, c, cfg.bias_correction, cfg.entropy_weight)
        avg_probs = jax.lax.stop_gradient(jax.nn.softmax(avg_logits, axis=-1))
        kvec = per_step_grad(lambda p: discrete_kl(avg_probs, p), pi_sg[:-1])
        z, active = self._project(g, kvec)
        z = jnp.where(valid, z, 0.0)
        policy_loss = -jnp.sum(mask * jnp.sum(probs * z, axis=-1)) / denom

        q_taken = jnp.take_along_axis(q, action[..., None], -1)[..., 0]
        value_loss = 0.5 * jnp.sum(mask * (qret - q_taken) ** 2) / denom
        loss = policy_loss + cfg.value_loss_weight * value_loss

        entropy = CATEGORICAL.entropy({"logits": logits[:-1]})
        kl = discrete_kl(avg_probs, jax.lax.stop_gradient(probs))
        return loss, self._metrics(mask, denom, rho, c, kl, entropy, active, policy_loss,
                                   value_loss, q_taken)

    def _continuous_loss(self, params, average, batch, key):
        c, cfg, m = self.c, self.config, self.m
        mask = batch[MASK]
        denom = jnp.maximum(jnp.sum(mask), 1.0)
        obs, action = batch[OBS], batch[ACTION]  # [T+1, B, ...], [T, B, m]
        apply = self.net.apply
        phi_all, v_all = apply({"params": params}, obs)
        avg_phi, _ = apply({"params": average}, obs[:-1])
        phi, value = phi_all[:-1], v_all[:-1]
        mean, std = gaussian_stats(phi, m, self.fixed_std)
        mean_sg, std_sg = jax.lax.stop_gradient(mean), jax.lax.stop_gradient(std)
        # u_1..u_n ~ pi for the SDN's baseline and a' ~ pi for Eq. 16, no gradient into pi
        k_u, k_a = jax.random.split(key)
        eps_u = jax.random.normal(k_u, (cfg.sdn_samples,) + mean.shape)
        u = jnp.moveaxis(mean_sg + std_sg * eps_u, 0, -2)  # [T, B, n, m]
        a_prime = mean_sg + std_sg * jax.random.normal(k_a, mean.shape)
        acts = jnp.concatenate([action[..., None, :], a_prime[..., None, :], u], axis=-2)
        adv = apply({"params": params}, obs[:-1], acts, method=ContinuousNetwork.advantages)
        baseline = jnp.mean(adv[..., 2:], axis=-1)
        q_tilde = value + adv[..., 0] - baseline  # Eq. 13, Q~(x_i, a_i)
        q_tilde_prime = value + adv[..., 1] - baseline  # Q~(x_i, a'_i)

        valid = mask[..., None] > 0  # padding (even never-written slots) reads as on-policy
        mu = {"mean": jnp.where(valid, batch["mean"], mean_sg),
              "std": jnp.where(valid, batch["std"], std_sg)}
        log_mu = GAUSSIAN.log_prob(mu, action)
        rho = jnp.exp(GAUSSIAN.log_prob((mean_sg, std_sg), action) - log_mu)
        disc = cfg.gamma * batch[DISCOUNT]
        q_sg, v_sg = jax.lax.stop_gradient(q_tilde), jax.lax.stop_gradient(value)
        next_v = jax.lax.stop_gradient(v_all[1:])
        qret = jax.lax.stop_gradient(returns.retrace(batch[REWARD], disc, q_sg, next_v, rho,
                                                     1.0, action_dims=m, mask=mask))
        qopc = jax.lax.stop_gradient(returns.q_opc(batch[REWARD], disc, q_sg, next_v,
                                                   mask=mask))

        phi_sg = jax.lax.stop_gradient(phi)
        g = per_step_grad(continuous_policy_objective, phi_sg, action, a_prime, qopc,
                          jax.lax.stop_gradient(q_tilde_prime), v_sg, mu["mean"],
                          mu["std"], c, cfg.bias_correction, cfg.entropy_weight, m,
                          self.fixed_std)
        avg_mean, avg_std = (jax.lax.stop_gradient(x) for x in gaussian_stats(avg_phi, m,
                                                                               self.fixed_std))

        def kl_to(p):
            return GAUSSIAN.kl((avg_mean, avg_std), gaussian_stats(p, m, self.fixed_std))

        kvec = per_step_grad(kl_to, phi_sg)
        z, active = self._project(g, kvec)
        z = jnp.where(valid, z, 0.0)
        policy_loss = -jnp.sum(mask * jnp.sum(phi * z, axis=-1)) / denom

        v_target = jnp.minimum(1.0, rho) * (qret - q_sg) + v_sg  # Eq. 14
        value_loss = 0.5 * jnp.sum(mask * ((qret - q_tilde) ** 2
                                           + (v_target - value) ** 2)) / denom
        loss = policy_loss + cfg.value_loss_weight * value_loss

        entropy = GAUSSIAN.entropy((mean_sg, std_sg))
        kl = kl_to(phi_sg)
        return loss, self._metrics(mask, denom, rho, c, kl, entropy, active, policy_loss,
                                   value_loss, q_tilde)

    @staticmethod
    def _metrics(mask, denom, rho, c, kl, entropy, active, policy_loss, value_loss, q):
        def mean(x):
            return jnp.sum(jnp.where(mask > 0, jax.lax.stop_gradient(x), 0.0)) / denom

        return {"policy_loss": jax.lax.stop_gradient(policy_loss),
                "value_loss": jax.lax.stop_gradient(value_loss),
                "rho_mean": mean(rho), "truncated_fraction": mean(rho > c),
                "kl_average": mean(kl), "entropy": mean(entropy),
                "trust_region_active": mean(active), "q_mean": mean(q),
                "valid_fraction": jnp.mean(mask)}
