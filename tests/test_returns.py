"""Multi-step return operators (offpolicy.returns) against plain-Python reference loops.

Each reference is an explicit backward for-loop over one episode's run of valid steps, written
from the paper's recursion (Retrace and Q^opc in ACER's Algorithm 2/3 loop form, V^tbc from
ReF-ER Eq. 8), in float64, independent of how the JAX code is formulated. The harness splits
every batch column into its runs of valid steps (padding and episode ends cut them) and runs
the reference on each. Padded inputs are NaN throughout: they must reach nothing.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offpolicy import returns

GAMMA = 0.9
SEEDS = (0, 1, 2, 3)
RTOL = ATOL = 1e-5


# --------------------------------------------------------------------------- windows
def episode_layout(rng, T, B=6):
    """(mask, discounts, episode_ends) [T, B], one case per column (cycled):
    0 window inside a longer episode, 1 termination inside the window then padding,
    2 truncation inside the window then padding (discount stays gamma), 3 termination at the
    window's last step, 4 a single (truncated) step, 5 truncation at the window's last step."""
    mask = np.zeros((T, B))
    discounts = np.full((T, B), GAMMA)
    ends = np.zeros((T, B), bool)
    for b in range(B):
        case = b % 6
        length = {0: T, 3: T, 4: 1, 5: T}.get(case) or int(rng.integers(2, T))
        mask[:length, b] = 1.0
        if case in (1, 3):
            discounts[length - 1, b] = 0.0
        if case != 0:
            ends[length - 1, b] = True
    return mask, discounts, ends


def random_windows(seed, T=None, B=6, num_actions=4):
    """Random inputs for every operator, NaN on padded steps. ``next_values`` is consistent
    with ``values`` (V(s_{t+1}) = values[t + 1]) inside an episode, independent at its end."""
    rng = np.random.default_rng(seed)
    T = T or int(rng.integers(7, 13))
    mask, discounts, ends = episode_layout(rng, T, B)
    values = rng.normal(size=(T, B))
    next_values = rng.normal(size=(T, B))
    next_values[:-1] = np.where(mask[1:] > 0, values[1:], next_values[:-1])
    ratios = rng.lognormal(0.0, 1.0, size=(T, B))
    ratios[rng.integers(0, T), 0] = 0.0
    ratios[rng.integers(0, T), 0] = np.inf
    w = {
        "rewards": rng.normal(size=(T, B)),
        "discounts": discounts,
        "next_values": next_values,
        "values": values,
        "q_taken": values + 0.3 * rng.normal(size=(T, B)),
        "importance_ratios": ratios,
        "next_q_values": rng.normal(size=(T, B, num_actions)),
    }
    padded = mask == 0
    for a in w.values():
        a[padded] = np.nan
    w["mask"], w["episode_ends"] = mask, ends
    return w


def runs_of(valid, ends):
    """[(start, stop)] of the runs of valid steps of one column, each ending at an episode end
    or before padding."""
    runs, start = [], None
    for t in range(len(valid)):
        if not valid[t]:
            if start is not None:
                runs.append((start, t))
            start = None
            continue
        if start is None:
            start = t
        if ends[t]:
            runs.append((start, t + 1))
            start = None
    if start is not None:
        runs.append((start, len(valid)))
    return runs


def reference(fn, w, names, **kw):
    """fn(*columns of one run, **kw) on every run of every column; 0 on padded steps."""
    T, B = w["rewards"].shape
    out = np.zeros((T, B))
    for b in range(B):
        for s, e in runs_of(w["mask"][:, b] > 0, w["episode_ends"][:, b]):
            out[s:e, b] = fn(*(np.asarray(w[n][s:e, b], np.float64) for n in names), **kw)
    return out


def check(got, want, mask):
    got = np.asarray(got)
    assert got.shape == want.shape
    assert np.all(np.isfinite(got)), "non-finite output (padding leaked?)"
    assert np.all(got[mask == 0] == 0.0), "padded steps must be exactly 0"
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def jnp_args(w, names):
    return [jnp.asarray(w[n], jnp.float32) for n in names]


# --------------------------------------------------------------------------- references
def ref_n_step(r, d, v, n):
    """Eq. 7.1 summed directly: at most n rewards, then the value after the last one used."""
    L = len(r)
    out = np.zeros(L)
    for t in reversed(range(L)):
        horizon = min(n, L - t)
        total, discount = 0.0, 1.0
        for k in range(horizon):
            total += discount * r[t + k]
            discount *= d[t + k]
        out[t] = total + discount * v[t + horizon - 1]
    return out


def ref_lambda(r, d, v, lam):
    """G_t = r_t + d_t [(1 - lam) v_{t+1} + lam G_{t+1}]; G = r + d v at the last step."""
    L = len(r)
    out = np.zeros(L)
    for t in reversed(range(L)):
        if t == L - 1:
            out[t] = r[t] + d[t] * v[t]
        else:
            out[t] = r[t] + d[t] * ((1 - lam) * v[t] + lam * out[t + 1])
    return out


def ref_peng(r, d, next_q, lam):
    """Peng & Williams: the lambda-return towards max_a Q(s_{t+1}, a)."""
    L = len(r)
    out = np.zeros(L)
    g = None
    for t in reversed(range(L)):
        greedy = max(next_q[t])
        g = r[t] + d[t] * (greedy if g is None else (1 - lam) * greedy + lam * g)
        out[t] = g
    return out


def acer_traces(rho, cap=1.0, action_dims=None, lam=1.0):
    """ACER Algorithm 2: rho-bar_i = min{1, rho_i}; Algorithm 3: c_i = min{1, rho_i^(1/d)}."""
    rho = np.asarray(rho, np.float64)
    if action_dims is not None:
        rho = rho ** (1.0 / action_dims)
    return lam * np.minimum(cap, rho)


def ref_retrace_acer_loop(r, d, q_taken, next_values, traces):
    """ACER Algorithm 2 on the window x_0..x_k (k = len(r)), with gamma -> d_i:

        Q^ret <- 0 for terminal x_k, V(x_k) otherwise  (d_{k-1} = 0 does the former)
        for i in k-1..0:  Q^ret <- r_i + gamma Q^ret;  (use it);
                          Q^ret <- rho-bar_i (Q^ret - Q(x_i, a_i)) + V(x_i)
    where V(x_i) = next_values[i - 1] (the value of step i-1's next state)."""
    k = len(r)
    out = np.zeros(k)
    q_ret = next_values[k - 1]
    for i in reversed(range(k)):
        q_ret = r[i] + d[i] * q_ret
        out[i] = q_ret
        if i > 0:
            q_ret = traces[i] * (q_ret - q_taken[i]) + next_values[i - 1]
    return out


def ref_q_opc_acer_loop(r, d, q_taken, next_values):
    """ACER Algorithm 3's Q^opc lines: Q^opc <- r_i + gamma Q^opc; then
    Q^opc <- (Q^opc - Q(x_i, a_i)) + V(x_i)."""
    k = len(r)
    out = np.zeros(k)
    q_opc = next_values[k - 1]
    for i in reversed(range(k)):
        q_opc = r[i] + d[i] * q_opc
        out[i] = q_opc
        if i > 0:
            q_opc = (q_opc - q_taken[i]) + next_values[i - 1]
    return out


def ref_v_tbc(r, d, values, next_values, rho, cap=1.0):
    """ReF-ER Eq. 8, V^tbc_t = V(s_t) + rho-bar_t [r_{t+1} + gamma V^tbc_{t+1} - V(s_t)], with
    V^tbc of the episode's last state = its value (truncation) or 0 (terminal: d = 0)."""
    L = len(r)
    out = np.zeros(L)
    v_tbc_next = next_values[L - 1]
    for t in reversed(range(L)):
        rho_bar = min(cap, rho[t])
        out[t] = values[t] + rho_bar * (r[t] + d[t] * v_tbc_next - values[t])
        v_tbc_next = out[t]
    return out


# --------------------------------------------------------------------------- vs references
BASE = ("rewards", "discounts", "next_values")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 3, 20])
def test_n_step_returns_match_reference(seed, n):
    w = random_windows(seed)
    got = returns.n_step_returns(*jnp_args(w, BASE), n, mask=w["mask"])
    check(got, reference(ref_n_step, w, BASE, n=n), w["mask"])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("lam", [0.0, 0.7, 1.0])
