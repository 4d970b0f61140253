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
import numpy as np

from offpolicy.config import INIT_SCHEMES

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "softsign": jax.nn.soft_sign}
OUTPUT_SCALE = 1e-3

hidden_init = nn.initializers.orthogonal(1.0)
zeros = nn.initializers.zeros


def final_init(scale: float = OUTPUT_SCALE):
    return nn.initializers.orthogonal(scale)


def _uniform(bound: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)
    return init




def initializers(scheme: str, output: bool, fan_in: int, out_scale: float = OUTPUT_SCALE):
    """(kernel_init, bias_init) of a linear layer by scheme name:

    * orthogonal: DeepRL (the ACE authors' code): orthogonal, gain 1; output layers gain
      ``out_scale`` (1e-3); zero biases;
    * refer: ReF-ER App. A: Glorot uniform (the paper prints 6/sqrt(fan_in + fan_out), a typo
      for Glorot's sqrt(6 / (fan_in + fan_out)), the paper it cites); output layers
      U(+-0.1/sqrt(fan_in)); zero biases;
    * lillicrap: DDPG (Lillicrap et al. 2016, Sec. 7): weights and biases U(+-1/sqrt(fan_in)),
      output layers U(+-3e-3);
    * torch: PyTorch's nn.Linear default (SB3): weights and biases U(+-1/sqrt(fan_in)), output
      layers alike;
    * flax: Flax's nn.Dense default (SBX): LeCun normal weights, zero biases.
    """
    fan = 1.0 / float(np.sqrt(fan_in))
    if scheme == "orthogonal":
        return (nn.initializers.orthogonal(out_scale if output else 1.0), zeros)
    if scheme == "refer":
        return (_uniform(0.1 * fan) if output else nn.initializers.glorot_uniform(), zeros)
    if scheme == "lillicrap":
        return (_uniform(3e-3), _uniform(3e-3)) if output else (_uniform(fan), _uniform(fan))
    if scheme == "torch":
        return _uniform(fan), _uniform(fan)
    if scheme == "flax":
        return nn.initializers.lecun_normal(), zeros
    raise ValueError(f"unknown init scheme {scheme!r} (valid: {', '.join(INIT_SCHEMES)})")


class Dense(nn.Module):
    """A linear layer initialised by scheme (``initializers``); named like flax's Dense, so
    parameter trees keep their ``Dense_i`` names."""

    features: int
    scheme: str = "orthogonal"
    output: bool = False
    out_scale: float = OUTPUT_SCALE

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k_init, b_init = initializers(self.scheme, self.output, x.shape[-1], self.out_scale)
        kernel = self.param("kernel", k_init, (x.shape[-1], self.features), jnp.float32)
        bias = self.param("bias", b_init, (self.features,), jnp.float32)
        return x @ kernel + bias


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
        for h in self.hidden:
            x = act(Dense(h, self.init_scheme)(x))
        if self.out is not None:
            x = Dense(self.out, self.init_scheme, output=True, out_scale=self.out_scale)(x)
        return x


def softplus_init(value: float):
    """Initialiser of a raw parameter that ``jax.nn.softplus`` maps to ``value`` (> 0): the
    learned, state-independent std of V-RACER's and ACER's Gaussian policies."""
    return nn.initializers.constant(float(np.log(np.expm1(value))))


def l2_kernels(params) -> jax.Array:
    """Sum of squared kernel weights (biases excluded), for the critic's L2 penalty."""
    leaves = jax.tree_util.tree_leaves_with_path(params)
    sq = [jnp.sum(v**2) for p, v in leaves if "kernel" in jax.tree_util.keystr(p)]
    return sum(sq) if sq else jnp.zeros(())


