"""Issue 33's loop ablations: SB3's TD3 (and SAC) collection loop driving our jitted update.

``benchmarks/peers.py learn --lib sb3 --algo td3 --update ours [--init ours]`` builds SB3's TD3
as ``sb3-td3`` does (its env loop, 100 uniform warm-up steps, Gaussian exploration N(0, 0.1^2)
clipped to the box, its replay buffer and sampling, updates from step 101, its evaluation) and
replaces what ``TD3.train`` computes with our update (``offpolicy.agents.td3``, ``--preset
sb3``, one jitted call per batch). After each update our actor's weights are copied into SB3's
actor, which acts and is evaluated. ``--init own`` starts our networks from SB3's initial
weights (copied in, as benchmarks/update_parity.py does); ``--init ours`` from our own
initialiser (``--td3.init torch``: the same law, other draws).

``--algo sac --init ours`` (``sb3-sac-ourinit``) does the same for SB3's SAC: its actor (torso,
mean and log-std heads) and twin critics start from our SAC's initial draw (``--preset sb3``:
torch's law), everything else SB3's. ``--algo sac --update ours`` (``sb3-sac-ourupdate``) runs
SB3's SAC loop (100 uniform warm-up steps, actions sampled by SB3's actor with torch's
generator, its replay buffer and sampling, updates from step 101, its evaluation) with our SAC
update (critics, actor and temperature: ``offpolicy.agents.sac``, ``--preset sb3``); after each
update our actor (torso and both heads) is copied into SB3's, which acts.

Reading: if ``sb3-td3-ourupdate`` learns like ``sb3-td3``, the gap between ``td3-sb3`` and
``sb3-td3`` lies in our loop (collection, replay, the start of updates); if it learns like
``td3-sb3``, it lies in the update as compiled in float32 (results/update_parity_td3.md shows
the float64 updates equal). ``--init ours`` against ``--init own`` separates the initial draw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from update_parity import ours_agent, sac_to_ours, torch_to_ours

if TYPE_CHECKING:
    from offpolicy.agents.types import ActorCritic

INITS = ("own", "ours")


def _linear_layers(mu) -> list:
    return [m for m in mu if hasattr(m, "weight")]


def _load(layer, kernel, bias) -> None:
    import torch

    layer.weight.copy_(torch.from_numpy(np.asarray(kernel).T.copy()))
    layer.bias.copy_(torch.from_numpy(np.asarray(bias).copy()))


def actor_to_torch(actor: dict, mu) -> None:
    """Our actor's parameter tree into SB3's actor layers ``mu``, in place (under no_grad)."""
    (mlp,) = actor.values()
    for i, layer in enumerate(_linear_layers(mu)):
        _load(layer, mlp[f"Dense_{i}"]["kernel"], mlp[f"Dense_{i}"]["bias"])


def critics_to_torch(c: dict, q_networks) -> None:
    """Our twin critics' tree ``c`` into SB3's ``q_networks``, in place (under no_grad): the
    fused first layer's columns q*h:(q+1)*h are critic q's, the rest is stacked on axis 0."""
    (vm_name,) = [k for k in c if k != "Dense_0"]
    for q, net in enumerate(q_networks):
        layers = _linear_layers(net)
        h = layers[0].weight.shape[0]
        first = c["Dense_0"]
        _load(layers[0], np.asarray(first["kernel"])[:, q * h:(q + 1) * h],
              np.asarray(first["bias"])[q * h:(q + 1) * h])
        for j, layer in enumerate(layers[1:]):
            d = c[vm_name][f"Dense_{j}"]
            _load(layer, np.asarray(d["kernel"])[q], np.asarray(d["bias"])[q])


def ours_to_torch(params: ActorCritic, mu, q_networks) -> None:
    """Our TD3 parameter trees (``params``: actor and twin critics) into SB3's actor layers
    ``mu`` and critics ``q_networks``, in place: the inverse of update_parity's
    ``torch_to_ours``."""
    import torch

    with torch.no_grad():
        actor_to_torch(params.actor, mu)
        critics_to_torch(params.critic, q_networks)


def sac_actor_to_torch(tree: dict, actor) -> None:
    """Our Gaussian policy's tree into SB3's SAC ``actor`` (``latent_pi``, then the ``mu`` and
    ``log_std`` heads: our last layer's columns [:m] and [m:]), in place (under no_grad): the
    inverse of update_parity's ``sac_actor_to_ours``."""
    (mlp,) = tree.values()
    torso = _linear_layers(actor.latent_pi)
    last = mlp[f"Dense_{len(torso)}"]
    w, b = np.asarray(last["kernel"]), np.asarray(last["bias"])
    m = w.shape[1] // 2
    for i, layer in enumerate(torso):
        _load(layer, mlp[f"Dense_{i}"]["kernel"], mlp[f"Dense_{i}"]["bias"])
    _load(actor.mu, w[:, :m], b[:m])
    _load(actor.log_std, w[:, m:], b[m:])


def sac_to_torch(params: ActorCritic, actor, q_networks) -> None:
    """Our SAC parameter trees into SB3's SAC ``actor`` and critics, in place: the inverse of
    update_parity's ``sac_actor_to_ours`` and ``critics_to_ours``."""
    import torch

    with torch.no_grad():
        sac_actor_to_torch(params.actor, actor)
        critics_to_torch(params.critic, q_networks)


def our_initial_draw(model, env_id: str, seed: int, algo: str = "td3") -> None:
    """``--update own --init ours``: SB3's TD3 or SAC from our initialiser's draw (actor,
    critics and their targets), everything else SB3's; separates the draw from the update
    and the loop. The copy is read back into our trees and checked leaf by leaf."""
    import jax

    params = ours_agent(env_id, algo).init(jax.random.PRNGKey(seed)).params
    if algo == "td3":
        ours_to_torch(params, model.actor.mu, model.critic.q_networks)
        back = torch_to_ours(model.actor.mu, model.critic.q_networks, params)
        model.actor_target.load_state_dict(model.actor.state_dict())
    elif algo == "sac":
        sac_to_torch(params, model.actor, model.critic.q_networks)
        back = sac_to_ours(model.actor, model.critic.q_networks, params)
    else:
        raise ValueError(f"--init ours is defined for td3 and sac, not {algo!r}")
    for x, y in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(back),
                    strict=True):
        if not np.array_equal(np.asarray(x), np.asarray(y)):  # the mapping, checked every run
            raise AssertionError("our draw did not survive the round trip through SB3's layers")
    model.critic_target.load_state_dict(model.critic.state_dict())


