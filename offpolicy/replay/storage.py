"""Preallocated ring buffer of NumPy arrays; every observation is stored once.

Layout. The buffer is split into ``num_streams`` equal rings, one per environment copy of a
vectorised collector (one ring when there is one env). Within a ring, slot ``i`` holds an
observation ``obs[i]`` and, once the action taken there is known, the transition that starts
from it: ``action[i]``, ``reward[i]``, ``terminated[i]``, ``truncated[i]``, the per-step fields
(behaviour statistics and write-back fields) and ``valid[i] = True``. Its next observation is
``obs[next(i)]``, the following slot of the same ring. An episode of L steps uses L + 1 slots:
its final observation occupies a slot with ``valid = False`` (no action is taken there), so a
next observation never comes from another episode. Writes to a ring are strictly sequential, so
after it wraps every valid slot still has its successor intact: overwriting slot ``j`` only
invalidates the transition stored *at* ``j``.

Memory per transition is the raw bytes of (obs, action, reward, terminated, truncated) plus one
validity byte, times (L + 1) / L for the extra final-observation slot: within 1.1x of raw for
episodes of 20 steps or more (asserted in tests/test_replay.py).

Stacked frames (``frame_stack`` F > 0: Atari's [84, 84, 4] observations, the last F frames,
channels last) are stored one frame per slot, the newest, as the DQN replay does: a slot also
records how many earlier slots of its episode hold the frames before it (``frame_back``, at
most F - 1), and a sampled observation is rebuilt from them, padded with the episode's first
frame at its start (as the env's own stack is after a reset), never reaching into another
episode. About 1/F of the memory of whole stacks. Overwriting a slot invalidates the (at most
F - 1) transitions just after it whose stacks still reach back to it.

Sampling (in NumPy, with a seeded Generator whose state travels in checkpoints) returns the
sampled step indices with the batch, so an update's per-step results can be written back
(:meth:`ReplayBuffer.write`):

* :meth:`sample`: uniform over valid transitions, ``(idx[B], batch)``;
* :meth:`sample_sequences`: windows of T steps inside one episode, time-major, masked;
* :meth:`sample_episodes`: whole episodes from their first step, padded and masked;
* :meth:`recent_segments`: the last T steps of every ring (an on-policy segment, ACER's
  Algorithm 1), as windows.
"""

from __future__ import annotations

import collections
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from offpolicy.errors import OffpolicyError
from offpolicy.replay.memory import check_memory
from offpolicy.replay.prioritized import PERSettings, RankPrioritized

_CORE = ("obs", "action", "reward", "terminated", "truncated", "valid")
RESERVED = _CORE + ("next_obs", "discount", "mask")
# 1: whole observations per slot; 2: with frame_stack, one frame per slot and frame_back
REPLAY_FORMAT = 2


