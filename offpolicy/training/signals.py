"""SIGINT and SIGTERM during training: the first asks the run to stop at its next periodic
check (it writes its checkpoint and exits with 128 + the signal); a second Ctrl-C stops at
once. Outside the main thread no handler can be installed, and none is."""

from __future__ import annotations

import signal


class StopSignals:
    def __init__(self):
        self.received: int | None = None  # the signal that asked the run to stop
        self._old: dict = {}

    def __enter__(self) -> StopSignals:
        self.received = None
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
