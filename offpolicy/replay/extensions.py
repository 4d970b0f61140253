"""Extensions: what a table adds to its storage for particular algorithms, each through the same
few verbs (Reverb's table extensions; DreamerV3's ``Prioritized`` adds ``prioritize`` to a
selector): they follow the storage, add keys to a sample, take keys from a write-back and keep
their own state in the replay file.

The extensions of this library:

* :class:`FarCount` (here): the running count of far-policy steps in the whole memory and the
  batch's ``far_fraction`` (ReF-ER Eq. 12);
* :class:`~offpolicy.replay.prioritized.Prioritized`: rank-based prioritized sampling, also
  the table's selector;
* :class:`~offpolicy.replay.stored_returns.StoredReturns`: V-RACER's V^tbc targets, filled
  when an episode ends and carried back along it after every refresh;
* :class:`~offpolicy.replay.samplers.Contexts`: a recurrent core's context of every sample.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from offpolicy.errors import OffpolicyError
from offpolicy.replay.keys import FAR, FAR_FRACTION, MASK
from offpolicy.replay.storage import unmasked


class Extension:
    """The verbs a table calls; each default does nothing."""

    name = ""  # the prefix of its arrays in the replay file ("": it saves none)

    def bytes_per_step(self, capacity: int) -> int:
        """Memory per slot that it keeps (the table's memory check counts it)."""
        return 0

    def attach(self, storage) -> None:
        """Its table's storage, once, before any write (per-slot structures are sized by
        it)."""

    def inserted(self, slots: np.ndarray) -> None:
        """Transitions appeared at ``slots``."""

    def removed(self, slots: np.ndarray) -> None:
        """The transitions at ``slots`` left (overwritten or forgotten)."""

    def restored(self, storage) -> None:
        """A file was loaded into the storage (its own arrays follow: :meth:`load_arrays`)."""

    def augment(self, storage, idx: np.ndarray, batch: dict) -> dict:
        """Add its keys to a sample of the steps ``idx``."""
        return batch

    def take(self, storage, idx: np.ndarray, batch: dict, writeback: dict) -> None:
        """Before the write-back's fields are written: take its keys out of ``writeback`` (or
        change them) in place."""

    def written(self, storage, idx: np.ndarray, batch: dict, writeback: dict) -> None:
        """After the write-back's fields were written."""

    def maintain(self, storage, reward_scale: float, values_after: Callable) -> None:
        """Before a sample: upkeep with what the learner knows (the reward scale, the value of
        the states after given transitions)."""

    def rescale(self, storage, factor: float) -> None:
        """The reward scale changed by ``factor`` (fields in reward units follow it)."""

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        pass


class FarCount(Extension):
    """The number of far-policy steps in the whole memory, n_far, kept as a running sum of the
    scalar write-back field ``field`` over the valid transitions (updated on every write, not
    scanned), and n_far / N in every sample (``far_fraction``, ReF-ER Eq. 12)."""

    def __init__(self, field: str = FAR):
        self.field = field
        self.count = 0.0
        self.values: np.ndarray | None = None

    def attach(self, storage) -> None:
        if storage.extra_specs.get(self.field, (None,))[0] != ():
            raise OffpolicyError(f"counted field '{self.field}' must be a scalar extra field")
        self.values = storage.extras[self.field]

    def inserted(self, slots: np.ndarray) -> None:
        self.count += float(self.values[slots].sum())

    def removed(self, slots: np.ndarray) -> None:
        self.count -= float(self.values[slots].sum())
        self.values[slots] = 0

    def restored(self, storage) -> None:
        self.values = storage.extras[self.field]
        self.count = float(self.values[storage.valid].sum())

    def augment(self, storage, idx: np.ndarray, batch: dict) -> dict:
        batch[FAR_FRACTION] = np.float32(self.count / max(len(storage), 1))
        return batch

    def take(self, storage, idx: np.ndarray, batch: dict, writeback: dict) -> None:
        """Write the refreshed flags itself: the count changes by the new flags less the old
        ones of the valid steps written (a step drawn twice in one batch: the last write wins,
        counted once)."""
        if self.field not in writeback:
            return
        where, v = unmasked(idx, writeback.pop(self.field), batch.get(MASK))
        u = np.unique(where)
        old = float(self.values[u][storage.valid[u]].sum())
        self.values[where] = v
        self.count += float(self.values[u][storage.valid[u]].sum()) - old
