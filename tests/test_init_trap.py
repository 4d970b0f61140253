"""benchmarks/init_trap.py: Fisher's exact test against SciPy, and which runs it plays."""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import fisher_exact

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import init_trap  # noqa: E402


def test_fisher_two_sided_matches_scipy_on_random_tables():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b, c, d = (int(x) for x in rng.integers(0, 15, size=4))
        if a + b == 0 or c + d == 0:
            continue
        want = fisher_exact([[a, b], [c, d]], alternative="two-sided").pvalue
        assert init_trap.fisher_two_sided(a, b, c, d) == pytest.approx(want, rel=1e-9, abs=1e-12)
    # the committed reading: 9 of 14 against 2 of 14
    assert init_trap.fisher_two_sided(9, 5, 2, 12) == pytest.approx(0.018, abs=5e-4)


def _run(root: Path, entry: str, seed: int, steps: int | None, evals: list[int] | None,
         ckpt: bool, env: str = "Hopper-v5") -> None:
    d = root / env / entry / f"s{seed}"
    d.mkdir(parents=True)
    if steps is not None:  # a run restored from a committed CSV has no config.yaml
        (d / "config.yaml").write_text(f"algo: td3\ntrain:\n  env: {env}\n  steps: {steps}\n")
    if evals is not None:
        lines = ["step,return_mean,return_std,return_se,episodes,wall_time"]
        lines += [f"{s},37.6,0.1,0.02,10,1.0" for s in evals]
        (d / "eval.csv").write_text("\n".join(lines) + "\n")
    if ckpt:  # the pointer is a file naming the checkpoint
        (d / "checkpoints").mkdir()
        (d / "checkpoints" / "latest").write_text(f"step-{max(evals):09d}\n")


def test_unfinished_runs_are_left_out_and_seeds_sort_as_numbers(tmp_path, monkeypatch, capsys):
    _run(tmp_path, "td3", 2, 10000, [], ckpt=False)  # header only: no evaluation yet
    _run(tmp_path, "td3", 4, 10000, None, ckpt=False)  # no eval.csv at all yet
    _run(tmp_path, "td3", 10, 10000, [5000], ckpt=True)  # short of its budget
    _run(tmp_path, "td3", 3, 10000, [10000], ckpt=False)  # finished, nothing to play
    _run(tmp_path, "td3", 5, None, [10000], ckpt=False)  # restored from a CSV: no config
    monkeypatch.setattr(sys, "argv", ["init_trap.py", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="no run with a checkpoint"):
        init_trap.main()
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == [
        "Hopper-v5 td3 s2", "Hopper-v5 td3 s3", "Hopper-v5 td3 s4", "Hopper-v5 td3 s5",
        "Hopper-v5 td3 s10"]
    assert "unfinished (no evaluation yet)" in err[0] and "no evaluation yet" in err[2]
    assert "no checkpoint to play" in err[1] and "no checkpoint to play" in err[3]
    assert "unfinished (evaluated up to step 5000 of 10000)" in err[4]


def test_counts_and_fisher_tests_are_per_env_and_entry(tmp_path, monkeypatch, capsys):
    """The same entry on two envs is two samples; a corner run is one whose episode ends
    within 50 steps with every joint's mean action at least 0.95 in size."""
    caught = {("Hopper-v5", 0), ("Hopper-v5", 1), ("Walker2d-v5", 2)}
    for env in ("Hopper-v5", "Walker2d-v5"):
        for seed in range(3):
            _run(tmp_path, "td3", seed, 10000, [10000], ckpt=True, env=env)

    def episode(run_dir, env_id):
        seed = int(Path(run_dir).name[1:])
        if (env_id, seed) in caught:
            return {"length": 22, "mean_action": np.array([1.0, 0.97, -1.0 if seed else 1.0])}
        return {"length": 300, "mean_action": np.array([0.1, 0.8, 0.3])}

    monkeypatch.setattr(init_trap, "one_episode", episode)
    monkeypatch.setattr(sys, "argv", ["init_trap.py", "--out", str(tmp_path),
                                      "--results", str(tmp_path / "res")])
    assert init_trap.main() == 0
    out = capsys.readouterr().out
    assert "td3 on Hopper-v5: 2 of 3 caught in a corner (seeds [0, 1]); in the +1 trap 1 " \
           "(seeds [0])" in out
    assert "td3 on Walker2d-v5: 1 of 3 caught in a corner (seeds [2]); in the +1 trap 0" in out
    want = init_trap.fisher_two_sided(2, 1, 1, 2)
    assert f"td3 on Hopper-v5 against td3 on Walker2d-v5: Fisher's exact test p = {want:.3f}" \
        in out
    rows = (tmp_path / "res" / "init_trap.csv").read_text().splitlines()
    assert len(rows) == 7 and rows[1].startswith("Hopper-v5,td3,0,10000,37.6,0.02,22,")
