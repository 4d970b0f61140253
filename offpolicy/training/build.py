"""``build(run_config) -> Parts``: the agent and everything around it, without a run.

Everything that can fail on bad input (the env id, the action kind, a cadence the replay cannot
serve, a memory that does not fit) fails here, before a run directory exists; :func:`check`
makes every refusal but the memory's without building replay or a learner (a suite checks each
of its entries on each env with it before any run starts). The parts are
what a run drives (:mod:`offpolicy.training.run`), what a benchmark times
(:mod:`offpolicy.training.bench`) and what a remote collector is made of: the agent and its
:class:`~offpolicy.agents.base.Contract`, the replay buffer, the learner (which owns replay and
the normaliser statistics), the host policy, and a factory of collectors.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from offpolicy import registry
from offpolicy.agents.acting import HostPolicy
from offpolicy.agents.base import (
    CORE_STATE,
    AgentContext,
    Contract,
    check_agent,
    contract,
    discount,
)
from offpolicy.config import fields_of
from offpolicy.envs.make import (
    action_spec,
    frame_stack,
    is_image_space,
    make_env,
    observation_dtype,
    observation_shape,
)
from offpolicy.envs.spaces import ActionSpec
from offpolicy.envs.wrappers import ObsNormalizer, RewardScaler
from offpolicy.errors import OffpolicyError, out_of_memory
from offpolicy.jax_setup import configure_jax
from offpolicy.ray_address import check_run_address
from offpolicy.replay.extensions import FarCount
from offpolicy.replay.keys import FAR
from offpolicy.replay.prioritized import PERSettings, Prioritized
from offpolicy.replay.removers import FarPolicyEpisodes, OldestEpisode, OldestStep
from offpolicy.replay.samplers import Contexts, Sampler, sampler_for
from offpolicy.replay.storage import Storage
from offpolicy.replay.stored_returns import StoredReturns
from offpolicy.replay.table import Table
from offpolicy.training import wandb_log
from offpolicy.training.collector import ChunkSink, Collector, Sink
from offpolicy.training.learner import ActingState, Learner
from offpolicy.training.local_replay import LocalReplay, TeeSink

REPORT_REPLAY_BYTES = 2**30  # a replay that can grow past this says how big, at the start


@dataclass
class Parts:
    run: registry.RunConfig
    agent: Any
    contract: Contract
    spec: ActionSpec  # the agent's actions; every env steps through it
    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype  # uint8 frames stay uint8 in replay
    replay: Table
    learner: Learner
    policy: HostPolicy  # the agent's policy, jitted on the host CPU

    def collector(self, sink: Sink | None = None) -> Collector:
        """The training env copies, acting with the learner's current parameters and writing
        to ``sink`` (default: the learner's)."""
        tc = self.run.train
        return _collector(tc, tc.num_envs, tc.seed, self.spec,
                          sink if sink is not None else self.learner.sink(), self.policy,
                          self.learner.acting_state(), self.agent, self.contract.core)


def _collector(tc, num_envs: int, seed: int, spec: ActionSpec, sink: Sink, policy: HostPolicy,
               acting: ActingState, agent, core) -> Collector:
    """``agent``'s collector over ``num_envs`` copies of the run's env, with its warm-up,
    reward clipping and observation settings (the learner's and a remote collector's)."""
    return Collector(tc.env, num_envs, seed, spec, sink, policy, acting,
                     agent.exploration_noise, agent.behaviour_fields,
                     warmup_steps=tc.warmup_steps, asynchronous=tc.async_envs,
                     clip_reward=tc.clip_reward, core=core,
                     observe_action_reward=tc.observe_action_reward,
                     warmup_actions=tc.warmup_actions)


@dataclass(frozen=True)
class EnvFacts:
    """What the parts are sized by, read from one copy of the run's env."""

    spec: ActionSpec  # after --discretize
    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    image: bool
    frames: int  # stacked Atari frames: replay keeps one per step
    episode_steps: int | None  # the time limit, if the env has one

    @staticmethod
    def of(env, discretize) -> EnvFacts:
        return EnvFacts(action_spec(env, discretize), observation_shape(env),
                        observation_dtype(env), is_image_space(env.observation_space),
                        frame_stack(env), env.spec.max_episode_steps if env.spec else None)


def env_facts(tc) -> EnvFacts:
    """The facts of the run's env, from a copy built and closed here."""
    probe = make_env(tc.env, tc.seed, tc.observe_action_reward)
    try:
        return EnvFacts.of(probe, tc.discretize)
    finally:
        probe.close()


def check(run: registry.RunConfig, env: EnvFacts | None = None) -> tuple[Any, Contract]:
    """Every refusal :func:`build` makes but the memory's, without replay, a learner or a
    policy: the env's (``env``: its facts, else from a copy built here), the agent's own
    (constructed, not initialised: e.g. a recurrent core's flags) and those of flags that
    conflict (collectors, cadence, update start, warm-up actions, stored returns). Returns
    the agent and its contract."""
    tc = run.train
    if tc.wandb_project:  # before anything is built: the one line naming the extra
        wandb_log.check_available()
    env = env or env_facts(tc)
    if env.image and tc.normalize_obs:
        raise OffpolicyError(
            f"--normalize-obs does not apply to image observations ({tc.env} gives uint8 "
            f"frames {env.obs_shape}, which the network scales by 1/255); drop it")
    agent = build_agent(run, env.obs_shape, env.spec)
    contract = check_agent(agent)
    _check_distributed(run, agent, contract)
    _check_cadence(run, contract, agent)
    _check_update_start(run, agent)
    _check_warmup_actions(run, agent)
    if contract.stored_return is not None:
        _check_stored_returns(run, env.episode_steps)
    return agent, contract


def build(run: registry.RunConfig, with_replay: bool = True) -> Parts:
    """The parts of ``run``; ``with_replay=False`` allocates a two-step replay per env copy
    (evaluating or acting with loaded parameters needs none)."""
    configure_jax()
    tc = run.train
    env = env_facts(tc)
    spec, obs_shape, obs_dtype, image, frames = (env.spec, env.obs_shape, env.obs_dtype,
                                                 env.image, env.frames)
    agent, contract = check(run, env)
    k = tc.num_envs * max(tc.num_collectors, 1)  # replay rings: every env copy has its own
    # with --collector-replay the collectors keep the replays; the learner needs none
    central = with_replay and not tc.collector_replay
    replay = replay_table(run, agent, contract, env, k, central)
    if central and replay.full_bytes >= REPORT_REPLAY_BYTES:
        print(f"offpolicy: replay of {replay.capacity} steps"
              + (f" (a memory of {replay.memory}, --refer-forget far-policy)"
                 if replay.memory < replay.capacity else "") + " takes up to "
              f"{replay.full_bytes / 2**30:.1f} GiB when full ({replay.bytes_per_step} bytes "
              f"per step" + (f"; {frames} stacked frames stored once each" if frames else "")
              + ")", file=sys.stderr)
    # App. B statistics come from replay (set by the learner), not from running updates.
    # Frames are never normalised (the network scales them; per-pixel statistics would cost
    # 28k floats in every checkpoint): --replay-statistics then scales rewards only.
    obs_norm = ObsNormalizer(() if image else obs_shape,
                             (tc.normalize_obs or tc.replay_statistics) and not image,
                             frozen=tc.replay_statistics)
    reward_scale = RewardScaler(discount(run.agent), tc.normalize_reward or tc.replay_statistics, k,
                                frozen=tc.replay_statistics)
    with fits_in_memory(run):
        learner = Learner(agent, contract, replay, tc.batch_size, tc.seed, obs_norm,
                          reward_scale)
    return Parts(run, agent, contract, spec, obs_shape, obs_dtype, replay, learner,
                 HostPolicy(agent.policy, tc.seed + 6, on_default_device=tc.pipeline))


def replay_table(run: registry.RunConfig, agent, contract: Contract, env: EnvFacts,
                 rings: int, central: bool = True) -> Table:
    """The learner's replay table, declared from the agent's contract in one place (as Acme's
    builders declare replay tables): storage with one ring per env copy (``rings``) holding
    the agent's behaviour and write-back fields; a sampler of what its data spec asks for
    (uniform, or by priority with ``--replay per``); whole episodes forgotten under ReF-ER,
    PER and stored returns (the far-policy filter with ``--refer-forget far-policy``, whose
    rings hold twice the memory); the far-policy count for an agent that writes far flags,
    stored returns and a recurrent core's contexts. ``central`` False: two slots per ring
    (the collectors keep the replays, or nothing is learned)."""
    tc, data = run.train, agent.data
    by_far = central and tc.refer_forget == "far-policy"
    capacity = (2 if by_far else 1) * tc.buffer_size if central else 2 * rings
    extensions = [Contexts(data)] if data.recurrent else []
    if FAR in agent.writeback_fields:  # agents that store their behaviour policy
        extensions.append(FarCount(FAR))
    if contract.stored_return is not None:
        extensions.append(StoredReturns(contract.stored_return))
    if tc.replay == "per":
        per = Prioritized(PERSettings(tc.per_alpha, tc.per_beta0,
                                      int(tc.steps * tc.updates_per_step), tc.seed + 8))
        sampler, extensions = Sampler(per, data), [per, *extensions]
    else:
        sampler = sampler_for(data, tc.seed + 2)
    if by_far:
        remover = FarPolicyEpisodes(tc.buffer_size, FAR)
    elif tc.replay != "er" or contract.stored_return is not None:
        remover = OldestEpisode()
    else:
        remover = OldestStep()
    storage = Storage(capacity, env.obs_shape, env.spec.flat_dim,
                      dict(agent.behaviour_fields) | dict(agent.writeback_fields),
                      obs_dtype=env.obs_dtype, num_streams=rings, frame_stack=env.frames,
                      bytes_beside=sum(e.bytes_per_step(capacity) for e in extensions))
    return Table(storage, sampler, remover, extensions)


# the config fields that size an algorithm's networks (a core's only with a core)
NETWORK_SIZES = ("hidden", "proposal_hidden", "encoder_size", "num_actors", "core_layers",
                 "core_cells")


@contextlib.contextmanager
def fits_in_memory(run: registry.RunConfig):
    """XLA's RESOURCE_EXHAUSTED and NumPy's MemoryError in the block (building the state, the
    updates) become one line naming the flags that size the networks, and the batch."""
    try:
        yield
    except OffpolicyError:
        raise
    except Exception as e:
        if not out_of_memory(e):
            raise
        cfg, section = run.agent, registry.get(run.algo).section
        names = {f.name for f in fields_of(type(cfg))}
        sizes = []
        for name in NETWORK_SIZES:
            if name not in names or (name.startswith("core_") and cfg.core == "none"):
                continue
            v = getattr(cfg, name)
            sizes.append(f"--{section}.{name.replace('_', '-')} "
                         + (" ".join(map(str, v)) if isinstance(v, tuple) else str(v)))
        why = " ".join(str(e).split())
        raise OffpolicyError(
            f"out of memory: {run.algo}'s networks or batch do not fit ({', '.join(sizes)}, "
            f"--batch-size {run.train.batch_size}): shrink them "
            f"({type(e).__name__}: {why[:160] + '...' if len(why) > 160 else why})") from e


def build_agent(run: registry.RunConfig, obs_shape: tuple[int, ...], action_spec: ActionSpec,
                acting_offset: int = 0, acting_total: int = 0):
    """The agent of ``run`` (its registry entry names the class): built as every agent is,
    ``Agent(config, obs_shape, action_spec, AgentContext(...))``; ``acting_offset`` /
    ``acting_total``: which of all collectors' env copies this process acts for."""
    spec = registry.get(run.algo)
    if action_spec.kind not in spec.action_kinds:
        raise OffpolicyError(
            f"{run.algo} does not support {action_spec.kind} actions ({run.train.env} has "
            f"{action_spec.describe()}); {run.algo} supports: {', '.join(spec.action_kinds)}")
    module, cls = spec.builder.split(":")
    agent_cls = getattr(importlib.import_module(module), cls)
    tc = run.train
    context = AgentContext(registry.replay_settings(tc), tc.segment_length, acting_offset,
                           acting_total, tc.updates_per_step, tc.warmup_steps)
    return agent_cls(run.agent, obs_shape, action_spec, context)


def collector_seed(seed: int, index: int, incarnation: int) -> int:
    """The seed of remote collector ``index`` in its ``incarnation``-th start (a restart or a
    resumed run starts it afresh): distinct env seeds, noise, warm-up and policy keys."""
    return seed + 7_919 * (index + 1) + 104_729 * incarnation


def build_collector(run: registry.RunConfig, index: int, incarnation: int = 0
                    ) -> tuple[Collector, LocalReplay | None]:
    """Remote collector ``index``'s parts (in its own process): its env copies, the agent's
    policy on the host CPU and the noise, writing into a :class:`ChunkSink`, and with
    ``--collector-replay`` also into its own replay (returned beside it). It acts for env
    copies ``index * num_envs`` onwards of all collectors'."""
    configure_jax()
    tc = run.train
    probe = make_env(tc.env, tc.seed, tc.observe_action_reward)
    spec, obs_shape = action_spec(probe, tc.discretize), observation_shape(probe)
    image = is_image_space(probe.observation_space)
    probe.close()
    k = tc.num_envs
    agent = build_agent(run, obs_shape, spec, index * k, tc.num_collectors * k)
    seed = collector_seed(tc.seed, index, incarnation)
    normalizer = ObsNormalizer(() if image else obs_shape, False)  # the learner sends its own
    sink, local = ChunkSink(), None
    if tc.collector_replay:
        local = LocalReplay(tc.collector_buffer_size, obs_shape, spec.flat_dim,
                            dict(agent.behaviour_fields), k, agent.data,
                            tc.collector_replay_unrolls, seed + 2)
        sink = TeeSink(sink, local.replay)
    collector = _collector(tc, k, seed, spec, sink, HostPolicy(agent.policy, seed + 6),
                           ActingState(-1, None, normalizer), agent, contract(agent).core)
    return collector, local


def _check_distributed(run: registry.RunConfig, agent, contract: Contract) -> None:
    tc = run.train
    if tc.collector_replay:
        _check_collector_replay(run, agent, contract)
    if not tc.num_collectors:
        return
    if importlib.util.find_spec("ray") is None:
        raise OffpolicyError("--num-collectors needs Ray: pip install 'offpolicy[distributed]'")
    if tc.pipeline:
        raise OffpolicyError("--pipeline overlaps the env step with the update in one process; "
                             "with --num-collectors the collectors already run beside the "
                             "learner (choose one)")
    if tc.segment_length and registry.chunk_steps(tc) != tc.segment_length:
        raise OffpolicyError(f"--collect-steps {tc.collect_steps} must equal --segment-length "
                             f"{tc.segment_length}: a collector's chunk is one segment")
    check_run_address(tc)


def _check_collector_replay(run: registry.RunConfig, agent, contract: Contract) -> None:
    """Collectors' own replays (AQL's Algorithm 2) send unrolls that the learner learns from
    as they come: agents that learn from sequences and write nothing back to replay."""
    tc, data = run.train, agent.data
    if not tc.num_collectors:
        raise OffpolicyError("--collector-replay keeps a replay in every remote collector: "
                             "give --num-collectors K")
    if data.kind != "sequences" or agent.writeback_fields or contract.stored_return:
        raise OffpolicyError(f"--collector-replay sends unrolls that the learner learns from "
                             f"once, with nothing written back: {run.algo} does not learn "
                             "that way (aql, uniform-q, qt-opt and exact-q do)")
    if tc.segment_length:  # ACER's cadence (its default), or given
        raise OffpolicyError(f"--collector-replay: {run.algo} with --segment-length "
                             f"{tc.segment_length} learns on the latest segment at the learner, "
                             "which keeps no replay here (aql, uniform-q, qt-opt and exact-q "
                             "learn from the collectors' unrolls)")
    for flag, given in ((f"--replay {tc.replay}", tc.replay != "er"),
                        ("--replay-statistics", tc.replay_statistics)):
        if given:
            raise OffpolicyError(f"--collector-replay: the learner keeps no replay, so "
                                 f"{flag} does not apply (leave it out)")
    if registry.chunk_steps(tc) != data.length:
        raise OffpolicyError(f"--collector-replay: a collector's chunk is one unroll: "
                             f"--collect-steps must equal the unroll length {data.length}, "
                             f"got {registry.chunk_steps(tc)}")
    least = (2 * data.length + 1) * tc.num_envs  # each env copy's ring holds two unrolls
    if tc.collector_buffer_size < least:
        raise OffpolicyError(f"--collector-buffer-size {tc.collector_buffer_size} is too small "
                             f"for unrolls of {data.length} steps over {tc.num_envs} env "
                             f"copies (at least {least})")


def _check_update_start(run: registry.RunConfig, agent) -> None:
    """``--no-wait-for-batch`` (updates before replay holds a batch) is defined where single
    transitions are sampled from the learner's replay, and not with statistics that are read
    from replay once, at the first update."""
    tc = run.train
    if tc.wait_for_batch:
        return
    if agent.data.kind != "transitions" or tc.segment_length or tc.collector_replay:
        what = agent.data.kind if agent.data.kind != "transitions" else (
            "segments" if tc.segment_length else "its collectors' replays")
        raise OffpolicyError(
            f"--no-wait-for-batch starts updates before replay holds a batch, sampling single "
            f"transitions with replacement; {run.algo} here learns from {what} "
            "(drop --no-wait-for-batch)")
    if tc.replay_statistics:
        raise OffpolicyError(
            "--no-wait-for-batch with --replay-statistics would take the observation and reward "
            "statistics from the first few transitions (they are read from replay at the first "
            "update): drop one of them")


def _check_warmup_actions(run: registry.RunConfig, agent) -> None:
    """Uniform warm-up actions of a stochastic policy (no host noise) have no behaviour
    density (mean, std, probabilities) for replay to record: refused where one is recorded."""
    tc = run.train
    if tc.warmup_actions != "uniform" or tc.warmup_steps == 0:
        return
    density = sorted(set(agent.behaviour_fields) - {CORE_STATE})
    if agent.exploration_noise is None and density:
        raise OffpolicyError(
            f"--warmup-actions uniform: {run.algo} here records the behaviour policy of every "
            f"action ({', '.join(density)}; {tc.replay} replay or the algorithm needs it), "
            "which uniformly random actions do not have; use --warmup-actions policy (its "
            "initial policy samples the warm-up) or --warmup-steps 0")


def _check_cadence(run: registry.RunConfig, contract: Contract, agent) -> None:
    tc = run.train
    rings = tc.num_envs * max(tc.num_collectors, 1)
    if tc.segment_length == 0:
        return
    if tc.pipeline:
        raise OffpolicyError("--pipeline overlaps the per-step update with the env step; it "
                             "does not apply with --segment-length (choose one)")
    if not contract.learns_on_segments and tc.replay_ratio == 0:
        raise OffpolicyError(f"{run.algo} learns from replay only here: --replay-ratio 0 "
                             "would never update (give a ratio > 0 or learn on-policy)")
    longest = (tc.buffer_size // rings - 1) // 2
    if agent.data.kind == "sequences" and tc.segment_length > longest:
        raise OffpolicyError(f"--segment-length {tc.segment_length} is too long for a replay "
                             f"of {tc.buffer_size} steps over {rings} env copies (at most "
                             f"{longest})")


def _check_stored_returns(run: registry.RunConfig, max_steps: int | None) -> None:
    """Stored return targets (V-RACER) need whole episodes in each env copy's ring and
    replay-based reward scaling (a running scale would leave stored targets stale)."""
    tc = run.train
    rings = tc.num_envs * max(tc.num_collectors, 1)
    per_copy = tc.buffer_size // rings
    if max_steps is not None and per_copy < max_steps + 1:
        raise OffpolicyError(
            f"{run.algo} keeps return targets per episode: --buffer-size "
            f"{tc.buffer_size} gives each of {rings} env copies {per_copy} slots, fewer "
            f"than one {max_steps}-step episode needs ({max_steps + 1}); raise "
            "--buffer-size or lower --num-envs")
    if tc.normalize_reward:
        raise OffpolicyError(
            f"{run.algo} stores return targets in replay: use --replay-statistics "
            "(rewards scaled by replay's contents, stored targets rescaled with them) "
            "instead of --normalize-reward")
