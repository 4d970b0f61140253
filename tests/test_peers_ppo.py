"""SB3's PPO as a peer (benchmarks/peers.py --lib sb3 --algo ppo, the refer-1m grid's sb3-ppo).

The learning-rate schedule (benchmarks/peer_common.py) is a plain function and runs anywhere;
the rest needs SB3 and torch, which live in the bench venv only (``make bench-venv``): those
tests run its interpreter and are skipped where it is absent (as in CI).
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

bench = pytest.mark.skipif(not BENCH_PYTHON.exists(), reason="no bench venv (make bench-venv)")


def test_the_learning_rate_is_annealed_as_eta_over_one_plus_a_t(monkeypatch):
    """eta / (1 + 5e-7 t) at t env steps, read from SB3's progress_remaining = 1 - t / T, with
    T the whole run's length (a resumed run's too: SB3 adds the step it resumed at)."""
    monkeypatch.syspath_prepend(str(PEERS.parent))
    import peer_common as pc

    total = 1_000_000
    rate = pc.AnnealedRate(3e-4, 5e-7, total)
    for t in (0, 2048, 100_000, 500_000, 1_000_000):
        expected = 3e-4 / (1 + 5e-7 * t)
        assert rate.at_step(t) == expected
        assert rate(1 - t / total) == pytest.approx(expected, rel=1e-12)
    assert rate(1.0) == 3e-4 and rate(0.0) == pytest.approx(2e-4, rel=1e-12)  # 3e-4 / 1.5


# Saves a trained PPO's state, restores it into a freshly built PPO and compares the two states
# array by array and their deterministic actions through the frozen VecNormalize statistics
# (which differ before the restore); then the restored model trains on with the learning rate
# of the step it is at.
ROUND_TRIP = r'''
import sys
from pathlib import Path
import gymnasium as gym
import numpy as np
sys.path.insert(0, sys.argv[2])
import peer_common as pc
import peers
from stable_baselines3.common.callbacks import BaseCallback

run_dir, total = Path(sys.argv[1]), 8192
cfg = peers.PPOConfig(n_steps=512, n_epochs=2)
class Stop(BaseCallback):  # ends learn() after step `at`, as cmd_learn ends a run
    def __init__(self, at):
        super().__init__()
        self.at = at
    def _on_step(self):
        return self.num_timesteps < self.at
def flat(model):
    arrays = []
    skeleton = pc.encode_tree(peers.model_state("sb3", model), arrays)
    return skeleton, [np.array(a) for a in arrays]
def lr(model):
    return model.policy.optimizer.param_groups[0]["lr"]
trained = peers.make_ppo(gym.make("Pendulum-v1"), cfg, 0, total)
trained.learn(total, callback=Stop(1100))  # killed mid-rollout, after two updates
assert trained.num_timesteps == 1100 and trained._n_updates == 4
assert lr(trained) == 3e-4 / (1 + 5e-7 * 1024)  # set before the update after step 1024
pc.save_checkpoint(run_dir, 1100, 1.0, {"algo": "ppo"}, peers.model_state("sb3", trained))
fresh = peers.make_ppo(gym.make("Pendulum-v1"), cfg, 0, total)
obs = np.random.default_rng(1).uniform(-1, 1, size=(8, 3))
act = lambda model: np.stack([peers.deterministic_act(model)(o) for o in obs])
assert not np.allclose(act(fresh), act(trained))
meta, state = pc.load_checkpoint(run_dir, {"algo": "ppo"}, peers._as_tensor)
assert "buffer" not in state and set(state["vec_normalize"]) == {"obs_rms", "ret_rms"}
peers.restore_model("sb3", fresh, state)
sk1, saved = flat(trained)
sk2, restored = flat(fresh)
assert sk1 == sk2 and len(saved) == len(restored)
for i, (a, b) in enumerate(zip(saved, restored)):
    assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), i
np.testing.assert_array_equal(act(fresh), act(trained))
# as cmd_learn resumes: a new rollout from step 1100, SB3 adding that step to the total
fresh.learn(total - 1100, reset_num_timesteps=False, callback=Stop(2048))
assert fresh._total_timesteps == total
assert fresh.num_timesteps == 2048 and fresh._n_updates == 6  # one more update, at 1612
assert abs(lr(fresh) - 3e-4 / (1 + 5e-7 * 1612)) < 1e-15
print("ok", len(saved))
'''


@bench
def test_a_ppo_checkpoint_restores_the_whole_learning_state(tmp_path):
    proc = subprocess.run([str(BENCH_PYTHON), "-c", ROUND_TRIP, str(tmp_path),
                           str(PEERS.parent)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith("ok")


def _learn(run_dir: Path) -> list[str]:
    return [str(BENCH_PYTHON), str(PEERS), "learn", "--lib", "sb3", "--algo", "ppo",
            "--env", "Pendulum-v1", "--steps", "4096", "--eval-every", "1024",
            "--eval-episodes", "1", "--run-dir", str(run_dir)]


def _rows(run_dir: Path, name: str) -> list[list[str]]:
    header, *lines = (run_dir / name).read_text().splitlines()
    return [header.split(","), *(line.split(",") for line in lines)]


@bench
def test_a_ppo_run_writes_eval_and_train_csv_and_a_killed_one_continues(tmp_path):
    """The PPO peer writes eval.csv as the other peers do and train.csv (a row per 1000 env
    steps: the running episode count and the mean raw return of the episodes finished since
    the previous row); killed after an evaluation, the same command continues from its
    checkpoint to the end, each row written once."""
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
    at = int(_rows(run_dir, "eval.csv")[-1][0])
    assert at in (1024, 2048, 3072)
    done = subprocess.run(_learn(run_dir), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["resumed_at"] == at and not result["skipped"]
    assert f"resuming {run_dir} at step {at}" in done.stderr

    header, *evals = _rows(run_dir, "eval.csv")
    assert header == ["step", "return_mean", "return_std", "return_se", "episodes", "wall_time"]
    assert [int(r[0]) for r in evals] == [1024, 2048, 3072, 4096]
    assert all(-2000 < float(r[1]) <= 0 and r[4] == "1" for r in evals)
    header, *train = _rows(run_dir, "train.csv")
    assert header == ["step", "wall_time", "episodes", "episode_return"]
    assert [int(r[0]) for r in train] == [1000, 2000, 3000, 4000]
    episodes = [int(r[2]) for r in train]  # Pendulum: 200 steps an episode
    assert episodes[0] == 5 and all(0 <= b - a <= 5 for a, b in zip(episodes, episodes[1:]))
    assert episodes[-1] >= 18  # the resumption loses the episode it cut (and starts anew)
    assert all(-2000 < float(r[3]) <= 0 for r in train)  # raw, not normalised, rewards

    config = json.loads((run_dir / "config.json").read_text())
    assert config["settings"]["warmup"] == 0
    assert config["settings"]["ppo"]["gamma"] == 0.995
    assert config["settings"]["ppo"]["pi_hidden"] == [64, 64]
    assert [r["at_step"] for r in config["resumed"]] == [at]
    assert not (run_dir / "checkpoint.npz").exists()
    again = subprocess.run(_learn(run_dir), capture_output=True, text=True, timeout=600)
    assert json.loads(again.stdout.strip().splitlines()[-1])["skipped"]


@bench
@pytest.mark.parametrize(("argv", "message"), [
    (["learn", "--lib", "sbx", "--algo", "ppo"], "--algo ppo is defined for --lib sb3 only"),
    (["learn", "--lib", "sb3", "--algo", "ppo", "--warmup", "100"], "PPO has no warm-up"),
    (["throughput", "--lib", "sb3", "--algo", "ppo", "--steps", "10"], "learn only")])
def test_ppo_options_that_do_not_go_together_are_usage_errors(tmp_path, argv, message):
    if argv[0] == "learn":
        argv = [*argv, "--run-dir", str(tmp_path / "run")]
    proc = subprocess.run([str(BENCH_PYTHON), str(PEERS), *argv], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"usage: peers.py {argv[0]}" in proc.stderr and message in proc.stderr
    assert not (tmp_path / "run").exists()  # refused before anything is written


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
