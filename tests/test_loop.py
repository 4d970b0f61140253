"""The training loop end to end: compilation, determinism, time limits, resume, Ctrl-C, API."""

from __future__ import annotations

import json
import signal

import jax
import numpy as np
import pytest
import toy_envs
import yaml
from _helpers import (
    SUBPROCESS_TIMEOUT,
    TINY_OVERRIDES,
    latest_step,
    read_csv,
    run_cli,
    signal_when,
    start_cli,
    tiny_run,
    wait_for,
)
from replay_tables import table as ReplayBuffer

import offpolicy
from offpolicy.errors import OffpolicyError
from offpolicy.registry import RunConfig
from offpolicy.replay.samplers import gather
from offpolicy.training.run import Run


def _replay_meta(ckpt_dir) -> dict:
    with np.load(ckpt_dir / "replay.npz", allow_pickle=False) as z:
        return json.loads(bytes(z["meta"]).decode())


def _ckpt_dir(run_dir, step=None):
    step = latest_step(run_dir) if step is None else step
    return run_dir / "checkpoints" / f"step-{step:09d}"


# ---------------------------------------------------------------------- (a) one compilation
@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "normalized"])
def test_update_compiles_exactly_once(normalize):
    run = tiny_run(steps=400, eval_every=150, log_every=100, checkpoint_every=10_000,
                   normalize_obs=normalize, normalize_reward=normalize)
    t = Run(run, None)
    assert t.compile_count == 0
    summary = t.train(until=300)
    assert summary["status"] == "completed" and t.step == 300
    assert t.compile_count == 1
    # continuing (after evaluations and metric flushes) reuses the compiled update
    t.train(until=400)
    assert t.step == 400
    assert t.compile_count == 1
    assert [r["step"] for r in t.eval_history] == [150, 300, 400]


# ---------------------------------------------------------------------- (b) determinism
def _short_run(run_dir, seed):
    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=seed, run_dir=run_dir,
                           eval_every=200, log_every=100, checkpoint_every=10_000,
                           **TINY_OVERRIDES)
    summary = agent.learn(400)
    assert summary["status"] == "completed"


def _strip(rows, drop):
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def test_same_seed_same_eval_csv(tmp_path):
    _short_run(tmp_path / "a", 0)
    _short_run(tmp_path / "b", 0)
    _short_run(tmp_path / "c", 1)
    ev = {k: read_csv(tmp_path / k / "eval.csv") for k in "abc"}
    assert [int(r["step"]) for r in ev["a"]] == [200, 400]
    assert _strip(ev["a"], {"wall_time"}) == _strip(ev["b"], {"wall_time"})
    # the losses logged along the way are identical too
    tr = {k: read_csv(tmp_path / k / "train.csv") for k in "ab"}
    assert len(tr["a"]) == 4
    drop = {"wall_time", "steps_per_s", "updates_per_s"}
    assert _strip(tr["a"], drop) == _strip(tr["b"], drop)
    # ...and the comparison is not vacuous: another seed gives other returns
    assert [r["return_mean"] for r in ev["a"]] != [r["return_mean"] for r in ev["c"]]


# ---------------------------------------------------------------------- (c) time limits
class _SampleSpy:
    """Wraps ``replay.sample`` and records every batch the loop draws for an update."""

    def __init__(self, fn):
        self.fn, self.batches = fn, []

    def __call__(self, *args, **kwargs):
        idx, batch = self.fn(*args, **kwargs)
        self.batches.append({k: np.array(v) for k, v in batch.items()})
        return idx, batch


def _run_toy(env_id, steps=200):
    run = tiny_run(env=f"toy_envs:{env_id}", steps=steps, eval_every=10_000, log_every=100,
                   checkpoint_every=10_000)
    t = Run(run, None)
    spy = _SampleSpy(t.replay.sample)
    t.replay.sample = spy
    t.train(until=steps)
    assert spy.batches, "no updates ran"
    assert t.compile_count == 1
    return t, spy.batches


def _step_index(obs):  # obs[..., 0] = t / k
    return np.round(obs[..., 0] * toy_envs.EPISODE_STEPS).astype(int)


