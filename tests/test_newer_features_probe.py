"""Defects from the fault probe of the newer features (issue #74); each test failed before its
fix."""

from __future__ import annotations

import dataclasses
import errno
import shutil

import numpy as np
import pytest
from _helpers import (
    TINY_FLAGS,
    TINY_OVERRIDES,
    assert_one_line_error,
    latest_step,
    read_csv,
    run_cli,
    tiny_run,
)

from offpolicy.errors import OffpolicyError
from offpolicy.training import checkpoint

DDPG = ["train", "ddpg", "--env", "Pendulum-v1", *TINY_FLAGS]


# ---------------------------------------------------------------------- item 2
def test_table_and_plot_leave_out_a_run_without_evaluations(tmp_path):
    """A folder holding a run that has just started (eval.csv's header, no row) made
    ``table`` and ``plot`` fail outright; now it is left out with a note."""
    done = run_cli(*DDPG, "--steps", "200", "--eval-every", "200", "--run-dir", "runs/a",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    started = tmp_path / "runs" / "b"
    started.mkdir()
    shutil.copy(tmp_path / "runs" / "a" / "config.yaml", started)
    (started / "eval.csv").write_text("step,return_mean,return_std,return_se,episodes,"
                                      "wall_time\n")
    for cmd in (["table", "runs"], ["plot", "runs", "--out", "c.png"]):
        p = run_cli(*cmd, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        assert f"left out 1 run without an evaluation yet: {started.relative_to(tmp_path)}" \
            in p.stderr
    assert "| ddpg | 1 | 200 |" in run_cli("table", "runs", cwd=tmp_path).stdout
    for cmd in (["table", "runs/b"], ["plot", "runs/b", "--out", "d.png"]):
        assert_one_line_error(run_cli(*cmd, cwd=tmp_path), "no run has an evaluation yet")
    assert not (tmp_path / "d.png").exists()


# ---------------------------------------------------------------------- item 3
def test_learn_with_collectors_trains_exactly_the_steps_asked():
    """Chunks of 50 steps: ``learn(30)`` trained nothing and ``learn(70)`` 50; the last chunks
    are cut now, so each call ends on its step (with updates for every step learned)."""
    from offpolicy.api import Agent
    from offpolicy.training.distributed import LocalPool
    from offpolicy.training.run import Run

    run = Run(tiny_run(env="toy_envs:ToyTerminate-v0", num_collectors=2, eval_every=1000,
                       log_every=100), None)
    run.pool_factory = LocalPool
    agent = Agent(run)
    for n, reached in ((30, 30), (70, 100), (2, 102)):
        assert agent.learn(n)["step"] == reached
        assert len(run.replay) == reached
    assert run.learner.updates == 102  # each chunk's updates, one per env step
    agent.close()


def test_learn_refuses_a_cut_segment_with_collectors():
    """Where a collector's chunk is one segment (ACER) it is not cut: whole chunks only."""
    from offpolicy.api import Agent
    from offpolicy.training.distributed import LocalPool
    from offpolicy.training.run import Run

    run = Run(tiny_run("acer", "CartPole-v1", num_collectors=2, num_envs=1), None)
    run.pool_factory = LocalPool
    agent = Agent(run)
    with pytest.raises(OffpolicyError, match="use 20 or 40"):
        agent.learn(30)
    agent.close()


# ---------------------------------------------------------------------- item 4
@pytest.mark.parametrize("flags,named", [
    (["--td3.hidden", "1048576", "1048576"], "--td3.hidden 1048576 1048576"),  # the maximum
    (["--td3.core", "gru", "--td3.core-cells", "1000000"], "--td3.core-cells 1000000"),
    # parameters that fit, activations of the first update that do not
    (["--td3.hidden", "4096", "4096", "--batch-size", "4194304", "--buffer-size", "4194304",
      "--no-wait-for-batch", "--warmup-steps", "0"], "--batch-size 4194304"),
])
def test_a_network_too_big_for_memory_is_one_line(tmp_path, flags, named):
    """A 47-line out-of-memory traceback, exit 1; now one line naming the flags to shrink,
    exit 2, and no run directory left (nothing was checkpointed)."""
    p = run_cli("train", "td3", "--env", "Pendulum-v1", "--steps", "2000", "--quiet", *flags,
                "--run-dir", "R", cwd=tmp_path)
    line = assert_one_line_error(p, "out of memory: td3's networks or batch do not fit")
    assert named in line and "shrink them" in line
    assert not (tmp_path / "R").exists()


def test_out_of_memory_in_python_is_the_library_error():
    import offpolicy

    with pytest.raises(OffpolicyError, match=r"--td3\.hidden 1048576 1048576"):
        offpolicy.make("td3", env="Pendulum-v1", hidden=(2**20, 2**20))


# ---------------------------------------------------------------------- item 5
def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_best_save_names_the_latest_checkpoint(tmp_path, monkeypatch):
    """With ``best`` at step 2000 ahead of ``latest`` at 1000, a failed ``best`` save said
    "the last good checkpoint (step 2000) is kept": a resume starts from 1000."""
    root = tmp_path / "checkpoints"
    checkpoint.save(root, "latest", 1000, {"w": np.zeros(2)}, {})
    checkpoint.save(root, "best", 2000, {"w": np.ones(2)}, {})
    monkeypatch.setattr(checkpoint, "_write_file", _enospc)
    with pytest.raises(OffpolicyError) as info:
        checkpoint.save(root, "best", 3000, {"w": np.ones(2)}, {})
    assert "the last good checkpoint (step 1000) is kept" in str(info.value)


def test_a_run_that_failed_saving_is_not_finished(tmp_path, monkeypatch):
    """Its save at the last step failed after the last evaluation was logged: the next
    ``suite run`` counted it as finished (eval.csv reached its steps) and skipped it."""
    from offpolicy.suites import runner
    from offpolicy.training.run import Run

    real = checkpoint._write_file
    monkeypatch.setattr(checkpoint, "_write_file", lambda path, data: (
        _enospc() if "000002000" in str(path) else real(path, data)))
    run = Run(tiny_run(steps=2000, eval_every=1000), tmp_path / "R")
    with pytest.raises(OffpolicyError, match=r"step 1000\) is kept"):
        run.train()
    run.close()
    assert [int(r["step"]) for r in read_csv(tmp_path / "R" / "eval.csv")] == [1000, 2000]
    assert latest_step(tmp_path / "R") == 1000
    assert not runner.finished(tmp_path / "R", 2000)
    assert runner.finished(tmp_path / "R", 1000)


def test_plot_on_a_full_disk_leaves_no_file(tmp_path, monkeypatch, capsys):
    """``plot`` left a 0-byte file: the figure is written beside it and renamed."""
    from matplotlib.figure import Figure

    from offpolicy.cli import main

    run = tmp_path / "R"
    run.mkdir()
    (run / "eval.csv").write_text("step,return_mean,return_std,return_se,episodes,wall_time\n"
                                  "100,1.0,0.5,0.25,4,1.0\n")

    def full_disk(self, fname, **kw):
        open(fname, "wb").close()  # the file is made, its first block is not
        _enospc()

    monkeypatch.setattr(Figure, "savefig", full_disk)
    assert main(["plot", str(run), "--out", str(tmp_path / "figs" / "c.png")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R"]
    (tmp_path / "c.png").write_bytes(b"an older figure")
    assert main(["plot", str(run), "--out", str(tmp_path / "c.png")]) == 2
    assert (tmp_path / "c.png").read_bytes() == b"an older figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R", "c.png"]


def test_save_on_a_full_disk_leaves_no_folder(tmp_path, monkeypatch):
    import offpolicy

    agent = offpolicy.make("ddpg", env="Pendulum-v1", **TINY_OVERRIDES)
    monkeypatch.setattr(checkpoint, "_write_file", _enospc)
    with pytest.raises(OffpolicyError, match="No space left on device"):
        agent.save(tmp_path / "new" / "agent")
    assert not (tmp_path / "new").exists()
    agent.close()


# ---------------------------------------------------------------------- item 6
def _one_line_error(capsys, argv: list[str]) -> str:
    from offpolicy.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("offpolicy: error: "), err
    return err


def test_duplicate_yaml_keys_are_refused(tmp_path, capsys):
    """PyYAML keeps a repeated key's last value: a ``--config`` file or a suite with one
    (and a suite naming an env twice in its list) was taken silently."""
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  steps: 1000\n  seed: 1\n  steps: 2000\n")
    err = _one_line_error(capsys, ["train", "ddpg", "--config", str(config), "--run-dir",
                                   str(tmp_path / "X")])
    assert "key 'steps' appears twice in one mapping (lines 2 and 4)" in err
    assert not (tmp_path / "X").exists()
    suite = tmp_path / "s.yaml"
    head = "name: dup\nseeds: [0]\nsteps: 600\n"
    suite.write_text(head + "envs: [Pendulum-v1]\nentries:\n  ddpg: {}\n"
                     "  ddpg: {flags: --batch-size 16}\n")
    err = _one_line_error(capsys, ["suite", "run", str(suite), "--dry-run"])
    assert "key 'ddpg' appears twice in one mapping (lines 6 and 7)" in err
    suite.write_text(head + "envs: [Pendulum-v1, Hopper-v5, Pendulum-v1]\nentries: {ddpg: {}}\n")
    err = _one_line_error(capsys, ["suite", "run", str(suite), "--dry-run"])
    assert "envs: 'Pendulum-v1' appears twice" in err


def _logged_run(d, columns):
    d.mkdir(parents=True)
    (d / "eval.csv").write_text("step,return_mean,return_std,return_se,episodes,wall_time\n"
                                "600,-300.0,2.0,0.5,2,1.0\n")
    (d / "train.csv").write_text(",".join(["step", *columns]) + "\n"
                                 + ",".join(["600"] + ["0.5"] * len(columns)) + "\n")


def test_an_unknown_metric_is_refused(tmp_path, capsys):
    """A metric no run logs (a typo) in ``suite report --metric`` or a suite's ``metrics:``
    was left out of the report without a word."""
    from offpolicy.suites import runner, spec
    from offpolicy.suites.report import write_report

    suite = spec.parse({"name": "m", "envs": ["Pendulum-v1"], "seeds": [0], "steps": 600,
                        "metrics": ["kl_mu_pj"],
                        "entries": {"ddpg": {}, "naf": {"flags": "--replay refer"}}},
                       tmp_path / "m.yaml")
    runs = runner.plan(suite, lambda env, entry, seed: tmp_path / entry / f"s{seed}")
    _logged_run(tmp_path / "ddpg" / "s0", ["critic_loss"])
    # naf has not logged yet: it may log the column, so a note and no refusal
    write_report(suite, runs, tmp_path / "out", "r", "cmd")
    assert "no run's train.csv has a column 'kl_mu_pj' yet (entries that have not logged: " \
           "naf)" in capsys.readouterr().err
    _logged_run(tmp_path / "naf" / "s0", ["critic_loss", "kl_mu_pi"])
    with pytest.raises(OffpolicyError, match=r"m\.yaml: metrics: no run's train.csv has a "
                       r"column 'kl_mu_pj'; did you mean kl_mu_pi\? \(columns: critic_loss, "
                       r"kl_mu_pi\)"):
        write_report(suite, runs, tmp_path / "out", "r", "cmd")
    with pytest.raises(OffpolicyError, match="--metric: no run's train.csv has a column 'x'"):
        write_report(suite, runs, tmp_path / "out", "r", "cmd", ["kl_mu_pi", "x"])
    assert "kl_mu_pi" in write_report(suite, runs, tmp_path / "out", "r", "cmd", ["kl_mu_pi"])
    # a selection (--entries ddpg) of a suite whose metric another entry logs: a note, a report
    (tmp_path / "naf" / "s0" / "train.csv").unlink()
    suite = dataclasses.replace(suite, metrics=("kl_mu_pi",))
    ddpg_only = [r for r in runs if r.entry.name == "ddpg"]
    assert write_report(suite, ddpg_only, tmp_path / "out", "r", "cmd")
    assert "not logged: naf" in capsys.readouterr().err


# ---------------------------------------------------------------------- item 7
def test_core_flags_without_a_core_are_refused(tmp_path, capsys):
    """``--td3.core-burn-in 5`` without ``--td3.core`` did nothing and was recorded in
    config.yaml as if it applied."""
    from offpolicy import registry

    short = ["--steps", "200", "--run-dir", str(tmp_path / "X")]  # were it accepted
    err = _one_line_error(capsys, ["train", "td3", "--td3.core-burn-in", "5", *short])
    assert "--td3.core-burn-in 5 applies to a recurrent core, and this td3 has none: give " \
           "--td3.core lstm or gru, or leave it out" in err
    config = tmp_path / "c.yaml"
    config.write_text("sac:\n  core-cells: 32\n")
    err = _one_line_error(capsys, ["train", "sac", "--config", str(config), *short])
    assert "--sac.core-cells 32 applies to a recurrent core" in err
    assert not (tmp_path / "X").exists()
    # with a core they apply; at their defaults (a run's config.yaml names them all) they pass
    registry.resolve("td3", agent_overrides={"core": "gru", "core_start": "stored",
                                             "core_burn_in": 5})
    registry.resolve("td3", agent_overrides={"core_cells": 64, "core_burn_in": 0})


@pytest.fixture(scope="module")
def agent():
    import offpolicy

    a = offpolicy.make("ddpg", env="Pendulum-v1", **TINY_OVERRIDES)
    yield a
    a.close()


@pytest.mark.parametrize("obs", ["abc", [[1.0, 2.0], [3.0]], {"x": 1.0}])
def test_act_refuses_what_is_no_observation_in_one_line(agent, obs):
    with pytest.raises(OffpolicyError, match=r"observation must be an array of numbers of "
                                             r"shape \(3,\), got "):
        agent.act(obs)


def test_save_onto_a_file_is_the_library_error(agent, tmp_path):
    (tmp_path / "f").write_text("mine")
    with pytest.raises(OffpolicyError, match="cannot save to .*f: it is a file"):
        agent.save(tmp_path / "f")
    assert (tmp_path / "f").read_text() == "mine"
