"""NAF: normalized advantage functions (Gu et al. 2016), as the ReF-ER paper runs it.

One network (ReF-ER paper Eq. 4; App. A: a 128-128 MLP) gives, for a state s,
  V(s), the mean action m(s) = tanh(.) in [-1, 1]^m, and a lower-triangular L(s) whose diagonal
  is mapped to R+ by softplus (App. E: "diagonal terms are mapped to R+ with a Softplus"), so
  P(s) = L L^T is positive definite, and
  Q(s, a) = V(s) - 1/2 (a - m(s))^T P(s) (a - m(s))                 (Eq. 4; the 1/2 is Gu et
                                                                      al.'s, Eq. 4 omits it)
so argmax_a Q(s, a) = m(s) and max_a Q = V(s).

Update for a batch (s, a, r, s', c), c = 0 at termination:
  y = r + gamma c V'(s')                               (target network, tau = 0.01)
  L = beta * 1/2 mean w (Q(s, a) - y)^2 + (1 - beta) mean KL(mu_t || pi)
where w is Rule 1's near-policy mask (NAF has no separate policy gradient, so Rule 1 zeroes
the whole TD term of a far-policy sample, and Rule 2's beta weighs that TD term against the
penalty: the paper's remark on Algorithm 4, "all the gradients are computed from the Q-learning
target") times PER's importance weights. Exploration in every replay mode is Gaussian,
pi = m(s) + N(0, sigma^2 I), sigma = 0.2 (App. A), sampled inside the policy; the stored action
is the unclipped sample. rho and KL(mu_t || pi) = |m_t - m(s)|^2 / (2 sigma^2) as in DDPG.
Adam, batch 256, gamma = 0.995; lr 1e-3, relu, tau 0.005 by default (a 30k-step Pendulum run
learns with them), the paper's lr 1e-4, softsign, tau 0.01 and 2^18 memory with ``--preset
paper``; the lr anneals by Eq. 13 under ReF-ER.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from offpolicy.agents.base import DEFAULT_CONTEXT, AgentContext, transitions
from offpolicy.agents.recurrent import Recurrence
from offpolicy.agents.types import NAFState
from offpolicy.config import NAFConfig
from offpolicy.envs.spaces import ActionSpec
from offpolicy.networks import MLP, CoreConfig, Dense, core_features, soft_update
from offpolicy.replay import refer
from offpolicy.replay.keys import ACTION, DISCOUNT, NEXT_OBS, OBS, REWARD


class NAFNetwork(nn.Module):
    """s -> (V [B], m [B, m], L [B, m, m] lower-triangular with a positive diagonal)."""

    hidden: tuple[int, ...]
    action_dim: int
    activation: str
    init_scheme: str
    core: CoreConfig | None = None

    @nn.compact
    def __call__(self, obs):
        m = self.action_dim
        z = MLP(self.hidden, self.activation,
                init_scheme=self.init_scheme)(core_features(self.core, obs))
        n_tril = m * (m + 1) // 2
        head = Dense(1 + m + n_tril, self.init_scheme, output=True)(z)
        value, mean, entries = head[..., 0], jnp.tanh(head[..., 1:1 + m]), head[..., 1 + m:]
        rows, cols = np.tril_indices(m)
        diag = rows == cols
        entries = jnp.where(diag, jax.nn.softplus(entries), entries)
        lower = jnp.zeros((*entries.shape[:-1], m, m), entries.dtype).at[..., rows, cols].set(
            entries)
        return value, mean, lower


def advantage(mean: jax.Array, lower: jax.Array, action: jax.Array) -> jax.Array:
    """A(s, a) = -1/2 (a - m)^T L L^T (a - m) = -1/2 |L^T (a - m)|^2  [B]."""
    u = jnp.einsum("...ji,...j->...i", lower, action - mean)
    return -0.5 * jnp.sum(u * u, axis=-1)


class NAF:
    """NAF agent: transitions, Gaussian exploration recorded per step, every ``--replay``."""

    exploration_noise = None

    def __init__(self, config: NAFConfig, obs_shape: tuple[int, ...], spec: ActionSpec,
                 context: AgentContext = DEFAULT_CONTEXT):
        replay = context.replay
        self.config, self.obs_shape, self.spec, self.replay = config, obs_shape, spec, replay
        self.rec = Recurrence(config, ("net",), config.init, "naf")
        self.data, self.core = self.rec.data(transitions()), self.rec.spec
        self.net = NAFNetwork(tuple(config.hidden), spec.dim, config.activation, config.init,
                              self.rec.core("net"))
        self.sigma = config.noise_sigma
        self.behaviour_fields = {"mean": ((spec.dim,), np.float32), **self.rec.behaviour_fields}
        self.writeback_fields = {refer.RHO: ((), np.float32, 1.0),
                                 refer.FAR: ((), np.float32, 0.0)}
        self.opt = (refer.annealed_adam(config.lr, replay.anneal) if replay.refer
                    else optax.adam(config.lr))

    def init(self, key: jax.Array) -> NAFState:
        params = self.net.init(key, jnp.zeros((1, *self.obs_shape), jnp.float32))["params"]
        return NAFState(params=params, target=params, opt=self.opt.init(params),
                        refer=refer.init_state(self.replay))

    def q(self, params, obs, action) -> jax.Array:
        value, mean, lower = self.net.apply({"params": params}, obs)
        return value + advantage(mean, lower, action)

    def kl(self, behaviour_mean, mean) -> jax.Array:
        return refer.fixed_std_kl(behaviour_mean, mean, self.sigma)

    def loss(self, params, batch, y, weights, beta, penalty: bool):
        value, mean, lower = self.net.apply({"params": params}, batch[OBS])
        q = value + advantage(mean, lower, batch[ACTION])
        td = q - y
        loss = 0.5 * jnp.mean(weights * td**2)
        if penalty:
            loss = beta * loss + (1.0 - beta) * jnp.mean(self.kl(batch["mean"], mean))
        return loss, (q, td)

    def update(self, state: NAFState, batch: dict, key: jax.Array
               ) -> tuple[NAFState, dict, dict]:
        c, r = self.config, self.replay
        params = state.params
        if self.rec.enabled:  # obs and next_obs: views of each step's history
            batch = self.rec.transition_views(batch)
        _, mean, _ = self.net.apply({"params": params}, batch[OBS])
        mean = jax.lax.stop_gradient(mean)
        a, m_mu = batch[ACTION], batch["mean"]
        log_ratio = refer.fixed_std_log_ratio(a, m_mu, mean, self.sigma)
        rho = refer.importance_weight(log_ratio, 0.0, r.rho_max)
        wt = refer.weighting(r, state.refer, rho, batch)
        next_value, _, _ = self.net.apply({"params": state.target}, batch[NEXT_OBS])
        y = jax.lax.stop_gradient(batch[REWARD] + c.gamma * batch[DISCOUNT] * next_value)
        (loss, (q, td)), grads = jax.value_and_grad(self.loss, has_aux=True)(
            params, batch, y, wt.weights, wt.beta, r.rule2)
        upd, opt = self.opt.update(grads, state.opt, params)
        params = optax.apply_updates(params, upd)
        new_state = NAFState(params=params, target=soft_update(state.target, params, c.tau),
                             opt=opt, refer=wt.state)
        metrics = {"loss": loss, "q_mean": jnp.mean(q), "target_mean": jnp.mean(y),
                   **wt.metrics(self.kl(m_mu, mean))}
        return new_state, metrics, wt.writeback | refer.priority(r, jnp.abs(td))

    def acting_params(self, state: NAFState) -> dict:
        return state.params

    def policy(self, params: dict, obs: jax.Array, key: jax.Array, explore: bool):
        """m(s), or m(s) + sigma N(0, I) when exploring; records the mean."""
        _, mean, _ = self.net.apply({"params": params}, obs)
        info = self.rec.acting_info(lambda: {"net": params["core"]}, obs, {"mean": mean})
        if explore:
            return mean + self.sigma * jax.random.normal(key, mean.shape), info
        return mean, info
