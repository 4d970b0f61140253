"""Replay tables: episode boundaries, wrap-around, discounts, memory, extras, sequences, files.

Every check compares the buffer with a plain-Python reference: a list of all transitions ever
added, in order, each with its episode id and the index of the observation write that stored
its ``obs`` (the documented layout stores every observation once; an episode of L steps takes
L + 1 slots, and the buffer holds the last ``capacity`` observation writes).
"""

from __future__ import annotations

import itertools
import os
import zipfile
from dataclasses import dataclass, field

import numpy as np
import pytest
from replay_tables import sample_episodes, sample_sequences
from replay_tables import table as ReplayBuffer

from offpolicy.errors import OffpolicyError
from offpolicy.replay import files
from offpolicy.replay.samplers import Sampler, gather

OBS_DIM, ACT_DIM = 4, 2
EXTRAS = {"actor": ((), np.int32), "mean": ((ACT_DIM,), np.float32),
          "std": ((ACT_DIM,), np.float32)}


@dataclass
class Ref:
    """Plain-Python reference of what was written to a buffer."""

    capacity: int
    transitions: list = field(default_factory=list)
    writes: int = 0  # observation writes so far
    episode: int = -1

    def start(self, buf, obs):
        buf.start_episode(obs)
        self.writes += 1
        self.episode += 1

    def add(self, buf, t):
        t = dict(t, g=self.writes - 1, ep=self.episode, i=len(self.transitions))
        extras = {k: t[k] for k in EXTRAS if k in t}
        buf.add(t["action"], t["reward"], t["terminated"], t["truncated"], t["next_obs"], **extras)
        self.writes += 1
        self.transitions.append(t)

    def resident(self) -> list[dict]:
        oldest = self.writes - self.capacity
        return [t for t in self.transitions if t["g"] >= oldest]

    def by_obs(self) -> dict[bytes, dict]:
        return {t["obs"].tobytes(): t for t in self.resident()}


def _transition(rng, obs, *, terminated=False, truncated=False, extras=False):
    t = {"obs": obs,
         "action": rng.uniform(-1, 1, ACT_DIM).astype(np.float32),
         "reward": np.float32(rng.normal()),
         "terminated": terminated, "truncated": truncated,
         "next_obs": rng.normal(size=OBS_DIM).astype(np.float32)}
    if extras:
        t["actor"] = np.int32(rng.integers(-1, 5))
        t["mean"] = rng.normal(size=ACT_DIM).astype(np.float32)
        t["std"] = rng.uniform(0.1, 2, ACT_DIM).astype(np.float32)
    return t


def drive(buf, ref, rng, n_episodes, max_len=20, extras=False, on_step=None, leave_open=False):
    """Write ``n_episodes`` episodes of random lengths (ending by termination or truncation at
    random); the last one stays open when ``leave_open``."""
    for e in range(n_episodes):
        length = int(rng.integers(1, max_len + 1))
        obs = rng.normal(size=OBS_DIM).astype(np.float32)
        ref.start(buf, obs)
        end_kind = rng.choice(["terminated", "truncated"])
        last_open = leave_open and e == n_episodes - 1
        for s in range(length):
            final = s == length - 1 and not last_open
            t = _transition(rng, obs, terminated=final and end_kind == "terminated",
                            truncated=final and end_kind == "truncated", extras=extras)
            ref.add(buf, t)
            obs = t["next_obs"]
            if on_step is not None:
                on_step()


def assert_transition_equal(batch, j, t, extras=False):
    np.testing.assert_array_equal(batch["obs"][j], t["obs"])
    np.testing.assert_array_equal(batch["action"][j], t["action"])
    assert batch["reward"][j] == t["reward"]
    np.testing.assert_array_equal(batch["next_obs"][j], t["next_obs"])
    assert batch["discount"][j] == (0.0 if t["terminated"] else 1.0)
    if extras:
        assert batch["actor"][j] == t["actor"]
        np.testing.assert_array_equal(batch["mean"][j], t["mean"])
        np.testing.assert_array_equal(batch["std"][j], t["std"])


def check_samples(buf, ref, batch_size=64, extras=False):
    table = ref.by_obs()
    assert len(buf) == len(table)
    if not table:
        return set()
    batch = buf.sample(batch_size)[1]
    recent = {t["obs"].tobytes() for t in ref.transitions[-buf.capacity:]}
    seen = set()
    for j in range(batch_size):
        key = batch["obs"][j].tobytes()
        assert key in table, "sampled a transition that is not resident (stale or crossed)"
        assert key in recent
        assert_transition_equal(batch, j, table[key], extras)
        seen.add(table[key]["i"])
    return seen


# ---------------------------------------------------------------------- (a) boundaries, wrap
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_samples_never_cross_episodes_and_survive_wraparound(seed):
    rng = np.random.default_rng(seed)
    cap = 37
    buf = ReplayBuffer(cap, (OBS_DIM,), ACT_DIM, seed=seed)
    ref = Ref(cap)
    counter = [0]

    def on_step():
        counter[0] += 1
        if counter[0] % 7 == 0:  # also check in the middle of episodes
            check_samples(buf, ref, batch_size=16)

    drive(buf, ref, rng, n_episodes=150, max_len=20, on_step=on_step)
    assert ref.writes > 10 * cap  # wrapped many times
    # long episodes (longer than the buffer) too
    drive(buf, ref, rng, n_episodes=3, max_len=60, on_step=on_step)
    drive(buf, ref, rng, n_episodes=4, max_len=15, on_step=on_step, leave_open=True)
    # uniform sampling reaches every resident transition
    seen = set()
    for _ in range(60):
        seen |= check_samples(buf, ref, batch_size=64)
    assert seen == {t["i"] for t in ref.resident()}


