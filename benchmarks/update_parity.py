"""Our TD3, SAC and DQN updates against SB3's (TD3: and SBX's), update by update, from the same
weights.

    .venv-bench/bin/python benchmarks/update_parity.py [--algo td3|sac|td3-sbx|dqn] [--updates 20]
        [--out-dir DIR]

Run in the bench venv (``make bench-venv``: SB3 and torch) with this checkout on the path (the
script puts it there). Both agents start from SB3's initial weights (``td3-sbx``: SBX's), copied
into ours, see the same replay batches (random HalfCheetah-v5-shaped transitions, a quarter of
them terminal) and run ``--updates`` updates, in float64 and in float32; after each, the CSV
records both critic losses and, per parameter group (actor, critics, their targets; SAC: and log
alpha), the largest absolute difference and the share of coordinates off by more than 1e-5.
Everything runs as ``--preset sb3``, and SB3's defaults configure SB3 (benchmarks/peers.py).

Randomness inside the update: TD3's target policy smoothing noise is drawn from each library's
own generator, so it is set to zero here (its formula, Eq. 14, is unit-tested in
tests/test_td3_sac_dqn.py). SAC's reparameterised samples are ours: the script draws our
update's Gaussian noise for each batch from its key exactly as our update does, and hands the
same numbers to SB3's ``Normal.rsample`` (actor sample first, then the target's, SB3's order).
In float64 our distributions' float32 casts are lifted and SB3's 1e-6 inside
log(1 - tanh(u)^2 + 1e-6) is set to 0, so both compute the same function; float32 runs both
as shipped.

In float64 a difference at rounding (~1e-14) means the two updates compute the same function;
float32 runs part through rounding at the ReLUs' kinks (results/update_parity_td3.md,
update_parity_sac.md).

``--algo td3-sbx``: our TD3 with SBX's two update choices (``--td3.target-every-update
--td3.actor-min-q``; the third, SBX's initial law, does not reach an update from copied weights)
against SBX 0.28's TD3, both from SBX's initial weights. SBX halves its critic loss (0.5 x the
twins' summed mean squared errors); under Adam that is our update with the critic optimiser's
epsilon doubled (Adam's step m^/(sqrt(v^) + eps) takes the moments of 0.5 g as those of g with
eps doubled), which this script gives ours (``critic_eps``; ``--sbx-eps-as-is`` keeps ours at
1e-8 to show what the halving alone moves). SBX's discount is cast to float32 in its ``train``;
the batches hand it the discount in the run's dtype instead.

This is the check behind issue 33's ablation: if the updates agree, a difference in learning
lies in the loop (exploration, warm-up, replay sampling, evaluation), not in the update.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from offpolicy.agents.types import ActorCritic, TD3State

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

OBS_DIM, ACT_DIM, BATCH = 17, 6, 256  # HalfCheetah-v5
OFF = 1e-5  # 1% of one Adam step at learning rate 1e-3


def _sb3_settings(algo: str) -> dict:
    """SB3's settings of ``algo`` in the learning runs (peer_baselines.BASELINES), with this
    script's batch size."""
    from peer_baselines import BASELINES, update_kwargs

    cfg = BASELINES[algo]
    assert cfg.batch_size == BATCH, (algo, cfg.batch_size)
    return {**update_kwargs(cfg), "device": cfg.device}


def sb3_model(seed: int):
    import gymnasium as gym
    import torch
    from stable_baselines3 import TD3
    from stable_baselines3.common.logger import configure

    torch.manual_seed(seed)
    env = gym.make("HalfCheetah-v5")
    model = TD3("MlpPolicy", env, **_sb3_settings("td3"), policy_delay=2,
                target_policy_noise=0.0, target_noise_clip=0.5, seed=seed)
    model.set_logger(configure(None, []))
    return model


