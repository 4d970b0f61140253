"""What a table draws and how a sample is laid out: selectors, layouts, recent segments and
pieces, recurrent contexts. Everything works on arrays of step indices, never per item.

A *selector* picks the steps a batch starts at, in the shape DreamerV3's selectors have
(``embodied/replay/selectors.py``): ``draw(storage, n, step) -> (slots[n], keys)`` and two
verbs that follow the storage, ``inserted(slots)`` and ``removed(slots)`` (no-ops for the
uniform selectors here, which draw among the storage's valid slots; the prioritized selector,
:class:`offpolicy.replay.prioritized.Prioritized`, keeps its ranking through them). ``keys``
are what the selector adds to the batch (PER's importance weights). Each selector owns its
seeded random generator, whose state travels in the replay file.

A *layout* turns start steps into a batch (:class:`Sampler`, from the agent's
:class:`~offpolicy.replay.keys.DataSpec`):

* transitions (:func:`gather`): ``obs``, ``action``, ``reward``, ``next_obs``, ``discount``
  (0.0 where terminated: truncation bootstraps, termination does not) and the stored fields,
  [B, ...]. The raw flags stay out: every array passed costs the jitted update a transfer,
  and ``discount`` is all a one-step update needs (windows carry both);
* windows of T steps inside one episode (:func:`windows`), time-major: ``obs`` [T+1, B, ...]
  (obs[t+1] is the next observation of step t), ``action`` [T, B, m], ``reward``,
  ``terminated``, ``truncated``, ``discount``, ``mask`` [T, B] (1.0 while the window is still
  inside the episode it started in; a window that reaches its episode's end is padded with
  mask 0, the padded entries repeating the last valid step) and the stored fields
  [T, B, ...]. Sequences start at drawn steps, episodes at drawn episode starts.

Beside the drawn batches: the latest steps of each ring as windows (:func:`recent_segments`,
ACER's on-policy segment; :func:`recent_pieces`, AQL's fresh unroll) and a recurrent core's
context of sampled steps (:class:`Contexts`, an extension that adds it to every sample).
"""

from __future__ import annotations

import numpy as np

from offpolicy.errors import OffpolicyError
from offpolicy.replay.extensions import Extension
from offpolicy.replay.keys import (
    ACTION,
    CONTEXT_OBS,
    CONTEXT_POSITION,
    CONTEXT_STATE,
    CORE_STATE,
    DISCOUNT,
    MASK,
    NEXT_OBS,
    OBS,
    REWARD,
    TERMINATED,
    TRUNCATED,
    DataSpec,
    transitions,
)
from offpolicy.replay.storage import Storage


# ---------------------------------------------------------------------- layouts
def gather(storage: Storage, idx: np.ndarray) -> dict[str, np.ndarray]:
    """The transitions at step indices ``idx`` [B] (module docstring)."""
    term = storage.terminated[idx]
    batch = {
        OBS: storage.observations(idx),
        ACTION: storage.action[idx],
        REWARD: storage.reward[idx],
        NEXT_OBS: storage.observations(storage.next_slots(np.asarray(idx))),
        DISCOUNT: (~term).astype(np.float32),
    }
    for k, a in storage.extras.items():
        batch[k] = a[idx]
    return batch


