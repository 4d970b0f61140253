"""V-RACER (Novati & Koumoutsakos 2019, Sec. 2, Algorithms 2-3): off-policy policy gradient
with stored V^tbc value targets, ReF-ER by default.

One network (App. A: 128-128 softsign MLP) gives V(s) and the mean m(s) of a Gaussian policy
pi = N(m(s), diag(sigma^2)) whose std is state-independent, learned, softplus-mapped and starts
at variance 0.2 (App. A). Actions are sampled unclipped (the env clips) and every step stores
its behaviour mu_t = (m_t, sigma_t) and the value V(s_t) it saw when acting.

Stored per step and refreshed whenever the step is sampled (``offpolicy/replay/stored_returns``):
v_t (latest V(s_t)), rho_t = pi(a_t|s_t) / mu_t(a_t|s_t) and the target
  V^tbc_t = v_t + rhobar_t [r_t + gamma V^tbc_{t+1} - v_t],  rhobar = min(1, rho)     (Eq. 8)
(filled by the recursion when the episode ends, corrected backwards along the episode after
each refresh). Steps of an episode still in progress have no target yet and get no gradient.

Update for a batch of steps t with stored targets:
  Q^ret_t = r_t + gamma V^tbc_{t+1}   (Eq. 6-7; at the episode's last step gamma c V(s_{t+1}),
                                        c = 0 at termination, V of the current network)
  L_pg    = -mean w rho_t (Q^ret_t - V(s_t)) log pi(a_t|s_t)    (Eq. 5, rho and the advantage
                                                                 held constant: its gradient)
  L_value = 1/2 mean w (V(s_t) - V^tbc_t)^2                      (Eq. 9)
  L       = beta (L_pg + L_value) + (1 - beta) mean KL(mu_t || pi(.|s_t))   (Eq. 10-11)
w is Rule 1's near-policy mask (far-policy samples lose both the policy and the value term;
Algorithm 3 zeroes their whole g_hat) times PER's weights. beta scales the whole g_hat, value
term included, as Algorithm 3 writes it (one network, one gradient; the authors' smarties
scales the value gradient by beta too). KL(mu_t || pi) is differentiated in this direction,
through pi's mean and std:
  KL = sum log(s_pi / s_mu) + (s_mu^2 + (m_mu - m_pi)^2) / (2 s_pi^2) - 1/2.
After the update the step's new v_t, rho_t and V^tbc_t (Eq. 8 with the new values and the
stored V^tbc_{t+1}) are written back. Adam, lr 1e-4 annealed by Eq. 13, batch 256, gamma 0.995,
one update per env step.

Recurrent core (``--vracer.core lstm``, ReF-ER Sec. 5.4: "LSTM networks (2 layers of 32 cells
with back-propagation window of 16 steps)", ``--preset lstm``): the one network reads the
core's features of the step's history (``agents/recurrent.py``); rho and V^tbc use the
behaviour recorded while acting, as without a core.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from offpolicy.agents.base import AgentContext, transitions
from offpolicy.agents.recurrent import Recurrence
from offpolicy.agents.types import VRACERState
from offpolicy.config import VRACERConfig
from offpolicy.distributions import Gaussian
from offpolicy.envs.spaces import ActionSpec
from offpolicy.networks import MLP, CoreConfig, Dense, core_features, softplus_init
from offpolicy.replay import refer
from offpolicy.replay.keys import (
    ACTION,
    DISCOUNT,
    NEXT_OBS,
    NEXT_V_TBC,
    OBS,
    REWARD,
    V_BEHAVIOUR,
    V_LATEST,
    V_TBC,
)
from offpolicy.replay.stored_returns import StoredReturn

GAUSSIAN = Gaussian()


class VRACERNetwork(nn.Module):
    """s -> (V [B], mean [B, m], std [m])."""

    hidden: tuple[int, ...]
    action_dim: int
    activation: str
    init_scheme: str
    initial_std: float
    core: CoreConfig | None = None

    @nn.compact
    def __call__(self, obs):
        z = MLP(self.hidden, self.activation,
                init_scheme=self.init_scheme)(core_features(self.core, obs))
        head = Dense(1 + self.action_dim, self.init_scheme, output=True)(z)
        raw_std = self.param("raw_std", softplus_init(self.initial_std), (self.action_dim,))
        return head[..., 0], head[..., 1:], jax.nn.softplus(raw_std)


class VRACER:
    """V-RACER agent: transitions with stored V^tbc targets (``stored_return``)."""

    data = transitions()
    exploration_noise = None

    def __init__(self, config: VRACERConfig, obs_shape: tuple[int, ...], spec: ActionSpec,
                 context: AgentContext | None = None):
        replay = (context or AgentContext(refer.REFER)).replay  # ReF-ER unless told
        self.config, self.obs_shape, self.spec, self.replay = config, obs_shape, spec, replay
        self.rec = Recurrence(config, ("net",), config.init, "vracer")
        self.data, self.core = self.rec.data(transitions()), self.rec.spec
        self.net = VRACERNetwork(tuple(config.hidden), spec.dim, config.activation, config.init,
                                 float(np.sqrt(config.initial_variance)), self.rec.core("net"))
        m = spec.dim
        self.stored_return = StoredReturn(config.gamma)
        self.behaviour_fields = {"mean": ((m,), np.float32), "std": ((m,), np.float32),
                                 V_BEHAVIOUR: ((), np.float32), **self.rec.behaviour_fields}
        nan = float("nan")
        self.writeback_fields = {refer.RHO: ((), np.float32, 1.0),
                                 refer.FAR: ((), np.float32, 0.0),
                                 V_LATEST: ((), np.float32, nan), V_TBC: ((), np.float32, nan)}
        self.opt = (refer.annealed_adam(config.lr, replay.anneal) if replay.refer
                    else optax.adam(config.lr))

    def init(self, key: jax.Array) -> VRACERState:
        params = self.net.init(key, jnp.zeros((1, *self.obs_shape), jnp.float32))["params"]
        return VRACERState(params=params, opt=self.opt.init(params),
                           refer=refer.init_state(self.replay))

    def loss(self, params, batch, qret, valid, weights, beta, penalty: bool):
        value, mean, std = self.net.apply({"params": params}, batch[OBS])
        pi = GAUSSIAN.info(mean, std)
        log_pi = GAUSSIAN.log_prob(pi, batch[ACTION])
        log_mu = GAUSSIAN.log_prob({"mean": batch["mean"], "std": batch["std"]}, batch[ACTION])
        rho = refer.importance_weight(log_pi, log_mu, self.replay.rho_max)
        w = weights * valid
        advantage = jax.lax.stop_gradient(rho * (qret - value))
        pg = -jnp.mean(w * advantage * log_pi)
        target = jnp.where(valid > 0, batch[V_TBC], 0.0)
        value_loss = 0.5 * jnp.mean(w * (value - target) ** 2)
        kl = GAUSSIAN.kl({"mean": batch["mean"], "std": batch["std"]}, pi)
        loss = beta * (pg + value_loss)  # Algorithm 3: beta scales the whole g_hat
        if penalty:
            loss = loss + (1.0 - beta) * jnp.mean(kl)
        return loss, {"policy_loss": pg, "value_loss": value_loss, "kl": kl,
                      "std_mean": jnp.mean(std)}

    def update(self, state: VRACERState, batch: dict, key: jax.Array
               ) -> tuple[VRACERState, dict, dict]:
        c, r = self.config, self.replay
        params = state.params
        if self.rec.enabled:  # obs and next_obs: views of each step's history
            batch = self.rec.transition_views(batch)
        # the pre-update network: rho, v and the refreshed target (Algorithm 3)
        value, mean, std = self.net.apply({"params": params}, batch[OBS])
        next_value, _, _ = self.net.apply({"params": params}, batch[NEXT_OBS])
        log_pi = GAUSSIAN.log_prob(GAUSSIAN.info(mean, std), batch[ACTION])
        log_mu = GAUSSIAN.log_prob({"mean": batch["mean"], "std": batch["std"]}, batch[ACTION])
        rho = refer.importance_weight(log_pi, log_mu, r.rho_max)
        stored_next = batch[NEXT_V_TBC]
        at_end = jnp.isnan(stored_next)  # the episode's last step (or its successor unknown)
        bootstrap = jnp.where(at_end, batch[DISCOUNT] * next_value, stored_next)
        qret = jax.lax.stop_gradient(batch[REWARD] + c.gamma * bootstrap)
        has_target = ~jnp.isnan(batch[V_TBC])
        valid = has_target.astype(jnp.float32)

        wt = refer.weighting(r, state.refer, rho, batch)
        (loss, aux), grads = jax.value_and_grad(self.loss, has_aux=True)(
            params, batch, qret, valid, wt.weights, wt.beta, r.rule2)
        upd, opt = self.opt.update(grads, state.opt, params)
        params = optax.apply_updates(params, upd)

        v_tbc = value + jnp.minimum(1.0, rho) * (qret - value)  # Eq. 8, refreshed
        new_state = VRACERState(params=params, opt=opt, refer=wt.state)
        metrics = {"loss": loss, "policy_loss": aux["policy_loss"],
                   "value_loss": aux["value_loss"], "std_mean": aux["std_mean"],
                   "v_mean": jnp.mean(value), "target_fraction": jnp.mean(valid),
                   **wt.metrics(aux["kl"])}
        writeback = wt.writeback | {V_LATEST: value, V_TBC: jnp.where(has_target, v_tbc, jnp.nan)}
        # NaN: no target yet, the step keeps its priority
        td_abs = jnp.where(has_target, jnp.abs(value - jnp.nan_to_num(batch[V_TBC])), jnp.nan)
        return new_state, metrics, writeback | refer.priority(r, td_abs)

    def acting_params(self, state: VRACERState) -> dict:
        return state.params

    def state_value(self, params: dict, obs: jax.Array) -> jax.Array:
        """V(s) [B]: bootstraps the stored targets of a truncated episode from the state it
        was cut at (Eq. 8 after the last step). With a core, ``obs`` is the context of each
        episode's last step (a batch's context keys), and s is that step's next observation."""
        if self.rec.enabled:
            obs = self.rec.transition_views(obs)[NEXT_OBS]
        return self.net.apply({"params": params}, obs)[0]

    def policy(self, params: dict, obs: jax.Array, key: jax.Array, explore: bool):
        """Samples pi (exploring) or returns its mean; records mean, std and V(s)."""
        value, mean, std = self.net.apply({"params": params}, obs)
        if explore:
            action, info = GAUSSIAN.sample(key, mean, std)
        else:
            action, info = mean, GAUSSIAN.info(mean, std)
        return action, self.rec.acting_info(lambda: {"net": params["core"]}, obs,
                                            {**info, V_BEHAVIOUR: value})