def test_lambda_returns_match_reference(seed, lam):
    w = random_windows(seed)
    got = returns.lambda_returns(*jnp_args(w, BASE), lam, mask=w["mask"])
    check(got, reference(ref_lambda, w, BASE, lam=lam), w["mask"])


@pytest.mark.parametrize("seed", SEEDS)
def test_peng_q_lambda_matches_reference(seed):
    w = random_windows(seed)
    names = ("rewards", "discounts", "next_q_values")
    got = returns.peng_q_lambda(*jnp_args(w, names), 0.8, mask=w["mask"])
    check(got, reference(ref_peng, w, names, lam=0.8), w["mask"])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("cap,action_dims,lam", [(1.0, None, 1.0), (1.0, 3, 1.0),
                                                 (2.0, None, 0.9), (10.0, 6, 1.0)])
def test_retrace_matches_acer_backward_loop(seed, cap, action_dims, lam):
    w = random_windows(seed)
    w["traces"] = acer_traces(w["importance_ratios"], cap, action_dims, lam)
    got = returns.retrace(*jnp_args(w, ("rewards", "discounts", "q_taken", "next_values",
                                        "importance_ratios")),
                          ratio_cap=cap, action_dims=action_dims, lambda_=lam, mask=w["mask"])
    want = reference(ref_retrace_acer_loop, w,
                     ("rewards", "discounts", "q_taken", "next_values", "traces"))
    check(got, want, w["mask"])


