"""What a run tells the person watching it (issue #38, acceptance 3 and 4): on a terminal (a
pseudo-terminal here) and piped to a file, elapsed time, env steps/s, the training episode return
and a loss for every logging interval; eval lines within 80 columns; TensorBoard's own loader
finds the scalars in the run's event file."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path

import pytest
from _helpers import assert_one_line_error, cli_cmd, cli_env, read_csv, run_cli

from offpolicy.training.logger import _num

FLAGS = ["train", "ddpg", "--env", "Pendulum-v1", "--steps", "1200", "--log-every", "300",
         "--eval-every", "600", "--checkpoint-every", "600", "--eval-episodes", "2",
         "--ddpg.hidden", "32", "32",
         "--batch-size", "16", "--seed", "0"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _train_rows(run: Path) -> list[dict]:
    rows = read_csv(run / "train.csv")
    assert [int(r["step"]) for r in rows] == [300, 600, 900, 1200]
    return rows


def test_piped_run_prints_one_line_per_logging_interval(tmp_path):
    proc = run_cli(*FLAGS, "--run-dir", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if " left | " in ln]
    rows = _train_rows(tmp_path / "run")
    assert len(lines) == len(rows), proc.stdout
    for line, row in zip(lines, rows):
        assert f" {row['step']}/1200 " in line
        assert re.search(r"\d+:\d\d:\d\d elapsed \d+:\d\d:\d\d left", line), line
        assert f"{_num(float(row['steps_per_s']))} steps/s" in line, line
        assert f"critic_loss {_num(float(row['critic_loss']))}" in line, line
        assert f"actor_loss {_num(float(row['actor_loss']))}" in line, line
    # Pendulum's episodes last 200 steps: every interval after the first has a return
    for line, row in list(zip(lines, rows))[1:]:
        assert f"episode {_num(float(row['episode_return']))}" in line, line
    assert "episode - " not in lines[-1] and "eval " in lines[-1]  # eval shown once there is one
    assert "eval" not in lines[0] and "nan" not in proc.stdout  # blank before the first
    evals = [ln for ln in proc.stdout.splitlines() if " eval " in ln and "+-" in ln]
    assert len(evals) == 2 and all(len(ln) <= 80 for ln in evals), evals
    assert "(s.e. over 2 episodes)" in evals[0]


def _run_in_pty(argv: list[str], cwd: Path, columns: int = 80) -> str:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal ``columns`` wide; its output."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = cli_env({"COLUMNS": str(columns), "TERM": "xterm-256color"})
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []

    def read():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    rc = proc.wait(timeout=300)
    reader.join(timeout=30)
    os.close(master)
    out = b"".join(chunks).decode("utf-8", "replace")
    assert rc == 0, out
    return out


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_terminal_run_shows_every_interval_within_80_columns(tmp_path):
    out = _run_in_pty(cli_cmd(*FLAGS, "--run-dir", "run"), tmp_path)
    screen = ANSI.sub("", out).replace("\r\n", "\n")
    lines = [ln for part in screen.split("\n") for ln in part.split("\r")]
    assert "━" in screen, "no progress bar on a terminal"
    assert all(len(ln) <= 80 for ln in lines), [ln for ln in lines if len(ln) > 80]
    assert re.search(r"elapsed \d+:\d\d:\d\d", screen) and re.search(r"left \d+:\d\d:\d\d", screen)
    for row in _train_rows(tmp_path / "run"):
        assert f"{_num(float(row['steps_per_s']))} steps/s" in screen, row
        assert f"critic_loss {_num(float(row['critic_loss']))}" in screen, row
        if int(row["step"]) > 300:
            assert f"episode {_num(float(row['episode_return']))}" in screen, row
    assert "nan" not in screen
    assert "step 1200 eval" in screen and "final return_mean" in screen


def test_tensorboard_loader_reads_eval_and_training_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    proc = run_cli(*FLAGS, "--run-dir", "run", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    acc = EventAccumulator(str(tmp_path / "run" / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("eval/return_mean", "train/critic_loss", "train/actor_loss",
                "train/steps_per_s", "train/updates_per_s", "train/episode_return"):
        assert tag in tags, sorted(tags)
    evals = [(e.step, e.value) for e in acc.Scalars("eval/return_mean")]
    rows = read_csv(tmp_path / "run" / "eval.csv")
    assert [s for s, _ in evals] == [int(r["step"]) for r in rows] == [600, 1200]
    assert [v for _, v in evals] == pytest.approx([float(r["return_mean"]) for r in rows],
                                                  rel=1e-6)
    assert [e.step for e in acc.Scalars("train/critic_loss")] == [300, 600, 900, 1200]


def test_flag_prefixes_are_not_taken_for_flags(tmp_path):
    """``--step 1000`` is an unknown flag, not ``--steps`` (argparse's prefix matching off)."""
    proc = run_cli("train", "ddpg", "--env", "Pendulum-v1", "--step", "1000", cwd=tmp_path)
    line = assert_one_line_error(proc, "--step")
    assert not (tmp_path / "runs").exists(), line
    proc = run_cli("eval", "nowhere", "--episode", "3", cwd=tmp_path)
    assert_one_line_error(proc, "--episode")