def sb3_sac_model(seed: int):
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure

    torch.manual_seed(seed)
    env = gym.make("HalfCheetah-v5")
    model = SAC("MlpPolicy", env, **_sb3_settings("sac"), ent_coef="auto", seed=seed)
    model.set_logger(configure(None, []))
    return model


def ours_agent(env_id: str = "HalfCheetah-v5", algo: str = "td3", **agent_overrides):
    """Our ``algo`` with ``--preset sb3`` on ``env_id`` (``agent_overrides``: its --<algo>.*
    fields)."""
    from offpolicy import registry
    from offpolicy.envs.make import action_spec, make_env
    from offpolicy.training.build import build_agent

    run = registry.resolve(algo, preset="sb3", train_overrides={"env": env_id},
                           agent_overrides=agent_overrides)
    env = make_env(env_id, 0)
    spec = action_spec(env)
    obs_shape = env.observation_space.shape
    env.close()
    return build_agent(run, obs_shape, spec)


def linear(layer) -> tuple[np.ndarray, np.ndarray]:
    return layer.weight.detach().numpy().T.copy(), layer.bias.detach().numpy().copy()


def torch_to_ours(mu, q_networks, template: ActorCritic) -> ActorCritic:
    """SB3's actor (``mu``, its layers) and twin critics (``q_networks``) as our parameter
    trees (same structure as ``template``): the online networks or the targets."""
    from offpolicy.agents.types import ActorCritic

    return ActorCritic(mlp_to_ours([linear(m) for m in mu if hasattr(m, "weight")],
                                   template.actor),
                       critics_to_ours(q_networks, template.critic))


def mlp_to_ours(layers: list[tuple[np.ndarray, np.ndarray]], template: dict) -> dict:
    """(kernel, bias) of each layer of an MLP as our one-MLP parameter tree ``template``."""
    import jax

    a = jax.tree_util.tree_map(np.asarray, template)
    (mlp_name,) = a.keys()
    assert len(a[mlp_name]) == len(layers), (list(a[mlp_name]), len(layers))  # every layer
    for i, (w, b) in enumerate(layers):
        a[mlp_name][f"Dense_{i}"] = {"kernel": w, "bias": b}
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(template)):
        assert x.shape == y.shape, (x.shape, y.shape)
    return a


def sac_actor_to_ours(actor, template: dict) -> dict:
    """SB3's SAC actor (``latent_pi``, then the ``mu`` and ``log_std`` heads) as our Gaussian
    policy's MLP, whose last layer outputs [mean, log std] side by side."""
    torso = [linear(m) for m in actor.latent_pi if hasattr(m, "weight")]
    (wm, bm), (ws, bs) = linear(actor.mu), linear(actor.log_std)
    return mlp_to_ours(torso + [(np.concatenate([wm, ws], axis=1), np.concatenate([bm, bs]))],
                       template)


def sac_to_ours(actor, q_networks, template: ActorCritic) -> ActorCritic:
    """SB3's SAC actor and twin critics as our parameter trees (structure of ``template``)."""
    from offpolicy.agents.types import ActorCritic

    return ActorCritic(sac_actor_to_ours(actor, template.actor),
                       critics_to_ours(q_networks, template.critic))


def critics_to_ours(q_networks, c_tpl: dict) -> dict:
    """SB3's twin critics as our critic ensemble's tree (same structure as ``c_tpl``)."""
    return critic_layers_to_ours([[linear(m) for m in q if hasattr(m, "weight")]
                                  for q in q_networks], c_tpl)


