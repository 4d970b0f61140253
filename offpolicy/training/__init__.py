"""The runtime: collector (envs, noise, episodes, replay writes), learner (sampling, the jitted
update, write-back, metrics) and run (schedule, evaluation, checkpoints, signals, run dir)."""

from offpolicy.training.run import Run

__all__ = ["Run"]
