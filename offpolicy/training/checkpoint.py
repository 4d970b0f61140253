"""Checkpoints without pickle, written atomically.

Layout under ``RUN_DIR/checkpoints/``::

    latest            text file naming the newest complete checkpoint directory
    step-000020000/   state.msgpack (flax msgpack of params, optimiser states, targets, keys)
                      replay.npz    (the replay buffer, uncompressed, no pickle)
                      meta.json     (counters, NumPy RNG states, noise state, normaliser
                                     statistics, env seeds, sha256 of state.msgpack)
    best              names the checkpoint with the best evaluation (state and meta, no replay)
    best-000010000/

A checkpoint is written into a temporary directory, fsynced, renamed into place, and only then
does the pointer file move (temp file + ``os.replace``), so a kill at any moment leaves the
previous checkpoint intact. Older directories are removed after the pointer moved.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import flax.serialization
import numpy as np

from offpolicy.errors import OffpolicyError


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_pointer(path: Path, target: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(target + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def save(ckpt_root: Path, kind: str, step: int, state: Any, meta: dict,
         replay=None) -> Path:
    """Write checkpoint ``kind`` ('latest' or 'best') for ``step``; return its directory."""
    ckpt_root.mkdir(parents=True, exist_ok=True)
    for stale in ckpt_root.glob(".tmp-*"):  # left by a save that was killed half-way
        shutil.rmtree(stale, ignore_errors=True)
    prefix = "step" if kind == "latest" else "best"
    name = f"{prefix}-{step:09d}"
    n = 1
    while (ckpt_root / name).exists():  # never replace the directory the pointer may name
        name = f"{prefix}-{step:09d}.{n}"
        n += 1
    tmp = Path(tempfile.mkdtemp(dir=ckpt_root, prefix=f".tmp-{name}-"))
    try:
        blob = flax.serialization.to_bytes(state)
        _write_file(tmp / "state.msgpack", blob)
        if replay is not None:
            replay.save(tmp / "replay.npz")
        meta = dict(meta, step=step, kind=kind, has_replay=replay is not None,
                    state_sha256=hashlib.sha256(blob).hexdigest())
        _write_file(tmp / "meta.json", json.dumps(_jsonable(meta), indent=1).encode())
        _fsync_dir(tmp)
        final = ckpt_root / name
        os.rename(tmp, final)
        _fsync_dir(ckpt_root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_pointer(ckpt_root / kind, name)
    for old in ckpt_root.glob(f"{prefix}-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return final


def locate(run_dir: Path, kind: str = "latest") -> Path:
    """The directory of checkpoint ``kind`` in ``run_dir`` (or a checkpoint dir itself)."""
    run_dir = Path(run_dir)
    if (run_dir / "state.msgpack").exists():
        return run_dir
    root = run_dir if (run_dir / kind).is_file() else run_dir / "checkpoints"  # Agent.save
    pointer = root / kind
    if not pointer.exists():
        raise OffpolicyError(f"no {kind} checkpoint in {run_dir} (expected {pointer})")
    target = root / pointer.read_text().strip()
    if not (target / "state.msgpack").exists() or not (target / "meta.json").exists():
        raise OffpolicyError(f"corrupt checkpoint: {target} is missing or incomplete")
    return target


def load_meta(ckpt_dir: Path) -> dict:
    try:
        return json.loads((ckpt_dir / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: {e}") from e


def load(ckpt_dir: Path, template: Any) -> tuple[Any, dict]:
    """Restore (state, meta) from ``ckpt_dir`` into the structure of ``template``."""
    try:
        meta = json.loads((ckpt_dir / "meta.json").read_text())
        blob = (ckpt_dir / "state.msgpack").read_bytes()
    except (OSError, ValueError) as e:
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: {e}") from e
    if hashlib.sha256(blob).hexdigest() != meta.get("state_sha256"):
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: state.msgpack checksum mismatch")
    try:
        state = flax.serialization.from_bytes(template, blob)
    except Exception as e:  # msgpack / structure errors: report, never a traceback
        raise OffpolicyError(
            f"checkpoint {ckpt_dir} does not match this configuration: {e}") from e
    return state, meta