def critic_layers_to_ours(critics: list[list[tuple[np.ndarray, np.ndarray]]],
                          c_tpl: dict) -> dict:
    """Critics given as (kernel [in, out], bias) per layer, one list per critic, as our critic
    ensemble's tree (same structure as ``c_tpl``)."""
    import jax

    c = jax.tree_util.tree_map(np.asarray, c_tpl)
    # the fused first layer: critic i's columns i*h:(i+1)*h of one [in, 2h] kernel
    first = [q[0] for q in critics]
    c["Dense_0"] = {"kernel": np.concatenate([w for w, _ in first], axis=1),
                    "bias": np.concatenate([b for _, b in first])}
    (vm_name,) = [k for k in c if k != "Dense_0"]
    assert len(c[vm_name]) == len(critics[0]) - 1, (list(c[vm_name]), len(critics[0]))
    for i in range(1, len(critics[0])):
        c[vm_name][f"Dense_{i - 1}"] = {
            "kernel": np.stack([q[i][0] for q in critics]),
            "bias": np.stack([q[i][1] for q in critics])}
    for x, y in zip(jax.tree_util.tree_leaves(c), jax.tree_util.tree_leaves(c_tpl)):
        assert x.shape == y.shape, (x.shape, y.shape)
    return c


def diff(ours: dict, theirs: dict) -> tuple[float, float]:
    """(largest absolute difference, fraction of coordinates off by more than ``OFF``); the
    two trees must have one structure."""
    import jax

    gaps = jax.tree_util.tree_map(lambda x, y: np.abs(np.asarray(x) - np.asarray(y)).ravel(),
                                  ours, theirs)
    d = np.concatenate(jax.tree_util.tree_leaves(gaps))
    return float(d.max()), float(np.mean(d > OFF))


def batches(rng: np.random.Generator, n: int) -> list[dict[str, np.ndarray]]:
    out = []
    for _ in range(n):
        done = (rng.random(BATCH) < 0.25).astype(np.float32)
        out.append({"obs": rng.normal(size=(BATCH, OBS_DIM)).astype(np.float32),
                    "action": rng.uniform(-1, 1, (BATCH, ACT_DIM)).astype(np.float32),
                    "reward": rng.normal(size=BATCH).astype(np.float32),
                    "next_obs": rng.normal(size=(BATCH, OBS_DIM)).astype(np.float32),
                    "discount": 1.0 - done})
    return out


def precision(dtype: str, modules) -> type:
    """Compute in ``dtype`` on both sides: JAX's x64 mode, and in float64 SB3's ``modules``
    cast in place (their optimizers keep their parameters) and its observations left as given
    (SB3's preprocess_obs casts them to float32). The NumPy dtype."""
    import jax
    from stable_baselines3.common import policies as sb3_policies

    wide = dtype == "float64"
    jax.config.update("jax_enable_x64", wide)
    if wide:
        sb3_policies.preprocess_obs = lambda obs, space, normalize_images=True: obs
        for m in modules:
            m.double()
    return np.float64 if wide else np.float32


def cast(tree, np_dtype: type):
    """``tree`` with its floating leaves in ``np_dtype`` (counters and keys as they are)."""
    import jax
    import jax.numpy as jnp

    return jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, np_dtype) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)
        else x, tree)


TD3_GROUPS = (("actor", "params", "actor"), ("critics", "params", "critic"),
              ("actor_target", "target", "actor"), ("critic_targets", "target", "critic"))


def td3_rows(model, state: TD3State, update, theirs, dtype: str, np_dtype: type, updates: int,
             seed: int, sample_of, loss_name: str, loss_scale: float) -> list[dict]:
    """Run ``updates`` TD3 updates on both sides, the peer ``model`` (SB3 or SBX, its replay
    sampling replaced by ``sample_of(batch)``) and ours (``update`` from ``state``), and return
    a row of differences per update; ``theirs()`` is the peer's parameters as our trees,
    and the peer's critic loss is recorded times ``loss_scale`` as ``loss_name``."""
    import jax
    import jax.numpy as jnp

    rows = []
    a0 = jax.tree_util.tree_map(np.asarray, state.params.actor)
    for i, b in enumerate(batches(np.random.default_rng(seed), updates), start=1):
        b = {k: v.astype(np_dtype) for k, v in b.items()}
        sample = sample_of(b)
        model.replay_buffer.sample = lambda batch_size, env=None, s=sample: s
        model.train(gradient_steps=1, batch_size=BATCH)
        peer_loss = loss_scale * float(model.logger.name_to_value["train/critic_loss"])
        state, metrics, _ = update(state, {k: jnp.asarray(v) for k, v in b.items()},
                                   jax.random.PRNGKey(i))
        t = theirs()
        row = {"dtype": dtype, "update": i, "critic_loss_ours": float(metrics["critic_loss"]),
               loss_name: peer_loss, "actor_moved": diff(state.params.actor, a0)[0]}
        for name, part, net in TD3_GROUPS:
            row[f"{name}_max"], row[f"{name}_off"] = diff(getattr(getattr(state, part), net),
                                                          getattr(t[part], net))
        rows.append(row)
    return rows