def windows(storage: Storage, start: np.ndarray, length: int
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The windows of ``length`` steps that start at step indices ``start`` [B]:
    ``(idx[T, B], batch)`` (module docstring)."""
    steps, ok = window_steps(storage, start, length)
    term = storage.terminated[steps]
    out = {
        ACTION: storage.action[steps],
        REWARD: storage.reward[steps],
        TERMINATED: term,
        TRUNCATED: storage.truncated[steps],
        DISCOUNT: (~term).astype(np.float32),
        MASK: ok.astype(np.float32),
    }
    for k, a in storage.extras.items():
        out[k] = a[steps]
    out[OBS] = storage.observations(_window_obs_slots(storage, steps))
    return steps, out


def window_steps(storage: Storage, start: np.ndarray, length: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The step index of each window position [T, B] (padded positions repeat the last
    in-episode step, so that indexing stays in bounds) and whether it is in the episode the
    window started in."""
    steps = storage.offset(start[None, :], np.arange(length)[:, None])  # [T, B]
    done = storage.terminated[steps] | storage.truncated[steps]
    ok = storage.valid[steps].copy()
    ok[1:] &= ~done[:-1]  # step t continues the episode only if step t-1 did not end it
    ok = np.logical_and.accumulate(ok, axis=0)
    last = np.maximum(ok.sum(0) - 1, 0)
    t_eff = np.minimum(np.arange(length)[:, None], last[None, :])
    return storage.offset(start[None, :], t_eff), ok


def _window_obs_slots(storage: Storage, steps: np.ndarray) -> np.ndarray:
    """The observation slots [T+1, B] of window steps [T, B]: each step's own, then the last
    one's next observation."""
    slots = np.empty((steps.shape[0] + 1, steps.shape[1]), np.int64)
    slots[0] = steps[0]
    slots[1:] = storage.next_slots(steps)
    return slots


# ---------------------------------------------------------------------- selectors
class Uniform:
    """Uniform over the valid transitions (with replacement)."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def inserted(self, slots: np.ndarray) -> None:
        pass

    def removed(self, slots: np.ndarray) -> None:
        pass

    def _draw_written(self, storage: Storage, n: int) -> np.ndarray:
        """``n`` slots uniform over the written ones, ring by ring."""
        r = self.rng.integers(0, storage.size, n)
        if storage.num_streams == 1:
            return r
        cum = np.cumsum(storage.sizes)
        stream = np.searchsorted(cum, r, side="right")
        return storage.base[stream] + r - (cum[stream] - storage.sizes[stream])

    def draw(self, storage: Storage, n: int, step: int = 0) -> tuple[np.ndarray, dict]:
        """``n`` valid slots: written slots drawn uniformly, the invalid ones drawn again."""
        if storage.num_valid == 0:
            raise OffpolicyError("cannot sample from an empty replay")
        idx = self._draw_written(storage, n)
        bad = ~storage.valid[idx]
        while bad.any():
            idx[bad] = self._draw_written(storage, int(bad.sum()))
            bad = ~storage.valid[idx]
        return idx, {}

    def example_keys(self, n: int) -> dict:
        return {}


class EpisodeStarts(Uniform):
    """Uniform over the episodes whose first step is still stored: their first steps."""

    def draw(self, storage: Storage, n: int, step: int = 0) -> tuple[np.ndarray, dict]:
        starts = np.concatenate([storage.episode_starts(s) for s in range(storage.num_streams)])
        starts = starts[storage.valid[starts]] if starts.size else starts
        if starts.size == 0:
            raise OffpolicyError("cannot sample episodes: replay holds no episode start")
        return starts[self.rng.integers(0, starts.size, n)], {}


class Sampler:
    """A table's sampler: its selector picks the start steps, the data spec lays the batch
    out (transitions, or windows of ``data.length`` steps)."""

    def __init__(self, selector, data: DataSpec | None = None):
        self.selector, self.data = selector, data or transitions()

    def sample(self, storage: Storage, n: int, step: int = 0
               ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(idx, batch)``: ``idx`` [B] for transitions, [T, B] for windows; ``step``: the
        update count (PER anneals its weights by it)."""
        start, keys = self.selector.draw(storage, n, step)
        idx, batch = self.layout(storage, start)
        batch.update(keys)
        return idx, batch

    def layout(self, storage: Storage, start: np.ndarray
               ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if not self.data.windows:
            return start, gather(storage, start)
        return windows(storage, start, self.data.length)

    def example(self, storage: Storage, n: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A batch of the shapes a sample has, whatever the storage holds: for tracing."""
        idx, batch = self.layout(storage, np.zeros(n, np.int64))
        batch.update(self.selector.example_keys(n))
        return idx, batch


def sampler_for(data: DataSpec, seed: int) -> Sampler:
    """Uniform sampling of what ``data`` asks for: transitions and sequences start at
    uniformly drawn steps, episodes at uniformly drawn episode starts."""
    return Sampler((EpisodeStarts if data.kind == "episodes" else Uniform)(seed), data)


# ---------------------------------------------------------------------- the latest steps
def _recent_slots(storage: Storage, ring: int, length: int) -> np.ndarray:
    """The slots of ring ``ring``'s latest ``length`` transitions, oldest first."""
    sc = storage.stream_capacity
    if length < 1 or 2 * length + 1 > sc:
        raise OffpolicyError(f"segment length must be in [1, {(sc - 1) // 2}], got {length}")
    back = np.arange(-(2 * length + 1), 0)  # one final-obs slot at most per transition
    slots = storage.base[ring] + (storage.heads[ring] + back) % sc
    slots = slots[back >= -storage.sizes[ring]]
    return slots[storage.valid[slots]][-length:]


def _rings(storage: Storage, streams: np.ndarray | None) -> list[int]:
    return list(range(storage.num_streams)) if streams is None else [int(s) for s in streams]


def recent_segments(storage: Storage, length: int, streams: np.ndarray | None = None
                    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The latest ``length`` transitions of every ring (the on-policy segment of ACER's
    Algorithm 1) as windows: ``(idx[T, 2K], batch)``.

    A segment may span an episode end, and a window never does, so each ring gives two
    windows of T = ``length`` steps: column ``2i`` from the segment's first transition of
    ring i to the end of its episode (or of the segment), column ``2i + 1`` from the first
    transition of the episode that started inside the segment (mask all 0 if none did).
    Transitions of episodes that began and ended inside one segment (episodes shorter than the
    segment) are left to replay sampling (:func:`recent_pieces` keeps them). ``streams``:
    these rings only (the ones a remote collector's segment just filled): ``[T, 2 len]``."""
    rings = _rings(storage, streams)
    starts = np.empty(2 * len(rings), np.int64)
    empty = np.zeros(2 * len(rings), bool)
    for c, s in enumerate(rings):
        slots = _recent_slots(storage, s, length)
        if len(slots) == 0:
            starts[2 * c:2 * c + 2] = storage.base[s]
            empty[2 * c:2 * c + 2] = True
            continue
        ends = storage.terminated[slots] | storage.truncated[slots]
        starts[2 * c] = slots[0]
        later = np.flatnonzero(ends[:-1])  # an episode ended before the segment's last step
        if later.size:
            starts[2 * c + 1] = slots[later[-1] + 1]
        else:
            starts[2 * c + 1], empty[2 * c + 1] = slots[0], True
    idx, out = windows(storage, starts, length)
    out[MASK][:, empty] = 0.0
    return idx, out


def recent_pieces(storage: Storage, length: int, streams: np.ndarray | None = None
                  ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Every ring's latest ``length`` transitions cut at its episode ends, one window of
    ``length`` steps per piece (masked after the piece): ``(idx[T, n], batch)``, ring by
    ring, oldest piece first; together the windows hold each of those transitions exactly
    once (AQL's fresh unroll, whose episodes may be shorter than it)."""
    starts, ends_at = [], []
    for s in _rings(storage, streams):
        slots = _recent_slots(storage, s, length)
        if len(slots) == 0:
            continue
        ends = storage.terminated[slots] | storage.truncated[slots]
        first = np.concatenate([[0], np.flatnonzero(ends[:-1]) + 1])
        starts += slots[first].tolist()
        ends_at += (np.append(first[1:], len(slots)) - first).tolist()
    idx, out = windows(storage, np.asarray(starts, np.int64), length)
    out[MASK] *= (np.arange(length)[:, None] < np.asarray(ends_at)[None, :])
    return idx, out


# ---------------------------------------------------------------------- recurrent contexts
def contexts(storage: Storage, anchor: np.ndarray, back: int, steps: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a recurrent core reads before and along sampled steps ``anchor`` [B] (a
    transition, or a window's first step): ``(start[B], offset[B], obs)``. ``offset`` is how
    many steps of the anchor's episode precede it in replay, at most ``back`` (fewer at the
    episode's start, or where older steps left the storage); ``start`` is the step that many
    before the anchor; ``obs`` [back + steps + 1, B, ...] are the observations from ``start``
    on (position ``offset`` is the anchor's), padded past the episode's end as
    :func:`windows` pads. A context never reaches into another episode."""
    anchor = np.asarray(anchor, np.int64)
    offset = np.zeros(anchor.shape, np.int64)
    if back > 0:
        before = storage.offset(anchor[None, :], -np.arange(1, back + 1)[:, None])  # [back, B]
        same = storage.valid[before] & ~(storage.terminated[before] | storage.truncated[before])
        offset = np.logical_and.accumulate(same, axis=0).sum(0)
    start = storage.offset(anchor, -offset)
    window, _ = window_steps(storage, start, back + steps)
    return start, offset, storage.observations(_window_obs_slots(storage, window))


class Contexts(Extension):
    """A recurrent core's context of every sample (:meth:`DataSpec.with_context`), in place
    of its observations (the context holds them) and its per-step core states."""

    def __init__(self, data: DataSpec):
        self.data = data

    def augment(self, storage: Storage, idx: np.ndarray, batch: dict) -> dict:
        """The context of the steps ``idx`` (transitions [B], or windows [T, B]: their first
        steps) into ``batch``."""
        anchor = idx if idx.ndim == 1 else idx[0]
        span = 1 if not self.data.windows else self.data.length
        start, offset, obs = contexts(storage, anchor, self.data.context, span)
        batch[CONTEXT_OBS], batch[CONTEXT_POSITION] = obs, offset.astype(np.int32)
        if self.data.context_state:
            batch[CONTEXT_STATE] = storage.extras[CORE_STATE][start]
        for k in (OBS, NEXT_OBS, CORE_STATE):
            batch.pop(k, None)
        return batch
