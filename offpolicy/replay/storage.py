"""Replay's storage: preallocated rings of NumPy arrays and their episode bookkeeping; every
observation is stored once.

Layout. The storage is split into ``num_streams`` equal rings, one per environment copy of a
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
most F - 1), and a read observation is rebuilt from them, padded with the episode's first
frame at its start (as the env's own stack is after a reset), never reaching into another
episode. About 1/F of the memory of whole stacks. Overwriting a slot invalidates the (at most
F - 1) transitions just after it whose stacks still reach back to it.

Episodes. Each ring keeps the first slots of its episodes, oldest first, and each episode's
number in the order episodes finished; episodes finished since the stored returns last took
them are kept as (first slot, last slot). The storage tells its ``listener`` (the
:class:`~offpolicy.replay.table.Table` it is part of) when a ring is about to overwrite the
first step of its oldest episode (a remover may forget the whole episode then) and whenever
transitions appear or disappear (extensions follow them). What leaves is decided by the
table's remover (:mod:`offpolicy.replay.removers`); what is drawn, by its sampler
(:mod:`offpolicy.replay.samplers`).
"""

from __future__ import annotations

import collections

import numpy as np

from offpolicy.errors import OffpolicyError
from offpolicy.replay.keys import CORE_FIELDS, OBS, RESERVED
from offpolicy.replay.memory import check_memory


