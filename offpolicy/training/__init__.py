"""Training loop, evaluation, logging and checkpoints."""

from offpolicy.training.loop import Trainer

__all__ = ["Trainer"]
