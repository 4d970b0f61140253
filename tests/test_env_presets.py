"""Env default presets (``Algorithm.env_presets``): a new AQL-family run on Platform gets
``--preset small`` unless a preset is named; ``--preset none`` gives the defaults; a saved or
resumed run keeps the preset it was made with."""

from __future__ import annotations

import pytest
import yaml

from offpolicy import cli, registry
from offpolicy.config import AQLConfig

PLATFORM = "offpolicy/Platform-v0"
SMALL = registry.get("aql").presets["small"]


@pytest.mark.parametrize("algo", ["aql", "uniform-q", "qt-opt"])
def test_platform_defaults_to_small_and_none_opts_out(algo):
    run = registry.resolve(algo, train_overrides={"env": PLATFORM})
    assert run.preset == "small"
    assert run.agent.hidden == SMALL["hidden"] and run.train.batch_size == 16
    plain = registry.resolve(algo, preset="none", train_overrides={"env": PLATFORM})
    assert plain.preset is None and plain.agent.hidden == AQLConfig().hidden
    assert plain.train.batch_size == 32
    named = registry.resolve(algo, preset="paper", train_overrides={"env": PLATFORM})
    assert named.preset == "paper" and named.agent.hidden == AQLConfig().hidden
    # flags still win over the env's preset
    run = registry.resolve(algo, train_overrides={"env": PLATFORM, "batch_size": 8})
    assert run.preset == "small" and run.train.batch_size == 8


def test_other_envs_and_algorithms_have_no_env_preset():
    assert registry.resolve("aql", train_overrides={"env": "CartPole-v1"}).preset is None
    # DDPG's defaults are its paper preset, which config.yaml names; no env default applies
    assert registry.resolve("ddpg", train_overrides={"env": PLATFORM}).preset == "paper"
    assert registry.env_preset("aql", PLATFORM) == "small"
    assert registry.env_preset("aql", "CartPole-v1") is None


def test_saved_config_keeps_its_preset():
    """A config.yaml of a defaults run on Platform (preset null) reloads with the defaults;
    one made with the env's preset records it and reloads the same."""
    plain = registry.resolve("aql", preset="none", train_overrides={"env": PLATFORM})
    again = registry.RunConfig.from_dict(plain.to_dict())
    assert again.preset is None and again.agent.hidden == AQLConfig().hidden
    small = registry.resolve("aql", train_overrides={"env": PLATFORM})
    assert small.to_dict()["preset"] == "small"
    assert registry.RunConfig.from_dict(small.to_dict()).to_dict() == small.to_dict()


class _FakeRun:
    """Stands in for training.run.Run: records the config the CLI resolved."""

    seen: list = []

    def __init__(self, run, run_dir, resume=False):
        _FakeRun.seen.append((run, resume))

    def train(self):
        return {"status": "done", "final_return": 0.0, "best_return": 0.0, "step": 0}

    def close(self):
        pass


def test_cli_announces_the_env_preset_and_resume_keeps_the_saved_one(tmp_path, monkeypatch,
                                                                      capsys):
    import offpolicy.training.run as run_module

    monkeypatch.setattr(run_module, "Run", _FakeRun)
    _FakeRun.seen.clear()
    assert cli.main(["train", "aql", "--env", PLATFORM, "--run-dir", str(tmp_path / "a")]) == 0
    run, _ = _FakeRun.seen[-1]
    assert run.preset == "small" and run.agent.hidden == SMALL["hidden"]
    assert "uses --preset small by default" in capsys.readouterr().err

    assert cli.main(["train", "aql", "--env", PLATFORM, "--preset", "none",
                     "--run-dir", str(tmp_path / "b")]) == 0
    run, _ = _FakeRun.seen[-1]
    assert run.preset is None and run.agent.hidden == AQLConfig().hidden
    assert "by default" not in capsys.readouterr().err

    # a run made with the defaults before Platform had a default preset resumes as it was
    saved = tmp_path / "old"
    saved.mkdir()
    plain = registry.resolve("aql", preset="none", train_overrides={"env": PLATFORM})
    (saved / "config.yaml").write_text(yaml.safe_dump(plain.to_dict()))
    assert cli.main(["train", "aql", "--env", PLATFORM, "--run-dir", str(saved),
                     "--resume", "--steps", "500000"]) == 0
    run, resume = _FakeRun.seen[-1]
    assert resume and run.preset is None and run.agent.hidden == AQLConfig().hidden
    assert run.train.steps == 500_000


def test_help_and_list_show_none_and_the_env_default(capsys):
    assert cli.main(["list"]) == 0
    listed = " ".join(capsys.readouterr().out.split())
    assert f"presets: paper, small, lstm, paper-distributed (small on {PLATFORM})" in listed
    with pytest.raises(SystemExit):
        cli.main(["train", "aql", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "none (the defaults" in out and f"Default on {PLATFORM}: small" in out