def test_final_observation_slot_is_never_a_transition():
    buf = ReplayBuffer(8, (1,), 1)
    buf.start_episode(np.array([0.0]))
    buf.add([0.1], 1.0, True, False, np.array([1.0]))  # final obs 1.0 (terminal)
    buf.start_episode(np.array([10.0]))
    buf.add([0.2], 2.0, False, False, np.array([11.0]))
    assert len(buf) == 2
    for _ in range(50):
        b = buf.sample(4)[1]
        assert set(b["obs"][:, 0].tolist()) <= {0.0, 10.0}
        pairs = set(zip(b["obs"][:, 0].tolist(), b["next_obs"][:, 0].tolist(), strict=True))
        assert pairs <= {(0.0, 1.0), (10.0, 11.0)}


def test_len_counts_resident_transitions_after_wrap():
    buf = ReplayBuffer(5, (1,), 1)
    buf.start_episode(np.zeros(1))
    for i in range(12):
        buf.add([0.0], float(i), False, False, np.full(1, i + 1.0))
    assert len(buf) == 4  # 5 slots: 4 transitions + the latest observation
    assert buf.storage.size == 5
    rewards = set()
    for _ in range(30):
        rewards |= set(buf.sample(8)[1]["reward"].tolist())
    assert rewards == {8.0, 9.0, 10.0, 11.0}


# ---------------------------------------------------------------------- (b) discounts
def test_terminated_discount_zero_truncated_discount_one():
    buf = ReplayBuffer(20, (1,), 1)
    cases = {1.0: (True, False), 2.0: (False, True), 3.0: (False, False), 4.0: (True, True)}
    for r, (term, trunc) in cases.items():
        buf.start_episode(np.full(1, r))
        buf.add([0.0], r, term, trunc, np.full(1, -r))
        if not (term or trunc):
            buf.add([0.0], 10 + r, True, False, np.full(1, -10 - r))
    expected = {1.0: 0.0, 2.0: 1.0, 3.0: 1.0, 4.0: 0.0, 13.0: 0.0}
    got = {}
    for _ in range(40):
        b = buf.sample(16)[1]
        assert b["discount"].dtype == np.float32
        for r, d in zip(b["reward"].tolist(), b["discount"].tolist(), strict=True):
            got.setdefault(r, set()).add(d)
    assert got == {r: {d} for r, d in expected.items()}
    # the stored flags are the ones given
    idx = np.flatnonzero(buf.storage.valid)
    st = buf.storage
    stored = {float(st.reward[i]): (bool(st.terminated[i]), bool(st.truncated[i])) for i in idx}
    for r, (term, trunc) in cases.items():
        assert stored[r] == (term, trunc)


def test_sample_returns_documented_fields():
    buf = ReplayBuffer(8, (1,), 1)
    buf.start_episode(np.zeros(1))
    buf.add([0.0], 1.0, True, False, np.ones(1))
    b = buf.sample(2)[1]
    assert set(b) == {"obs", "action", "reward", "next_obs", "discount"}
    assert np.all(b["discount"] == 0.0)


# ---------------------------------------------------------------------- (c) memory
@pytest.mark.parametrize("obs_dim, act_dim, ep_len", [(17, 6, 1000), (3, 1, 200)],
                         ids=["mujoco-like", "pendulum-like"])
def test_memory_per_transition_within_1p1x_raw(obs_dim, act_dim, ep_len):
    cap = 20_000
    buf = ReplayBuffer(cap, (obs_dim,), act_dim)
    raw = obs_dim * 4 + act_dim * 4 + 4 + 1 + 1  # obs, action, reward, terminated, truncated
    obs = np.zeros(obs_dim, np.float32)
    act = np.zeros(act_dim, np.float32)
    written = 0
    while written < 2 * cap:  # well past full
        buf.start_episode(obs)
        written += 1
        for s in range(ep_len):
            buf.add(act, 0.0, False, s == ep_len - 1, obs)
            written += 1
    assert buf.storage.size == cap
    per_transition = buf.storage.nbytes / len(buf)
    assert len(buf) >= cap * ep_len / (ep_len + 1) - 2
    assert per_transition <= 1.1 * raw, (per_transition, raw)


# ---------------------------------------------------------------------- (d) extras
def test_extras_stored_and_sampled_with_their_transition():
    rng = np.random.default_rng(5)
    cap = 41
    buf = ReplayBuffer(cap, (OBS_DIM,), ACT_DIM, fields=EXTRAS, seed=5)
    ref = Ref(cap)
    drive(buf, ref, rng, n_episodes=40, max_len=12, extras=True, leave_open=True)
    seen = set()
    for _ in range(30):
        b = buf.sample(32)[1]
        assert b["actor"].dtype == np.int32 and b["actor"].shape == (32,)
        assert b["mean"].dtype == np.float32 and b["mean"].shape == (32, ACT_DIM)
        assert b["std"].shape == (32, ACT_DIM)
        seen |= check_samples(buf, ref, batch_size=32, extras=True)
    assert seen == {t["i"] for t in ref.resident()}


