"""Actor-local replay (``--collector-replay``): AQL's distributed topology (Van de Wiele et
al. 2020, App. A1-A2 and the Actor procedure of Algorithm 2).

There is no central replay. Each remote collector keeps its own FIFO replay of
``--collector-buffer-size`` steps (the paper's 10^5) and, at the end of every unroll of T
steps (the agent's ``unroll_length``; T = 30 on the Control Suite), sends the learner the
fresh unroll *and* R (``--collector-replay-unrolls``, the paper's 2) unrolls sampled
uniformly from its replay. The learner queues what arrives and takes one update as soon as
its queue holds a batch of unrolls (the paper's 32), each unroll learned from once; the
paper's per-actor epsilon is AQL's per-env-copy epsilon over all collectors' copies.

Per unroll of each env copy (the paper's actor), the learner receives (1 + R) T steps: with
the paper's batch of 32 that is one update per 32 T / (1 + R) = 320 env steps, the ratio of
AQL's ``--preset paper`` (0.1 / 32 updates per env step), which the central replay reaches
by ``--updates-per-step`` instead.

In this library's layout an unroll is a window of one episode (``replay.samplers.windows``: it
never crosses an episode start, and is masked after its episode's end): an env copy's fresh
unroll is sent as one window per episode piece in it (``replay.samplers.recent_pieces``: one
window when no episode ends inside it, more when episodes are shorter than T), so that the
learner receives every fresh step exactly once.

Faults: a collector that is restarted starts with an empty replay, as the paper's actors
would; the windows in the learner's queue when a run stops (or checkpoints and resumes) are
not kept.
"""

from __future__ import annotations

import collections

import numpy as np

from offpolicy.replay.keys import CONTEXT_POSITION, CONTEXT_STATE
from offpolicy.replay.samplers import Contexts, recent_pieces, sampler_for
from offpolicy.replay.storage import Storage
from offpolicy.replay.table import Table

WINDOW_PREFIX = "unroll."  # chunk keys of the unrolls a collector sends
# per-window fields whose batch axis is the first (the rest are time-major)
BATCH_MAJOR = (CONTEXT_POSITION, CONTEXT_STATE)


class TeeSink:
    """Writes every step to each of ``sinks``, in order."""

    def __init__(self, *sinks):
        self.sinks = sinks

    def start_episode(self, obs: np.ndarray, stream: int = 0) -> None:
        for s in self.sinks:
            s.start_episode(obs, stream)

    def add_batch(self, action, reward, terminated, truncated, next_obs, extras=None) -> None:
        for s in self.sinks:
            s.add_batch(action, reward, terminated, truncated, next_obs, extras)


class LocalReplay:
    """One collector's FIFO replay and the unrolls it sends (the Actor of Algorithm 2)."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], action_dim: int,
                 fields: dict, num_envs: int, data, unrolls: int, seed: int):
        self.replay = Table(Storage(capacity, obs_shape, action_dim, fields,
                                    num_streams=num_envs),
                            sampler_for(data, seed), extensions=(
                                [Contexts(data)] if data.recurrent else []))
        self.data, self.unrolls, self.num_envs = data, int(unrolls), num_envs

    def unroll_batch(self) -> dict[str, np.ndarray]:
        """The fresh unroll of every env copy (the latest T steps, a window per episode
        piece) and R x K unrolls sampled uniformly from this replay, in the sequences layout
        ([T, n] time-major; a recurrent agent's context too), with ``fresh`` [n] saying which
        is which."""
        t = self.data.length
        idx, fresh = recent_pieces(self.replay.storage, t)
        batches = [(idx, self.replay.augment(idx, fresh), True)]
        if self.unrolls and len(self.replay):
            idx, sampled = self.replay.sample(self.unrolls * self.num_envs)
            batches.append((idx, sampled, False))
        out: dict[str, list] = collections.defaultdict(list)
        for idx, batch, is_fresh in batches:
            for k, v in batch.items():
                out[k].append(v)
            out["fresh"].append(np.full(idx.shape[1], is_fresh))
        return {k: np.concatenate(v, axis=0 if k in BATCH_MAJOR or k == "fresh" else 1)
                for k, v in out.items()}


class UnrollQueue:
    """The learner's queue of unrolls (AQL's learner queue): windows in, batches out, each
    window once, oldest first."""

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.windows: collections.deque = collections.deque()

    def put(self, unrolls: dict[str, np.ndarray]) -> None:
        """Queue every window of a collector's :meth:`LocalReplay.unroll_batch`."""
        n = len(unrolls["fresh"])
        for j in range(n):
            self.windows.append({k: (v[j] if k in BATCH_MAJOR else v[:, j])
                                 for k, v in unrolls.items() if k != "fresh"})

    def __len__(self) -> int:
        return len(self.windows)

    def drop(self) -> None:
        """Forget every queued window (the ones that arrive before learning starts)."""
        self.windows.clear()

    def take(self) -> dict[str, np.ndarray] | None:
        """A batch of the oldest ``batch_size`` windows ([T, B] layout), or None while fewer
        are queued."""
        if len(self.windows) < self.batch_size:
            return None
        ws = [self.windows.popleft() for _ in range(self.batch_size)]
        return {k: np.stack([w[k] for w in ws], axis=0 if k in BATCH_MAJOR else 1)
                for k in ws[0]}


class StatisticsSink:
    """The steps of a chunk into the learner's running observation / reward statistics only
    (the learner keeps no replay)."""

    def __init__(self, learner, streams: np.ndarray):
        self.learner, self.streams = learner, streams

    def start_episode(self, obs: np.ndarray, stream: int = 0) -> None:
        pass

    def add_batch(self, action, reward, terminated, truncated, next_obs, extras=None) -> None:
        self.learner.statistics.observe(
            next_obs, reward, np.asarray(terminated) | np.asarray(truncated), self.streams)
