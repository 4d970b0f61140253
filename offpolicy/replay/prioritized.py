"""Rank-based prioritized experience replay (Schaul et al. 2016, "Prioritized Experience Replay").

A table whose selector is :class:`Prioritized` (``PERSettings``) owns one, and it works on the
storage's absolute slot indices: the table reports every slot whose transition appears or
disappears (the selector's ``inserted`` / ``removed``), a sample draws slots and importance
weights (:meth:`RankPrioritized.sample`, the batch's ``weight``) and the write-back's ``td_abs``
are the new priorities (:meth:`RankPrioritized.update`).

Sampling law (Sec. 3.3, rank-based variant). With N transitions in memory ranked by |TD|
(rank 1 = largest), transition i is drawn with

    P(i) = p_i^alpha / sum_k p_k^alpha,   p_i = 1 / rank(i),

so P(rank r) = r^-alpha / H_N with H_N = sum_{k=1..N} k^-alpha. As in the paper, a batch of B
is stratified: [0, H_N) is cut into B equal segments and one rank is drawn from each, by
inverting the cumulative H_r = sum_{k<=r} k^-alpha (precomputed once up to the capacity) with a
binary search: O(log N) per sampled item, vectorised over the batch. A transition not yet
replayed has no TD error; it enters with the largest priority seen so far (Algorithm 1, line 6).

Importance sampling (Sec. 3.4). The update is weighted by w_i = (N P(i))^-beta / max_j w_j, the
maximum taken over the whole memory, i.e. at the least likely rank N. For the rank law this is

    w_i = (rank(i) / N)^(alpha beta),

in (0, 1], equal to 1 at rank N. beta is annealed linearly from beta0 to 1 over ``beta_steps``
(the step counter is the caller's: env steps or updates).

Ranks between re-sorts (the approximation). Exact ranks at every step would need an
order-statistics tree; the paper's implementation (App. B.2.1) keeps a binary heap as an
approximately sorted array and sorts it only now and then. Here the ranking is:

* a *sorted block*: the transitions present at the last re-sort, by decreasing priority. The
  re-sort runs every ``resort_every`` calls of :meth:`update`. The entries whose priority is
  unchanged since the previous one are still in order, so only the K updated or new ones are
  sorted (``np.argsort``) and merged in: O(N + K log K), amortised over ``resort_every``
  updates;
* ahead of it, a *fresh block*: transitions written since the last re-sort, newest first. They
  hold the maximal priority, so they rank ahead of everything sorted; newest first puts every
  new transition at rank 1 on arrival, so that it is replayed soon (equal priorities may be
  ranked in any order).

A priority updated between re-sorts is stored at once but keeps its old rank until the next
re-sort, as an entry keeps its heap position in the paper's implementation. A slot that is
invalidated or overwritten leaves its entry *dead* in its block; ranks are over the live
entries only (rank r maps to the r-th live entry through a binary search over the sorted dead
positions), so an invalid slot is never returned and N is exactly the number of valid slots.
Per :meth:`sample` call the dead entries cost O(D) vectorised work, D being the entries retired
since the last re-sort (at most the slots written since then; a full fresh block is compacted).

An update that reaches a slot overwritten after it was sampled (a write between
:meth:`sample` and :meth:`update`) gives the new transition the old one's priority until it is
sampled again. The learner samples and updates between env steps; with pipelined acting one
env step's writes fall in between, so at most that many transitions can be affected.

Checkpoints: :meth:`state_arrays` / :meth:`load_arrays` give plain arrays for an npz file
(no pickle): the live entries of both blocks with their priorities, the slots updated since
the last re-sort, and as JSON bytes in ``meta`` the counters and the RNG state. After
:meth:`load_arrays` the samples equal those the saved object would have drawn.
Restore it *after* the storage (``offpolicy.replay.files.load``): restoring the storage reports
every slot as rewritten, which resets all priorities to the maximum.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from offpolicy.errors import NonFiniteError, OffpolicyError
from offpolicy.replay.extensions import Extension
from offpolicy.replay.keys import PRIORITY, WEIGHT


@dataclass(frozen=True)
class PERSettings:
    """A prioritized replay's constants (:class:`Prioritized` builds its ranking with them)."""

    alpha: float = 0.7
    beta0: float = 0.5
    beta_steps: int = 100_000  # updates over which beta rises to 1
    seed: int = 0


