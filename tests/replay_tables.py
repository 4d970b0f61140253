"""Replay tables for the tests: a storage of given shapes behind uniform sampling, and the
other layouts drawn with the same selector (its random generator)."""

from __future__ import annotations

import numpy as np

from offpolicy.replay import keys
from offpolicy.replay.extensions import FarCount
from offpolicy.replay.removers import FarPolicyEpisodes, OldestEpisode
from offpolicy.replay.samplers import EpisodeStarts, Sampler, Uniform
from offpolicy.replay.storage import Storage
from offpolicy.replay.table import Table


def table(capacity, obs_shape, action_dim, fields=None, obs_dtype=np.float32, seed=0,
          num_streams=1, frame_stack=0, forget_whole_episodes=False, counted=(),
          memory=None, extensions=(), sampler=None) -> Table:
    """A table of uniform transitions over a storage of these shapes; whole episodes forgotten
    when asked, the far-policy filter with ``memory``, the flags ``counted`` (FAR)."""
    storage = Storage(capacity, obs_shape, action_dim, fields, obs_dtype, num_streams,
                      frame_stack)
    remover = (FarPolicyEpisodes(memory, counted[0]) if memory is not None
               else OldestEpisode() if forget_whole_episodes else None)
    return Table(storage, sampler or Sampler(Uniform(seed)), remover,
                 [*(FarCount(name) for name in counted), *extensions])


def far_count(buf: Table) -> float:
    """The running count of far-policy flags of a table that counts them."""
    return next(e for e in buf.extensions if isinstance(e, FarCount)).count


def draw(buf: Table, n: int) -> np.ndarray:
    """``n`` steps drawn by ``buf``'s selector."""
    return buf.sampler.selector.draw(buf.storage, n)[0]


def sample_sequences(buf: Table, n: int, length: int):
    """Windows of ``length`` from ``buf``'s selector (its random generator)."""
    return Sampler(buf.sampler.selector, keys.sequences(length)).sample(buf.storage, n)


def sample_episodes(buf: Table, n: int, length: int):
    """Whole episodes drawn with ``buf``'s selector's random generator."""
    starts = EpisodeStarts()
    starts.rng = buf.sampler.selector.rng
    return Sampler(starts, keys.episodes(length)).sample(buf.storage, n)
