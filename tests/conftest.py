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
