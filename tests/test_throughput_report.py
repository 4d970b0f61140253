"""benchmarks/throughput.py's summary: medians, paired peer ratios and accelerator rows."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.throughput import paired_ratios, summarize  # noqa: E402


def _row(rnd, entry, env, upd="", backend="cpu", device="cpu"):
    return {"round": str(rnd), "entry": entry, "env_steps_per_s": str(env),
            "update_per_s": str(upd), "loop_ratio": str(env / upd) if upd else "",
            "gflop_per_update": "0.9" if upd else "", "matmul_gflops": "200" if upd else "",
            "flop_efficiency": "0.5" if upd else "", "backend": backend, "device": device,
            "versions": ""}


def test_cpu_summary_has_medians_paired_ratios_and_reference_equivalents(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [_row(1, "ours-ddpg", 400, 450), _row(1, "sbx-ddpg", 200),
            _row(2, "ours-ddpg", 300, 350), _row(2, "sbx-ddpg", 250),
            _row(3, "ours-ddpg", 350, 400), _row(3, "sbx-ddpg", 100),
            _row(1, "ours-ace-5-1", 100, 110), _row(2, "ours-ace-5-1", 90, 100)]
    by = {}
    for r in rows:
        by.setdefault(r["entry"], []).append(r)
    assert paired_ratios(by, "ours-ddpg", "sbx-ddpg", "env_steps_per_s") == [2.0, 1.2, 3.5]
    text = summarize(rows, tmp_path, "t", "cmd")
    assert "| ours-ddpg | 350.0 | 400.0 |" in text  # medians over rounds
    assert "- sbx-ddpg: 1.75x" in text and "(median 2.00x)" in text
    assert "- ours-ace-5-1: " + format(2.6 * 105 / 200, ".2f") in text  # ref GFLOP equivalent
    assert "Accelerator" not in text
    assert (tmp_path / "throughput_t.md").exists() and (tmp_path / "throughput_t.png").exists()


def test_accelerator_rows_say_efficiency_is_not_meaningful(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [_row(1, "ours-ace-5-1", 400, 1200, "gpu", "NVIDIA H100 80GB HBM3")]
    rows[0]["machine"] = "Some Xeon, 16 cores"  # measured elsewhere: the summary says where
    text = summarize(rows, tmp_path, "t", "cmd")
    assert "Machine: Some Xeon, 16 cores;" in text
    assert "Accelerator: NVIDIA H100 80GB HBM3" in text and "not meaningful" in text
    assert "Equivalent efficiency" not in text and "- ours-ace-5-1:" not in text
