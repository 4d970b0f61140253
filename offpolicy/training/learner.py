"""The learner: replay, the normaliser statistics, sampling per the agent's data spec, the jitted
update, write-back, metrics.

It owns the agent's state (parameters, targets, optimiser states), the keys of the update and
of acting, the replay buffer and the observation / reward statistics, and uses replay through
its public methods (reading its arrays, never writing them). Data reaches it through
:meth:`Learner.sink` (the collector's writes: replay, then the running statistics); what
acting needs goes out as one :class:`ActingState` (parameters and the observation
statistics, versioned by the update count), the line a process boundary can go on.

Every update is one jitted call, compiled once: it splits its key inside, sums the agent's
metrics into an on-device accumulator (fetched once per logging interval, where NaN/inf losses
are caught) and returns the agent's write-back arrays, which go into replay at the sampled
indices before the next sample. ``update_and_act`` fuses the last update of an env step with
the policy for the next observations: one dispatch and one host sync per env step.

Observation normalisation is applied here to every observation-like key of a batch (``obs``,
``next_obs``: transitions, sequences and episodes alike) and reward scaling to ``reward``, with
the statistics current at sampling time, so replay keeps raw data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from offpolicy.agents.acting import key_to_list
from offpolicy.agents.base import (
    CONTEXT_OBS,
    CONTEXT_POSITION,
    CONTEXT_STATE,
    CORE_STATE,
    Agent,
    Contract,
)
from offpolicy.envs.wrappers import ObsNormalizer, RewardScaler
from offpolicy.errors import NonFiniteError
from offpolicy.replay import stored_returns
from offpolicy.replay.refer import FAR, FAR_FRACTION, PRIORITY, WEIGHT
from offpolicy.replay.storage import ReplayBuffer

OBS_KEYS = ("obs", "next_obs", CONTEXT_OBS)
RESCALE_EVERY = 1000  # updates between reward-scale recomputations (ReF-ER App. B)
FINAL_VALUE_CHUNK = 8  # truncated episodes whose V(s_T) one jitted call evaluates


@dataclass(frozen=True)
class ActingState:
    """What acting needs from the learner: the policy's parameters and the observation
    statistics to normalise with, as of update ``version``. In one process it is a view, not a
    copy: the parameters are the learner's own buffers, which its next update donates (the
    loops hand the collector a fresh one after every update), and the normaliser is the
    learner's own object (it moves with every step). Across a process boundary it travels as
    host arrays and the statistics' state."""

    version: int
    params: Any
    normalizer: ObsNormalizer


def add_context(replay: ReplayBuffer, data, anchor: np.ndarray, batch: dict) -> dict:
    """A recurrent core's context of the steps ``anchor`` [B] (transitions, or windows' first
    steps) of ``replay`` into ``batch``, in place of its observations
    (:meth:`~offpolicy.agents.base.DataSpec.with_context`)."""
    span = 1 if data.kind == "transitions" else data.length
    start, offset, obs = replay.contexts(anchor, data.context, span)
    batch[CONTEXT_OBS], batch[CONTEXT_POSITION] = obs, offset.astype(np.int32)
    if data.context_state:
        batch[CONTEXT_STATE] = replay.extras[CORE_STATE][start]
    for k in ("obs", "next_obs", CORE_STATE):
        batch.pop(k, None)
    return batch


class LearnerSink:
    """The collector's writes into this process's learner: replay first, then the running
    observation / reward statistics (the learner's). ``streams``: the replay rings of one
    remote collector's env copies (its stream i is ring ``streams[i]``); None: all rings."""

    def __init__(self, learner: Learner, streams: np.ndarray | None = None):
        self.replay, self.learner, self.streams = learner.replay, learner, streams

    def start_episode(self, obs: np.ndarray, stream: int = 0) -> None:
        self.replay.start_episode(obs, stream if self.streams is None
                                  else int(self.streams[stream]))

    def add_batch(self, action, reward, terminated, truncated, next_obs, extras=None) -> None:
        self.replay.add_batch(action, reward, terminated, truncated, next_obs, extras,
                              streams=self.streams)
        self.learner.observe(next_obs, reward, np.asarray(terminated) | np.asarray(truncated),
                             self.streams)


