"""Issue 72's rough edges a new user meets in the first hour: a custom env from the working
directory on the console script, help scoped to the algorithm, flags an algorithm does not
take refused."""

import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import assert_one_line_error, cli_env, run_cli

CONSOLE = Path(sys.executable).parent / "offpolicy"
MY_ENVS = '''import gymnasium as gym
gym.register("Reach-v0", entry_point="gymnasium.envs.classic_control:PendulumEnv",
             max_episode_steps=20)
'''


@pytest.mark.skipif(not CONSOLE.exists(), reason="the console script is not installed")
def test_a_module_env_id_imports_from_the_working_directory_on_the_console_script(tmp_path):
    (tmp_path / "my_envs.py").write_text(MY_ENVS)
    cmd = [str(CONSOLE), "train", "ddpg", "--env", "my_envs:Reach-v0", "--steps", "40",
           "--eval-every", "40", "--eval-episodes", "1", "--quiet", "--ddpg.hidden", "8", "8",
           "--batch-size", "8", "--warmup-steps", "10"]
    proc = subprocess.run(cmd + ["--run-dir", str(tmp_path / "run")], cwd=tmp_path,
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "eval.csv").exists()
    # from elsewhere: one line that says where it looked and how to fix it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(cmd + ["--run-dir", str(tmp_path / "run2")], cwd=elsewhere,
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    line = assert_one_line_error(proc, "cannot import module 'my_envs'")
    assert str(elsewhere) in line and "PYTHONPATH" in line
    assert not (tmp_path / "run2").exists()


def test_train_help_is_scoped_to_the_algorithm(tmp_path):
    short = run_cli("train", "sac", "--help", cwd=tmp_path)
    assert short.returncode == 0, short.stderr
    text = short.stdout
    assert text.splitlines()[0].startswith("usage: offpolicy train sac [--env ENV_ID]")
    assert len(text.splitlines()[0]) < 200  # the synopsis, not every flag
    assert "--sac.tau" in text and "--steps" in text and "--help-all" in text
    assert "--collector-replay" not in text and "--refer-anneal" not in text
    assert len(text.splitlines()) < 200  # was 331 lines
    full = run_cli("train", "sac", "--help-all", cwd=tmp_path)
    assert full.returncode == 0 and "--collector-replay" in full.stdout
    assert "--refer-anneal" in full.stdout  # SAC takes ReF-ER
    td3 = run_cli("train", "td3", "--help-all", cwd=tmp_path).stdout
    assert "--refer-" not in td3 and "--replay-diagnostics" not in td3
    assert "{er,per}" in " ".join(td3.split())


@pytest.mark.parametrize("algo, flags, contains", [
    ("td3", ["--replay", "refer"], "invalid choice: 'refer' (choose from 'er', 'per')"),
    ("td3", ["--refer-c", "2"], "unknown flag --refer-c"),
    ("ace", ["--per-alpha", "0.5"], "unknown flag --per-alpha"),
    ("dqn", ["--replay-diagnostics"], "unknown flag --replay-diagnostics"),
])
def test_flags_an_algorithm_does_not_take_are_refused(tmp_path, algo, flags, contains):
    proc = run_cli("train", algo, *flags, "--run-dir", tmp_path / "r", cwd=tmp_path)
    line = assert_one_line_error(proc, contains)
    assert "--help-all" in line or "choose from" in line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args, name", [
    (["ace", "--ace.num-actors", "10"], "ace-Pendulum-v1-num-actors10-s0"),
    (["ddpg", "--replay", "refer"], "ddpg-Pendulum-v1-replay-refer-s0"),  # its derived memory: not
    (["ddpg", "--replay", "refer", "--buffer-size", "1000"],
     "ddpg-Pendulum-v1-replay-refer-buffer-size1000-s0"),
    (["ddpg", "--preset", "refer"], "ddpg-Pendulum-v1-refer-s0"),  # not --replay refer's name
    (["naf", "--replay", "refer"], "naf-Pendulum-v1-refer-s0"),  # NAF has no preset 'refer'
    (["sac", "--sac.hidden", "64", "64", "--batch-size", "32"],
     "sac-Pendulum-v1-batch-size32-hidden64x64-s0"),
    (["ddpg", "--preset", "smarties", "--replay", "er"], "ddpg-Pendulum-v1-smarties-er-s0"),
    (["ddpg", "--steps", "5000", "--warmup-steps", "10", "--quiet"], "ddpg-Pendulum-v1-s0"),
    (["ddpg", "--no-ddpg.shared-encoder", "--ddpg.tau", "0.001"], "ddpg-Pendulum-v1-s0"),
])
def test_default_run_names_carry_the_settings_that_differ(args, name):
    from offpolicy.train_args import resolve_train
    from offpolicy.training.rundir import default_run_dir

    assert default_run_dir(resolve_train(args[0], args[1:]), new=False).name == name