def compare_td3(dtype: str, updates: int, seed: int) -> list[dict]:
    """Rows of per-update differences between our TD3 and SB3's computing in ``dtype``."""
    import jax

    model = sb3_model(seed)
    np_dtype = precision(dtype, (model.actor, model.actor_target, model.critic,
                                 model.critic_target))
    agent = ours_agent(algo="td3", policy_noise=0.0)
    state = agent.init(jax.random.PRNGKey(seed))
    params = cast(torch_to_ours(model.actor.mu, model.critic.q_networks, state.params),
                  np_dtype)
    state = cast(state.replace(params=params, target=params,
                               actor_opt=agent.actor_opt.init(params.actor),
                               critic_opt=agent.critic_opt.init(params.critic)), np_dtype)
    update = jax.jit(agent.update)

    def theirs() -> dict:
        return {"params": torch_to_ours(model.actor.mu, model.critic.q_networks, params),
                "target": torch_to_ours(model.actor_target.mu, model.critic_target.q_networks,
                                        params)}

    return td3_rows(model, state, update, theirs, dtype, np_dtype, updates, seed,
                    sb3_samples, "critic_loss_sb3", 1.0)


def sb3_samples(b: dict):
    import torch
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    return ReplayBufferSamples(
        torch.as_tensor(b["obs"]), torch.as_tensor(b["action"]),
        torch.as_tensor(b["next_obs"]), torch.as_tensor(1.0 - b["discount"])[:, None],
        torch.as_tensor(b["reward"])[:, None])