@pytest.mark.parametrize("name", ["obs", "action", "valid", "next_obs", "discount", "mask"])
def test_reserved_extra_names_rejected(name):
    with pytest.raises(OffpolicyError, match="reserved"):
        ReplayBuffer(10, (2,), 1, fields={name: ((), np.float32)})


def test_misuse_errors():
    with pytest.raises(OffpolicyError, match="capacity"):
        ReplayBuffer(1, (2,), 1)
    buf = ReplayBuffer(10, (2,), 1)
    with pytest.raises(OffpolicyError, match="start_episode"):
        buf.add([0.0], 0.0, False, False, np.zeros(2))
    with pytest.raises(OffpolicyError, match="empty"):
        buf.sample(4)[1]
    buf.start_episode(np.zeros(2))
    buf.add([0.0], 0.0, True, False, np.zeros(2))
    with pytest.raises(OffpolicyError, match="start_episode"):  # the episode has ended
        buf.add([0.0], 0.0, False, False, np.zeros(2))
    with pytest.raises(ValueError, match="length"):
        sample_sequences(buf, 4, 0)[1]


# ---------------------------------------------------------------------- (e) sequences
def check_sequences(buf, ref, batch_size, length, extras):
    table = ref.by_obs()
    out = sample_sequences(buf, batch_size, length)[1]
    T, B = length, batch_size
    assert out["obs"].shape == (T + 1, B, OBS_DIM)
    assert out["action"].shape == (T, B, ACT_DIM)
    for k in ("reward", "terminated", "truncated", "discount", "mask"):
        assert out[k].shape == (T, B), k
    assert out["mask"].dtype == np.float32 and out["discount"].dtype == np.float32
    if extras:
        assert out["actor"].shape == (T, B)
        assert out["mean"].shape == (T, B, ACT_DIM) and out["std"].shape == (T, B, ACT_DIM)
    trs = ref.transitions
    for b in range(B):
        start = table[out["obs"][0, b].tobytes()]  # must be a resident transition
        i = start["i"]
        # reference mask: 1 while the window stays inside its starting episode
        mask = [1.0]
        for t in range(1, T):
            inside = mask[-1] == 1.0
            if inside:
                prev = trs[i + t - 1]
                inside = (not (prev["terminated"] or prev["truncated"])
                          and i + t < len(trs) and trs[i + t]["ep"] == start["ep"])
            mask.append(1.0 if inside else 0.0)
        np.testing.assert_array_equal(out["mask"][:, b], mask)
        last = int(sum(mask)) - 1
        for t in range(T):
            s = min(t, last)  # padded steps repeat the last in-episode step
            tr = trs[i + s]
            np.testing.assert_array_equal(out["action"][t, b], tr["action"])
            assert out["reward"][t, b] == tr["reward"]
            assert bool(out["terminated"][t, b]) == tr["terminated"]
            assert bool(out["truncated"][t, b]) == tr["truncated"]
            assert out["discount"][t, b] == (0.0 if tr["terminated"] else 1.0)
            np.testing.assert_array_equal(out["obs"][t + 1, b], tr["next_obs"])
            if t <= last:
                np.testing.assert_array_equal(out["obs"][t, b], tr["obs"])
            if extras:
                assert out["actor"][t, b] == tr["actor"]
                np.testing.assert_array_equal(out["mean"][t, b], tr["mean"])
                np.testing.assert_array_equal(out["std"][t, b], tr["std"])
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_sample_sequences_against_reference(seed):
    rng = np.random.default_rng(seed)
    cap = 37
    buf = ReplayBuffer(cap, (OBS_DIM,), ACT_DIM, fields=EXTRAS, seed=seed)
    ref = Ref(cap)
    masks = []
    counter = [0]

    def on_step():
        counter[0] += 1
        if counter[0] % 11 == 0:
            masks.append(check_sequences(buf, ref, 8, 6, extras=True)["mask"])

    drive(buf, ref, rng, n_episodes=120, max_len=12, extras=True, on_step=on_step)
    drive(buf, ref, rng, n_episodes=3, max_len=8, extras=True, on_step=on_step, leave_open=True)
    for _ in range(20):
        masks.append(check_sequences(buf, ref, 32, 8, extras=True)["mask"])
    for m in masks:
        assert np.all(m[0] == 1.0)
        assert np.all(np.diff(m, axis=0) <= 0)  # once out of the episode, never back in
    # both kinds of window occurred: cut short by an episode end, and fully inside one
    assert any((m == 0).any() for m in masks) and any((m[-1] == 1).any() for m in masks)


def test_sample_sequences_stop_at_open_episode_head():
    buf = ReplayBuffer(16, (1,), 1, seed=0)
    buf.start_episode(np.zeros(1))
    for i in range(3):
        buf.add([float(i)], float(i), False, False, np.full(1, i + 1.0))
    out = sample_sequences(buf, 20, 5)[1]
    for b in range(20):
        r0 = int(out["reward"][0, b])
        np.testing.assert_array_equal(out["mask"][:, b], [1.0] * (3 - r0) + [0.0] * (2 + r0))
        np.testing.assert_array_equal(out["obs"][0, b], [r0])