UPDATE_ALGOS = ("td3", "sac")


class OurUpdate:
    """Our TD3 or SAC state and jitted update, attached to an SB3 ``TD3`` / ``SAC`` model in
    place of its ``train``; :meth:`state_tree` / :meth:`restore` carry it in the peer's
    checkpoint. With ``init="ours"`` our networks start from our initialiser's draw for
    ``seed`` (the one our own run of that seed starts from), with ``"own"`` from SB3's."""

    def __init__(self, model, env_id: str, seed: int, init: str, algo: str = "td3"):
        import jax
        import jax.numpy as jnp

        if init not in INITS:
            raise ValueError(f"unknown init {init!r} (valid: {', '.join(INITS)})")
        if algo not in UPDATE_ALGOS:
            raise ValueError(f"--update ours is defined for {', '.join(UPDATE_ALGOS)}, "
                             f"not {algo!r}")
        self.model, self.algo = model, algo
        self.agent = ours_agent(env_id, algo)
        state = self.agent.init(jax.random.PRNGKey(seed))
        if init == "own":  # SB3's initial draw, copied into our trees
            tpl = state.params
            if algo == "td3":
                params = torch_to_ours(model.actor.mu, model.critic.q_networks, tpl)
            else:
                params = sac_to_ours(model.actor, model.critic.q_networks, tpl)
            params = jax.tree_util.tree_map(jnp.asarray, params)
            # the targets start as copies (SAC's: the critics' only), in SB3 as in ours
            targets = ({"target": params} if algo == "td3"
                       else {"target_critic": params.critic})
            state = state.replace(params=params, **targets,
                                  actor_opt=self.agent.actor_opt.init(params.actor),
                                  critic_opt=self.agent.critic_opt.init(params.critic))
        self.state = state
        self.key = jax.random.PRNGKey(seed + 4)
        agent = self.agent

        def step(state, key, batch):
            key, sub = jax.random.split(key)
            state, metrics, _ = agent.update(state, batch, sub)
            return state, key, metrics["critic_loss"]

        self._step = jax.jit(step)
        self.sync_actor()
        model.train = self.train

    def sync_actor(self) -> None:
        """Our actor's weights into SB3's actor (which acts and is evaluated)."""
        import torch

        with torch.no_grad():
            if self.algo == "td3":
                actor_to_torch(self.state.params.actor, self.model.actor.mu)
            else:
                sac_actor_to_torch(self.state.params.actor, self.model.actor)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """SB3's ``train`` signature: ``gradient_steps`` of our update on SB3's batches."""
        m = self.model
        loss = None
        for _ in range(gradient_steps):
            m._n_updates += 1
            s = m.replay_buffer.sample(batch_size, env=m._vec_normalize_env)
            batch = {"obs": s.observations.numpy().astype(np.float32),
                     "action": s.actions.numpy().astype(np.float32),
                     "reward": s.rewards.numpy()[:, 0].astype(np.float32),
                     "next_obs": s.next_observations.numpy().astype(np.float32),
                     "discount": (1.0 - s.dones.numpy()[:, 0]).astype(np.float32)}
            self.state, self.key, loss = self._step(self.state, self.key, batch)
        self.sync_actor()
        m.logger.record("train/n_updates", m._n_updates, exclude="tensorboard")
        if loss is not None:
            m.logger.record("train/critic_loss", float(loss))

    def state_tree(self) -> dict[str, Any]:
        """Our state's leaves (optax states are named tuples: the leaves, in order, are what
        :meth:`restore` puts back into the current tree's structure) and the update key."""
        import jax

        return {"leaves": [np.asarray(x) for x in jax.tree_util.tree_leaves(self.state)],
                "key": np.asarray(self.key)}

    def restore(self, tree: dict[str, Any]) -> None:
        import jax
        import jax.numpy as jnp

        leaves, treedef = jax.tree_util.tree_flatten(self.state)
        saved = tree["leaves"]
        if len(saved) != len(leaves):
            raise ValueError(f"checkpoint holds {len(saved)} leaves of our {self.algo} state, "
                             f"expected {len(leaves)}")
        self.state = jax.tree_util.tree_unflatten(treedef, [
            jnp.asarray(np.asarray(s), dtype=x.dtype) for s, x in zip(saved, leaves)])
        self.key = jnp.asarray(np.asarray(tree["key"]), dtype=self.key.dtype)
        self.sync_actor()