def soft_update(target, online, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree_util.tree_map(lambda t, o: t + tau * (o - t), target, online)


def is_image(obs_shape: Sequence[int]) -> bool:
    """Whether observations of this shape are frames [H, W, C] (3-D: ``make_env`` keeps only
    uint8 images unflattened), for which an agent puts a :class:`NatureCNN` torso first."""
    return len(tuple(obs_shape)) == 3


def use_cnn(torso: str, obs_shape: Sequence[int], section: str) -> bool:
    """Whether an agent's ``--<section>.torso`` choice (``auto``, ``mlp`` or ``cnn``) puts the
    :class:`NatureCNN` first for observations of ``obs_shape``; a choice that cannot take
    them is one line (``auto``: the CNN exactly for frames)."""
    from offpolicy.errors import OffpolicyError

    image = is_image(obs_shape)
    cnn = torso == "cnn" or (torso == "auto" and image)
    shape = tuple(obs_shape)
    if image and not cnn:
        raise OffpolicyError(f"--{section}.torso mlp cannot take image observations {shape}: "
                             f"use --{section}.torso cnn (or auto)")
    if cnn and not image:
        raise OffpolicyError(f"--{section}.torso cnn needs image observations (H, W, C); this "
                             f"env gives {shape}")
    return cnn


class NatureCNN(nn.Module):
    """The DQN torso (Mnih et al. 2015, Methods "Model architecture"; the ACER paper's Atari
    network, Wang et al. 2017, Sec. 4): conv 32 8x8 stride 4, conv 64 4x4 stride 2, conv 64
    3x3 stride 1 (VALID padding), dense 512, a ReLU after every layer.

    ``obs``: [..., H, W, C] frames, channels last, any leading batch axes (e.g. [T+1, B, 84,
    84, 4] sequences); uint8 is scaled by 1/255 here, a float input is taken as already in
    [0, 1]. Returns [..., 512] features. On 84x84 frames the convolutions give 20x20x32,
    9x9x64, 7x7x64 (3136 features into the dense layer). Every layer is initialised by
    ``init_scheme`` (:func:`initializers`, as hidden layers: orthogonal gain 1 by default).
    """

    features: int = 512
    init_scheme: str = "orthogonal"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        lead, frame = obs.shape[:-3], obs.shape[-3:]
        x = obs.reshape((-1, *frame))
        x = x.astype(jnp.float32) / 255.0 if obs.dtype == jnp.uint8 else x.astype(jnp.float32)
        for channels, size, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            k_init, b_init = initializers(self.init_scheme, False, size * size * x.shape[-1])
            x = nn.relu(nn.Conv(channels, (size, size), (stride, stride), padding="VALID",
                                kernel_init=k_init, bias_init=b_init)(x))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(Dense(self.features, self.init_scheme)(x))
        return x.reshape((*lead, self.features))


class CriticEnsemble(nn.Module):
    """``num`` independent critics Q_i(s, a) = MLP_i([s, a]) as one module. The first layers
    of all critics are one [in, num x h] matrix product (they read the same input); the later
    layers run as one batched product per layer (``nn.vmap``, parameters stacked on a leading
    axis). Returns [num, B]. TD3's and SAC's twin critics (num = 2)."""

    num: int
    hidden: Sequence[int]
    activation: str = "relu"
    init_scheme: str = "orthogonal"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        first, rest = self.hidden[0], tuple(self.hidden[1:])
        x = jnp.concatenate([obs, action], axis=-1)
        h = ACTIVATIONS[self.activation](Dense(self.num * first, self.init_scheme)(x))
        h = jnp.moveaxis(h.reshape(*h.shape[:-1], self.num, first), -2, 0)  # [num, B, h]
        critics = nn.vmap(MLP, variable_axes={"params": 0}, split_rngs={"params": True},
                          in_axes=0, out_axes=0, axis_size=self.num)
        return critics(rest, self.activation, out=1, init_scheme=self.init_scheme)(h)[..., 0]


class Torso(nn.Module):
    """Observation features: an MLP of ``hidden`` layers, or the :class:`NatureCNN` for image
    stacks (ACER's and DQN's feature extractor)."""

    hidden: tuple[int, ...]
    activation: str
    cnn: bool
    init_scheme: str = "orthogonal"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        if self.cnn:
            return NatureCNN(init_scheme=self.init_scheme)(obs)
        return MLP(self.hidden, self.activation, init_scheme=self.init_scheme)(obs)