def test_sample_sequences_length_one_matches_sample():
    rng = np.random.default_rng(9)
    buf = ReplayBuffer(30, (OBS_DIM,), ACT_DIM, seed=3)
    ref = Ref(30)
    drive(buf, ref, rng, n_episodes=20, max_len=6)
    out = check_sequences(buf, ref, 16, 1, extras=False)
    assert np.all(out["mask"] == 1.0)


# ---------------------------------------------------------------------- (f) files
def _filled(seed=0, cap=29, episodes=25, leave_open=True):
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(cap, (OBS_DIM,), ACT_DIM, fields=EXTRAS, seed=seed)
    ref = Ref(cap)
    drive(buf, ref, rng, n_episodes=episodes, max_len=9, extras=True, leave_open=leave_open)
    for _ in range(3):
        buf.sample(5)[1]  # advance the sampling RNG
    return buf, ref


def _assert_same_buffer(x, y):
    a, b = x.storage, y.storage
    for k in ("obs", "action", "reward", "terminated", "truncated", "valid"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    for k in a.extras:
        np.testing.assert_array_equal(a.extras[k], b.extras[k], err_msg=k)
    assert ((a.head, a.size, a.num_valid, a.episodes_open)
            == (b.head, b.size, b.num_valid, b.episodes_open))
    assert a.episodes_state() == b.episodes_state()
    assert x.sampler.selector.rng.bit_generator.state == y.sampler.selector.rng.bit_generator.state


@pytest.mark.parametrize("episodes, leave_open", [(2, True), (25, True), (25, False)],
                         ids=["partial-open", "wrapped-open", "wrapped-closed"])
def test_save_load_round_trip_is_exact(tmp_path, episodes, leave_open):
    buf, _ = _filled(episodes=episodes, leave_open=leave_open)
    path = tmp_path / "replay.npz"
    buf.save(path)
    new = ReplayBuffer(buf.capacity, (OBS_DIM,), ACT_DIM, fields=EXTRAS, seed=123)
    new.load(path)
    _assert_same_buffer(buf, new)
    # the next samples after load equal the original's next samples (RNG state restored)
    for _ in range(3):
        x, y = buf.sample(16)[1], new.sample(16)[1]
        assert set(x) == set(y)
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)
    s1, s2 = sample_sequences(buf, 8, 4)[1], sample_sequences(new, 8, 4)[1]
    for k in s1:
        np.testing.assert_array_equal(s1[k], s2[k], err_msg=k)
    # writing continues identically
    rng1, rng2 = np.random.default_rng(7), np.random.default_rng(7)
    for b, rng in ((buf, rng1), (new, rng2)):
        if not b.storage.episodes_open:
            b.start_episode(np.ones(OBS_DIM, np.float32))
        for _ in range(10):
            t = _transition(rng, None, extras=True)
            b.add(t["action"], t["reward"], False, False, t["next_obs"],
                  actor=t["actor"], mean=t["mean"], std=t["std"])
    _assert_same_buffer(buf, new)


def test_saved_file_needs_no_pickle(tmp_path):
    buf, _ = _filled()
    path = tmp_path / "replay.npz"
    buf.save(path)
    with np.load(path, allow_pickle=False) as z:
        names = set(z.files)
        for name in z.files:
            arr = z[name]
            assert arr.dtype != object, name
    assert {"obs", "action", "reward", "terminated", "truncated", "valid", "meta"} <= names
    assert {"extra.actor", "extra.mean", "extra.std"} <= names
    assert not list(tmp_path.glob("*.tmp"))  # the atomic write left no temp file


def test_load_rejects_other_configuration(tmp_path):
    buf, _ = _filled()
    path = tmp_path / "replay.npz"
    buf.save(path)
    for other in (ReplayBuffer(buf.capacity + 1, (OBS_DIM,), ACT_DIM, fields=EXTRAS),
                  ReplayBuffer(buf.capacity, (OBS_DIM + 1,), ACT_DIM, fields=EXTRAS),
                  ReplayBuffer(buf.capacity, (OBS_DIM,), ACT_DIM + 1, fields=EXTRAS),
                  ReplayBuffer(buf.capacity, (OBS_DIM,), ACT_DIM)):
        with pytest.raises(OffpolicyError, match="does not match"):
            other.load(path)


def test_load_missing_file_raises(tmp_path):
    with pytest.raises(OffpolicyError):
        ReplayBuffer(10, (2,), 1).load(tmp_path / "nope.npz")


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_obs_data(path):
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("obs.npy")
    start = info.header_offset + 30 + int.from_bytes(
        data[info.header_offset + 26:info.header_offset + 28], "little") + int.from_bytes(
        data[info.header_offset + 28:info.header_offset + 30], "little")
    pos = start + info.file_size - 8  # inside the array data
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))


def _empty(path):
    path.write_bytes(b"")




@pytest.mark.parametrize("corrupt", [
    pytest.param(_truncate, id="truncated"),
    pytest.param(_flip_obs_data, id="flipped-bytes"),
    pytest.param(_empty, id="empty"),
])
def test_corrupt_file_raises_offpolicy_error(tmp_path, corrupt):
    buf, _ = _filled()
    path = tmp_path / "replay.npz"
    buf.save(path)
    corrupt(path)
    with pytest.raises(OffpolicyError, match="corrupt"):
        ReplayBuffer(buf.capacity, (OBS_DIM,), ACT_DIM, fields=EXTRAS).load(path)