@pytest.mark.parametrize("env_id", ["ToyTerminate-v0", "ToyTruncate-v0"])
def test_truncation_bootstraps_termination_does_not(env_id):
    terminate = env_id == "ToyTerminate-v0"
    k = toy_envs.EPISODE_STEPS
    t, batches = _run_toy(env_id, steps=200)
    rb = t.replay.storage
    idx = np.flatnonzero(rb.valid)
    assert len(idx) == 200 == len(rb)
    nxt = (idx + 1) % rb.capacity
    t_obs, t_next = _step_index(rb.obs[idx]), _step_index(rb.obs[nxt])
    # next observations are the env's, never the reset observation of the next episode
    np.testing.assert_array_equal(t_next, t_obs + 1)
    last = t_next == k
    assert last.sum() == 200 // k == t.episodes
    # stored flags: exactly the last step of each episode, of the right kind
    np.testing.assert_array_equal(rb.terminated[idx], last if terminate else False)
    np.testing.assert_array_equal(rb.truncated[idx], False if terminate else last)
    # what the update saw: discount 0 exactly on terminal transitions, 1 elsewhere
    seen_last = 0
    for b in batches:
        is_last = _step_index(b["next_obs"]) == k
        seen_last += int(is_last.sum())
        expected = np.where(is_last & terminate, 0.0, 1.0).astype(np.float32)
        np.testing.assert_array_equal(b["discount"], expected)
    assert seen_last > 0
    # ... and in the DDPG target: y = r on termination, r + gamma Q'(s', mu'(s')) otherwise
    batch = gather(rb, idx[last])
    _, m, _ = t.agent.update(t.state, batch, jax.random.PRNGKey(0))
    gap = float(m["target_mean"]) - float(np.mean(batch["reward"]))
    if terminate:
        assert gap == pytest.approx(0.0, abs=1e-5)
    else:
        assert abs(gap) > 1e-4


# ---------------------------------------------------------------------- (d) resume after kill
TRAIN_3000 = ["train", "ddpg", "--env", "Pendulum-v1", "--steps", "3000", "--eval-every", "1000",
              "--checkpoint-every", "500", "--eval-episodes", "2", "--ddpg.hidden", "32", "32",
              "--batch-size", "16", "--quiet"]


