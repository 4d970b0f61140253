"""RankPrioritized: the rank law, importance weights, re-sorting, invalid slots, checkpoints.

Expected rankings are built here independently of the class: the sorted block from the |TD|
errors given (rank 1 = largest), transitions written since the last re-sort ahead of it, newest
first, and slots that left the memory removed (see offpolicy/replay/prioritized.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from offpolicy.errors import OffpolicyError
from offpolicy.replay.prioritized import PERSettings, Prioritized, RankPrioritized
from offpolicy.replay.removers import OldestEpisode
from offpolicy.replay.samplers import Sampler
from offpolicy.replay.storage import Storage
from offpolicy.replay.table import Table

ALPHA = 0.7


def rank_law(n: int, alpha: float = ALPHA) -> np.ndarray:
    """P(rank r) for r = 1..n."""
    mass = np.arange(1, n + 1, dtype=np.float64) ** -alpha
    return mass / mass.sum()


def sorted_memory(n: int, capacity: int, seed: int = 0, **kw) -> tuple[RankPrioritized,
                                                                       np.ndarray]:
    """Slots 0..n-1 with distinct |TD| errors, right after a re-sort; and the |TD| errors."""
    per = RankPrioritized(capacity, alpha=ALPHA, seed=seed, **kw)
    per.on_write(np.arange(n), np.ones(n, bool))
    td = np.random.default_rng(seed + 100).permutation(n) + 0.5
    per.update(np.arange(n), td)
    per.resort()
    return per, td


def mixed_memory() -> tuple[RankPrioritized, np.ndarray]:
    """A memory between re-sorts with dead entries in both blocks, and its expected ranking.

    200 sorted slots, 50 of them invalidated; then writes since the re-sort: 30 new slots
    (5 invalidated again), and 10 of the sorted slots overwritten (they leave the sorted block
    and become fresh)."""
    per, td = sorted_memory(200, capacity=300)
    rng = np.random.default_rng(1)
    by_td = list(np.argsort(-td, kind="stable"))
    gone = rng.choice(200, 50, replace=False)
    per.on_write(gone, np.zeros(50, bool))
    fresh = []  # write order
    for slot in range(200, 230):
        per.on_write(np.array([slot]), np.array([True]))
        fresh.append(slot)
    dropped = [203, 211, 212, 220, 229]
    per.on_write(np.array(dropped), np.zeros(5, bool))
    kept = [s for s in by_td if s not in set(gone)]
    rewritten = list(rng.choice(kept, 10, replace=False))
    per.on_write(np.array(rewritten), np.ones(10, bool))
    fresh = [s for s in fresh if s not in dropped] + rewritten
    ranking = fresh[::-1] + [s for s in kept if s not in set(rewritten)]
    return per, np.array(ranking)


def rank_counts(per: RankPrioritized, ranking: np.ndarray, batches: int, batch_size: int
                ) -> np.ndarray:
    rank_of = np.full(per.capacity, -1)
    rank_of[ranking] = np.arange(ranking.size)
    counts = np.zeros(ranking.size, np.int64)
    for _ in range(batches):
        slots, _ = per.sample(batch_size, 0)
        assert (rank_of[slots] >= 0).all(), "sampled a slot outside the memory"
        counts += np.bincount(rank_of[slots], minlength=ranking.size)
    return counts


def chi_square_p(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    statistic = float(((counts - expected) ** 2 / expected).sum())
    return float(stats.chi2.sf(statistic, counts.size - 1))


# ---------------------------------------------------------------------- (1) the rank law
def test_rank_frequencies_match_the_power_law_after_a_resort():
    per, td = sorted_memory(100, capacity=128)
    ranking = np.argsort(-td)
    counts = rank_counts(per, ranking, batches=1000, batch_size=64)
    assert chi_square_p(counts, rank_law(100)) > 1e-3
    # the test has power: the same counts reject a slightly different exponent, and ranks
    # taken in the opposite order
    assert chi_square_p(counts, rank_law(100, 0.6)) < 1e-6
    assert chi_square_p(counts[::-1], rank_law(100)) < 1e-6


def test_a_batch_takes_one_rank_from_each_equal_segment_of_the_mass():
    per, td = sorted_memory(100, capacity=128)
    rank_of = np.empty(100, np.int64)
    rank_of[np.argsort(-td)] = np.arange(1, 101)
    cumulative = np.concatenate([[0.0], np.cumsum(rank_law(100))])
    for _ in range(50):
        slots, _ = per.sample(8, 0)
        ranks = rank_of[slots]
        # rank r covers [cumulative[r-1], cumulative[r]) and must meet segment b of 8
        segment = np.arange(8) / 8
        assert (cumulative[ranks - 1] < segment + 1 / 8).all()
        assert (cumulative[ranks] > segment - 1e-12).all()


def test_rank_frequencies_between_resorts_count_live_entries_only():
    per, ranking = mixed_memory()
    assert len(per) == ranking.size == 175
    np.testing.assert_array_equal(per.ranked_slots(), ranking)
    counts = rank_counts(per, ranking, batches=1000, batch_size=64)
    assert chi_square_p(counts, rank_law(ranking.size)) > 1e-3


# ---------------------------------------------------------------------- (2) weights and beta
@pytest.mark.parametrize("step", [0, 250, 500, 10_000])
def test_weights_follow_the_formula_normalised_over_the_memory(step):
    per, ranking = mixed_memory()
    per.beta_steps = 500
    n = ranking.size
    beta = 0.5 + 0.5 * min(step / 500, 1.0)
    probs = rank_law(n)
    raw = (n * probs) ** -beta
    rank_of = np.full(per.capacity, -1)
    rank_of[ranking] = np.arange(n)
    slots, weights = per.sample(256, step)
    assert slots.dtype == np.int64 and weights.dtype == np.float32
    np.testing.assert_allclose(weights, raw[rank_of[slots]] / raw.max(), rtol=1e-6)
    assert (weights > 0).all() and (weights <= 1).all()


def test_the_least_likely_rank_has_weight_one_and_small_memories_repeat():
    per, td = sorted_memory(5, capacity=8)
    slots, weights = per.sample(256, 0)  # N < B: every rank is drawn, the last one included
    assert set(slots) == set(range(5))
    last = np.argmin(td)
    assert (weights[slots == last] == 1.0).all()
    assert weights.max() == 1.0 and (weights[slots != last] < 1.0).all()


def test_beta_anneals_linearly_from_beta0_to_one():
    per = RankPrioritized(10, beta0=0.4, beta_steps=1000)
    assert per.beta(0) == pytest.approx(0.4)
    assert per.beta(500) == pytest.approx(0.7)
    assert per.beta(1000) == pytest.approx(1.0)
    assert per.beta(10**9) == pytest.approx(1.0)


# ---------------------------------------------------------------------- (3) updates, new slots
def test_updated_priorities_rank_at_the_next_resort_and_new_slots_get_the_max():
    per, td = sorted_memory(10, capacity=16, resort_every=3)
    ranking = list(np.argsort(-td))
    lowest = ranking[-1]
    per.update(np.array([lowest]), np.array([100.0]))
    per.update(np.array([ranking[0]]), np.array([0.0]))
    # two of three updates: ranks are those of the last re-sort
    np.testing.assert_array_equal(per.ranked_slots(), ranking)
    per.on_write(np.array([12]), np.array([True]))  # new: the maximal priority, rank 1
    assert per.priority[12] == per.priority.max() == pytest.approx(100.0)
    assert per.ranked_slots()[0] == 12
    per.update(np.array([3]), np.array([td[3]]))  # the third update re-sorts
    assert set(per.ranked_slots()[:2]) == {lowest, 12}  # tied at 100, in either order
    assert per.ranked_slots()[-1] == ranking[0]
    # the sampler agrees: the slot at rank N now has the weight one
    slots, weights = per.sample(64, 10**9)
    assert (weights[slots == ranking[0]] == 1.0).all() and (slots == ranking[0]).any()


def test_resorts_rank_by_the_current_priorities_after_random_writes_and_updates():
    per = RankPrioritized(500, resort_every=10, eps=0.0, seed=2)
    rng = np.random.default_rng(2)
    priority = {}  # slot -> priority, kept here: the maximum so far for new slots
    highest = 1.0
    for step in range(300):
        slots = rng.integers(500, size=rng.integers(1, 8))
        valid = rng.random(slots.size) < 0.8
        per.on_write(slots, valid)
        for slot, v in zip(slots, valid):
            priority.pop(slot, None)
            if v:
                priority[slot] = highest
        sampled, _ = per.sample(16, step)
        td = rng.exponential(size=16) * 2
        per.update(sampled, td)
        for slot, p in zip(sampled, td):
            priority[slot] = p
        highest = max(highest, td.max())
        if (step + 1) % 10 == 0:  # right after a re-sort
            ranked = per.ranked_slots()
            assert set(ranked) == set(priority)
            ordered = np.array([priority[s] for s in ranked])
            assert (np.diff(ordered) <= 0).all()


def test_updates_of_slots_outside_the_memory_are_ignored():
    per, _ = sorted_memory(4, capacity=8)
    before = per.max_priority
    per.update(np.array([6]), np.array([1e9]))
    assert per.max_priority == before and len(per) == 4


# ---------------------------------------------------------------------- (4) invalid slots
def test_invalidated_slots_are_never_sampled():
    per, td = sorted_memory(50, capacity=64)
    gone = np.argsort(-td)[:25]  # the 25 most likely slots leave, between re-sorts
    per.on_write(gone, np.zeros(25, bool))
    for _ in range(200):
        slots, _ = per.sample(64, 0)
        assert not np.isin(slots, gone).any()
    per.on_write(np.arange(50), np.zeros(50, bool))
    assert len(per) == 0
    with pytest.raises(OffpolicyError, match="empty"):
        per.sample(4, 0)


def test_a_slot_reported_twice_in_one_write_takes_its_last_report():
    per = RankPrioritized(8)
    per.on_write(np.array([3, 3, 5]), np.array([True, False, True]))
    assert len(per) == 1 and list(per.ranked_slots()) == [5]


def test_follows_a_replay_table_across_wrap_around_and_forgotten_episodes():
    selector = Prioritized(PERSettings(seed=3))
    buf = Table(Storage(64, (1,), 1, num_streams=2), Sampler(selector), OldestEpisode())
    per = selector.per
    per.resort_every = 7
    rng = np.random.default_rng(0)
    for s in range(2):
        buf.start_episode(np.zeros(1), s)
    for step in range(400):
        ended = rng.random(2) < 0.1
        buf.add_batch(np.zeros((2, 1)), np.zeros(2), ended, np.zeros(2, bool), np.zeros((2, 1)))
        for s in np.flatnonzero(ended):
            buf.start_episode(np.zeros(1), s)
        assert len(per) == len(buf)
        slots, weights = per.sample(32, step)
        assert buf.storage.valid[slots].all()
        per.update(slots, rng.exponential(size=32))
    assert set(per.ranked_slots()) == set(np.flatnonzero(buf.storage.valid))


# ---------------------------------------------------------------------- (5) checkpoints
def test_state_round_trip_gives_identical_samples(tmp_path):
    per, _ = mixed_memory()
    per.update(np.array([5, 7]), np.array([3.0, 250.0]))  # max priority, update counter
    np.savez(tmp_path / "per.npz", **per.state_arrays())
    other = RankPrioritized(300, alpha=ALPHA, seed=99)
    with np.load(tmp_path / "per.npz", allow_pickle=False) as z:
        other.load_arrays(z)
    assert len(other) == len(per)
    np.testing.assert_array_equal(other.ranked_slots(), per.ranked_slots())
    rng = np.random.default_rng(5)
    for step in range(1200):  # crosses a re-sort (every 1000 updates)
        a, wa = per.sample(32, step)
        b, wb = other.sample(32, step)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(wa, wb)
        td = rng.exponential(size=32)
        per.update(a, td)
        other.update(b, td)
        write = np.array([rng.integers(300)])
        for p in (per, other):
            p.on_write(write, np.array([step % 3 > 0]))


def test_state_for_another_capacity_is_refused():
    per, _ = sorted_memory(4, capacity=8)
    with pytest.raises(OffpolicyError, match="capacity"):
        RankPrioritized(16).load_arrays(per.state_arrays())
