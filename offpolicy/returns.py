"""Multi-step return targets over time-major windows: n-step, lambda, Peng's Q(lambda),
Retrace, Q^opc and V^tbc.

Every operator is a pure JAX function (jittable, differentiable) computed by one reverse
``jax.lax.scan`` over time; none loops over time in Python. They return targets: wrap the
result in ``jax.lax.stop_gradient`` where the loss wants a fixed target.

Conventions shared by every operator
------------------------------------
Arrays are time-major, ``[T, B]``: T steps of B windows (any further trailing batch axes are
carried along). Step t is the transition (s_t, a_t, r_t, s_{t+1}):

* ``rewards[t]`` r_t, the reward received after taking a_t in s_t.
* ``discounts[t]`` d_t = gamma * (1 - terminated_t): 0 where step t ends the episode by
  termination, so nothing past s_{t+1} is bootstrapped from; gamma where the episode goes on
  *or is truncated* (a time limit): a truncated step bootstraps from the value of s_{t+1}.
  Replay's ``discount`` field is (1 - terminated), so pass ``gamma * batch["discount"]``.
* ``next_values[t]`` the value of s_{t+1} (V(s_{t+1}), E_pi Q(s_{t+1}, .), max_a Q(s_{t+1}, a),
  as the operator says). Every step carries the value of its own next state, so the last
  valid step of a window (window end, truncation) bootstraps from its own entry with no extra
  argument: the caller evaluates the network on ``next_obs`` (``obs[1:]`` of a window).
  Where d_t = 0 the entry is multiplied by 0 and may be anything finite.
* Quantities of step t itself (``q_taken[t]`` = Q(s_t, a_t), ``values[t]`` = V(s_t),
  ``importance_ratios[t]`` = pi(a_t|s_t) / mu(a_t|s_t)) are indexed by t; a recursion that
  needs them at t + 1 reads entry t + 1.
* ``mask[t]`` (optional, default all ones): 1 for a real step, 0 for padding (replay pads a
  window that reaches its episode's end with mask 0; masks of other sources may also pad at
  the front). Padded steps do not influence valid ones (their inputs are never read, so they
  may even hold NaN) and their outputs are exactly 0.
* ``episode_ends[t]`` (optional, default none): true where step t is the last step of its
  episode (terminated or truncated). Only windows that run on into the next episode need it
  (e.g. an on-policy rollout kept whole); replay's windows (sequences and episodes,
  ``recent_segments``: ``offpolicy.replay.samplers``) never do, and there ``mask`` and
  ``discounts`` already say everything.

The recursion at step t looks at step t + 1 only if step t + 1 continues step t's episode
inside the window: t + 1 < T, ``mask[t + 1]`` = 1 and not ``episode_ends[t]``. Otherwise step
t is the last one available, and its target is the one-step r_t + d_t next_values[t]
(V^tbc: its Eq. 8 with V^tbc_{t+1} := next_values[t]). Each run of valid steps is therefore
computed as a window of its own, and a terminal step carries nothing from the next step
(d_t = 0 multiplies all of it).

Symbols in the formulas below: r_t = rewards[t], d_t = discounts[t], v_{t+1} =
next_values[t], q_t = q_taken[t], V_t = values[t], rho_t = importance_ratios[t], lambda =
``lambda_``; c = ``ratio_cap``, d_A = ``action_dims`` (ACER's d). The papers' gamma is d_t here
(gamma at a non-terminal step, 0 at a terminal one).
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp

__all__ = [
    "n_step_returns",
    "lambda_returns",
    "peng_q_lambda",
    "retrace",
    "q_opc",
    "v_tbc",
    "truncated_traces",
]

Array = jax.Array


# --------------------------------------------------------------------------- helpers
def _time_major(names: tuple[str, ...], arrays: tuple) -> tuple[tuple[Array, ...], jnp.dtype]:
    """The arrays as one float dtype (at least float32), checked to share one [T, ...] shape."""
    arrays = tuple(jnp.asarray(a) for a in arrays)
    shape = arrays[0].shape
    if len(shape) < 1 or shape[0] < 1:
        raise ValueError(f"{names[0]} must be time-major [T, B] with T >= 1, got shape {shape}")
    for name, a in zip(names, arrays):
        if a.shape != shape:
            raise ValueError(f"{name} has shape {a.shape}, expected {shape} (as {names[0]})")
    dtype = jnp.promote_types(jnp.result_type(*arrays), jnp.float32)
    return tuple(a.astype(dtype) for a in arrays), dtype


def _flags(mask: Array | None, episode_ends: Array | None, shape) -> tuple[Array, Array]:
    """(valid[T, B], continues[T, B]): step t is real; step t + 1 continues step t's episode."""
    if mask is None:
        valid = jnp.ones(shape, bool)
    else:
        mask = jnp.asarray(mask)
        if mask.shape != shape:
            raise ValueError(f"mask has shape {mask.shape}, expected {shape}")
        valid = mask > 0
    continues = valid & jnp.concatenate([valid[1:], jnp.zeros_like(valid[:1])], axis=0)
    if episode_ends is not None:
        episode_ends = jnp.asarray(episode_ends)
        if episode_ends.shape != shape:
            raise ValueError(f"episode_ends has shape {episode_ends.shape}, expected {shape}")
        continues = continues & ~(episode_ends > 0)
    return valid, continues


