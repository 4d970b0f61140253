"""What a callback of ``Agent.learn`` sees, and how the run calls its callbacks.

The run calls them from its periodic work (:meth:`Run.periodic`), never per env step: after
each evaluation, and every ``callback_every`` env steps, where the schedule also writes a
train.csv row (so the view's ``train`` row is current). A callback returns None or True to go
on, False to stop: the run then stops as a signal stops it (its checkpoint written, status
``'stopped'``), and a later ``learn`` or ``--resume`` continues it. The ready-made callbacks
are in :mod:`offpolicy.callbacks`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offpolicy.errors import OffpolicyError


@dataclass(frozen=True)
class RunView:
    """A run as a callback sees it at one of its periodic points.

    ``step``: env steps done; ``total_steps``: where this ``learn`` call ends; ``eval``: the
    newest evaluation row (eval.csv's columns: ``step``, ``return_mean``, ``return_std``,
    ``return_se``, ``episodes``, ``wall_time``), None before the first; ``train``: the newest
    train.csv row (``step``, ``wall_time``, ``steps_per_s``, ``episode_return``, the
    algorithm's losses...), None before the first; ``evaluated``: this call follows an
    evaluation at ``step``; ``run_dir``: the run directory (None without one)."""

    step: int
    total_steps: int
    eval: dict[str, Any] | None
    train: dict[str, Any] | None
    evaluated: bool
    run_dir: Path | None
    _run: Any = field(default=None, repr=False, compare=False)

    def save(self, path: str | Path, replay: bool = True) -> Path:
        """Write the run as it is now to the new or empty directory ``path``, as a run
        directory of its own: config.yaml, eval.csv and train.csv so far, and a ``latest``
        checkpoint of this step (with the replay, unless ``replay`` is False or the run's
        ``save_replay`` is off: a resume then starts with an empty replay).
        ``offpolicy.load(path)`` acts with it; ``offpolicy.make(algo, ..., run_dir=path,
        resume=True)`` or ``offpolicy train ALGO --run-dir PATH --resume`` continues it."""
        if self._run is None:
            raise OffpolicyError("this RunView belongs to no run: it cannot save")
        from offpolicy.training.resume import snapshot

        return snapshot(self._run, Path(path), replay)


Callback = Callable[[RunView], "bool | None"]


def callback_list(callback: Callback | Iterable[Callback] | None) -> list[Callback]:
    """``learn``'s ``callback``: one callable, a list of them or None, as a list (checked)."""
    if callback is None:
        return []
    items = [callback] if callable(callback) else callback
    try:
        items = list(items)
    except TypeError:
        raise OffpolicyError(f"callback must be a callable or a list of callables, got "
                             f"{type(callback).__name__}") from None
    for c in items:
        if not callable(c):
            raise OffpolicyError(f"callback must be a callable or a list of callables, got "
                                 f"{type(c).__name__} in the list")
    return items


class Callbacks:
    """``learn``'s callbacks for one train call, their cadence and whether one said stop."""

    def __init__(self, callbacks: list[Callback] = (), every: int = 0):
        self.callbacks = list(callbacks)
        self.every = every if self.callbacks else 0  # env steps; 0: only after evaluations
        self.stop = False
        self.saved_eval: dict | None = None  # eval.csv's newest row (a resumed run's)

    def call(self, run, due: bool, evaluated: bool) -> bool:
        """At ``run``'s periodic work: call them when ``due`` or after an evaluation; True
        when one returned False (the run stops)."""
        if (due or evaluated) and self.callbacks and \
                not call_all(self.callbacks, view_of(run, evaluated)):
            self.stop = True
        return self.stop


def call_all(callbacks: list[Callback], view: RunView) -> bool:
    """Call every callback with ``view`` (all of them, in order, even after one says stop);
    False when one returned False. Anything else than None or a bool is a one-line error;
    an exception a callback raises propagates as it is."""
    go_on = True
    for c in callbacks:
        answer = c(view)
        if answer is None:
            continue
        if isinstance(answer, (bool, np.bool_)):
            go_on = go_on and bool(answer)
            continue
        name = getattr(c, "__name__", type(c).__name__)
        raise OffpolicyError(f"callback {name} returned {type(answer).__name__}: return None "
                             "or True to go on, False to stop")
    return go_on


def latest_eval(run) -> dict | None:
    """The newest evaluation row of ``run``: this process's, or (a resumed run before its
    first) eval.csv's newest at or before the current step; None without any."""
    if run.eval_history:
        return dict(run.eval_history[-1])
    if run.run_dir is None:
        return None
    if run.callbacks.saved_eval is None or run.callbacks.saved_eval["step"] > run.step:
        from offpolicy.plotting import read_eval_csv

        rows = [r for r in read_eval_csv(run.run_dir / "eval.csv", quiet=True)
                if r["step"] <= run.step]
        if not rows:
            return None
        run.callbacks.saved_eval = {k: int(v) if k in ("step", "episodes") else v
                          for k, v in rows[-1].items()}
    return dict(run.callbacks.saved_eval)


def view_of(run, evaluated: bool) -> RunView:
    """What a callback sees of ``run`` now (its train row: the one written at this step)."""
    train = run.logger.last_train if run.logger is not None else None
    return RunView(step=run.step, total_steps=run.schedule.total, eval=latest_eval(run),
                   train=None if train is None else dict(train), evaluated=evaluated,
                   run_dir=run.run_dir, _run=run)


def summary_of(run, status: str) -> dict[str, Any]:
    """What ``Run.train`` (and ``Agent.learn``) returns: the ``status`` ('completed',
    'interrupted' by the ``signal`` it names, or 'stopped' by a callback), the ``step``, the
    final and best returns, the ``run_dir`` (None without one), the newest evaluation row
    (``eval``, None before any) and the newest train.csv row (``train``: losses and
    diagnostics of the last logging interval, None before any)."""
    return {"status": status, "signal": run.signals.received, "step": run.step,
            "final_return": run.last_eval()[1], "best_return": run.best_return,
            "run_dir": None if run.run_dir is None else str(run.run_dir),
            "eval": dict(run.eval_history[-1]) if run.eval_history else None,
            "train": run.logger.last_train}
