"""Issue 69, item 3: Weights & Biases as an optional extra (``--wandb-project``, the ``wandb``
extra). A real run in wandb's offline mode (no network): the scalars TensorBoard gets, at the
same steps, the resolved config, the curve; a resumed run logs into the same W&B run; without
the flag nothing imports wandb; without the package one line, exit 2.

The W&B run itself is checked with wandb installed (``make test`` installs the extra); without
it those tests skip, the others run."""

import subprocess
import sys

import pytest
from _helpers import SUBPROCESS_TIMEOUT, cli_env, read_csv

import offpolicy
from offpolicy.cli import main
from offpolicy.errors import OffpolicyError
from offpolicy.training import wandb_log

TINY = dict(hidden=(8, 8), batch_size=8, warmup_steps=20, eval_every=100, eval_episodes=1,
            log_every=50, quiet=True)


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """wandb offline in tmp_path, and every WandbLog.log call recorded."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    calls = []
    log = wandb_log.WandbLog.log

    def recorded(self, scalars, step):
        calls.append((step, dict(scalars)))
        log(self, scalars, step)

    monkeypatch.setattr(wandb_log.WandbLog, "log", recorded)
    return calls


def test_an_offline_wandb_run_gets_what_tensorboard_gets(tmp_path, offline):
    run_dir = tmp_path / "run"
    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, run_dir=run_dir,
                           wandb_project="offpolicy-test", **TINY)
    assert agent.run.wandb is wandb_log.OFF  # opened when training starts
    agent.learn(200)
    wb = agent.run.wandb.run
    assert wb.name == "run" and wb.config["algo"] == "ddpg"
    assert wb.config["train"]["wandb_project"] == "offpolicy-test"
    assert list(wb.config["ddpg"]["hidden"]) == [8, 8]
    run_id = (run_dir / "wandb" / "run_id").read_text().strip()
    assert wb.id == run_id
    agent.close()

    evals = [(s, x["eval/return_mean"]) for s, x in offline if "eval/return_mean" in x]
    assert evals == [(int(r["step"]), pytest.approx(float(r["return_mean"]), rel=1e-6))
                     for r in read_csv(run_dir / "eval.csv")]
    rows = read_csv(run_dir / "train.csv")
    trains = [(s, x) for s, x in offline if "train/critic_loss" in x]
    assert [s for s, _ in trains] == [int(r["step"]) for r in rows] == [50, 100, 150, 200]
    assert trains[-1][1]["train/critic_loss"] == pytest.approx(float(rows[-1]["critic_loss"]),
                                                               rel=1e-6)
    # wandb's own record of the run: its offline directory, the history keys, the curve
    (folder,) = (run_dir / "wandb").glob(f"offline-run-*-{run_id}")
    record = (folder / f"run-{run_id}.wandb").read_bytes()
    for key in (b"eval/return_mean", b"train/critic_loss", b"env_step", b"curve"):
        assert key in record, key
    assert list(folder.rglob("curve_*.png"))

    # resumed on the command line (the saved --wandb-project holds): the same W&B run id, a
    # second offline directory for `wandb sync`, the new steps logged
    offline.clear()
    assert main(["train", "ddpg", "--run-dir", str(run_dir), "--resume", "--steps", "300",
                 "--quiet"]) == 0
    assert (run_dir / "wandb" / "run_id").read_text().strip() == run_id
    assert len(list((run_dir / "wandb").glob(f"offline-run-*-{run_id}"))) == 2
    assert [s for s, x in offline if "eval/return_mean" in x] == [300]
    # loaded to act, the agent logs nowhere
    assert offpolicy.load(run_dir).config.train.wandb_project == ""


def test_without_the_flag_nothing_imports_wandb(tmp_path):
    # in a process of its own: this one may have imported wandb for another test
    code = ("import sys, offpolicy\n"
            "agent = offpolicy.make('ddpg', env='Pendulum-v1', run_dir='run', hidden=(8, 8), "
            "batch_size=8, warmup_steps=20, eval_every=50, eval_episodes=1, quiet=True)\n"
            "assert agent.learn(50)['status'] == 'completed'\n"
            "agent.close()\n"
            "print('wandb' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "False", proc.stdout
    assert (tmp_path / "run" / "eval.csv").exists() and not (tmp_path / "run" / "wandb").exists()


def test_without_the_package_the_flag_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if it were not installed
    with pytest.raises(OffpolicyError, match=r"pip install 'offpolicy\[wandb\]'"):
        offpolicy.make("ddpg", env="Pendulum-v1", run_dir=tmp_path / "run",
                       wandb_project="p", **TINY)
    assert not (tmp_path / "run").exists()
    rc = main(["train", "ddpg", "--steps", "100", "--run-dir", str(tmp_path / "cli"),
               "--wandb-project", "p", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "offpolicy[wandb]" in err, err
    assert not (tmp_path / "cli").exists()


def test_the_wandb_flags_are_watching_flags():
    from offpolicy import registry
    from offpolicy.training.rundir import NAME_SKIPS, default_run_dir

    assert {"wandb_project", "wandb_entity", "wandb_mode"} <= NAME_SKIPS
    watched = registry.resolve("ddpg", train_overrides={"wandb_project": "p",
                                                        "wandb_mode": "offline"})
    assert default_run_dir(watched, new=False) == default_run_dir(registry.resolve("ddpg"),
                                                                  new=False)
    assert {"wandb_project", "wandb_entity", "wandb_mode"} <= \
        registry.RunConfig.RESUME_CHANGEABLE
    with pytest.raises(OffpolicyError, match="--wandb-mode: invalid choice"):
        offpolicy.make("ddpg", wandb_mode="sometimes")
