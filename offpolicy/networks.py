"""Flax (Linen) building blocks shared by the agents.

Initialisation follows the ACE authors' code (DeepRL, ``layer_init``): every layer orthogonal
with gain 1 and zero bias, the output layers of actors and critics with gain 1e-3 so that
initial actions and values start near zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

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




def initializers(scheme: str, output: bool, fan_in: int, out_scale: float = OUTPUT_SCALE,
                 fan_out: int | None = None):
    """(kernel_init, bias_init) of a linear layer of ``fan_in`` inputs and ``fan_out`` units by
    scheme name:

    * orthogonal: DeepRL (the ACE authors' code): orthogonal, gain 1; output layers gain
      ``out_scale`` (1e-3); zero biases;
    * refer: ReF-ER App. A: Glorot uniform (the paper prints 6/sqrt(fan_in + fan_out), a typo
      for Glorot's sqrt(6 / (fan_in + fan_out)), the paper it cites); output layers
      U(+-0.1/sqrt(fan_in)); zero biases;
    * smarties: as refer, with the biases drawn as the weights (the ReF-ER authors' smarties at
      edaef91, Network/Layer_Base.h: the paper is silent on biases);
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
    if scheme == "smarties":
        if output:
            return _uniform(0.1 * fan), _uniform(0.1 * fan)
        glorot = float(np.sqrt(6.0 / (fan_in + (fan_out or 0))))
        return _uniform(glorot), _uniform(glorot)
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
        k_init, b_init = initializers(self.scheme, self.output, x.shape[-1], self.out_scale,
                                      self.features)
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


def l2_kernels(params, biases: bool = False) -> jax.Array:
    """Sum of squared kernel weights (and, with ``biases``, of the biases too), for the
    critic's L2 penalty."""
    leaves = jax.tree_util.tree_leaves_with_path(params)
    names = ("kernel", "bias") if biases else ("kernel",)
    sq = [jnp.sum(v**2) for p, v in leaves if any(n in jax.tree_util.keystr(p) for n in names)]
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
    core: CoreConfig | None = None  # a recurrent core the critics share, before the action

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        first, rest = self.hidden[0], tuple(self.hidden[1:])
        x = jnp.concatenate([core_features(self.core, obs), action], axis=-1)
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


# ---------------------------------------------------------------------- recurrent cores
CORE_KINDS = ("lstm", "gru")
CORE_STARTS = ("zero", "stored")
WINDOW_UNROLL = 16  # sliding windows up to this long compile as straight-line code


def core_state_size(kind: str, layers: int, cells: int) -> int:
    """Floats in one core's state: per layer (h, c) for an LSTM, h for a GRU."""
    return layers * cells * (2 if kind == "lstm" else 1)


@struct.dataclass
class Context:
    """What a recurrent core reads: a time-major window of observations and where to start.

    ``obs`` [T, B, *obs]: the window (position 0 first); ``reset`` [T, B]: the state restarts
    from zero before this position (an episode's first step); ``carry`` [B, S]: every core's
    state before position 0, flat (each core reads its own slice); ``grad_from`` [B]: no
    gradient flows back into the state before this position (R2D2's burn-in); ``positions``
    [B]: the first position whose output is wanted, and ``span`` how many (0: one, without a
    time axis: [B, cells]; n: [n, B, cells]).

    ``window`` W > 0 computes every wanted output from a zero state over its own last W
    positions (the ones before position 0 do not exist: the window starts at 0 there), as
    the ReF-ER authors' smarties does; 0 unrolls the whole window once from ``carry``.
    """

    obs: jax.Array
    reset: jax.Array
    carry: jax.Array
    grad_from: jax.Array
    positions: jax.Array
    span: int = struct.field(pytree_node=False, default=0)
    window: int = struct.field(pytree_node=False, default=0)

    @property
    def batch_size(self) -> int:
        return self.obs.shape[1]


def _blockwise_orthogonal(blocks: int):
    """Recurrent kernels [cells, blocks x cells]: an orthogonal matrix per gate."""
    base = nn.initializers.orthogonal(1.0)

    def init(key, shape, dtype=jnp.float32):
        keys = jax.random.split(key, blocks)
        return jnp.concatenate([base(k, (shape[0], shape[0]), dtype) for k in keys], axis=-1)
    return init


class RecurrentCore(nn.Module):
    """A stack of ``layers`` LSTM or GRU layers of ``cells`` units in front of a network:
    obs -> features [..., cells] (the last layer's output h).

    LSTM (Hochreiter & Schmidhuber 1997, with the forget gate of Gers et al. 2000 and its
    bias 1, Jozefowicz et al. 2015), per layer with input x (the observation, or the layer
    below's h):
      i, f, g, o = split(W_x x + W_h h + b);  c' = s(f + 1) c + s(i) tanh(g);  h' = s(o) tanh(c')
    GRU (Cho et al. 2014; the reset gate applied after the recurrent product, as PyTorch and
    Flax do, with one bias per gate):
      r = s(W_xr x + W_hr h + b_r);  z = s(W_xz x + W_hz h + b_z)
      n = tanh(W_xn x + b_n + r (W_hn h));  h' = (1 - z) n + z h
    s is the logistic function. Input kernels are initialised by ``init_scheme``, recurrent
    kernels orthogonally per gate, biases at zero.

    Called on a :class:`Context` (acting and learning); a plain array [..., d] is taken as
    one step from a zero state (``init``). ``final=True`` returns the state after the whole
    window instead ([B, S] of this core; acting advances its carry with it). ``offset``: where
    this core's state starts in ``Context.carry`` (an agent with several cores stacks them).
    """

    kind: str
    layers: int
    cells: int
    offset: int = 0
    init_scheme: str = "orthogonal"

    @property
    def state_size(self) -> int:
        return core_state_size(self.kind, self.layers, self.cells)

    @nn.compact
    def __call__(self, x, final: bool = False):
        lead = None
        if not isinstance(x, Context):  # one step from a zero state, any leading axes
            lead = x.shape[:-1]
            flat = x.reshape((1, -1, x.shape[-1]))
            n = flat.shape[1]
            x = Context(flat, jnp.zeros((1, n), bool),
                        jnp.zeros((n, self.offset + self.state_size), jnp.float32),
                        jnp.zeros((n,), jnp.int32), jnp.zeros((n,), jnp.int32))
        gates = 4 if self.kind == "lstm" else 3
        c = self.cells
        weights = []
        for layer in range(self.layers):
            d_in = x.obs.shape[-1] if layer == 0 else c
            k_init, _ = initializers(self.init_scheme, False, d_in)
            weights.append((self.param(f"input_{layer}", k_init, (d_in, gates * c)),
                            self.param(f"recurrent_{layer}", _blockwise_orthogonal(gates),
                                       (c, gates * c)),
                            self.param(f"bias_{layer}", zeros, (gates * c,))))
        carry = x.carry[:, self.offset:self.offset + self.state_size]
        if final:
            return self._unroll(weights, x.obs, x.reset, carry, x.grad_from)[1]
        count = max(x.span, 1)
        wanted = x.positions[None, :] + jnp.arange(count)[:, None]  # [n, B]
        if x.window:
            out = self._windows(weights, x, wanted)
        else:
            outs, _ = self._unroll(weights, x.obs, x.reset, carry, x.grad_from)
            out = jnp.take_along_axis(outs, wanted[..., None], axis=0)
        if lead is not None:
            return out[0].reshape((*lead, c))
        return out if x.span else out[0]

    def _cell(self, weights, carry, x_proj):
        """One time step of every layer: carry [N, S], x_proj [N, G c] (the first layer's
        input product, hoisted out of the scan) -> (new carry, the top layer's h)."""
        c, lstm = self.cells, self.kind == "lstm"
        per = 2 * c if lstm else c
        new, inp = [], None
        for layer, (w_x, w_h, b) in enumerate(weights):
            state = carry[:, layer * per:(layer + 1) * per]
            h = state[:, :c]
            xz = x_proj if layer == 0 else inp @ w_x + b
            if lstm:
                i, f, g, o = jnp.split(xz + h @ w_h, 4, axis=-1)
                cell = jax.nn.sigmoid(f + 1.0) * state[:, c:] + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(cell)
                new += [h, cell]
            else:
                xr, xu, xn = jnp.split(xz, 3, axis=-1)
                hr, hu, hn = jnp.split(h @ w_h, 3, axis=-1)
                r, u = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xu + hu)
                h = (1.0 - u) * jnp.tanh(xn + r * hn) + u * h
                new.append(h)
            inp = h
        return jnp.concatenate(new, axis=-1), inp

    def _unroll(self, weights, obs, reset, carry, grad_from, unroll: int = 1):
        """Outputs [T, N, cells] and the final state of one unroll from ``carry``
        (``unroll``: time steps per iteration of the compiled loop)."""
        w_x, _, b = weights[0]
        x_proj = obs.astype(jnp.float32) @ w_x + b  # [T, N, G c]: one product for all steps
        steps = jnp.arange(obs.shape[0])

        def step(carry, inputs):
            t, xp, r = inputs
            carry = jnp.where(r[:, None], 0.0, carry)
            carry = jnp.where((t == grad_from)[:, None], jax.lax.stop_gradient(carry), carry)
            carry, out = self._cell(weights, carry, xp)
            return carry, out

        carry, outs = jax.lax.scan(step, carry, (steps, x_proj, reset), unroll=unroll)
        return outs, carry

    def _windows(self, weights, x: Context, wanted):
        """Each wanted output from a zero state over its own last ``window`` positions:
        windows [W, n B] gathered from the context and unrolled side by side."""
        w = x.window
        n, batch = wanted.shape
        idx = wanted[None] - (w - 1) + jnp.arange(w)[:, None, None]  # [W, n, B]
        first = jnp.maximum(wanted - (w - 1), 0)[None]  # where each window really starts
        clipped = jnp.maximum(idx, 0)
        cols = jnp.broadcast_to(jnp.arange(batch), idx.shape)
        obs = x.obs[clipped, cols]  # [W, n, B, d]
        reset = x.reset[clipped, cols] | (idx == first)
        obs = obs.reshape((w, n * batch, *obs.shape[3:]))
        reset = reset.reshape((w, n * batch))
        zero = jnp.zeros((n * batch, self.state_size), jnp.float32)
        never = jnp.full((n * batch,), -1, jnp.int32)
        # short windows unrolled whole: XLA:CPU's loop costs more per step than the small
        # products inside it (1.3-1.8x the update's speed at W = 16; the compile is cached)
        outs, _ = self._unroll(weights, obs, reset, zero, never, unroll=min(w, WINDOW_UNROLL))
        return outs[-1].reshape((n, batch, self.cells))


class CoreConfig(NamedTuple):
    """A network's core, as a (hashable) Flax module attribute."""

    kind: str
    layers: int
    cells: int
    offset: int = 0
    init_scheme: str = "orthogonal"

    def module(self, name: str | None = "core") -> RecurrentCore:
        return RecurrentCore(self.kind, self.layers, self.cells, self.offset, self.init_scheme,
                             name=name)


def core_features(core: CoreConfig | None, obs):
    """Inside a network's ``nn.compact`` call: the core's features of ``obs`` (an array or a
    :class:`Context`), or ``obs`` itself without a core. The core's parameters are the
    network's ``core`` entry."""
    return obs if core is None else core.module()(obs)
