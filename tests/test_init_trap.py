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


def _run(root: Path, entry: str, seed: int, steps: int, evals: list[int], ckpt: bool) -> None:
    d = root / "Hopper-v5" / entry / f"s{seed}"
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"algo: td3\ntrain:\n  env: Hopper-v5\n  steps: {steps}\n")
    lines = ["step,return_mean,return_std,return_se,episodes,wall_time"]
    lines += [f"{s},37.6,0.1,0.02,10,1.0" for s in evals]
    (d / "eval.csv").write_text("\n".join(lines) + "\n")
    if ckpt:
        (d / "checkpoints" / "latest").mkdir(parents=True)


def test_unfinished_runs_are_left_out_and_seeds_sort_as_numbers(tmp_path, monkeypatch, capsys):
    _run(tmp_path, "td3", 2, 10000, [], ckpt=True)  # header only: no evaluation yet
    _run(tmp_path, "td3", 10, 10000, [5000], ckpt=True)  # short of its budget
    _run(tmp_path, "td3", 3, 10000, [10000], ckpt=False)  # finished, nothing to play
    monkeypatch.setattr(sys, "argv", ["init_trap.py", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="no run with a checkpoint"):
        init_trap.main()
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == ["Hopper-v5 td3 s2", "Hopper-v5 td3 s3",
                                                    "Hopper-v5 td3 s10"]
    assert "unfinished (no evaluation yet of 10000)" in err[0]
    assert "no checkpoint to play" in err[1]
    assert "unfinished (evaluated up to step 5000 of 10000)" in err[2]
