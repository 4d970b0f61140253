"""XLA:CPU defaults (offpolicy/envs/platform.py): added once, never over the user's flags."""

import os

import pytest

from offpolicy.envs import platform


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("OFFPOLICY_XLA_DEFAULTS", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    monkeypatch.setattr("importlib.metadata.version", lambda name: "0.10.2")
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
    env.setattr("importlib.metadata.version", lambda name: "0.11.0")  # an unknown flag is fatal
    assert platform.apply_xla_cpu_defaults() == []
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false"


def test_this_process_runs_with_the_defaults():
    """conftest configures JAX like the Trainer does, before XLA starts."""
    from importlib.metadata import version

    if not version("jaxlib").startswith(platform.XLA_CPU_DEFAULTS_JAXLIB):
        pytest.skip("defaults apply to tested jaxlib versions only")
    assert "--xla_cpu_experimental_ynn_fusion_type=" in os.environ.get("XLA_FLAGS", "")
