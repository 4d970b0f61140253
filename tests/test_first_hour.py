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
