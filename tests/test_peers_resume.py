"""A killed peer run (benchmarks/peers.py: SB3 and SBX) continues from its last evaluation.

The peers live in the bench venv (``make bench-venv``: torch, SB3, SBX), never in ours, so these
tests run the bench venv's interpreter and are skipped where it is absent (as in CI).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
PEERS = ROOT / "benchmarks" / "peers.py"

pytestmark = pytest.mark.skipif(not BENCH_PYTHON.exists(),
                                reason="no bench venv (make bench-venv)")

# Saves a trained model's state, restores it into a freshly built model and compares the two
# states array by array, and their actions (which differ before the restore).
ROUND_TRIP = r'''
import sys
from pathlib import Path
import gymnasium as gym
import numpy as np
sys.path.insert(0, sys.argv[4])
import peer_baselines
import peer_common as pc
import peers

lib, algo, run_dir, variant = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[5]
cfg = peer_baselines.BaselineConfig((32, 32), 32, 1e-3, buffer_size=5000)
def flat(model):
    arrays = []
    skeleton = pc.encode_tree(peers.model_state(lib, model), arrays)
    return skeleton, [np.array(a) for a in arrays]
trained = peer_baselines.make_baseline(lib, algo, gym.make("Pendulum-v1"), cfg, 100, 0, variant)
trained.learn(300)
pc.save_checkpoint(run_dir, 300, 1.0, {"algo": algo}, peers.model_state(lib, trained))
fresh = peer_baselines.make_baseline(lib, algo, gym.make("Pendulum-v1"), cfg, 100, 0, variant)
obs = np.random.default_rng(1).uniform(-1, 1, size=(8, 3)).astype(np.float32)
act = lambda model: model.predict(obs, deterministic=True)[0]
assert not np.allclose(act(fresh), act(trained))
assert pc.load_checkpoint(run_dir, {"algo": "other"}) is None  # other settings: start afresh
meta, state = pc.load_checkpoint(run_dir, {"algo": algo}, peers._as_tensor)
peers.restore_model(lib, fresh, state)
sk1, saved = flat(trained)
sk2, restored = flat(fresh)
assert sk1 == sk2 and len(saved) == len(restored)
for i, (a, b) in enumerate(zip(saved, restored)):
    assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), i
np.testing.assert_array_equal(act(fresh), act(trained))
assert fresh.num_timesteps == 300 and fresh._n_updates == 200
fresh.learn(100, reset_num_timesteps=False)  # it trains on from there
assert fresh.num_timesteps == 400 and fresh._n_updates == 300
print("ok", len(saved))
'''


@pytest.mark.parametrize(("lib", "algo", "variant"), [
    ("sb3", "td3", "own"), ("sb3", "sac", "own"), ("sbx", "td3", "own"), ("sbx", "sac", "own"),
    ("sbx", "td3", "sb3")])  # SBX's TD3 with SB3's choices (benchmarks/sbx_variant.py)
def test_a_checkpoint_restores_the_whole_learning_state(tmp_path, lib, algo, variant):
    proc = subprocess.run([str(BENCH_PYTHON), "-c", ROUND_TRIP, lib, algo, str(tmp_path),
                           str(PEERS.parent), variant], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith("ok")


def _learn(run_dir: Path) -> list[str]:
    return [str(BENCH_PYTHON), str(PEERS), "learn", "--lib", "sbx", "--algo", "td3",
            "--env", "Pendulum-v1", "--steps", "600", "--eval-every", "200",
            "--eval-episodes", "1", "--warmup", "100", "--run-dir", str(run_dir)]


def _steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "eval.csv").read_text().splitlines()[1:]
    return [int(line.split(",")[0]) for line in lines]


def test_a_killed_peer_run_continues_from_its_last_evaluation(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(_learn(run_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 600
    while not (run_dir / "checkpoint.npz").exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.kill()
    proc.communicate()
    at = _steps(run_dir)[-1]
    assert at in (200, 400)
    done = subprocess.run(_learn(run_dir), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["resumed_at"] == at and not result["skipped"]
    assert f"resuming {run_dir} at step {at}" in done.stderr
    assert _steps(run_dir) == [200, 400, 600]  # each evaluation once, none redone or lost
    assert not (run_dir / "checkpoint.npz").exists()  # a finished run keeps no checkpoint
    config = json.loads((run_dir / "config.json").read_text())
    assert [r["at_step"] for r in config["resumed"]] == [at]
    again = subprocess.run(_learn(run_dir), capture_output=True, text=True, timeout=600)
    assert json.loads(again.stdout.strip().splitlines()[-1])["skipped"]


@pytest.mark.parametrize(("argv", "message"), [
    (["learn", "--lib", "sbx", "--algo", "td3", "--update", "ours"],
     "--update ours is defined for --lib sb3"),
    (["learn", "--lib", "sb3", "--algo", "sac", "--steps", "0"], "--steps, --eval-every"),
    (["throughput", "--lib", "sb3", "--algo", "td3", "--steps", "10", "--init", "ours"],
     "apply to learn only")])
def test_options_that_do_not_go_together_are_usage_errors(tmp_path, argv, message):
    if argv[0] == "learn":
        argv = [*argv, "--run-dir", str(tmp_path / "run")]
    proc = subprocess.run([str(BENCH_PYTHON), str(PEERS), *argv], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"usage: peers.py {argv[0]}" in proc.stderr and message in proc.stderr
    assert not (tmp_path / "run").exists()  # refused before anything is written



@pytest.mark.parametrize(("argv", "message"), [
    (["learn", "--steps", "0"], "--steps, --eval-every and --eval-episodes must be > 0"),
    (["learn", "--steps", "100", "--warmup", "-1"], "--warmup >= 0"),
    (["throughput", "--steps", "10", "--warmup", "-1"], "--steps must be > 0")])
def test_pfrl_options_out_of_range_are_usage_errors(tmp_path, argv, message):
    """peers_pfrl.py reports values that parse but are out of range as argparse does (the
    subcommand's usage line, exit 2), before an env is made or a run directory written."""
    if argv[0] == "learn":
        argv = [*argv, "--run-dir", str(tmp_path / "run")]
    proc = subprocess.run([str(BENCH_PYTHON), str(PEERS.with_name("peers_pfrl.py")), *argv],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"usage: peers_pfrl.py {argv[0]}" in proc.stderr and message in proc.stderr
    assert not (tmp_path / "run").exists()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
