"""benchmarks/gemm_shapes.py: the dots it extracts, their FLOPs and its NumPy equivalents."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.gemm_shapes import dot_flops, dot_generals, einsum_spec  # noqa: E402


def _loss(w1, w2, x):
    h = jnp.tanh(x @ w1)  # [B, K, H]: a dot with two free lhs dims
    return jnp.sum(jnp.einsum("bkh,hm->bkm", h, w2) ** 2)


def test_extracts_forward_and_backward_dots_with_their_flops_by_hand():
    rng = np.random.default_rng(0)
    w1 = jnp.asarray(rng.standard_normal((7, 5), dtype=np.float32))
    w2 = jnp.asarray(rng.standard_normal((5, 3), dtype=np.float32))
    x = jnp.asarray(rng.standard_normal((4, 2, 7), dtype=np.float32))
    grad = jax.grad(_loss, argnums=(0, 1))
    dots = dot_generals(jax.make_jaxpr(grad)(w1, w2, x).jaxpr)
    # forward 2, backward: dL/dh and dL/dw2 for the second, dL/dw1 for the first
    assert len(dots) == 5
    ours = sum(dot_flops(*d) for d in dots)
    by_hand = 2 * (8 * 7 * 5 + 8 * 5 * 3) + 2 * (8 * 3 * 5 + 5 * 8 * 3) + 2 * 7 * 8 * 5
    assert ours == by_hand


def test_einsum_spec_matches_dot_general_on_random_inputs():
    rng = np.random.default_rng(1)
    cases = [((4, 6), (6, 3), (((1,), (0,)), ((), ()))),
             ((5, 2, 6), (6, 3), (((2,), (0,)), ((), ()))),
             ((6, 4), (6, 3), (((0,), (0,)), ((), ()))),  # weight gradient: K is the batch
             ((2, 4, 6), (2, 6, 3), (((2,), (1,)), ((0,), (0,))))]  # batched
    for lhs, rhs, dn in cases:
        a = rng.standard_normal(lhs, dtype=np.float32)
        b = rng.standard_normal(rhs, dtype=np.float32)
        want = np.asarray(jax.lax.dot_general(a, b, dn))
        got = np.einsum(einsum_spec(len(lhs), len(rhs), dn), a, b)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        out = want.size
        k = int(np.prod([lhs[i] for i in dn[0][0]]))
        assert dot_flops(lhs, rhs, dn) == 2 * out * k
