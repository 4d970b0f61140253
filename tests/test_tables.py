"""`offpolicy table` / benchmark tables: best and final evaluation per run, mean +- s.e., against
a plain-Python computation on random evaluation files (finished and unfinished runs)."""

import math

import numpy as np
from _helpers import run_cli

from offpolicy.plotting import format_table, table_rows


def write_eval(d, steps, returns):
    d.mkdir(parents=True)
    lines = ["step,return_mean,return_std,return_se,episodes,wall_time"]
    lines += [f"{s},{r!r},0.0,0.0,20,{i}.0" for i, (s, r) in enumerate(zip(steps, returns))]
    (d / "eval.csv").write_text("\n".join(lines) + "\n")
    return d


def reference(curves):
    """Every run cut at the last step all reached; best and final there; mean, sample s.e."""
    last = min(max(steps) for steps, _ in curves)
    best, final = [], []
    for steps, rets in curves:
        kept = [r for s, r in zip(steps, rets) if s <= last]
        best.append(max(kept))
        final.append(kept[-1])

    def mean_se(x):
        m = sum(x) / len(x)
        if len(x) < 2:
            return m, math.nan
        var = sum((v - m) ** 2 for v in x) / (len(x) - 1)
        return m, math.sqrt(var / len(x))

    return last, mean_se(best), mean_se(final)


def test_table_rows_match_reference_with_unfinished_runs(tmp_path):
    rng = np.random.default_rng(0)
    groups, curves = {}, {}
    for name, lengths in {"a": [10, 10, 7], "b": [4], "c": [10, 10]}.items():
        groups[name], curves[name] = [], []
        for seed, n in enumerate(lengths):
            steps = [10_000 * (i + 1) for i in range(n)]
            rets = rng.normal(0, 500, n).tolist()
            groups[name].append(write_eval(tmp_path / name / f"s{seed}", steps, rets))
            curves[name].append((steps, rets))
    rows = {r["algorithm"]: r for r in table_rows(groups)}
    for name in groups:
        last, (bm, bse), (fm, fse) = reference(curves[name])
        r = rows[name]
        assert r["steps"] == last and r["runs"] == len(groups[name])
        assert math.isclose(r["best_mean"], bm, rel_tol=1e-12)
        assert math.isclose(r["final_mean"], fm, rel_tol=1e-12)
        for got, want in ((r["best_se"], bse), (r["final_se"], fse)):
            assert (math.isnan(got) and math.isnan(want)) or math.isclose(got, want, rel_tol=1e-9)
    text = format_table(list(rows.values()))
    assert "(1 run)" in text.splitlines()[3] and "±" not in text.splitlines()[3]  # row b
    assert "nan" not in text


def test_table_command_prints_the_rows(tmp_path):
    write_eval(tmp_path / "x" / "s0", [10, 20], [1.0, 3.0])
    proc = run_cli("table", tmp_path / "x" / "s0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| 20 | 3.000 (1 run) | 3.000 (1 run) |" in proc.stdout


def test_small_returns_keep_three_decimals():
    """Returns in [0, 1] (Platform) would all print as 1.0 with one decimal."""
    from offpolicy.plotting import format_table

    rows = [{"algorithm": "a", "runs": 3, "steps": 10, "best_mean": 0.9951, "best_se": 0.0049,
             "final_mean": 0.985, "final_se": 0.0121},
            {"algorithm": "b", "runs": 1, "steps": 10, "best_mean": -151.26,
             "best_se": float("nan"), "final_mean": -1500.0, "final_se": float("nan")}]
    text = format_table(rows)
    assert "0.995 ± 0.005 | 0.985 ± 0.012" in text
    assert "-151.3 (1 run) | -1500.0 (1 run)" in text
