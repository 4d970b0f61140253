"""Callbacks for ``Agent.learn`` (docs/guides/callbacks.md).

    from offpolicy.callbacks import checkpoint_every, stop_on_return
    agent.learn(100_000, callback=[stop_on_return(-200), checkpoint_every(20_000, "snaps")])

A callback is any callable ``callback(view: RunView) -> bool | None``, called after each
evaluation and every ``callback_every`` env steps (default: ``log_every``); False stops the
run cleanly (checkpoint written, status 'stopped', resumable), None or True goes on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from offpolicy.errors import OffpolicyError
from offpolicy.training.callbacks import Callback, RunView

__all__ = ["Callback", "RunView", "checkpoint_every", "stop_on_return"]


def stop_on_return(threshold: float) -> Callback:
    """Stop once an evaluation's mean return reaches ``threshold`` (``return_mean >=
    threshold``). Only a fresh evaluation is judged, so a ``learn`` that continues a run it
    stopped trains on until the next evaluation."""
    threshold = float(threshold)
    if not np.isfinite(threshold):
        raise OffpolicyError(f"stop_on_return: the threshold must be finite, got {threshold}")

    def stop_on_return(view: RunView) -> bool:
        return not (view.evaluated and view.eval is not None
                    and view.eval["return_mean"] >= threshold)

    return stop_on_return


def checkpoint_every(steps: int, directory: str | Path, replay: bool = True) -> Callback:
    """Keep a snapshot of the run every ``steps`` env steps, each a run directory of its own,
    ``DIRECTORY/step-000020000`` (:meth:`RunView.save`: config, CSVs, a ``latest``
    checkpoint, with the replay unless ``replay`` is False or the run's ``save_replay`` is
    off). It is written at the first callback at or after each multiple of ``steps``, so
    ``steps`` is best a multiple of ``callback_every``. Load one with ``offpolicy.load``,
    continue one with ``offpolicy.make(algo, ..., run_dir=SNAPSHOT, resume=True)`` or
    ``offpolicy train ALGO --run-dir SNAPSHOT --resume``."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise OffpolicyError(f"checkpoint_every: steps must be a positive integer, got "
                             f"{steps!r}")
    steps, directory = int(steps), Path(directory)
    due: list[int] = []  # the next step to save at, set by the first call

    def checkpoint_every(view: RunView) -> None:
        if not due:  # a run that starts (or resumes) at view.step: the next multiple on
            due.append(-(-view.step // steps) * steps)
        if view.step < due[0]:
            return
        name = f"step-{view.step:09d}"
        path, n = directory / name, 1
        while path.exists() and any(path.iterdir()):  # a step reached again after a resume
            path, n = directory / f"{name}.{n}", n + 1
        view.save(path, replay=replay)
        due[0] = (view.step // steps + 1) * steps

    return checkpoint_every
