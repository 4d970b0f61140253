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


# The files that take longest, longest first (seconds on a 2-core host, from pytest's
# --durations: the README block ~280, suites ~240, learning ~190, fault probe ~130, examples
# ~125, golden runs ~100, Ray ~70). `make test` runs files whole on two workers (--dist
# loadfile) in collection order (--no-loadscope-reorder; xdist's own reorder puts the files with
# most tests first, which left the 4-minute README test, two tests, to start last while the
# other worker idled). Longest first is the classic greedy schedule; every other file keeps its
# alphabetical place after these.
LONGEST_FIRST = ("test_readme.py", "test_suites.py", "test_learning.py", "test_fault_probe.py",
                 "test_examples.py", "test_golden.py", "test_distributed_ray.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))
