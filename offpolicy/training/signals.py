"""SIGINT and SIGTERM during training: the first asks the run to stop at its next periodic
check (it writes its checkpoint and exits with 128 + the signal); a second Ctrl-C stops at
once. Outside the main thread no handler can be installed, and none is.

Outside training (the command line's start-up: imports, building the agent, the run
directory) SIGTERM raises :class:`Terminated` (:func:`terminating`), as SIGINT raises
``KeyboardInterrupt``: what is under way unwinds and the command exits with 143 (128 +
SIGTERM), where Python's default would end the process on the spot. An exception raised in a
garbage-collection callback or a ``__del__`` is printed and dropped, so the signal is also
kept: the next run's :class:`StopSignals` takes it over and stops at its first check."""

from __future__ import annotations

import contextlib
import signal
import sys

_pending: list[int] = []  # SIGTERMs that :func:`terminating` raised for and no run took over


class Terminated(BaseException):
    """SIGTERM outside a training loop (:func:`terminating`)."""


def _terminate(signum, frame) -> None:
    _pending.append(signum)
    raise Terminated


@contextlib.contextmanager
def terminating():
    """SIGTERM raises :class:`Terminated` for the block (from the main thread only); one that
    is dropped is not printed either (it is kept)."""
    _pending.clear()
    try:
        old = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: no handler can be installed
        yield
        return
    hook = sys.unraisablehook

    def quiet(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Terminated):
            hook(unraisable)

    sys.unraisablehook = quiet
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        sys.unraisablehook = hook


def terminated() -> bool:
    """Whether a SIGTERM came that no run took over (its :class:`Terminated` was dropped)."""
    return bool(_pending)


class StopSignals:
    def __init__(self):
        self.received: int | None = None  # the signal that asked the run to stop
        self._old: dict = {}

    def __enter__(self) -> StopSignals:
        # a SIGTERM during start-up whose Terminated was dropped: stop at the first check
        self.received = _pending[-1] if _pending else None
        _pending.clear()
        try:
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handler)
        except ValueError:  # not the main thread: no signal handling
            pass
        return self

    def _handler(self, signum, frame) -> None:
        if self.received is not None:  # a second Ctrl-C: stop at once
            raise KeyboardInterrupt
        self.received = signum

    def reinstall(self) -> None:
        """Take the signals back from a library that installed handlers of its own since
        (Ray's core worker does, and would end the process on SIGTERM without a checkpoint)."""
        for s in self._old:
            signal.signal(s, self._handler)

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}
