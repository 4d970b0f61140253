"""Comparisons a user can trust (issue #38): `table` and `plot` group runs by env and by what
was run, label groups by what differs, compare runs of different lengths at their common
steps, and skip runs without a `--metric` column with one line."""

from __future__ import annotations

import yaml
from _helpers import run_cli

from offpolicy import registry
from offpolicy.plotting import group_by_env


def _run(root, name, algo, env, seed, steps, preset=None, metrics=("critic_loss",), **train):
    run = registry.resolve(algo, preset=preset, train_overrides={"env": env, "seed": seed,
                                                                 **train})
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(run.to_dict(), sort_keys=False))
    rows = [f"{s},{-100.0 + s / 1000 + seed},1.0,0.5,2,0.1" for s in range(1000, steps + 1,
                                                                              1000)]
    (d / "eval.csv").write_text("step,return_mean,return_std,return_se,episodes,wall_time\n"
                                + "\n".join(rows) + "\n")
    (d / "train.csv").write_text("step," + ",".join(metrics) + "\n"
                                 + "\n".join(f"{s}," + ",".join("1.0" for _ in metrics)
                                             for s in range(1000, steps + 1, 1000)) + "\n")
    return d


def _runs(tmp_path):
    r = tmp_path / "runs"
    _run(r, "ddpg-cheetah-s0", "ddpg", "HalfCheetah-v5", 0, 3000)
    _run(r, "ddpg-cheetah-s1", "ddpg", "HalfCheetah-v5", 1, 5000)  # longer: compared at 3000
    _run(r, "ddpg-cheetah-fast-s0", "ddpg", "HalfCheetah-v5", 0, 3000, preset="fast")
    _run(r, "ddpg-pendulum-s0", "ddpg", "Pendulum-v1", 0, 2000)
    _run(r, "naf-pendulum-per-s0", "naf", "Pendulum-v1", 0, 2000, replay="per")
    _run(r, "naf-pendulum-s0", "naf", "Pendulum-v1", 0, 2000, metrics=("loss",))
    return r


def test_groups_never_mix_envs_or_configurations(tmp_path):
    by_env = group_by_env(sorted((_runs(tmp_path)).iterdir()))
    assert list(by_env) == ["HalfCheetah-v5", "Pendulum-v1"]
    cheetah = {label: sorted(d.name for d in dirs)
               for label, dirs in by_env["HalfCheetah-v5"].items()}
    assert cheetah == {"ddpg preset=paper": ["ddpg-cheetah-s0", "ddpg-cheetah-s1"],
                       "ddpg preset=fast": ["ddpg-cheetah-fast-s0"]}
    pendulum = {label: [d.name for d in dirs] for label, dirs in by_env["Pendulum-v1"].items()}
    assert pendulum == {"ddpg": ["ddpg-pendulum-s0"], "naf replay=er": ["naf-pendulum-s0"],
                        "naf replay=per": ["naf-pendulum-per-s0"]}


def test_table_splits_by_env_and_compares_lengths_at_their_common_step(tmp_path):
    _runs(tmp_path)
    p = run_cli("table", "runs", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    cheetah, pendulum = p.stdout.split("Pendulum-v1")
    assert "HalfCheetah-v5" in cheetah and "naf" not in cheetah
    assert "| ddpg preset=paper | 2 | 3000* |" in cheetah  # the 5000-step run cut at 3000
    assert "runs of different lengths" in cheetah
    assert "| naf replay=per | 1 | 2000 |" in pendulum and "preset=fast" not in pendulum


def test_plot_draws_one_panel_per_env_and_names_runs_without_the_metric(tmp_path):
    _runs(tmp_path)
    p = run_cli("plot", "runs", "--out", "figs/curves.png", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "figs" / "curves.png").exists()  # a missing folder is made
    again = run_cli("plot", "runs", "--out", "figs/curves.png", cwd=tmp_path)
    assert "replacing the file there" in again.stdout
    m = run_cli("plot", "runs", "--metric", "critic_loss", "--out", "m.png", cwd=tmp_path)
    assert m.returncode == 0, m.stderr
    notes = [line for line in m.stderr.splitlines() if "left out" in line]
    assert len(notes) == 1, m.stderr
    assert "1 run without a train.csv column 'critic_loss'" in notes[0]
    assert notes[0].endswith("naf-pendulum-s0"), notes[0]


def test_a_run_from_an_older_config_yaml_is_the_same_configuration(tmp_path):
    """A run written before config.yaml named the paper preset (preset: null) and before a
    field existed (train.sync_every) groups with a newer run of the same settings; a run that
    really differs (--preset fast) stays apart."""
    r = tmp_path / "runs"
    old = _run(r, "old-s0", "ddpg", "HalfCheetah-v5", 0, 2000)
    new = _run(r, "new-s1", "ddpg", "HalfCheetah-v5", 1, 2000)
    fast = _run(r, "fast-s2", "ddpg", "HalfCheetah-v5", 2, 2000, preset="fast")
    cfg = yaml.safe_load((old / "config.yaml").read_text())
    assert cfg["preset"] == "paper"
    cfg["preset"] = None
    del cfg["train"]["sync_every"]
    (old / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    groups = group_by_env([old, new, fast])["HalfCheetah-v5"]
    assert groups == {"ddpg preset=fast": [fast], "ddpg preset=paper": [old, new]}


def test_a_field_an_older_run_lacks_takes_the_value_it_loads_with(tmp_path):
    """An older run without a newer field (train.warmup_actions) is filled with the value it
    ran with (what loading it gives: registry.SAVED_BEFORE, auto), not with the value the
    newer runs beside it happen to share, nor the one its preset sets today (SAC's sb3:
    uniform): it groups apart from the newer runs of its preset, with a newer run that
    names auto."""
    r = tmp_path / "runs"
    old = _run(r, "old-s0", "sac", "HalfCheetah-v5", 0, 2000, preset="sb3")
    uniform = [_run(r, f"uniform-s{s}", "sac", "HalfCheetah-v5", s, 2000, preset="sb3",
                    warmup_actions="uniform") for s in (1, 2)]
    cfg = yaml.safe_load((old / "config.yaml").read_text())
    del cfg["train"]["warmup_actions"]
    (old / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert group_by_env([old, *uniform], registry.resolved_flat)["HalfCheetah-v5"] == {
        "sac warmup_actions=auto": [old], "sac warmup_actions=uniform": uniform}
    new = _run(r, "new-s3", "sac", "HalfCheetah-v5", 3, 2000, preset="sb3")
    auto = _run(r, "auto-s5", "sac", "HalfCheetah-v5", 5, 2000, preset="sb3",
                warmup_actions="auto")
    groups = group_by_env([old, new, auto, *uniform], registry.resolved_flat)["HalfCheetah-v5"]
    assert groups == {"sac warmup_actions=auto": [old, auto],
                      "sac warmup_actions=uniform": [new, *uniform]}
    # a second older run of another preset: each is filled from its own preset's config
    paper = _run(r, "old-paper-s4", "sac", "HalfCheetah-v5", 4, 2000)
    cfg = yaml.safe_load((paper / "config.yaml").read_text())
    del cfg["train"]["warmup_actions"]
    (paper / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    groups = group_by_env([old, paper, new, *uniform], registry.resolved_flat)["HalfCheetah-v5"]
    assert [old] in groups.values() and [paper] in groups.values()
    assert [new, *uniform] in groups.values() and len(groups) == 3