def compare_sac(dtype: str, updates: int, seed: int) -> list[dict]:
    """Rows of per-update differences between our SAC and SB3's computing in ``dtype``, the
    reparameterised samples shared (module docstring)."""
    import jax
    import jax.numpy as jnp
    import torch

    from offpolicy import distributions

    model = sb3_sac_model(seed)
    np_dtype = precision(dtype, (model.actor, model.critic, model.critic_target))
    f32 = distributions.f32
    if np_dtype == np.float64:
        model.log_ent_coef.data = model.log_ent_coef.data.double()
        model.actor.action_dist.epsilon = 0.0  # log(1 - tanh(u)^2), as ours
        distributions.f32 = jnp.asarray  # our distributions compute in float64 too
    queue: list[np.ndarray] = []  # the Gaussian noise SB3's next rsample() takes
    rsample = torch.distributions.Normal.rsample
    torch.distributions.Normal.rsample = (
        lambda self, sample_shape=(): self.loc + self.scale * torch.as_tensor(
            queue.pop(0), dtype=self.loc.dtype))
    try:
        agent = ours_agent(algo="sac")
        state = agent.init(jax.random.PRNGKey(seed))

        def theirs(template) -> dict:
            return {"params": sac_to_ours(model.actor, model.critic.q_networks,
                                          template.params),
                    "target_critic": critics_to_ours(model.critic_target.q_networks,
                                                     template.target_critic),
                    "log_alpha": float(model.log_ent_coef.detach().numpy()[0])}

        t0 = theirs(state)
        params = t0["params"]
        state = cast(state.replace(
            params=params, target_critic=t0["target_critic"], log_alpha=t0["log_alpha"],
            actor_opt=agent.actor_opt.init(params.actor),
            critic_opt=agent.critic_opt.init(params.critic),
            alpha_opt=agent.alpha_opt.init(jnp.asarray(0.0, np_dtype))), np_dtype)
        update = jax.jit(agent.update)
        rows = []
        a0 = jax.tree_util.tree_map(np.asarray, state.params.actor)
        for i, b in enumerate(batches(np.random.default_rng(seed), updates), start=1):
            b = {k: v.astype(np_dtype) for k, v in b.items()}
            key = jax.random.PRNGKey(i)
            k_target, k_actor = jax.random.split(key)  # as our update splits it
            shape = (BATCH, ACT_DIM)
            queue[:] = [np.asarray(jax.random.normal(k, shape, jnp.float32))
                        for k in (k_actor, k_target)]  # SB3 samples the actor's first
            sample = sb3_samples(b)
            model.replay_buffer.sample = lambda batch_size, env=None, s=sample: s
            model.train(gradient_steps=1, batch_size=BATCH)
            assert not queue, "SB3 drew a different number of samples"
            sb3_loss = float(model.logger.name_to_value["train/critic_loss"])
            state, metrics, _ = update(state, {k: jnp.asarray(v) for k, v in b.items()}, key)
            t = theirs(state)
            row = {"dtype": dtype, "update": i,
                   "critic_loss_ours": float(metrics["critic_loss"]),
                   "critic_loss_sb3": sb3_loss,
                   "actor_moved": diff(state.params.actor, a0)[0]}
            for name, ours, other in (("actor", state.params.actor, t["params"].actor),
                                      ("critics", state.params.critic, t["params"].critic),
                                      ("critic_targets", state.target_critic,
                                       t["target_critic"])):
                row[f"{name}_max"], row[f"{name}_off"] = diff(ours, other)
            row["log_alpha_diff"] = abs(float(state.log_alpha) - t["log_alpha"])
            rows.append(row)
        return rows
    finally:
        torch.distributions.Normal.rsample = rsample
        distributions.f32 = f32


def sbx_model(seed: int):
    """SBX's TD3 with the learning runs' settings (peer_baselines.make_baseline) and no smoothing
    noise."""
    import gymnasium as gym
    from peer_baselines import BASELINES, make_baseline
    from stable_baselines3.common.logger import configure

    model = make_baseline("sbx", "td3", gym.make("HalfCheetah-v5"), BASELINES["td3"],
                          warmup=100, seed=seed)
    model.target_policy_noise = 0.0
    model.set_logger(configure(None, []))
    return model


def sbx_to_ours(actor_params: dict, qf_params: dict, template: ActorCritic) -> ActorCritic:
    """SBX's actor and vmapped twin critics (Flax trees, kernels [in, out]; the critics'
    stacked on a leading axis of 2) as our parameter trees (structure of ``template``)."""
    a = actor_params["params"]
    actor = [(np.asarray(a[f"Dense_{i}"]["kernel"]), np.asarray(a[f"Dense_{i}"]["bias"]))
             for i in range(len(a))]
    (vc,) = qf_params["params"].values()
    critics = [[(np.asarray(vc[f"Dense_{i}"]["kernel"][j]),
                 np.asarray(vc[f"Dense_{i}"]["bias"][j])) for i in range(len(vc))]
               for j in range(2)]
    from offpolicy.agents.types import ActorCritic

    return ActorCritic(mlp_to_ours(actor, template.actor),
                       critic_layers_to_ours(critics, template.critic))