class RankPrioritized:
    @staticmethod
    def bytes_per_step(capacity: int) -> int:
        """Memory per replay slot of the structures below (for the replay's memory check):
        cumulative and priority (float64), valid and touched (bool), and five slot indices
        (sorted_slots, sorted_pos, two fresh_slots, fresh_pos)."""
        index = 4 if 2 * int(capacity) < 2**31 else 8
        return 8 + 8 + 1 + 1 + 5 * index

    def __init__(self, capacity: int, alpha: float = 0.7, beta0: float = 0.5,
                 beta_steps: int = 100_000, resort_every: int = 1000, eps: float = 1e-6,
                 seed: int = 0):
        """``capacity``: slots of the replay buffer it follows (slot indices in [0, capacity)).
        ``alpha``: priority exponent; ``beta0``, ``beta_steps``: importance-weight exponent,
        annealed linearly to 1; ``resort_every``: updates between re-sorts; ``eps``: added to
        |TD| so that no priority is 0."""
        if capacity < 1:
            raise OffpolicyError(f"prioritized replay capacity must be >= 1, got {capacity}")
        if alpha < 0 or not 0 <= beta0 <= 1 or beta_steps < 1 or resort_every < 1:
            raise OffpolicyError(
                f"prioritized replay needs alpha >= 0, 0 <= beta0 <= 1, beta_steps >= 1 and "
                f"resort_every >= 1 (got alpha={alpha}, beta0={beta0}, "
                f"beta_steps={beta_steps}, resort_every={resort_every})")
        self.capacity = int(capacity)
        self.alpha = float(alpha)
        self.beta0 = float(beta0)
        self.beta_steps = int(beta_steps)
        self.resort_every = int(resort_every)
        self.eps = float(eps)
        self.rng = np.random.Generator(np.random.PCG64(seed))
        # slot and entry indices: 4 bytes each where they fit (half the memory and cache misses)
        self.index_dtype = np.int32 if 2 * self.capacity < 2**31 else np.int64
        # cumulative[r] = sum_{k<=r} k^-alpha, cumulative[0] = 0: the rank law's CDF, unnormalised
        self.cumulative = np.zeros(self.capacity + 1)
        np.cumsum(np.arange(1, self.capacity + 1, dtype=np.float64) ** -self.alpha,
                  out=self.cumulative[1:])
        self.priority = np.zeros(self.capacity)  # |TD| + eps (or the max) of valid slots
        self.max_priority = 1.0  # largest priority ever given: what a new transition gets
        self.valid = np.zeros(self.capacity, bool)
        self.num_valid = 0
        self.updates_since_resort = 0
        self.touched = np.zeros(self.capacity, bool)  # priority updated since the last re-sort
        # sorted block: slots by decreasing priority at the last re-sort; a slot's live entry
        # is at sorted_pos[slot] (-1: none), any other entry holding that slot is dead
        self.sorted_slots = np.zeros(0, self.index_dtype)
        self.sorted_pos = np.full(self.capacity, -1, self.index_dtype)
        # fresh block: slots written since the last re-sort in write order (ranked newest
        # first). Dead entries stay until the block fills; twice the capacity leaves room for
        # >= capacity writes after each compaction (live entries are distinct slots)
        self.fresh_slots = np.zeros(2 * self.capacity, self.index_dtype)
        self.num_fresh = 0
        self.fresh_pos = np.full(self.capacity, -1, self.index_dtype)
        # indices of dead entries within each block, ascending
        self.dead_sorted = np.zeros(0, np.int64)
        self.dead_fresh = np.zeros(0, np.int64)

    # ------------------------------------------------------------------ memory changes
    def on_write(self, slots: np.ndarray, valid: np.ndarray) -> None:
        """Slots ``slots`` were (over)written, in this order; ``valid[i]``: slot ``slots[i]``
        now holds a transition (it enters at the maximal priority) or not (it drops out). A
        slot listed twice takes its last report."""
        slots = np.asarray(slots, np.int64).ravel()
        valid = np.asarray(valid, bool).ravel()
        if slots.size > 1:
            # the last report of a slot wins (unique over the reversed list finds it); the
            # reports keep their order, which is the write order of the new transitions
            _, from_end = np.unique(slots[::-1], return_index=True)
            last = np.sort(slots.size - 1 - from_end)
            slots, valid = slots[last], valid[last]
        self._retire(slots)
        self.num_valid += int(valid.sum()) - int(self.valid[slots].sum())
        self.valid[slots] = valid
        new = slots[valid]
        self.priority[new] = self.max_priority
        if new.size == 0:
            return
        if self.num_fresh + new.size > self.fresh_slots.size:
            self._compact_fresh()
        at = self.num_fresh + np.arange(new.size)
        self.fresh_slots[at] = new
        self.fresh_pos[new] = at
        self.num_fresh += new.size

    def _retire(self, slots: np.ndarray) -> None:
        """Mark the live entries of ``slots`` (unique) dead in both blocks."""
        for pos, block in ((self.sorted_pos, "dead_sorted"), (self.fresh_pos, "dead_fresh")):
            at = pos[slots]
            held = at >= 0
            if not held.any():
                continue
            gone = np.sort(at[held])
            pos[slots[held]] = -1
            dead = getattr(self, block)
            setattr(self, block, np.insert(dead, np.searchsorted(dead, gone), gone))

    def _compact_fresh(self) -> None:
        """Drop the fresh block's dead entries (ranks among live entries stay as they are)."""
        live = self._live_fresh()
        self.fresh_slots[:live.size] = live
        self.fresh_pos[live] = np.arange(live.size)
        self.num_fresh = live.size
        self.dead_fresh = np.zeros(0, np.int64)

    def update(self, slots: np.ndarray, td_abs: np.ndarray) -> None:
        """New priorities |TD| + eps of sampled ``slots`` (a slot drawn twice has the same TD
        error both times). Ranks follow at the next re-sort, every ``resort_every`` updates.
        Slots that no longer hold a transition are skipped."""
        slots = np.asarray(slots, np.int64).ravel()
        prio = np.abs(np.asarray(td_abs, np.float64).ravel()) + self.eps
        if slots.shape != prio.shape:
            raise OffpolicyError(f"prioritized replay update: {slots.size} slots but "
                                 f"{prio.size} TD errors")
        if not np.isfinite(prio).all():
            raise NonFiniteError("prioritized replay update: non-finite TD error")
        keep = self.valid[slots]
        if keep.any():
            self.priority[slots[keep]] = prio[keep]
            self.touched[slots[keep]] = True
            self.max_priority = max(self.max_priority, float(prio[keep].max()))
        self.updates_since_resort += 1
        if self.updates_since_resort >= self.resort_every:
            self.resort()

    def resort(self) -> None:
        """Rank every valid slot by its current priority; the fresh block and all dead entries
        go. The sorted block's live entries whose priority has not changed are still in order:
        only the others are sorted, and merged in (ahead of equal priorities)."""
        kept = self._live_sorted()
        kept = kept[~self.touched[kept]]
        moved = np.flatnonzero(self.valid & (self.touched | (self.sorted_pos < 0)))
        moved = moved[np.argsort(-self.priority[moved], kind="stable")]
        at = (np.searchsorted(-self.priority[kept], -self.priority[moved], side="left")
              + np.arange(moved.size))
        self.sorted_slots = np.empty(kept.size + moved.size, self.index_dtype)
        from_moved = np.zeros(self.sorted_slots.size, bool)
        from_moved[at] = True
        self.sorted_slots[at] = moved
        self.sorted_slots[~from_moved] = kept
        self.touched.fill(False)
        self.sorted_pos.fill(-1)
        self.sorted_pos[self.sorted_slots] = np.arange(self.sorted_slots.size)
        self.fresh_pos.fill(-1)
        self.num_fresh = 0
        self.dead_sorted = np.zeros(0, np.int64)
        self.dead_fresh = np.zeros(0, np.int64)
        self.updates_since_resort = 0

    # ------------------------------------------------------------------ sampling
    def beta(self, step: int) -> float:
        """The importance-sampling exponent at ``step``: beta0 rising linearly to 1."""
        return self.beta0 + (1.0 - self.beta0) * min(max(step, 0) / self.beta_steps, 1.0)

    def sample(self, batch_size: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        """``(slots[B] int64, weights[B] float32)``: one rank from each of B equal segments of
        the rank law's mass, and the normalised importance weights (rank / N)^(alpha beta).
        Duplicates are possible (always when N < B)."""
        n = self.num_valid
        if n == 0:
            raise OffpolicyError("cannot sample from an empty prioritized replay")
        total = self.cumulative[n]
        u = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        # rank r takes [cumulative[r-1], cumulative[r]); min() guards u == total by rounding
        ranks = np.minimum(np.searchsorted(self.cumulative[:n + 1], u, side="right"), n)
        entry = self._entries(ranks)  # 0-based over [fresh block newest first, sorted block]
        slots = np.empty(batch_size, np.int64)
        f = self.num_fresh
        in_fresh = entry < f
        slots[in_fresh] = self.fresh_slots[f - 1 - entry[in_fresh]]
        slots[~in_fresh] = self.sorted_slots[entry[~in_fresh] - f]
        weights = (ranks / n) ** (self.alpha * self.beta(step))
        return slots, weights.astype(np.float32)

    def _entries(self, ranks: np.ndarray) -> np.ndarray:
        """0-based entry index of the live entry of each rank (1-based over live entries)."""
        f = self.num_fresh
        # dead entries as 1-based positions over both blocks, ascending (the fresh block is
        # read newest first, so its write-order indices are reversed)
        dead = np.concatenate([f - self.dead_fresh[::-1], f + 1 + self.dead_sorted])
        # the live entries ahead of each dead one; the dead entry precedes live rank r iff
        # fewer than r live entries precede it
        live_before = dead - np.arange(1, dead.size + 1)
        return ranks - 1 + np.searchsorted(live_before, ranks, side="left")

    def ranked_slots(self) -> np.ndarray:
        """The valid slots in rank order (rank 1 first): O(N), for inspection and tests."""
        return np.concatenate([self._live_fresh()[::-1], self._live_sorted()]).astype(np.int64)

    def _live_fresh(self) -> np.ndarray:
        """The slots of the fresh block's live entries, in write order."""
        fresh = self.fresh_slots[:self.num_fresh]
        return fresh[self.fresh_pos[fresh] == np.arange(self.num_fresh)]

    def _live_sorted(self) -> np.ndarray:
        """The slots of the sorted block's live entries, in rank order."""
        return self.sorted_slots[self.sorted_pos[self.sorted_slots]
                                 == np.arange(self.sorted_slots.size)]

    def __len__(self) -> int:
        return self.num_valid

    # ------------------------------------------------------------------ persistence
    def state_arrays(self) -> dict[str, np.ndarray]:
        """Arrays for an npz checkpoint: the live entries of both blocks, their priorities,
        and ``meta`` (JSON as uint8: counters and the RNG state)."""
        fresh, ranked = self._live_fresh(), self._live_sorted()
        meta = {
            "capacity": self.capacity,
            "max_priority": self.max_priority,
            "updates_since_resort": self.updates_since_resort,
            "rng": self.rng.bit_generator.state,
        }
        return {
            "fresh_slots": fresh,
            "fresh_priority": self.priority[fresh],
            "sorted_slots": ranked,
            "sorted_priority": self.priority[ranked],
            "touched_slots": np.flatnonzero(self.touched & self.valid),
            "meta": np.frombuffer(json.dumps(meta).encode(), np.uint8),
        }

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore from :meth:`state_arrays` (a dict or an open npz file)."""
        try:
            meta = json.loads(bytes(np.asarray(arrays["meta"], np.uint8)).decode())
            fresh = np.asarray(arrays["fresh_slots"], np.int64)
            ranked = np.asarray(arrays["sorted_slots"], np.int64)
            fresh_prio = np.asarray(arrays["fresh_priority"], np.float64)
            sorted_prio = np.asarray(arrays["sorted_priority"], np.float64)
            touched = np.asarray(arrays["touched_slots"], np.int64)
            capacity, rng_state = meta["capacity"], meta["rng"]
            max_priority = float(meta["max_priority"])
            updates_since_resort = int(meta["updates_since_resort"])
        except (KeyError, ValueError, TypeError) as e:
            raise OffpolicyError(f"corrupt prioritized replay state: {e}") from e
        if capacity != self.capacity:
            raise OffpolicyError(f"prioritized replay state is for capacity {capacity}, "
                                 f"this replay has {self.capacity}")
        every = np.concatenate([fresh, ranked])
        if (fresh.ndim != 1 or ranked.ndim != 1
                or fresh.shape != fresh_prio.shape or ranked.shape != sorted_prio.shape
                or every.size != np.unique(every).size
                or (every.size and (every.min() < 0 or every.max() >= self.capacity))):
            raise OffpolicyError("corrupt prioritized replay state: slots out of range, "
                                 "repeated, or not matching their priorities")
        self.valid.fill(False)
        self.valid[every] = True
        if touched.ndim != 1 or not self.valid[touched].all():
            raise OffpolicyError("corrupt prioritized replay state: updated slots not held")
        self.touched.fill(False)
        self.touched[touched] = True
        # the re-sort relies on the untouched part of the sorted block being in order
        in_order = sorted_prio[~self.touched[ranked]]
        if (np.diff(in_order) > 0).any():
            raise OffpolicyError("corrupt prioritized replay state: ranks out of order")
        self.priority.fill(0.0)
        self.priority[fresh] = fresh_prio
        self.priority[ranked] = sorted_prio
        self.num_valid = int(every.size)
        self.sorted_slots = ranked.astype(self.index_dtype)
        self.sorted_pos.fill(-1)
        self.sorted_pos[ranked] = np.arange(ranked.size)
        self.fresh_pos.fill(-1)
        self.num_fresh = int(fresh.size)
        self.fresh_slots[:fresh.size] = fresh
        self.fresh_pos[fresh] = np.arange(fresh.size)
        self.dead_sorted = np.zeros(0, np.int64)
        self.dead_fresh = np.zeros(0, np.int64)
        self.max_priority = max_priority
        self.updates_since_resort = updates_since_resort
        self.rng.bit_generator.state = rng_state


class Prioritized(Extension):
    """A table's prioritized selector (``draw``, ``inserted``, ``removed``: see
    :mod:`offpolicy.replay.samplers`) and extension: it adds PER's importance weights to a
    sample (``weight``), takes the new priorities from a write-back (``td_abs``; NaN: the
    agent has no TD error for the step yet, which keeps its priority) and saves its ranking
    in the replay file (as ``attached.per.*``)."""

    name = "per"
    rng = None  # the ranking draws with its own generator, saved with the ranking

    def __init__(self, settings: PERSettings):
        self.settings = settings
        self.per: RankPrioritized | None = None

    def bytes_per_step(self, capacity: int) -> int:
        return RankPrioritized.bytes_per_step(capacity)

    def attach(self, storage) -> None:
        s = self.settings
        self.per = RankPrioritized(storage.capacity, s.alpha, s.beta0,
                                   max(int(s.beta_steps), 1), seed=s.seed)

    def draw(self, storage, n: int, step: int = 0) -> tuple[np.ndarray, dict]:
        """Slots by priority (a window starts at its slot) and their importance weights;
        ``step``: the update count that anneals the weights' exponent."""
        slots, weight = self.per.sample(n, step)
        return slots, {WEIGHT: weight}

    def example_keys(self, n: int) -> dict:
        return {WEIGHT: np.ones(n, np.float32)}

    def inserted(self, slots: np.ndarray) -> None:
        self.per.on_write(slots, np.ones(slots.size, bool))

    def removed(self, slots: np.ndarray) -> None:
        self.per.on_write(slots, np.zeros(slots.size, bool))

    def restored(self, storage) -> None:
        self.per.on_write(np.arange(storage.capacity), storage.valid.copy())

    def take(self, storage, idx: np.ndarray, batch: dict, writeback: dict) -> None:
        if PRIORITY in writeback:
            priority = writeback.pop(PRIORITY)
            known = np.isfinite(priority)
            self.per.update(idx[known], priority[known])

    def state_arrays(self) -> dict[str, np.ndarray]:
        return self.per.state_arrays()

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.per.load_arrays(arrays)
