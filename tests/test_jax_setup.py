"""XLA:CPU defaults (offpolicy/jax_setup.py): added once, never over the user's flags."""

import os

import pytest

from offpolicy import jax_setup as platform


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("OFFPOLICY_XLA_DEFAULTS", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    monkeypatch.setattr(platform, "_jaxlib_version", lambda: "0.10.2")
    monkeypatch.setattr(platform, "_backends_started", lambda: False)
    return monkeypatch


def test_defaults_are_appended_once(env):
    added = platform.apply_xla_cpu_defaults()
    assert added == ["--xla_cpu_experimental_ynn_fusion_type="]
    assert os.environ["XLA_FLAGS"] == ("--xla_cpu_multi_thread_eigen=false "
                                       "--xla_cpu_experimental_ynn_fusion_type=")
    assert platform.apply_xla_cpu_defaults() == []  # idempotent
    assert os.environ["XLA_FLAGS"].count("ynn_fusion_type") == 1


def test_user_flag_wins(env):
    env.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=dot")
    assert platform.apply_xla_cpu_defaults() == []
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_experimental_ynn_fusion_type=dot"


def test_opt_out_and_untested_jaxlib(env):
    env.setenv("OFFPOLICY_XLA_DEFAULTS", "off")
    assert platform.apply_xla_cpu_defaults() == []
    env.delenv("OFFPOLICY_XLA_DEFAULTS")
    env.setattr(platform, "_jaxlib_version", lambda: "0.11.0")  # an unknown flag is fatal
    assert platform.apply_xla_cpu_defaults() == []
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false"


def test_a_longer_flag_with_the_same_prefix_is_not_ours(env):
    env.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type_x=1")
    assert platform.apply_xla_cpu_defaults() == ["--xla_cpu_experimental_ynn_fusion_type="]


def test_too_late_warns_and_leaves_flags_alone(env):
    env.setattr(platform, "_backends_started", lambda: True)
    with pytest.warns(UserWarning, match="not applied"):
        assert platform.apply_xla_cpu_defaults() == []
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false"


def test_this_process_runs_with_the_defaults():
    """conftest configures JAX as build() does, before XLA starts (it asserts that)."""
    version = platform._jaxlib_version() or ""
    if not version.startswith(platform.XLA_CPU_DEFAULTS_JAXLIB):
        pytest.skip("defaults apply to tested jaxlib versions only")
    if os.environ.get("OFFPOLICY_XLA_DEFAULTS", "").lower() == "off":
        pytest.skip("the suite runs with OFFPOLICY_XLA_DEFAULTS=off")
    assert "--xla_cpu_experimental_ynn_fusion_type=" in os.environ.get("XLA_FLAGS", "")


def test_the_cache_keeps_every_compile_the_short_ones_too():
    """configure_jax (run by conftest.py) caches compiles of any length: building an agent runs
    some forty short eager computations, which each process would otherwise compile again."""
    import jax

    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    assert jax.config.jax_persistent_cache_min_entry_size_bytes == 0
    assert jax.config.jax_compilation_cache_dir == os.environ["OFFPOLICY_CACHE_DIR"]
