"""Experience replay."""

from offpolicy.replay.storage import ReplayBuffer

__all__ = ["ReplayBuffer"]
