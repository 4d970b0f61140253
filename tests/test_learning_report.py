"""benchmarks/learning.py on the suite engine: its grids in the suites' YAML form
(benchmarks/suites/*.yaml and the package's), the report (offpolicy.suites.report) and its
cross-session restore of finished runs."""

import csv
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import learning  # noqa: E402
from offpolicy.errors import OffpolicyError  # noqa: E402
from offpolicy.suites import runner, spec  # noqa: E402
from offpolicy.suites.report import (  # noqa: E402
    final_comparisons,
    restore_finished,
    sample_efficiency,
    seed_ranges,
    seeds_line,
    write_report,
)


def _fake_run(d: Path, finals, kl):
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("algo: naf\n")
    with open(d / "eval.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "return_mean", "return_std", "return_se", "episodes", "wall_time"])
        for step, r in finals:
            w.writerow([step, r, 2.0, 0.5, 16, 1.0])
    with open(d / "train.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "kl_mu_pi", "far_policy_fraction", "loss"])
        for step, k in kl:
            w.writerow([step, k, 0.1, 1.0])


def _grid(suite, root, env, steps, seeds=(0, 1, 2), entries=None):
    s = learning.bench_suite(suite, env, steps, seeds, entries)
    return s, runner.plan(s, lambda e, entry, seed: root / entry / f"s{seed}")


def test_finished_runs_come_back_from_the_committed_csvs(tmp_path):
    root, out = tmp_path / "runs", tmp_path / "results"
    out.mkdir()
    _fake_run(root / "naf" / "s0", [(10, -500.0), (20, -150.0)], [(10, 0.3), (20, 0.2)])
    _fake_run(root / "ddpg-refer" / "s1", [(10, -400.0)], [(10, 0.05)])  # unfinished
    s, runs = _grid("refer-pendulum", root, "Pendulum-v1", 20)
    first = write_report(s, runs, out, "rp", "cmd")
    assert "ddpg-refer s1 at step 10" in first
    other = tmp_path / "elsewhere"  # a new machine: only the CSVs came along
    s, moved = _grid("refer-pendulum", other, "Pendulum-v1", 20)
    assert restore_finished(moved, out, "rp") == ["naf s0 on Pendulum-v1"]
    assert not (other / "ddpg-refer").exists()  # unfinished runs start again
    again = write_report(s, moved, out, "rp", "cmd")
    table = lambda text: [x for x in text.splitlines() if x.startswith("|")]  # noqa: E731
    assert table(again) == table(first) and "| naf | 1 | 20 |" in "\n".join(table(first))
    rebuilt = (other / "naf" / "s0" / "train.csv").read_text().splitlines()
    assert rebuilt[0] == "step,kl_mu_pi,far_policy_fraction" and len(rebuilt) == 3
    assert restore_finished(moved, out, "rp") == []  # already here


def test_reports_say_which_host_ran_which_run_and_keep_it_through_the_csvs(tmp_path,
                                                                            monkeypatch):
    """Runs of one grid on two machines (a lent GPU host resumes one of them): the report
    lists the hosts with their runs; one machine alone, the report's own, adds nothing; a run
    rebuilt from the committed CSVs keeps its hosts; a restart from step 0 drops the hosts of
    the attempt it replaced."""
    from offpolicy.suites import host

    root, out = tmp_path / "runs", tmp_path / "results"
    out.mkdir()
    for seed in (0, 1):
        _fake_run(root / "naf" / f"s{seed}", [(10, -500.0), (20, -150.0)], [(10, 0.3)])
    _fake_run(root / "ddpg-refer" / "s0", [(10, -500.0), (20, -150.0)], [(10, 0.3)])
    s, runs = _grid("refer-pendulum", root, "Pendulum-v1", 20, seeds=(0, 1))
    for d in (root / "naf" / "s0", root / "naf" / "s1", root / "ddpg-refer" / "s0"):
        host.record_start(d, 0)
    here = host.host()
    assert host.hosts_of(root / "naf" / "s0") == [here]
    assert "Hosts" not in write_report(s, runs, out, "h", "cmd")  # all of them ran here
    monkeypatch.setattr(host, "host", lambda: "Big box, 16 cores, 1x NVIDIA H200")
    host.record_start(root / "naf" / "s1", 10)  # resumed there from its step-10 checkpoint
    host.record_start(root / "ddpg-refer" / "s0", 0)  # started again from scratch there
    assert host.hosts_of(root / "naf" / "s1") == [here, "Big box, 16 cores, 1x NVIDIA H200"]
    assert host.hosts_of(root / "ddpg-refer" / "s0") == ["Big box, 16 cores, 1x NVIDIA H200"]
    monkeypatch.undo()
    text = write_report(s, runs, out, "h", "cmd")
    line = next(x for x in text.splitlines() if x.startswith("Hosts"))
    assert line.endswith(f"{here} (this machine): naf s0-1; Big box, 16 cores, 1x NVIDIA "
                         "H200: naf s1, ddpg-refer s0."), line
    other = tmp_path / "elsewhere"
    s2, moved = _grid("refer-pendulum", other, "Pendulum-v1", 20, seeds=(0, 1))
    assert len(restore_finished(moved, out, "h")) == 3
    assert host.hosts_of(other / "naf" / "s1") == host.hosts_of(root / "naf" / "s1")
    assert line in write_report(s2, moved, out, "h2", "cmd")
    host.hosts_path(root / "naf" / "s1").unlink()  # a run here whose hosts file is lost
    assert restore_finished(runs, out, "h") == []  # nothing to rebuild, but its hosts return
    assert host.hosts_of(root / "naf" / "s1") == host.hosts_of(other / "naf" / "s1")


def test_csvs_of_one_env_without_an_env_column_restore_too(tmp_path):
    """The CSVs committed before the engine moved into the package have no env column."""
    out = tmp_path / "results"
    out.mkdir()
    (out / "old.csv").write_text("entry,seed,step,return_mean,return_se,episodes\n"
                                 "naf,0,10,-300,1,20\nnaf,0,20,-150,1,20\n")
    _, runs = _grid("refer-pendulum", tmp_path / "runs", "Pendulum-v1", 20, seeds=[0])
    assert restore_finished(runs, out, "old") == ["naf s0 on Pendulum-v1"]


def test_welch_against_references():
    """Welch's t-test against scipy's ttest_ind(equal_var=False), the Welch-Satterthwaite df
    written out, and the interval against the test: it excludes 0 exactly when p < 0.05."""
    import numpy as np
    from scipy import stats

    from offpolicy.suites.report import welch

    rng = np.random.default_rng(3)
    for na, nb in [(5, 5), (3, 7), (2, 4), (3, 3), (4, 3)]:
        for shift in (0.0, 1.0, 3.0):
            a, b = rng.normal(shift, 2.0, na), rng.normal(0.0, 0.5, nb)
            t, df, p, lo, hi = welch(a, b)
            ref = stats.ttest_ind(a, b, equal_var=False)
            assert np.isclose(t, ref.statistic) and np.isclose(p, ref.pvalue)
            sa, sb = a.var(ddof=1) / na, b.var(ddof=1) / nb
            assert np.isclose(df, (sa + sb) ** 2 / (sa**2 / (na - 1) + sb**2 / (nb - 1)))
            assert np.isclose((lo + hi) / 2, a.mean() - b.mean())
            assert (lo > 0 or hi < 0) == (p < 0.05)
    assert np.isnan(welch([1.0, 1.0], [1.0, 1.0])[0])  # no spread: no test


def test_report_tests_the_suites_differences(tmp_path):
    root, out = tmp_path / "runs", tmp_path / "results"
    for s, (er, ref) in enumerate([(-600.0, -100.0), (-500.0, -120.0), (-550.0, -90.0)]):
        _fake_run(root / "ddpg-er" / f"s{s}", [(10, er)], [(10, 5.0)])
        _fake_run(root / "ddpg-refer" / f"s{s}", [(10, ref)], [(10, 0.1)])
    _fake_run(root / "naf" / "s0", [(10, -1.0)], [(10, 1.0)])  # one run: no test
    suite, runs = _grid("refer", root, "HalfCheetah-v5", 10)
    text = write_report(suite, runs, out, "r", "cmd")
    row = next(line for line in text.splitlines() if line.startswith("| ddpg-refer - ddpg-er"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "3 / 3" and float(cells[2]) == 446.7 and float(cells[5]) < 0.01
    lo, hi = (float(x) for x in cells[6].strip("[]").split(","))
    assert 0 < lo < 446.7 < hi
    assert "naf-refer - naf" not in text
    assert "Ratio of mean `kl_mu_pi` (ddpg-refer / ddpg-er): 0.02." in text
    assert (out / "r_kl_mu_pi.png").exists() and (out / "r.png").exists()


def test_runs_in_progress_join_a_partial_report_at_their_common_step(tmp_path):
    root = tmp_path / "runs"
    for s in range(2):
        _fake_run(root / "ddpg-er" / f"s{s}", [(10, -600.0 + s), (20, -100.0 + s),
                                               (30, 50.0 + s)], [(10, 5.0)])
        _fake_run(root / "ddpg-refer" / f"s{s}", [(10, -300.0 - s), (20, -200.0 - s)],
                  [(10, 0.1)])
    suite, runs = _grid("refer", root, "HalfCheetah-v5", 30, [0, 1])
    assert "ddpg-refer - ddpg-er" not in write_report(suite, runs, tmp_path / "o", "r", "c")
    text = write_report(suite, runs, tmp_path / "o", "r", "c", include_running=True)
    row = next(line for line in text.splitlines() if line.startswith("| ddpg-refer - ddpg-er"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[2]) == -101.0 and cells[-1] == "20"  # both at step 20, ER's 30 unused
    assert "| ddpg-refer | 2 | 20 |" in text and "| ddpg-er | 2 | 30 |" in text
    assert "In progress (in the table" in text


def test_a_metric_some_entries_do_not_log_is_drawn_for_those_that_do(tmp_path):
    """ace-separate's action_spread: DDPG has no actor spread; the report (rewritten after
    every run of a grid) must not fail on it."""
    root = tmp_path / "runs"
    for entry in ("ace", "ddpg"):
        _fake_run(root / entry / "s0", [(10, -1.0)], [(10, 1.0)])
    d = root / "ace" / "s0" / "train.csv"
    d.write_text("step,action_spread\n10,0.25\n")
    suite, runs = _grid("ace-separate", root, "HalfCheetah-v5", 10, [0])
    text = write_report(suite, runs, tmp_path / "o", "a", "cmd")
    assert "Mean `action_spread`" in text and "ace 0.25" in text
    assert (tmp_path / "o" / "a_action_spread.png").exists()


def _benchmark_grids() -> list[str]:
    """The grids in benchmarks/suites/, and the package's suites with peer entries."""
    return [name for name, path in learning.grids().items()
            if path.parent == learning.SUITES_DIR or spec.load(path).peers]


def test_the_grids_are_suites_and_an_entry_means_one_command_in_all_of_them():
    """Every grid loads with the package's schema (its comparisons, metrics, thresholds,
    decision checked), none hides a package suite, and an entry's name runs one algorithm with
    one set of flags (or one peer script) in every benchmark grid."""
    names = _benchmark_grids()
    assert len(names) >= 27 and {"refer-1m", "ddpg-parity", "td3-init-trap"} <= set(names)
    assert not set(p.stem for p in learning.SUITES_DIR.glob("*.yaml")) & set(spec.available())
    meaning: dict[str, tuple] = {}
    for name in names:
        for entry in learning.grid(name).entries.values():
            this = (entry.algo, entry.flags, entry.peer)
            assert meaning.setdefault(entry.name, this) == this, (name, entry, meaning[entry.name])


def test_ddpg_parity_is_written_once_and_its_peers_run_from_here_alone():
    """The package's ddpg-parity.yaml holds the SB3 and SBX entries too: `offpolicy suite`
    leaves them out (and the comparisons naming them), this driver runs them."""
    assert learning.grids()["ddpg-parity"] == spec.available()["ddpg-parity"]
    assert not (learning.SUITES_DIR / "ddpg-parity.yaml").exists()
    ours, full = spec.load("ddpg-parity"), learning.grid("ddpg-parity")
    assert ours.peers == ("sb3-ddpg", "sbx-ddpg") and not full.peers
    assert list(full.entries) == ["ddpg", "ddpg-sb3", "sb3-ddpg", "sbx-ddpg", "ddpg-input1",
                                  "ddpg-torch-init", "ddpg-lr1e-3", "ddpg-gaussian"]
    assert list(ours.entries) == [e for e in full.entries if e not in ours.peers]
    assert ours.compare == tuple(p for p in full.compare if not set(p) & set(ours.peers))
    assert len(ours.compare) == 5 and len(full.compare) == 12
    assert [e.threshold for e in learning.bench_suite("ddpg-parity", "Hopper-v5", 10, [0]).envs
            + learning.bench_suite("ddpg-parity", "Walker2d-v5", 10, [0]).envs] == [1000, None]


def test_refer_1m_runs_its_pre_registered_arms():
    """The arms' commands, pinned (benchmarks/suites/refer-1m.preregistration.md), and the
    pre-registration opens the grid's report."""
    suite = learning.bench_suite("refer-1m", "Ant-v5", 1_000_000, [3])
    runs = runner.plan(suite, lambda env, entry, seed: Path("R") / entry / f"s{seed}")
    ours = {r.entry.name: " ".join(runner.train_command(r, "py")[3:]).split(" --quiet ")[1]
            for r in runs if not r.entry.peer}
    every = "--eval-every 10000 --eval-episodes 20 --buffer-size 262144"
    assert ours == {
        "ddpg-er": f"{every} --replay-diagnostics",
        "ddpg-refer": f"{every} --replay refer",
        "vracer": every,
        "vracer-er": f"{every} --replay er",
        "ddpg-er-appa": f"{every} --preset refer --replay er --ddpg.noise ou --replay-diagnostics",
        "ddpg-refer-appa": f"{every} --preset refer",
        "ddpg-refer-farpol": f"{every} --replay refer --refer-forget far-policy",
        "ddpg-er-smarties": f"{every} --preset smarties --replay er --replay-diagnostics",
        "ddpg-refer-smarties": f"{every} --preset smarties --replay refer",
        "vracer-refer1": f"{every} --replay refer1",
        "vracer-refer2": f"{every} --replay refer2",
        "naf-er": f"{every} --replay er --replay-diagnostics",
        "naf-refer": f"{every} --replay refer"}
    assert [r.entry.algo for r in runs][:3] == ["ddpg", "ddpg", "vracer"]
    ppo = next(r for r in runs if r.entry.peer)
    assert learning.peer_command("py")(ppo)[1:] == [
        str(Path(learning.__file__).parent / "peers.py"), "learn", "--lib", "sb3", "--algo",
        "ppo", "--env", "Ant-v5", "--steps", "1000000", "--seed", "3", "--run-dir",
        str(Path("R") / "sb3-ppo" / "s3"), "--eval-every", "10000", "--eval-episodes", "20"]
    prereg = (learning.SUITES_DIR / "refer-1m.preregistration.md").read_text().strip()
    assert suite.preregistration == prereg and not suite.description
    assert [c.label for c in suite.decision.claims if c.primary] == [
        "C1 (authors' preset)", "C1 (library defaults)", "C2", "C3 (vs Rule 1 only)",
        "C3 (vs Rule 2 only)", "C4", "C5"]


def _commands(suite: str, env: str, steps: int) -> dict[str, str]:
    """Each entry's flags after the runner's own, as the grid runs them on ``env``."""
    runs = runner.plan(learning.bench_suite(suite, env, steps, [0]),
                       lambda env, entry, seed: Path("R") / entry / f"s{seed}")
    return {r.entry.name: " ".join(runner.train_command(r, "py")).split(" --quiet ")[1]
            for r in runs}


def test_issue_71_grids_run_their_pre_registered_arms():
    """acer-1m, aql-fig2-500k and ace-1m: the arms' commands, pinned (each grid's
    .preregistration.md), the claims with their rules and statistic, and the
    pre-registration that opens each grid's report."""
    every = "--eval-every 10000 --eval-episodes 20"
    lr = f"{every} --acer.lr 2.2e-4"  # the grid's flag: Sec. 6's log-midpoint, every arm
    acer = {"acer-paper-mujoco": f"{lr} --preset paper-mujoco",
            "acer-paper-mujoco-no-trust-region": f"{lr} --preset paper-mujoco "
                                                 "--no-acer.trust-region",
            "acer-paper-mujoco-on-policy": f"{lr} --preset paper-mujoco "
                                           "--acer.on-policy-update --replay-ratio 0",
            "acer-paper-mujoco-on-policy-no-trust-region":
                f"{lr} --preset paper-mujoco --acer.on-policy-update --replay-ratio 0 "
                "--no-acer.trust-region"}
    for env in ("HalfCheetah-v5", "Walker2d-v5", "Hopper-v5"):
        assert _commands("acer-1m", env, 1_000_000) == acer
    small = "--eval-every 10000 --eval-episodes 10 --preset small"
    d3pg = ("--eval-every 10000 --eval-episodes 10 --preset d3pg --num-collectors 2 "
            "--updates-per-step 1.875")
    aql = {"aql-small-d5": f"{small} --discretize 5", "aql-small": small,
           "uniform-q-small-d5": f"{small} --discretize 5", "qt-opt-small": small,
           "d3pg-small-c2": f"{d3pg} --ddpg.hidden 64 64 --ddpg.activation relu "
                            "--ddpg.action-input-layer 1",
           "d3pg-c2": d3pg}
    for env in ("dm_control/cheetah-run-v0", "dm_control/walker-walk-v0"):
        assert _commands("aql-fig2-500k", env, 500_000) == aql
    assert _commands("ace-1m", "HalfCheetah-v5", 1_000_000) == {
        "ace": every, "ensemble-ddpg": every, "ddpg": every}
    assert [e.algo for e in learning.grid("ace-1m").entries.values()] == [
        "ace", "ensemble-ddpg", "ddpg"]
    claims = {}
    for name in ("acer-1m", "aql-fig2-500k", "ace-1m"):
        g = learning.grid(name)
        prereg = (learning.SUITES_DIR / f"{name}.preregistration.md").read_text().strip()
        assert g.preregistration == prereg and "written 2026-12-07 before any run" in prereg
        assert "measured 2026-12-07" in g.cost  # the COST line each grid was timed for
        claims[name] = [(c.label, c.a, c.b, c.rule, c.seeds) for c in g.decision.claims
                        if c.primary]
    five, three = (0, 1, 2, 3, 4), (0, 1, 2)
    assert claims["acer-1m"] == [
        ("C1 (replay)", "acer-paper-mujoco", "acer-paper-mujoco-on-policy", "superior", five),
        ("C2 (trust region)", "acer-paper-mujoco", "acer-paper-mujoco-no-trust-region",
         "superior", five)]
    assert claims["aql-fig2-500k"] == [
        ("C1 (AQL >= D3PG)", "aql-small-d5", "d3pg-small-c2", "non-inferior", three),
        ("C2 (AQL > Uniform-Q)", "aql-small-d5", "uniform-q-small-d5", "superior", three),
        ("C3 (AQL > QT-Opt)", "aql-small-d5", "qt-opt-small", "superior", three)]
    assert claims["ace-1m"] == [("C1 (ACE > DDPG)", "ace", "ddpg", "superior", five),
                                ("C2 (look-ahead)", "ace", "ensemble-ddpg", "superior", five)]
    assert [(learning.grid(n).decision.statistic, learning.grid(n).decision.window)
            for n in ("acer-1m", "aql-fig2-500k", "ace-1m")] == [
        ("window", 200_000), ("window", 50_000), ("best", 200_000)]


def test_acer_threads_follow_up_runs_acer_1m_arms_at_the_papers_update_count():
    """acer-1m-threads (issue 71's follow-up, its own pre-registration): acer-1m's four arms,
    each with one env copy and one 50-step window per update, the same claims and rules."""
    lr = "--eval-every 10000 --eval-episodes 20 --acer.lr 2.2e-4"
    threads = f"{lr} --num-envs 1 --batch-size 1 --preset paper-mujoco"
    twins = _commands("acer-1m", "HalfCheetah-v5", 1_000_000)
    for env in ("HalfCheetah-v5", "Walker2d-v5", "Hopper-v5"):
        got = _commands("acer-1m-threads", env, 1_000_000)
        assert got == {name.replace("acer-paper-mujoco", "acer-threads"):
                       flags.replace(f"{lr} --preset paper-mujoco", threads)
                       for name, flags in twins.items()}
    g = learning.grid("acer-1m-threads")
    prereg = (learning.SUITES_DIR / "acer-1m-threads.preregistration.md").read_text().strip()
    assert g.preregistration == prereg and "written 2026-12-07 before any run" in prereg
    assert "measured 2026-12-07" in g.cost
    assert [(c.label, c.a, c.b, c.rule, c.primary) for c in g.decision.claims] == [
        ("C1 (replay)", "acer-threads", "acer-threads-on-policy", "superior", True),
        ("C2 (trust region)", "acer-threads", "acer-threads-no-trust-region", "superior", True),
        ("C2 (on-policy pair)", "acer-threads-on-policy",
         "acer-threads-on-policy-no-trust-region", "superior", False)]
    assert (g.decision.statistic, g.decision.window) == ("window", 200_000)


def test_paired_t_against_scipy():
    import numpy as np
    from scipy import stats

    from offpolicy.suites.report import paired_t

    rng = np.random.default_rng(5)
    for n in (2, 3, 5, 8):
        draw = rng.normal(0.0, 3.0, n)  # what the two runs of a seed share
        a, b = draw + rng.normal(1.0, 0.5, n), draw + rng.normal(0.0, 0.5, n)
        t, df, p, lo, hi = paired_t(a, b)
        ref = stats.ttest_rel(a, b)
        assert np.isclose(t, ref.statistic) and np.isclose(p, ref.pvalue) and df == n - 1
        assert np.isclose((lo + hi) / 2, np.mean(a - b)) and (lo > 0 or hi < 0) == (p < 0.05)
    assert np.isnan(paired_t([1.0, 2.0], [0.0, 1.0])[0])  # the same difference: no spread


def test_paired_pairs_get_a_paired_table_over_their_common_seeds(tmp_path):
    """td3-loop-ablation declares (td3-sb3, td3-sb3-wait) paired: its table pairs the seeds
    both have; a pair not declared paired (td3-sb3, sb3-td3) gets no paired row."""
    from offpolicy.suites.report import paired_t

    root = tmp_path / "runs"
    finals = {"td3-sb3": [1170, 1302, 2504, 828], "td3-sb3-wait": [879, 920, 2289, 876, 701],
              "sb3-td3": [2117, 1679, 1348]}
    for entry, values in finals.items():
        for seed, v in enumerate(values):
            _fake_run(root / entry / f"s{seed}", [(10, 0.0), (20, float(v))], [(10, 0.1)])
    s, runs = _grid("td3-loop-ablation", root, "HalfCheetah-v5", 20, seeds=range(5),
                    entries=["td3-sb3", "td3-sb3-wait", "sb3-td3"])
    assert ("td3-sb3", "td3-sb3-wait") in s.paired and ("td3-sb3", "sb3-td3") not in s.paired
    text = write_report(s, runs, tmp_path / "o", "p", "cmd")
    table = text[text.index("paired by seed"):]
    t, df, p, lo, hi = paired_t(finals["td3-sb3"], finals["td3-sb3-wait"][:4])
    assert f"| td3-sb3 - td3-sb3-wait | 0-3 | 210.0 | {t:.2f} | 3 | {p:.3f} |" in table
    assert "| td3-sb3 - sb3-td3 |" not in table and "one pair tested" in table


def test_an_entrys_flags_override_the_suites():
    """The refer suite gives every run a 1e6 memory; ddpg-refer-mem50k sets its own, which
    must be the one the run gets."""
    from offpolicy.train_args import train_parser

    _, runs = _grid("refer", Path("r"), "HalfCheetah-v5", 100_000, [0],
                    ["ddpg-refer-mem50k", "ddpg-refer"])
    mem50k, refer = (runner.train_command(r) for r in runs)
    assert mem50k[3:5] == ["train", "ddpg"]
    ns = vars(train_parser("ddpg").parse_args(mem50k[5:]))
    assert ns["buffer_size"] == 50_000 and ns["replay"] == "refer"
    assert vars(train_parser("ddpg").parse_args(refer[5:]))["buffer_size"] == 1_000_000


def test_the_legend_names_what_each_entry_runs(tmp_path):
    parity = learning.grid("ddpg-parity").entries
    assert parity["ddpg-input1"].command() == "offpolicy train ddpg --ddpg.action-input-layer 1"
    assert parity["sb3-ddpg"].command() == "benchmarks/peers.py --lib sb3 --algo ddpg"
    pfrl = learning.grid("acer-peers").entries["pfrl-acer"]
    assert pfrl.peer == "pfrl" and pfrl.command() == "benchmarks/peers_pfrl.py (PFRL 0.4.0)"
    sac = learning.grid("baselines-peers").entries["sbx-sac"]
    assert (sac.algo, sac.peer) == ("sac", "sbx")
    root = tmp_path / "runs"
    for entry in ("ddpg", "ddpg-input1", "sb3-ddpg"):
        _fake_run(root / entry / "s0", [(10, -1.0)], [(10, 1.0)])
    suite, runs = _grid("ddpg-parity", root, "HalfCheetah-v5", 10, [0])
    text = write_report(suite, runs, tmp_path / "out", "p", "cmd")
    legend = next(x for x in text.splitlines() if x.startswith("Entries: "))
    assert "ddpg-input1 = `offpolicy train ddpg --ddpg.action-input-layer 1`" in legend
    assert "sb3-ddpg = `benchmarks/peers.py --lib sb3 --algo ddpg`" in legend
    assert "; ddpg = " not in legend and not legend.startswith("Entries: ddpg = ")


def test_comparisons_over_the_whole_curve(tmp_path):
    """over_curve compares each run's mean over its evaluations, not its last one."""
    groups = {}
    for entry, curves in {"a": [(0, 100), (10, 110), (20, 90)],
                          "b": [(0, 0), (10, 20), (20, 10)]}.items():
        groups[entry] = []
        for seed, (x, y) in enumerate(curves):
            d = tmp_path / entry / f"s{seed}"
            _fake_run(d, [(1000, x), (2000, y)], [(1000, 0.1)])
            groups[entry].append(d)
    final = final_comparisons(groups, [("a", "b")])
    curve = final_comparisons(groups, [("a", "b")], over_curve=True)
    row = lambda text: [c.strip() for c in text.strip().splitlines()[-1].strip("|").split("|")]  # noqa: E731
    assert final.lstrip().startswith("Final return") and float(row(final)[2]) == 100.0 - 10.0
    assert curve.lstrip().startswith("Mean return over evaluations")
    assert "one pair tested)" in final and "Bonferroni" not in final  # nothing to correct
    two = final_comparisons(groups, [("a", "b"), ("b", "a")])
    assert "2 pairs tested, so p < 0.025 holds them all at 0.05 together, Bonferroni" in two
    assert float(row(curve)[2]) == (50 + 60 + 55) / 3 - (0 + 15 + 15) / 3


def test_sample_efficiency_against_hand_numbers(tmp_path):
    """Runs reaching the threshold, their first step reaching it (mean +- s.e.) and each
    run's mean over its evaluations; one run has no standard error and says so."""
    groups = {"a": [], "b": [], "c": []}
    for entry, seed, curve in [("a", 0, [-900, -150, -120]), ("a", 1, [-800, -700, -190]),
                               ("b", 0, [-900, -900, -900]), ("c", 0, [-300, -100, -100])]:
        d = tmp_path / entry / f"s{seed}"
        _fake_run(d, [(5000 * (i + 1), r) for i, r in enumerate(curve)], [(5000, 0.1)])
        groups[entry].append(d)
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in sample_efficiency(groups, -200).splitlines() if line.startswith("| ")]
    assert rows[0][1] == "runs reaching -200"
    a, b, c = rows[1:]
    means = [(-900 - 150 - 120) / 3, (-800 - 700 - 190) / 3]
    se = abs(means[0] - means[1]) / 2  # s.e. of two values: |x - y| / 2
    assert a == ["a", "2 / 2", "12500 ± 2500", f"{sum(means) / 2:.0f} ± {se:.0f}"]
    assert b == ["b", "0 / 1", "not reached", "-900 (1 run)"]
    assert c == ["c", "1 / 1", "10000 (1 run)", "-167 (1 run)"]


def test_rows_with_different_seeds_say_which():
    assert seed_ranges([4, 0, 1, 2, 7, 9, 8]) == "0-2, 4, 7-9"
    assert seed_ranges([3]) == "3" and seed_ranges([1, 1, 2]) == "1-2"
    same = {"a": [Path("s0"), Path("s1")], "b": [Path("s1"), Path("s0")]}
    assert seeds_line(same) == ""
    text = seeds_line({"a": [Path(f"s{i}") for i in range(10)],
                       "b": [Path(f"s{i}") for i in range(5)]})
    assert "a 0-9; b 0-4." in text


def test_a_peer_variant_passes_its_flags_to_the_peer_script(tmp_path):
    """Issue 33's loop ablation: SB3's TD3 loop with our update is a peer entry whose flags
    reach benchmarks/peers.py (before the common ones) and name it in the report's legend."""
    entry = learning.grid("td3-loop-ablation").entries["sb3-td3-ourupdate-ourinit"]
    assert (entry.peer, entry.algo, entry.flags) == ("sb3", "td3",
                                                     ("--update", "ours", "--init", "ours"))
    assert entry.command() == \
        "benchmarks/peers.py --lib sb3 --algo td3 --update ours --init ours"
    _, runs = _grid("td3-loop-ablation", tmp_path, "HalfCheetah-v5", 1000, [0],
                    ["sb3-td3", "sb3-td3-ourupdate"])
    plain, hybrid = (learning.peer_command("python")(r) for r in runs)
    assert "--update" not in plain
    assert hybrid[2:8] == ["learn", "--lib", "sb3", "--algo", "td3", "--update"]
    assert hybrid[8] == "ours" and "--init" not in hybrid


def test_the_ppo_peer_runs_sb3s_ppo_without_a_warm_up(tmp_path):
    """refer-1m's sb3-ppo is benchmarks/peers.py's SB3 PPO; PPO has no warm-up, and peers.py
    refuses one, so its command passes none (DDPG, TD3 and SAC keep theirs)."""
    entry = learning.grid("refer-1m").entries["sb3-ppo"]
    assert (entry.peer, entry.algo, entry.flags) == ("sb3", "ppo", ())
    _, runs = _grid("refer-1m", tmp_path, "HalfCheetah-v5", 1000, [0], ["sb3-ppo"])
    command = learning.peer_command("python")(runs[0])
    assert command[2:7] == ["learn", "--lib", "sb3", "--algo", "ppo"]
    assert "--warmup" not in command
    _, runs = _grid("td3-loop-ablation", tmp_path, "HalfCheetah-v5", 1000, [0], ["sb3-td3"])
    assert learning.peer_command("python")(runs[0])[-2:] == ["--warmup", "100"]


def test_every_entry_of_ours_parses_as_a_train_command():
    """A typo in a grid's flags would only surface hours into a benchmark: every entry of
    every grid that is ours must parse with `offpolicy train` (peers are skipped)."""
    for suite in _benchmark_grids():
        spec.check(learning.bench_suite(suite, "Pendulum-v1", 1000, [0]), envs=False)


def test_a_peer_run_with_a_checkpoint_is_continued_and_one_without_restarts(tmp_path):
    """runner.prepare keeps a peer run's folder when its script left a checkpoint
    (benchmarks/peers.py resumes from it with the same command) and clears it otherwise."""
    _, runs = _grid("baselines-peers", tmp_path, "HalfCheetah-v5", 1000, [0],
                    ["sb3-td3", "sbx-sac"])
    kept, cleared = runs
    for run in runs:
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "eval.csv").write_text("step,return_mean\n500,1.0\n")
    (kept.run_dir / runner.PEER_CHECKPOINT).write_bytes(b"npz")
    command = learning.peer_command("python")
    for run in runs:
        assert runner.prepare(run, command) == command(run)
    assert (kept.run_dir / "eval.csv").exists() and (kept.run_dir / "checkpoint.npz").exists()
    assert not cleared.run_dir.exists()
    assert runner.PEER_CHECKPOINT == "checkpoint.npz"  # the name benchmarks/peer_common.py uses
    assert (Path(learning.__file__).parent / "peer_common.py").read_text().count(
        'CHECKPOINT = "checkpoint.npz"') == 1


def test_a_resumed_peer_run_keeps_its_evaluations_up_to_the_checkpoint(tmp_path, monkeypatch):
    """benchmarks/peer_common.continue_run: the rows after the checkpoint's step go (the run
    redoes them), the earlier ones stay as written, config.json records the resumption."""
    monkeypatch.syspath_prepend(str(Path(learning.__file__).parent))
    import peer_common as pc

    rows = ["200,-1.5,0.25,0.125,4,10.5", "400,-1.25,0.5,0.25,4,21.0",
            "600,-1.0,0.5,0.25,4,31.5"]
    (tmp_path / "eval.csv").write_text("\n".join([",".join(pc.EVAL_HEADER), *rows]) + "\n")
    (tmp_path / "config.json").write_text('{"settings": {}}')
    csv_path, means = pc.continue_run(tmp_path, 400)
    assert csv_path.read_text().splitlines()[1:] == rows[:2]
    assert means == [-1.5, -1.25]
    config = json.loads((tmp_path / "config.json").read_text())
    assert [r["at_step"] for r in config["resumed"]] == [400]


def test_a_driver_of_one_seed_keeps_the_other_seeds_rows(tmp_path, monkeypatch):
    """A lane that runs one seed (--seeds 1) on a new machine, where seed 0 finished in an
    earlier session and lives only in the committed CSV: its report (and command) still covers
    seeds 0 and 1."""
    root, out = tmp_path / "runs", tmp_path / "results"
    grid = root / "refer-pendulum_Pendulum-v1"
    for seed in (0, 1):
        _fake_run(grid / "naf" / f"s{seed}", [(10, -500.0), (20, -150.0 - seed)], [(20, 0.2)])
    argv = ["learning.py", "--suite", "refer-pendulum", "--env", "Pendulum-v1", "--steps", "20",
            "--runs-root", str(root), "--out-dir", str(out), "--report-only"]
    monkeypatch.setattr(sys, "argv", [*argv, "--seeds", "0"])
    assert learning.main() == 0
    import shutil

    shutil.rmtree(grid / "naf" / "s0")  # a new machine: seed 0 is in the committed CSV only
    monkeypatch.setattr(sys, "argv", [*argv, "--seeds", "1"])
    assert learning.main() == 0
    text = (out / "learning_refer-pendulum_Pendulum-v1.md").read_text()
    assert "| naf | 2 | 20 |" in text, text
    assert "--steps 20 --seeds 0 1`" in text
    assert learning.report_seeds([3], out, "learning_refer-pendulum_Pendulum-v1") == [0, 1, 3]
    assert learning.with_seeds(["--suite", "x", "--seeds", "1", "--jobs", "2"], [0, 1]) == [
        "--suite", "x", "--seeds", "0", "1", "--jobs", "2"]
    # a driver of the default seeds, whose report shows more (seeds 3-4 from the CSV)
    assert learning.with_seeds(["--suite", "x", "--steps", "20"], [0, 3]) == [
        "--suite", "x", "--steps", "20", "--seeds", "0", "3"]
    assert learning.with_seeds(["--seeds=2", "--suite", "x"], [1, 2]) == [
        "--seeds", "1", "2", "--suite", "x"]


def test_a_driver_of_some_entries_keeps_the_other_entries_rows(tmp_path, monkeypatch):
    """Two drivers share a grid (say, the DDPG entries here and the ACE ones on a GPU machine):
    the report of the one that runs a subset still holds every finished run, under the grid's
    command (without --entries)."""
    root, out = tmp_path / "runs", tmp_path / "results"
    grid = root / "refer-pendulum_Pendulum-v1"
    _fake_run(grid / "naf" / "s0", [(10, -500.0), (20, -150.0)], [(10, 0.3), (20, 0.2)])
    _fake_run(grid / "ddpg-refer" / "s0", [(10, -400.0), (20, -90.0)], [(10, 0.1), (20, 0.1)])
    monkeypatch.setattr(sys, "argv", [
        "learning.py", "--suite", "refer-pendulum", "--env", "Pendulum-v1", "--steps", "20",
        "--seeds", "0", "--entries", "ddpg-refer", "--runs-root", str(root), "--out-dir", str(out),
        "--report-only"])
    assert learning.main() == 0
    text = (out / "learning_refer-pendulum_Pendulum-v1.md").read_text()
    assert "| naf | 1 | 20 |" in text and "| ddpg-refer | 1 | 20 |" in text
    # the command reruns on any clone: no machine's paths, no one driver's selection
    assert "--entries" not in text and "--runs-root" not in text and str(root) not in text
    assert "--steps 20 --seeds 0`" in text
    assert learning.canonical_args(["--suite", "x", "--entries", "a", "b", "--jobs", "2",
                                    "--entries=c", "--report-only", "--out-dir", "/w/o",
                                    "--runs-root=/w/r", "--peers-python", "/p/python",
                                    "--seeds", "1"]) == \
        ["--suite", "x", "--jobs", "2", "--seeds", "1"]


def test_a_verdict_waits_for_the_pre_registered_seeds_whichever_a_driver_ran(tmp_path,
                                                                           monkeypatch):
    """A lane that runs one seed (--seeds 1) of a grid whose YAML pre-registers seeds 0-2: with
    seeds 0 and 1 finished, the verdict is interim, and the verdicts' command names the
    pre-registered seeds (it once took the driver's one seed as the grid's)."""
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "tiny-decision.yaml").write_text(
        "envs: [Pendulum-v1]\nseeds: [0, 1, 2]\n"
        "entries:\n  naf: {}\n  ddpg-refer: {algo: ddpg, flags: --replay refer}\n"
        "decision:\n  window: 10\n  claims:\n    - {label: C1, a: ddpg-refer, b: naf}\n")
    monkeypatch.setattr(learning, "SUITES_DIR", suites)
    root, out = tmp_path / "runs", tmp_path / "results"
    grid = root / "tiny-decision_Pendulum-v1"
    for seed in (0, 1):
        _fake_run(grid / "naf" / f"s{seed}", [(10, -500.0), (20, -300.0 - seed)], [(20, 0.2)])
        _fake_run(grid / "ddpg-refer" / f"s{seed}", [(10, -400.0), (20, -150.0 - 3 * seed)],
                  [(20, 0.1)])
    monkeypatch.setattr(sys, "argv", [
        "learning.py", "--suite", "tiny-decision", "--env", "Pendulum-v1", "--steps", "20",
        "--seeds", "1", "--runs-root", str(root), "--out-dir", str(out), "--report-only"])
    assert learning.main() == 0
    text = (out / "learning_tiny-decision_verdicts.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| C1 "))
    assert "| 2 / 2 |" in row and row.rstrip().endswith("(interim) |"), row
    assert "--steps 20 --seeds 0 1 2`" in text
    assert "pre-registered seeds (0, 1, 2" in text


def test_a_decision_sets_each_arm_beside_its_twin_in_another_grid(tmp_path, monkeypatch):
    """``decision.beside`` (acer-1m-threads' promise to describe each arm beside its acer-1m
    twin): the verdicts end with a table of S here, S of the twin in the other grid (its runs
    here or restored from its committed CSV) and the difference, with no test."""
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "old-grid.yaml").write_text(
        "envs: [Pendulum-v1]\nseeds: [0, 1]\nentries:\n  naf: {}\n  ddpg: {}\n")
    (suites / "new-grid.yaml").write_text(
        "envs: [Pendulum-v1]\nseeds: [0, 1]\n"
        "entries:\n  naf-b: {algo: naf, flags: --batch-size 8}\n"
        "  ddpg-b: {algo: ddpg, flags: --batch-size 8}\n"
        "decision:\n  window: 10\n  claims:\n    - {label: C1, a: ddpg-b, b: naf-b}\n"
        "  beside: {suite: old-grid, entries: {naf-b: naf, ddpg-b: ddpg}}\n")
    monkeypatch.setattr(learning, "SUITES_DIR", suites)
    root, out = tmp_path / "runs", tmp_path / "results"
    for seed in (0, 1):  # S (the last 10 steps of 20): the evaluation at step 20
        _fake_run(root / "new-grid_Pendulum-v1" / "naf-b" / f"s{seed}",
                  [(10, 0.0), (20, -300.0 - 10 * seed)], [(20, 0.2)])
        _fake_run(root / "new-grid_Pendulum-v1" / "ddpg-b" / f"s{seed}",
                  [(10, 0.0), (20, -100.0 - 10 * seed)], [(20, 0.2)])
        _fake_run(root / "old-grid_Pendulum-v1" / "ddpg" / f"s{seed}",
                  [(10, 0.0), (20, -400.0 + 20 * seed)], [(20, 0.2)])
    # the old grid's naf runs: one here unfinished (no row), none restored
    _fake_run(root / "old-grid_Pendulum-v1" / "naf" / "s0", [(10, -1.0)], [(10, 0.2)])
    monkeypatch.setattr(sys, "argv", [
        "learning.py", "--suite", "new-grid", "--env", "Pendulum-v1", "--steps", "20",
        "--seeds", "0", "1", "--runs-root", str(root), "--out-dir", str(out), "--report-only"])
    assert learning.main() == 0
    text = (out / "learning_new-grid_verdicts.md").read_text()
    section = text[text.index("## Beside old-grid"):]
    rows = {line.split(" | ")[1]: line for line in section.splitlines()
            if line.startswith("| Pendulum-v1 |")}
    assert rows["ddpg-b"] == ("| Pendulum-v1 | ddpg-b | 2 | -105.0 ± 5.0 | ddpg | 2 | "
                              "-390.0 ± 10.0 | 285.0 |")
    assert rows["naf-b"] == "| Pendulum-v1 | naf-b | 2 | -305.0 ± 5.0 | naf | 0 | - |  |"
    # the package's report (offpolicy suite report) has one grid's runs: it says it leaves
    # the table out
    s = spec.load(suites / "new-grid.yaml").select(steps=20)
    pkg = write_report(s, runner.plan(s, lambda e, entry, seed: root / "new-grid_Pendulum-v1"
                                      / entry / f"s{seed}"), out, "pkg", "cmd")
    assert "## Verdicts (pre-registered)" in pkg and "## Beside" not in pkg
    assert "each arm beside its twin in old-grid) is drawn by benchmarks/learning.py" in pkg
    # a twin that the other grid does not have is a one-line error
    (suites / "new-grid.yaml").write_text(
        (suites / "new-grid.yaml").read_text().replace("naf-b: naf,", "naf-b: nafx,"))
    with pytest.raises(OffpolicyError, match="not in old-grid: nafx"):
        learning.main()
