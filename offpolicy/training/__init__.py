"""The runtime: build (config -> parts), collector (envs, acting, episodes; writes to a sink),
learner (replay, statistics, sampling, the jitted update, write-back, metrics), schedule and
loops (what is due, one loop per cadence), run (run directory, resume, evaluation, logging).

``Run`` is imported on first use: the command line's signal handling (``signals``) and the
suite runner's checkpoint reading load without JAX."""

__all__ = ["Run"]


def __getattr__(name: str):
    if name == "Run":
        from offpolicy.training.run import Run

        return Run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
