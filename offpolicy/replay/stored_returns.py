"""Per-step return targets kept in replay and refreshed along the episode (V-RACER, ReF-ER
paper Sec. 2 and Algorithms 2-3).

V-RACER learns from single time steps but its value target V^tbc_t (Eq. 8) depends on the rest
of the episode:

    V^tbc_t = v_t + rhobar_t [r_t + gamma V^tbc_{t+1} - v_t],   rhobar_t = min(1, rho_t)

with V^tbc after the last step = 0 at termination and V(s_T), the value of the state the
episode was cut at, at truncation (Algorithm 2, remark 2). So each step stores its latest value
estimate v_t, importance weight rho_t and target V^tbc_t:

The table's :class:`StoredReturns` extension does all of this:

* when an episode ends, :func:`close_episode` fills its targets by the recursion above (from the
  values recorded while acting, the stored rho: 1, or a refreshed weight if a step was sampled
  before its episode ended, and, for a truncated episode, V(s_T) evaluated by the learner with
  the current network on the stored final observation; Algorithm 2);
* when step t is sampled, the update recomputes v_t and rho_t with the current network and
  V^tbc_t from the stored V^tbc_{t+1}, and :func:`propagate` carries the change back to every
  earlier step of the episode (Algorithm 3): the recursion is linear in V^tbc, so a change
  delta at t changes V^tbc_j, j < t, by delta * prod_{i=j}^{t-1} gamma rhobar_i. A change is
  carried until it falls below ``tol`` (1e-6) of its episode's largest one: a few dozen steps
  once the policy has moved away from the memory's, the whole episode while rho stays near 1.

The same recursion over a whole window is ``offpolicy.returns.v_tbc`` (tested equal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from offpolicy.config import RHO_MAX_LIMIT
from offpolicy.replay.extensions import Extension
from offpolicy.replay.keys import NEXT_V_TBC, RHO, V_BEHAVIOUR, V_LATEST, V_TBC
from offpolicy.replay.storage import Storage


@dataclass(frozen=True)
class StoredReturn:
    """What an agent declares (as ``agent.stored_return``) to have targets kept in replay."""

    gamma: float
    target: str = V_TBC  # write-back field: the stored target V^tbc_t
    value: str = V_LATEST  # write-back field: the latest V(s_t) (NaN until first refreshed)
    behaviour_value: str = V_BEHAVIOUR  # behaviour field: V(s_t) when the step was taken
    rho: str = RHO  # write-back field: the latest importance weight
    next_target: str = NEXT_V_TBC  # batch key: the stored target of step t + 1

    @property
    def reward_unit_fields(self) -> tuple[str, ...]:
        """Fields in reward units (rescaled when the reward scale changes: ReF-ER App. B)."""
        return (self.target, self.value, self.behaviour_value)


def _values(replay: Storage, spec: StoredReturn, slots: np.ndarray) -> np.ndarray:
    v = replay.extras[spec.value][slots].astype(np.float64)
    return np.where(np.isnan(v), replay.extras[spec.behaviour_value][slots], v)


def close_episode(replay: Storage, spec: StoredReturn, first: int, last: int,
                  reward_scale: float = 1.0, final_value: float = 0.0) -> None:
    """Fill V^tbc for the finished episode ``first..last`` by the backward recursion (Eq. 8),
    from the stored values and weights, in float64. After the last step: 0 if terminated,
    else ``final_value`` = V(s_T), the value of the observation the episode was cut at (an
    episode abandoned at a resume counts as truncated there)."""
    slots = replay.episode_slots(first, last)
    v = _values(replay, spec, slots)
    rbar = np.minimum(1.0, replay.extras[spec.rho][slots].astype(np.float64))
    r = replay.reward[slots].astype(np.float64) * reward_scale
    nxt = 0.0 if replay.terminated[last] else float(final_value)
    out = np.empty(len(slots))
    g = spec.gamma
    for i in range(len(slots) - 1, -1, -1):
        nxt = v[i] + rbar[i] * (r[i] + g * nxt - v[i])
        out[i] = nxt
    replay.extras[spec.target][slots] = out


def next_targets(replay: Storage, spec: StoredReturn, idx: np.ndarray) -> np.ndarray:
    """The stored target of the step after each ``idx`` in its episode; NaN at the episode's
    last step (the update bootstraps from V(s_{t+1}) there)."""
    nxt = replay.next_slots(np.asarray(idx, np.int64))
    last = replay.terminated[idx] | replay.truncated[idx]
    out = replay.extras[spec.target][nxt].astype(np.float32)
    out[last] = np.nan
    return out


# the smallest importance weight an agent stores: rho is clipped to [1 / rho_max, rho_max]
RHO_FLOOR = 1.0 / RHO_MAX_LIMIT


def propagate(replay: Storage, spec: StoredReturn, idx: np.ndarray, delta: np.ndarray,
              tol: float = 1e-6, chunk: int = 64) -> None:
    """Add delta_t * prod_{i=j}^{t-1} gamma min(1, rho_i) to the stored target of every step j
    before t in t's episode, for each refreshed step t = ``idx`` (Algorithm 3).

    The samples of one episode share one backward pass (a row; rows touch distinct slots, so
    a plain indexed add is exact): with g_j = gamma min(1, rho_j) and D_j the refreshed change
    at j (0 where nothing was sampled), the accumulated change y_j = g_j y_{j+1} + D_j, and
    step j gains y_j - D_j. Each row walks back from its latest sample up to ``chunk`` steps
    at a time, through cumulative products in float64 (replay stores rho as float32, where a
    stretch of far-policy steps, rho at its clip, underflows a product in a few steps and the
    refreshed change itself was lost); a chunk is short enough that the product of its
    smallest possible factors, gamma times the smallest weight an agent stores (``RHO_FLOOR``),
    stays far above float64's smallest normal number.

    After each chunk, a row whose carried change has fallen to ``tol`` of its episode's largest
    delta drops it: the row jumps to its next sample or, with none left, stops (so does a row
    that reaches its episode's first step). Each drop leaves the steps before it short by less
    than ``tol`` of that delta, so a step's error is at most ``tol`` times the largest delta
    times the number of drops above it in its episode (``tol = 0``: exact). A row walks whole
    chunks, so the work is the steps a change really moves rounded up to a chunk per stretch:
    one or two chunks per sample in a memory whose policy has moved on, not the episode's
    length (benchmarks/results/propagate.md)."""
    idx = np.asarray(idx, np.int64)
    delta = np.asarray(delta, np.float64)
    ok = np.isfinite(delta) & (delta != 0) & replay.valid[idx]
    idx, first = np.unique(idx[ok], return_index=True)
    if idx.size == 0 or spec.gamma == 0:
        return
    delta = delta[ok][first]
    target, rho = replay.extras[spec.target], replay.extras[spec.rho]
    g_min = max(spec.gamma * RHO_FLOOR, np.finfo(np.float64).tiny)
    width = max(1, min(chunk, int(600.0 / -math.log(g_min))))  # g_min ** width >= e^-600
    start = replay.episode_first_slots(idx)
    pos = (idx - start) % replay.stream_capacity  # position inside the episode
    order = np.lexsort((-pos, start))  # by episode, each episode's latest sample first
    start, pos, delta = start[order], pos[order], delta[order]
    head = np.flatnonzero(np.r_[True, start[1:] != start[:-1]])  # each row's first sample
    end = np.r_[head[1:], start.size]
    n = head.size
    episode = start[head]  # each row's episode, by its first slot
    small_change = tol * np.maximum.reduceat(np.abs(delta), head)
    cursor = pos[head].copy()  # the position each row's next chunk starts from, walking back
    carry = np.zeros(n)  # the accumulated change y at cursor + 1
    nxt = head.copy()  # each row's next sample not yet reached
    pending = np.arange(start.size)  # samples not yet reached, and their rows
    row = np.repeat(np.arange(n), end - head)
    column = np.empty(n, np.int64)
    back = np.arange(width)[:, None]  # time-major chunks: [width, rows]
    live = np.arange(n)
    while live.size:
        cur = cursor[live]
        j = cur - back
        inside = j >= 0  # before the episode's first step: g = 1, nothing added
        slots = replay.offset(episode[live], np.maximum(j, 0))
        rbar = np.minimum(1.0, rho[slots].astype(np.float64))
        g = np.where(inside, np.maximum(spec.gamma * rbar, g_min), 1.0)
        column[live] = np.arange(live.size)
        r = row[pending]
        here = pos[pending] > cursor[r] - width  # (a pending sample's row is live)
        s, r = pending[here], r[here]
        pending = pending[~here]
        d = np.zeros(g.shape)
        d[cursor[r] - pos[s], column[r]] = delta[s]
        nxt += np.bincount(r, minlength=n)
        gc = np.cumprod(g, axis=0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y = gc * (carry[live] + np.cumsum(d / gc, axis=0))
        finite = np.isfinite(y)  # (a NaN weight: nothing is carried past it)
        gain = np.where(inside & finite, y - d, 0.0)
        target[slots[inside]] += gain[inside]
        carry[live] = np.where(finite[-1], y[-1], 0.0)
        cursor[live] = cur - width
        left = nxt[live] < end[live]
        small = np.abs(carry[live]) <= small_change[live]
        jump = live[small & left]  # nothing worth carrying: on to the next sample
        cursor[jump], carry[jump] = pos[nxt[jump]], 0.0
        live = live[(left | ~small) & (cursor[live] >= 0)]


class StoredReturns(Extension):
    """The table's part of stored return targets (module docstring): before a sample, the
    targets of the episodes finished since the last one are filled (a truncated episode's
    bootstrapped from ``values_after`` its last transition); every sample carries the stored
    target of each step's successor; a write-back's refreshed targets are written (a step of
    an unfinished episode keeps NaN) and their changes carried back along their episodes."""

    def __init__(self, spec: StoredReturn):
        self.spec = spec

    def maintain(self, storage: Storage, reward_scale: float, values_after) -> None:
        closed = storage.take_closed_episodes()
        if not closed:
            return
        last = np.array([b for _, b in closed], np.int64)
        final = np.zeros(len(last))
        cut = np.flatnonzero(~storage.terminated[last])  # truncated: bootstrapped
        if cut.size:
            final[cut] = values_after(last[cut])
        for (first, end), v in zip(closed, final):
            close_episode(storage, self.spec, first, end, reward_scale, v)

    def rescale(self, storage: Storage, factor: float) -> None:
        """Targets and values are in reward units (ReF-ER App. B): they follow its scale."""
        for k in self.spec.reward_unit_fields:
            storage.extras[k] *= factor

    def augment(self, storage: Storage, idx: np.ndarray, batch: dict) -> dict:
        batch[self.spec.next_target] = next_targets(storage, self.spec, idx)
        return batch

    def take(self, storage: Storage, idx: np.ndarray, batch: dict, writeback: dict) -> None:
        t = self.spec.target
        keep = np.isfinite(writeback[t])
        writeback[t] = np.where(keep, writeback[t], batch[t])

    def written(self, storage: Storage, idx: np.ndarray, batch: dict, writeback: dict) -> None:
        """Carry each refreshed target's change back along its episode (the fields it reads,
        the refreshed weights among them, are written by now)."""
        t = self.spec.target
        delta = writeback[t] - batch[t]  # 0 (or NaN: skipped) where the target was kept
        propagate(storage, self.spec, idx, np.where(np.isfinite(delta), delta, 0.0))
