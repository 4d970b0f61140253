"""Shared test set-up: JAX on the CPU with the persistent compilation cache, small helpers."""

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OFFPOLICY_CACHE_DIR", str(Path.home() / ".cache" / "offpolicy" / "jax"))
sys.path.insert(0, str(Path(__file__).parent))

from offpolicy.jax_setup import _backends_started, configure_jax  # noqa: E402

assert not _backends_started(), "XLA must start after configure_jax() (XLA_FLAGS defaults)"
configure_jax()


@pytest.fixture
def ray_turn(tmp_path_factory):
    """For a test that starts Ray: it runs when no other test of the run has Ray up."""
    from _helpers import one_ray_at_a_time

    with one_ray_at_a_time(tmp_path_factory):
        yield


# The files that take longest, longest first, by their summed test times in a cold run (no
# persistent compilation cache, as on a fresh CI machine; pytest --durations=0 on 2026-11-28).
# `make test` runs files whole on two workers (--dist loadfile) in collection order
# (--no-loadscope-reorder): xdist's own reorder puts the files with most tests first, which left
# the README test (two tests, one of the longest) to start last. Replaying that run's durations
# through both orders, greedily on two workers: 5268 s with xdist's order (the run itself took
# 5280 s, on a host running two training jobs), 5056 s with this one (-4%). Every other file
# keeps its alphabetical place after these.
LONGEST_FIRST = ("test_suites.py", "test_examples.py", "test_golden.py", "test_readme.py",
                 "test_recurrent.py", "test_fault_probe.py", "test_ace.py",
                 "test_td3_sac_dqn.py", "test_aql.py", "test_learning.py", "test_protocol.py",
                 "test_distributed_ray.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))
