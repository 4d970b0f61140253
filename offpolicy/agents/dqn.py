"""DQN (Mnih et al. 2015, "Human-level control through deep reinforcement learning",
Algorithm 1), with Double DQN (van Hasselt, Guez & Silver 2016) and the dueling architecture
(Wang et al. 2016) as options, and n-step returns.

Network: a torso (an MLP, or the Nature CNN on frames: ``networks.Torso``) and a linear head
Q(s, .) over the n actions; dueling: Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a') (Wang et al.
Eq. 9). A target network theta^- is copied from theta every C updates.

Targets for a sampled step (s_0, a_0) with the n-step return (Sutton & Barto Eq. 7.1;
``returns.n_step_returns`` over a window of n steps, cut at a termination, a truncation or
the window's end, where it bootstraps):
  G = sum_{k<m} gamma^k r_k + gamma^m c_m v(s_m)
  v(s)  = max_a Q(s, a; theta^-)                                       (DQN, Eq. 3 / Alg. 1)
  v(s)  = Q(s, argmax_a Q(s, a; theta); theta^-)            (Double DQN, van Hasselt Eq. 4)
  L     = mean w huber(Q(s_0, a_0; theta) - G)    (the paper's error clipping to [-1, 1] is
                                                   the Huber loss's gradient; --dqn.loss mse)
With n = 1 the update learns from transitions, else from windows of n steps. w is PER's
importance weight (1 under ER); |Q(s_0, a_0) - G| is written back as the priority.

Exploration: epsilon-greedy on Q(s, .), epsilon decaying linearly from epsilon_start to
epsilon_end over epsilon_decay_steps env steps (Nature: 1 -> 0.1 over the first million
frames). The agent counts updates, not env steps: the env step is taken as warm-up +
updates / updates_per_step (exact once updates run; before, epsilon stays at its start).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from offpolicy.agents.base import DEFAULT_CONTEXT, AgentContext, sequences, transitions
from offpolicy.agents.types import DQNState
from offpolicy.config import DQNConfig
from offpolicy.distributions import EpsilonGreedy
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError
from offpolicy.networks import Dense, Torso, use_cnn
from offpolicy.replay import refer
from offpolicy.replay.keys import ACTION, DISCOUNT, MASK, NEXT_OBS, OBS, REWARD
from offpolicy.returns import n_step_returns

EPSILON_GREEDY = EpsilonGreedy()


class QNetwork(nn.Module):
    """obs -> Q(s, .) [..., n]: torso, then a linear head or dueling heads."""

    hidden: tuple[int, ...]
    activation: str
    cnn: bool
    init_scheme: str
    num_actions: int
    dueling: bool

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        z = Torso(self.hidden, self.activation, self.cnn, self.init_scheme)(obs)
        if not self.dueling:
            return Dense(self.num_actions, self.init_scheme, output=True, out_scale=1.0)(z)
        value = Dense(1, self.init_scheme, output=True, out_scale=1.0)(z)
        advantage = Dense(self.num_actions, self.init_scheme, output=True, out_scale=1.0)(z)
        return value + advantage - jnp.mean(advantage, axis=-1, keepdims=True)


def linear_epsilon(env_step: jax.Array, start: float, end: float, steps: int) -> jax.Array:
    """epsilon = start + (end - start) min(1, t / steps)."""
    frac = jnp.minimum(1.0, env_step / float(steps))
    return start + (end - start) * frac


def bootstrap_values(q_target_next: jax.Array, q_online_next: jax.Array | None) -> jax.Array:
    """v(s') [...]: max_a Q^-(s', a) (DQN), or Q^-(s', argmax_a Q(s', a)) given the online
    network's values (Double DQN)."""
    if q_online_next is None:
        return jnp.max(q_target_next, axis=-1)
    greedy = jnp.argmax(q_online_next, axis=-1)
    return jnp.take_along_axis(q_target_next, greedy[..., None], axis=-1)[..., 0]


def huber(x: jax.Array, delta: float = 1.0) -> jax.Array:
    a = jnp.abs(x)
    return jnp.where(a <= delta, 0.5 * x**2, delta * (a - 0.5 * delta))


