"""The recurrent core (networks.RecurrentCore) against a plain NumPy loop on random inputs:
LSTM and GRU cells, resets inside a window, several layers, cores stacked in one carry,
sliding zero-state windows, the final state, and the burn-in's stopped gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offpolicy.networks import Context, RecurrentCore, core_state_size


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _np_step(kind, params, layers, cells, carry, x):
    """One step of the stacked cells in NumPy (float64), carry [S] -> (carry, h_top)."""
    per = 2 * cells if kind == "lstm" else cells
    new, inp = [], x
    for layer in range(layers):
        w_x = np.asarray(params[f"input_{layer}"], np.float64)
        w_h = np.asarray(params[f"recurrent_{layer}"], np.float64)
        b = np.asarray(params[f"bias_{layer}"], np.float64)
        h = carry[layer * per:layer * per + cells]
        if kind == "lstm":
            c = carry[layer * per + cells:(layer + 1) * per]
            z = inp @ w_x + b + h @ w_h
            i, f, g, o = np.split(z, 4)
            c = _sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            new += [h, c]
        else:
            xr, xu, xn = np.split(inp @ w_x + b, 3)
            hr, hu, hn = np.split(h @ w_h, 3)
            r, u = _sigmoid(xr + hr), _sigmoid(xu + hu)
            h = (1 - u) * np.tanh(xn + r * hn) + u * h
            new.append(h)
        inp = h
    return np.concatenate(new), inp


def _np_unroll(kind, params, layers, cells, obs, reset, carry):
    """Outputs [T, B, cells] and the final carry, one sequence at a time."""
    T, B = obs.shape[:2]
    out = np.zeros((T, B, cells))
    final = np.zeros_like(carry, dtype=np.float64)
    for b in range(B):
        state = np.asarray(carry[b], np.float64)
        for t in range(T):
            if reset[t, b]:
                state = np.zeros_like(state)
            state, out[t, b] = _np_step(kind, params, layers, cells, state, obs[t, b])
        final[b] = state
    return out, final


def _apply(core, params, x, final=False):
    """The core's apply, jitted (an eager scan would trace and compile on every call)."""
    return np.asarray(jax.jit(lambda p, c: core.apply({"params": p}, c, final=final))(params, x))


def _setup(kind, layers, cells, d=3, offset=0, seed=0):
    core = RecurrentCore(kind, layers, cells, offset=offset)
    params = core.init(jax.random.PRNGKey(seed), jnp.zeros((1, d)))["params"]
    rng = np.random.default_rng(seed)
    # larger biases than the zero init, so that every gate matters
    params = jax.tree_util.tree_map(lambda p: p + 0.3 * rng.standard_normal(p.shape), params)
    return core, params, rng


@pytest.mark.parametrize("kind,layers", [("lstm", 1), ("lstm", 2), ("gru", 1), ("gru", 2)])
def test_unroll_matches_numpy_loop_with_resets_and_offset(kind, layers):
    cells, d, T, B, offset = 5, 3, 9, 4, 7
    core, params, rng = _setup(kind, layers, cells, d, offset)
    size = core_state_size(kind, layers, cells)
    obs = rng.standard_normal((T, B, d)).astype(np.float32)
    reset = rng.random((T, B)) < 0.2
    carry = rng.standard_normal((B, offset + size + 2)).astype(np.float32)
    positions = rng.integers(0, T - 3, B).astype(np.int32)
    ctx = Context(obs, reset, carry, np.zeros(B, np.int32), positions, span=3)
    out = _apply(core, params, ctx)
    ref, final = _np_unroll(kind, params, layers, cells, obs, reset,
                            carry[:, offset:offset + size])
    want = np.stack([ref[positions + k, np.arange(B)] for k in range(3)])
    np.testing.assert_allclose(out, want, atol=1e-5)
    one = Context(obs, reset, carry, np.zeros(B, np.int32), positions)  # span 0: no time axis
    np.testing.assert_allclose(_apply(core, params, one), want[0], atol=1e-5)
    got_final = _apply(core, params, ctx, final=True)
    np.testing.assert_allclose(got_final, final, atol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_sliding_windows_start_every_output_from_zero(kind):
    """window W: output j is the unroll from zero over positions max(0, j-W+1)..j, with a
    reset inside the window honoured."""
    cells, d, T, B, W = 4, 2, 10, 3, 4
    core, params, rng = _setup(kind, 2, cells, d)
    obs = rng.standard_normal((T, B, d)).astype(np.float32)
    reset = np.zeros((T, B), bool)
    reset[6, 1] = True
    carry = rng.standard_normal((B, core_state_size(kind, 2, cells))).astype(np.float32)
    positions = np.array([0, 2, 5], np.int32)
    ctx = Context(obs, reset, carry, np.zeros(B, np.int32), positions, span=5, window=W)
    out = _apply(core, params, ctx)
    for k in range(5):
        for b in range(B):
            j = positions[b] + k
            lo = max(0, j - W + 1)
            zero = np.zeros((1, carry.shape[1]))
            ref, _ = _np_unroll(kind, params, 2, cells, obs[lo:j + 1, b:b + 1],
                                reset[lo:j + 1, b:b + 1], zero)
            np.testing.assert_allclose(out[k, b], ref[-1, 0], atol=1e-5)


def test_plain_array_is_one_step_from_zero():
    core, params, rng = _setup("lstm", 2, 6, 3)
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    out = _apply(core, params, x)
    assert out.shape == (2, 5, 6)
    zero = np.zeros(core_state_size("lstm", 2, 6))
    _, h = _np_step("lstm", params, 2, 6, zero, x[1, 3].astype(np.float64))
    np.testing.assert_allclose(out[1, 3], h, atol=1e-5)


def test_burn_in_positions_get_no_gradient():
    """With grad_from g, the loss at a position after g does not move through the inputs
    before g, but does through the ones from g on."""
    core, params, rng = _setup("lstm", 1, 4, 2)
    T, B = 8, 2
    obs = rng.standard_normal((T, B, 2)).astype(np.float32)
    carry = np.zeros((B, core.state_size), np.float32)
    grad_from = np.array([3, 5], np.int32)

    def loss(o):
        ctx = Context(o, np.zeros((T, B), bool), carry, grad_from,
                      np.full(B, T - 1, np.int32))
        return jnp.sum(core.apply({"params": params}, ctx))

    g = np.asarray(jax.jit(jax.grad(loss))(jnp.asarray(obs)))
    for b in range(B):
        assert np.all(g[:grad_from[b], b] == 0)
        assert np.all(np.abs(g[grad_from[b]:, b]).sum(-1) > 0)
