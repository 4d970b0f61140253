"""Experiment suites: a paper's grid (entries x envs x seeds) from YAML, run locally or on a
Ray cluster, resumable, with its report (``offpolicy suite list | run | report``)."""

from offpolicy.suites.spec import Entry, EnvPlan, Suite, available, check, load

__all__ = ["Entry", "EnvPlan", "Suite", "available", "check", "load"]
