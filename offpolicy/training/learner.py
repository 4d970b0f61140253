"""The learner: replay, the normaliser statistics, sampling per the agent's data spec, the jitted
update, write-back, metrics.

It owns the agent's state (parameters, targets, optimiser states), the keys of the update and
of acting, the replay table and the observation / reward statistics
(:mod:`offpolicy.training.statistics`). It knows no algorithm's replay feature: it uses the
table through a handful of verbs (``sample``, ``write_back``, ``maintain``, ``valid_values``
with ``rescale``) and the table, declared from the agent's contract in ``training/build.py``,
does the rest. Data reaches it through :meth:`Learner.sink` (the collector's writes: replay,
then the running statistics); what acting needs goes out as one :class:`ActingState`
(parameters and the observation statistics, versioned by the update count), the line a process
boundary can go on.

Every update is one jitted call, compiled once: it splits its key inside, sums the agent's
metrics into an on-device accumulator (fetched once per logging interval, where NaN/inf losses
are caught) and returns the agent's write-back arrays, which go into replay at the sampled
indices before the next sample. ``update_and_act`` fuses the last update of an env step with
the policy for the next observations: one dispatch and one host sync per env step.

Batches are normalised with the statistics current at sampling time, so replay keeps raw data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from offpolicy.agents.acting import key_to_list
from offpolicy.agents.base import Agent, Contract
from offpolicy.envs.wrappers import ObsNormalizer, RewardScaler
from offpolicy.errors import NonFiniteError
from offpolicy.replay.table import Table
from offpolicy.training.statistics import Statistics

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
        self.learner.statistics.observe(
            next_obs, reward, np.asarray(terminated) | np.asarray(truncated), self.streams)


class Learner:
    def __init__(self, agent: Agent, contract: Contract, replay: Table, batch_size: int,
                 seed: int, obs_norm: ObsNormalizer, reward_scale: RewardScaler):
        """``replay``: the table declared for the agent (``training/build.py``);
        ``obs_norm`` / ``reward_scale``: the statistics this learner owns from now on (a
        frozen scaler takes them from replay: ReF-ER App. B)."""
        self.agent, self.replay, self.batch_size = agent, replay, batch_size
        self.obs_norm, self.reward_scale = obs_norm, reward_scale
        self.statistics = Statistics(obs_norm, reward_scale)
        self.updates = 0
        # V(s) of states after stored transitions, for replay's upkeep (stored returns)
        self._state_value = (jax.jit(contract.state_value) if contract.state_value is not None
                             else None)
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
    def compilations(self) -> dict[str, int]:
        """How many times each jitted step (``step``, ``step_act``, ``step_segment``) was
        traced."""
        return dict(self._traces)

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
        return self.replay.example_batch(self.batch_size)

    # ------------------------------------------------------------------ data in, acting out
    def sink(self, streams: np.ndarray | None = None) -> LearnerSink:
        """Where a collector in this process writes (``streams``: the replay rings of one
        remote collector, whose chunks are applied here)."""
        return LearnerSink(self, streams)

    def acting_state(self) -> ActingState:
        return ActingState(self.updates, self.agent.acting_params(self.state), self.obs_norm)

    def acting_payload(self) -> tuple[int, Any, dict]:
        """The acting state for another process: (version, host copies of the parameters,
        the observation statistics' state)."""
        return (self.updates, jax.device_get(self.agent.acting_params(self.state)),
                {"enabled": self.obs_norm.enabled, **self.obs_norm.rms.state_dict()})

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
        """A batch per the agent's data spec (replay's upkeep first), normalised."""
        self.statistics.from_replay(self.replay, self.updates)  # frozen: App. B, from replay
        self.replay.maintain(self.reward_scale.factor, self._values_after)
        idx, batch = self.replay.sample(self.batch_size, self.updates)
        return idx, self.statistics.normalize(batch)

    def _values_after(self, last: np.ndarray) -> np.ndarray:
        """V(s') with the current network of the states after transitions ``last`` (the
        states truncated episodes were cut at), in chunks of a fixed size: compiled once."""
        out = np.zeros(len(last))
        n = FINAL_VALUE_CHUNK
        for i in range(0, len(last), n):
            rows = np.arange(i, min(i + n, len(last)))
            slots = np.concatenate([last[rows], np.repeat(last[rows[-1:]], n - len(rows))])
            states = self.replay.states_after(slots)  # a recurrent core's: context keys
            obs = (self.statistics.normalize_observations(states) if isinstance(states, dict)
                   else self.obs_norm(states))
            values = self._state_value(self.agent.acting_params(self.state), obs)
            out[rows] = np.asarray(values, np.float64)[:len(rows)]
        return out

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
        batch = self.statistics.normalize(batch)
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
        if wb:
            self.replay.write_back(idx, batch, {k: np.asarray(v) for k, v in wb.items()})

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