def test_resume_after_sigkill(tmp_path):
    run_dir = tmp_path / "D"
    p = start_cli(*TRAIN_3000, "--run-dir", "D", cwd=tmp_path)
    try:
        wait_for(lambda: (latest_step(run_dir) or 0) >= 1000, p)
        assert p.poll() is None, "the run finished before it could be killed"
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=SUBPROCESS_TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == -signal.SIGKILL

    step = latest_step(run_dir)
    assert step is not None and 1000 <= step < 3000 and step % 500 == 0
    ckpt = _ckpt_dir(run_dir, step)
    meta = json.loads((ckpt / "meta.json").read_text())
    rmeta = _replay_meta(ckpt)
    assert meta["step"] == step and meta["has_replay"]
    assert rmeta["num_valid"] == step  # one transition per env step (the buffer never wraps)

    # what a resume restores, checked in-process before the CLI resumes
    saved = ReplayBuffer(rmeta["capacity"], tuple(rmeta["obs_shape"]), rmeta["action_dim"],
                         {k: tuple(v) for k, v in rmeta["extras"].items()})
    saved.load(ckpt / "replay.npz")
    def files():  # the lock file is the lock's: the killed run's is taken over and removed
        return sorted(p.name for p in run_dir.rglob("*") if p.name != ".lock")

    listing = files()
    run = RunConfig.from_dict(yaml.safe_load((run_dir / "config.yaml").read_text()))
    t = Run(run, run_dir, resume=True)
    assert t.step == step and t.episodes == meta["collector"]["episodes"]
    st = t.replay.storage
    assert len(t.replay) == rmeta["num_valid"] and st.size == rmeta["size"]
    assert st.head == rmeta["head"] and not st.episodes_open
    for k in ("obs", "action", "reward", "terminated", "truncated", "valid"):
        np.testing.assert_array_equal(getattr(st, k), getattr(saved.storage, k), err_msg=k)
    assert (t.replay.sampler.selector.rng.bit_generator.state
            == saved.sampler.selector.rng.bit_generator.state)
    assert t.collector.rng.bit_generator.state == meta["collector"]["rng"]
    assert t.collector.noise.state_dict() == meta["collector"]["noise"]
    t.close()  # releases the run directory's lock for the CLI's resume below
    assert files() == listing  # constructing wrote nothing

    proc = run_cli(*TRAIN_3000, "--run-dir", "D", "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(run_dir / "eval.csv")
    assert [int(r["step"]) for r in rows] == [1000, 2000, 3000]
    train_steps = [int(r["step"]) for r in read_csv(run_dir / "train.csv")]
    assert train_steps == sorted(set(train_steps)) and train_steps[-1] == 3000
    assert latest_step(run_dir) == 3000
    final = _replay_meta(_ckpt_dir(run_dir, 3000))
    # the resumed replay started from the checkpoint's transitions and added the rest
    assert final["num_valid"] == 3000
    final_meta = json.loads((_ckpt_dir(run_dir, 3000) / "meta.json").read_text())
    assert final_meta["collector"]["episodes"] >= meta["collector"]["episodes"]


# ---------------------------------------------------------------------- (e) Ctrl-C
def test_sigint_leaves_resumable_checkpoint(tmp_path):
    run_dir = tmp_path / "E"
    args = TRAIN_3000
    p = start_cli(*args, "--run-dir", "E", cwd=tmp_path)
    # a first checkpoint proves the loop (and its signal handler) is running
    _, err = signal_when(lambda: (latest_step(run_dir) or 0) >= 500, p, signal.SIGINT)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted at step" in err and "--resume" in err
    stopped = int(err.split("interrupted at step")[1].split(";")[0])
    assert 500 <= stopped < 3000
    assert latest_step(run_dir) == stopped  # the checkpoint of the interrupted step
    assert _replay_meta(_ckpt_dir(run_dir, stopped))["num_valid"] == stopped

    proc = run_cli(*args, "--run-dir", "E", "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [int(r["step"]) for r in read_csv(run_dir / "eval.csv")] == [1000, 2000, 3000]
    assert latest_step(run_dir) == 3000
    assert _replay_meta(_ckpt_dir(run_dir, 3000))["num_valid"] == 3000


# ---------------------------------------------------------------------- (f) Python API
def test_api_make_learn_save_load_act(tmp_path):
    import gymnasium as gym

    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, hidden=(32, 32), eval_episodes=2,
                           eval_every=500, quiet=True, batch_size=16)
    summary = agent.learn(600)
    assert summary["status"] == "completed" and summary["step"] == 600 == agent.step
    assert np.isfinite(summary["final_return"])
    # learn() evaluates on the eval_every schedule only; a second call continues the episode
    assert [r["step"] for r in agent.run.eval_history] == [500]
    resets = agent.run.collector.resets
    agent.learn(100)
    assert agent.run.collector.resets == resets and agent.step == 700
    assert len(agent.run.replay) == 700

    env = gym.make("Pendulum-v1")
    observations = [env.reset(seed=s)[0] for s in range(5)]
    before = [agent.act(o) for o in observations]
    for a in before:
        assert isinstance(a, np.ndarray) and a.shape == (1,)
        assert np.all(a >= -2.0) and np.all(a <= 2.0)
        assert env.action_space.contains(a.astype(np.float32))
    assert len({float(a[0]) for a in before}) > 1  # depends on the observation

    out = agent.save(tmp_path / "saved")
    assert out.is_dir()
    loaded = offpolicy.load(tmp_path / "saved")
    assert loaded.step == 700
    assert loaded.config.to_dict() == agent.config.to_dict()
    after = [loaded.act(o) for o in observations]
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    # the loaded agent evaluates like the original
    np.testing.assert_array_equal(loaded.evaluate(2), agent.evaluate(2))

    with pytest.raises(OffpolicyError, match="shape"):
        loaded.act(np.zeros(4, np.float32))
    with pytest.raises(OffpolicyError, match="not empty"):
        agent.save(tmp_path / "saved")
    with pytest.raises(OffpolicyError):
        agent.learn(0)


def test_api_errors(tmp_path):
    with pytest.raises(OffpolicyError, match="unknown option"):
        offpolicy.make("ddpg", env="Pendulum-v1", no_such_option=1)
    with pytest.raises(OffpolicyError, match="unknown algorithm"):
        offpolicy.make("nope")
    with pytest.raises(OffpolicyError, match="no such"):
        offpolicy.load(tmp_path / "missing")
    with pytest.raises(OffpolicyError, match="invalid checkpoint"):
        offpolicy.load(tmp_path, "middle")


def test_a_run_resumed_by_a_version_logging_a_new_column_keeps_one_header(tmp_path):
    """train.csv of a run started before a column existed (updates_per_s), resumed after:
    the header gains the column, the older rows are blank there, every row parses."""
    from offpolicy.plotting import parse_csv, read_metric
    from offpolicy.training.logger import CsvLog

    path = tmp_path / "train.csv"
    path.write_text("step,wall_time,loss\n100,1.0,0.5\n200,2.0,0.4\n")
    log = CsvLog(path, ["step", "wall_time", "updates_per_s", "loss"])
    log.write({"step": 300, "wall_time": 3.0, "updates_per_s": 50.0, "loss": 0.3})
    log.close()
    header, rows, _ = parse_csv(path)
    assert header == ["step", "wall_time", "loss", "updates_per_s"]
    assert rows == [["100", "1.0", "0.5", ""], ["200", "2.0", "0.4", ""],
                    ["300", "3", "0.3", "50"]]
    assert list(read_metric(tmp_path, "loss")["step"]) == [100, 200, 300]
    log = CsvLog(path, ["step", "loss"])  # fewer columns: the file's header stays
    log.write({"step": 400, "loss": 0.2})
    log.close()
    assert parse_csv(path)[1][-1] == ["400", "", "0.2", ""]