# ---------------------------------------------------------------------- (g) segments, rings
def test_recent_segments_split_at_the_episode_end():
    buf = ReplayBuffer(40, (1,), 1)
    buf.start_episode(np.array([0.0]))
    for i in range(5):  # episode 1: rewards 10..14, terminated at the last
        buf.add([0.0], 10 + i, i == 4, False, np.array([i + 1.0]))
    buf.start_episode(np.array([100.0]))
    for i in range(3):  # episode 2 (open): rewards 20..22
        buf.add([0.0], 20 + i, False, False, np.array([101.0 + i]))
    idx, out = buf.recent_segments(6)
    assert idx.shape == (6, 2) and out["obs"].shape == (7, 2, 1)
    np.testing.assert_array_equal(out["mask"][:, 0], [1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(out["reward"][:3, 0], [12, 13, 14])
    np.testing.assert_array_equal(out["discount"][:3, 0], [1, 1, 0])
    np.testing.assert_array_equal(out["mask"][:, 1], [1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(out["reward"][:3, 1], [20, 21, 22])
    np.testing.assert_array_equal(out["obs"][:4, 1, 0], [100, 101, 102, 103])
    # no episode end inside the segment: the second window is empty
    _, out = buf.recent_segments(2)
    np.testing.assert_array_equal(out["reward"][:, 0], [21, 22])
    assert out["mask"][:, 0].tolist() == [1, 1] and out["mask"][:, 1].sum() == 0


def test_rings_keep_their_own_order_and_episode_starts_survive_save(tmp_path):
    rng = np.random.default_rng(4)
    buf = ReplayBuffer(60, (OBS_DIM,), ACT_DIM, num_streams=3, seed=1)
    for s in range(3):
        buf.start_episode(rng.normal(size=OBS_DIM), s)
    for step in range(45):  # wraps every ring (20 slots each)
        done = np.array([(step + s) % 7 == 6 for s in range(3)])
        nxt = rng.normal(size=(3, OBS_DIM)).astype(np.float32)
        buf.add_batch(rng.uniform(-1, 1, (3, ACT_DIM)), np.full(3, float(step)), done,
                      np.zeros(3, bool), nxt)
        for s in np.flatnonzero(done):
            buf.start_episode(rng.normal(size=OBS_DIM), int(s))
    idx, b = buf.sample(64)
    assert np.all(buf.storage.valid[idx]) and len(set((idx // 20).tolist())) == 3
    # a transition's next observation is the next slot of its own ring
    np.testing.assert_array_equal(b["next_obs"], buf.storage.obs[buf.storage.next_slots(idx)])
    assert np.all(buf.storage.next_slots(idx) // 20 == idx // 20)
    # every ring full: the saved arrays are views of the buffer, not a second copy of it
    assert (buf.storage.sizes == 20).all()
    assert np.shares_memory(files.state_arrays(buf)["obs"], buf.storage.obs)
    path = tmp_path / "r.npz"
    buf.save(path)
    new = ReplayBuffer(60, (OBS_DIM,), ACT_DIM, num_streams=3, seed=9)
    new.load(path)
    assert new.storage.episodes_state() == buf.storage.episodes_state()
    np.testing.assert_array_equal(new.storage.heads, buf.storage.heads)
    e1, e2 = sample_episodes(buf, 8, 10), sample_episodes(new, 8, 10)
    for k in e1[1]:
        np.testing.assert_array_equal(e1[1][k], e2[1][k], err_msg=k)


def test_a_replay_larger_than_the_machine_is_refused_up_front():
    """The arrays are mapped lazily, so a too-large replay would only fail once it filled up,
    hours into a run: ReF-ER/ACER's paper-atari memory (800k uint8 84x84x4 frames, ~21 GiB)
    on an 8 GiB machine is refused at once, with the --buffer-size that would fit."""
    import warnings

    from offpolicy.replay.memory import check_memory

    gib = 1024**3
    frames = 84 * 84 * 4 + 4 + 4 + 3
    with pytest.raises(OffpolicyError, match=r"needs 21\.0 GiB.*about 243384 steps"):
        check_memory(800_000, frames, {"MemTotal": 8 * gib, "MemAvailable": 6 * gib})
    with pytest.warns(UserWarning, match="21.0 GiB; 6.0 GiB of memory is available"):
        check_memory(800_000, frames, {"MemTotal": 32 * gib, "MemAvailable": 6 * gib})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_memory(800_000, frames, {"MemTotal": 32 * gib, "MemAvailable": 30 * gib})
        check_memory(800_000, frames, {})  # no /proc/meminfo: nothing to check against
    # and the buffer itself checks: 10^12 steps of one float fit nowhere
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo to check against")
    with pytest.raises(OffpolicyError,
                       match="more than this (machine's memory|container's memory limit)"):
        ReplayBuffer(10**12, (1,), 1)


def test_the_memory_check_reads_a_containers_cgroup_limit(tmp_path):
    """Containers, Slurm jobs and systemd scopes kill a process at its cgroup's limit, which
    /proc/meminfo does not show. The check walks from the process's own cgroup (v2: the
    ``0::`` line of /proc/self/cgroup; v1: the ``memory`` line) up to the top, takes the
    tightest limit and that level's usage less its inactive page cache; "max" (v2) and ~2^63
    (v1) mean no limit."""
    from offpolicy.replay.memory import _cgroup_memory, _meminfo, check_memory

    gib = 1024**3
    me = tmp_path / "self_cgroup"
    root = tmp_path / "v2"
    job = root / "system.slice" / "job_7" / "step_0"
    job.mkdir(parents=True)
    me.write_text("0::/system.slice/job_7/step_0\n")
    assert _cgroup_memory(root, me) == (None, None)  # no cgroup files
    (root / "memory.max").write_text("max\n")  # the top: no limit
    (job / "memory.max").write_text("max\n")
    assert _cgroup_memory(root, me) == (None, None)
    (job.parent / "memory.max").write_text(f"{2 * gib}\n")  # the job's limit, one level up
    (job.parent / "memory.current").write_text(f"{gib}\n")
    (job.parent / "memory.stat").write_text(f"anon 5\ninactive_file {gib // 2}\nfile 9\n")
    assert _cgroup_memory(root, me) == (2 * gib, gib // 2)
    (job / "memory.max").write_text(f"{3 * gib}\n")  # a looser inner limit does not count
    (job / "memory.current").write_text("1\n")
    assert _cgroup_memory(root, me) == (2 * gib, gib // 2)
    me.write_text("0::/elsewhere\n")  # a path not mounted here: the container's top level
    (root / "memory.max").write_text(f"{4 * gib}\n")
    assert _cgroup_memory(root, me)[0] == 4 * gib
    # v1: the memory controller's own line and hierarchy
    v1 = tmp_path / "v1"
    (v1 / "memory" / "docker" / "abc").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    me.write_text("4:memory:/docker/abc\n0::/\n")
    assert _cgroup_memory(v1, me) == (None, None)
    (v1 / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text(f"{gib}\n")
    (v1 / "memory" / "docker" / "abc" / "memory.usage_in_bytes").write_text(f"{gib}\n")
    (v1 / "memory" / "docker" / "abc" / "memory.stat").write_text(
        f"cache 3\ntotal_inactive_file {gib // 4}\n")
    assert _cgroup_memory(v1, me) == (gib, 3 * gib // 4)
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo")
    me.write_text("0::/system.slice/job_7/step_0\n")
    info = _meminfo(root, me)
    if info["MemTotal"] > 2 * gib:  # the machine has more than the job's limit
        assert info["CgroupLimit"] == info["MemTotal"] == 2 * gib
        assert info["MemAvailable"] <= 2 * gib - gib // 2
        with pytest.raises(OffpolicyError, match=r"more than this container's memory limit "
                                                 r"\(cgroup\) of 2\.0 GiB"):
            check_memory(10**9, 4, info)
    # no headroom left is still a figure (0 GiB available), not "unknown"
    with pytest.warns(UserWarning, match="0.0 GiB of memory is available"):
        check_memory(10, 4, {"MemTotal": 2 * gib, "MemAvailable": 0, "CgroupLimit": 2 * gib})


def test_the_memory_check_counts_prioritized_replays_trees():
    """RankPrioritized.bytes_per_step accounts for every array it keeps per slot once it is
    full and sorted, and a table with a prioritized selector adds it to its check."""
    from offpolicy.replay.memory import check_memory
    from offpolicy.replay.prioritized import PERSettings, Prioritized, RankPrioritized

    n = 4096
    per = RankPrioritized(n)
    per.on_write(np.arange(n), np.ones(n, bool))
    per.resort()
    held = sum(v.nbytes for v in vars(per).values() if isinstance(v, np.ndarray))
    estimate = n * RankPrioritized.bytes_per_step(n)
    assert estimate + 64 >= held >= 0.95 * estimate  # + cumulative[0]
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo to check against")
    plain = ReplayBuffer(1000, (3,), 1)  # obs 12 + action 4 + reward 4 + 3 flags = 23 bytes
    assert plain.bytes_per_step == 23
    per = Prioritized(PERSettings())
    prioritized = ReplayBuffer(1000, (3,), 1, sampler=Sampler(per))
    assert prioritized.bytes_per_step == 23 + RankPrioritized.bytes_per_step(1000)
    assert prioritized.extensions == [per] and len(per.per) == 0
    with pytest.raises(OffpolicyError, match=r"\(1000000000000 bytes per step"):
        check_memory(1000, 10**12)


# ---------------------------------------------------------------------- stacked frames
class _FrameEnv:
    """Episodes of random lengths (some shorter than the stack) whose 3x2 frames carry unique
    values, stacked as make_env stacks Atari's: Gymnasium's FrameStackObservation (padded with
    the reset frame) and FramesLast (channels last)."""

    def __new__(cls, seed: int, frames: int = 4):
        import gymnasium as gym

        from offpolicy.envs.make import FramesLast

        class Frames(gym.Env):
            observation_space = gym.spaces.Box(0, 255, (3, 2), np.uint8)
            action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.t, self.length = 0, int(self.np_random.integers(1, 9))
                self.value = int(self.np_random.integers(0, 200))
                return self._frame(), {}

            def _frame(self):
                return np.full((3, 2), (self.value + 7 * self.t) % 256, np.uint8)

            def step(self, action):
                self.t += 1
                end = self.t >= self.length
                term = end and self.np_random.random() < 0.5
                return self._frame(), 1.0, term, end and not term, {}

        env = FramesLast(gym.wrappers.FrameStackObservation(Frames(), frames))
        env.reset(seed=seed)
        return env


@pytest.mark.parametrize("streams", [1, 2])
def test_stacked_frames_are_stored_once_and_rebuilt_exactly(streams):
    """#34: replay stores each frame once and rebuilds the stack at sampling time: every
    transition it keeps samples the env's own stacked observation and next observation, over
    episode starts (padded with the episode's first frame) and ring wrap-around; transitions
    whose stack lost a frame to the ring are gone, and only those."""
    envs = [_FrameEnv(seed=10 + s) for s in range(streams)]
    buf = ReplayBuffer(37 * streams, (3, 2, 4), 1, obs_dtype=np.uint8, seed=1,
                       num_streams=streams, frame_stack=4)
    truth = {}  # slot -> (obs, next_obs) of the transition stored there
    obs = [e.reset(seed=100 + s)[0] for s, e in enumerate(envs)]
    for s in range(streams):
        buf.start_episode(obs[s], s)
    rng = np.random.default_rng(0)
    for step in range(400):
        slot = buf.storage.base + (buf.storage.heads - 1) % buf.storage.stream_capacity
        out = [e.step(np.zeros(1, np.float32)) for e in envs]
        nxt = np.stack([o[0] for o in out])
        buf.add_batch(np.zeros((streams, 1)), np.ones(streams), np.array([o[2] for o in out]),
                      np.array([o[3] for o in out]), nxt)
        for s in range(streams):
            truth[int(slot[s])] = (obs[s], nxt[s])
            obs[s] = nxt[s]
            if out[s][2] or out[s][3]:
                obs[s] = envs[s].reset(seed=int(rng.integers(1 << 30)))[0]
                buf.start_episode(obs[s], s)
        valid = np.flatnonzero(buf.storage.valid)
        batch = gather(buf.storage, valid)
        want = np.stack([truth[int(i)][0] for i in valid])
        np.testing.assert_array_equal(batch["obs"], want)
        np.testing.assert_array_equal(batch["next_obs"], np.stack([truth[int(i)][1]
                                                                   for i in valid]))
        if step > 100:  # after wrapping: at most 3 transitions per ring lost to it
            assert len(buf) >= buf.capacity - streams * (3 + buf.capacity // streams // 2)
    # windows (sequences, on-policy segments) rebuild their observations the same way
    idx, seq = sample_sequences(buf, 16, 3)
    for t in range(3):
        for b in range(16):
            if seq["mask"][t, b]:
                np.testing.assert_array_equal(seq["obs"][t, b], truth[int(idx[t, b])][0])
                np.testing.assert_array_equal(seq["obs"][t + 1, b], truth[int(idx[t, b])][1])


def test_stacked_frames_take_a_quarter_of_the_memory_and_survive_save(tmp_path):
    whole = ReplayBuffer(1000, (84, 84, 4), 1, obs_dtype=np.uint8)
    once = ReplayBuffer(1000, (84, 84, 4), 1, obs_dtype=np.uint8, frame_stack=4)
    assert once.bytes_per_step / whole.bytes_per_step == pytest.approx(0.25, abs=0.01)
    assert once.storage.obs.nbytes == whole.storage.obs.nbytes // 4
    env = _FrameEnv(seed=3)
    small = ReplayBuffer(40, (3, 2, 4), 1, obs_dtype=np.uint8, frame_stack=4, seed=2)
    o = env.reset(seed=0)[0]
    small.start_episode(o)
    for _ in range(60):
        o, r, term, trunc, _ = env.step(np.zeros(1, np.float32))
        small.add([0.0], r, term, trunc, o)
        if term or trunc:
            small.start_episode(env.reset()[0])
    small.save(tmp_path / "r.npz")
    back = ReplayBuffer(40, (3, 2, 4), 1, obs_dtype=np.uint8, frame_stack=4, seed=2)
    back.load(tmp_path / "r.npz")
    idx = np.flatnonzero(small.storage.valid)
    np.testing.assert_array_equal(gather(back.storage, idx)["obs"],
                                  gather(small.storage, idx)["obs"])
    ReplayBuffer(40, (3, 2, 4), 1, obs_dtype=np.uint8).save(tmp_path / "whole.npz")
    with pytest.raises(OffpolicyError, match="stores whole observations; this run stores its 4"):
        back.load(tmp_path / "whole.npz")  # the layout before #34: one line, no resume


@pytest.mark.parametrize("forget", [False, True])
@pytest.mark.parametrize("streams", [1, 3])
def test_episode_first_slots_and_closed_episodes_follow_the_rings(streams, forget):
    """Episodes start, end and are overwritten in every ring; after each step every valid
    transition whose episode still has its first step gets that first slot, the one recorded
    when it was written (the cached start arrays are rebuilt whenever a start comes or goes),
    one whose episode lost it gets its ring's oldest slot (its episode's earliest step still
    stored), and the closed episodes kept for take_closed_episodes never outgrow the episodes
    in memory, though nobody takes them."""
    rng = np.random.default_rng(5)
    buf = ReplayBuffer(90 * streams, (OBS_DIM,), ACT_DIM, num_streams=streams, seed=2,
                       forget_whole_episodes=forget)
    first_of = {}  # slot -> (first slot, number) of the episode that wrote its transition
    current = [None] * streams  # each ring's episode in progress: (first slot, number)
    holder = {}  # slot -> the episode whose first observation it holds
    alive = set()  # episodes whose first observation is still in memory

    def landed(slots):  # observations written there: the episodes whose first they held lose it
        for h in slots:
            alive.discard(holder.pop(int(h), None))

    def start(s):
        h = int(buf.storage.base[s] + buf.storage.heads[s])
        landed([h])
        current[s] = (h, next(numbers))
        holder[h] = current[s]
        alive.add(current[s])
        buf.start_episode(rng.normal(size=OBS_DIM), s)

    numbers = itertools.count()

    for s in range(streams):
        start(s)
    lost = 0  # valid transitions whose episode lost its first step (forgetting: none)
    for _ in range(400):  # ~4 wraps of every ring
        st = buf.storage
        slots = st.base + (st.heads - 1) % st.stream_capacity  # where each step lands
        for s in range(streams):
            first_of[int(slots[s])] = current[s]
        landed(buf.storage.base + buf.storage.heads)  # the next observations
        done = rng.random(streams) < 0.15
        buf.add_batch(rng.uniform(-1, 1, (streams, ACT_DIM)), np.zeros(streams), done,
                      np.zeros(streams, bool), rng.normal(size=(streams, OBS_DIM)))
        for s in np.flatnonzero(done):
            start(int(s))
        idx = np.flatnonzero(buf.storage.valid)
        kept = np.array([first_of[int(i)] in alive for i in idx], bool)
        lost += int((~kept).sum())
        oldest = st.base + st.heads  # each ring's oldest slot (the rings are full by then)
        np.testing.assert_array_equal(
            buf.storage.episode_first_slots(idx),
            [first_of[int(i)][0] if k else oldest[i // buf.storage.stream_capacity]
             for i, k in zip(idx, kept)])
        assert len(buf.storage.closed_episodes()) <= sum(
            len(q) for q in buf.storage.episodes_state()["starts"])
    assert (lost == 0) if forget else (lost > 0)
    closed = buf.storage.take_closed_episodes()
    assert closed and all(first_of[b][0] == a and first_of[b] in alive for a, b in closed)


def test_rings_not_yet_full_round_trip_through_a_file(tmp_path):
    """Rings partly written (the saved arrays are then gathered ring by ring, not a prefix):
    the loaded buffer holds the same transitions and samples the same batches."""
    rng = np.random.default_rng(6)
    buf = ReplayBuffer(60, (OBS_DIM,), ACT_DIM, num_streams=3, seed=1)
    for s in range(3):
        buf.start_episode(rng.normal(size=OBS_DIM), s)
    for step in range(12):  # 13 of each ring's 20 slots
        done = np.array([step % 5 == 4] * 3)
        buf.add_batch(rng.uniform(-1, 1, (3, ACT_DIM)), rng.normal(size=3), done,
                      np.zeros(3, bool), rng.normal(size=(3, OBS_DIM)))
        for s in np.flatnonzero(done):
            buf.start_episode(rng.normal(size=OBS_DIM), int(s))
    assert (buf.storage.sizes < 20).all()
    assert not np.shares_memory(files.state_arrays(buf)["obs"], buf.storage.obs)
    buf.save(tmp_path / "r.npz")
    new = ReplayBuffer(60, (OBS_DIM,), ACT_DIM, num_streams=3, seed=9)
    new.load(tmp_path / "r.npz")
    for k in ("obs", "action", "reward", "valid"):
        np.testing.assert_array_equal(getattr(new.storage, k), getattr(buf.storage, k), err_msg=k)
    (i1, b1), (i2, b2) = buf.sample(16), new.sample(16)
    np.testing.assert_array_equal(i1, i2)
    for k in b1:
        np.testing.assert_array_equal(b1[k], b2[k], err_msg=k)


# ---------------------------------------------------------------------- files of before #70
@pytest.mark.parametrize("name", ["ddpg-per", "ddpg-refer", "vracer", "td3-lstm", "acer"])
def test_a_replay_file_written_before_the_table_loads_and_saves_back_the_same(name):
    """tests/golden/before-70: replay files written by the ReplayBuffer that became the table
    (issue #70) load into the table their run declares, and save back the same arrays and
    bookkeeping (the format is unchanged; a prioritized table no longer saves the uniform
    generator it never draws from)."""
    import json

    import yaml
    from golden_runs import BEFORE_70

    from offpolicy.registry import RunConfig
    from offpolicy.training.build import build

    run_dir = BEFORE_70 / name
    run = RunConfig.from_dict(yaml.safe_load((run_dir / "config.yaml").read_text()))
    table = build(run).replay
    path = run_dir / "checkpoints" / "step-000000400" / "replay.npz"
    table.load(path)
    again = files.state_arrays(table)
    with np.load(path, allow_pickle=False) as z:
        assert set(z.files) == set(again)
        meta = json.loads(bytes(z["meta"]).decode())
        for k in z.files:
            if k != "meta":
                np.testing.assert_array_equal(again[k], z[k], err_msg=k)
    if name == "ddpg-per":
        assert meta.pop("rng")
    assert json.loads(bytes(again["meta"]).decode()) == meta
    assert len(table) == meta["num_valid"] > 0
