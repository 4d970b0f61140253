"""ACE (Zhang & Yao, AAAI 2019): actor ensemble with look-ahead tree search over a learned
latent value-prediction model; also ACE-Alt, TM-ACE and Ensemble-DDPG (d = 0).

Networks ("ACE Architecture"; decisions from the authors' code recorded in docs/algorithms/ace.md)
  f_enc(s)      = g(W s)                                   latent z, 400 units, g = tanh
  f_q(z, a)     = w_q . g(Wz_q z + Wa_q a + b_q)           300 hidden units
  f_rew(z, a)   = w_r . g(Wz_r z + Wa_r a + b_r)           300 hidden units
  f_trans(z, a) = h + g(Wh_t h + Wa_t a + b_t), h = z + g(W1_t z + b1_t)   two residual adds
  f_mu_i(z)     = tanh(W_i g(W_mu z + b_mu) + b_i)         N heads on one shared layer
A layer on [z, a] is written Wz z + Wa a: the z part is computed once per latent state and
shared by every action evaluated there (N at the root, N per inner node). That is the same
function with fewer FLOPs.

Tree search, Eq. (14)-(17), with max backup (Eq. 16 and the definition of a_{t|l} below
Eq. 17):
  f_q^0(z, a) = f_q(z, a)
  f_q^d(z, a) = f_rew(z, a) + gamma * max_i f_q^{d-1}(z1, f_mu_i(z1)),  z1 = f_trans(z, a)
All N^d leaves are evaluated in one batched computation (shapes [..., N, N, ...]); the actions
proposed inside the tree are held fixed (stop_gradient), so the actors' gradient enters only
through the root actions, as in Algorithm 1 and the authors' code.

Losses (Algorithm 1), batch (s, a, r, s', c) with c = 0 only for termination:
  y       = r + gamma c max_i f_q^d'(z', f_mu'_i(z'))      target network ('), z' = f_enc'(s')
  L_Q     = 1/2 mean (f_q^d(z, a) - y)^2 + 1/2 mean (f_rew(z, a) - r)^2      (d >= 1)
  L_mu    = - sum_i mean f_q^d(sg(z), f_mu_i(z))            ACE: all actors (Eq. 9 / Alg. 1)
          = - mean f_q^d(sg(z), f_mu_k(z)), k = actor chosen when acting   ACE-Alt
TM-ACE (Algorithm 2) trains with d = 0 and a latent transition loss
  L_Q     = 1/2 mean (f_q(z, a) - y)^2 + 1/2 mean (f_rew(z, a) - r)^2
            + 1/2 mean ||f_trans(z, a) - sg(f_enc'(s'))||^2
and searches to depth d only when acting. Ensemble-DDPG is d = 0 without f_rew and f_trans.
Acting (Eq. 8, Algorithm 1): a = argmax over {f_mu_i(z)} of f_q^d(z, .) plus OU noise.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from offpolicy.agents.acting import NoiseSpec
from offpolicy.agents.base import DEFAULT_CONTEXT, AgentContext, transitions
from offpolicy.agents.types import DDPGState
from offpolicy.config import ACEConfig
from offpolicy.envs.spaces import ActionSpec
from offpolicy.networks import ACTIVATIONS, final_init, hidden_init, soft_update, zeros
from offpolicy.replay.keys import ACTION, DISCOUNT, NEXT_OBS, OBS, REWARD

Q_OUT_SCALE = 3e-3  # authors' code: f_q and actor output layers orthogonal x 3e-3
ACTOR_OUT_SCALE = 3e-3

# Every parameter module of ACENetwork and the optimiser (role) it belongs to. The encoder is
# the critic's (trained by L_Q); with actor_trains_encoder the actors' gradient also reaches it.
PARAM_ROLES = {
    "enc": "critic", "q_z": "critic", "q_a": "critic", "q_out": "critic",
    "rew_z": "critic", "rew_a": "critic", "rew_out": "critic",
    "trans_1": "critic", "trans_z": "critic", "trans_a": "critic",
    "actor_hidden": "actor", "actor_out": "actor",
    "actor_w1": "actor", "actor_b1": "actor", "actor_w2": "actor", "actor_b2": "actor",
}


def _stacked_orthogonal(scale: float):
    """Orthogonal init for a stack of N independent matrices [N, fan_in, fan_out]."""
    base = nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        keys = jax.random.split(key, shape[0])
        return jnp.stack([base(k, shape[1:], dtype) for k in keys])

    return init


class ACENetwork(nn.Module):
    """All ACE functions; each method is one of the paper's f_*. Parameters are created only
    for the functions a variant uses (Ensemble-DDPG has no f_rew / f_trans)."""

    action_dim: int
    num_actors: int
    encoder_size: int = 400
    hidden: int = 300
    activation: str = "tanh"
    shared_actor_layer: bool = True

    def setup(self):
        n, h, m, N = self.encoder_size, self.hidden, self.action_dim, self.num_actors
        dense = lambda k, **kw: nn.Dense(k, kernel_init=hidden_init, bias_init=zeros, **kw)  # noqa
        self.enc = dense(n)
        self.q_z, self.q_a = dense(h), dense(h, use_bias=False)
        self.q_out = nn.Dense(1, kernel_init=final_init(Q_OUT_SCALE), bias_init=zeros)
        self.rew_z, self.rew_a = dense(h), dense(h, use_bias=False)
        self.rew_out = nn.Dense(1, kernel_init=hidden_init, bias_init=zeros)
        self.trans_1 = dense(n)
        self.trans_z, self.trans_a = dense(n), dense(n, use_bias=False)
        if self.shared_actor_layer:
            self.actor_hidden = dense(h)
            self.actor_out = nn.Dense(N * m, kernel_init=final_init(ACTOR_OUT_SCALE),
                                      bias_init=zeros)
        else:
            self.actor_w1 = self.param("actor_w1", _stacked_orthogonal(1.0), (N, n, h))
            self.actor_b1 = self.param("actor_b1", zeros, (N, h))
            self.actor_w2 = self.param("actor_w2", _stacked_orthogonal(ACTOR_OUT_SCALE), (N, h, m))
            self.actor_b2 = self.param("actor_b2", zeros, (N, m))

    @property
    def g(self):
        return ACTIVATIONS[self.activation]

    def encode(self, obs):  # f_enc: [..., obs] -> [..., n]
        return self.g(self.enc(obs))

    def actors(self, z):  # f_mu_1..N: [..., n] -> [..., N, m]
        if self.shared_actor_layer:
            out = self.actor_out(self.g(self.actor_hidden(z)))
            return jnp.tanh(out.reshape(*z.shape[:-1], self.num_actors, self.action_dim))
        hid = self.g(jnp.einsum("...n,knh->...kh", z, self.actor_w1) + self.actor_b1)
        return jnp.tanh(jnp.einsum("...kh,khm->...km", hid, self.actor_w2) + self.actor_b2)

    # [z, a] layers: the z part once per latent state ([..., 1, H]), the a part per action
    def q(self, z, a):  # f_q: z [..., n], a [..., K, m] -> [..., K]
        hid = self.g(self.q_z(z)[..., None, :] + self.q_a(a))
        return self.q_out(hid)[..., 0]

    def rew(self, z, a):  # f_rew: -> [..., K]
        hid = self.g(self.rew_z(z)[..., None, :] + self.rew_a(a))
        return self.rew_out(hid)[..., 0]

    def trans(self, z, a):  # f_trans: -> [..., K, n]
        h = z + self.g(self.trans_1(z))
        return h[..., None, :] + self.g(self.trans_z(h)[..., None, :] + self.trans_a(a))

    def q_tree(self, z, a, depth: int, gamma: float):
        """f_q^depth(z, a_k) for actions a [..., K, m] at latent z [..., n] -> [..., K]."""
        return self.q_tree_and_reward(z, a, depth, gamma)[0]

    def q_tree_and_reward(self, z, a, depth: int, gamma: float):
        """(f_q^depth(z, a), f_rew(z, a)); the root reward is the one the tree already
        predicts (None for depth 0), so reward grounding costs no second evaluation."""
        if depth == 0:
            return self.q(z, a), None
        r = self.rew(z, a)  # [..., K]
        z1 = self.trans(z, a)  # [..., K, n]
        a1 = jax.lax.stop_gradient(self.actors(z1))  # [..., K, N, m]: inner actions fixed
        v = self.q_tree(z1, a1, depth - 1, gamma)  # [..., K, N]
        return r + gamma * jnp.max(v, axis=-1), r

    def init_all(self, obs, with_model: bool):
        z = self.encode(obs)
        a = self.actors(z)
        out = self.q(z, a)
        if with_model:
            out = out + self.rew(z, a) + self.trans(z, a).sum(-1)
        return out


class ACE:
    """ACE family agent (the protocol of ``agents/base.py``): learns from transitions, records
    the chosen actor as behaviour info, writes nothing back; host-side OU noise."""

    data = transitions()
    writeback_fields: dict = {}

    def __init__(self, config: ACEConfig, obs_shape: tuple[int, ...], spec: ActionSpec,
                 context: AgentContext = DEFAULT_CONTEXT):
        c = config
        self.config, self.obs_shape, self.spec = c, obs_shape, spec
        self.num_actors = c.num_actors
        self.net = ACENetwork(spec.dim, c.num_actors, c.encoder_size, c.hidden, c.activation,
                              c.shared_actor_layer)
        self.transition_model = c.model == "transition"
        self.with_model = c.plan_depth > 0 or self.transition_model
        # training depth: TM-ACE trains f_q alone and searches only when acting (Algorithm 2)
        self.train_depth = 0 if self.transition_model else c.plan_depth
        self.act_depth = c.plan_depth
        self.behaviour_fields = {"actor": ((), np.int32)}
        self.exploration_noise = NoiseSpec(c.noise, c.noise_sigma, c.noise_theta, c.noise_dt)
        self.actor_opt = optax.adam(c.actor_lr)
        self.critic_opt = optax.adam(c.critic_lr)

    # ------------------------------------------------------------------ helpers
    def _call(self, params, method, *args, **kw):
        return self.net.apply({"params": params}, *args, method=method, **kw)

    def _role(self, name: str) -> str:
        if name not in PARAM_ROLES:
            raise KeyError(f"ACE parameter module '{name}' has no role in PARAM_ROLES")
        return PARAM_ROLES[name]

    def _actor_part(self, p: dict) -> dict:
        """The parameters the actor optimiser updates (routed by role, PARAM_ROLES)."""
        keys = [k for k in p if self._role(k) == "actor"]
        if self.config.actor_trains_encoder:
            keys.append("enc")
        return {k: p[k] for k in keys}

    def _critic_part(self, p: dict) -> dict:
        return {k: v for k, v in p.items() if self._role(k) == "critic"}

    def init(self, key: jax.Array) -> DDPGState:
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        params = self.net.init(key, obs, self.with_model, method=ACENetwork.init_all)["params"]
        return DDPGState(params=params, target=params,
                         actor_opt=self.actor_opt.init(self._actor_part(params)),
                         critic_opt=self.critic_opt.init(self._critic_part(params)), refer=None)

    def q_tree(self, params, z, a, depth):
        return self._call(params, ACENetwork.q_tree, z, a, depth, self.config.gamma)

    # ------------------------------------------------------------------ learning
    def bootstrap_target(self, target: dict, batch: dict) -> jax.Array:
        """y = r + gamma c max_i f_q^d'(z', f_mu'_i(z')) from the target network."""
        c = self.config
        z_next = self._call(target, ACENetwork.encode, batch[NEXT_OBS])
        a_next = self._call(target, ACENetwork.actors, z_next)  # [B, N, m]
        v_next = jnp.max(self.q_tree(target, z_next, a_next, self.train_depth), axis=-1)
        return jax.lax.stop_gradient(batch[REWARD] + c.gamma * batch[DISCOUNT] * v_next)

    def critic_loss(self, cp: dict, params: dict, target: dict, batch: dict, y: jax.Array):
        """L_Q of Algorithm 1 (value model) or Algorithm 2 (transition model)."""
        c, d = self.config, self.train_depth
        p = {**params, **cp}
        obs, action, reward = batch[OBS], batch[ACTION][:, None, :], batch[REWARD]
        z = self._call(p, ACENetwork.encode, obs)
        q, r_hat = self._call(p, ACENetwork.q_tree_and_reward, z, action, d, c.gamma)
        q = q[:, 0]
        loss = 0.5 * jnp.mean((q - y) ** 2)
        aux = {"q_tree": jnp.mean(q)}
        if self.with_model:
            if r_hat is None:  # TM-ACE trains with d = 0: f_rew is evaluated on its own
                r_hat = self._call(p, ACENetwork.rew, z, action)
            r_hat = r_hat[:, 0]
            r_loss = 0.5 * jnp.mean((r_hat - reward) ** 2)
            loss = loss + c.reward_loss_weight * r_loss
            aux["reward_loss"] = r_loss
            if d > 0:  # the tree value against the one-step value, for the logs
                aux["q_one_step"] = jnp.mean(self._call(p, ACENetwork.q, z, action))
        if self.transition_model:
            z1 = self._call(p, ACENetwork.trans, z, action)[:, 0]
            z1_target = jax.lax.stop_gradient(
                self._call(target, ACENetwork.encode, batch[NEXT_OBS]))
            t_loss = 0.5 * jnp.mean((z1 - z1_target) ** 2)
            loss = loss + t_loss
            aux["transition_loss"] = t_loss
        return loss, aux

    def actor_weights(self, batch: dict) -> jax.Array:
        """[B, N] weights of each actor's policy gradient: all ones (ACE) or the one-hot of
        the actor chosen when acting (ACE-Alt; index -1 from random warm-up -> zeros)."""
        if self.config.actor_update == "selected":
            return jax.nn.one_hot(batch["actor"], self.num_actors)
        return jnp.ones((batch[OBS].shape[0], self.num_actors))

    def actor_loss(self, ap: dict, params: dict, obs: jax.Array, weights: jax.Array):
        """L_mu = -sum_i mean_b w_bi f_q^d(sg(z), f_mu_i(z)): the gradient enters through the
        root actions only (Eq. 9 with f_q^d; Algorithm 1)."""
        p = {**params, **ap}
        z = self._call(p, ACENetwork.encode, obs)
        b = self._call(p, ACENetwork.actors, z)  # [B, N, m]
        v = self.q_tree(p, jax.lax.stop_gradient(z), b, self.train_depth)  # [B, N]
        return -jnp.sum(jnp.mean(v * weights, axis=0)), (v, b)

    def update(self, state: DDPGState, batch: dict, key: jax.Array
               ) -> tuple[DDPGState, dict, dict]:
        params, target = state.params, state.target
        y = self.bootstrap_target(target, batch)
        cp = self._critic_part(params)
        (c_loss, aux), grads = jax.value_and_grad(self.critic_loss, has_aux=True)(
            cp, params, target, batch, y)
        upd, critic_opt = self.critic_opt.update(grads, state.critic_opt, cp)
        params = {**params, **optax.apply_updates(cp, upd)}

        ap = self._actor_part(params)
        (a_loss, (v, b)), grads = jax.value_and_grad(self.actor_loss, has_aux=True)(
            ap, params, batch[OBS], self.actor_weights(batch))
        upd, actor_opt = self.actor_opt.update(grads, state.actor_opt, ap)
        params = {**params, **optax.apply_updates(ap, upd)}

        new_state = DDPGState(params=params, target=soft_update(target, params, self.config.tau),
                              actor_opt=actor_opt, critic_opt=critic_opt, refer=None)
        metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "target_mean": jnp.mean(y),
                   **aux, **self.diversity(v, b)}
        return new_state, metrics, {}

    def diversity(self, v: jax.Array, b: jax.Array) -> dict[str, jax.Array]:
        """Actor-diversity diagnostics on the batch (before this update's actor step):
        ``action_spread``, the std of the N proposed actions across actors, averaged over
        states and action dimensions; ``chosen_fraction`` [N], how often each actor has the
        highest f_q^d value (the one acting would choose, Eq. 8)."""
        spread = jnp.mean(jnp.std(b, axis=1))
        chosen = jnp.mean(jax.nn.one_hot(jnp.argmax(v, axis=-1), self.num_actors), axis=0)
        return {"action_spread": spread, "chosen_fraction": chosen}

    # ------------------------------------------------------------------ acting
    def acting_params(self, state: DDPGState) -> dict:
        return state.params

    def policy(self, params: dict, obs: jax.Array, key: jax.Array, explore: bool):
        """Eq. (8) with f_q^d: the proposal with the highest tree-search value (greedy; the
        exploration noise is added on the host)."""
        z = self._call(params, ACENetwork.encode, obs)
        b = self._call(params, ACENetwork.actors, z)  # [B, N, m]
        v = self.q_tree(params, z, b, self.act_depth)  # [B, N]
        idx = jnp.argmax(v, axis=-1)
        action = jnp.take_along_axis(b, idx[:, None, None], axis=1)[:, 0]
        return action, {"actor": idx.astype(jnp.int32)}

    def single_actor_policy(self, i: int):
        """Act with actor i alone (the paper's actor-diversity evaluation, Table 3)."""
        if not 0 <= i < self.num_actors:
            raise ValueError(f"actor index {i} out of range [0, {self.num_actors})")

        def policy(params, obs, key, explore):
            z = self._call(params, ACENetwork.encode, obs)
            return self._call(params, ACENetwork.actors, z)[:, i], {}

        return policy