def test_a_long_list_of_settings_becomes_a_stable_hash():
    from offpolicy.train_args import resolve_train
    from offpolicy.training.rundir import default_run_dir

    flags = ["--ddpg.tau", "0.01", "--ddpg.actor-lr", "0.0003", "--ddpg.critic-lr", "0.003",
             "--ddpg.hidden", "64", "64"]
    a = default_run_dir(resolve_train("ddpg", flags), new=False).name
    b = default_run_dir(resolve_train("ddpg", flags[2:] + flags[:2]), new=False).name
    other = default_run_dir(resolve_train("ddpg", flags[:-1] + ["32"]), new=False).name
    assert a == b and a.startswith("ddpg-Pendulum-v1-cfg") and len(a) < 40 and a != other


def test_evaluation_lines_name_the_env(tmp_path):
    import contextlib
    import io

    from offpolicy.training.logger import RunLogger

    long_title = "ddpg dm_control/cartpole-swingup-v0 s3"
    for title in ("ddpg HalfCheetah-v5 s3", long_title):
        logger = RunLogger(None, [], 1000, 0, True, title)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            logger.log_eval({"step": 1_000_000, "return_mean": -12345.678, "return_se": 123.4,
                             "episodes": 20})
        line = out.getvalue().strip()
        assert line.startswith(title) and "step 1000000 eval -12345.68 +- 123.40" in line
        assert len(line) <= 80 or title == long_title


def test_a_finished_run_directory_keeps_no_lock_file(tmp_path):
    proc = run_cli("train", "ddpg", "--steps", "100", "--eval-every", "100", "--eval-episodes",
                   "1", "--ddpg.hidden", "8", "8", "--batch-size", "8", "--warmup-steps", "20",
                   "--run-dir", tmp_path / "r", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "r" / ".lock").exists()
    assert (tmp_path / "r" / "eval.csv").exists()


def test_a_python_session_that_ends_with_an_agent_alive_exits_quietly(tmp_path):
    """An agent made with a run directory and still referenced when the interpreter exits:
    its lock was released by ``__del__`` after the module's globals were gone, printing
    "Exception ignored in RunDirLock.__del__ ... AttributeError" to every notebook user."""
    code = ("import offpolicy\n"
            "agent = offpolicy.make('ddpg', env='Pendulum-v1', run_dir='r', seed=0, steps=100,\n"
            "    eval_every=100, eval_episodes=1, hidden=(8, 8), batch_size=8, warmup_steps=20,\n"
            "    quiet=True)\n"
            "agent.learn(100)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "r" / ".lock").exists()


def test_a_second_lock_of_a_directory_in_use_is_refused_and_the_file_goes_with_the_first(
        tmp_path):
    from offpolicy.errors import OffpolicyError
    from offpolicy.training.lock import LOCK_FILE, RunDirLock, in_use

    first = RunDirLock(tmp_path)
    assert (tmp_path / LOCK_FILE).exists() and in_use(tmp_path)
    code = ("import sys\nfrom offpolicy.training.lock import RunDirLock\n"
            f"RunDirLock({str(tmp_path)!r})\n")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=cli_env(), timeout=60)
    assert "in use by another offpolicy run" in other.stderr
    first.release()
    assert not (tmp_path / LOCK_FILE).exists() and not in_use(tmp_path)
    again = RunDirLock(tmp_path)  # the next run locks a new file
    assert in_use(tmp_path)
    again.release()
    with pytest.raises(OffpolicyError):
        RunDirLock(tmp_path / "missing")


def test_suite_report_never_replaces_a_fuller_report(tmp_path):
    import yaml

    flags = "--ddpg.hidden 8 8 --batch-size 8 --warmup-steps 20 --log-every 100"
    suite = tmp_path / "tiny.yaml"
    suite.write_text(yaml.safe_dump(
        {"name": "tiny", "envs": ["Pendulum-v1"], "seeds": [0], "steps": 200,
         "eval": {"every": 100, "episodes": 1}, "flags": flags,
         "entries": {"a": {"algo": "ddpg"}, "b": {"algo": "ddpg", "flags": "--ddpg.tau 0.01"}}}))
    out = tmp_path / "out"
    ran = run_cli("suite", "run", suite, "--out", out, cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr
    full = (out / "report.md").read_text()
    assert "| a | 1 |" in full and "| b | 1 |" in full
    # a selection with no finished run: refused, nothing written
    none = run_cli("suite", "report", suite, "--out", out, "--steps", "300", cwd=tmp_path)
    line = assert_one_line_error(none, "no finished run of tiny")
    assert "offpolicy suite run" in line and (out / "report.md").read_text() == full
    # a narrower one: refused unless --force
    narrow = run_cli("suite", "report", suite, "--out", out, "--entries", "a", cwd=tmp_path)
    assert_one_line_error(narrow, "covers 2 finished runs, this selection 1")
    assert (out / "report.md").read_text() == full
    forced = run_cli("suite", "report", suite, "--out", out, "--entries", "a", "--force",
                     cwd=tmp_path)
    assert forced.returncode == 0 and "| b |" not in (out / "report.md").read_text()
    # the same selection again: written, and it says what it found
    again = run_cli("suite", "report", suite, "--out", out, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "2 finished runs of 2 planned, 0 in progress" in again.stderr
