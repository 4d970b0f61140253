"""benchmarks/learning.py's report and its cross-session restore of finished runs."""

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import learning  # noqa: E402
from benchmarks.learning import report, restore_finished  # noqa: E402


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


def test_finished_runs_come_back_from_the_committed_csvs(tmp_path):
    root, out = tmp_path / "runs", tmp_path / "results"
    out.mkdir()
    _fake_run(root / "naf" / "s0", [(10, -500.0), (20, -150.0)], [(10, 0.3), (20, 0.2)])
    _fake_run(root / "ddpg-refer" / "s1", [(10, -400.0)], [(10, 0.05)])  # unfinished
    first = report("refer-pendulum", root, out, "cmd", "Pendulum-v1", 20, "rp")
    assert "ddpg-refer s1 at step 10" in first
    other = tmp_path / "elsewhere"  # a new machine: only the CSVs came along
    assert restore_finished("rp", other, out, 20) == ["naf s0"]
    assert not (other / "ddpg-refer").exists()  # unfinished runs start again
    again = report("refer-pendulum", other, out, "cmd", "Pendulum-v1", 20, "rp")
    assert again.split("Mean")[0] == first.split("In progress")[0].split("Mean")[0]
    rebuilt = (other / "naf" / "s0" / "train.csv").read_text().splitlines()
    assert rebuilt[0] == "step,kl_mu_pi,far_policy_fraction" and len(rebuilt) == 3
    assert restore_finished("rp", other, out, 20) == []  # already here


def test_welch_against_references():
    """Welch's t-test against scipy's ttest_ind(equal_var=False), the Welch-Satterthwaite df
    written out, and the interval against the test: it excludes 0 exactly when p < 0.05."""
    import numpy as np
    from scipy import stats

    from benchmarks.learning import welch

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
    out.mkdir()
    for s, (er, ref) in enumerate([(-600.0, -100.0), (-500.0, -120.0), (-550.0, -90.0)]):
        _fake_run(root / "ddpg-er" / f"s{s}", [(10, er)], [(10, 5.0)])
        _fake_run(root / "ddpg-refer" / f"s{s}", [(10, ref)], [(10, 0.1)])
    _fake_run(root / "naf" / "s0", [(10, -1.0)], [(10, 1.0)])  # one run: no test
    text = report("refer", root, out, "cmd", "HalfCheetah-v5", 10, "r")
    row = next(line for line in text.splitlines() if line.startswith("| ddpg-refer - ddpg-er"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "3 / 3" and float(cells[2]) == 446.7 and float(cells[5]) < 0.01
    lo, hi = (float(x) for x in cells[6].strip("[]").split(","))
    assert 0 < lo < 446.7 < hi
    assert "naf-refer - naf" not in text


def test_every_compared_pair_names_entries_of_its_suite():
    for suite, pairs in learning.SUITE_COMPARISONS.items():
        for mine, other in pairs:
            assert {mine, other} <= set(learning.SUITES[suite]), (suite, mine, other)


def test_an_entrys_flags_override_the_suites():
    """The refer suite gives every run a 1e6 memory; ddpg-refer-mem50k sets its own, which
    must be the one the run gets."""
    from offpolicy import cli

    cmd = learning.train_command("ddpg-refer-mem50k", 0, 100_000, "HalfCheetah-v5",
                                 Path("run"), suite_flags=learning.SUITE_FLAGS["refer"])
    assert cmd[3:5] == ["train", "ddpg"]
    ns = vars(cli._train_parser("ddpg").parse_args(cmd[5:]))
    assert ns["buffer_size"] == 50_000 and ns["replay"] == "refer"
    ns = vars(cli._train_parser("ddpg").parse_args(learning.train_command(
        "ddpg-refer", 0, 100_000, "HalfCheetah-v5", Path("run"),
        suite_flags=learning.SUITE_FLAGS["refer"])[5:]))
    assert ns["buffer_size"] == 1_000_000


def test_the_legend_names_what_each_entry_runs():
    groups = {"ddpg": [], "ddpg-input1": [], "sb3-ddpg": [], "pfrl-acer": []}
    text = learning.entries_legend(groups)
    assert "ddpg-input1 = `offpolicy train ddpg --ddpg.action-input-layer 1`" in text
    assert "sb3-ddpg = `benchmarks/peers.py --lib sb3`" in text and "pfrl-acer = " in text
    assert "ddpg = " not in text.replace("-ddpg = ", "")  # a plain entry needs no legend
    assert learning.entries_legend({"ddpg": []}) == ""


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
    final = learning.final_comparisons(groups, [("a", "b")])
    curve = learning.final_comparisons(groups, [("a", "b")], over_curve=True)
    row = lambda text: [c.strip() for c in text.strip().splitlines()[-1].strip("|").split("|")]  # noqa: E731
    assert final.lstrip().startswith("Final return") and float(row(final)[2]) == 100.0 - 10.0
    assert curve.lstrip().startswith("Mean return over evaluations")
    assert float(row(curve)[2]) == (50 + 60 + 55) / 3 - (0 + 15 + 15) / 3


def test_rows_with_different_seeds_say_which():
    assert learning.seed_ranges([4, 0, 1, 2, 7, 9, 8]) == "0-2, 4, 7-9"
    assert learning.seed_ranges([3]) == "3" and learning.seed_ranges([1, 1, 2]) == "1-2"
    same = {"a": [Path("s0"), Path("s1")], "b": [Path("s1"), Path("s0")]}
    assert learning.seeds_line(same) == ""
    text = learning.seeds_line({"a": [Path(f"s{i}") for i in range(10)],
                                "b": [Path(f"s{i}") for i in range(5)]})
    assert "a 0-9; b 0-4." in text


def test_every_entry_of_ours_parses_as_a_train_command():
    """A typo in a suite's flags would only surface hours into a benchmark: every entry of
    every suite that is ours must parse with `offpolicy train`."""
    from offpolicy import cli

    for suite, entries in learning.SUITES.items():
        for entry in entries:
            if learning.is_peer(entry):
                continue
            cmd = learning.train_command(entry, 0, 1000, "Pendulum-v1", Path("run"),
                                         suite_flags=learning.SUITE_FLAGS.get(suite))
            cli._train_parser(cmd[4]).parse_args(cmd[5:])
