"""Reliability under failing I/O and broken installs: a full disk while writing checkpoints and
logs, a tampered meta.json, an environment whose construction fails, DM Control when installed.

Disk-full failures are simulated at the function level (monkeypatched ``open``, ``os.replace``,
``checkpoint._write_file``, ...) raising ``OSError(ENOSPC)``; nothing is mounted.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from _helpers import assert_one_line_error, run_cli

from offpolicy.errors import OffpolicyError
from offpolicy.training import checkpoint
from offpolicy.training.logger import RunLogger, eval_row


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


def _fail_on_call(monkeypatch, obj, name: str, n: int = 1) -> None:
    """Make ``obj.name`` raise ENOSPC on its ``n``-th call (earlier calls work)."""
    real = getattr(obj, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            _enospc()
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, wrapper)


def _one_line(msg: str) -> str:
    assert "\n" not in msg and msg.strip() == msg and msg, repr(msg)
    return msg


class _Replay:
    """Stands in for the replay buffer: ``save(path)`` writes a small file (or fails)."""

    def __init__(self, fail: bool = False):
        self.fail = fail

    def save(self, path) -> None:
        with open(path, "wb") as f:
            f.write(b"replay-bytes" * 100)
            if self.fail:
                _enospc()


def _leftovers(root: Path) -> list[str]:
    """Temporary files or directories a save left behind."""
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".") or "tmp" in p.name)


# ---------------------------------------------------------------------- 1. disk full: checkpoints
FAIL_POINTS = {
    "mkdtemp": lambda mp, replay: _fail_on_call(mp, tempfile, "mkdtemp"),
    "state.msgpack": lambda mp, replay: _fail_on_call(mp, checkpoint, "_write_file", 1),
    "replay.npz": lambda mp, replay: setattr(replay, "fail", True),
    "meta.json": lambda mp, replay: _fail_on_call(mp, checkpoint, "_write_file", 2),
    "checksums.json": lambda mp, replay: _fail_on_call(mp, checkpoint, "_write_file", 3),
    "rename": lambda mp, replay: _fail_on_call(mp, os, "rename"),
    "pointer-tempfile": lambda mp, replay: _fail_on_call(mp, tempfile, "mkstemp"),
    "pointer-replace": lambda mp, replay: _fail_on_call(mp, os, "replace"),
    "open": lambda mp, replay: _fail_on_call(mp, builtins, "open"),
}


@pytest.mark.parametrize("where", list(FAIL_POINTS))
def test_disk_full_during_checkpoint_keeps_the_last_good_one(tmp_path, monkeypatch, where):
    root = tmp_path / "checkpoints"
    first = checkpoint.save(root, "latest", 40, {"w": np.arange(3.0)}, {"episodes": 1},
                            _Replay())
    replay = _Replay()
    FAIL_POINTS[where](monkeypatch, replay)
    with pytest.raises(OffpolicyError) as info:
        checkpoint.save(root, "latest", 80, {"w": np.arange(3.0) + 1}, {"episodes": 2}, replay)
    monkeypatch.undo()
    msg = _one_line(str(info.value))
    assert "cannot write checkpoint" in msg and "No space left on device" in msg, msg
    assert "step 40" in msg and "kept" in msg, msg
    # the pointer still names the complete old checkpoint, and it loads
    assert checkpoint.locate(root, "latest") == first
    state, meta = checkpoint.load(first, {"w": np.zeros(3)})
    np.testing.assert_array_equal(state["w"], [0.0, 1.0, 2.0])
    assert meta["step"] == 40 and meta["episodes"] == 1
    assert checkpoint.load_meta(first)["step"] == 40
    assert (first / "replay.npz").exists()
    assert _leftovers(root) == [], _leftovers(root)
    assert sorted(p.name for p in root.iterdir()) == ["latest", first.name]
    # once there is space again, saving works
    again = checkpoint.save(root, "latest", 80, {"w": np.arange(3.0) + 1}, {}, _Replay())
    assert checkpoint.locate(root, "latest") == again and not first.exists()


def test_disk_full_on_the_first_checkpoint_leaves_nothing(tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    _fail_on_call(monkeypatch, checkpoint, "_write_file", 2)
    with pytest.raises(OffpolicyError) as info:
        checkpoint.save(root, "best", 10, {"w": np.ones(2)}, {})
    msg = _one_line(str(info.value))
    assert "No space left on device" in msg and "no earlier" in msg, msg
    assert list(root.iterdir()) == []
    with pytest.raises(OffpolicyError, match="no best checkpoint"):
        checkpoint.locate(root, "best")


def test_disk_full_in_real_replay_save(tmp_path, monkeypatch):
    """The replay buffer's own atomic save (temp file + os.replace) failing half-way."""
    from offpolicy.replay import files

    class _Arrays:  # a table whose file holds one array
        def save(self, path):
            files.save(self, path)

    monkeypatch.setattr(files, "state_arrays", lambda table: {"x": np.zeros(1000)})

    root = tmp_path / "c"
    first = checkpoint.save(root, "latest", 5, {"w": np.ones(1)}, {}, _Arrays())
    real_savez = np.savez

    def savez_then_full(f, **arrays):
        real_savez(f, **arrays)
        _enospc()

    monkeypatch.setattr(np, "savez", savez_then_full)
    with pytest.raises(OffpolicyError, match="No space left on device"):
        checkpoint.save(root, "latest", 6, {"w": np.ones(1)}, {}, _Arrays())
    assert checkpoint.locate(root) == first and _leftovers(root) == []
    assert (first / "replay.npz").stat().st_size > 8000


