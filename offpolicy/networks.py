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

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu}
OUTPUT_SCALE = 1e-3

hidden_init = nn.initializers.orthogonal(1.0)
zeros = nn.initializers.zeros


def final_init(scale: float = OUTPUT_SCALE):
    return nn.initializers.orthogonal(scale)


class MLP(nn.Module):
    """Hidden layers with ``activation``; an optional linear output layer of ``out`` units."""

    hidden: Sequence[int]
    activation: str = "tanh"
    out: int | None = None
    out_scale: float = OUTPUT_SCALE

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for h in self.hidden:
            x = act(nn.Dense(h, kernel_init=hidden_init, bias_init=zeros)(x))
        if self.out is not None:
            x = nn.Dense(self.out, kernel_init=final_init(self.out_scale), bias_init=zeros)(x)
        return x


def l2_kernels(params) -> jax.Array:
    """Sum of squared kernel weights (biases excluded), for the critic's L2 penalty."""
    leaves = jax.tree_util.tree_leaves_with_path(params)
    sq = [jnp.sum(v**2) for p, v in leaves if "kernel" in jax.tree_util.keystr(p)]
    return sum(sq) if sq else jnp.zeros(())


def soft_update(target, online, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree_util.tree_map(lambda t, o: t + tau * (o - t), target, online)