def _zero_padded(valid: Array, *arrays: Array) -> tuple[Array, ...]:
    """The arrays with padded steps set to 0, so that padding (even NaN) reaches nothing, in
    values or in gradients."""
    return tuple(jnp.where(valid, a, jnp.zeros_like(a)) for a in arrays)


def _prepare(names: tuple[str, ...], arrays: tuple, mask: Array | None,
             episode_ends: Array | None) -> tuple[tuple[Array, ...], Array, Array, jnp.dtype]:
    """(arrays with padding zeroed, valid, continues, dtype) for one operator's inputs."""
    arrays, dtype = _time_major(names, arrays)
    valid, continues = _flags(mask, episode_ends, arrays[0].shape)
    return _zero_padded(valid, *arrays), valid, continues, dtype


def _ratios_without_padding(importance_ratios: Array, mask: Array | None) -> Array:
    """The ratios with padded steps set to 1 before any power or min is taken of them, so that
    padding reaches neither values nor gradients."""
    importance_ratios = jnp.asarray(importance_ratios)
    if mask is None:
        return importance_ratios
    mask = jnp.asarray(mask)
    if mask.shape != importance_ratios.shape:
        raise ValueError(f"mask has shape {mask.shape}, expected {importance_ratios.shape}")
    return jnp.where(mask > 0, importance_ratios, jnp.ones_like(importance_ratios))


def _at_next_step(x: Array) -> Array:
    """x[t + 1] at index t, 0 at the last index (never read there: continues[T-1] is false)."""
    return jnp.concatenate([x[1:], jnp.zeros_like(x[:1])], axis=0)


def _per_step(value, dtype, shape) -> Array:
    """A scalar or [T, B] parameter as a [T, B] array."""
    return jnp.broadcast_to(jnp.asarray(value, dtype), shape)


def truncated_traces(importance_ratios: Array, ratio_cap: float = 1.0,
                     action_dims: int | None = None, lambda_: float | Array = 1.0) -> Array:
    """Truncated importance weights (traces) c_t = lambda * min(c, rho_t^(1 / d_A)).

    ``action_dims=None`` gives lambda * min(c, rho_t): Retrace (Munos et al., 2016, c = 1) and
    ACER's discrete Algorithm 2 (rho-bar_i <- min{1, rho_i}). An integer d_A gives ACER's
    continuous form (Wang et al., 2017, Sec. 5 and Algorithm 3: c_i <- min{1, rho_i^(1/d)},
    d the action dimension).

    Args:
      importance_ratios: [T, B] rho_t = pi(a_t|s_t) / mu(a_t|s_t) >= 0 (may be +inf).
      ratio_cap: c, the truncation level (ACER and Retrace: 1).
      action_dims: d_A, the number of action dimensions, or None.
      lambda_: scalar or [T, B] trace decay lambda (ACER: 1).

    Returns:
      [T, B] traces.
    """
    rho = jnp.asarray(importance_ratios)
    if action_dims is not None:
        action_dims = operator.index(action_dims)
        if action_dims < 1:
            raise ValueError(f"action_dims must be >= 1, got {action_dims}")
        rho = rho ** (1.0 / action_dims)
    return lambda_ * jnp.minimum(ratio_cap, rho)