class Learner:
    def __init__(self, agent: Agent, contract: Contract, replay: ReplayBuffer, batch_size: int,
                 seed: int, obs_norm: ObsNormalizer, reward_scale: RewardScaler):
        """``obs_norm`` / ``reward_scale``: the statistics this learner owns from now on (a
        frozen scaler takes them from replay: ReF-ER App. B)."""
        self.agent, self.replay, self.batch_size = agent, replay, batch_size
        self.obs_norm, self.reward_scale = obs_norm, reward_scale
        self.normalizing = obs_norm.enabled or reward_scale.enabled
        self.updates = 0
        # agents that store their behaviour policy get the memory's far-policy fraction
        self.far_fraction = FAR in agent.writeback_fields
        self.stored = contract.stored_return
        if self.stored is not None:
            self._state_value = jax.jit(contract.state_value)
        self.replay_statistics = reward_scale.frozen
        # one compiled program (cached on disk) instead of one dispatch per parameter and
        # initialiser: the same values on the CPU (tests/test_protocol.py); 2-3x faster once
        # cached, a little slower on a first, cold start of a small agent (one compile each);
        # distinct buffers for every leaf (targets start as copies), as donation requires
        self.state = jax.tree_util.tree_map(jnp.array,
                                            jax.jit(agent.init)(jax.random.PRNGKey(seed)))
        # a state too big for memory fails here, where the build names the network's flags,
        # not at the first use of its parameters
        jax.block_until_ready(self.state)
        self.update_key = jax.random.PRNGKey(seed + 4)
        self.act_key = jax.random.PRNGKey(seed + 5)
        self.data = agent.data
        self.writes_back = bool(agent.writeback_fields)
        self._traces = {"step": 0, "step_act": 0, "step_segment": 0}
        self._metric_shapes: dict[str, tuple[int, ...]] | None = None
        self._build()
        self.acc = self._zero_acc()

    # ------------------------------------------------------------------ jitted steps
    def _build(self) -> None:
        agent = self.agent

        def update(state, acc, key, batch):
            key, sub = jax.random.split(key)
            state, metrics, writeback = agent.update(state, batch, sub)
            acc = {k: acc[k] + metrics[k] for k in metrics} | {"count": acc["count"] + 1}
            return state, acc, key, writeback

        def step(state, acc, key, batch):
            self._traces["step"] += 1  # runs only while tracing: counts compilations
            return update(state, acc, key, batch)

        def step_act(state, acc, key, batch, act_key, obs):
            """The update, then the exploring action for the next observations with the new
            parameters: one dispatch and one host sync per env step instead of two."""
            self._traces["step_act"] += 1
            state, acc, key, writeback = update(state, acc, key, batch)
            act_key, sub = jax.random.split(act_key)
            action, info = agent.policy(agent.acting_params(state), obs, sub, True)
            return state, acc, key, writeback, act_key, action, info

        def step_segment(state, acc, key, batch):
            """The update on an on-policy segment ([T, 2K] windows: its own shapes)."""
            self._traces["step_segment"] += 1
            return update(state, acc, key, batch)

        self._step = jax.jit(step, donate_argnums=(0, 1))
        self._step_act = jax.jit(step_act, donate_argnums=(0, 1))
        self._step_segment = jax.jit(step_segment, donate_argnums=(0, 1))

    @property
    def compile_count(self) -> int:
        """The most times any jitted step was traced: 1 once training has started means the
        update compiled on its first call and never again."""
        return max(self._traces.values())

    def metric_shapes(self) -> dict[str, tuple[int, ...]]:
        """The update's metrics and their shapes (traced once, abstractly: no compile)."""
        if self._metric_shapes is None:
            _, batch = self.example_batch()
            _, metrics, _ = jax.eval_shape(self.agent.update, self.state, batch,
                                           jax.random.PRNGKey(0))
            self._metric_shapes = {k: tuple(v.shape) for k, v in sorted(metrics.items())}
        return self._metric_shapes

    def metric_columns(self) -> list[str]:
        """train.csv columns: a scalar metric is one column, a vector metric one per entry."""
        cols = []
        for k, shape in self.metric_shapes().items():
            n = int(np.prod(shape)) if shape else 0
            cols += [k] if n == 0 else [f"{k}_{i}" for i in range(n)]
        return cols

    def _zero_acc(self) -> dict:
        return {k: jnp.zeros(s, jnp.float32) for k, s in self.metric_shapes().items()} | {
            "count": jnp.zeros((), jnp.int32)}

    def example_batch(self) -> tuple[np.ndarray, dict]:
        """A batch of the right shapes for tracing, whatever replay holds."""
        idx, batch = self.replay.example_batch(self.data.kind, self.batch_size, self.data.length)
        if self.replay.prioritized:
            batch[WEIGHT] = np.ones(self.batch_size, np.float32)
        return idx, self._augment(idx, batch)

    def _augment(self, idx: np.ndarray, batch: dict) -> dict:
        """Add the memory-wide inputs some agents take: the far-policy fraction n_far / N
        (ReF-ER Eq. 12), the stored target of each step's successor (V-RACER) and a
        recurrent core's context (which replaces the observations: it holds them)."""
        d = self.data
        if d.recurrent:
            self._augment_context(idx if d.kind == "transitions" else idx[0], batch)
        if self.far_fraction:
            batch[FAR_FRACTION] = np.float32(self.replay.count(FAR) / max(len(self.replay), 1))
        if self.stored is not None:
            batch[self.stored.next_target] = stored_returns.next_targets(self.replay,
                                                                         self.stored, idx)
        return batch

    def _augment_context(self, anchor: np.ndarray, batch: dict) -> dict:
        return add_context(self.replay, self.data, anchor, batch)

    # ------------------------------------------------------------------ data in, acting out
    def sink(self, streams: np.ndarray | None = None) -> LearnerSink:
        """Where a collector in this process writes (``streams``: the replay rings of one
        remote collector, whose chunks are applied here)."""
        return LearnerSink(self, streams)

    def observe(self, next_obs: np.ndarray, reward: np.ndarray, done: np.ndarray,
                streams: np.ndarray | None = None) -> None:
        """The running statistics, from the steps just stored (one per env copy; of the copies
        ``streams`` when one remote collector's)."""
        if self.normalizing:
            self.obs_norm.update(next_obs)
            self.reward_scale.update(reward, done, streams)

    def acting_state(self) -> ActingState:
        return ActingState(self.updates, self.agent.acting_params(self.state), self.obs_norm)

    def acting_payload(self) -> tuple[int, Any, dict]:
        """The acting state for another process: (version, host copies of the parameters,
        the observation statistics' state)."""
        return (self.updates, jax.device_get(self.agent.acting_params(self.state)),
                {"enabled": self.obs_norm.enabled, **self.obs_norm.rms.state_dict()})

    def normalizer_state(self) -> dict:
        return {"obs_norm": self.obs_norm.rms.state_dict(),
                "reward_scale": self.reward_scale.rms.state_dict(),
                "reward_ret": self.reward_scale.ret.tolist()}

    def load_normalizer_state(self, d: dict) -> None:
        """Restore what a checkpoint holds of the statistics (an ``Agent.save`` written before
        any training had no reward statistics: those stay as they are)."""
        self.obs_norm.rms.load_state_dict(d["obs_norm"])
        if "reward_scale" in d:
            self.reward_scale.rms.load_state_dict(d["reward_scale"])
        ret = np.atleast_1d(np.asarray(d.get("reward_ret", []), np.float64))
        if ret.shape == self.reward_scale.ret.shape:
            self.reward_scale.ret = ret

    def abandon_episodes(self, streams: np.ndarray) -> None:
        """The episodes in progress in replay rings ``streams`` end where they are (their
        collector is gone): closed as a resume closes them."""
        self.replay.close_episode(streams)

    # ------------------------------------------------------------------ sampling
    def ready(self, full_batch: bool = True) -> bool:
        """Whether replay holds enough data for one batch (``full_batch`` False: one
        transition, sampled with replacement; build refuses that for windows and episodes)."""
        return len(self.replay) >= (self.batch_size if full_batch else 1)

    def sample(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A batch per the agent's data spec, normalised."""
        d, n = self.data, self.batch_size
        self._maintain()
        if self.replay.prioritized:  # slots by priority; a sequence starts at its slot
            idx, weight = self.replay.prioritized_sample(n, self.updates)
            if d.kind == "transitions":
                batch = self.replay.gather(idx)
            else:
                idx, batch = self.replay.windows(idx, d.length)
            batch[WEIGHT] = weight
        elif d.kind == "transitions":
            idx, batch = self.replay.sample(n)
        elif d.kind == "sequences":
            idx, batch = self.replay.sample_sequences(n, d.length)
        else:
            idx, batch = self.replay.sample_episodes(n, d.length)
        return idx, self.normalize(self._augment(idx, batch))

    # ------------------------------------------------------------------ replay upkeep
    def _maintain(self) -> None:
        """Before sampling: ReF-ER App. B statistics from replay (states at the first update,
        the reward scale every RESCALE_EVERY updates, stored targets rescaled with it), and
        the stored targets of episodes that ended since the last update."""
        if self.replay_statistics and self.updates % RESCALE_EVERY == 0:
            if self.updates == 0 and self.obs_norm.enabled:  # off for frames (build.py)
                self.obs_norm.set_statistics(self.replay.valid_values("obs"))
            old = self.reward_scale.factor
            self.reward_scale.set_second_moment(self.replay.valid_values("reward"))
            if self.stored is not None and self.updates > 0:
                self.replay.rescale(self.stored.reward_unit_fields,
                                    self.reward_scale.factor / old)
        if self.stored is not None:
            closed = self.replay.take_closed_episodes()
            if closed:
                factor = self.reward_scale.factor
                final = self._final_values(np.array([last for _, last in closed], np.int64))
                for (first, last), v in zip(closed, final):
                    stored_returns.close_episode(self.replay, self.stored, first, last, factor,
                                                 v)

    def _final_values(self, last: np.ndarray) -> np.ndarray:
        """V(s_T) with the current network for the episodes whose last transitions are
        ``last`` (0 where one terminated), in chunks of a fixed size: compiled once. A
        recurrent agent gets the context of each last transition (its ``next_obs`` view is
        s_T with the episode's memory) in place of the observations."""
        out = np.zeros(len(last))
        cut = np.flatnonzero(~self.replay.terminated[last])
        n = FINAL_VALUE_CHUNK
        for i in range(0, len(cut), n):
            rows = cut[i:i + n]
            slots = np.concatenate([last[rows], np.repeat(last[rows[-1:]], n - len(rows))])
            if self.data.recurrent:
                obs = self.normalize_observations(self._augment_context(slots, {}))
            else:
                obs = self.obs_norm(self.replay.next_observations(slots))
            values = self._state_value(self.agent.acting_params(self.state), obs)
            out[rows] = np.asarray(values, np.float64)[:len(rows)]
        return out

    def normalize_observations(self, batch: dict) -> dict:
        if self.obs_norm.enabled:
            for k in OBS_KEYS:
                if k in batch:
                    batch[k] = self.obs_norm(batch[k])
        return batch

    def normalize(self, batch: dict) -> dict:
        if self.normalizing:
            self.normalize_observations(batch)
            batch["reward"] = self.reward_scale(batch["reward"])
        return batch

    # ------------------------------------------------------------------ updating
    def update(self, idx: np.ndarray | None = None, batch: dict | None = None) -> None:
        """One update on ``batch`` (default: a fresh sample), write-back applied."""
        if batch is None:
            idx, batch = self.sample()
        self.state, self.acc, self.update_key, wb = self._step(self.state, self.acc,
                                                               self.update_key, batch)
        self._write_back(idx, batch, wb)

    def update_and_act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One update, then the exploring action for ``obs`` [K, ...] with the new
        parameters (NumPy)."""
        idx, batch = self.sample()
        (self.state, self.acc, self.update_key, wb, self.act_key, action,
         info) = self._step_act(self.state, self.acc, self.update_key, batch, self.act_key, obs)
        self._write_back(idx, batch, wb)
        return np.asarray(action), {k: np.asarray(v) for k, v in info.items()}

    def update_segment(self, length: int, streams: np.ndarray | None = None) -> None:
        """One update on the latest ``length`` steps of every env copy (ACER's on-policy
        step; of the copies ``streams``, one remote collector's), windows in the sequences
        layout, write-back applied."""
        idx, batch = self.replay.recent_segments(length, streams)
        batch = self.normalize(batch)
        self.state, self.acc, self.update_key, wb = self._step_segment(
            self.state, self.acc, self.update_key, batch)
        self._write_back(idx, batch, wb)

    def dispatch(self) -> Any:
        """Sample and start one update without waiting for it (pipelined acting); returns the
        pending write-back for :meth:`finish`, which must run before the next sample."""
        idx, batch = self.sample()
        self.state, self.acc, self.update_key, wb = self._step(self.state, self.acc,
                                                               self.update_key, batch)
        return idx, batch, wb

    def finish(self, pending: Any) -> None:
        if pending is not None:
            self._write_back(*pending)

    def _write_back(self, idx, batch, wb) -> None:
        self.updates += 1
        if not wb:
            return
        wb = {k: np.asarray(v) for k, v in wb.items()}
        if PRIORITY in wb:
            priority = wb.pop(PRIORITY)
            if self.replay.prioritized:  # NaN: the agent has no TD error for the step yet
                known = np.isfinite(priority)
                self.replay.update_priorities(idx[known], priority[known])
        if self.stored is not None:
            t = self.stored.target
            delta = wb[t] - batch[t]
            keep = np.isfinite(wb[t])
            wb[t] = np.where(keep, wb[t], batch[t])  # a step of an unfinished episode keeps NaN
        if self.writes_back:
            mask = batch.get("mask")
            self.replay.write(idx, wb, None if mask is None else np.asarray(mask))
        if self.stored is not None:
            stored_returns.propagate(self.replay, self.stored, idx, np.where(keep, delta, 0.0))

    def acting_params(self) -> Any:
        return self.agent.acting_params(self.state)

    # ------------------------------------------------------------------ metrics
    def flush_metrics(self, s0: int, s1: int, checkpointed: bool) -> dict[str, float]:
        """Mean of every metric since the last flush (NaN/inf stops the run here)."""
        host = jax.device_get(self.acc)
        count = int(host.pop("count"))
        means: dict[str, float] = {}
        for k, shape in self.metric_shapes().items():
            v = np.asarray(host[k], np.float64) / count if count else np.full(shape, math.nan)
            if shape:
                means.update({f"{k}_{i}": float(x) for i, x in enumerate(v.ravel())})
            else:
                means[k] = float(v)
        if count and not all(math.isfinite(v) for v in means.values()):
            bad = ", ".join(k for k, v in means.items() if not math.isfinite(v))
            kept = ("its last good checkpoint is kept" if checkpointed else
                    "no checkpoint had been written yet")
            raise NonFiniteError(
                f"non-finite loss ({bad}) between steps {s0} and {s1}; the run stopped "
                f"and {kept}")
        self.acc = self._zero_acc()
        return means

    # ------------------------------------------------------------------ checkpoints
    def keys_state(self) -> dict:
        return {"update_key": key_to_list(self.update_key),
                "act_key": key_to_list(self.act_key), "updates": self.updates}

    def load_keys(self, d: dict) -> None:
        # the update count drives App. B's schedule and PER's beta (PER's ranking travels in
        # the replay file)
        self.updates = int(d.get("updates", 0))
        if "update_key" in d:
            self.update_key = jnp.asarray(np.asarray(d["update_key"], np.uint32))
            self.act_key = jnp.asarray(np.asarray(d["act_key"], np.uint32))
