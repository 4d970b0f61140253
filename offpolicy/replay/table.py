"""The replay table: storage, a sampler, a remover and extensions, in the shape Reverb's tables
and DreamerV3's replay share (``embodied/replay/replay.py``: the replay takes its selector and
limiter as parts).

* storage (:mod:`offpolicy.replay.storage`): the rings of arrays and their episodes;
* a sampler (:mod:`offpolicy.replay.samplers`): a selector that picks the steps a batch starts
  at (uniform, episode starts, or prioritized) and the data spec's layout;
* a remover (:mod:`offpolicy.replay.removers`): what leaves besides the slot a ring overwrites
  (oldest episodes whole, or the ReF-ER authors' far-policy filter);
* extensions (:mod:`offpolicy.replay.extensions`): keys added to every sample and taken from
  every write-back, state kept in step with the storage (the far-policy count, prioritized
  sampling, stored returns, a recurrent core's contexts).

The collector writes through the ``Sink`` verbs (``start_episode``, ``add_batch``); the learner
uses :meth:`Table.sample`, :meth:`Table.write_back`, :meth:`Table.maintain` (with
:meth:`Table.rescale`) and :meth:`Table.valid_values`, and knows no algorithm's feature:
``training/build.py`` declares the table from the agent's contract. Files:
:mod:`offpolicy.replay.files`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from offpolicy.replay import files
from offpolicy.replay.extensions import Extension
from offpolicy.replay.keys import MASK
from offpolicy.replay.memory import check_memory
from offpolicy.replay.removers import OldestStep
from offpolicy.replay.samplers import Contexts, Sampler, Uniform, recent_segments
from offpolicy.replay.storage import Storage


class Table:
    def __init__(self, storage: Storage, sampler: Sampler | None = None, remover=None,
                 extensions: Sequence = ()):
        """``sampler``: default uniform transitions (seed 0); ``remover``: default
        :class:`~offpolicy.replay.removers.OldestStep`; ``extensions``: in the order they add
        their keys (a selector that is an extension too, the prioritized one, goes first).
        Refuses a table that would not fit in memory once full: the storage checks itself,
        with what it was told its extensions keep beside it (``bytes_beside``); what it was
        not told is checked here, before the extensions allocate it
        (:func:`~offpolicy.replay.memory.check_memory`)."""
        self.storage = storage
        self.sampler = sampler if sampler is not None else Sampler(Uniform())
        self.remover = remover if remover is not None else OldestStep()
        selector = self.sampler.selector
        self.extensions = ([selector] if isinstance(selector, Extension) else []) + [
            ext for ext in extensions if ext is not selector]
        self.context = next((e for e in self.extensions if isinstance(e, Contexts)), None)
        self.bytes_per_step = storage.bytes_per_step + sum(
            ext.bytes_per_step(storage.capacity) for ext in self.extensions)
        self.full_bytes = storage.capacity * self.bytes_per_step
        if self.bytes_per_step > storage.checked_bytes_per_step:  # not counted by the storage
            check_memory(storage.capacity, self.bytes_per_step)
        self.remover.check(storage)
        for ext in self.extensions:
            ext.attach(storage)
        storage.listener = self

    # ------------------------------------------------------------------ the storage's events
    def overwriting(self, stream: int, first: int) -> None:
        self.remover.overwriting(self.storage, stream, first)

    def inserted(self, slots: np.ndarray) -> None:
        for ext in self.extensions:
            ext.inserted(slots)

    def removed(self, slots: np.ndarray) -> None:
        for ext in self.extensions:
            ext.removed(slots)

    # ------------------------------------------------------------------ the collector's sink
    def start_episode(self, obs: np.ndarray, stream: int = 0) -> None:
        self.storage.start_episode(obs, stream)

    def add(self, action, reward, terminated, truncated, next_obs, stream: int = 0,
            **fields) -> None:
        """One step of ring ``stream`` (:meth:`Storage.add`)."""
        self.storage.add(action, reward, terminated, truncated, next_obs, stream, **fields)
        self.remover.after_write(self.storage)

    def add_batch(self, action, reward, terminated, truncated, next_obs, extras=None,
                  streams: np.ndarray | None = None) -> None:
        """One step of every ring, or of the rings ``streams`` (:meth:`Storage.add_batch`)."""
        self.storage.add_batch(action, reward, terminated, truncated, next_obs, extras,
                               streams)
        self.remover.after_write(self.storage)

    def close_episode(self, streams: np.ndarray | None = None) -> None:
        """Abandon the episodes in progress (:meth:`Storage.close_episode`)."""
        self.storage.close_episode(streams)

    # ------------------------------------------------------------------ the learner's verbs
    def __len__(self) -> int:
        return len(self.storage)

    @property
    def capacity(self) -> int:
        return self.storage.capacity

    @property
    def memory(self) -> int:
        """The most transitions that stay valid."""
        return self.remover.memory or self.storage.capacity

    def augment(self, idx: np.ndarray, batch: dict) -> dict:
        """The extensions' keys added to a batch of the steps ``idx``."""
        for ext in self.extensions:
            batch = ext.augment(self.storage, idx, batch)
        return batch

    def sample(self, n: int, step: int = 0) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A batch of ``n`` by the sampler, with the extensions' keys: ``(idx, batch)``
        (``idx`` [B], or [T, B] for windows: where a write-back goes). ``step``: the update
        count (prioritized replay anneals its weights by it)."""
        idx, batch = self.sampler.sample(self.storage, n, step)
        return idx, self.augment(idx, batch)

    def example_batch(self, n: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A batch of the shapes :meth:`sample` gives, whatever the storage holds (tracing)."""
        idx, batch = self.sampler.example(self.storage, n)
        return idx, self.augment(idx, batch)

    def recent_segments(self, length: int, streams: np.ndarray | None = None
                        ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The latest ``length`` steps of every ring (or of ``streams``) as windows
        (:func:`~offpolicy.replay.samplers.recent_segments`)."""
        return recent_segments(self.storage, length, streams)

    def write_back(self, idx: np.ndarray, batch: dict, writeback: dict[str, np.ndarray]
                   ) -> None:
        """An update's results for the sampled steps ``idx`` of ``batch``: the extensions take
        their keys (priorities, counted flags, stored targets), the rest are written as fields
        where the batch's mask is not 0, then the extensions follow up (stored targets carried
        back)."""
        for ext in self.extensions:
            ext.take(self.storage, idx, batch, writeback)
        if writeback:
            mask = batch.get(MASK)
            self.storage.write(idx, writeback, None if mask is None else np.asarray(mask))
        for ext in self.extensions:
            ext.written(self.storage, idx, batch, writeback)

    def maintain(self, reward_scale: float, values_after: Callable) -> None:
        """Before a sample: the extensions' upkeep (stored targets of episodes finished since
        the last one, scaled by ``reward_scale``, a truncated one bootstrapped from
        ``values_after(last_transitions)``, V(s_T) by the learner's current network)."""
        for ext in self.extensions:
            ext.maintain(self.storage, reward_scale, values_after)

    def rescale(self, factor: float) -> None:
        """The reward scale changed by ``factor``: stored fields in reward units follow."""
        for ext in self.extensions:
            ext.rescale(self.storage, factor)

    def valid_values(self, name: str) -> np.ndarray:
        """Field ``name`` (``obs``, ``reward`` or a stored field) of every transition."""
        return self.storage.valid_values(name)

    def states_after(self, idx: np.ndarray):
        """What an agent's ``state_value`` reads for the states after transitions ``idx``
        [B]: their next observations, or with a recurrent core each one's context (a dict of
        the context keys), whose ``next_obs`` view is s_T with the episode's memory."""
        if self.context is None:
            return self.storage.next_observations(idx)
        return self.context.augment(self.storage, idx, {})

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        files.save(self, path)

    def load(self, path: str | Path) -> None:
        files.load(self, path)
