"""Experience replay as a table: storage, a sampler, a remover and extensions
(:mod:`offpolicy.replay.table`)."""

from offpolicy.replay.storage import Storage
from offpolicy.replay.table import Table

__all__ = ["Storage", "Table"]
