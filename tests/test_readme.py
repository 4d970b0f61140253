"""The command lines a new user copies, run as a new user runs them: the README's Quick start
block and the tour of the command line (docs/guides/tour.md), which holds every README line
in the README's order, run line by line in order, in one folder, as subprocesses, with small
budgets substituted for the long ones (issue #38, acceptance 2; issue #69: the README became a
product page and its long block moved to the tour). ``tensorboard --logdir runs`` is started
and asked for the scalars it serves."""

from __future__ import annotations

import contextlib
import glob
import json
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from _helpers import cli_env, one_ray_at_a_time

from offpolicy import registry

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# what replaces a command's own budget: one evaluation of one episode, one checkpoint; 400 steps
# is past every default batch size (V-RACER's 256) and a multiple of every line's step
# granularity (ACER's paper-atari: 16 env copies; 2 collectors: chunks of 50); updates start
# after 300 random steps, so each line runs its update 100 times, not 336; ACE's lines 20 times
# (its update is the costly one: 0.1-0.3 s here, 4.8 GFLOP for ACE(10,1) on HalfCheetah)
SMALL = {"--steps": "400", "--eval-every": "400", "--checkpoint-every": "400",
         "--eval-episodes": "1", "--log-every": "200", "--warmup-steps": "300"}
SMALL_ACE = {"--warmup-steps": "380"}
# the benchmark line (ACE, as every bench line here): its first update comes once replay holds
# a batch (64 steps); the warm-up ends just past it (one that ended before it would be refused,
# failing the test), and 10 env steps and 10 updates are timed
SMALL_BENCH = {"--bench-steps": "10", "--bench-warmup": "70", "--rounds": "1"}


def _bash_block(text: str, heading: str, where: str) -> list[list[str]]:
    """The argv of each line of the first ```bash block after ``heading`` in ``text``."""
    assert heading in text, f"{where}: no {heading!r}"
    block = re.search(r"```bash\n(.*?)```", text.split(heading, 1)[1], re.S)
    assert block, f"{where}: no ```bash block under {heading!r}"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines()
            if shlex.split(line, comments=True)]


def quick_start_commands() -> list[list[str]]:
    """The README's shell lines: the ```bash block under '## Quick start'."""
    return _bash_block((ROOT / "README.md").read_text(), "## Quick start", "README.md")


def readme_commands() -> list[list[str]]:
    """The tour's block (docs/guides/tour.md): what the test runs."""
    return _bash_block((ROOT / "docs" / "guides" / "tour.md").read_text(),
                       "# A tour of the command line", "docs/guides/tour.md")


def _set(argv: list[str], values: dict[str, str]) -> list[str]:
    """``argv`` with each flag of ``values`` set to its value (replaced or appended)."""
    out = list(argv)
    for flag, value in values.items():
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


def small(argv: list[str]) -> list[str]:
    """The same command with a small budget: what the test runs for a README line."""
    cmd, *rest = argv
    if cmd != "offpolicy" or not rest:
        return argv
    if rest[0] == "train":
        if "--resume" in rest:  # continues the run: twice its (small) length, its own flags
            return _set(argv, {"--steps": "800"}) + ["--quiet"]
        ace = rest[1] in registry.ALGORITHMS and registry.get(rest[1]).section == "ace"
        return _set(argv, SMALL | (SMALL_ACE if ace else {})) + ["--quiet"]
    if rest[0] == "eval":
        return _set(argv, {"--episodes": "1"})
    if rest[0] == "bench":
        return _set(argv, SMALL_BENCH)
    if rest[:2] in (["suite", "run"], ["suite", "report"]):  # one short run of the grid
        from offpolicy.suites import spec

        first = next(iter(spec.load(rest[2]).entries))
        argv = _set(argv, {"--steps": "400", "--seeds": "0", "--entries": first})
        return _set(argv, {"--jobs": "1"}) if rest[1] == "run" else argv
    return argv


def test_the_readme_lines_are_the_tours_first_ones_in_order():
    """Running the tour runs every README line, in the README's order, with nothing of the
    tour's before them that they could depend on but the lines the README shows too."""
    readme, tour = quick_start_commands(), readme_commands()
    assert len(readme) >= 3 and readme[0][:2] == ["offpolicy", "train"]
    at = [tour.index(argv) for argv in readme]  # ValueError: a README line not in the tour
    assert at == sorted(at), "the tour runs the README's lines in another order"
    assert tour[:2] == readme[:2], "the tour starts with the README's first run and its eval"