def compare_td3_sbx(dtype: str, updates: int, seed: int, critic_eps: float = 2e-8) -> list[dict]:
    """Rows of per-update differences between our TD3 with SBX's update choices and SBX's
    TD3, computing in ``dtype``; ours takes Adam epsilon ``critic_eps`` for its critic (module
    docstring: SBX's halved critic loss)."""
    import jax
    import optax
    import torch

    jax.config.update("jax_enable_x64", dtype == "float64")
    np_dtype = np.float64 if dtype == "float64" else np.float32
    model = sbx_model(seed)
    pol = model.policy
    for name in ("actor_state", "qf_state"):  # SBX's state in the run's dtype, Adam fresh
        st = getattr(pol, name)
        params, target = cast(st.params, np_dtype), cast(st.target_params, np_dtype)
        setattr(pol, name, st.replace(params=params, target_params=target,
                                      opt_state=st.tx.init(params)))
    agent = ours_agent(algo="td3", policy_noise=0.0, target_every_update=True,
                       actor_min_q=True)
    cfg = agent.config
    assert cfg.critic_lr == model.qf_learning_rate == cfg.actor_lr == model.learning_rate
    agent.critic_opt = optax.adam(cfg.critic_lr, eps=critic_eps)
    state = agent.init(jax.random.PRNGKey(seed))

    def theirs() -> dict:
        return {"params": sbx_to_ours(pol.actor_state.params, pol.qf_state.params,
                                      state.params),
                "target": sbx_to_ours(pol.actor_state.target_params,
                                      pol.qf_state.target_params, state.params)}

    t0 = theirs()
    params = t0["params"]
    state = cast(state.replace(params=params, target=t0["target"],
                               actor_opt=agent.actor_opt.init(params.actor),
                               critic_opt=agent.critic_opt.init(params.critic)), np_dtype)
    update = jax.jit(agent.update)
    discount = torch.float64 if dtype == "float64" else torch.float32

    def sample_of(b: dict):  # SBX casts its own discount to float32: hand it the run's dtype
        return sb3_samples(b)._replace(
            discounts=torch.full((BATCH, 1), model.gamma, dtype=discount))

    return td3_rows(model, state, update, theirs, dtype, np_dtype, updates, seed,
                    sample_of, "critic_loss_sbx_x2", 2.0)


DQN_OBS, DQN_ACTIONS, DQN_BATCH = 6, 3, 32  # Acrobot-v1, SB3's DQN batch
DQN_TARGET_EVERY = 5  # the parity run's target cadence (both sides; the defaults' is 2 500)


