"""Removers: what leaves a table's storage besides the slot its ring overwrites.

A remover has two verbs, both called by the table: ``overwriting(storage, stream, first)``
when ring ``stream`` is about to overwrite the first step (slot ``first``) of its oldest
episode, and ``after_write(storage)`` after every step written (once the step's episode end,
if any, is recorded).

* :class:`OldestStep`: steps leave one at a time, as their ring overwrites them (ER);
* :class:`OldestEpisode`: when a ring overwrites the first step of its oldest episode, the
  whole episode leaves (Remember-and-Forget, ReF-ER App. C: episodes leave first in, first
  out, so a stored return never refers to a step that is gone);
* :class:`FarPolicyEpisodes`: oldest episodes leave as above, and at most ``memory``
  transitions stay valid: past that, whole finished episodes leave by the ReF-ER authors'
  filter (smarties' ``farpolfrac``).
"""

from __future__ import annotations

import numpy as np

from offpolicy.errors import OffpolicyError


class OldestStep:
    """Nothing leaves but the slot a ring overwrites."""

    memory: int | None = None  # no bound on the valid transitions but the capacity
    pruned = 0

    def check(self, storage) -> None:
        """Refuse a storage it cannot work on."""

    def overwriting(self, storage, stream: int, first: int) -> None:
        pass

    def after_write(self, storage) -> None:
        pass


class OldestEpisode(OldestStep):
    """An episode leaves whole when its ring overwrites its first step."""

    def overwriting(self, storage, stream: int, first: int) -> None:
        storage.invalidate_episode(stream, first)


class FarPolicyEpisodes(OldestEpisode):
    """At most ``memory`` valid transitions; when a write goes past that, the finished episode
    with the highest mean of ``field`` (ReF-ER's far-policy flag: the most far-policy episode;
    the oldest of equals) leaves, unless the oldest finished episode is more than as many
    episodes older than it as the memory holds: then the oldest. This is the authors' smarties
    of the paper's time under ReF-ER (``ERoldSeqFilter`` ``farpolfrac``, its default there;
    ``MemoryProcessing::prune``). Episodes in progress stay. Forgotten episodes keep their
    first slot among the ring's episode starts (with no valid step) until the ring wraps onto
    it, so slot arithmetic over episodes is unchanged; the rings therefore need room beyond
    ``memory`` (a capacity of 2 ``memory`` is what the trainer gives): an episode forgotten in
    the middle frees no ring slot until the ring wraps onto it."""

    def __init__(self, memory: int, field: str):
        self.memory, self.field = int(memory), field
        self.pruned = 0  # episodes forgotten by the filter (not by the ring wrapping)

    def check(self, storage) -> None:
        if not 1 <= self.memory <= storage.capacity:
            raise OffpolicyError(f"replay memory must be in [1, {storage.capacity}] "
                                 f"transitions, got {self.memory}")
        if storage.extra_specs.get(self.field, (None,))[0] != ():
            raise OffpolicyError(f"forgetting by '{self.field}' needs it a scalar field")

    def after_write(self, storage) -> None:
        while storage.num_valid > self.memory:
            eps = self._finished_episodes(storage)
            if eps is None:
                return
            ring, index, ids, mean = eps
            age = np.argsort(ids, kind="stable")  # oldest first, over every ring
            pick, oldest = int(age[np.argmax(mean[age])]), int(age[0])  # of equals, the oldest
            if ids[oldest] + len(ids) < ids[pick]:
                pick = oldest
            storage.forget_episode_at(int(ring[pick]), int(index[pick]))
            self.pruned += 1

    def _finished_episodes(self, storage):
        """Every finished episode that still holds a valid transition: (ring, position among
        the ring's episode starts, id, mean of ``field`` over its valid steps), ring by ring;
        None if there is none."""
        field = storage.extras[self.field]
        out = []
        sc = storage.stream_capacity
        for s in range(storage.num_streams):
            starts = storage.episode_starts(s)
            n = len(starts) - (1 if storage.opens[s] else 0)
            if n <= 0:
                continue
            order = storage.ring_order(s)  # oldest slot first
            pos = (starts - storage.oldest_slot(s)) % sc
            valid = storage.valid[order]
            count = np.add.reduceat(valid.astype(np.int64), pos)[:n]
            total = np.add.reduceat(np.where(valid, field[order], 0).astype(np.float64),
                                    pos)[:n]
            ids = storage.episode_ids(s)[:n]
            keep = np.flatnonzero((count > 0) & (ids >= 0))
            if keep.size:
                out.append((np.full(keep.size, s), keep, ids[keep], total[keep] / count[keep]))
        if not out:
            return None
        return tuple(np.concatenate(c) for c in zip(*out))