class ReplayBuffer:
    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_dim: int,
        extras: dict[str, tuple] | None = None,
        obs_dtype: np.dtype | str = np.float32,
        seed: int = 0,
        num_streams: int = 1,
        counted: tuple[str, ...] = (),
        forget_whole_episodes: bool = False,
        frame_stack: int = 0,
        prioritized: PERSettings | None = None,
        memory: int | None = None,
        forget_highest: str | None = None,
    ):
        """``extras``: per-step fields ``{name: (shape, dtype)}`` or ``(shape, dtype,
        initial)``; ``initial`` fills a new step (write-back fields start there).
        ``counted``: scalar extra fields whose sum over the valid transitions is kept as a
        running total (:meth:`count`; ReF-ER's number of far-policy samples), updated on every
        write instead of scanned. ``forget_whole_episodes``: when a ring overwrites the first
        step of its oldest episode, that whole episode leaves the buffer (ReF-ER, App. C:
        episodes are removed first in, first out, so stored returns never refer to a step
        that is gone); otherwise steps leave one at a time. ``prioritized``: sample by
        rank-based priorities (:mod:`offpolicy.replay.prioritized`, which follows every write
        of this buffer; its per-slot arrays count in the memory check). ``frame_stack`` F > 0:
        observations are the last
        F frames stacked on the last axis (``obs_shape`` [..., F]), stored one frame per slot
        (module docstring). ``memory`` with ``forget_highest`` (a counted field, with
        ``forget_whole_episodes``): at most ``memory`` transitions stay valid, and when a write
        goes past that, the finished episode with the highest mean of that field leaves, unless
        the oldest episode is more than a memory's count of episodes older than it: then the
        oldest leaves (the ReF-ER authors' ``farpolfrac`` filter, :meth:`_prune`). The rings
        then need room beyond ``memory`` (``capacity`` = 2 ``memory`` is what the trainer
        gives): an episode forgotten in the middle frees no ring slot until the ring wraps
        onto it."""
        if num_streams < 1:
            raise OffpolicyError(f"replay needs at least one stream, got {num_streams}")
        if capacity // num_streams < 2:
            raise OffpolicyError(f"replay capacity must be >= 2 per env copy, got {capacity} "
                                 f"for {num_streams}")
        self.num_streams = int(num_streams)
        self.stream_capacity = int(capacity) // self.num_streams
        self.capacity = self.stream_capacity * self.num_streams
        self.obs_shape = tuple(obs_shape)
        self.action_dim = int(action_dim)
        self.extra_specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self.extra_initial: dict[str, float] = {}
        for name, spec in (extras or {}).items():
            if name in RESERVED:
                raise OffpolicyError(f"replay extra field name '{name}' is reserved")
            self.extra_specs[name] = (tuple(spec[0]), np.dtype(spec[1]))
            if len(spec) > 2:
                self.extra_initial[name] = spec[2]
        self.frame_stack = int(frame_stack)
        if self.frame_stack and (len(self.obs_shape) < 2
                                 or self.obs_shape[-1] != self.frame_stack):
            raise OffpolicyError(f"frame_stack {frame_stack} needs observations [..., "
                                 f"{frame_stack}] (frames on the last axis), got "
                                 f"{list(self.obs_shape)}")
        # what one slot stores of an observation: all of it, or its newest frame
        self._slot_shape = self.obs_shape[:-1] if self.frame_stack else self.obs_shape
        c = self.capacity
        per_step = (self.bytes_per_observation(self.obs_shape, obs_dtype, self.frame_stack)
                    + 4 * self.action_dim + 4 + 3
                    + sum(int(np.prod(sh)) * dt.itemsize for sh, dt in self.extra_specs.values())
                    + (RankPrioritized.bytes_per_step(capacity) if prioritized else 0))
        self.bytes_per_step = per_step  # what the memory check counts per stored step
        self.full_bytes = check_memory(c, per_step)
        # np.zeros maps untouched pages lazily: a 1e6 buffer costs memory only as it fills.
        self.obs = np.zeros((c, *self._slot_shape), obs_dtype)
        # frames: how many earlier slots of the episode hold this slot's earlier frames
        self.frame_back = np.zeros((c,) if self.frame_stack else (0,), np.uint8)
        self.action = np.zeros((c, self.action_dim), np.float32)
        self.reward = np.zeros((c,), np.float32)
        self.terminated = np.zeros((c,), bool)
        self.truncated = np.zeros((c,), bool)
        self.valid = np.zeros((c,), bool)
        self.extras = {k: np.zeros((c, *s), d) for k, (s, d) in self.extra_specs.items()}
        k = self.num_streams
        self.base = np.arange(k, dtype=np.int64) * self.stream_capacity  # first slot per ring
        self.heads = np.zeros(k, np.int64)  # next slot to write, relative to the ring's base
        self.sizes = np.zeros(k, np.int64)  # slots written so far per ring (<= stream_capacity)
        self.opens = np.zeros(k, bool)  # an episode is in progress in this ring
        self.num_valid = 0
        self._starts = [collections.deque() for _ in range(k)]  # first slots of episodes
        self._start_arrays: list[np.ndarray | None] = [None] * k  # _starts as arrays (cache)
        self.rng = np.random.Generator(np.random.PCG64(seed))
        for name in counted:
            if name not in self.extras or self.extra_specs[name][0] != ():
                raise OffpolicyError(f"counted field '{name}' must be a scalar extra field")
        self._counts = {name: 0.0 for name in counted}
        self.forget_whole_episodes = forget_whole_episodes
        if forget_highest is not None and (forget_highest not in self._counts
                                           or not forget_whole_episodes):
            raise OffpolicyError(f"forgetting by '{forget_highest}' needs it counted and whole "
                                 "episodes forgotten")
        self.memory = self.capacity if memory is None else int(memory)
        if not 1 <= self.memory <= self.capacity:
            raise OffpolicyError(f"replay memory must be in [1, {self.capacity}] transitions, "
                                 f"got {memory}")
        self.forget_highest = forget_highest
        self.pruned = 0  # episodes forgotten by forget_highest (not by the ring wrapping)
        # each episode's number in the order episodes finished (over all rings; -1 while in
        # progress), beside _starts: the authors' filter compares episodes' ages by it
        self._ids = [collections.deque() for _ in range(k)]
        self._next_id = 0
        # callbacks(slots, valid) on every slot whose transition appears or disappears
        # (prioritized replay keeps its priorities in step with the buffer through them)
        self.listeners: list = []
        # objects with state_arrays() / load_arrays(d) saved inside this buffer's file
        # (prioritized replay's ranking), restored after the buffer itself
        self.attachments: dict = {}
        # first slot -> last slot of the episodes finished since the last
        # take_closed_episodes(), while their first slot lasts (an agent that never takes
        # them keeps at most the episodes in memory)
        self._closed: dict[int, int] = {}
        self.per: RankPrioritized | None = None
        if prioritized is not None:
            self.per = RankPrioritized(self.capacity, prioritized.alpha, prioritized.beta0,
                                       max(int(prioritized.beta_steps), 1),
                                       seed=prioritized.seed)
            self.listeners.append(self.per.on_write)
            self.attachments["per"] = self.per

    # ------------------------------------------------------------------ single-ring views
    @property
    def head(self) -> int:
        """Next slot to write of a single-ring buffer (absolute index)."""
        return int(self.base[0] + self.heads[0])

    @property
    def size(self) -> int:
        """Slots written so far, over all rings."""
        return int(self.sizes.sum())

    @property
    def _open(self) -> bool:
        return bool(self.opens.all())

    # ------------------------------------------------------------------ writing
    def _write_obs(self, stream: int, obs: np.ndarray, first: bool) -> int:
        h = int(self.base[stream] + self.heads[stream])
        self._overwrite_start(stream, h)
        if self.valid[h]:
            self._invalidate(np.array([h]))
        if self.frame_stack:
            self._frames_overwritten(np.array([h]))
            self._store_obs(np.array([h]), np.asarray(obs)[None], first)
        else:  # the per-step path of one env copy: a plain store
            self.obs[h] = obs
        self.heads[stream] = (self.heads[stream] + 1) % self.stream_capacity
        self.sizes[stream] = min(self.sizes[stream] + 1, self.stream_capacity)
        return h

    def _overwrite_start(self, stream: int, h: int) -> None:
        """Slot ``h`` of ring ``stream`` is about to be overwritten: if it is the first step of
        the oldest episode, that episode loses its start (and, forgetting whole episodes, all
        of its steps)."""
        starts = self._starts[stream]
        if starts and starts[0] == h:
            starts.popleft()
            self._ids[stream].popleft()
            self._start_arrays[stream] = None
            self._closed.pop(h, None)
            if self.forget_whole_episodes:
                self._forget_episode(stream, h)

    def _episode_ended(self, stream: int, last: int) -> None:
        """Record the episode of ring ``stream`` that ended at slot ``last`` as closed."""
        if self._starts[stream]:  # else the episode outgrew its ring
            self._closed[self._starts[stream][-1]] = last
            self._number_latest(stream)

    def _number_latest(self, stream: int) -> None:
        """Ring ``stream``'s latest episode has finished: it takes the next id (episodes are
        numbered in the order they finish, as smarties numbers the sequences it stores)."""
        self._ids[stream][-1] = self._next_id
        self._next_id += 1

    def _forget_episode(self, stream: int, first: int) -> None:
        """Invalidate every transition of the episode starting at ``first`` (Remember-and-
        Forget, App. C: whole episodes leave the memory oldest first, so a stored return never
        refers to a step that is gone)."""
        if not self._starts[stream]:  # the episode in progress is longer than the ring
            self._invalidate(np.array([first])[self.valid[[first]]])
            return
        self._invalidate_span(first, self._starts[stream][0])

    def _invalidate_span(self, first: int, end: int) -> None:
        """Invalidate the valid transitions of one ring from slot ``first`` up to slot ``end``
        (exclusive, in ring order)."""
        slots = self._offset(np.asarray(first), np.arange((end - first) % self.stream_capacity))
        self._invalidate(slots[self.valid[slots]])

    def _invalidate(self, slots: np.ndarray) -> None:
        if slots.size == 0:
            return
        for name in self._counts:
            self._counts[name] -= float(self.extras[name][slots].sum())
            self.extras[name][slots] = 0
        self.valid[slots] = False
        self.num_valid -= int(slots.size)
        for f in self.listeners:
            f(slots, np.zeros(slots.size, bool))

    def count(self, name: str) -> float:
        """Running sum of a counted field over the valid transitions."""
        return self._counts[name]

    # ------------------------------------------------------------------ the learner's view
    @property
    def prioritized(self) -> bool:
        return self.per is not None

    def prioritized_sample(self, batch_size: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Slots drawn by priority and their importance weights (prioritized replay only);
        ``step``: the update count that anneals the weights' exponent."""
        return self.per.sample(batch_size, step)

    def update_priorities(self, idx: np.ndarray, priority: np.ndarray) -> None:
        """New priorities (|TD|) of sampled steps (prioritized replay only)."""
        self.per.update(idx, priority)

    def example_batch(self, kind: str, batch_size: int, length: int = 1
                      ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A batch of the shapes a ``kind`` sample has (``transitions``, ``sequences`` or
        ``episodes`` of ``length``), whatever replay holds: for tracing an update."""
        if kind == "transitions":
            idx = np.zeros(batch_size, np.int64)
            return idx, self.gather(idx)
        steps, batch = self.windows(np.zeros(batch_size, np.int64), length)
        return steps, batch

    def valid_values(self, name: str) -> np.ndarray:
        """Field ``name`` (``obs``, ``reward`` or an extra field) of every stored transition."""
        valid = np.flatnonzero(self.valid)
        if name == "obs":
            return self.observations(valid)
        return (self.extras[name] if name in self.extras else getattr(self, name))[valid]

    def rescale(self, fields: tuple[str, ...], factor: float) -> None:
        """Multiply extra fields by ``factor`` (stored targets in reward units, when the
        reward scale changes: ReF-ER App. B)."""
        for k in fields:
            self.extras[k] *= factor

    @staticmethod
    def bytes_per_observation(obs_shape: tuple[int, ...], obs_dtype, frame_stack: int = 0
                              ) -> int:
        """Replay bytes per stored observation: all of it, or one frame and its frame_back
        byte with ``frame_stack``."""
        shape = tuple(obs_shape)[:-1] if frame_stack else tuple(obs_shape)
        return int(np.prod(shape)) * np.dtype(obs_dtype).itemsize + (1 if frame_stack else 0)

    def observations(self, slots: np.ndarray) -> np.ndarray:
        """The observations stored at ``slots`` (any shape) -> [*slots.shape, *obs_shape];
        stacked frames are rebuilt from their slots (module docstring)."""
        slots = np.asarray(slots, np.int64)
        if not self.frame_stack:
            return self.obs[slots]
        f = self.frame_stack
        back = np.minimum(np.arange(f - 1, -1, -1),  # channel k is F-1-k frames back
                          self.frame_back[slots][..., None].astype(np.int64))
        frames = self.obs[self._offset(slots[..., None], -back)]  # [..., F, *frame]
        return np.ascontiguousarray(np.moveaxis(frames, slots.ndim, -1))

    def _store_obs(self, h: np.ndarray, obs: np.ndarray, first: bool) -> None:
        """Write observations ``obs`` [n, *obs_shape] at slots ``h`` [n]; ``first``: they
        start episodes (else each continues the episode of the slot before it)."""
        if not self.frame_stack:
            self.obs[h] = obs
            return
        self.obs[h] = obs[..., -1]
        if first:
            self.frame_back[h] = 0
        else:
            prev = self._offset(h, -1)
            self.frame_back[h] = np.minimum(self.frame_back[prev] + 1, self.frame_stack - 1)

    def _frames_overwritten(self, h: np.ndarray) -> None:
        """Slots ``h`` are about to be overwritten: the transitions just after them whose
        stacked observations reach back to them lose a frame."""
        if self.frame_stack < 2:
            return
        d = np.arange(1, self.frame_stack)
        later = self._offset(np.asarray(h, np.int64)[:, None], d[None, :])  # [n, F-1]
        broken = later[(self.frame_back[later] >= d[None, :]) & self.valid[later]]
        self._invalidate(np.unique(broken))

    def take_closed_episodes(self) -> list[tuple[int, int]]:
        """(first slot, last slot) of every episode finished since the previous call (whose
        first slot is still in the buffer)."""
        out, self._closed = self._closed, {}
        return [(a, b) for a, b in out.items() if self.valid[a] and self.valid[b]]

    def next_observations(self, idx: np.ndarray) -> np.ndarray:
        """The next observation of each transition ``idx`` [B] (an episode's last one: the
        observation it ended in)."""
        return self.observations(self._next(np.asarray(idx, np.int64).copy()))

    def episode_first_slots(self, idx: np.ndarray) -> np.ndarray:
        """The first slot of the episode of each valid transition ``idx`` (any shape).

        A transition whose episode has lost its first step to the ring's head (older than the
        ring's first recorded start, or in an episode in progress longer than its ring) gets
        its episode's earliest step still stored: the ring's oldest slot."""
        idx = np.asarray(idx, np.int64)
        out = np.empty_like(idx)
        sc = self.stream_capacity
        stream = idx // sc
        for s in np.unique(stream):
            sel = stream == s
            starts = self._start_array(s)
            oldest = int(self.base[s] + self.heads[s])  # ages count from the oldest slot
            pos = np.searchsorted((starts - oldest) % sc, (idx[sel] - oldest) % sc,
                                  side="right") - 1
            out[sel] = np.where(pos >= 0, starts[np.maximum(pos, 0)] if starts.size else 0,
                                oldest)
        return out

    def _start_array(self, stream: int) -> np.ndarray:
        """Ring ``stream``'s episode first slots, oldest first, as an array (rebuilt only after
        an episode starts or loses its start, not at every lookup)."""
        a = self._start_arrays[stream]
        if a is None:
            q = self._starts[stream]
            a = self._start_arrays[stream] = np.fromiter(q, np.int64, len(q))
        return a

    def _write_step(self, p, action, reward, terminated, truncated, extras: dict) -> None:
        """The transition's own fields at slot(s) ``p``; write-back fields start at their
        initial value."""
        self.action[p] = action
        self.reward[p] = reward
        self.terminated[p] = terminated
        self.truncated[p] = truncated
        for name in self._counts:  # p holds no transition yet: its old value is not counted
            self.extras[name][p] = 0
        for k, v in self.extra_initial.items():
            self.extras[k][p] = v
        for k, v in extras.items():
            self.extras[k][p] = v

    def start_episode(self, obs: np.ndarray, stream: int = 0) -> None:
        """Store the first observation of an episode in ring ``stream``."""
        self._starts[stream].append(self._write_obs(stream, obs, first=True))
        self._ids[stream].append(-1)  # numbered when it finishes
        self._start_arrays[stream] = None
        self.opens[stream] = True

    def add(self, action, reward, terminated, truncated, next_obs, stream: int = 0,
            **extras) -> None:
        """Store the transition from the latest observation of ring ``stream`` and its next
        observation."""
        if not self.opens[stream]:
            raise OffpolicyError("ReplayBuffer.add() before start_episode()")
        p = int(self.base[stream] + (self.heads[stream] - 1) % self.stream_capacity)
        self._write_step(p, action, reward, terminated, truncated, extras)
        self._write_obs(stream, next_obs, first=False)
        self.valid[p] = True  # after the write: next_obs now sits at next(p)
        self.num_valid += 1
        self._added(np.array([p]))
        if terminated or truncated:
            self.opens[stream] = False
            self._episode_ended(stream, p)
        self._prune()

    def _added(self, p: np.ndarray) -> None:
        for name in self._counts:
            self._counts[name] += float(self.extras[name][p].sum())
        for f in self.listeners:
            f(p, np.ones(p.size, bool))

    def _prune(self) -> None:
        """Forget whole finished episodes until at most ``memory`` transitions are valid: each
        time the one with the highest mean of ``forget_highest`` (ReF-ER's far-policy flag: the
        most far-policy episode; the oldest of equals), unless the oldest finished episode
        is more than as many episodes older than it as the memory holds: then the oldest.
        This is the authors' smarties of the paper's time under ReF-ER (``ERoldSeqFilter``
        ``farpolfrac``, its default there; ``MemoryProcessing::prune``). Episodes in
        progress stay; it runs after a write has recorded the episodes it ends. Forgotten
        episodes keep their first slot in ``_starts`` (with no valid
        step) until the ring wraps onto it, so slot arithmetic over episodes is unchanged."""
        while self.num_valid > self.memory and self.forget_highest is not None:
            eps = self._finished_episodes()
            if eps is None:
                return
            ring, index, ids, mean = eps
            age = np.argsort(ids, kind="stable")  # oldest first, over every ring
            pick, oldest = int(age[np.argmax(mean[age])]), int(age[0])  # of equals, the oldest
            if ids[oldest] + len(ids) < ids[pick]:
                pick = oldest
            self._forget_index(int(ring[pick]), int(index[pick]))
            self.pruned += 1

    def _finished_episodes(self):
        """Every finished episode that still holds a valid transition: (ring, position in
        the ring's ``_starts``, id, mean of ``forget_highest`` over its valid steps), ring by
        ring; None if there is none."""
        field = self.extras[self.forget_highest]
        out = []
        sc = self.stream_capacity
        for s in range(self.num_streams):
            starts = self._start_array(s)
            n = len(starts) - (1 if self.opens[s] else 0)
            if n <= 0:
                continue
            base, head = int(self.base[s]), int(self.heads[s])
            order = base + (head + np.arange(sc)) % sc  # oldest slot first
            pos = (starts - base - head) % sc
            valid = self.valid[order]
            count = np.add.reduceat(valid.astype(np.int64), pos)[:n]
            total = np.add.reduceat(np.where(valid, field[order], 0).astype(np.float64),
                                    pos)[:n]
            ids = np.fromiter(self._ids[s], np.int64, len(starts))[:n]
            keep = np.flatnonzero((count > 0) & (ids >= 0))
            if keep.size:
                out.append((np.full(keep.size, s), keep, ids[keep], total[keep] / count[keep]))
        if not out:
            return None
        return tuple(np.concatenate(c) for c in zip(*out))

    def _forget_index(self, stream: int, i: int) -> None:
        """Invalidate the episode at position ``i`` of ring ``stream``'s ``_starts`` (up to the
        next episode's first slot, or the ring's head)."""
        starts = self._start_array(stream)
        first = int(starts[i])
        end = (int(starts[i + 1]) if i + 1 < len(starts)
               else int(self.base[stream] + self.heads[stream]))
        self._closed.pop(first, None)
        self._invalidate_span(first, end)

    def add_batch(self, action, reward, terminated, truncated, next_obs, extras=None,
                  streams: np.ndarray | None = None) -> None:
        """One step of every ring at once (a vectorised collector): arrays with a leading
        ``num_streams`` axis. Rings whose episode ended need ``start_episode`` afterwards.
        ``streams``: one step of these rings only (one remote collector's env copies), the
        arrays' leading axis theirs."""
        if streams is not None and len(streams) != self.num_streams:
            self._add_some(np.asarray(streams, np.int64), action, reward, terminated,
                           truncated, next_obs, extras or {})
            return
        if self.num_streams == 1:
            self.add(action[0], reward[0], terminated[0], truncated[0], next_obs[0],
                     **{k: v[0] for k, v in (extras or {}).items()})
            return
        if not self.opens.all():
            raise OffpolicyError("ReplayBuffer.add_batch() before start_episode() in every ring")
        sc = self.stream_capacity
        p = self.base + (self.heads - 1) % sc
        h = self.base + self.heads
        self._write_step(p, action, reward, terminated, truncated, extras or {})
        for s in range(self.num_streams):
            self._overwrite_start(s, int(h[s]))
        self._invalidate(h[self.valid[h]])
        self._frames_overwritten(h)
        self._store_obs(h, np.asarray(next_obs), first=False)
        self.heads = (self.heads + 1) % sc
        np.minimum(self.sizes + 1, sc, out=self.sizes)
        self.valid[p] = True
        self.num_valid += self.num_streams
        self._added(p)
        ended = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        for s in np.flatnonzero(ended):
            self._episode_ended(int(s), int(p[s]))
        self.opens &= ~ended
        self._prune()

    def _add_some(self, streams, action, reward, terminated, truncated, next_obs, extras):
        if not self.opens[streams].all():
            raise OffpolicyError("ReplayBuffer.add_batch() before start_episode() in a ring")
        sc = self.stream_capacity
        p = self.base[streams] + (self.heads[streams] - 1) % sc
        h = self.base[streams] + self.heads[streams]
        self._write_step(p, action, reward, terminated, truncated, extras)
        for s, slot in zip(streams, h):
            self._overwrite_start(int(s), int(slot))
        self._invalidate(h[self.valid[h]])
        self._frames_overwritten(h)
        self._store_obs(h, np.asarray(next_obs), first=False)
        self.heads[streams] = (self.heads[streams] + 1) % sc
        self.sizes[streams] = np.minimum(self.sizes[streams] + 1, sc)
        self.valid[p] = True
        self.num_valid += len(streams)
        self._added(p)
        ended = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        for j in np.flatnonzero(ended):
            self._episode_ended(int(streams[j]), int(p[j]))
        self.opens[streams[ended]] = False
        self._prune()

    def write(self, idx: np.ndarray, fields: dict[str, np.ndarray],
              mask: np.ndarray | None = None) -> None:
        """Write per-step ``fields`` (write-back results of an update) at step indices ``idx``
        ([B] or [T, B] as returned by sampling); where ``mask`` is 0 (padding) nothing is
        written. A step overwritten since it was sampled gets a stale value, harmlessly: the
        new step's own value is written when it is next sampled."""
        idx = np.asarray(idx)
        sel = None if mask is None else np.asarray(mask) > 0
        for k, v in fields.items():
            if k not in self.extras:
                raise OffpolicyError(f"replay has no field '{k}' to write back "
                                     f"(fields: {', '.join(self.extras) or 'none'})")
            v = np.asarray(v)
            where, v = (idx, v) if sel is None else (idx[sel], v[sel])
            if k in self._counts:
                # duplicates in one batch: the last write wins, counted once
                u = np.unique(where)
                old = float(self.extras[k][u][self.valid[u]].sum())
                self.extras[k][where] = v
                self._counts[k] += float(self.extras[k][u][self.valid[u]].sum()) - old
            else:
                self.extras[k][where] = v

    def __len__(self) -> int:
        return self.num_valid

    @property
    def nbytes(self) -> int:
        arrays = [getattr(self, k) for k in _CORE] + list(self.extras.values())
        return int(sum(a.nbytes for a in arrays)) + self.frame_back.nbytes

    # ------------------------------------------------------------------ indices
    def _next(self, idx: np.ndarray) -> np.ndarray:
        nxt = idx + 1
        if self.num_streams == 1:
            nxt[nxt == self.capacity] = 0
        else:
            wrap = nxt % self.stream_capacity == 0
            nxt[wrap] -= self.stream_capacity
        return nxt

    def _offset(self, start: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Slot ``steps`` after ``start`` in the same ring (broadcasting)."""
        sc = self.stream_capacity
        base = (start // sc) * sc
        return base + (start - base + steps) % sc

    def _draw(self, n: int) -> np.ndarray:
        total = self.size
        r = self.rng.integers(0, total, n)
        if self.num_streams == 1:
            return r
        cum = np.cumsum(self.sizes)
        stream = np.searchsorted(cum, r, side="right")
        return self.base[stream] + r - (cum[stream] - self.sizes[stream])

    def sample_indices(self, batch_size: int) -> np.ndarray:
        if self.num_valid == 0:
            raise OffpolicyError("cannot sample from an empty replay buffer")
        idx = self._draw(batch_size)
        bad = ~self.valid[idx]
        while bad.any():
            idx[bad] = self._draw(int(bad.sum()))
            bad = ~self.valid[idx]
        return idx

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A uniform batch of transitions: ``(idx[B], batch)``. The batch holds obs, action,
        reward, next_obs, the extra fields, and ``discount`` (0.0 where terminated, else 1.0:
        truncation bootstraps, termination does not). The raw flags stay out: every array
        passed costs the jitted update a transfer, and ``discount`` is all a one-step update
        needs (sequences carry both)."""
        idx = self.sample_indices(batch_size)
        return idx, self.gather(idx)

    def gather(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions at step indices ``idx`` [B] (as :meth:`sample` returns them)."""
        term = self.terminated[idx]
        batch = {
            "obs": self.observations(idx),
            "action": self.action[idx],
            "reward": self.reward[idx],
            "next_obs": self.observations(self._next(np.asarray(idx).copy())),
            "discount": (~term).astype(np.float32),
        }
        for k, a in self.extras.items():
            batch[k] = a[idx]
        return batch

    def sample_sequences(self, batch_size: int, length: int
                         ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Windows of ``length`` consecutive transitions from single episodes, time-major:
        ``(idx[T, B], batch)``.

        The batch holds ``obs`` [T+1, B, ...] (obs[t+1] is the next observation of step t),
        ``action`` [T, B, m], ``reward``, ``terminated``, ``truncated``, ``discount`` [T, B],
        the extra fields [T, B, ...] and ``mask`` [T, B]: 1.0 while the window is still inside
        the episode it started in. A window that reaches its episode's end is padded with mask
        0 (the padded entries repeat the last valid step), never continued into another
        episode.
        """
        if length < 1:
            raise OffpolicyError(f"sequence length must be >= 1, got {length}")
        return self.windows(self.sample_indices(batch_size), length)

    def sample_episodes(self, batch_size: int, max_length: int
                        ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Whole episodes from their first step (uniform over the episodes whose first step
        is still in replay), padded to ``max_length`` with mask 0; same layout as
        :meth:`sample_sequences`. An episode still in progress is included up to its latest
        step."""
        if max_length < 1:
            raise OffpolicyError(f"episode length must be >= 1, got {max_length}")
        starts = np.concatenate([self._start_array(s) for s in range(self.num_streams)])
        starts = starts[self.valid[starts]] if starts.size else starts
        if starts.size == 0:
            raise OffpolicyError("cannot sample episodes: replay holds no episode start")
        return self.windows(starts[self.rng.integers(0, starts.size, batch_size)], max_length)

    def _recent_slots(self, ring: int, length: int) -> np.ndarray:
        """The slots of ring ``ring``'s latest ``length`` transitions, oldest first."""
        if length < 1 or 2 * length + 1 > self.stream_capacity:
            raise OffpolicyError(f"segment length must be in [1, "
                                 f"{(self.stream_capacity - 1) // 2}], got {length}")
        back = np.arange(-(2 * length + 1), 0)  # one final-obs slot at most per transition
        slots = self.base[ring] + (self.heads[ring] + back) % self.stream_capacity
        slots = slots[back >= -self.sizes[ring]]
        return slots[self.valid[slots]][-length:]

    def _rings(self, streams: np.ndarray | None) -> list[int]:
        return list(range(self.num_streams)) if streams is None else [int(s) for s in streams]

    def recent_segments(self, length: int, streams: np.ndarray | None = None
                        ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The latest ``length`` transitions of every ring (the on-policy segment of ACER's
        Algorithm 1) in the layout of :meth:`sample_sequences`: ``(idx[T, 2K], batch)``.

        A segment may span an episode end, and a window never does, so each ring gives two
        windows of T = ``length`` steps: column ``2i`` from the segment's first transition of
        ring i to the end of its episode (or of the segment), column ``2i + 1`` from the first
        transition of the episode that started inside the segment (mask all 0 if none did).
        Transitions of episodes that began and ended inside one segment (episodes shorter
        than the segment) are left to replay sampling (:meth:`recent_pieces` keeps them).
        ``streams``: these rings only (the ones a remote collector's segment just filled):
        ``[T, 2 len(streams)]``.
        """
        rings = self._rings(streams)
        starts = np.empty(2 * len(rings), np.int64)
        empty = np.zeros(2 * len(rings), bool)
        for c, s in enumerate(rings):
            slots = self._recent_slots(s, length)
            if len(slots) == 0:
                starts[2 * c:2 * c + 2] = self.base[s]
                empty[2 * c:2 * c + 2] = True
                continue
            ends = self.terminated[slots] | self.truncated[slots]
            starts[2 * c] = slots[0]
            later = np.flatnonzero(ends[:-1])  # an episode ended before the segment's last step
            if later.size:
                starts[2 * c + 1] = slots[later[-1] + 1]
            else:
                starts[2 * c + 1], empty[2 * c + 1] = slots[0], True
        idx, out = self.windows(starts, length)
        out["mask"][:, empty] = 0.0
        return idx, out

    def recent_pieces(self, length: int, streams: np.ndarray | None = None
                      ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Every ring's latest ``length`` transitions cut at its episode ends, one window of
        ``length`` steps per piece (masked after the piece), in the layout of
        :meth:`sample_sequences`: ``(idx[T, n], batch)``, ring by ring, oldest piece first;
        together the windows hold each of those transitions exactly once (AQL's fresh
        unroll, whose episodes may be shorter than it)."""
        starts, ends_at = [], []
        for s in self._rings(streams):
            slots = self._recent_slots(s, length)
            if len(slots) == 0:
                continue
            ends = self.terminated[slots] | self.truncated[slots]
            first = np.concatenate([[0], np.flatnonzero(ends[:-1]) + 1])
            starts += slots[first].tolist()
            ends_at += (np.append(first[1:], len(slots)) - first).tolist()
        idx, out = self.windows(np.asarray(starts, np.int64), length)
        out["mask"] *= (np.arange(length)[:, None] < np.asarray(ends_at)[None, :])
        return idx, out

    def windows(self, start: np.ndarray, length: int
                ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The windows of ``length`` steps that start at step indices ``start`` [B] (slots
        drawn by priority, say), in the layout of :meth:`sample_sequences`."""
        steps, ok = self._window_steps(start, length)
        out = self._gather_steps(steps, ok)
        out["obs"] = self.observations(self._window_obs_slots(steps))
        return steps, out

    def _window_steps(self, start: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        """The step index of each window position [T, B] (padded positions repeat the last
        in-episode step, so that indexing stays in bounds) and whether it is in the episode
        the window started in."""
        steps = self._offset(start[None, :], np.arange(length)[:, None])  # [T, B]
        done = self.terminated[steps] | self.truncated[steps]
        ok = self.valid[steps].copy()
        ok[1:] &= ~done[:-1]  # step t continues the episode only if step t-1 did not end it
        ok = np.logical_and.accumulate(ok, axis=0)
        last = np.maximum(ok.sum(0) - 1, 0)
        t_eff = np.minimum(np.arange(length)[:, None], last[None, :])
        return self._offset(start[None, :], t_eff), ok

    def _window_obs_slots(self, steps: np.ndarray) -> np.ndarray:
        """The observation slots [T+1, B] of window steps [T, B]: each step's own, then the
        last one's next observation."""
        slots = np.empty((steps.shape[0] + 1, steps.shape[1]), np.int64)
        slots[0] = steps[0]
        slots[1:] = self._next(steps.copy())
        return slots

    def contexts(self, anchor: np.ndarray, back: int, steps: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What a recurrent core reads before and along sampled steps ``anchor`` [B] (a
        transition, or a window's first step): ``(start[B], offset[B], obs)``. ``offset`` is
        how many steps of the anchor's episode precede it in replay, at most ``back`` (fewer
        at the episode's start, or where older steps left the buffer); ``start`` is the step
        that many before the anchor; ``obs`` [back + steps + 1, B, ...] are the observations
        from ``start`` on (position ``offset`` is the anchor's), padded past the episode's
        end as :meth:`windows` pads. A context never reaches into another episode."""
        anchor = np.asarray(anchor, np.int64)
        offset = np.zeros(anchor.shape, np.int64)
        if back > 0:
            before = self._offset(anchor[None, :], -np.arange(1, back + 1)[:, None])  # [back, B]
            same = self.valid[before] & ~(self.terminated[before] | self.truncated[before])
            offset = np.logical_and.accumulate(same, axis=0).sum(0)
        start = self._offset(anchor, -offset)
        window, _ = self._window_steps(start, back + steps)
        return start, offset, self.observations(self._window_obs_slots(window))

    def _gather_steps(self, steps: np.ndarray, ok: np.ndarray) -> dict[str, np.ndarray]:
        term = self.terminated[steps]
        out = {
            "action": self.action[steps],
            "reward": self.reward[steps],
            "terminated": term,
            "truncated": self.truncated[steps],
            "discount": (~term).astype(np.float32),
            "mask": ok.astype(np.float32),
        }
        for k, a in self.extras.items():
            out[k] = a[steps]
        return out

    # ------------------------------------------------------------------ persistence
    def _written(self) -> slice | np.ndarray:
        """Every written slot, ring by ring (saved in this order): a slice when that is a
        prefix of the buffer (one ring, or every ring full), so that saving reads views and
        loading writes ranges (a full paper-atari memory is 5.3 GiB: a gathered copy would
        double it at every checkpoint); absolute indices otherwise."""
        if self.num_streams == 1 or bool((self.sizes == self.stream_capacity).all()):
            return slice(0, int(self.sizes.sum()))
        return np.concatenate([b + np.arange(n) for b, n in zip(self.base, self.sizes)])

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The arrays :meth:`save` writes: the written slots (:meth:`_written`)."""
        take = self._written()
        arrays = {k: getattr(self, k)[take] for k in _CORE}
        arrays.update({f"extra.{k}": v[take] for k, v in self.extras.items()})
        if self.frame_stack:
            arrays["frame_back"] = self.frame_back[take]
        meta = {
            "format": REPLAY_FORMAT, "frame_stack": self.frame_stack,
            "capacity": self.capacity, "num_streams": self.num_streams,
            "head": self.head, "size": self.size,
            "heads": self.heads.tolist(), "sizes": self.sizes.tolist(),
            "opens": self.opens.tolist(), "open": self._open,
            "num_valid": self.num_valid,
            "obs_shape": list(self.obs_shape), "action_dim": self.action_dim,
            "extras": {k: [list(s), d.str] for k, (s, d) in self.extra_specs.items()},
            "rng": self.rng.bit_generator.state,
            "starts": [list(map(int, q)) for q in self._starts],
            "episode_ids": [list(map(int, q)) for q in self._ids], "next_id": self._next_id,
            "pruned": self.pruned,
            "closed": [[int(a), int(b)] for a, b in self._closed.items()],
        }
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        for name, obj in self.attachments.items():
            arrays.update({f"attached.{name}.{k}": v for k, v in obj.state_arrays().items()})
        return arrays

    def save(self, path: str | Path) -> None:
        """Write the buffer as an uncompressed .npz (no pickle), atomically."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **self.state_arrays())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def load(self, path: str | Path) -> None:
        """Restore from ``save``; the buffer must have been built with the same shapes."""
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(bytes(z["meta"]).decode())
                streams = meta.get("num_streams", 1)
                saved_frames = meta.get("frame_stack", 0)
                if saved_frames != self.frame_stack:
                    def layout(f):
                        return (f"its {f} stacked frames once per step" if f
                                else "whole observations")

                    raise OffpolicyError(
                        f"replay in {path} (format {meta.get('format', 1)}) stores "
                        f"{layout(saved_frames)}; this run stores {layout(self.frame_stack)} "
                        f"(format {REPLAY_FORMAT}) and cannot continue from it: start the run "
                        "afresh, or resume it with the offpolicy release that wrote it")
                if (meta["capacity"] != self.capacity or streams != self.num_streams
                        or tuple(meta["obs_shape"]) != self.obs_shape
                        or meta["action_dim"] != self.action_dim
                        or not set(meta["extras"]) <= set(self.extra_specs)):
                    raise OffpolicyError(
                        f"replay in {path} does not match this configuration "
                        f"(capacity {meta['capacity']}, {streams} env copies, obs "
                        f"{meta['obs_shape']}, action {meta['action_dim']}, extras "
                        f"{sorted(meta['extras'])})")
                if streams == 1:
                    heads = [meta["head"]]
                    sizes = [meta["size"]]
                    opens = [meta["open"]]
                else:
                    heads, sizes, opens = meta["heads"], meta["sizes"], meta["opens"]
                self.sizes = np.asarray(sizes, np.int64)
                slots = self._written()
                self.valid[:] = False  # slots beyond the saved ones hold nothing
                for k in _CORE:
                    getattr(self, k)[slots] = z[k]
                if self.frame_stack:
                    self.frame_back[slots] = z["frame_back"]
                for k in self.extras:
                    # a field the file predates (an agent that stores more since): its
                    # initial value, or zeros
                    self.extras[k][slots] = (z[f"extra.{k}"] if k in meta["extras"]
                                             else self.extra_initial.get(k, 0))
                attached = {name: {k[len(f"attached.{name}."):]: z[k] for k in z.files
                                   if k.startswith(f"attached.{name}.")}
                            for name in self.attachments}
        except OffpolicyError:
            raise
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise OffpolicyError(f"corrupt replay file {path}: {e}") from e
        self.heads = np.asarray(heads, np.int64)
        self.opens = np.asarray(opens, bool)
        self.num_valid = meta["num_valid"]
        self.rng.bit_generator.state = meta["rng"]
        if "starts" in meta:
            self._starts = [collections.deque(q) for q in meta["starts"]]
        else:  # a file written before episode starts were saved
            self._rebuild_starts()
        self._start_arrays = [None] * self.num_streams
        if "episode_ids" in meta:
            self._ids = [collections.deque(q) for q in meta["episode_ids"]]
            self._next_id = int(meta["next_id"])
        else:  # a file written before episode ids: the i-th episode of every ring before the
            # (i+1)-th of any (the order they finished in is not in the file)
            k = self.num_streams
            self._ids = [collections.deque(range(s, s + k * len(q), k))
                         for s, q in enumerate(self._starts)]
            self._next_id = k * max((len(q) for q in self._starts), default=0)
        self.pruned = int(meta.get("pruned", 0))
        self._closed = {int(a): int(b) for a, b in meta.get("closed", [])}
        for name in self._counts:
            self._counts[name] = float(self.extras[name][self.valid].sum())
        for f in self.listeners:
            every = np.arange(self.capacity)
            f(every, self.valid.copy())
        for name, obj in self.attachments.items():
            if attached[name]:  # a file written without it: the listeners' fresh state stays
                obj.load_arrays(attached[name])

    def _rebuild_starts(self) -> None:
        """Episode first slots, oldest first per ring: a valid slot whose predecessor in the
        ring holds no transition (a final observation) or that is the ring's oldest slot."""
        sc = self.stream_capacity
        for s in range(self.num_streams):
            n, h = int(self.sizes[s]), int(self.heads[s])
            order = (np.arange(n) + (h if n == sc else 0)) % sc  # oldest first
            slots = self.base[s] + order
            prev_valid = np.concatenate([[n == sc], self.valid[slots[:-1]]])
            first = self.valid[slots] & ~prev_valid
            self._starts[s] = collections.deque(int(i) for i in slots[first])
            self._start_arrays[s] = None

    def close_episode(self, streams: np.ndarray | None = None) -> None:
        """Abandon the episodes in progress (on resume they restart; a remote collector that
        died restarts its rings'): each one that holds a transition counts as finished for
        stored returns (its last transition bootstraps from the stored next observation, as
        a truncation); the last observation stays invalid. ``streams``: these rings only."""
        sc = self.stream_capacity
        which = np.zeros(self.num_streams, bool)
        which[np.arange(self.num_streams) if streams is None else np.asarray(streams)] = True
        for s in np.flatnonzero(self.opens & which):
            starts = self._starts[s]
            p = int(self.base[s] + (self.heads[s] - 2) % sc)  # the latest transition
            last_obs = int(self.base[s] + (self.heads[s] - 1) % sc)
            if starts and starts[-1] != last_obs and self.valid[p]:
                self._closed[starts[-1]] = p
                self._number_latest(int(s))
        self.opens[which] = False
