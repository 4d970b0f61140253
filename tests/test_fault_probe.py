"""Defects from a fault probe and an external oracle (issue #36); each test failed before its
fix. Item 1 (a refreshed V^tbc reverted in float32) is tested in test_refer.py beside the other
stored-target checks."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from _helpers import (
    TINY_FLAGS,
    assert_one_line_error,
    cli_cmd,
    cli_env,
    latest_step,
    read_csv,
    run_cli,
    signal_when,
    start_cli,
    tiny_run,
    wait_for,
)
from toy_envs import RAISE_AT

from offpolicy.training import checkpoint

DDPG = ["train", "ddpg", "--env", "Pendulum-v1", *TINY_FLAGS]


# ---------------------------------------------------------------------- item 2
def _pointer_step(run_dir, kind):
    name = checkpoint.pointer_target(run_dir / "checkpoints", kind)
    return None if name is None else checkpoint.step_of(name)


def test_best_after_a_kill_comes_from_the_kept_timeline(tmp_path):
    """Acceptance 3: SIGKILL a run after a ``best`` save that followed its last ``latest``,
    resume it: ``best`` is the best row of eval.csv (which the resume cut back to the latest
    checkpoint and re-ran), and the summary line says the same."""
    run_dir = tmp_path / "R"
    # ACER on CartPole improves within 4000 steps (DDPG's tiny runs peak at their first
    # evaluation): new bests at 2200 and 3600, after the latest checkpoints of 2000 and 3000
    args = ["train", "acer", "--env", "CartPole-v1", "--steps", "4000", "--seed", "0",
            "--eval-every", "200", "--eval-episodes", "2", "--checkpoint-every", "1000",
            "--quiet", "--run-dir", "R"]
    p = start_cli(*args, cwd=tmp_path)

    def best_after_latest():
        best, latest = _pointer_step(run_dir, "best"), latest_step(run_dir)
        return best is not None and latest is not None and best > latest

    signal_when(best_after_latest, p, signal.SIGKILL)
    killed_at = latest_step(run_dir)
    assert _pointer_step(run_dir, "best") > killed_at  # a best of the timeline to discard

    def check(done, last_step):
        assert done.returncode == 0, done.stderr
        rows = read_csv(run_dir / "eval.csv")
        assert [int(r["step"]) for r in rows] == list(range(200, last_step + 1, 200))
        best_row = max(rows, key=lambda r: float(r["return_mean"]))
        meta = checkpoint.load_meta(checkpoint.locate(run_dir, "best"))
        assert meta["step"] == int(best_row["step"])
        assert meta["best_return"] == float(best_row["return_mean"])
        assert f"(best {float(best_row['return_mean']):.2f})" in done.stdout
        kept = sorted(d.name for d in (run_dir / "checkpoints").glob("best-*"))
        assert kept == [checkpoint.pointer_target(run_dir / "checkpoints", "best")]

    # resumed to the step it was killed at: nothing trains, the discarded best is gone
    check(run_cli(*args, "--resume", "--steps", str(killed_at),  # the last --steps counts
                  cwd=tmp_path), killed_at)
    # and on to the end
    check(run_cli(*args, "--resume", cwd=tmp_path), 4000)


# ---------------------------------------------------------------------- item 6
def test_steps_and_evaluations_land_on_the_asked_step_with_env_copies(tmp_path):
    """``--num-envs 4``: a run ends at its ``--steps`` and evaluates at multiples of
    ``--eval-every``; values the copies cannot land on are refused with the nearest ones."""
    for flag, value, near in (("--steps", "1002", "use 1000 or 1004"),
                              ("--eval-every", "250", "use 248 or 252"),
                              ("--checkpoint-every", "1001", "use 1000 or 1004"),
                              ("--steps", "2", "use 4")):
        args = [*DDPG, "--num-envs", "4", "--steps", "1000", flag, value, "--run-dir", "X"]
        assert near in assert_one_line_error(run_cli(*args, cwd=tmp_path), "--num-envs 4")
        assert not (tmp_path / "X").exists()
    ok = run_cli(*DDPG, "--num-envs", "4", "--steps", "1000", "--eval-every", "500",
                 "--run-dir", "R", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert [int(r["step"]) for r in read_csv(tmp_path / "R" / "eval.csv")] == [500, 1000]
    assert int(read_csv(tmp_path / "R" / "train.csv")[-1]["step"]) == 1000
    assert latest_step(tmp_path / "R") == 1000


def test_acer_paper_mujoco_refuses_steps_its_16_copies_overshoot(tmp_path):
    """#34 item 4: ``acer --preset paper-mujoco --steps 100`` (16 env copies) ended at 112."""
    args = ["train", "acer", "--env", "CartPole-v1", "--preset", "paper-mujoco", "--quiet",
            "--eval-episodes", "2"]
    bad = run_cli(*args, "--steps", "100", "--run-dir", "X", cwd=tmp_path)
    assert "use 96 or 112" in assert_one_line_error(bad, "--steps 100")
    ok = run_cli(*args, "--steps", "96", "--run-dir", "R", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert [int(r["step"]) for r in read_csv(tmp_path / "R" / "eval.csv")] == [96]


# ---------------------------------------------------------------------- item 7
def test_resume_refuses_steps_below_the_step_reached(tmp_path):
    args = [*DDPG, "--steps", "400", "--eval-every", "200", "--run-dir", "R"]
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    config = (tmp_path / "R" / "config.yaml").read_text()
    low = run_cli(*DDPG, "--run-dir", "R", "--resume", "--steps", "200", cwd=tmp_path)
    assert "step 400" in assert_one_line_error(low, "--steps 200")
    assert (tmp_path / "R" / "config.yaml").read_text() == config
    same = run_cli(*DDPG, "--run-dir", "R", "--resume", "--steps", "400", cwd=tmp_path)
    assert same.returncode == 0, same.stderr


# ---------------------------------------------------------------------- item 3
@pytest.mark.parametrize("algo,env,extra,where", [
    ("ddpg", "toy_envs:RaiseInStep-v0", ["--ddpg.hidden", "32", "32"],
     f"raised RuntimeError at step {RAISE_AT}: simulator diverged"),
    ("acer", "toy_envs:DiscreteRaise-v0", ["--num-envs", "1"],
     f"raised RuntimeError at step {RAISE_AT}: simulator diverged"),
    ("ddpg", "toy_envs:RaiseInReset-v0", ["--ddpg.hidden", "32", "32"],
     "raised RuntimeError at step 40: simulator lost at reset 5"),
    ("ddpg", "toy_envs:RaiseInStep-v0", ["--num-envs", "2", "--async-envs", "--ddpg.hidden", "32",
                                          "32"],
     f"raised RuntimeError at step {2 * RAISE_AT}: simulator diverged"),
])
def test_an_env_that_raises_is_one_line_and_keeps_the_checkpoint(tmp_path, algo, env, extra,
                                                                  where):
    """An exception from the env's step() or reset() (in this process or an async worker)
    ends the run with one line naming the env, the exception and the step, exit 2, and the
    last checkpoint kept; OFFPOLICY_TRACEBACK=1 shows the whole trace."""
    args = ["train", algo, "--env", env, "--steps", "4000", "--eval-every", "4000",
            "--batch-size", "16", "--quiet", *extra]
    p = run_cli(*args, "--run-dir", "R", cwd=tmp_path)
    assert where in assert_one_line_error(p, f"environment {env}")
    if "Reset" not in env:
        assert latest_step(tmp_path / "R") == 1000  # the first checkpoint stays
    if "--async-envs" not in extra:
        return
    env_vars = {"OFFPOLICY_TRACEBACK": "1"}  # the worker's trace too
    traced = run_cli(*args, "--run-dir", "T", cwd=tmp_path, extra_env=env_vars)
    assert traced.returncode == 2
    assert "Traceback" in traced.stderr and "RuntimeError" in traced.stderr
    assert traced.stderr.strip().splitlines()[-1].startswith("offpolicy: error: environment")


# ---------------------------------------------------------------------- item 8
def _async_run(tmp_path):
    return subprocess.Popen(
        cli_cmd(*DDPG, "--steps", "200000", "--num-envs", "4", "--async-envs", "--run-dir",
                "R", "--checkpoint-every", "400"),
        cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)


def test_async_envs_stop_quietly_on_ctrl_c(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, workers included) printed a two-line
    'could not close ... Broken pipe' warning before the interrupted message."""
    p = _async_run(tmp_path)
    _, err = signal_when(lambda: (latest_step(tmp_path / "R") or 0) >= 400, p, signal.SIGINT,
                         group=True)
    assert p.returncode == 130, err
    assert err.strip().splitlines() == [line for line in err.strip().splitlines()
                                        if line.startswith("interrupted at step")], err


def test_async_workers_exit_silently_when_the_run_is_killed(tmp_path):
    """SIGKILL of the training process: the workers printed 130 lines of EOFError /
    BrokenPipeError tracebacks and the resource tracker a leaked-semaphore warning."""
    p = _async_run(tmp_path)
    _, err = signal_when(lambda: (latest_step(tmp_path / "R") or 0) >= 400, p, signal.SIGKILL)
    assert p.returncode == -signal.SIGKILL
    assert err == "", err  # read to EOF: every worker (and helper process) has exited


# ---------------------------------------------------------------------- item 4
def test_a_run_directory_in_use_is_refused_and_a_dead_lock_does_not_block(tmp_path):
    """A second ``train`` into a directory whose run is going but has no checkpoint yet wiped
    the first run's files and both wrote into it; now it is refused with one line naming the
    process, ``--resume`` too, and the lock of a killed run does not block the next one."""
    first = start_cli(*DDPG, "--steps", "100000", "--run-dir", "R", cwd=tmp_path)
    try:
        wait_for(lambda: (tmp_path / "R" / "config.yaml").exists(), first)
        first.send_signal(signal.SIGSTOP)  # going, holding the lock, no checkpoint yet
        assert latest_step(tmp_path / "R") is None
        for extra in ([], ["--resume"]):
            p = run_cli(*DDPG, "--steps", "400", "--run-dir", "R", *extra, cwd=tmp_path)
            assert f"pid {first.pid}" in assert_one_line_error(p, "in use by another")
        assert (tmp_path / "R" / "config.yaml").exists()  # the first run's files are intact
    finally:
        first.kill()
        first.communicate()
    again = run_cli(*DDPG, "--steps", "400", "--eval-every", "400", "--run-dir", "R",
                    cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "starting afresh" in again.stderr  # the killed run had no checkpoint


def test_in_one_process_a_resume_takes_the_directory_over(tmp_path):
    """A notebook resumes a run whose agent is still referenced: the newer run takes the
    lock over and the older one refuses to write, so the two never interleave; another
    process is still refused until the agent is closed."""
    import offpolicy
    from offpolicy.errors import OffpolicyError

    kw = dict(env="Pendulum-v1", run_dir=tmp_path / "R", quiet=True, hidden=(32, 32),
              batch_size=16, eval_every=200, eval_episodes=2)
    agent = offpolicy.make("ddpg", **kw)
    agent.learn(200)
    resumed = offpolicy.make("ddpg", resume=True, **kw)
    assert resumed.step == 200
    with pytest.raises(OffpolicyError, match="taken over by a newer run"):
        agent.learn(200)
    other = run_cli(*DDPG, "--steps", "400", "--run-dir", "R", "--resume", cwd=tmp_path)
    assert f"pid {os.getpid()}" in assert_one_line_error(other, "in use by another")
    resumed.learn(200)
    resumed.close()
    again = run_cli(*DDPG, "--steps", "600", "--run-dir", "R", "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr


# ---------------------------------------------------------------------- item 8
def test_a_negative_value_in_scientific_notation_is_a_value(tmp_path):
    """``--vracer.lr -1e-3`` said "expected one argument" (argparse took it for a flag)."""
    p = run_cli("train", "vracer", "--env", "Pendulum-v1", "--vracer.lr", "-1e-3",
                "--run-dir", "X", cwd=tmp_path)
    assert "--vracer.lr: must be > 0, got -0.001" in assert_one_line_error(p)


def test_a_failed_config_write_leaves_no_run_directory(tmp_path, monkeypatch):
    from offpolicy.errors import OffpolicyError
    from offpolicy.training.run import Run

    def full_disk(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "write_text_atomic", full_disk)
    with pytest.raises(OffpolicyError, match="No space left"):
        Run(tiny_run(), tmp_path / "new")
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------------- item 5
def test_partial_and_malformed_csvs(tmp_path):
    """A truncated last line or a non-numeric row in eval.csv made ``table`` and ``plot``
    crash with a traceback, and ``--resume`` appended after the partial line (TypeError)."""
    args = [*DDPG, "--steps", "600", "--eval-every", "200", "--run-dir", "R"]
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    eval_csv = tmp_path / "R" / "eval.csv"
    whole = eval_csv.read_text()
    eval_csv.write_text(whole[:-25])  # killed while writing its last row
    for cmd in (["table", "R"], ["plot", "R", "--out", "c.png"]):
        p = run_cli(*cmd, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        assert "skipped its incomplete last line 4" in p.stderr

    resumed = run_cli(*DDPG, "--steps", "800", "--eval-every", "200", "--run-dir", "R",
                      "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    rows = read_csv(eval_csv)
    assert [int(r["step"]) for r in rows] == [200, 400, 600, 800]
    assert all(float(r["return_mean"]) < 0 for r in rows)

    lines = eval_csv.read_text().splitlines()
    lines[2] = "400,oops,1,1,2,0.5"
    eval_csv.write_text("\n".join(lines) + "\n")
    for cmd in (["table", "R"], ["plot", "R", "--out", "c.png"]):
        assert "eval.csv, line 3: 'return_mean' is not a number" in assert_one_line_error(
            run_cli(*cmd, cwd=tmp_path))
    lines[2] = "four hundred,1,1,1,2,0.5"
    eval_csv.write_text("\n".join(lines) + "\n")
    p = run_cli(*DDPG, "--steps", "1000", "--run-dir", "R", "--resume", cwd=tmp_path)
    line = assert_one_line_error(p, "eval.csv, line 3")
    assert "not a number: 'four hundred'" in line


def test_default_cadences_become_multiples_of_the_env_copies():
    """Values nobody set are not refused: with 3 env copies the default evaluation and
    checkpoint intervals (10 000) become 9999, and config.yaml records it."""
    from offpolicy import registry

    run = registry.resolve("ddpg", train_overrides={"num_envs": 3, "steps": 3000})
    assert (run.train.eval_every, run.train.checkpoint_every) == (9999, 9999)
    assert run.to_dict()["train"]["eval_every"] == 9999