class DQN:
    """DQN on the agent protocol (``agents/base.py``): transitions (n = 1) or n-step windows,
    epsilon-greedy acting inside the jitted policy."""

    behaviour_fields: dict = {}
    writeback_fields: dict = {}
    exploration_noise = None

    def __init__(self, config: DQNConfig, obs_shape: tuple[int, ...], spec: ActionSpec,
                 context: AgentContext = DEFAULT_CONTEXT):
        c = config
        self.config, self.obs_shape, self.spec = config, tuple(obs_shape), spec
        self.replay = context.replay
        cnn = use_cnn(c.torso, self.obs_shape, "dqn")
        if c.epsilon_end > c.epsilon_start:
            raise OffpolicyError(f"--dqn.epsilon-end ({c.epsilon_end}) must not exceed "
                                 f"--dqn.epsilon-start ({c.epsilon_start})")
        self.n = spec.n
        self.net = QNetwork(tuple(c.hidden), c.activation, cnn, c.init, spec.n, c.dueling)
        self.data = transitions() if c.n_step == 1 else sequences(c.n_step)
        # the env step of an update count (module docstring)
        self.steps_per_update = 1.0 / context.updates_per_step
        self.start_step = float(context.warmup_steps)
        opt = (optax.rmsprop(c.lr, decay=0.95, eps=0.01, centered=True)
               if c.optimizer == "rmsprop" else optax.adam(c.lr))
        self.opt = (optax.chain(optax.clip_by_global_norm(c.max_grad_norm), opt)
                    if c.max_grad_norm > 0 else opt)

    def init(self, key: jax.Array) -> DQNState:
        params = self.net.init(key, jnp.zeros((1, *self.obs_shape), jnp.float32))["params"]
        return DQNState(params=params, target=params, opt=self.opt.init(params),
                        updates=jnp.zeros((), jnp.int32))

    def q_values(self, params, obs: jax.Array) -> jax.Array:
        return self.net.apply({"params": params}, obs)

    # ------------------------------------------------------------------ learning
    def targets(self, params, target, batch: dict) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(obs_0, a_0 [B] int, G [B]) of the batch: the one-step target on transitions, the
        n-step return of each window's first step on windows."""
        c = self.config
        double = self.config.double
        if self.data.kind == "transitions":
            nxt = batch[NEXT_OBS]
            v = bootstrap_values(self.q_values(target, nxt),
                                 self.q_values(params, nxt) if double else None)
            g = batch[REWARD] + c.gamma * batch[DISCOUNT] * v
            return batch[OBS], batch[ACTION][..., 0], g
        nxt = batch[OBS][1:]  # [n, B, ...]: s_{t+1} of each step t of the window
        v = bootstrap_values(self.q_values(target, nxt),
                             self.q_values(params, nxt) if double else None)
        g = n_step_returns(batch[REWARD], c.gamma * batch[DISCOUNT], v, c.n_step,
                           mask=batch[MASK])
        return batch[OBS][0], batch[ACTION][0, :, 0], g[0]

    def loss(self, params, obs, action, g, weights):
        q = self.q_values(params, obs)
        q_taken = jnp.take_along_axis(q, action.astype(jnp.int32)[:, None], axis=-1)[:, 0]
        td = q_taken - g
        per_sample = huber(td) if self.config.loss == "huber" else 0.5 * td**2
        return jnp.mean(weights * per_sample), (q_taken, td)

    def update(self, state: DQNState, batch: dict, key: jax.Array
               ) -> tuple[DQNState, dict, dict]:
        c = self.config
        params, target = state.params, state.target
        obs, action, g = self.targets(params, target, batch)
        g = jax.lax.stop_gradient(g)
        (loss, (q_taken, td)), grads = jax.value_and_grad(self.loss, has_aux=True)(
            params, obs, action, g, refer.per_weights(self.replay, batch))
        upd, opt = self.opt.update(grads, state.opt, params)
        params = optax.apply_updates(params, upd)
        updates = state.updates + 1
        # theta^- <- theta every C updates (Algorithm 1)
        target = jax.lax.cond(updates % c.target_update_every == 0, lambda: params,
                              lambda: target)
        metrics = {"loss": loss, "q_mean": jnp.mean(q_taken), "target_mean": jnp.mean(g),
                   "epsilon": self.epsilon(updates)}
        td_abs = jnp.abs(td)
        if self.data.kind == "sequences":  # the window's first step holds the priority
            rest = jnp.full((c.n_step - 1, td_abs.shape[0]), jnp.nan, td_abs.dtype)
            td_abs = jnp.concatenate([td_abs[None], rest], axis=0)
        new_state = DQNState(params=params, target=target, opt=opt, updates=updates)
        return new_state, metrics, refer.priority(self.replay, td_abs)

    # ------------------------------------------------------------------ acting
    def epsilon(self, updates: jax.Array) -> jax.Array:
        c = self.config
        env_step = self.start_step + updates.astype(jnp.float32) * self.steps_per_update
        return linear_epsilon(env_step, c.epsilon_start, c.epsilon_end, c.epsilon_decay_steps)

    def acting_params(self, state: DQNState) -> dict:
        return {"q": state.params, "epsilon": self.epsilon(state.updates)}

    def policy(self, params: dict, obs: jax.Array, key: jax.Array, explore: bool):
        """epsilon-greedy on Q(s, .) while exploring, else argmax_a Q(s, a)."""
        q = self.q_values(params["q"], obs)
        if explore:
            action, _ = EPSILON_GREEDY.sample(key, q, params["epsilon"])
        else:
            action = EPSILON_GREEDY.mode(q)
        return action[:, None].astype(jnp.float32), {}