# ---------------------------------------------------------------------- 1. disk full: logs
class _FullDisk:
    """Patches ``open`` so files opened for writing under ``under`` fail with ENOSPC on
    write/flush while ``full`` is set (a file opened earlier starts failing too)."""

    def __init__(self, monkeypatch, under: Path):
        self.full = False
        self.under = str(under)
        real_open = builtins.open
        disk = self

        class Proxy:
            def __init__(self, f):
                self._f = f

            def write(self, data):
                if disk.full:
                    _enospc()
                return self._f.write(data)

            def flush(self):
                if disk.full:
                    _enospc()
                return self._f.flush()

            def __getattr__(self, name):
                return getattr(self._f, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self._f.close()

            def __iter__(self):
                return iter(self._f)

        def fake_open(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            writing = any(c in mode for c in "wax+")
            if writing and isinstance(file, (str, Path)) and str(file).startswith(self.under):
                if self.full and "w" in mode:
                    f.close()  # the real open truncated it: refuse before any byte, like
                    _enospc()  # a disk with no room for the new file's first block
                return Proxy(f)
            return f

        monkeypatch.setattr(builtins, "open", fake_open)


def _logger(run_dir: Path, start_step: int = 0) -> RunLogger:
    return RunLogger(run_dir, ["critic_loss"], 1000, start_step, True, "test")


def test_eval_row_holds_plain_python_numbers():
    """What a callback and learn() hand the user is plain Python: json.dumps takes it and
    every statistic is a float, whatever NumPy type the returns came in."""
    import json

    row = eval_row(100, np.array([1.0, 2.0, 4.0], np.float32), 1.23456)
    assert {k: type(v) for k, v in row.items()} == {
        "step": int, "return_mean": float, "return_std": float, "return_se": float,
        "episodes": int, "wall_time": float}
    assert json.loads(json.dumps(row)) == row
    assert np.isclose(row["return_se"], np.std([1.0, 2.0, 4.0]) / np.sqrt(3))


@pytest.mark.parametrize("what", ["eval.csv", "train.csv", "tb"])
def test_disk_full_while_logging_is_a_one_line_error(tmp_path, monkeypatch, what):
    disk = _FullDisk(monkeypatch, tmp_path / what)
    log = _logger(tmp_path)
    log.log_eval(eval_row(100, np.array([1.0, 2.0]), 1.0))
    log.log_train({"step": 100, "wall_time": 1.0, "episodes": 1, "critic_loss": 0.5})
    disk.full = True
    with pytest.raises(OffpolicyError) as info:
        for step in range(200, 2000, 100):  # TensorBoard may buffer a few events
            log.log_eval(eval_row(step, np.array([1.0, 2.0]), 2.0))
            log.log_train({"step": step, "wall_time": 2.0, "episodes": 2, "critic_loss": 0.4})
            log.close()
            log = _logger(tmp_path, step)
    msg = _one_line(str(info.value))
    assert "No space left on device" in msg and what in msg, msg
    try:
        raise ValueError("the error being handled")
    except ValueError:
        log.close()  # the loop closes the logger while an error propagates: never masks it
    disk.full = False
    log.close()  # closing twice is harmless


def test_disk_full_while_closing_tensorboard(tmp_path, monkeypatch):
    disk = _FullDisk(monkeypatch, tmp_path / "tb")
    log = _logger(tmp_path)
    log.log_eval(eval_row(100, np.array([1.0]), 1.0))
    disk.full = True
    with pytest.raises(OffpolicyError, match="No space left on device"):
        log.log_eval(eval_row(200, np.array([1.0]), 1.0))
        log.close()


@pytest.mark.timeout(60)
def test_tensorboard_on_dev_full_raises_instead_of_hanging(tmp_path, monkeypatch):
    """A real ENOSPC from the kernel: event files open /dev/full. tensorboardX's SummaryWriter
    wrote from a thread that died with a traceback, and its bounded queue then blocked the
    training loop forever."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    real_open = builtins.open
    tb = str(tmp_path / "tb")

    def open_dev_full(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, Path)) and str(file).startswith(tb) and "b" in mode:
            return real_open("/dev/full", "wb" if "w" in mode else mode, *args, **kwargs)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_dev_full)
    with pytest.raises(OffpolicyError) as info:
        log = _logger(tmp_path)
        for step in range(100):
            log.log_train({"step": step, "wall_time": 1.0, "episodes": 1, "critic_loss": 0.5})
        log.close()
    msg = _one_line(str(info.value))
    assert "cannot write TensorBoard events" in msg and "No space left on device" in msg, msg


def _read_events(logdir: Path) -> list:
    """Every Event in the TFRecord files under ``logdir``, CRCs checked."""
    import struct

    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.record_writer import masked_crc32c

    events = []
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            header = data[pos:pos + 8]
            (n,) = struct.unpack("<Q", header)
            assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked_crc32c(header)
            body = data[pos + 12:pos + 12 + n]
            assert struct.unpack("<I", data[pos + 12 + n:pos + 16 + n])[0] == masked_crc32c(body)
            events.append(Event.FromString(body))
            pos += 16 + n
    return events


def test_tensorboard_events_round_trip(tmp_path):
    log = _logger(tmp_path, start_step=100)
    log.log_eval(eval_row(200, np.array([1.0, 3.0]), 1.0))
    log.log_train({"step": 200, "wall_time": 1.0, "episodes": 2, "critic_loss": 0.25,
                   "episode_return": float("nan")})
    log.close()
    events = _read_events(tmp_path / "tb")
    assert events[0].file_version == "brain.Event:2"
    starts = [e for e in events if e.HasField("session_log")]
    assert [e.step for e in starts] == [101]  # purges what a killed run logged after step 100
    scalars = {v.tag: (e.step, v.simple_value) for e in events if e.HasField("summary")
               for v in e.summary.value if v.HasField("simple_value")}
    assert scalars["eval/return_mean"] == (200, 2.0)
    assert scalars["train/critic_loss"] == (200, 0.25)
    assert "train/episode_return" not in scalars  # non-finite values are not logged


def test_resume_truncation_on_a_full_disk_keeps_the_csv(tmp_path, monkeypatch):
    rows = "step,return_mean\n100,1.0\n200,2.0\n300,3.0\n"
    (tmp_path / "eval.csv").write_text(rows)
    disk = _FullDisk(monkeypatch, tmp_path)
    disk.full = True
    with pytest.raises(OffpolicyError) as info:
        _logger(tmp_path, start_step=200)
    assert "No space left on device" in _one_line(str(info.value))
    disk.full = False
    assert (tmp_path / "eval.csv").read_text() == rows  # not truncated to nothing
    assert not [p for p in tmp_path.iterdir() if "tmp" in p.name]


def test_resume_truncation_still_drops_later_rows(tmp_path):
    (tmp_path / "eval.csv").write_text("step,return_mean\n100,1.0\n200,2.0\n300,3.0\n")
    _logger(tmp_path, start_step=200).close()
    lines = (tmp_path / "eval.csv").read_text().splitlines()
    # the rows after the checkpoint go; the header gains the columns the logger writes
    # (older rows blank there: a file from an older version keeps one header)
    assert [ln.split(",")[:2] for ln in lines] == [["step", "return_mean"], ["100", "1.0"],
                                                   ["200", "2.0"]]
    assert len({len(ln.split(",")) for ln in lines}) == 1


# ---------------------------------------------------------------------- 2. meta.json checksum
def _saved(tmp_path: Path) -> Path:
    return checkpoint.save(tmp_path / "c", "latest", 30, {"w": np.arange(4.0)},
                           {"episodes": 3, "best_return": -1.5}, _Replay())


def test_tampered_meta_json_is_detected(tmp_path):
    ckpt = _saved(tmp_path)
    meta = json.loads((ckpt / "meta.json").read_text())
    meta["episodes"] = 4  # still valid JSON, state checksum untouched
    (ckpt / "meta.json").write_text(json.dumps(meta, indent=1))
    for call in (lambda: checkpoint.load(ckpt, {"w": np.zeros(4)}),
                 lambda: checkpoint.load_meta(ckpt)):
        with pytest.raises(OffpolicyError) as info:
            call()
        msg = _one_line(str(info.value))
        assert "corrupt checkpoint" in msg and "meta.json checksum mismatch" in msg, msg


def test_checksums_cover_state_and_meta(tmp_path):
    ckpt = _saved(tmp_path)
    sums = json.loads((ckpt / "checksums.json").read_text())
    for name in ("state.msgpack", "meta.json"):
        assert sums[name] == hashlib.sha256((ckpt / name).read_bytes()).hexdigest()
    state, meta = checkpoint.load(checkpoint.locate(tmp_path / "c"), {"w": np.zeros(4)})
    np.testing.assert_array_equal(state["w"], np.arange(4.0))
    assert meta["episodes"] == 3 and checkpoint.load_meta(ckpt)["best_return"] == -1.5


@pytest.mark.parametrize("damage", ["delete", "garbage", "wrong-state"])
def test_damaged_checksums_file_is_corrupt(tmp_path, damage):
    ckpt = _saved(tmp_path)
    path = ckpt / "checksums.json"
    if damage == "delete":
        path.unlink()  # meta.json says there is one
    elif damage == "garbage":
        path.write_bytes(b"\x00{not json")
    else:
        sums = json.loads(path.read_text())
        sums["state.msgpack"] = "0" * 64
        path.write_text(json.dumps(sums))
    with pytest.raises(OffpolicyError, match="corrupt checkpoint") as info:
        checkpoint.load(ckpt, {"w": np.zeros(4)})
    _one_line(str(info.value))


def test_checkpoint_from_before_meta_checksums_still_loads(tmp_path):
    """The layout written before checksums.json existed: meta.json carries state_sha256 only."""
    import flax.serialization

    root = tmp_path / "checkpoints"
    ckpt = root / "step-000000050"
    ckpt.mkdir(parents=True)
    blob = flax.serialization.to_bytes({"w": np.arange(2.0)})
    (ckpt / "state.msgpack").write_bytes(blob)
    (ckpt / "meta.json").write_text(json.dumps(
        {"episodes": 7, "step": 50, "kind": "latest", "has_replay": False,
         "state_sha256": hashlib.sha256(blob).hexdigest()}, indent=1))
    (root / "latest").write_text("step-000000050\n")
    found = checkpoint.locate(tmp_path)
    state, meta = checkpoint.load(found, {"w": np.zeros(2)})
    np.testing.assert_array_equal(state["w"], [0.0, 1.0])
    assert meta["episodes"] == 7 and checkpoint.load_meta(found)["step"] == 50
    # and its state checksum is still checked
    (ckpt / "state.msgpack").write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(OffpolicyError, match="state.msgpack checksum mismatch"):
        checkpoint.load(found, {"w": np.zeros(2)})


_opened: list[str] | None = None


def _audit(event, args):
    if event == "open" and _opened is not None and args and isinstance(args[0], (str, Path)):
        _opened.append(str(args[0]))


def test_load_never_opens_the_replay(tmp_path):
    global _opened
    ckpt = _saved(tmp_path)
    sys.addaudithook(_audit)  # hooks stay for the process; this one records only while set
    _opened = []
    try:
        checkpoint.load(checkpoint.locate(tmp_path / "c"), {"w": np.zeros(4)})
        checkpoint.load_meta(ckpt)
        seen = list(_opened)
    finally:
        _opened = None
    assert any(p.endswith("meta.json") for p in seen), seen
    assert not any("replay" in p for p in seen), seen


# ---------------------------------------------------------------------- 4. broken env construction
@pytest.mark.parametrize("env_id, exc, needle", [
    ("broken_envs:BrokenEnv-v0", "AttributeError", "flex_vertedge"),
    ("broken_envs:BrokenRuntime-v0", "RuntimeError", "Element 'flex', line 12"),
    ("broken_envs:BrokenImport-v0", "ImportError", "mjbindings"),
    ("broken_envs:BrokenType-v0", "TypeError", "unsupported operand"),
])
def test_failing_env_construction_is_one_line_error(env_id, exc, needle):
    from offpolicy.envs.make import make_env

    with pytest.raises(OffpolicyError) as info:
        make_env(env_id, 0)
    msg = _one_line(str(info.value))
    assert msg.startswith(f"cannot create environment {env_id}: {exc}: "), msg
    assert needle in msg, msg


def test_failing_dmc_construction_names_the_version_fix(monkeypatch):
    """dm-control built for another MuJoCo fails inside gym.make with an AttributeError."""
    import types

    import gymnasium as gym
    from broken_envs import BrokenEnv

    from offpolicy.envs.make import make_env

    try:
        import shimmy  # noqa: F401
    except ImportError:
        monkeypatch.setitem(sys.modules, "shimmy", types.ModuleType("shimmy"))
    env_id = "dm_control/brokentest-swingup-v0"
    gym.register(env_id, entry_point=BrokenEnv)
    try:
        with pytest.raises(OffpolicyError) as info:
            make_env(env_id, 0)
    finally:
        del gym.registry[env_id]
    msg = _one_line(str(info.value))
    assert msg.startswith(f"cannot create environment {env_id}: AttributeError: "), msg
    assert "flex_vertedge" in msg and "offpolicy[dmc]" in msg and "mujoco" in msg, msg


def test_cli_failing_env_construction_is_one_line_error(tmp_path):
    proc = run_cli("train", "ddpg", "--env", "broken_envs:BrokenEnv-v0", "--steps", "10",
                   "--quiet", "--run-dir", "R", cwd=tmp_path)
    line = assert_one_line_error(proc, "cannot create environment broken_envs:BrokenEnv-v0")
    assert "AttributeError" in line and "flex_vertedge" in line, line
    assert not (tmp_path / "R").exists()


# ---------------------------------------------------------------------- 5. DM Control
def test_dmc_cartpole_swingup():
    pytest.importorskip("dm_control")
    pytest.importorskip("shimmy")
    from offpolicy.envs.make import make_env

    env = make_env("dm_control/cartpole-swingup-v0", 0)
    try:
        obs, _ = env.reset(seed=0)
        for _ in range(5):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            assert np.isfinite(reward) and not terminated
        obs = np.asarray(obs)
        assert obs.ndim == 1 and obs.size > 0 and np.issubdtype(obs.dtype, np.floating)
        assert np.all(np.isfinite(obs))
        assert env.observation_space.shape == obs.shape
    finally:
        env.close()


# ---------------------------------------------------------------------- helpers for run files
def test_write_text_atomic_keeps_the_old_file_on_a_full_disk(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    checkpoint.write_text_atomic(path, "a: 1\n")
    _fail_on_call(monkeypatch, os, "replace")
    with pytest.raises(OSError):
        checkpoint.write_text_atomic(path, "a: 2\n")
    monkeypatch.undo()
    assert path.read_text() == "a: 1\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "config.yaml"]


def test_has_checkpoint_counts_a_damaged_pointer(tmp_path):
    assert not checkpoint.has_checkpoint(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    assert not checkpoint.has_checkpoint(tmp_path)
    (tmp_path / "checkpoints" / "latest").write_text("step-000000100\n")  # no such directory
    assert checkpoint.has_checkpoint(tmp_path)
    with pytest.raises(OffpolicyError, match="corrupt checkpoint"):
        checkpoint.locate(tmp_path)
    ckpt = checkpoint.save(tmp_path / "other", "latest", 1, {"w": np.ones(1)}, {})
    assert checkpoint.has_checkpoint(tmp_path / "other") and checkpoint.has_checkpoint(ckpt)