# --------------------------------------------------------------------------- operators
def n_step_returns(rewards: Array, discounts: Array, next_values: Array, n: int,
                   mask: Array | None = None, episode_ends: Array | None = None) -> Array:
    """n-step bootstrapped returns (Sutton & Barto, 2018, Eq. 7.1, with per-step discounts):

        G_t = sum_{k=0}^{m-1} (prod_{j<k} d_{t+j}) r_{t+k} + (prod_{j<m} d_{t+j}) v_{t+m},
        m   = min(n, steps available from t to the end of t's run of valid steps),

    i.e. at most n rewards, then the value of the next state of the last step used (a window
    end or a truncation shortens the horizon and bootstraps there; a termination zeroes
    everything past it). Computed by a reverse scan over the horizons 1..n at once:

        G_t^(1) = r_t + d_t v_{t+1},
        G_t^(k) = r_t + d_t G_{t+1}^(k-1)  if step t + 1 continues, else G_t^(1),
        G_t     = G_t^(n)                  (carry [n, B]).

    Args:
      rewards: [T, B] r_t.
      discounts: [T, B] d_t = gamma * (1 - terminated_t).
      next_values: [T, B] v_{t+1}, value of s_{t+1} (V, or max / E_pi Q for control).
      n: number of rewards, a static Python int >= 1 (``jax.jit(..., static_argnames="n")``).
      mask: optional [T, B], 1 for real steps, 0 for padding.
      episode_ends: optional [T, B], true where step t ends its episode (see module doc).

    Returns:
      [T, B] G_t; 0 on padded steps.
    """
    n = operator.index(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    (rewards, discounts, next_values), valid, continues, dtype = _prepare(
        ("rewards", "discounts", "next_values"), (rewards, discounts, next_values), mask,
        episode_ends)

    def step(next_returns, xs):
        reward, discount, next_value, cont = xs
        one_step = reward + discount * next_value
        longer = reward + discount * next_returns[:-1]
        longer = jnp.where(cont, longer, one_step)
        returns = jnp.concatenate([one_step[None], longer], axis=0)
        return returns, returns[-1]

    init = jnp.zeros((n,) + rewards.shape[1:], dtype)
    _, returns = jax.lax.scan(step, init, (rewards, discounts, next_values, continues),
                              reverse=True)
    return jnp.where(valid, returns, 0.0)


def lambda_returns(rewards: Array, discounts: Array, next_values: Array,
                   lambda_: float | Array, mask: Array | None = None,
                   episode_ends: Array | None = None) -> Array:
    """lambda-returns, recursive form (Sutton & Barto, 2018, Sec. 12.8, Eq. 12.18, with
    lambda indexed by the step whose return it continues):

        G_t = r_t + d_t [(1 - lambda_t) v_{t+1} + lambda_t G_{t+1}],
        G_t = r_t + d_t v_{t+1}          at the last step of a run (window end, truncation).

    Same convention as ``rlax.lambda_returns`` (r_t, discount_t, v_t there = our rewards,
    discounts, next_values).

    Args:
      rewards: [T, B] r_t.
      discounts: [T, B] d_t = gamma * (1 - terminated_t).
      next_values: [T, B] v_{t+1}, value of s_{t+1}.
      lambda_: scalar or [T, B] lambda_t in [0, 1]; 0 gives one-step TD targets, 1 the
        discounted return bootstrapped at the end of the run.
      mask: optional [T, B], 1 for real steps, 0 for padding.
      episode_ends: optional [T, B], true where step t ends its episode (see module doc).

    Returns:
      [T, B] G_t; 0 on padded steps.
    """
    (rewards, discounts, next_values), valid, continues, dtype = _prepare(
        ("rewards", "discounts", "next_values"), (rewards, discounts, next_values), mask,
        episode_ends)
    (lambdas,) = _zero_padded(valid, _per_step(lambda_, dtype, rewards.shape))

    def step(next_return, xs):
        reward, discount, next_value, lam, cont = xs
        blended = (1.0 - lam) * next_value + lam * next_return
        ret = reward + discount * jnp.where(cont, blended, next_value)
        return ret, ret

    init = jnp.zeros(rewards.shape[1:], dtype)
    _, returns = jax.lax.scan(step, init, (rewards, discounts, next_values, lambdas, continues),
                              reverse=True)
    return jnp.where(valid, returns, 0.0)


def peng_q_lambda(rewards: Array, discounts: Array, next_q_values: Array,
                  lambda_: float | Array, mask: Array | None = None,
                  episode_ends: Array | None = None) -> Array:
    """Peng's Q(lambda) targets (Peng & Williams, 1996, "Incremental multi-step Q-learning"):

        G_t = r_t + d_t [(1 - lambda) max_a Q(s_{t+1}, a) + lambda G_{t+1}],

    the lambda-return of :func:`lambda_returns` with v_{t+1} = max_a Q(s_{t+1}, a) (the traces
    are not cut at non-greedy actions, unlike Watkins's Q(lambda)). It is exactly
    ``lambda_returns(rewards, discounts, next_q_values.max(-1), lambda_, ...)``; this wrapper
    only takes the max. With continuous actions, where max_a Q is approximated by
    Q(s', mu(s')), call :func:`lambda_returns` with that value.

    Args:
      rewards: [T, B] r_t.
      discounts: [T, B] d_t = gamma * (1 - terminated_t).
      next_q_values: [T, B, A] Q(s_{t+1}, .) over the A discrete actions (target network).
      lambda_: scalar or [T, B] lambda.
      mask: optional [T, B], 1 for real steps, 0 for padding.
      episode_ends: optional [T, B], true where step t ends its episode (see module doc).

    Returns:
      [T, B] G_t; 0 on padded steps.
    """
    next_q_values = jnp.asarray(next_q_values)
    if next_q_values.ndim < 2:
        raise ValueError(f"next_q_values must be [T, B, A], got shape {next_q_values.shape}")
    if mask is not None:  # padding out before the max: NaN there would reach max's gradient
        mask = jnp.asarray(mask)
        if mask.shape != next_q_values.shape[:-1]:
            raise ValueError(f"mask has shape {mask.shape}, expected {next_q_values.shape[:-1]}")
        next_q_values = jnp.where(mask[..., None] > 0, next_q_values, 0.0)
    return lambda_returns(rewards, discounts, jnp.max(next_q_values, axis=-1), lambda_,
                          mask=mask, episode_ends=episode_ends)


def _trace_corrected_returns(rewards: Array, discounts: Array, q_taken: Array,
                             next_values: Array, traces: Array, mask: Array | None,
                             episode_ends: Array | None) -> Array:
    """Q_t = r_t + d_t [v_{t+1} + c_{t+1} (Q_{t+1} - q_{t+1})], the trace term dropped at the
    last step of a run (the general off-policy return of Munos et al., 2016)."""
    (rewards, discounts, q_taken, next_values, traces), valid, continues, dtype = _prepare(
        ("rewards", "discounts", "q_taken", "next_values", "traces"),
        (rewards, discounts, q_taken, next_values, traces), mask, episode_ends)

    def step(next_return, xs):
        reward, discount, next_value, next_trace, next_q_taken, cont = xs
        correction = jnp.where(cont, next_trace * (next_return - next_q_taken), 0.0)
        ret = reward + discount * (next_value + correction)
        return ret, ret

    init = jnp.zeros(rewards.shape[1:], dtype)
    xs = (rewards, discounts, next_values, _at_next_step(traces), _at_next_step(q_taken),
          continues)
    _, returns = jax.lax.scan(step, init, xs, reverse=True)
    return jnp.where(valid, returns, 0.0)


def retrace(rewards: Array, discounts: Array, q_taken: Array, next_values: Array,
            importance_ratios: Array, ratio_cap: float = 1.0, action_dims: int | None = None,
            lambda_: float | Array = 1.0, mask: Array | None = None,
            episode_ends: Array | None = None) -> Array:
    """Retrace targets Q^ret (Munos et al., 2016), in ACER's recursive form (Wang et al.,
    2017, Eq. 5; for ease of presentation ACER takes lambda = 1)::

        Q^ret_t = r_t + d_t [v_{t+1} + c_{t+1} (Q^ret_{t+1} - q_{t+1})],
        Q^ret_t = r_t + d_t v_{t+1}                    at the last step of a run,
        c_t     = lambda min(c, rho_t)                 (Eq. 5; Algorithm 2: c = 1), or
        c_t     = lambda min(c, rho_t^(1/d_A))         (continuous ACER, Sec. 5, Algorithm 3).

    This equals ACER's backward loop (Algorithms 2 and 3) on a window x_0..x_k, k = T::

        Q^ret <- 0 if x_k is terminal else V(x_k)                (= d_{k-1} v_k below)
        for i = k-1, ..., 0:
            Q^ret <- r_i + gamma Q^ret                           -> target of step i
            Q^ret <- c_i (Q^ret - Q(x_i, a_i)) + V(x_i)

    with V(x_{i+1}) = next_values[i], Q(x_i, a_i) = q_taken[i], c_i from importance_ratios[i]:
    unrolling the last update into the next step's first gives the recursion above. Hence
    importance_ratios[0] (and q_taken[0]) are not used: the target of step t depends on the
    ratios of the steps after it only.

    Args:
      rewards: [T, B] r_t.
      discounts: [T, B] d_t = gamma * (1 - terminated_t).
      q_taken: [T, B] q_t = Q(s_t, a_t) of the action taken, from the target/average critic.
      next_values: [T, B] v_{t+1} = V(s_{t+1}) = E_{a ~ pi} Q(s_{t+1}, a) (continuous ACER: the
        state-value head V(s_{t+1})).
      importance_ratios: [T, B] rho_t = pi(a_t|s_t) / mu(a_t|s_t) (e.g.
        ``jnp.exp(log_pi - log_mu)``; +inf is fine, the trace is capped).
      ratio_cap: c, the truncation level of the traces (ACER Algorithms 2 and 3, Retrace: 1).
      action_dims: None for c_t = lambda min(c, rho_t); d_A (the action dimension, a static
        Python int) for continuous ACER's c_t = lambda min(c, rho_t^(1/d_A)).
      lambda_: scalar or [T, B] trace decay lambda (ACER: 1).
      mask: optional [T, B], 1 for real steps, 0 for padding.
      episode_ends: optional [T, B], true where step t ends its episode (see module doc).

    Returns:
      [T, B] Q^ret_t; 0 on padded steps.
    """
    importance_ratios = _ratios_without_padding(importance_ratios, mask)
    traces = truncated_traces(importance_ratios, ratio_cap, action_dims, lambda_)
    return _trace_corrected_returns(rewards, discounts, q_taken, next_values, traces, mask,
                                    episode_ends)


def q_opc(rewards: Array, discounts: Array, q_taken: Array, next_values: Array,
          lambda_: float | Array = 1.0, mask: Array | None = None,
          episode_ends: Array | None = None) -> Array:
    """Q(lambda) with off-policy corrections, Q^opc (Harutyunyan et al., 2016; ACER, Wang et
    al., 2017, Appendix B, Eq. 21; ACER takes lambda = 1):

        Q^opc_t = r_t + d_t [v_{t+1} + lambda (Q^opc_{t+1} - q_{t+1})],
        Q^opc_t = r_t + d_t v_{t+1}                   at the last step of a run,

    Retrace with the truncated importance ratio replaced by 1 (no ratios needed). ACER's
    Algorithm 3 loop: Q^opc <- r_i + gamma Q^opc; then Q^opc <- (Q^opc - Q(x_i, a_i)) + V(x_i).

    Args:
      rewards: [T, B] r_t.
      discounts: [T, B] d_t = gamma * (1 - terminated_t).
      q_taken: [T, B] q_t = Q(s_t, a_t) of the action taken (q_taken[0] is not used).
      next_values: [T, B] v_{t+1} = V(s_{t+1}).
      lambda_: scalar or [T, B] trace lambda (ACER: 1).
      mask: optional [T, B], 1 for real steps, 0 for padding.
      episode_ends: optional [T, B], true where step t ends its episode (see module doc).

    Returns:
      [T, B] Q^opc_t; 0 on padded steps.
    """
    traces = jnp.broadcast_to(jnp.asarray(lambda_, jnp.result_type(float)),
                              jnp.shape(rewards))
    return _trace_corrected_returns(rewards, discounts, q_taken, next_values, traces, mask,
                                    episode_ends)


def v_tbc(rewards: Array, discounts: Array, values: Array, next_values: Array,
          importance_ratios: Array, ratio_cap: float = 1.0, mask: Array | None = None,
          episode_ends: Array | None = None) -> Array:
    """V-RACER's state-value target V^tbc (Novati & Koumoutsakos, 2019, "Remember and Forget
    for Experience Replay", Eq. 8), with the paper's r_{t+1} written r_t here:

        V^tbc_t = V_t + rho-bar_t [r_t + d_t V^tbc_{t+1} - V_t],   rho-bar_t = min(c, rho_t)
        V^tbc_{t+1} := v_{t+1} = next_values[t]      at the last step of a run

    (the paper's remark 2 on its Algorithm 2: the value of an episode's last state is computed
    if the episode was truncated, 0 if terminal; here d_t = 0 plays the latter part). Unlike
    Retrace, the ratio of step t itself truncates step t's target. Eq. 8 is Eqs. 6 and 7
    (Retrace, then V^tbc_t = V_t + rho-bar_t (Q^ret_t - Q_t)) with Q := V, and it equals
    IMPALA's V-trace target with rho-bar = c-bar = min(c, rho).

    ``next_values`` is read only at the last step of each run: inside a run, the value of
    s_{t+1} enters through V^tbc_{t+1}, i.e. values[t + 1], as in Eq. 8. Pass the same
    network's V(s_{t+1}) in both, and ``v_tbc`` equals
    ``values + min(c, rho) * (retrace(..., q_taken=values, ...) - values)``.

    Args:
      rewards: [T, B] r_t.
      discounts: [T, B] d_t = gamma * (1 - terminated_t).
      values: [T, B] V_t = V(s_t) (V-RACER: V^w, the single network's value head).
      next_values: [T, B] v_{t+1} = V(s_{t+1}), the bootstrap at the end of a run.
      importance_ratios: [T, B] rho_t = pi(a_t|s_t) / mu(a_t|s_t) (+inf is fine).
      ratio_cap: c in rho-bar_t = min(c, rho_t) (ReF-ER: 1).
      mask: optional [T, B], 1 for real steps, 0 for padding.
      episode_ends: optional [T, B], true where step t ends its episode (see module doc).

    Returns:
      [T, B] V^tbc_t; 0 on padded steps.
    """
    truncated_ratios = truncated_traces(_ratios_without_padding(importance_ratios, mask),
                                        ratio_cap)
    (rewards, discounts, values, next_values, truncated_ratios), valid, continues, dtype = (
        _prepare(("rewards", "discounts", "values", "next_values", "importance_ratios"),
                 (rewards, discounts, values, next_values, truncated_ratios), mask, episode_ends))

    def step(next_target, xs):
        reward, discount, value, next_value, truncated_ratio, cont = xs
        bootstrap = jnp.where(cont, next_target, next_value)
        target = value + truncated_ratio * (reward + discount * bootstrap - value)
        return target, target

    init = jnp.zeros(rewards.shape[1:], dtype)
    xs = (rewards, discounts, values, next_values, truncated_ratios, continues)
    _, targets = jax.lax.scan(step, init, xs, reverse=True)
    return jnp.where(valid, targets, 0.0)