def test_readme_block_parses_into_known_commands():
    commands = readme_commands()
    assert len(commands) >= 15
    for argv in commands:
        assert argv[0] in ("offpolicy", "tensorboard"), argv
    trains = [a for a in commands if a[:2] == ["offpolicy", "train"]]
    assert any("--resume" in a for a in trains)
    assert any("--num-collectors" in a for a in trains)
    assert ["tensorboard", "--logdir", "runs"] in commands
    # no brackets or placeholders: a line must run as written
    for argv in commands:
        assert not any(a.startswith("[") or a.isupper() for a in argv), argv
    assert small(["offpolicy", "train", "ddpg", "--steps", "100000"])[:5] == \
        ["offpolicy", "train", "ddpg", "--steps", "400"]
    ace = small(["offpolicy", "train", "ace", "--warmup-steps", "5"])
    assert ace[ace.index("--warmup-steps") + 1] == "380" and ace.count("--warmup-steps") == 1


def _expand(arg: str, cwd: Path) -> list[str]:
    """What bash makes of ``arg`` in ``cwd``: a glob's sorted matches (itself when none)."""
    if not glob.has_magic(arg):
        return [arg]
    return sorted(str(Path(p)) for p in glob.glob(arg, root_dir=cwd)) or [arg]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tensorboard_serves(argv: list[str], cwd: Path) -> dict:
    """Start ``tensorboard`` as the README says (on a free port) and return the scalar tags
    it serves per run, once it has loaded them."""
    port = _free_port()
    proc = subprocess.Popen([str(BIN / argv[0]), *argv[1:], "--port", str(port),
                             "--host", "127.0.0.1"], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/data/plugin/scalars/tags", timeout=5) as r:
                    tags = json.load(r)
                if tags:
                    return tags
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError("tensorboard served no scalars within 120 s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_readme_command_line_block_runs_in_order(tmp_path, tmp_path_factory):
    """Each line of the block, in order, in one empty folder: exit code 0. The line that
    starts Ray (--num-collectors) takes the run's Ray turn for itself alone, so the other
    worker's Ray tests do not wait out the whole block."""
    env = cli_env()
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    for argv in readme_commands():
        if argv[0] == "tensorboard":
            tags = _tensorboard_serves(argv, tmp_path)
            run = next(k for k in tags if k.startswith("ddpg-HalfCheetah-v5-s0"))
            assert "eval/return_mean" in tags[run], tags[run]
            assert any(t.startswith("train/") for t in tags[run]), tags[run]
            continue
        cmd = [x for a in small(argv) for x in _expand(a, tmp_path)]
        ray = "--num-collectors" in cmd or "--ray-address" in cmd
        with one_ray_at_a_time(tmp_path_factory) if ray else contextlib.nullcontext():
            proc = subprocess.run([str(BIN / cmd[0]), *cmd[1:]], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (f"README line failed: {shlex.join(argv)}\nran: "
                                      f"{shlex.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
        assert "Traceback" not in proc.stderr, proc.stderr
    runs = tmp_path / "runs"
    # the README names these directories
    for name in ("td3-Pendulum-v1-s0", "ddpg-HalfCheetah-v5-s0", "ddpg-HalfCheetah-v5-fast-s0",
                 "ace-HalfCheetah-v5-num-actors10-s0",
                 "ddpg-HalfCheetah-v5-num-envs4-s0", "naf-Pendulum-v1-per-s0", "ace-d2"):
        assert (runs / name / "config.yaml").exists(), sorted(p.name for p in runs.iterdir())
    resumed = (runs / "ddpg-HalfCheetah-v5-s0" / "eval.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in resumed[1:]] == ["400", "800"]
    assert (tmp_path / "curves.png").exists() and (tmp_path / "kl.png").exists()


if __name__ == "__main__":  # pragma: no cover - print what the test runs
    for a in readme_commands():
        print(shlex.join(small(a)))
    pytest.main([__file__])
