"""A table's replay file: one uncompressed .npz (no pickle), written atomically.

It holds the written slots of the storage ring by ring (``obs``, ``action``, ``reward``,
``terminated``, ``truncated``, ``valid``, ``extra.NAME`` per field, ``frame_back`` with stacked
frames), ``meta`` (JSON as uint8: the format, the rings' counters, the episode bookkeeping, the
selector's random generator, the far-policy filter's count) and each extension's own arrays as
``attached.NAME.*`` (prioritized replay's ranking).

Format 2 (since frames are stored once) is what this module writes. Files written before
episode starts, episode numbers, the filter's count or closed episodes were saved load too: the
starts are rebuilt from the valid flags, the i-th episode of every ring is numbered before the
(i+1)-th of any, and the rest start empty. A file whose observations are laid out otherwise
(format 1 whole stacks against frames stored once) is refused with what to do.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from offpolicy.errors import OffpolicyError

# 1: whole observations per slot; 2: with frame_stack, one frame per slot and frame_back
REPLAY_FORMAT = 2


def state_arrays(table) -> dict[str, np.ndarray]:
    """The arrays :func:`save` writes."""
    arrays, meta = table.storage.state()
    rng = table.sampler.selector.rng
    meta = {"format": REPLAY_FORMAT, **meta, "pruned": table.remover.pruned,
            **({"rng": rng.bit_generator.state} if rng is not None else {})}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    for ext in table.extensions:
        if ext.name:
            arrays.update({f"attached.{ext.name}.{k}": v for k, v in ext.state_arrays().items()})
    return arrays


def save(table, path: str | Path) -> None:
    """Write ``table`` to ``path``, atomically (a temporary file renamed into place)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **state_arrays(table))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _check(storage, meta: dict, path) -> None:
    """Refuse a file of another layout or configuration than ``storage``'s."""
    streams = meta.get("num_streams", 1)
    saved_frames = meta.get("frame_stack", 0)
    if saved_frames != storage.frame_stack:
        def layout(f):
            return f"its {f} stacked frames once per step" if f else "whole observations"

        raise OffpolicyError(
            f"replay in {path} (format {meta.get('format', 1)}) stores "
            f"{layout(saved_frames)}; this run stores {layout(storage.frame_stack)} "
            f"(format {REPLAY_FORMAT}) and cannot continue from it: start the run "
            "afresh, or resume it with the offpolicy release that wrote it")
    if (meta["capacity"] != storage.capacity or streams != storage.num_streams
            or tuple(meta["obs_shape"]) != storage.obs_shape
            or meta["action_dim"] != storage.action_dim
            or not set(meta["extras"]) <= set(storage.extra_specs)):
        raise OffpolicyError(
            f"replay in {path} does not match this configuration "
            f"(capacity {meta['capacity']}, {streams} env copies, obs "
            f"{meta['obs_shape']}, action {meta['action_dim']}, extras "
            f"{sorted(meta['extras'])})")


def load(table, path: str | Path) -> None:
    """Restore ``table`` from :func:`save`'s file; it must have been built with the same
    shapes."""
    storage = table.storage
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            _check(storage, meta, path)
            if meta.get("num_streams", 1) == 1:  # one ring: its counters as scalars
                meta = dict(meta, heads=[meta["head"]], sizes=[meta["size"]],
                            opens=[meta["open"]])
            storage.restore(z, meta)
            attached = {ext.name: {k[len(f"attached.{ext.name}."):]: z[k] for k in z.files
                                   if k.startswith(f"attached.{ext.name}.")}
                        for ext in table.extensions if ext.name}
    except OffpolicyError:
        raise
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise OffpolicyError(f"corrupt replay file {path}: {e}") from e
    rng = table.sampler.selector.rng
    if rng is not None and "rng" in meta:
        rng.bit_generator.state = meta["rng"]
    starts = meta["starts"] if "starts" in meta else rebuilt_starts(storage)
    if "episode_ids" in meta:
        ids, next_id = meta["episode_ids"], meta["next_id"]
    else:  # a file written before episode ids: the i-th episode of every ring before the
        # (i+1)-th of any (the order they finished in is not in the file)
        k = storage.num_streams
        ids = [range(s, s + k * len(q), k) for s, q in enumerate(starts)]
        next_id = k * max((len(q) for q in starts), default=0)
    storage.restore_episodes(starts, ids, next_id, meta.get("closed", []))
    table.remover.pruned = int(meta.get("pruned", 0))
    for ext in table.extensions:
        ext.restored(storage)
    for ext in table.extensions:
        if ext.name and attached[ext.name]:  # else a file written without it: fresh state
            ext.load_arrays(attached[ext.name])


def rebuilt_starts(storage) -> list[list[int]]:
    """Episode first slots, oldest first per ring, of a file written before they were saved:
    a valid slot whose predecessor in the ring holds no transition (a final observation) or
    that is the ring's oldest slot."""
    sc = storage.stream_capacity
    out = []
    for s in range(storage.num_streams):
        n, h = int(storage.sizes[s]), int(storage.heads[s])
        order = (np.arange(n) + (h if n == sc else 0)) % sc  # oldest first
        slots = storage.base[s] + order
        prev_valid = np.concatenate([[n == sc], storage.valid[slots[:-1]]])
        first = storage.valid[slots] & ~prev_valid
        out.append([int(i) for i in slots[first]])
    return out
