"""Issue 69, item 2: ``learn(steps, callback=..., callback_every=N)``. Callbacks see a RunView
after each evaluation and every N env steps (never per step); False stops the run as a signal
does (checkpoint written, status 'stopped', resumable); ``stop_on_return`` and
``checkpoint_every`` ready-made."""

from pathlib import Path

import numpy as np
import pytest
from _helpers import latest_step, read_csv

import offpolicy
from offpolicy.callbacks import RunView, checkpoint_every, stop_on_return
from offpolicy.errors import OffpolicyError

TINY = dict(hidden=(8, 8), batch_size=8, warmup_steps=20, eval_every=100, eval_episodes=1,
            log_every=50, quiet=True)


def _recorder():
    views: list[RunView] = []

    def record(view):
        views.append(view)

    return views, record


def test_stop_on_return_stops_with_a_checkpoint_and_the_run_resumes(tmp_path):
    run_dir = tmp_path / "run"
    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, run_dir=run_dir, **TINY)
    out = agent.learn(400, callback=stop_on_return(-1e9))  # the first evaluation reaches it
    assert out["status"] == "stopped" and out["signal"] is None
    assert out["step"] == agent.step == 100 and out["eval"]["step"] == 100
    assert latest_step(run_dir) == 100 and (run_dir / "curve.png").exists()
    # the same agent goes on; a stale evaluation does not stop it again, the next one does
    out = agent.learn(200, callback=stop_on_return(-1e9))
    assert out["status"] == "stopped" and out["step"] == 200 == latest_step(run_dir)
    agent.close()

    again = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, run_dir=run_dir, resume=True,
                           **TINY)
    assert again.step == 200 and len(again.run.replay) == 200
    views, record = _recorder()
    out = again.learn(100, callback=record)
    again.close()
    assert out["status"] == "completed" and out["step"] == 300
    # the resumed run's first view knows eval.csv's newest row
    assert views[0].step == 250 and views[0].eval["step"] == 200 and not views[0].evaluated
    assert [int(r["step"]) for r in read_csv(run_dir / "eval.csv")] == [100, 200, 300]


def test_callbacks_see_eval_and_train_rows_at_their_cadence():
    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, **TINY)
    views, record = _recorder()
    out = agent.learn(300, callback=record, callback_every=75)
    assert out["status"] == "completed"
    # every 75 steps and after every evaluation (100, 200, 300), once per step
    assert [v.step for v in views] == [75, 100, 150, 200, 225, 300]
    assert [v.evaluated for v in views] == [False, True, False, True, False, True]
    assert views[0].eval is None and views[0].total_steps == 300 and views[0].run_dir is None
    for v in views:  # the train row is the one written at the callback's step
        assert v.train["step"] == v.step and "critic_loss" in v.train
    assert views[2].eval["step"] == 100 and np.isfinite(views[2].eval["return_mean"])
    assert views[-1].eval == out["eval"] and views[-1].train == out["train"]

    # the default cadence is log_every (50); a list of callbacks, each called
    first, second = _recorder(), _recorder()
    agent.learn(100, callback=[first[1], second[1]])
    assert [v.step for v in first[0]] == [v.step for v in second[0]] == [350, 400]


def test_a_callback_returning_false_stops_and_every_callback_is_still_called():
    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, **TINY)
    views, record = _recorder()
    out = agent.learn(300, callback=[lambda v: v.step < 150, record])
    assert out["status"] == "stopped" and out["step"] == 150 == agent.step
    assert [v.step for v in views] == [50, 100, 150]
    out = agent.learn(100)  # no callback: it goes on to the end
    assert out["status"] == "completed" and out["step"] == 250


def test_a_callback_error_propagates_as_itself():
    class Boom(Exception):
        pass

    def boom(view):
        if view.step >= 100:
            raise Boom("from the callback")

    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, **TINY)
    with pytest.raises(Boom, match="from the callback"):
        agent.learn(300, callback=boom)
    assert agent.step == 100
    with pytest.raises(OffpolicyError, match="returned str: return None or True to go on"):
        agent.learn(100, callback=lambda v: "stop")
    for bad, msg in [(dict(callback="x"), "callback must be a callable"),
                     (dict(callback=[print, 3]), "got int in the list"),
                     (dict(callback=print, callback_every=0), "callback_every must be")]:
        with pytest.raises(OffpolicyError, match=msg):
            agent.learn(100, **bad)
    with pytest.raises(OffpolicyError, match="positive integer"):
        checkpoint_every(0, "x")
    with pytest.raises(OffpolicyError, match="finite"):
        stop_on_return(float("nan"))


def test_checkpoint_every_keeps_snapshots_that_load_and_resume(tmp_path):
    snaps = tmp_path / "snaps"
    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, run_dir=tmp_path / "run",
                           **TINY)
    agent.learn(300, callback=checkpoint_every(100, snaps))
    agent.close()
    assert sorted(p.name for p in snaps.iterdir()) == [
        "step-000000100", "step-000000200", "step-000000300"]
    snap = snaps / "step-000000200"
    assert [int(r["step"]) for r in read_csv(snap / "eval.csv")] == [100, 200]
    loaded = offpolicy.load(snap)
    assert loaded.step == 200 and np.all(np.isfinite(loaded.act(np.zeros(3, np.float32))))
    again = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, run_dir=snap, resume=True, **TINY)
    assert again.step == 200 and len(again.run.replay) == 200
    assert again.learn(100)["step"] == 300
    again.close()

    # without a run directory, and without replay: the snapshot still loads
    plain = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, **TINY)
    plain.learn(100, callback=checkpoint_every(100, tmp_path / "plain", replay=False))
    snap = tmp_path / "plain" / "step-000000100"
    assert offpolicy.load(snap).step == 100 and not list(snap.rglob("replay.npz"))


def test_run_view_is_exported():
    assert offpolicy.RunView is RunView
    assert offpolicy.callbacks.stop_on_return is stop_on_return
    view = RunView(step=5, total_steps=10, eval=None, train=None, evaluated=False,
                   run_dir=Path("x"))
    with pytest.raises(OffpolicyError, match="belongs to no run"):
        view.save("y")
