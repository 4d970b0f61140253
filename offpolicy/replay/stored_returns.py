"""Per-step return targets kept in replay and refreshed along the episode (V-RACER, ReF-ER
paper Sec. 2 and Algorithms 2-3).

V-RACER learns from single time steps but its value target V^tbc_t (Eq. 8) depends on the rest
of the episode:

    V^tbc_t = v_t + rhobar_t [r_t + gamma V^tbc_{t+1} - v_t],   rhobar_t = min(1, rho_t)

with V^tbc after the last step = 0 at termination and V(s_T), the value of the state the
episode was cut at, at truncation (Algorithm 2, remark 2). So each step stores its latest value
estimate v_t, importance weight rho_t and target V^tbc_t:

* when an episode ends, :func:`close_episode` fills its targets by the recursion above (from the
  values recorded while acting, the stored rho: 1, or a refreshed weight if a step was sampled
  before its episode ended, and, for a truncated episode, V(s_T) evaluated by the learner with
  the current network on the stored final observation; Algorithm 2);
* when step t is sampled, the update recomputes v_t and rho_t with the current network and
  V^tbc_t from the stored V^tbc_{t+1}, and :func:`propagate` carries the change back to every
  earlier step of the episode (Algorithm 3): the recursion is linear in V^tbc, so a change
  delta at t changes V^tbc_j, j < t, by delta * prod_{i=j}^{t-1} gamma rhobar_i. The product is
  cut once every sample's factor is below ``tol`` (changes 1000x smaller than the refreshed
  one), which bounds the cost for long episodes.

The same recursion over a whole window is ``offpolicy.returns.v_tbc`` (tested equal).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offpolicy.replay.storage import ReplayBuffer


@dataclass(frozen=True)
class StoredReturn:
    """What an agent declares (as ``agent.stored_return``) to have targets kept in replay."""

    gamma: float
    target: str = "v_tbc"  # write-back field: the stored target V^tbc_t
    value: str = "v"  # write-back field: the latest V(s_t) (NaN until first refreshed)
    behaviour_value: str = "value"  # behaviour field: V(s_t) when the step was taken
    rho: str = "rho"  # write-back field: the latest importance weight
    next_target: str = "next_v_tbc"  # batch key: the stored target of step t + 1

    @property
    def reward_unit_fields(self) -> tuple[str, ...]:
        """Fields in reward units (rescaled when the reward scale changes: ReF-ER App. B)."""
        return (self.target, self.value, self.behaviour_value)


def _values(replay: ReplayBuffer, spec: StoredReturn, slots: np.ndarray) -> np.ndarray:
    v = replay.extras[spec.value][slots].astype(np.float64)
    return np.where(np.isnan(v), replay.extras[spec.behaviour_value][slots], v)


def episode_slots(replay: ReplayBuffer, first: int, last: int) -> np.ndarray:
    n = (last - first) % replay.stream_capacity + 1
    return replay._offset(np.asarray(first), np.arange(n))


def close_episode(replay: ReplayBuffer, spec: StoredReturn, first: int, last: int,
                  reward_scale: float = 1.0, final_value: float = 0.0) -> None:
    """Fill V^tbc for the finished episode ``first..last`` by the backward recursion (Eq. 8),
    from the stored values and weights, in float64. After the last step: 0 if terminated,
    else ``final_value`` = V(s_T), the value of the observation the episode was cut at (an
    episode abandoned at a resume counts as truncated there)."""
    slots = episode_slots(replay, first, last)
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


def next_targets(replay: ReplayBuffer, spec: StoredReturn, idx: np.ndarray) -> np.ndarray:
    """The stored target of the step after each ``idx`` in its episode; NaN at the episode's
    last step (the update bootstraps from V(s_{t+1}) there)."""
    nxt = replay._next(np.asarray(idx, np.int64).copy())
    last = replay.terminated[idx] | replay.truncated[idx]
    out = replay.extras[spec.target][nxt].astype(np.float32)
    out[last] = np.nan
    return out


G_FLOOR = 1e-9  # smallest factor gamma min(1, rho): 32 of them stay far above float64's 1e-308


def propagate(replay: ReplayBuffer, spec: StoredReturn, idx: np.ndarray, delta: np.ndarray,
              tol: float = 1e-6, chunk: int = 32) -> None:
    """Add delta_t * prod_{i=j}^{t-1} gamma min(1, rho_i) to the stored target of every step j
    before t in t's episode, for each refreshed step t = ``idx`` (Algorithm 3).

    All samples of one episode are handled in one backward pass over that episode (one row
    per episode, so rows touch distinct slots and a plain indexed add is exact): with
    g_j = gamma min(1, rho_j) and D_j the refreshed change at j (0 where nothing was sampled),
    the accumulated change y_j = g_j y_{j+1} + D_j, and step j gains y_j - D_j. The
    recursion runs ``chunk`` steps at a time through cumulative products, in float64 with g
    floored at ``G_FLOOR`` (replay stores rho as float32, where a stretch of far-policy steps,
    rho at its 1e-3 clip, underflows a product in a few steps and the refreshed change itself
    was lost), and stops once every episode has no sample left and its carried change is
    below ``tol`` of its largest delta."""
    idx = np.asarray(idx, np.int64)
    delta = np.asarray(delta, np.float64)
    ok = np.isfinite(delta) & (delta != 0) & replay.valid[idx]
    idx, first = np.unique(idx[ok], return_index=True)
    if idx.size == 0 or spec.gamma == 0:
        return
    delta = delta[ok][first]
    starts = replay.episode_first_slots(idx)
    episodes, row = np.unique(starts, return_inverse=True)
    pos = (idx - starts) % replay.stream_capacity  # position inside the episode
    n = episodes.size
    last = np.zeros(n, np.int64)
    np.maximum.at(last, row, pos)
    scale = np.zeros(n)
    np.maximum.at(scale, row, np.abs(delta))
    back = last[row] - pos  # each sample's distance from its episode's last sampled step
    target, rho = replay.extras[spec.target], replay.extras[spec.rho]
    carry = np.zeros(n)
    o0, deepest = 0, int(last.max())
    while o0 <= deepest:
        offs = np.arange(o0, min(o0 + chunk, deepest + 1))
        j = last[:, None] - offs[None, :]  # positions, walking back from each last sample
        inside = j >= 0
        slots = replay._offset(episodes[:, None], np.maximum(j, 0))
        # before the episode's first step nothing is added (masked below); g = 1 there keeps
        # the products finite
        rbar = np.minimum(1.0, rho[slots].astype(np.float64))
        g = np.where(inside, np.maximum(spec.gamma * rbar, G_FLOOR), 1.0)
        d = np.zeros(g.shape)
        here = (back >= o0) & (back < o0 + len(offs))
        d[row[here], back[here] - o0] = delta[here]
        gc = np.cumprod(g, axis=1)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y = gc * (carry[:, None] + np.cumsum(d / gc, axis=1))
        y = np.where(inside & np.isfinite(y), y, 0.0)
        target[slots[inside]] += (y - d)[inside]
        carry = y[:, -1]
        o0 = offs[-1] + 1
        if not (back >= o0).any() and (np.abs(carry) <= tol * scale).all():
            break