@pytest.mark.parametrize("seed", SEEDS)
def test_q_opc_matches_acer_backward_loop(seed):
    w = random_windows(seed)
    names = ("rewards", "discounts", "q_taken", "next_values")
    got = returns.q_opc(*jnp_args(w, names), mask=w["mask"])
    check(got, reference(ref_q_opc_acer_loop, w, names), w["mask"])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("cap", [1.0, 3.0])
def test_v_tbc_matches_refer_eq8(seed, cap):
    w = random_windows(seed)
    names = ("rewards", "discounts", "values", "next_values", "importance_ratios")
    got = returns.v_tbc(*jnp_args(w, names), ratio_cap=cap, mask=w["mask"])
    check(got, reference(ref_v_tbc, w, names, cap=cap), w["mask"])


# --------------------------------------------------------------------------- episode ends
def spanning_windows(seed):
    """Windows that run on into the next episode (an on-policy rollout kept whole): front padding,
    a truncation with the next episode after it, a termination with the next episode after."""
    w = random_windows(seed, T=10, B=4)
    T, B = 10, 4
    mask = np.ones((T, B))
    mask[:3, 0] = 0.0
    mask[:2, 3] = 0.0
    discounts = np.full((T, B), GAMMA)
    ends = np.zeros((T, B), bool)
    ends[3, 1] = True  # truncated: discount stays gamma
    ends[5, 2] = True
    discounts[5, 2] = 0.0  # terminated
    ends[4, 3] = ends[8, 3] = True
    discounts[8, 3] = 0.0
    rng = np.random.default_rng(seed + 100)
    for name in ("rewards", "next_values", "values", "q_taken"):
        w[name] = rng.normal(size=(T, B))
    w["importance_ratios"] = rng.lognormal(0.0, 1.0, size=(T, B))
    w["next_q_values"] = rng.normal(size=(T, B, 4))
    for a in (w["rewards"], w["next_values"], w["values"], w["q_taken"],
              w["importance_ratios"], w["next_q_values"]):
        a[mask == 0] = np.nan
    discounts[mask == 0] = np.nan
    w.update(discounts=discounts, mask=mask, episode_ends=ends)
    return w