class Storage:
    def __init__(self, capacity: int, obs_shape: tuple[int, ...], action_dim: int,
                 fields: dict[str, tuple] | None = None, obs_dtype: np.dtype | str = np.float32,
                 num_streams: int = 1, frame_stack: int = 0, bytes_beside: int = 0):
        """``fields``: per-step fields ``{name: (shape, dtype)}`` or ``(shape, dtype,
        initial)``; ``initial`` fills a new step (write-back fields start there).
        ``frame_stack`` F > 0: observations are the last F frames stacked on the last axis
        (``obs_shape`` [..., F]), stored one frame per slot (module docstring).
        ``bytes_beside``: bytes per slot that the table's extensions keep beside the storage
        (prioritized replay's ranking), counted in the memory check made here, before the
        arrays are mapped (:func:`~offpolicy.replay.memory.check_memory`)."""
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
        for name, spec in (fields or {}).items():
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
        slot_shape = self.obs_shape[:-1] if self.frame_stack else self.obs_shape
        self.bytes_per_step = (  # what the memory check counts per stored step
            self.bytes_per_observation(self.obs_shape, obs_dtype, self.frame_stack)
            + 4 * self.action_dim + 4 + 3
            + sum(int(np.prod(sh)) * dt.itemsize for sh, dt in self.extra_specs.values()))
        self.checked_bytes_per_step = self.bytes_per_step + int(bytes_beside)
        self.full_bytes = check_memory(self.capacity, self.checked_bytes_per_step)
        c = self.capacity
        # np.zeros maps untouched pages lazily: a 1e6 replay costs memory only as it fills.
        self.obs = np.zeros((c, *slot_shape), obs_dtype)
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
        # each episode's number in the order episodes finished (over all rings; -1 while in
        # progress), beside _starts: the far-policy filter compares episodes' ages by it
        self._ids = [collections.deque() for _ in range(k)]
        self._next_id = 0
        # first slot -> last slot of the episodes finished since the last
        # take_closed_episodes(), while their first slot lasts (a table that never takes
        # them keeps at most the episodes in memory)
        self._closed: dict[int, int] = {}
        # told of overwritten episode starts and of transitions that appear or disappear
        # (the table: its remover and extensions follow the storage through it)
        self.listener = None

    # ------------------------------------------------------------------ the rings
    @property
    def head(self) -> int:
        """Next slot to write of a single-ring storage (absolute index)."""
        return int(self.base[0] + self.heads[0])

    @property
    def size(self) -> int:
        """Slots written so far, over all rings."""
        return int(self.sizes.sum())

    @property
    def episodes_open(self) -> bool:
        """Every ring has an episode in progress."""
        return bool(self.opens.all())

    def __len__(self) -> int:
        return self.num_valid

    @property
    def nbytes(self) -> int:
        arrays = [getattr(self, k) for k in CORE_FIELDS] + list(self.extras.values())
        return int(sum(a.nbytes for a in arrays)) + self.frame_back.nbytes

    def next_slots(self, idx: np.ndarray) -> np.ndarray:
        """The slot after each of ``idx`` in its ring (where its next observation is)."""
        nxt = np.asarray(idx) + 1
        if self.num_streams == 1:
            nxt[nxt == self.capacity] = 0
        else:
            wrap = nxt % self.stream_capacity == 0
            nxt[wrap] -= self.stream_capacity
        return nxt

    def offset(self, start: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Slot ``steps`` after ``start`` in the same ring (broadcasting)."""
        sc = self.stream_capacity
        base = (start // sc) * sc
        return base + (start - base + steps) % sc

    def oldest_slot(self, stream: int) -> int:
        """The slot ring ``stream`` writes next: its oldest once it has wrapped."""
        return int(self.base[stream] + self.heads[stream])

    def ring_order(self, stream: int) -> np.ndarray:
        """Every slot of ring ``stream``, oldest first (as ``oldest_slot`` counts ages)."""
        sc = self.stream_capacity
        return self.base[stream] + (self.heads[stream] + np.arange(sc)) % sc

    def written_slots(self) -> slice | np.ndarray:
        """Every written slot, ring by ring: a slice when that is a prefix of the storage (one
        ring, or every ring full), so that a file reads views and writes ranges (a full
        paper-atari memory is 5.3 GiB: a gathered copy would double it at every checkpoint);
        absolute indices otherwise."""
        if self.num_streams == 1 or bool((self.sizes == self.stream_capacity).all()):
            return slice(0, int(self.sizes.sum()))
        return np.concatenate([b + np.arange(n) for b, n in zip(self.base, self.sizes)])

    # ------------------------------------------------------------------ observations
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
        frames = self.obs[self.offset(slots[..., None], -back)]  # [..., F, *frame]
        return np.ascontiguousarray(np.moveaxis(frames, slots.ndim, -1))

    def next_observations(self, idx: np.ndarray) -> np.ndarray:
        """The next observation of each transition ``idx`` [B] (an episode's last one: the
        observation it ended in)."""
        return self.observations(self.next_slots(np.asarray(idx, np.int64)))

    def valid_values(self, name: str) -> np.ndarray:
        """Field ``name`` (``obs``, ``reward`` or an extra field) of every stored transition."""
        valid = np.flatnonzero(self.valid)
        if name == OBS:
            return self.observations(valid)
        return (self.extras[name] if name in self.extras else getattr(self, name))[valid]

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
            prev = self.offset(h, -1)
            self.frame_back[h] = np.minimum(self.frame_back[prev] + 1, self.frame_stack - 1)

    def _frames_overwritten(self, h: np.ndarray) -> None:
        """Slots ``h`` are about to be overwritten: the transitions just after them whose
        stacked observations reach back to them lose a frame."""
        if self.frame_stack < 2:
            return
        d = np.arange(1, self.frame_stack)
        later = self.offset(np.asarray(h, np.int64)[:, None], d[None, :])  # [n, F-1]
        broken = later[(self.frame_back[later] >= d[None, :]) & self.valid[later]]
        self.invalidate(np.unique(broken))

    # ------------------------------------------------------------------ episodes
    def episode_starts(self, stream: int) -> np.ndarray:
        """Ring ``stream``'s episode first slots, oldest first, as an array (rebuilt only
        after an episode starts or loses its start, not at every lookup)."""
        a = self._start_arrays[stream]
        if a is None:
            q = self._starts[stream]
            a = self._start_arrays[stream] = np.fromiter(q, np.int64, len(q))
        return a

    def episode_ids(self, stream: int) -> np.ndarray:
        """Ring ``stream``'s episodes' numbers in the order they finished (-1: in progress),
        beside :meth:`episode_starts`."""
        return np.fromiter(self._ids[stream], np.int64, len(self._ids[stream]))

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
            starts = self.episode_starts(s)
            oldest = self.oldest_slot(s)  # ages count from the oldest slot
            pos = np.searchsorted((starts - oldest) % sc, (idx[sel] - oldest) % sc,
                                  side="right") - 1
            out[sel] = np.where(pos >= 0, starts[np.maximum(pos, 0)] if starts.size else 0,
                                oldest)
        return out

    def episode_slots(self, first: int, last: int) -> np.ndarray:
        """The slots of the episode from slot ``first`` to slot ``last``, in order."""
        n = (last - first) % self.stream_capacity + 1
        return self.offset(np.asarray(first), np.arange(n))

    def take_closed_episodes(self) -> list[tuple[int, int]]:
        """(first slot, last slot) of every episode finished since the previous call (whose
        first slot is still in the storage)."""
        out, self._closed = self._closed, {}
        return [(a, b) for a, b in out.items() if self.valid[a] and self.valid[b]]

    def closed_episodes(self) -> list[tuple[int, int]]:
        """The (first slot, last slot) pairs :meth:`take_closed_episodes` would take, in
        order, left where they are (for a file)."""
        return list(self._closed.items())

    def restore_episodes(self, starts: list, ids: list, next_id: int,
                         closed: list) -> None:
        """Set the episode bookkeeping (from a file): per ring its first slots and numbers,
        oldest first, the next number, and the (first, last) slots of closed episodes."""
        self._starts = [collections.deque(int(i) for i in q) for q in starts]
        self._start_arrays = [None] * self.num_streams
        self._ids = [collections.deque(int(i) for i in q) for q in ids]
        self._next_id = int(next_id)
        self._closed = {int(a): int(b) for a, b in closed}

    def episodes_state(self) -> dict:
        """The episode bookkeeping as plain lists (:meth:`restore_episodes` takes it back)."""
        return {"starts": [list(map(int, q)) for q in self._starts],
                "episode_ids": [list(map(int, q)) for q in self._ids],
                "next_id": self._next_id}

    def _overwrite_start(self, stream: int, h: int) -> None:
        """Slot ``h`` of ring ``stream`` is about to be overwritten: if it is the first step of
        the oldest episode, that episode loses its start (and the listener may forget the
        rest of it)."""
        starts = self._starts[stream]
        if starts and starts[0] == h:
            starts.popleft()
            self._ids[stream].popleft()
            self._start_arrays[stream] = None
            self._closed.pop(h, None)
            if self.listener is not None:
                self.listener.overwriting(stream, h)

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

    # ------------------------------------------------------------------ forgetting
    def invalidate(self, slots: np.ndarray) -> None:
        """The transitions at ``slots`` (valid, distinct) leave the storage."""
        if slots.size == 0:
            return
        self.valid[slots] = False
        self.num_valid -= int(slots.size)
        if self.listener is not None:
            self.listener.removed(slots)

    def invalidate_span(self, first: int, end: int) -> None:
        """Invalidate the valid transitions of one ring from slot ``first`` up to slot ``end``
        (exclusive, in ring order)."""
        slots = self.offset(np.asarray(first), np.arange((end - first) % self.stream_capacity))
        self.invalidate(slots[self.valid[slots]])

    def invalidate_episode(self, stream: int, first: int) -> None:
        """Invalidate every transition of the episode of ring ``stream`` starting at slot
        ``first``: up to the next episode's first slot (only ``first`` when it is longer than
        the ring)."""
        if not self._starts[stream]:  # the episode in progress is longer than the ring
            self.invalidate(np.array([first])[self.valid[[first]]])
            return
        self.invalidate_span(first, self._starts[stream][0])

    def forget_episode_at(self, stream: int, i: int) -> None:
        """Invalidate the episode at position ``i`` of ring ``stream``'s episode starts (up
        to the next episode's first slot, or the ring's head); it is no longer closed."""
        starts = self.episode_starts(stream)
        first = int(starts[i])
        end = int(starts[i + 1]) if i + 1 < len(starts) else self.oldest_slot(stream)
        self._closed.pop(first, None)
        self.invalidate_span(first, end)

    # ------------------------------------------------------------------ writing
    def _write_obs(self, stream: int, obs: np.ndarray, first: bool) -> int:
        h = self.oldest_slot(stream)
        self._overwrite_start(stream, h)
        if self.valid[h]:
            self.invalidate(np.array([h]))
        if self.frame_stack:
            self._frames_overwritten(np.array([h]))
            self._store_obs(np.array([h]), np.asarray(obs)[None], first)
        else:  # the per-step path of one env copy: a plain store
            self.obs[h] = obs
        self.heads[stream] = (self.heads[stream] + 1) % self.stream_capacity
        self.sizes[stream] = min(self.sizes[stream] + 1, self.stream_capacity)
        return h

    def _write_step(self, p, action, reward, terminated, truncated, extras: dict) -> None:
        """The transition's own fields at slot(s) ``p``; write-back fields start at their
        initial value."""
        self.action[p] = action
        self.reward[p] = reward
        self.terminated[p] = terminated
        self.truncated[p] = truncated
        for k, v in self.extra_initial.items():
            self.extras[k][p] = v
        for k, v in extras.items():
            self.extras[k][p] = v

    def _added(self, p: np.ndarray) -> None:
        if self.listener is not None:
            self.listener.inserted(p)

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
            raise OffpolicyError("replay add() before start_episode()")
        p = int(self.base[stream] + (self.heads[stream] - 1) % self.stream_capacity)
        self._write_step(p, action, reward, terminated, truncated, extras)
        self._write_obs(stream, next_obs, first=False)
        self.valid[p] = True  # after the write: next_obs now sits at next(p)
        self.num_valid += 1
        self._added(np.array([p]))
        if terminated or truncated:
            self.opens[stream] = False
            self._episode_ended(stream, p)

    def add_batch(self, action, reward, terminated, truncated, next_obs, extras=None,
                  streams: np.ndarray | None = None) -> None:
        """One step of every ring at once (a vectorised collector): arrays with a leading
        ``num_streams`` axis. Rings whose episode ended need ``start_episode`` afterwards.
        ``streams``: one step of these rings only (one remote collector's env copies), the
        arrays' leading axis theirs."""
        extras = extras or {}
        if streams is None and self.num_streams == 1:
            self.add(action[0], reward[0], terminated[0], truncated[0], next_obs[0],
                     **{k: v[0] for k, v in extras.items()})
            return
        streams = (np.arange(self.num_streams) if streams is None
                   else np.asarray(streams, np.int64))
        if not self.opens[streams].all():
            raise OffpolicyError("replay add_batch() before start_episode() in every ring")
        sc = self.stream_capacity
        p = self.base[streams] + (self.heads[streams] - 1) % sc
        h = self.base[streams] + self.heads[streams]
        self._write_step(p, action, reward, terminated, truncated, extras)
        for s, slot in zip(streams, h):
            self._overwrite_start(int(s), int(slot))
        self.invalidate(h[self.valid[h]])
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

    def write(self, idx: np.ndarray, fields: dict[str, np.ndarray],
              mask: np.ndarray | None = None) -> None:
        """Write per-step ``fields`` (write-back results of an update) at step indices ``idx``
        ([B] or [T, B] as returned by sampling); where ``mask`` is 0 (padding) nothing is
        written. A step overwritten since it was sampled gets a stale value, harmlessly: the
        new step's own value is written when it is next sampled."""
        for k, v in fields.items():
            if k not in self.extras:
                raise OffpolicyError(f"replay has no field '{k}' to write back "
                                     f"(fields: {', '.join(self.extras) or 'none'})")
            where, v = unmasked(idx, v, mask)
            self.extras[k][where] = v

    # ------------------------------------------------------------------ files
    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """The written slots' arrays (:meth:`written_slots`) and the rings' bookkeeping, as a
        file keeps them (:mod:`offpolicy.replay.files`)."""
        take = self.written_slots()
        arrays = {k: getattr(self, k)[take] for k in CORE_FIELDS}
        arrays.update({f"extra.{k}": v[take] for k, v in self.extras.items()})
        if self.frame_stack:
            arrays["frame_back"] = self.frame_back[take]
        meta = {
            "frame_stack": self.frame_stack,
            "capacity": self.capacity, "num_streams": self.num_streams,
            "head": self.head, "size": self.size,
            "heads": self.heads.tolist(), "sizes": self.sizes.tolist(),
            "opens": self.opens.tolist(), "open": self.episodes_open,
            "num_valid": self.num_valid,
            "obs_shape": list(self.obs_shape), "action_dim": self.action_dim,
            "extras": {k: [list(s), d.str] for k, (s, d) in self.extra_specs.items()},
            **self.episodes_state(),
            "closed": [[int(a), int(b)] for a, b in self._closed.items()],
        }
        return arrays, meta

    def restore(self, arrays, meta: dict) -> None:
        """Put back the written slots' arrays (``arrays``: a mapping such as an open npz file,
        as :meth:`state` wrote them) and the rings' counters (``meta``: :meth:`state`'s, with
        ``sizes``, ``heads`` and ``opens`` per ring). A field the file predates (not in its
        ``extras``: an agent that stores more since) gets its initial value, or zeros. The
        episode bookkeeping follows (:meth:`restore_episodes`)."""
        self.sizes = np.asarray(meta["sizes"], np.int64)
        slots = self.written_slots()
        self.valid[:] = False  # slots beyond the saved ones hold nothing
        for k in CORE_FIELDS:
            getattr(self, k)[slots] = arrays[k]
        if self.frame_stack:
            self.frame_back[slots] = arrays["frame_back"]
        for k in self.extras:
            self.extras[k][slots] = (arrays[f"extra.{k}"] if k in meta["extras"]
                                     else self.extra_initial.get(k, 0))
        self.heads = np.asarray(meta["heads"], np.int64)
        self.opens = np.asarray(meta["opens"], bool)
        self.num_valid = int(meta["num_valid"])


def unmasked(idx: np.ndarray, values: np.ndarray, mask: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray]:
    """The step indices of ``idx`` and their ``values`` where ``mask`` is not 0 (all without
    a mask): what a write-back writes."""
    idx, values = np.asarray(idx), np.asarray(values)
    if mask is None:
        return idx, values
    sel = np.asarray(mask) > 0
    return idx[sel], values[sel]
