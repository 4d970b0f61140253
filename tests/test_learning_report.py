"""benchmarks/learning.py's report and its cross-session restore of finished runs."""

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
