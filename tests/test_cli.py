"""The ``offpolicy`` command as users run it: a subprocess, its exit code, stdout and stderr.

Every bad input must end with exit code 2, exactly one non-empty stderr line starting with
``offpolicy: error:``, no traceback, and no run directory left behind (a run that failed before
its first checkpoint removes the directory it created).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _helpers import TINY_FLAGS, assert_one_line_error, latest_step, read_csv, run_cli

from offpolicy import __version__
from offpolicy.registry import ALGORITHMS


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _expect_error(tmp_path, *args, contains=None, run_dir="R"):
    """Run a failing command in an empty cwd: one-line error, nothing created."""
    before = _listing(tmp_path)
    proc = run_cli(*args, cwd=tmp_path)
    line = assert_one_line_error(proc, contains)
    assert not (tmp_path / run_dir).exists(), f"run directory left behind: {line}"
    assert not (tmp_path / "runs").exists(), f"default run directory left behind: {line}"
    assert _listing(tmp_path) == before, f"files left behind: {line}"
    return line


@pytest.fixture(scope="module")
def tiny_run_dir(tmp_path_factory) -> Path:
    """A real, complete, tiny training run (checkpoints, eval.csv) shared by the eval tests."""
    root = tmp_path_factory.mktemp("cli-run")
    proc = run_cli("train", "ddpg", "--env", "Pendulum-v1", "--steps", "200", "--eval-every",
                   "100", "--checkpoint-every", "100", "--log-every", "100", "--run-dir", "run",
                   *TINY_FLAGS, cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root / "run"


# ---------------------------------------------------------------------- success paths
def test_version(tmp_path):
    proc = run_cli("--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"offpolicy {__version__}"


def test_list_mentions_every_algorithm(tmp_path):
    proc = run_cli("list", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    assert max(map(len, rows)) <= 100  # fits 100 columns: details wrap under the name
    # one block per algorithm: its name at the start of a line, its details indented below
    blocks: dict[str, str] = {}
    for r in rows:
        if r.strip() and not r[0].isspace():
            name = r.split()[0]
            blocks[name] = r
        elif r.strip():
            blocks[name] += " " + r.strip()
    assert set(blocks) == set(ALGORITHMS)
    for name, algo in ALGORITHMS.items():
        assert "actions: " + ", ".join(algo.action_kinds) in " ".join(blocks[name].split())


def test_train_help(tmp_path):
    proc = run_cli("train", "ddpg", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--steps", "--env", "--run-dir", "--resume", "--ddpg.actor-lr", "--ddpg.hidden",
                 "--batch-size"):
        assert flag in proc.stdout
    assert not _listing(tmp_path)


def test_train_help_shows_the_algorithms_resolved_defaults(tmp_path):
    """NAF overrides the loop's batch size (256, not TrainConfig's 64); --preset lists what
    each preset sets."""
    proc = run_cli("train", "naf", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # argparse wraps lines
    assert "minibatch size per update (default: 256)" in text
    assert "(default: 64)" not in text.split("--batch-size BATCH_SIZE minibatch")[1][:60]
    assert "paper (--buffer-size 262144" in text and "--naf.lr 0.0001" in text


def test_every_algorithms_train_parser_builds():
    """The train parser resolves the algorithm's defaults to show them: a default that fails
    validation would break every `offpolicy train ALGO` command, --help included."""
    from offpolicy import cli, registry

    for algo in registry.ALGORITHMS:
        help_text = cli._train_parser(algo).format_help()
        assert "--steps" in help_text and "(default:" in help_text, algo


def test_tiny_run_layout_and_eval(tiny_run_dir):
    """The successful run the eval tests build on, and `offpolicy eval` on it."""
    rows = read_csv(tiny_run_dir / "eval.csv")
    assert [int(r["step"]) for r in rows] == [100, 200]
    assert latest_step(tiny_run_dir) == 200
    proc = run_cli("eval", tiny_run_dir, "--episodes", "2", cwd=tiny_run_dir.parent)
    assert proc.returncode == 0, proc.stderr
    assert "step 200" in proc.stdout and "return" in proc.stdout
    # the latest policy evaluated on the same episodes gives the logged return
    logged = float(rows[-1]["return_mean"])
    printed = float(proc.stdout.split("return")[1].split()[0])
    assert printed == pytest.approx(logged, abs=0.01)


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args, contains", [
    (["train", "nosuch", "--env", "Pendulum-v1", "--run-dir", "R"], "unknown algorithm"),
    (["nosuchcommand"], "unknown command"),
    (["train", "ddpg", "--env", "NoSuchEnv-v9", "--run-dir", "R"], "unknown environment"),
    (["train", "ddpg", "--env", "no_such_module:Foo-v0", "--run-dir", "R"], "no_such_module"),
    (["train", "ddpg", "--bogus-flag", "3", "--run-dir", "R"], "unknown flag --bogus-flag"),
    (["train", "ddpg", "--ddpg.activation", "sigmoid", "--run-dir", "R"], "invalid choice"),
    (["train", "ddpg", "--ddpg.actor-lr", "-1", "--run-dir", "R"], "--ddpg.actor-lr"),
    (["train", "ddpg", "--batch-size", "0", "--run-dir", "R"], "--batch-size"),
    (["train", "ddpg", "--steps", "abc", "--run-dir", "R"], "--steps"),
    (["train", "ddpg", "--ddpg.tau", "nan", "--run-dir", "R"], "finite"),
    (["train", "ddpg", "--preset", "nope", "--run-dir", "R"], "--preset"),
    (["train", "ddpg", "--resume", "--run-dir", "R"], "cannot resume"),
], ids=["unknown-algo", "unknown-command", "unknown-env", "unknown-env-module", "unknown-flag",
        "invalid-choice", "negative-lr", "zero-batch", "non-int-steps", "nan-tau", "bad-preset",
        "resume-nothing"])
def test_bad_input_is_one_line_error(tmp_path, args, contains):
    _expect_error(tmp_path, *args, contains=contains)


# in this process (no interpreter start per case): inputs a CLI probe found to end in a
# traceback, a misleading message or a silent truncation
FILES = {"key.yaml": "1: 2\n", "half.yaml": "ddpg: {hidden: [1.5]}\n",
         "C/R/eval.csv": "step\n10\n", "B/R/eval.csv": "step,return_mean,return_se\n1e999,1,1\n"}


@pytest.mark.parametrize("args, contains", [
    (["train", "ddpg", "--seed", "99999999999999999999"], "--seed: must be <= 2147483647"),
    (["train", "ddpg", "--ddpg.hidden", "99999999999999999999"], "sizes must be between 1 and"),
    (["train", "ddpg", "--ddpg.hidden", "-5", "3"], "sizes must be between 1 and 1048576, got "
                                                    "[-5, 3]"),
    (["train", "ddpg", "--config", "key.yaml"], "config file key.yaml: keys must be names"),
    (["train", "ddpg", "--config", "half.yaml"], "invalid value [1.5] (expected a list of "
                                                 "integers)"),
    (["plot", "C", "--out", "curves.txt"], "cannot write '.txt' figures"),
    (["plot", "C", "--out", ""], "--out: expected a file name"),
    (["plot", "C", "--out", "new/sub/x.png"], "no return_mean or return_se"),
    (["table", "C"], "C/R/eval.csv, line 2: no return_mean or return_se"),
    (["table", "B"], "step '1e999' is not a step count"),
    (["plot", "C", "--metric", "nosuch"], "no run has a train.csv column 'nosuch'"),
], ids=["huge-seed", "huge-width", "negative-width-list", "non-name-key", "fractional-width",
        "figure-format", "empty-out", "corrupt-eval-plot", "corrupt-eval-table", "inf-step",
        "metric-nowhere"])
def test_more_bad_input_is_one_line_error(tmp_path, monkeypatch, capsys, args, contains):
    from offpolicy import cli

    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    before = _listing(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(args) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("offpolicy: error:"), err
    assert contains in err[0], err
    assert _listing(tmp_path) == before  # no run folder, no figure's folders left behind


def test_a_damaged_pointer_or_config_is_one_line(tiny_run_dir, tmp_path, capsys):
    import shutil

    from offpolicy import cli

    e, f = tmp_path / "E", tmp_path / "F"
    shutil.copytree(tiny_run_dir, e)
    (e / "checkpoints" / "latest").unlink()
    (e / "checkpoints" / "latest").mkdir()  # a pointer that is a directory
    assert cli.main(["eval", str(e), "--episodes", "1"]) == 2
    assert "corrupt checkpoint pointer" in capsys.readouterr().err
    shutil.copytree(tiny_run_dir, f)
    (f / "config.yaml").write_bytes(b"\xff\xfe not utf-8")
    assert cli.main(["table", str(f)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_eval_refuses_a_wrong_option_before_evaluating(tiny_run_dir, capsys):
    from offpolicy import cli

    for args, contains in ((["--per-actor"], "--per-actor needs an actor ensemble"),
                           (["--proposal"], "--proposal needs an AQL run"),
                           (["--out", "x.png"], "--out applies with --proposal only")):
        assert cli.main(["eval", str(tiny_run_dir), "--episodes", "1", *args]) == 2
        out, err = capsys.readouterr()
        assert out == "" and contains in err, (out, err)  # no evaluation printed first


def test_default_run_dir_not_created_on_error(tmp_path):
    # no --run-dir: the default runs/<algo>-<env>-s<seed> must not appear either
    _expect_error(tmp_path, "train", "ddpg", "--env", "NoSuchEnv-v9",
                  contains="unknown environment")


def test_unsupported_action_kind(tmp_path):
    line = _expect_error(tmp_path, "train", "ddpg", "--env", "toy_envs:DiscreteToy-v0",
                         "--run-dir", "R", *TINY_FLAGS, contains="does not support discrete")
    assert "continuous" in line  # says what ddpg supports


def test_existing_nonempty_run_dir_is_refused_and_kept(tmp_path):
    (tmp_path / "R").mkdir()
    (tmp_path / "R" / "keep.txt").write_text("mine")
    proc = run_cli("train", "ddpg", "--run-dir", "R", "--steps", "10", *TINY_FLAGS, cwd=tmp_path)
    assert_one_line_error(proc, "already exists")
    assert (tmp_path / "R" / "keep.txt").read_text() == "mine"
    assert _listing(tmp_path) == {"R", "R/keep.txt"}


# ---------------------------------------------------------------------- eval errors
def test_eval_missing_directory(tmp_path):
    _expect_error(tmp_path, "eval", "does-not-exist", contains="does-not-exist")


def test_eval_run_dir_without_checkpoints(tmp_path):
    (tmp_path / "R").mkdir()
    (tmp_path / "R" / "eval.csv").write_text("step,return_mean\n")
    before = _listing(tmp_path)
    proc = run_cli("eval", "R", cwd=tmp_path)
    assert_one_line_error(proc, "no latest checkpoint")
    assert _listing(tmp_path) == before


def test_eval_invalid_episodes(tmp_path, tiny_run_dir):
    _expect_error(tmp_path, "eval", tiny_run_dir, "--episodes", "0", contains="--episodes")


def _copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_eval_corrupt_checkpoint(tmp_path, tiny_run_dir):
    run = _copy_run(tiny_run_dir, tmp_path / "R")
    ckpt = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    blob = bytearray((ckpt / "state.msgpack").read_bytes())
    for pos in (len(blob) // 3, len(blob) // 2, len(blob) - 7):
        blob[pos] ^= 0xFF
    (ckpt / "state.msgpack").write_bytes(bytes(blob))
    before = _listing(tmp_path)
    proc = run_cli("eval", "R", cwd=tmp_path)
    assert_one_line_error(proc, "corrupt checkpoint")
    assert _listing(tmp_path) == before


def test_eval_checkpoint_pointer_to_missing_dir(tmp_path, tiny_run_dir):
    run = _copy_run(tiny_run_dir, tmp_path / "R")
    (run / "checkpoints" / "latest").write_text("step-000999999\n")
    proc = run_cli("eval", "R", cwd=tmp_path)
    assert_one_line_error(proc, "corrupt checkpoint")


def test_eval_corrupt_meta_json(tmp_path, tiny_run_dir):
    run = _copy_run(tiny_run_dir, tmp_path / "R")
    ckpt = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    (ckpt / "meta.json").write_text('{"step": 200, "conf')
    proc = run_cli("eval", "R", cwd=tmp_path)
    assert_one_line_error(proc, "corrupt checkpoint")


def test_resume_with_corrupt_replay(tmp_path, tiny_run_dir):
    run = _copy_run(tiny_run_dir, tmp_path / "R")
    ckpt = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    data = (ckpt / "replay.npz").read_bytes()
    (ckpt / "replay.npz").write_bytes(data[: len(data) // 2])
    proc = run_cli("train", "ddpg", "--run-dir", "R", "--resume", "--steps", "300",
                   *TINY_FLAGS, cwd=tmp_path)
    assert_one_line_error(proc, "corrupt")


def test_resume_with_changed_config_refused(tmp_path, tiny_run_dir):
    _copy_run(tiny_run_dir, tmp_path / "R")
    proc = run_cli("train", "ddpg", "--run-dir", "R", "--resume", "--steps", "300",
                   "--ddpg.hidden", "64", "64", "--quiet", cwd=tmp_path)
    assert_one_line_error(proc, "cannot change")
    assert latest_step(tmp_path / "R") == 200  # untouched


# ---------------------------------------------------------------------- non-finite data
@pytest.mark.parametrize("env, what", [("toy_envs:NaNObs-v0", "observation"),
                                       ("toy_envs:NaNReward-v0", "reward")])
def test_non_finite_env_data(tmp_path, env, what):
    line = _expect_error(tmp_path, "train", "ddpg", "--env", env, "--run-dir", "R",
                         "--steps", "100", *TINY_FLAGS, contains=f"non-finite {what}")
    assert "step" in line


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    import toy_envs

    proc = run_cli("train", "ddpg", "--env", "toy_envs:HugeReward-v0", "--run-dir", "R",
                   "--steps", "600", "--log-every", "100", "--checkpoint-every", "100",
                   "--eval-every", "100", *TINY_FLAGS, cwd=tmp_path)
    assert_one_line_error(proc, "non-finite loss")
    run = tmp_path / "R"
    assert run.is_dir()  # a checkpoint exists, so the run directory stays
    step = latest_step(run)
    # the huge rewards start after env step HUGE_AFTER; the flush at the next multiple of 100
    # catches the loss before any later checkpoint is written
    assert step is not None and step <= toy_envs.HUGE_AFTER
    assert step == toy_envs.HUGE_AFTER // 100 * 100
    ckpt = run / "checkpoints" / f"step-{step:09d}"
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["step"] == step
    assert not (run / "checkpoints" / f"step-{step + 100:09d}").exists()
    # the kept checkpoint holds finite parameters and loads
    import offpolicy

    agent = offpolicy.load(run)
    assert agent.step == step
    import jax

    leaves = jax.tree_util.tree_leaves(agent.run.state)
    assert leaves and all(np.all(np.isfinite(np.asarray(x))) for x in leaves)
    # eval.csv ends at or before the checkpoint (no row from the diverged run)
    rows = read_csv(run / "eval.csv")
    assert rows and all(int(r["step"]) <= step for r in rows)
