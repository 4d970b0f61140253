"""`offpolicy bench`: the measurement's fields and their relations (no timing thresholds)."""

import json

from _helpers import assert_one_line_error, run_cli


def test_bench_json_reports_rates_flops_and_efficiency(tmp_path):
    (tmp_path / "c.yaml").write_text("train: {env: Pendulum-v1}\n")  # --config applies too
    proc = run_cli("bench", "ace", "--config", "c.yaml", "--bench-steps", "60",
                   "--bench-warmup", "80", "--rounds", "2", "--batch-size", "16",
                   "--ace.encoder-size", "16", "--ace.hidden", "16", "--ace.num-actors", "2",
                   "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["algo"] == "ace" and res["env"] == "Pendulum-v1" and res["steps"] == 60
    assert res["env_steps_per_s"] > 0 and res["update_per_s"] > 0 and res["matmul_gflops"] > 0
    assert res["gflop_per_update"] > 0 and res["compiles"] == 1
    assert res["backend"] == "cpu" and isinstance(res["device"], str) and res["device"]
    # efficiency: each round's update rate over the peak sampled after it, median over rounds
    rounds, peaks = res["update_per_s_rounds"], res["matmul_gflops_samples"]
    assert len(rounds) == 2 and len(peaks) == 3 and res["matmul_gflops"] in peaks
    per_round = [res["gflop_per_update"] * u / p for u, p in zip(rounds, peaks[1:])]
    assert min(abs(res["flop_efficiency"] - e) for e in per_round) < 1e-9 * max(per_round)
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]  # no run directory written


def test_bench_rejects_bad_input(tmp_path):
    assert_one_line_error(run_cli("bench", "nope", cwd=tmp_path), "unknown algorithm")
    assert_one_line_error(run_cli("bench", "ddpg", "--rounds", "0", cwd=tmp_path), "rounds")


def test_bench_refuses_the_training_flags_it_would_ignore(tmp_path, monkeypatch, capsys):
    from offpolicy import cli

    monkeypatch.chdir(tmp_path)
    for args, contains in ((["--resume"], "--resume does not apply"),
                           (["--run-dir", "R"], "--run-dir does not apply"),
                           (["--steps", "5"], "--steps does not apply: --bench-steps"),
                           (["--config", "missing.yaml"], "missing.yaml does not exist")):
        assert cli.main(["bench", "ddpg", *args]) == 2
        assert contains in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_bench_warms_up_past_the_first_update(tmp_path):
    """TD3 starts updating after 1000 warm-up steps: by default the warm-up runs past them,
    so the first update (and its compilation) is never timed; a warm-up given explicitly that
    ends before it is refused (the timed loop would time env steps without updates)."""
    proc = run_cli("bench", "td3", "--env", "Pendulum-v1", "--bench-steps", "6", "--rounds",
                   "2", "--td3.hidden", "16", "16", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["warmup"] == 1001 and res["compiles"] == 1
    assert res["updates"] == 1 + 6  # the warm-up's one, then one per timed env step
    proc = run_cli("bench", "td3", "--env", "Pendulum-v1", "--bench-warmup", "300",
                   "--bench-steps", "10", "--td3.hidden", "16", "16", cwd=tmp_path)
    assert_one_line_error(proc, "--bench-warmup 300: no update has run by then (this run's "
                                "first update comes at step 1001 or later: 1000 warm-up steps, "
                                "a batch of 100 in replay, --updates-per-step 1); pass a larger "
                                "one, or leave it out")


def test_first_update_step_against_the_loop():
    """The lower bound the warm-up starts from, for the loop's rules: the first step past the
    warm-up (K copies step together), a batch in replay when waiting, then enough steps to owe
    one update at a fractional --updates-per-step; segments end at multiples of k x K."""
    from types import SimpleNamespace

    from offpolicy.training.bench import first_update_step

    def tc(**kw):
        d = dict(num_envs=1, warmup_steps=1000, batch_size=100, wait_for_batch=True,
                 segment_length=0, updates_per_step=1.0)
        return SimpleNamespace(**{**d, **kw})

    assert first_update_step(tc()) == 1001
    assert first_update_step(tc(updates_per_step=0.5)) == 1002  # DQN --preset zoo-cartpole
    assert first_update_step(tc(updates_per_step=0.25, num_envs=4)) == 1004
    assert first_update_step(tc(warmup_steps=101, num_envs=4)) == 104
    assert first_update_step(tc(warmup_steps=0, batch_size=256)) == 256
    assert first_update_step(tc(warmup_steps=0, batch_size=256, wait_for_batch=False)) == 1
    assert first_update_step(tc(warmup_steps=0, batch_size=16, segment_length=20,
                                num_envs=4)) == 80
    assert first_update_step(tc(warmup_steps=0, segment_length=20, num_envs=4)) == 160
