"""Preallocated ring buffer of NumPy arrays; every observation is stored once.

Layout. Slot ``i`` holds an observation ``obs[i]`` and, once the action taken there is known,
the transition that starts from it: ``action[i]``, ``reward[i]``, ``terminated[i]``,
``truncated[i]``, the per-step extra fields (behaviour statistics) and ``valid[i] = True``.
Its next observation is ``obs[(i + 1) % capacity]``. An episode of L steps uses L + 1 slots:
its final observation occupies a slot with ``valid = False`` (no action is taken there), so a
next observation never comes from another episode. Writes are strictly sequential, so after
the ring wraps every valid slot still has its successor intact: overwriting slot ``j`` only
invalidates the transition stored *at* ``j``.

Memory per transition is the raw bytes of (obs, action, reward, terminated, truncated) plus one
validity byte, times (L + 1) / L for the extra final-observation slot: within 1.1x of raw for
episodes of 20 steps or more (asserted in tests/test_replay.py).

Sampling is uniform over valid transitions (rejection of invalid slots, which are rare), done
in NumPy with a seeded Generator whose state travels in checkpoints.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from offpolicy.errors import OffpolicyError

_CORE = ("obs", "action", "reward", "terminated", "truncated", "valid")


class ReplayBuffer:
    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_dim: int,
        extras: dict[str, tuple[tuple[int, ...], np.dtype | str]] | None = None,
        obs_dtype: np.dtype | str = np.float32,
        seed: int = 0,
    ):
        if capacity < 2:
            raise OffpolicyError(f"replay capacity must be >= 2, got {capacity}")
        self.capacity = int(capacity)
        self.obs_shape = tuple(obs_shape)
        self.action_dim = int(action_dim)
        self.extra_specs = {k: (tuple(s), np.dtype(d)) for k, (s, d) in (extras or {}).items()}
        for name in self.extra_specs:
            if name in _CORE or name in ("next_obs", "discount", "mask"):
                raise OffpolicyError(f"replay extra field name '{name}' is reserved")
        c = self.capacity
        # np.zeros maps untouched pages lazily: a 1e6 buffer costs memory only as it fills.
        self.obs = np.zeros((c, *self.obs_shape), obs_dtype)
        self.action = np.zeros((c, self.action_dim), np.float32)
        self.reward = np.zeros((c,), np.float32)
        self.terminated = np.zeros((c,), bool)
        self.truncated = np.zeros((c,), bool)
        self.valid = np.zeros((c,), bool)
        self.extras = {k: np.zeros((c, *s), d) for k, (s, d) in self.extra_specs.items()}
        self.head = 0  # next slot to write
        self.size = 0  # slots written so far (<= capacity)
        self.num_valid = 0
        self._open = False  # an episode is in progress (its latest obs is at head - 1)
        self.rng = np.random.Generator(np.random.PCG64(seed))

    # ------------------------------------------------------------------ writing
    def _write_obs(self, obs: np.ndarray) -> None:
        h = self.head
        if self.valid[h]:
            self.valid[h] = False
            self.num_valid -= 1
        self.obs[h] = obs
        self.head = (h + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def start_episode(self, obs: np.ndarray) -> None:
        """Store the first observation of an episode."""
        self._write_obs(obs)
        self._open = True

    def add(self, action, reward, terminated, truncated, next_obs, **extras) -> None:
        """Store the transition from the latest observation and the next observation."""
        if not self._open:
            raise OffpolicyError("ReplayBuffer.add() before start_episode()")
        p = (self.head - 1) % self.capacity
        self.action[p] = action
        self.reward[p] = reward
        self.terminated[p] = terminated
        self.truncated[p] = truncated
        for k, v in extras.items():
            self.extras[k][p] = v
        self._write_obs(next_obs)
        self.valid[p] = True  # after the write: next_obs now sits at p + 1
        self.num_valid += 1
        if terminated or truncated:
            self._open = False

    def __len__(self) -> int:
        return self.num_valid

    @property
    def nbytes(self) -> int:
        arrays = [getattr(self, k) for k in _CORE] + list(self.extras.values())
        return int(sum(a.nbytes for a in arrays))

    # ------------------------------------------------------------------ sampling
    def sample_indices(self, batch_size: int) -> np.ndarray:
        if self.num_valid == 0:
            raise OffpolicyError("cannot sample from an empty replay buffer")
        idx = self.rng.integers(0, self.size, batch_size)
        bad = ~self.valid[idx]
        while bad.any():
            idx[bad] = self.rng.integers(0, self.size, int(bad.sum()))
            bad = ~self.valid[idx]
        return idx

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """A uniform batch of transitions: obs, action, reward, next_obs, the extra fields, and
        ``discount`` (0.0 where terminated, else 1.0: truncation bootstraps, termination does
        not). The raw flags stay out of the batch: every array passed costs the jitted update a
        transfer, and ``discount`` is all a one-step update needs (sequences carry both)."""
        idx = self.sample_indices(batch_size)
        return self.gather(idx)

    def gather(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        nxt = idx + 1
        nxt[nxt == self.capacity] = 0
        term = self.terminated[idx]
        batch = {
            "obs": self.obs[idx],
            "action": self.action[idx],
            "reward": self.reward[idx],
            "next_obs": self.obs[nxt],
            "discount": (~term).astype(np.float32),
        }
        for k, a in self.extras.items():
            batch[k] = a[idx]
        return batch

    def sample_sequences(self, batch_size: int, length: int) -> dict[str, np.ndarray]:
        """Windows of ``length`` consecutive transitions from single episodes, time-major.

        Returns ``obs`` [T+1, B, ...] (obs[t+1] is the next observation of step t), ``action``
        [T, B, m], ``reward``, ``terminated``, ``truncated``, ``discount`` [T, B], the extra
        fields [T, B, ...] and ``mask`` [T, B]: 1.0 while the window is still inside the episode
        it started in. A window that reaches its episode's end is padded with mask 0 (the
        padded entries repeat the last valid step), never continued into another episode.
        """
        if length < 1:
            raise OffpolicyError(f"sequence length must be >= 1, got {length}")
        start = self.sample_indices(batch_size)
        steps = (start[None, :] + np.arange(length)[:, None]) % self.capacity  # [T, B]
        done = self.terminated[steps] | self.truncated[steps]
        ok = self.valid[steps].copy()
        ok[1:] &= ~done[:-1]  # step t continues the episode only if step t-1 did not end it
        ok = np.logical_and.accumulate(ok, axis=0)
        # padded steps repeat the last in-episode step so that indexing stays in bounds
        last = np.maximum(ok.sum(0) - 1, 0)
        t_eff = np.minimum(np.arange(length)[:, None], last[None, :])
        steps = (start[None, :] + t_eff) % self.capacity
        obs_slots = np.empty((length + 1, batch_size), np.int64)
        obs_slots[0] = steps[0]
        obs_slots[1:] = (steps + 1) % self.capacity
        term = self.terminated[steps]
        out = {
            "obs": self.obs[obs_slots],
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
    def state_arrays(self) -> dict[str, np.ndarray]:
        n = self.size
        arrays = {k: getattr(self, k)[:n] for k in _CORE}
        arrays.update({f"extra.{k}": v[:n] for k, v in self.extras.items()})
        meta = {
            "capacity": self.capacity, "head": self.head, "size": self.size,
            "num_valid": self.num_valid, "open": self._open,
            "obs_shape": list(self.obs_shape), "action_dim": self.action_dim,
            "extras": {k: [list(s), d.str] for k, (s, d) in self.extra_specs.items()},
            "rng": self.rng.bit_generator.state,
        }
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
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
                if (meta["capacity"] != self.capacity or tuple(meta["obs_shape"]) != self.obs_shape
                        or meta["action_dim"] != self.action_dim
                        or set(meta["extras"]) != set(self.extra_specs)):
                    raise OffpolicyError(
                        f"replay in {path} does not match this configuration "
                        f"(capacity {meta['capacity']}, obs {meta['obs_shape']}, "
                        f"action {meta['action_dim']}, extras {sorted(meta['extras'])})")
                n = meta["size"]
                for k in _CORE:
                    getattr(self, k)[:n] = z[k]
                for k in self.extras:
                    self.extras[k][:n] = z[f"extra.{k}"]
        except OffpolicyError:
            raise
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise OffpolicyError(f"corrupt replay file {path}: {e}") from e
        self.valid[n:] = False  # slots beyond the saved ones hold nothing
        self.head, self.size, self.num_valid = meta["head"], meta["size"], meta["num_valid"]
        self._open = meta["open"]
        self.rng.bit_generator.state = meta["rng"]

    def close_episode(self) -> None:
        """Abandon the episode in progress (on resume it restarts); its last obs stays invalid."""
        self._open = False