CASES = {
    "n_step": (lambda a, **k: returns.n_step_returns(*a, 4, **k), BASE,
               functools.partial(ref_n_step, n=4)),
    "lambda": (lambda a, **k: returns.lambda_returns(*a, 0.8, **k), BASE,
               functools.partial(ref_lambda, lam=0.8)),
    "peng": (lambda a, **k: returns.peng_q_lambda(*a, 0.8, **k),
             ("rewards", "discounts", "next_q_values"), functools.partial(ref_peng, lam=0.8)),
    "retrace": (lambda a, **k: returns.retrace(*a, **k),
                ("rewards", "discounts", "q_taken", "next_values", "importance_ratios"),
                lambda r, d, q, v, rho: ref_retrace_acer_loop(r, d, q, v, acer_traces(rho))),
    "q_opc": (lambda a, **k: returns.q_opc(*a, **k),
              ("rewards", "discounts", "q_taken", "next_values"), ref_q_opc_acer_loop),
    "v_tbc": (lambda a, **k: returns.v_tbc(*a, **k),
              ("rewards", "discounts", "values", "next_values", "importance_ratios"), ref_v_tbc),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_episode_ends_cut_windows_that_span_episodes(name, seed):
    op, names, ref = CASES[name]
    w = spanning_windows(seed)
    got = op(jnp_args(w, names), mask=w["mask"], episode_ends=w["episode_ends"])
    check(got, reference(ref, w, names), w["mask"])
    # without the cut, the truncated column would bootstrap through the next episode
    uncut = np.asarray(op(jnp_args(w, names), mask=w["mask"]))
    assert not np.allclose(uncut[:4, 1], np.asarray(got)[:4, 1])


# --------------------------------------------------------------------------- jit, padding
@pytest.mark.parametrize("name", sorted(CASES))
def test_jit_matches_eager_and_padding_stays_finite(name):
    op, names, ref = CASES[name]
    w = random_windows(7)
    args = jnp_args(w, names)
    mask, ends = jnp.asarray(w["mask"]), jnp.asarray(w["episode_ends"])
    eager = op(args, mask=mask, episode_ends=ends)
    jitted = jax.jit(lambda a, m, e: op(a, mask=m, episode_ends=e))(args, mask, ends)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-6, atol=1e-6)
    check(jitted, reference(ref, w, names), w["mask"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_are_finite_with_nan_padding(name):
    op, names, _ = CASES[name]
    w = random_windows(8)
    args = jnp_args(w, names)
    grads = jax.grad(lambda a: jnp.sum(op(a, mask=w["mask"])))(args)
    for g in grads:
        assert np.all(np.isfinite(np.asarray(g)))
        assert np.all(np.asarray(g)[w["mask"] == 0] == 0.0)


def test_n_step_jit_with_static_n():
    w = random_windows(9)
    fn = jax.jit(returns.n_step_returns, static_argnames="n")
    got = fn(*jnp_args(w, BASE), n=3, mask=w["mask"])
    check(got, reference(ref_n_step, w, BASE, n=3), w["mask"])


def test_fully_padded_column_and_no_mask():
    w = random_windows(10)
    w["mask"][:, 2] = 0.0
    for a in ("rewards", "discounts", "next_values"):
        w[a][:, 2] = np.nan
    got = np.asarray(returns.lambda_returns(*jnp_args(w, BASE), 0.5, mask=w["mask"]))
    assert np.all(got[:, 2] == 0.0)
    full = {k: np.nan_to_num(v, nan=0.5) for k, v in w.items()}
    full["mask"] = np.ones_like(w["mask"])
    full["episode_ends"] = np.zeros_like(w["episode_ends"])
    np.testing.assert_allclose(
        np.asarray(returns.lambda_returns(*jnp_args(full, BASE), 0.5)),
        np.asarray(returns.lambda_returns(*jnp_args(full, BASE), 0.5, mask=full["mask"])))


# --------------------------------------------------------------------------- identities
def test_lambda_return_is_the_weighted_average_of_n_step_returns():
    """Sutton & Barto Eq. 12.9 (truncated lambda-return), with per-step discounts."""
    w = random_windows(5)
    args = jnp_args(w, BASE)
    T, lam = w["rewards"].shape[0], 0.6
    nstep = np.stack([np.asarray(returns.n_step_returns(*args, n, mask=w["mask"]))
                      for n in range(1, T + 1)])
    remaining = np.zeros(w["mask"].shape, int)  # steps left in the run, t included
    for t in reversed(range(T)):
        nxt = remaining[t + 1] if t + 1 < T else 0
        remaining[t] = np.where(w["mask"][t] > 0, 1 + nxt, 0)
    want = np.zeros_like(nstep[0])
    for t in range(T):
        for b in range(w["mask"].shape[1]):
            h = remaining[t, b]
            if h:
                want[t, b] = sum((1 - lam) * lam ** (n - 1) * nstep[n - 1, t, b]
                                 for n in range(1, h)) + lam ** (h - 1) * nstep[h - 1, t, b]
    check(returns.lambda_returns(*args, lam, mask=w["mask"]), want, w["mask"])


def test_retrace_special_cases():
    w = random_windows(11)
    names = ("rewards", "discounts", "q_taken", "next_values")
    args = jnp_args(w, names)
    one_step = np.nan_to_num(w["rewards"] + w["discounts"] * w["next_values"])
    # zero traces: one-step expected-SARSA targets
    zero = returns.retrace(*args, jnp.zeros_like(args[0]), mask=w["mask"])
    check(zero, one_step, w["mask"])
    # ratios >= 1 with c = 1: traces are 1, Retrace is Q^opc
    big = returns.retrace(*args, jnp.full_like(args[0], 3.0), mask=w["mask"])
    check(big, np.asarray(returns.q_opc(*args, mask=w["mask"])), w["mask"])


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_v_tbc_is_retrace_with_q_equal_v(seed):
    """ReF-ER Eqs. 6-8: with Q := V, V^tbc_t = V_t + rho-bar_t (Q^ret_t - V_t)."""
    w = random_windows(seed)
    r, d, v, nv, rho = jnp_args(w, ("rewards", "discounts", "values", "next_values",
                                    "importance_ratios"))
    q_ret = returns.retrace(r, d, v, nv, rho, mask=w["mask"])
    want = np.nan_to_num(w["values"] + np.minimum(1.0, w["importance_ratios"])
                         * (np.asarray(q_ret) - w["values"]))
    check(returns.v_tbc(r, d, v, nv, rho, mask=w["mask"]), want, w["mask"])


def test_bad_arguments_raise():
    x = jnp.zeros((5, 3))
    with pytest.raises(ValueError, match="n must be"):
        returns.n_step_returns(x, x, x, 0)
    with pytest.raises(ValueError, match="next_values"):
        returns.lambda_returns(x, x, jnp.zeros((5, 2)), 0.5)
    with pytest.raises(ValueError, match="mask"):
        returns.lambda_returns(x, x, x, 0.5, mask=jnp.ones((4, 3)))
    with pytest.raises(ValueError, match="action_dims"):
        returns.retrace(x, x, x, x, x, action_dims=0)


# --------------------------------------------------------------------------- rlax
def per_run(w, fn):
    """fn(s, e, b) -> the rlax result for one run; assembled into [T, B], 0 on padding."""
    out = np.zeros(w["mask"].shape)
    for b in range(w["mask"].shape[1]):
        for s, e in runs_of(w["mask"][:, b] > 0, w["episode_ends"][:, b]):
            out[s:e, b] = np.asarray(fn(s, e, b))
    return out


def col(w, name, s, e, b):
    return jnp.asarray(w[name][s:e, b], jnp.float32)


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_equal_to_rlax_lambda_n_step_and_q_lambda(seed):
    rlax = pytest.importorskip("rlax")
    w = random_windows(seed)
    args = jnp_args(w, BASE)
    for lam in (0.0, 0.7, 1.0):
        want = per_run(w, lambda s, e, b, lam=lam: rlax.lambda_returns(
            *(col(w, k, s, e, b) for k in BASE), lam))
        check(returns.lambda_returns(*args, lam, mask=w["mask"]), want, w["mask"])
    for n in (1, 3, 12):  # 12 >= T: the whole run, bootstrapped at its end
        want = per_run(w, lambda s, e, b, n=n: rlax.n_step_bootstrapped_returns(
            *(col(w, k, s, e, b) for k in BASE), n))
        check(returns.n_step_returns(*args, n, mask=w["mask"]), want, w["mask"])
    # Peng's Q(lambda): rlax.q_lambda returns target - Q(s_t, a_t)
    num_actions = w["next_q_values"].shape[-1]

    def q_lambda_target(s, e, b):
        q_tm1 = jnp.zeros((e - s, num_actions))
        a_tm1 = jnp.zeros((e - s,), jnp.int32)
        q_t = jnp.asarray(w["next_q_values"][s:e, b], jnp.float32)
        return rlax.q_lambda(q_tm1, a_tm1, col(w, "rewards", s, e, b),
                             col(w, "discounts", s, e, b), q_t, 0.8)

    got = returns.peng_q_lambda(*jnp_args(w, ("rewards", "discounts", "next_q_values")), 0.8,
                                mask=w["mask"])
    check(got, per_run(w, q_lambda_target), w["mask"])


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_equal_to_rlax_retrace_continuous_and_q_opc(seed):
    rlax = pytest.importorskip("rlax")
    w = random_windows(seed)
    names = ("rewards", "discounts", "q_taken", "next_values")
    args = jnp_args(w, names)
    for lam in (1.0, 0.9):
        # rlax.retrace_continuous returns Q^ret - q_tm1; its q_t, log_rhos are steps t + 1
        def target(s, e, b, lam=lam):
            q = col(w, "q_taken", s, e, b)
            log_rhos = jnp.log(col(w, "importance_ratios", s, e, b))
            error = rlax.retrace_continuous(
                q, q[1:], col(w, "next_values", s, e, b), col(w, "rewards", s, e, b),
                col(w, "discounts", s, e, b), log_rhos[1:], lam)
            return error + q

        got = returns.retrace(*args, jnp.asarray(w["importance_ratios"], jnp.float32),
                              lambda_=lam, mask=w["mask"])
        check(got, per_run(w, target), w["mask"])
    # Q^opc is the general off-policy return with c_t = 1 (Harutyunyan et al.'s Q(lambda))
    want = per_run(w, lambda s, e, b: rlax.general_off_policy_returns_from_q_and_v(
        col(w, "q_taken", s, e, b)[1:], col(w, "next_values", s, e, b),
        col(w, "rewards", s, e, b), col(w, "discounts", s, e, b), jnp.ones((e - s - 1,))))
    check(returns.q_opc(*args, mask=w["mask"]), want, w["mask"])


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_equal_to_rlax_discrete_retrace(seed):
    """Discrete ACER: q_taken = Q(x_t, a_t), next_values = sum_a pi Q(x_{t+1}, a), rho from
    pi and mu; rlax.retrace takes the Q-values and both policies of x_0..x_T."""
    rlax = pytest.importorskip("rlax")
    w = random_windows(seed)
    T, B = w["mask"].shape
    num_actions = 5
    rng = np.random.default_rng(seed + 50)
    q = rng.normal(size=(T + 1, B, num_actions))
    pi = rng.dirichlet(np.ones(num_actions), size=(T + 1, B))
    mu = 0.5 * rng.dirichlet(np.ones(num_actions), size=(T + 1, B)) + 0.1  # mu >= 0.1
    mu /= mu.sum(-1, keepdims=True)
    actions = rng.integers(0, num_actions, size=(T + 1, B))
    taken = np.take_along_axis(q, actions[..., None], -1)[..., 0]
    rho = (np.take_along_axis(pi, actions[..., None], -1)
           / np.take_along_axis(mu, actions[..., None], -1))[..., 0]
    w["q_taken"], w["importance_ratios"] = taken[:T], rho[:T]
    w["next_values"] = (pi * q).sum(-1)[1:]

    def target(s, e, b):
        f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
        mu_taken = np.take_along_axis(mu[s + 1:e + 1, b], actions[s + 1:e + 1, b, None], -1)
        error = rlax.retrace(
            f32(q[s:e, b]), f32(q[s + 1:e + 1, b]), jnp.asarray(actions[s:e, b]),
            jnp.asarray(actions[s + 1:e + 1, b]), col(w, "rewards", s, e, b),
            col(w, "discounts", s, e, b), f32(pi[s + 1:e + 1, b]), f32(mu_taken[:, 0]), 1.0)
        return error + f32(taken[s:e, b])

    got = returns.retrace(*jnp_args(w, ("rewards", "discounts", "q_taken", "next_values",
                                        "importance_ratios")), mask=w["mask"])
    check(got, per_run(w, target), w["mask"])


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_v_tbc_equal_to_rlax_vtrace(seed):
    """V^tbc (ReF-ER Eq. 8) is V-trace with rho-bar = c-bar = min(1, rho) (values consistent:
    next_values[t] = values[t + 1] inside an episode, as random_windows makes them)."""
    rlax = pytest.importorskip("rlax")
    w = random_windows(seed)

    def target(s, e, b):
        v = col(w, "values", s, e, b)
        error = rlax.vtrace(v, col(w, "next_values", s, e, b), col(w, "rewards", s, e, b),
                            col(w, "discounts", s, e, b), col(w, "importance_ratios", s, e, b))
        return error + v

    names = ("rewards", "discounts", "values", "next_values", "importance_ratios")
    check(returns.v_tbc(*jnp_args(w, names), mask=w["mask"]), per_run(w, target), w["mask"])
