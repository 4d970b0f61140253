"""Checkpoints without pickle, written atomically.

Layout under ``RUN_DIR/checkpoints/``::

    latest            text file naming the newest complete checkpoint directory
    step-000020000/   state.msgpack (flax msgpack of params, optimiser states, targets, keys)
                      replay.npz    (the replay buffer, uncompressed, no pickle)
                      meta.json     (counters, NumPy RNG states, noise state, normaliser
                                     statistics, env seeds, sha256 of state.msgpack)
                      checksums.json  (sha256 of state.msgpack and of meta.json)
    best              names the checkpoint with the best evaluation (state and meta, no replay)
    best-000010000/
    best-000004000/   the best as of the latest checkpoint, kept until the next latest one:
                      a resume from ``latest`` rewinds ``best`` to it (:func:`rewind_best`),
                      so ``best`` never comes from the timeline that the resume discards

A checkpoint is written into a temporary directory, fsynced, renamed into place, and only then
does the pointer file move (temp file + ``os.replace``), so a kill at any moment leaves the
previous checkpoint intact. Older directories are removed after the pointer moved. A failed
write (a full disk: any ``OSError``) removes what it wrote, leaves the pointer on the previous
checkpoint and raises a one-line ``OffpolicyError``.

``load`` and ``load_meta`` check meta.json against checksums.json (checkpoints written before
checksums.json existed have none, and load without that check) and state.msgpack against its
sha256; neither opens replay.npz, which the caller restores (and checks) itself.
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


CHECKSUMS = "checksums.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def write_pointer(path: Path, target: str) -> None:
    """Point ``path`` at ``target`` atomically; on failure the old pointer stays, no temp file."""
    write_text_atomic(path, target + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temp file, fsync, ``os.replace``): a failed
    write (raises ``OSError``) leaves the old file and no temp file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def has_checkpoint(run_dir: Path, kind: str = "latest") -> bool:
    """Whether ``run_dir`` (a run directory, an ``Agent.save`` directory or a checkpoint
    directory) has a ``kind`` checkpoint. A pointer to a damaged or missing directory counts:
    ``locate`` then reports it, rather than a caller taking the run for one without any."""
    run_dir = Path(run_dir)
    return ((run_dir / "state.msgpack").exists() or (run_dir / kind).is_file()
            or (run_dir / "checkpoints" / kind).exists())


def _pointer_target(ckpt_root: Path, kind: str) -> str:
    try:
        return (ckpt_root / kind).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _previous(ckpt_root: Path) -> str:
    """How the error message names the checkpoint that a failed save leaves to resume from:
    the latest, whichever kind failed (a ``best`` one may be ahead of it, and is no place
    to resume)."""
    name = _pointer_target(ckpt_root, "latest")
    if not name or not (ckpt_root / name / "state.msgpack").exists():
        return "there is no earlier checkpoint to resume from"
    try:
        return f"the last good checkpoint (step {int(name.split('-', 1)[1].split('.')[0])}) " \
               f"is kept"
    except (IndexError, ValueError):
        return f"the last good checkpoint ({name}) is kept"


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
         replay=None, keep: tuple[str, ...] = ()) -> Path:
    """Write checkpoint ``kind`` ('latest' or 'best') for ``step``; return its directory.
    Older directories of the kind are removed once the pointer moved, except those named in
    ``keep`` (the best as of the latest checkpoint, for :func:`rewind_best`).

    An ``OSError`` (e.g. ENOSPC) becomes a one-line ``OffpolicyError``; the pointer then still
    names the previous complete checkpoint and no partial directory or temp file is left."""
    ckpt_root = Path(ckpt_root)
    try:
        return _save(ckpt_root, kind, step, state, meta, replay, keep)
    except OSError as e:
        raise OffpolicyError(f"cannot write checkpoint to {ckpt_root}: {_one_line(e)}; "
                             f"{_previous(ckpt_root)}") from e


def pointer_target(ckpt_root: Path, kind: str) -> str | None:
    """The directory name the ``kind`` pointer names, or None where there is none."""
    return _pointer_target(Path(ckpt_root), kind) or None


def step_of(name: str) -> int:
    """``best-000010000`` or ``step-000010000.1`` -> 10000."""
    return int(name.split("-", 1)[1].split(".")[0])


def prune(ckpt_root: Path, kind: str, keep: tuple[str, ...] = ()) -> None:
    """Remove the ``kind`` directories other than the one its pointer names and ``keep``."""
    ckpt_root = Path(ckpt_root)
    current = pointer_target(ckpt_root, kind)
    prefix = "step" if kind == "latest" else "best"
    for old in ckpt_root.glob(f"{prefix}-*"):
        if old.name != current and old.name not in keep:
            shutil.rmtree(old, ignore_errors=True)


def rewind_best(ckpt_root: Path, step: int) -> str | None:
    """A run resumed from its latest checkpoint at ``step`` discards what came after it: the
    ``best`` pointer moves back to the newest best checkpoint at or before ``step`` (kept for
    this), newer ones are removed, and without one the pointer goes too. Returns the name the
    pointer is left on (None: no best checkpoint)."""
    ckpt_root = Path(ckpt_root)
    current = pointer_target(ckpt_root, "best")
    if current is None or step_of(current) <= step:
        return current
    older = sorted((d.name for d in ckpt_root.glob("best-*")
                    if (d / "state.msgpack").exists() and step_of(d.name) <= step),
                   key=lambda n: (step_of(n), n))
    try:
        if older:
            write_pointer(ckpt_root / "best", older[-1])
        else:
            (ckpt_root / "best").unlink()
    except OSError as e:
        raise OffpolicyError(f"cannot rewind the best checkpoint in {ckpt_root}: "
                             f"{_one_line(e)}") from e
    for d in ckpt_root.glob("best-*"):
        if not older or d.name != older[-1]:
            shutil.rmtree(d, ignore_errors=True)
    return older[-1] if older else None


def _save(ckpt_root: Path, kind: str, step: int, state: Any, meta: dict, replay,
          keep: tuple[str, ...] = ()) -> Path:
    ckpt_root.mkdir(parents=True, exist_ok=True)
    for stale in ckpt_root.glob(".tmp-*"):  # left by a save that was killed half-way
        shutil.rmtree(stale, ignore_errors=True)
    for stale in ckpt_root.glob(f".{kind}*.tmp"):  # a pointer temp file, likewise
        try:
            stale.unlink()
        except OSError:
            pass
    prefix = "step" if kind == "latest" else "best"
    name = f"{prefix}-{step:09d}"
    n = 1
    while (ckpt_root / name).exists():  # never replace the directory the pointer may name
        name = f"{prefix}-{step:09d}.{n}"
        n += 1
    final = ckpt_root / name
    tmp = Path(tempfile.mkdtemp(dir=ckpt_root, prefix=f".tmp-{name}-"))
    renamed = False
    try:
        blob = flax.serialization.to_bytes(state)
        _write_file(tmp / "state.msgpack", blob)
        if replay is not None:
            replay.save(tmp / "replay.npz")
        meta = dict(meta, step=step, kind=kind, has_replay=replay is not None,
                    state_sha256=_sha256(blob), checksums=CHECKSUMS)
        meta_bytes = json.dumps(_jsonable(meta), indent=1).encode()
        _write_file(tmp / "meta.json", meta_bytes)
        sums = {"state.msgpack": _sha256(blob), "meta.json": _sha256(meta_bytes)}
        _write_file(tmp / CHECKSUMS, json.dumps(sums, indent=1).encode())
        _fsync_dir(tmp)
        os.rename(tmp, final)
        renamed = True
        _fsync_dir(ckpt_root)
        write_pointer(ckpt_root / kind, name)
    except BaseException:
        # unless the pointer moved (an interrupt right after os.replace), what this save
        # wrote is nobody's checkpoint
        if not renamed:
            shutil.rmtree(tmp, ignore_errors=True)
        elif _pointer_target(ckpt_root, kind) != name:
            shutil.rmtree(final, ignore_errors=True)
        raise
    prune(ckpt_root, kind, keep)
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
    name = _pointer_target(root, kind)
    if not name:  # a directory, bytes that are no name, or nothing
        raise OffpolicyError(f"corrupt checkpoint pointer {pointer}: it names no checkpoint")
    target = root / name
    if not (target / "state.msgpack").exists() or not (target / "meta.json").exists():
        raise OffpolicyError(f"corrupt checkpoint: {target} is missing or incomplete")
    return target


def _read_meta(ckpt_dir: Path) -> dict:
    """meta.json, checked against checksums.json when the checkpoint has one (every checkpoint
    written since checksums.json exists; its meta.json says so)."""
    sums_path = ckpt_dir / CHECKSUMS
    try:
        raw = (ckpt_dir / "meta.json").read_bytes()
        sums = json.loads(sums_path.read_bytes()) if sums_path.exists() else None
        if sums is not None and not isinstance(sums, dict):
            raise ValueError(f"{CHECKSUMS} does not hold a mapping")
    except (OSError, ValueError) as e:  # json.JSONDecodeError and UnicodeDecodeError included
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: {_one_line(e)}") from e
    if sums is not None and sums.get("meta.json") != _sha256(raw):
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: meta.json checksum mismatch")
    try:
        meta = json.loads(raw)
        if not isinstance(meta, dict):
            raise ValueError("meta.json does not hold a mapping")
    except ValueError as e:
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: {_one_line(e)}") from e
    if sums is None and meta.get("checksums") == CHECKSUMS:
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: {CHECKSUMS} is missing")
    if sums is not None and sums.get("state.msgpack") != meta.get("state_sha256"):
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: state.msgpack checksum mismatch "
                             f"between meta.json and {CHECKSUMS}")
    return meta


def load_meta(ckpt_dir: Path) -> dict:
    """The checkpoint's meta.json (checksum-verified); never reads state or replay."""
    return _read_meta(Path(ckpt_dir))


def load(ckpt_dir: Path, template: Any) -> tuple[Any, dict]:
    """Restore (state, meta) from ``ckpt_dir`` into the structure of ``template``.

    Checks the checksums of meta.json and state.msgpack; never opens replay.npz."""
    ckpt_dir = Path(ckpt_dir)
    meta = _read_meta(ckpt_dir)
    try:
        blob = (ckpt_dir / "state.msgpack").read_bytes()
    except OSError as e:
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: {_one_line(e)}") from e
    if _sha256(blob) != meta.get("state_sha256"):
        raise OffpolicyError(f"corrupt checkpoint {ckpt_dir}: state.msgpack checksum mismatch")
    try:
        state = flax.serialization.from_bytes(template, blob)
    except Exception as e:  # msgpack / structure errors: report, never a traceback
        raise OffpolicyError(
            f"checkpoint {ckpt_dir} does not match this configuration: {_one_line(e)}") from e
    return state, meta
