"""Experiment suites (``offpolicy suite``): the schema's one-line errors, the smoke suite over
every algorithm, resumption after a kill, and Ray dispatch surviving a lost node."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from offpolicy import cli, registry
from offpolicy.errors import OffpolicyError
from offpolicy.suites import runner, spec

TINY = "--ddpg.hidden 16 16 --batch-size 16 --warmup-steps 100 --log-every 100"
TD3_TINY = "--td3.hidden 16 16 --batch-size 16 --warmup-steps 100"


def _suite_file(tmp_path: Path, name: str = "tiny", **over) -> Path:
    d = {"name": name, "description": "a test grid", "envs": ["Pendulum-v1"], "seeds": [0],
         "steps": 600, "eval": {"every": 300, "episodes": 2}, "flags": TINY,
         "entries": {"ddpg": {}, "ddpg-refer": {"algo": "ddpg", "flags": "--replay refer"}}}
    d.update(over)
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def _cmd(*args) -> list[str]:
    return [sys.executable, "-m", "offpolicy", "suite", *map(str, args)]


# ---------------------------------------------------------------------- the schema
BAD = [
    (dict(stepz=10), "top level: unknown key 'stepz'; did you mean steps"),
    (dict(steps="ten"), "steps: expected an integer >= 1, got 'ten'"),
    (dict(seeds=3), "seeds: expected a non-empty list of integers"),
    (dict(eval={"every": 100, "episods": 2}), "eval: unknown key 'episods'"),
    (dict(entries={"x": {"algo": "ddgp"}}), "entries.x: unknown algorithm 'ddgp'"),
    (dict(entries={"x": {"algo": "ddpg", "flags": "--ddpg.hiden 3"}}),
     "entries.x: offpolicy train ddpg: unknown flag --ddpg.hiden"),
    (dict(entries={"x": {"algo": "ddpg", "flags": "--replay nope"}}),
     "entries.x: offpolicy train ddpg: argument --replay: invalid choice: 'nope'"),
    (dict(entries={"x": {"algo": "ddpg", "flags": "--steps 5"}}),
     "entries.x.flags: --steps is set by the suite for each run"),
    (dict(entries={"x": {"algo": "ddpg", "flgs": "--steps 5"}}), "entries.x: unknown key 'flgs'"),
    (dict(envs={"Pendulum-v1": {"entries": ["ddpg", "dpg"]}}),
     "envs.Pendulum-v1.entries: unknown entry 'dpg'"),
    (dict(compare=[["ddpg", "sac"]]), "compare: unknown entry 'sac'"),
    (dict(compare=[["ddpg", "ddpg-refer", "pared"]]),
     "compare: expected [entry, against] or [entry, against, paired], got ['ddpg', 'ddpg-refer',"
     " 'pared']"),
    (dict(flags="--batch-size 16", entries={"x": {"algo": "exact-q"}}),
     "entries.x on Pendulum-v1: exact-q does not support continuous actions"),
    (dict(seeds=[0, 1, 1]), "seeds: 1 appears twice"),
    (dict(envs={"Pendulum-v1": {"entries": ["ddpg", "ddpg"]}}),
     "envs.Pendulum-v1.entries: 'ddpg' appears twice"),
    (dict(envs=["Pendulum-v9"]), "envs.Pendulum-v9: unknown environment id 'Pendulum-v9'"),
    (dict(entries={"x": {"algo": "ddpg", "flags": '"unterminated'}}),
     "entries.x.flags: cannot split '\"unterminated' as a shell would"),
    (dict(envs={"Pendulum-v1": {"entries": [["ddpg"]]}}),
     "envs.Pendulum-v1.entries: expected a list of entry names"),
    (dict(compare=[[["ddpg"], "ddpg-refer"]]), "compare: expected [entry, against]"),
    (dict(seeds=[2**40]), "seeds: expected an integer between 0 and 2147483647"),
    (dict(entries={"x": {"algo": "ddpg", "flags": "--num-envs 4"}}, steps=602),
     "entries.x on Pendulum-v1: --steps 602 is not a multiple of --num-envs 4"),
    (dict(envs=["ALE/Pong-v5"], flags="", entries={"x": {"algo": "dqn",
                                                         "flags": "--observe-action-reward"}}),
     "entries.x on ALE/Pong-v5: --observe-action-reward needs a flat observation vector"),
    # issue 73, item 4: flags that conflict, found by the checks `offpolicy train` makes
    # before its run starts (they failed every run of the entry)
    (dict(flags=TD3_TINY, entries={"x": {"algo": "td3",
                                         "flags": "--td3.core lstm --td3.core-burn-in 4"}}),
     "entries.x on Pendulum-v1: --td3.core-burn-in applies to --td3.core-start stored"),
    (dict(flags="--batch-size 16 --warmup-steps 100",
          entries={"x": {"algo": "vracer", "flags": "--warmup-actions uniform"}}),
     "entries.x on Pendulum-v1: --warmup-actions uniform: vracer here records the behaviour"),
    (dict(flags="--batch-size 16 --warmup-steps 100",
          entries={"x": {"algo": "ddpg", "flags": "--replay refer --warmup-actions uniform"}}),
     "entries.x on Pendulum-v1: --warmup-actions uniform: ddpg here records the behaviour"),
    (dict(flags="--batch-size 16", envs=["CartPole-v1"],
          entries={"x": {"algo": "aql", "flags": "--collector-replay"}}),
     "entries.x: --collector-replay applies to remote collectors, and this run has none"),
    (dict(flags="--batch-size 16", entries={"x": {"algo": "ddpg", "flags": "--pipeline "
                                                  "--num-collectors 2"}}),
     "entries.x on Pendulum-v1: --pipeline overlaps the env step"),
    (dict(entries={"sb3-td3": {"peer": "sb3", "algo": "td3"}}),
     "entries: no entries but peer entries (benchmarks/learning.py runs those)"),
    (dict(preregistration="../plan.md"), "preregistration: expected a name of"),
    (dict(preregistration="plan.md"), "preregistration: cannot read plan.md"),
    (dict(decision={"window": 300}), "decision: needs 'window' and 'claims'"),
    (dict(decision={"window": 300, "claims": [{"label": "C1", "a": "ddpg-refer", "b": "sac"}]}),
     "decision.claims[0].b: unknown entry 'sac'"),
    (dict(decision={"window": 300, "claims": [{"label": "C1", "a": "ddpg-refer", "b": "ddpg",
                                               "envs": ["Hopper-v5"]}]}),
     "decision.claims[0].envs: unknown env 'Hopper-v5'"),
    (dict(decision={"window": 300, "claims": [{"label": "C1", "a": "ddpg-refer", "b": "ddpg",
                                               "primary": "no"}]}),
     "decision.claims[0].primary: expected true or false, got 'no'"),
    (dict(decision={"window": 300, "statistic": "max",
                    "claims": [{"label": "C1", "a": "ddpg-refer", "b": "ddpg"}]}),
     "decision.statistic: expected one of window, best, got 'max'"),
    (dict(decision={"window": 300, "claims": [{"label": "C1", "a": "ddpg-refer", "b": "ddpg",
                                               "rule": "noninferior"}]}),
     "decision.claims[0].rule: expected one of superior, non-inferior, got 'noninferior'"),
    (dict(decision={"window": 300, "claims": [{"label": "C1", "a": "ddpg-refer", "b": "ddpg"}],
                    "beside": {"suite": "old"}}),
     "decision.beside: needs 'suite' and 'entries'"),
    (dict(decision={"window": 300, "claims": [{"label": "C1", "a": "ddpg-refer", "b": "ddpg"}],
                    "beside": {"suite": "old", "entries": {"ddpg-refr": "ddpg"}}}),
     "decision.beside.entries: unknown entry 'ddpg-refr'; did you mean ddpg-refer"),
    (dict(decision={"window": 300, "claims": [{"label": "C1", "a": "ddpg-refer", "b": "ddpg"}],
                    "beside": {"suite": "../old", "entries": {"ddpg": "ddpg"}}}),
     "decision.beside.suite: expected a name of"),
]


@pytest.mark.parametrize("over, message", BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_a_bad_suite_is_one_line_and_exit_2_before_any_run(tmp_path, capsys, over, message):
    path = _suite_file(tmp_path, **over)
    out = tmp_path / "out"
    assert cli.main(["suite", "run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("offpolicy: error: suite "), err
    assert message in err, err
    assert not out.exists()  # no run started, no folder made


def test_a_suite_name_cannot_lead_out_of_the_suites_folder(tmp_path):
    path = _suite_file(tmp_path)
    path.write_text(path.read_text().replace("name: tiny", "name: ../../escape"))
    with pytest.raises(OffpolicyError, match=r"name: expected a name of 1-100 letters"):
        spec.load(path)


# issue 73, item 1: names from a shared suite file become folders and files under --out
ESCAPES = [
    (dict(entries={"../../../escaped-entry": {"algo": "ddpg"}}), "entries.../../../escaped-entry"),
    (dict(entries={"a/b": {"algo": "ddpg"}}), "entries.a/b"),
    (dict(entries={"..": {"algo": "ddpg"}}), "entries..."),
    (dict(entries={"/tmp/abs": {"algo": "ddpg"}}), "entries./tmp/abs"),
    (dict(envs=["../../Pendulum-v1"]), "envs.../../Pendulum-v1"),
    (dict(envs=["/Pendulum-v1"]), "envs./Pendulum-v1"),
    (dict(envs=["ALE/../../x"]), "envs.ALE/../../x"),
    (dict(metrics=["../../x"]), "metrics"),
]


@pytest.mark.parametrize("over, where", ESCAPES, ids=[w for _, w in ESCAPES])
def test_a_name_that_would_leave_out_is_refused_and_nothing_written(tmp_path, capsys, over,
                                                                      where):
    """Acceptance: a traversal entry name, a name with a slash, an env id or a metric that
    would put a file outside --out: exit 2, one line, before any run; nothing written."""
    path = _suite_file(tmp_path, **over)
    root = tmp_path / "R"
    for extra in ([], ["--dry-run"]):
        assert cli.main(["suite", "run", str(path), "--out", str(root / "sr-trav" / "out"),
                         *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert err.startswith(f"offpolicy: error: suite {path}: {where}: expected "), err
        assert "becomes a folder" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing written


def test_env_ids_with_namespaces_keep_their_folders(tmp_path):
    s = spec.load(_suite_file(tmp_path, envs=["dm_control/cartpole-swingup-v0",
                                              "offpolicy/Platform-v0",
                                              "toy_envs:ToyTerminate-v0"]))
    runs = runner.plan(s, runner.default_layout(tmp_path / "out"))
    assert {r.run_dir.relative_to(tmp_path / "out").parts[0] for r in runs} == {
        "dm_control_cartpole-swingup-v0", "offpolicy_Platform-v0", "toy_envs:ToyTerminate-v0"}


def test_every_planned_run_directory_lies_under_out(tmp_path):
    """A Suite built without spec.parse (benchmarks/learning.py builds its own) still cannot
    plan a run directory outside --out."""
    s = spec.load(_suite_file(tmp_path))
    bad = spec.Entry("../../escaped", "ddpg")
    s = replace(s, entries={**s.entries, bad.name: bad},
                envs=tuple(replace(e, entries=(*e.entries, bad.name)) for e in s.envs))
    with pytest.raises(OffpolicyError, match=r"would lie outside --out"):
        runner.plan(s, runner.default_layout(tmp_path / "out"))


def test_out_that_is_not_a_folder_is_one_line(tmp_path, capsys):
    """Acceptance: ``--out`` naming a file (or a folder under one) is refused in one line."""
    path = _suite_file(tmp_path)
    (tmp_path / "afile").write_text("mine")
    for out, message in ((tmp_path / "afile", "is a file, not a folder"),
                         (tmp_path / "afile" / "sub", f"cannot be made: {tmp_path / 'afile'} "
                                                      "is a file")):
        assert cli.main(["suite", "run", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"offpolicy: error: --out {out} "), err
        assert message in err, err
    assert (tmp_path / "afile").read_text() == "mine"


def test_an_unreachable_ray_address_is_one_line_before_any_run(tmp_path, capsys):
    path, out = _suite_file(tmp_path), tmp_path / "out"
    for args, message in ((["--ray-address", "127.0.0.1:1"],
                           "cannot reach the Ray cluster at 127.0.0.1:1: ConnectionRefusedError"),
                          (["--ray-address", "auto", "--ray-connect-timeout", "0"],
                           "--ray-connect-timeout must be > 0, got 0.0")):
        assert cli.main(["suite", "run", str(path), "--out", str(out), *args]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_paired_pairs_parse():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        s = spec.load(_suite_file(Path(d), compare=[["ddpg-refer", "ddpg", "paired"],
                                                    ["ddpg", "ddpg-refer"]]))
    assert s.compare == (("ddpg-refer", "ddpg"), ("ddpg", "ddpg-refer"))
    assert s.paired == (("ddpg-refer", "ddpg"),)


def test_a_pre_registered_decision_and_peer_entries_parse(tmp_path, capsys):
    """A suite's pre-registration (a file beside it) and decision; peer entries (run by
    benchmarks/learning.py in the peers' bench venv) are left out of ``offpolicy suite``, with
    the comparisons and claims that name them, and said so."""
    (tmp_path / "plan.md").write_text("## Pre-registration\n\nC1: ReF-ER beats ER.\n")
    path = _suite_file(
        tmp_path, preregistration="plan.md",
        entries={"ddpg": {}, "sb3-ddpg": {"peer": "sb3", "algo": "ddpg"},
                 "ddpg-refer": {"algo": "ddpg", "flags": "--replay refer"}},
        compare=[["ddpg-refer", "sb3-ddpg"], ["ddpg-refer", "ddpg", "paired"]],
        decision={"window": 300, "claims": [
            {"label": "C1", "a": "ddpg-refer", "b": "ddpg", "seeds": [0]},
            {"label": "peer", "a": "ddpg", "b": "sb3-ddpg", "primary": False}]})
    s = spec.load(path)
    assert list(s.entries) == ["ddpg", "ddpg-refer"] and s.peers == ("sb3-ddpg",)
    assert s.envs[0].entries == ("ddpg", "ddpg-refer")
    assert s.compare == s.paired == (("ddpg-refer", "ddpg"),)
    assert s.preregistration == "## Pre-registration\n\nC1: ReF-ER beats ER."
    assert s.decision == spec.Decision((spec.Claim("C1", "ddpg-refer", "ddpg", ("Pendulum-v1",),
                                                   True, (0,)),), 300)
    with pytest.raises(OffpolicyError, match="'sb3-ddpg' runs a peer library's script"):
        s.select(entries=["sb3-ddpg"])
    full = spec.load(path, allow_peers=True)
    assert sorted(full.entries) == ["ddpg", "ddpg-refer", "sb3-ddpg"] and not full.peers
    assert full.entries["sb3-ddpg"].peer == "sb3" and len(full.decision.claims) == 2
    assert full.compare[0] == ("ddpg-refer", "sb3-ddpg")
    assert cli.main(["suite", "run", str(path), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    assert "leaves out its peer entries sb3-ddpg (benchmarks/learning.py runs them" in \
        capsys.readouterr().err


def test_a_decisions_beside_names_twins_in_another_grid_and_drops_a_peer_left_out(tmp_path):
    path = _suite_file(
        tmp_path, entries={"ddpg": {}, "sb3-ddpg": {"peer": "sb3", "algo": "ddpg"}},
        decision={"window": 300, "claims": [{"label": "C1", "a": "ddpg", "b": "sb3-ddpg"}],
                  "beside": {"suite": "old-grid",
                             "entries": {"ddpg": "ddpg-old", "sb3-ddpg": "sb3-old"}}})
    assert spec.load(path).decision.beside == spec.Beside("old-grid", (("ddpg", "ddpg-old"),))
    assert spec.load(path, allow_peers=True).decision.beside.pairs == (
        ("ddpg", "ddpg-old"), ("sb3-ddpg", "sb3-old"))


def test_a_decision_takes_a_statistic_and_a_rule_per_claim(tmp_path):
    """``statistic: best`` (the ACE paper's best evaluation) and a claim's ``rule:
    non-inferior``; without them S is the window mean and a claim says a > b."""
    d = spec.load(_suite_file(tmp_path, decision={
        "window": 300, "statistic": "best", "margin": 0.2, "claims": [
            {"label": "C1", "a": "ddpg-refer", "b": "ddpg", "rule": "non-inferior"},
            {"label": "C2", "a": "ddpg-refer", "b": "ddpg", "rule": "superior"}]})).decision
    assert d.statistic == "best" and d.margin == 0.2 and d.beside is None
    assert [c.rule for c in d.claims] == ["non-inferior", "superior"]
    plain = spec.load(_suite_file(tmp_path, name="plain", decision={
        "window": 300, "claims": [{"label": "C1", "a": "ddpg-refer", "b": "ddpg"}]})).decision
    assert plain.statistic == "window" and plain.claims[0].rule == "superior"


def test_command_line_selections_are_checked(tmp_path, capsys):
    path = _suite_file(tmp_path)
    for args, message in ((["--entries", "ddpg-refr"], "no entry 'ddpg-refr'; did you mean"),
                          (["--envs", "Hopper-v5"], "no env 'Hopper-v5'"),
                          (["--paper"], "names no paper budget"),
                          (["--seeds", "1", "1"], "--seeds names a seed twice"),
                          (["--seeds", "-1"], "--seeds must be between 0 and 2147483647"),
                          (["--retries", "-1"], "--retries must be 0 or more"),
                          (["--jobs", "0"], "--jobs must be at least 1")):
        rc = cli.main(["suite", "run", str(path), "--out", str(tmp_path / "o"), *args])
        err = capsys.readouterr().err
        if message:
            assert rc == 2 and message in err, err
    # a report from a misspelt folder is refused, not written there as "no evaluation yet"
    assert cli.main(["suite", "report", str(path), "--out", str(tmp_path / "nosuch")]) == 2
    assert "--out" in capsys.readouterr().err and not (tmp_path / "nosuch").exists()
    smoke = spec.load("smoke")
    with pytest.raises(OffpolicyError, match="the selection leaves no run"):
        smoke.select(envs=["Pendulum-v1"], entries=["exact-q"])  # exact-q runs on CartPole
    assert cli.main(["suite", "run", "smok"]) == 2
    assert "unknown suite 'smok'; did you mean smoke" in capsys.readouterr().err


def test_every_shipped_suite_loads_and_its_entries_parse():
    """Every entry of every shipped suite is a valid ``offpolicy train`` command (the envs are
    built by the suites' own runs: MuJoCo, DM Control and Atari are checked there)."""
    shipped = spec.available()
    assert {"smoke", "ace-table1", "refer-mujoco", "acer-mujoco", "acer-atari", "aql-control",
            "ddpg-parity"} <= set(shipped)
    for path in shipped.values():
        s = spec.load(path)
        spec.check(s, envs=False)
        if s.name != "smoke":
            assert s.paper and s.cost and s.reference, s.name
            paper = s.select(paper=True)
            assert paper.env_steps() >= s.env_steps()


def test_selection_and_the_paper_budget(tmp_path):
    s = spec.load(_suite_file(tmp_path, paper={"steps": 5000, "seeds": [0, 1, 2, 3, 4]}))
    p = s.select(paper=True)
    assert p.seeds == (0, 1, 2, 3, 4) and p.envs[0].steps == 5000
    q = s.select(paper=True, seeds=[7], steps=200, entries=["ddpg"])
    assert q.seeds == (7,) and q.envs[0].steps == 200 and q.envs[0].eval_every == 200
    assert q.envs[0].entries == ("ddpg",) and q.num_runs() == 1
    runs = runner.plan(s.select(seeds=[0, 1]), runner.default_layout(tmp_path))
    assert [(r.entry.name, r.seed) for r in runs] == [("ddpg", 0), ("ddpg-refer", 0),
                                                      ("ddpg", 1), ("ddpg-refer", 1)]
    assert runs[1].run_dir == tmp_path / "Pendulum-v1" / "ddpg-refer" / "s0"
    cmd = runner.train_command(runs[1])
    # the suite's flags first, the entry's after them (they win)
    assert cmd.index("--batch-size") < cmd.index("--replay")


def test_suite_list_names_every_shipped_suite_with_its_size(capsys):
    shipped = sorted(p.stem for p in Path(spec.__file__).parent.glob("*.yaml"))
    assert len(shipped) >= 10 and sorted(spec.available()) == shipped
    assert cli.main(["suite", "list"]) == 0
    out = capsys.readouterr().out
    for name in shipped:
        block = re.search(rf"^{re.escape(name)} .*?(?=^\S|\Z)", out, re.M | re.S)
        assert block, name
        text = " ".join(block.group(0).split())  # the wrapped lines as one
        s = spec.load(spec.available()[name])
        n = len(s.seeds)
        assert f"{s.num_runs()} runs" in text, (name, text)
        assert f"({n} seed{'' if n == 1 else 's'}) on {', '.join(e.env for e in s.envs)}" \
            in text, (name, text)
    assert "(1 seeds)" not in out and "-\n" not in out  # no word broken at a hyphen


# ---------------------------------------------------------------------- smoke: every algorithm
def test_smoke_suite_runs_every_algorithm_and_a_rerun_does_no_work(tmp_path):
    """Acceptance 1 and 2 (first half): ``offpolicy suite run smoke`` exercises every
    algorithm of ``offpolicy list``; run again, it starts nothing."""
    smoke = spec.load("smoke")
    assert {e.algo for e in smoke.entries.values()} == set(registry.ALGORITHMS)
    out = tmp_path / "smoke"
    r = subprocess.run(_cmd("run", "smoke", "--jobs", "2", "--out", out), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = runner.plan(smoke, runner.default_layout(out))
    n = sum(len(e.entries) for e in smoke.envs) * len(smoke.seeds)
    assert len(runs) == n and all(runner.finished(x.run_dir, x.steps) for x in runs)
    report = (out / "report.md").read_text()
    assert "## Pendulum-v1" in report and "## CartPole-v1" in report
    assert "| tm-ace | 1 | 400 |" in report and "| exact-q | 1 | 400 |" in report
    assert (out / "report.png").stat().st_size > 10_000
    logs = {x.log_path: x.log_path.read_text() for x in runs}
    again = subprocess.run(_cmd("run", "smoke", "--jobs", "2", "--out", out),
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0
    assert f"{n} runs, {n} finished, 0 to run or resume" in again.stderr
    assert {x.log_path: x.log_path.read_text() for x in runs} == logs  # nothing ran


# ---------------------------------------------------------------------- resumption
def test_a_killed_suite_finishes_the_rest_and_repeats_no_finished_run(tmp_path):
    path = _suite_file(tmp_path, steps=1200, flags=TINY + " --checkpoint-every 200",
                       eval={"every": 600, "episodes": 2})
    out = tmp_path / "out"
    s = spec.load(path)
    runs = runner.plan(s, runner.default_layout(out))
    first, second = runs
    proc = subprocess.Popen(_cmd("run", path, "--out", out), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    # stop it once the first run finished and the second has a checkpoint
    while not ((second.run_dir / "checkpoints" / "latest").exists()
               and runner.finished(first.run_dir, first.steps)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "run the same command again to finish the 1 runs left" in err
    assert not runner.finished(second.run_dir, second.steps)
    again = subprocess.run(_cmd("run", path, "--out", out), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert "2 runs, 1 finished, 1 to run or resume" in again.stderr
    assert all(runner.finished(r.run_dir, r.steps) for r in runs)
    commands = runner.start_lines(second.log_path)  # one "[date time] command" per start
    assert len(commands) == 2 and " -m offpolicy " in commands[0] \
        and commands[1].endswith("--resume")
    assert len(runner.start_lines(first.log_path)) == 1  # the finished run never ran again
    from offpolicy.suites.host import host, read_starts

    starts = read_starts(second.run_dir)  # beside the run: s0.hosts.csv
    assert [r["host"] for r in starts] == [host()] * 2 and starts[0]["step"] == "0" \
        and int(starts[1]["step"]) >= 200, starts
    assert len(read_starts(first.run_dir)) == 1


def test_start_lines_are_the_runners_stamps_alone(tmp_path):
    """A run's log mixes the runner's "[date time] command" lines with the run's own output,
    a peer's "[20000] return ..." among it: only the former are starts."""
    log = tmp_path / "s0.log"
    first = runner.stamped("python -m offpolicy train td3 --seed 0")
    again = runner.stamped("attempt on host-a node 1f (pid 12): python -m offpolicy train td3")
    log.write_text("\n".join([first, "[20000] return 301.2 +- 4.0  (95s)",
                              "td3 Hopper-v5 s0 step 30000 eval 12.0", again, ""]))
    assert runner.start_lines(log) == [first, again]
    assert re.match(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] python ", first), first
    assert runner.start_lines(tmp_path / "missing.log") == []


def test_claims_keep_two_drivers_apart(tmp_path):
    d = tmp_path / "Pendulum-v1" / "ddpg" / "s0"
    assert runner.claim(d) and not runner.claim(d)  # our own live claim holds
    runner.release(d)
    lock = d.parent / ".s0.lock"
    lock.write_text(f"{os.uname().nodename} 999999999")  # a claim whose driver is gone
    assert runner.claim(d)
    runner.release(d)
    lock.write_text("another-host 1")  # another machine's driver: trusted
    assert not runner.claim(d)


def test_a_run_still_held_by_a_live_process_is_left_alone(tmp_path):
    """A driver stopped hard (SIGKILL) leaves its train process running with the run
    directory's lock: the next driver takes the stale claim but neither deletes nor
    resumes the directory under it, and a report that fails is a warning, not the end."""
    path = _suite_file(tmp_path)
    runs = runner.plan(spec.load(path).select(entries=["ddpg"]),
                       runner.default_layout(tmp_path / "out"))
    d = runs[0].run_dir
    d.mkdir(parents=True)
    (d / "marker").write_text("mine")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from offpolicy.training.lock import RunDirLock\n"
                               f"lock = RunDirLock({str(d)!r}); print('held', flush=True)\n"
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (d.parent / ".s0.lock").write_text(f"{os.uname().nodename} 999999999")  # stale claim
        assert runner.run_dir_in_use(d)
        calls = []

        def broken_report(run):
            calls.append(run)
            raise RuntimeError("cannot draw")

        out = runner.run_local(runs, progress=False, after_each=broken_report)
        assert out.busy == runs and not out.failed and (d / "marker").read_text() == "mine"
    finally:
        holder.kill()
        holder.wait()
    assert not runner.run_dir_in_use(d)


# ---------------------------------------------------------------------- Ray
def test_a_sigterm_while_the_suite_joins_ray_stops_cleanly(tmp_path, monkeypatch):
    """Issue 74's start-up protection for `suite run --ray-address`: ray.init installs a
    SIGTERM handler of its own (sys.exit(15)); a SIGTERM while it joins the cluster stops the
    driver as at any other moment: no run claimed or submitted, the outcome says which signal,
    Ray shut down, the driver's own handlers back afterwards."""
    ray = pytest.importorskip("ray")
    import offpolicy.ray_address

    utils = ray._private.utils
    calls = []

    def joining(**kw):  # what ray.init does, then the signal arrives while it runs
        utils.set_sigterm_handler(lambda signum, frame: sys.exit(15))
        calls.append("init")
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(offpolicy.ray_address, "check_ray_address", lambda *a: None)
    monkeypatch.setattr(ray, "init", joining)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(ray, "wait", lambda *a, **k: pytest.fail("nothing was submitted"))
    before = signal.getsignal(signal.SIGTERM)
    runs = runner.plan(spec.load(_suite_file(tmp_path)), runner.default_layout(tmp_path / "o"))
    out = runner.run_ray(runs, "10.0.0.1:6379", progress=False)
    assert out.stopped == signal.SIGTERM and not out.ran and not out.failed
    assert calls == ["init", "shutdown"]
    assert signal.getsignal(signal.SIGTERM) is before
    assert not any(runner.run_dir_in_use(r.run_dir) for r in runs)


@pytest.mark.usefixtures("ray_turn")
def test_ray_dispatch_survives_a_lost_node(tmp_path):
    """Acceptance 2: a 2-node local Ray cluster, one node removed while it runs a run: the
    suite completes, the lost run retried (from its checkpoint: the storage is shared)."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    path = _suite_file(tmp_path, steps=2000, seeds=[0, 1],
                       flags=TINY + " --checkpoint-every 200",
                       eval={"every": 1000, "episodes": 2})
    out = tmp_path / "out"
    runs = runner.plan(spec.load(path), runner.default_layout(out))
    from offpolicy.training.distributed import _spawning

    with _spawning():  # Ray starts its processes with fork + exec: JAX's warning is moot
        cluster = Cluster(initialize_head=True, connect=False,
                          head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        with _spawning():
            node = cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
        proc = subprocess.Popen(_cmd("run", path, "--out", out, "--ray-address",
                                     cluster.address), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

        def attempts(r):
            return r.log_path.read_text().count("] attempt on ") if r.log_path.exists() else 0

        def on_the_node(r):  # started on the node to remove, checkpointed, not finished
            return (r.log_path.exists() and f"node {node.node_id} " in r.log_path.read_text()
                    and (r.run_dir / "checkpoints" / "latest").exists()
                    and not runner.finished(r.run_dir, r.steps))

        deadline = time.monotonic() + 240
        while not any(on_the_node(r) for r in runs):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        cluster.remove_node(node)
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert all(runner.finished(r.run_dir, r.steps) for r in runs)
        assert max(attempts(r) for r in runs) >= 2, [attempts(r) for r in runs]
        from offpolicy.suites.host import read_starts

        assert all(len(read_starts(r.run_dir)) == attempts(r) for r in runs)  # one per attempt
        assert (out / "report.md").exists()
    finally:
        cluster.shutdown()
