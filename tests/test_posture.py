"""benchmarks/posture.py and peer_common.posture: a body on its back, from the torso's pitch."""

import csv
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import posture  # noqa: E402

pc = posture.pc


class _PitchEnv:
    """Episodes of ``length`` steps whose torso pitch (qpos[2]) after each step is
    ``pitch(episode, t)``; reward 1 per step."""

    def __init__(self, length, pitch):
        self.length, self.pitch = length, pitch
        self.unwrapped = SimpleNamespace(data=SimpleNamespace(qpos=np.zeros(9)))
        self.episode, self.seeds = -1, []

    def reset(self, seed=None):
        self.episode, self.t = self.episode + 1, 0
        self.seeds.append(seed)
        return np.zeros(3), {}

    def step(self, action):
        self.unwrapped.data.qpos[2] = self.pitch(self.episode, self.t)
        self.t += 1
        return np.zeros(3), 1.0, False, self.t == self.length, {}


def test_posture_counts_steps_on_the_back_after_the_first_ones_with_the_pitch_wrapped():
    """Episode 0 flips at step 250 (pitch +3.0), episode 1 turns a full circle and more
    (2 pi + 0.2: upright), episode 2 is on its back the other way round (-3.0) from the
    start; the first 200 steps of each episode are not counted."""
    def pitch(ep, t):
        return [3.0 if t >= 250 else 0.1, 2 * np.pi + 0.2, -3.0 if t >= 100 else 0.0][ep]

    env = _PitchEnv(400, pitch)
    out = pc.posture(env, 3, 10_007, lambda obs: np.zeros(1))
    assert env.seeds == [10_007, 10_008, 10_009]
    counted = 3 * 200  # steps 200-399 of each episode
    want_back = (150 + 0 + 200) / counted
    assert out["on_back_fraction"] == pytest.approx(want_back)
    want_mean = (50 * 0.1 + 150 * 3.0 + 200 * 0.2 + 200 * -3.0) / counted
    assert out["mean_pitch"] == pytest.approx(want_mean)
    assert out["return_mean"] == 400.0 and out["episodes"] == 3
    short = pc.posture(_PitchEnv(50, lambda ep, t: 3.0), 2, 0, lambda obs: 0)
    assert short["on_back_fraction"] == 1.0  # shorter than the skip: every step counts


def _eval_csv(d, steps):
    lines = ["step,return_mean,return_std,return_se,episodes,wall_time"]
    lines += [f"{s},1250.0,10.0,2.0,20,1.0" for s in steps]
    (d / "eval.csv").write_text("\n".join(lines) + "\n")


def test_main_reads_peers_files_plays_ours_and_leaves_out_what_it_cannot_read(
        tmp_path, monkeypatch, capsys):
    root = tmp_path / "suite"
    peer = root / "sb3-sac" / "s2"
    peer.mkdir(parents=True)
    (peer / "config.json").write_text(json.dumps({"settings": {"env": "HalfCheetah-v5"}}))
    _eval_csv(peer, [50000, 100000])
    (peer / pc.POSTURE_FILE).write_text(json.dumps(
        {"return_mean": 1249.0, "on_back_fraction": 0.97, "mean_pitch": 2.9}))
    late = root / "sbx-sac" / "s2"  # a peer run finished before peers.py wrote posture.json
    late.mkdir(parents=True)
    (late / "config.json").write_text(json.dumps({"settings": {"env": "HalfCheetah-v5"}}))
    _eval_csv(late, [100000])
    restored = root / "sac-sb3" / "s0"  # only the committed CSV
    restored.mkdir(parents=True)
    _eval_csv(restored, [100000])
    for seed, steps in ((10, 100000), (3, 100000), (4, 100000)):
        d = root / "sac-sb3" / f"s{seed}"
        d.mkdir(parents=True)
        env = "Pendulum-v1" if seed == 4 else "HalfCheetah-v5"
        (d / "config.yaml").write_text(f"algo: sac\ntrain:\n  env: {env}\n  steps: {steps}\n")
        _eval_csv(d, [50000] if seed == 10 else [50000, 100000])
        (d / "checkpoints").mkdir()
        (d / "checkpoints" / "latest").write_text("step-000100000\n")
    played = []

    def ours(run_dir, env_id, seed):
        played.append((Path(run_dir).name, env_id, seed))
        return {"return_mean": 3900.0, "on_back_fraction": 0.0, "mean_pitch": -0.1}

    monkeypatch.setattr(posture, "ours", ours)
    out_csv = tmp_path / "res" / "posture.csv"
    assert posture.main([str(root), "--results", str(out_csv)]) == 0
    assert played == [("s3", "HalfCheetah-v5", 3)]
    cap = capsys.readouterr()
    err = {line.split(":")[0]: line for line in cap.err.splitlines()}
    assert "restored from a CSV" in err["sac-sb3 s0"]
    assert "not a planar MuJoCo body" in err["sac-sb3 s4"]
    assert "unfinished" in err["sac-sb3 s10"]
    assert "no checkpoint to play and no posture.json" in err["sbx-sac s2"]
    assert "sb3-sac s2: final return 1250.0; on its back 97% of steps" in cap.out
    assert "ON ITS BACK" in cap.out.splitlines()[1]
    rows = list(csv.DictReader(out_csv.open()))
    assert [(r["entry"], r["seed"], r["on_back"]) for r in rows] == [
        ("sac-sb3", "3", "0"), ("sb3-sac", "2", "1")]
    with pytest.raises(SystemExit, match="no finished run"):
        posture.main([str(root), "--entries", "sbx-sac"])


def test_results_keep_the_rows_of_runs_not_read_now(tmp_path, monkeypatch):
    """--results merges: a run whose checkpoint stayed on another machine keeps its row, a
    run read again replaces its own."""
    root = tmp_path / "suite"
    d = root / "sac-sb3" / "s3"
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("algo: sac\ntrain:\n  env: HalfCheetah-v5\n  steps: 100000\n")
    _eval_csv(d, [100000])
    (d / "checkpoints").mkdir()
    (d / "checkpoints" / "latest").write_text("step-000100000\n")
    monkeypatch.setattr(posture, "ours", lambda run_dir, env_id, seed: {
        "return_mean": 3900.0, "on_back_fraction": 0.0, "mean_pitch": -0.1})
    out_csv = tmp_path / "posture.csv"
    head = "env,entry,seed,step,final_return,posture_return,on_back_fraction,mean_pitch,on_back\n"
    out_csv.write_text(head + "HalfCheetah-v5,sac-sb3,3,100000,1.0,1.0,1.0,-2.9,1\n"
                       "HalfCheetah-v5,sac-sb3,11,100000,2.0,2.0,1.0,-2.9,1\n"
                       "HalfCheetah-v5,a-peer,0,100000,3.0,3.0,0.0,0.1,0\n")
    assert posture.main([str(root), "--results", str(out_csv)]) == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert [(r["entry"], r["seed"], r["on_back"]) for r in rows] == [
        ("a-peer", "0", "0"), ("sac-sb3", "3", "0"), ("sac-sb3", "11", "1")]