def compare_dqn(dtype: str, updates: int, seed: int) -> list[dict]:
    """Rows of per-update differences between our DQN (its defaults: SB3's) and SB3's
    (peer_baselines.BASELINES["dqn"]) computing in ``dtype``, both from SB3's initial weights,
    on random Acrobot-v1-shaped batches (a quarter terminal); the target network is copied every
    DQN_TARGET_EVERY updates on both sides (SB3: its ``_on_step`` once per update, with
    ``target_update_interval`` DQN_TARGET_EVERY), so that the copy is compared too."""
    import gymnasium as gym
    import jax
    import jax.numpy as jnp
    import torch
    from peer_baselines import BASELINES, make_baseline
    from stable_baselines3.common.logger import configure

    torch.manual_seed(seed)
    model = make_baseline("sb3", "dqn", gym.make("Acrobot-v1"), BASELINES["dqn"], warmup=100,
                          seed=seed)
    model.set_logger(configure(None, []))
    model.target_update_interval = DQN_TARGET_EVERY
    model._current_progress_remaining = 1.0
    np_dtype = precision(dtype, (model.q_net, model.q_net_target))
    agent = ours_agent("Acrobot-v1", "dqn", target_update_every=DQN_TARGET_EVERY)
    assert agent.config.lr == model.learning_rate and agent.config.max_grad_norm == \
        model.max_grad_norm, "the defaults are no longer SB3's"
    state = agent.init(jax.random.PRNGKey(seed))

    def theirs(net) -> dict:  # SB3's Q network: our torso's MLP, then the linear head
        layers = [linear(m) for m in net.q_net if hasattr(m, "weight")]
        tpl = state.params
        (w, b) = layers[-1]
        assert w.shape == tpl["Dense_0"]["kernel"].shape, (w.shape, "the head")
        return {"Torso_0": mlp_to_ours(layers[:-1], tpl["Torso_0"]),
                "Dense_0": {"kernel": w, "bias": b}}

    params = theirs(model.q_net)
    state = cast(state.replace(params=params, target=theirs(model.q_net_target),
                               opt=agent.opt.init(params)), np_dtype)
    update = jax.jit(agent.update)
    norms: list[float] = []  # the gradient norm SB3 clips (at max_grad_norm 10)
    clip = torch.nn.utils.clip_grad_norm_

    def recording_clip(parameters, max_norm, *args, **kwargs):
        norm = clip(parameters, max_norm, *args, **kwargs)
        norms.append(float(norm))
        return norm

    torch.nn.utils.clip_grad_norm_ = recording_clip
    rng = np.random.default_rng(seed)
    rows = []
    p0 = jax.tree_util.tree_map(np.asarray, state.params)
    for i in range(1, updates + 1):
        done = (rng.random(DQN_BATCH) < 0.25).astype(np_dtype)
        scale = 1.0 if i % 2 else 30.0  # every second batch: a gradient norm past the clip
        b = {"obs": scale * rng.normal(size=(DQN_BATCH, DQN_OBS)).astype(np_dtype),
             "action": rng.integers(0, DQN_ACTIONS, (DQN_BATCH, 1)).astype(np_dtype),
             "reward": -rng.random(DQN_BATCH).astype(np_dtype) * 4,
             "next_obs": rng.normal(size=(DQN_BATCH, DQN_OBS)).astype(np_dtype),
             "discount": 1.0 - done}
        sample = sb3_samples(b)._replace(actions=torch.as_tensor(b["action"]).long())
        model.replay_buffer.sample = lambda batch_size, env=None, s=sample: s
        norms.clear()
        model.train(gradient_steps=1, batch_size=DQN_BATCH)
        model._on_step()  # the target copy, every DQN_TARGET_EVERY calls
        sb3_loss = float(model.logger.name_to_value["train/loss"])
        state, metrics, _ = update(state, {k: jnp.asarray(v) for k, v in b.items()},
                                   jax.random.PRNGKey(i))
        row = {"dtype": dtype, "update": i, "loss_ours": float(metrics["loss"]),
               "loss_sb3": sb3_loss, "grad_norm_sb3": norms[0],
               "q_moved": diff(state.params, p0)[0]}
        for name, ours, net in (("q", state.params, model.q_net),
                                ("q_target", state.target, model.q_net_target)):
            row[f"{name}_max"], row[f"{name}_off"] = diff(ours, theirs(net))
        rows.append(row)
    torch.nn.utils.clip_grad_norm_ = clip
    return rows


COMPARE = {"td3": compare_td3, "sac": compare_sac, "td3-sbx": compare_td3_sbx,
           "dqn": compare_dqn}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", choices=list(COMPARE), default="td3")
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtypes", nargs="+", choices=("float64", "float32"),
                   default=["float64", "float32"])
    p.add_argument("--sbx-eps-as-is", action="store_true",
                   help="td3-sbx: our critic's Adam epsilon stays 1e-8 (SBX's halved loss "
                        "then shows as a difference)")
    p.add_argument("--out-dir", type=Path, default=None)
    a = p.parse_args()
    if a.sbx_eps_as_is and a.algo != "td3-sbx":
        p.error("--sbx-eps-as-is goes with --algo td3-sbx")
    extra = {"critic_eps": 1e-8} if a.sbx_eps_as_is else {}
    rows = [r for d in a.dtypes for r in COMPARE[a.algo](d, a.updates, a.seed, **extra)]
    keys = list(rows[0])
    print(", ".join(keys))
    for r in rows:
        print(", ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys))
    if a.out_dir is not None:
        a.out_dir.mkdir(parents=True, exist_ok=True)
        stem = f"update_parity_{a.algo}{'_eps-as-is' if a.sbx_eps_as_is else ''}"
        with open(a.out_dir / f"{stem}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
