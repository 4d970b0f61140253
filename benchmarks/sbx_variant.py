"""SBX's TD3 with SB3's three update choices (issue 33's reverse ablation; bench venv only).

With SB3's settings, SBX's TD3 (sbx-rl 0.28) differs from SB3's TD3 and from ours
(``--preset sb3``) in three choices (benchmarks/README.md, "td3-sbx-ablation"):

1. its initial law: Flax's ``nn.Dense`` default (LeCun normal kernels, zero biases), where
   SB3's ``nn.Linear`` draws kernels and biases from U(-1/sqrt(fan_in), 1/sqrt(fan_in));
2. its targets, soft-updated after every critic update, where SB3 updates them only on the
   delayed steps (every ``policy_delay`` updates), after the actor step
   (Fujimoto et al. 2018, Algorithm 1);
3. its actor loss, -min(Q_1, Q_2), where SB3 (and the TD3 paper) ascend Q_1 alone.

``td3-sbx-ablation``'s ``td3-sb3-sbx`` puts all three into our TD3. This module does the
reverse: :class:`TD3SB3Choices` is SBX's TD3 (its loop, replay, critic update, networks,
optimisers and random streams, but for the initial draw, which takes its own key) with SB3's
three choices, so that one run of each tells
whether the three choices are what lifts SBX's TD3 on Hopper-v5 or whether the gap lies
elsewhere. SBX's halved critic loss stays (Adam all but cancels a constant factor).

The update is composed of SBX's own jitted pieces (``update_critic``, ``soft_update``); only
the order of the delayed step and the actor's loss are this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import sbx


def torch_linear_law(params: Any, key: jax.Array) -> Any:
    """``params`` (a Flax tree of ``nn.Dense`` layers, possibly stacked over critics on a
    leading axis) redrawn from PyTorch's ``nn.Linear`` default: kernel and bias both
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in the kernel's input width (its axis -2)."""

    def redraw(tree: Any, key: jax.Array) -> tuple[Any, jax.Array]:
        if not isinstance(tree, Mapping):
            return tree, key
        if "kernel" in tree and "bias" in tree:
            kernel, bias = tree["kernel"], tree["bias"]
            bound = 1.0 / np.sqrt(kernel.shape[-2])
            key, k_kernel, k_bias = jax.random.split(key, 3)
            return {**tree,
                    "kernel": jax.random.uniform(k_kernel, kernel.shape, kernel.dtype,
                                                 -bound, bound),
                    "bias": jax.random.uniform(k_bias, bias.shape, bias.dtype, -bound, bound),
                    }, key
        out = {}
        for name in sorted(tree):
            out[name], key = redraw(tree[name], key)
        return out, key

    return redraw(dict(params), key)[0]


class TD3SB3Choices(sbx.TD3):
    """SBX's TD3 with SB3's initial law, delayed targets and Q_1 actor loss (see the module
    docstring); everything else is SBX's."""

    def _setup_model(self) -> None:
        super()._setup_model()
        key = jax.random.PRNGKey(int(self.seed or 0) + 7919)
        k_actor, k_qf = jax.random.split(key)
        policy = self.policy
        actor = torch_linear_law(policy.actor_state.params, k_actor)
        qf = torch_linear_law(policy.qf_state.params, k_qf)
        # the targets start equal to the networks (SB3 copies them; SBX draws both alike)
        policy.actor_state = policy.actor_state.replace(
            params=actor, target_params=actor, opt_state=policy.actor_state.tx.init(actor))
        policy.qf_state = policy.qf_state.replace(
            params=qf, target_params=qf, opt_state=policy.qf_state.tx.init(qf))

    @staticmethod
    @jax.jit
    def update_actor_q1(actor_state, qf_state, observations: jax.Array, key: jax.Array):
        """SB3's actor step: ascend Q_1(s, mu(s)) (Fujimoto et al. 2018, Algorithm 1)."""
        key, dropout_key = jax.random.split(key, 2)

        def actor_loss(params):
            q = qf_state.apply_fn(qf_state.params, observations,
                                  actor_state.apply_fn(params, observations),
                                  rngs={"dropout": dropout_key})
            return -q[0].mean()  # the first critic of the stacked pair

        loss, grads = jax.value_and_grad(actor_loss)(actor_state.params)
        return actor_state.apply_gradients(grads=grads), loss, key

    @classmethod
    @partial(jax.jit, static_argnames=["cls", "gradient_steps", "policy_delay",
                                       "policy_delay_offset"])
    def _train(cls, tau, gradient_steps: int, data, policy_delay: int,
               policy_delay_offset: int, target_policy_noise, target_noise_clip, qf_state,
               actor_state, key):
        batch = data.observations.shape[0] // gradient_steps

        def one_update(i, carry):
            qf_state, actor_state, key, _, actor_loss = carry

            def part(x):
                return jax.lax.dynamic_slice_in_dim(x, i * batch, batch)

            qf_state, qf_loss, key = cls.update_critic(
                actor_state, qf_state, part(data.observations), part(data.actions),
                part(data.next_observations), part(data.rewards), part(data.dones),
                part(data.discounts), target_policy_noise, target_noise_clip, key)

            def delayed(operands):
                qf_state, actor_state, key, _ = operands
                actor_state, loss, key = cls.update_actor_q1(
                    actor_state, qf_state, part(data.observations), key)
                qf_state, actor_state = cls.soft_update(tau, qf_state, actor_state)
                return qf_state, actor_state, key, loss

            qf_state, actor_state, key, actor_loss = jax.lax.cond(
                (policy_delay_offset + i) % policy_delay == 0, delayed, lambda o: o,
                (qf_state, actor_state, key, actor_loss))
            return qf_state, actor_state, key, qf_loss, actor_loss

        zero = jnp.zeros((), jnp.float32)
        qf_state, actor_state, key, qf_loss, actor_loss = jax.lax.fori_loop(
            0, gradient_steps, one_update, (qf_state, actor_state, key, zero, zero))
        return qf_state, actor_state, key, (actor_loss, qf_loss)
