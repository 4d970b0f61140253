"""Flax (Linen) building blocks shared by the agents.

Initialisation follows the ACE authors' code (DeepRL, ``layer_init``): every layer orthogonal
with gain 1 and zero bias, the output layers of actors and critics with gain 1e-3 so that
initial actions and values start near zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "softsign": jax.nn.soft_sign}
OUTPUT_SCALE = 1e-3

hidden_init = nn.initializers.orthogonal(1.0)
zeros = nn.initializers.zeros


def final_init(scale: float = OUTPUT_SCALE):
    return nn.initializers.orthogonal(scale)


def uniform_fan_in(scale: float):
    """U[-scale / sqrt(fan_in), scale / sqrt(fan_in)] (ReF-ER App. A's output layers: 0.1)."""
    def init(key, shape, dtype=jnp.float32):
        bound = scale / jnp.sqrt(shape[0])
        return jax.random.uniform(key, shape, dtype, -bound, bound)
    return init


# hidden-layer and output-layer kernel initialisers by name (biases start at zero)
INITS = {
    # DeepRL (ACE authors' code): orthogonal, gain 1; outputs gain 1e-3
    "orthogonal": (hidden_init, final_init),
    # ReF-ER App. A: Glorot uniform (the paper prints 6/sqrt(fan_in + fan_out), a typo for
    # Glorot's sqrt(6 / (fan_in + fan_out)), the paper it cites); outputs U(+-0.1/sqrt(fan_in))
    "refer": (nn.initializers.glorot_uniform(), lambda scale: uniform_fan_in(0.1)),
}


class MLP(nn.Module):
    """Hidden layers with ``activation``; an optional linear output layer of ``out`` units."""

    hidden: Sequence[int]
    activation: str = "tanh"
    out: int | None = None
    out_scale: float = OUTPUT_SCALE
    init_scheme: str = "orthogonal"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        hidden_k, out_k = INITS[self.init_scheme]
        for h in self.hidden:
            x = act(nn.Dense(h, kernel_init=hidden_k, bias_init=zeros)(x))
        if self.out is not None:
            x = nn.Dense(self.out, kernel_init=out_k(self.out_scale), bias_init=zeros)(x)
        return x


def l2_kernels(params) -> jax.Array:
    """Sum of squared kernel weights (biases excluded), for the critic's L2 penalty."""
    leaves = jax.tree_util.tree_leaves_with_path(params)
    sq = [jnp.sum(v**2) for p, v in leaves if "kernel" in jax.tree_util.keystr(p)]
    return sum(sq) if sq else jnp.zeros(())


def soft_update(target, online, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree_util.tree_map(lambda t, o: t + tau * (o - t), target, online)
