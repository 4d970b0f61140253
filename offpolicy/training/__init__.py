"""The runtime: build (config -> parts), collector (envs, acting, episodes; writes to a sink),
learner (replay, statistics, sampling, the jitted update, write-back, metrics), schedule and
loops (what is due, one loop per cadence), run (run directory, resume, evaluation, logging)."""

from offpolicy.training.run import Run

__all__ = ["Run"]
