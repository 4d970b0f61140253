"""An exclusive lock on a run directory, held for as long as a run writes into it.

``RUN_DIR/.lock`` is locked with ``flock``: the kernel releases it when the process ends, however
it ends, so a lock left by a killed run never blocks the next one. The file holds the PID of the
process that holds the lock, for the error message of the one that is refused. A run that ends
removes the file before it lets the lock go, so a finished run directory holds none; a run that
locked a file which was removed meanwhile (the previous holder's, in that window) takes a new
one, so two runs never hold locks on two different files of one directory.

Within one process the newest run on a directory takes the lock over from an older one (a
notebook that resumes a run whose agent is still referenced): the older one is then
``superseded`` and refuses to write (:meth:`RunDirLock.check`), so the two never interleave.
"""

from __future__ import annotations

import atexit
import fcntl
import os
from pathlib import Path

from offpolicy.errors import OffpolicyError

LOCK_FILE = ".lock"
_HELD: dict[Path, RunDirLock] = {}  # this process's locks, by resolved directory


class RunDirLock:
    def __init__(self, run_dir: Path):
        """Lock ``run_dir`` (which must exist) or raise a one-line ``OffpolicyError`` naming
        the process that holds it."""
        self._fd: int | None = None
        self.superseded = False
        self.run_dir = Path(run_dir)
        self.key = self.run_dir.resolve()
        older = _HELD.get(self.key)
        if older is not None and older._fd is not None:  # ours already: take it over
            self._fd, older._fd, older.superseded = older._fd, None, True
            _HELD[self.key] = self
            return
        path = self.run_dir / LOCK_FILE
        for _ in range(100):  # a removed file was locked: lock the new one
            fd = self._lock(path)
            if _same_file(fd, path):
                break
            os.close(fd)
        else:
            raise OffpolicyError(f"cannot lock run directory {run_dir}: its {LOCK_FILE} keeps "
                                 "being replaced")
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # the lock holds without the PID; only the message of a refused run is poorer
        self._fd = fd
        _HELD[self.key] = self

    def _lock(self, path: Path) -> int:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise OffpolicyError(f"cannot lock run directory {self.run_dir}: {e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "another process"
            raise OffpolicyError(
                f"run directory {self.run_dir} is in use by another offpolicy run ({who}); wait "
                "for it to finish, or choose another --run-dir") from None
        except OSError as e:
            os.close(fd)
            raise OffpolicyError(f"cannot lock run directory {self.run_dir}: {e}") from e
        return fd

    def check(self) -> None:
        """Raise if a newer run in this process took the directory over."""
        if self.superseded:
            raise OffpolicyError(
                f"run directory {self.run_dir} was taken over by a newer run in this process "
                "(a resume of it); this one no longer writes there")

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if _HELD is not None and _HELD.get(self.key) is self:
                del _HELD[self.key]
            path = self.run_dir / LOCK_FILE
            try:  # removed while still locked: a run that opened it meanwhile takes a new one
                if _same_file(fd, path):
                    path.unlink()
            except OSError:
                pass  # a read-only or vanished folder: the file stays, harmless
            os.close(fd)  # closing the descriptor releases the flock

    def __del__(self):
        self.release()


@atexit.register
def _release_all() -> None:
    """At interpreter exit, before module globals go: release what this process still holds
    (a Python session's agents), so no lock file stays and no ``__del__`` runs late."""
    for lock in list(_HELD.values()):
        lock.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def in_use(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir``'s lock (the kernel drops it when the process
    ends, however it ends), without taking it."""
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` is still the file open as ``fd``."""
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
