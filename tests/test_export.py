"""``offpolicy export``: the exported ONNX and NumPy policies against ``Agent.act`` on 100
observations (continuous to 1e-5, discrete equal), with the run's observation statistics in
them; the one-line refusals; atomic writing; the model card's front matter and command.

Each agent is a fresh one with its parameters and observation statistics set at random (a few
initialised networks act near zero: the output layers start at gain 1e-3), saved with
``Agent.save``; the card and ``--hub`` read one real tiny training run.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import yaml

import offpolicy
from offpolicy import cli

SMALL = {"hidden": (16, 16)}
# id: (algorithm, env, overrides); every one runs with observation normalisation
CASES = {
    "ddpg": ("ddpg", "Pendulum-v1", SMALL),
    "shared-ddpg": ("shared-ddpg", "Pendulum-v1", SMALL),
    "td3": ("td3", "Pendulum-v1", SMALL),
    "sac": ("sac", "Pendulum-v1", SMALL),
    "naf": ("naf", "MountainCarContinuous-v0", SMALL),
    "vracer": ("vracer", "Pendulum-v1", SMALL),
    "acer-continuous": ("acer", "Pendulum-v1", SMALL),
    "acer-discrete": ("acer", "CartPole-v1", SMALL),
    "dqn": ("dqn", "CartPole-v1", SMALL),
    "dqn-dueling": ("dqn", "CartPole-v1", {**SMALL, "dueling": True}),
    "ace": ("ace", "Pendulum-v1", {"encoder_size": 16, "hidden": 16, "num_actors": 3,
                                   "plan_depth": 2}),
    "ensemble-ddpg": ("ensemble-ddpg", "Pendulum-v1", {"encoder_size": 16, "hidden": 16,
                                                       "num_actors": 3}),
    "exact-q": ("exact-q", "Acrobot-v1", SMALL),
}
NUMPY = [c for c in CASES if CASES[c][0] not in ("ace", "ensemble-ddpg", "exact-q")]
N_OBS = 100


def _perturbed(tree, rng):
    """Every float leaf plus N(0, 0.5^2) noise, so that every output layer matters."""
    def leaf(x):
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            return x
        return (x + 0.5 * rng.standard_normal(x.shape)).astype(x.dtype)

    return jax.tree_util.tree_map(leaf, tree)


class Saved:
    """A saved agent of one case and what ``Agent.act`` does on ``obs``."""

    def __init__(self, root: Path, case: str):
        algo, env, over = CASES[case]
        rng = np.random.default_rng(0)
        agent = offpolicy.make(algo, env=env, seed=0, normalize_obs=True, quiet=True, **over)
        r = agent.run
        r.learner.state = _perturbed(r.learner.state, rng)
        d = r.obs_shape[0]
        r.obs_norm.rms.mean = rng.normal(0.0, 2.0, d)
        r.obs_norm.rms.var = rng.uniform(0.2, 5.0, d)
        self.path = agent.save(root / case)
        # around the statistics, a few far out (clipped at 10 standard deviations)
        self.obs = (r.obs_norm.rms.mean + np.sqrt(r.obs_norm.rms.var)
                    * rng.normal(0.0, 1.5, (N_OBS, d))).astype(np.float32)
        self.obs[:5] *= 40.0
        self.discrete = r.spec.kind != "continuous"
        self.actions = np.stack([np.asarray(agent.act(o)) for o in self.obs])
        agent.close()

    def check(self, got: np.ndarray) -> None:
        got = np.asarray(got)
        assert got.shape[0] == N_OBS
        got = got.reshape(self.actions.shape)
        if self.discrete:
            np.testing.assert_array_equal(got, self.actions)
        else:
            assert not np.allclose(self.actions, self.actions[0])  # the policy does something
            np.testing.assert_allclose(got, self.actions, rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("export-agents")
    cache: dict[str, Saved] = {}

    def get(case: str) -> Saved:
        if case not in cache:
            cache[case] = Saved(root, case)
        return cache[case]

    return get


def _export(src: Path, out: Path, *args: str) -> None:
    assert cli.main(["export", str(src), "--out", str(out), *args]) == 0


def _import_policy(folder: Path, monkeypatch):
    """policy.py imported from ``folder`` with JAX and offpolicy unimportable."""
    for name in ("jax", "flax", "offpolicy"):
        monkeypatch.setitem(sys.modules, name, None)
    spec = importlib.util.spec_from_file_location(f"exported_{folder.name}",
                                                  folder / "policy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.undo()
    return module.Policy()


def _one_line_error(capsys, *argv: str, contains: str) -> str:
    assert cli.main(list(argv)) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("offpolicy: error:"), err
    assert contains in err[0], err
    return err[0]


# ---------------------------------------------------------------------- NumPy
@pytest.mark.parametrize("case", NUMPY)
def test_numpy_policy_is_act(saved, case, tmp_path, monkeypatch):
    s = saved(case)
    _export(s.path, tmp_path / "np", "--format", "numpy")
    assert sorted(p.name for p in (tmp_path / "np").iterdir()) == [
        "policy.json", "policy.npz", "policy.py"]
    policy = _import_policy(tmp_path / "np", monkeypatch)
    s.check(policy(s.obs))
    one = policy(s.obs[0])  # one observation in, one action out
    assert np.shape(one) == np.shape(s.actions[0])


def test_numpy_includes_the_observation_statistics(saved, tmp_path, monkeypatch):
    s = saved("ddpg")
    _export(s.path, tmp_path / "np", "--format", "numpy")
    spec = json.loads((tmp_path / "np" / "policy.json").read_text())
    assert spec["observation"]["normalize"] == {"clip": 10.0}
    policy = _import_policy(tmp_path / "np", monkeypatch)
    policy.spec["observation"]["normalize"] = None  # without them it is another policy
    assert np.abs(policy(s.obs) - s.actions).max() > 1e-2


# ---------------------------------------------------------------------- ONNX
@pytest.mark.parametrize("case", list(CASES))
def test_onnx_policy_is_act(saved, case, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("jax2onnx")
    s = saved(case)
    _export(s.path, tmp_path / "onnx", "--format", "onnx")
    session = ort.InferenceSession(str(tmp_path / "onnx" / "policy.onnx"))
    assert [i.name for i in session.get_inputs()] == ["obs"]
    (action,) = session.run(["action"], {"obs": s.obs})
    s.check(action)


def test_a_missing_extra_is_one_line(saved, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "jax2onnx", None)
    _one_line_error(capsys, "export", str(saved("ddpg").path), "--format", "onnx", "--out",
                    str(tmp_path / "o"), contains="pip install 'offpolicy[export]'")
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------- refusals
@pytest.mark.parametrize("case,contains", [
    ("ace", "tree search"), ("exact-q", "searches the Q value of every action")])
def test_numpy_refuses_searches_and_names_onnx(saved, case, contains, tmp_path, capsys):
    line = _one_line_error(capsys, "export", str(saved(case).path), "--format", "numpy",
                           "--out", str(tmp_path / "o"), contains=contains)
    assert "--format onnx" in line
    assert list(tmp_path.iterdir()) == []  # not even a temporary folder


@pytest.mark.parametrize("algo,env,over,contains", [
    ("aql", "CartPole-v1", {"hidden": (16,), "proposal_hidden": (16,)}, "sampled afresh"),
    ("ddpg", "Pendulum-v1", {**SMALL, "core": "gru", "core_cells": 8}, "recurrent core"),
], ids=["aql-sampled-search", "recurrent-core"])
@pytest.mark.parametrize("fmt", ["numpy", "onnx"])
def test_refused_in_one_line(algo, env, over, contains, fmt, tmp_path, capsys):
    if fmt == "onnx":
        pytest.importorskip("jax2onnx")
    agent = offpolicy.make(algo, env=env, quiet=True, **over)
    path = agent.save(tmp_path / "agent")
    agent.close()
    _one_line_error(capsys, "export", str(path), "--format", fmt, "--out",
                    str(tmp_path / "o"), contains=contains)
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------- writing
def test_out_is_refused_when_taken_and_replaced_with_force(saved, tmp_path, capsys):
    src = saved("dqn").path
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    _one_line_error(capsys, "export", str(src), "--format", "numpy", "--out", str(out),
                    contains="is not empty (--force replaces it)")
    assert (out / "keep.txt").read_text() == "mine"
    (tmp_path / "f").write_text("a file")
    _one_line_error(capsys, "export", str(src), "--format", "numpy", "--out",
                    str(tmp_path / "f"), contains="is a file")
    _export(src, out, "--format", "numpy", "--force")
    assert sorted(p.name for p in out.iterdir()) == ["policy.json", "policy.npz", "policy.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "o"]  # nothing temporary left
    _one_line_error(capsys, "export", str(src), "--format", "numpy", "--out", str(src),
                    "--force", contains="holds the run being exported")


def test_a_failed_write_leaves_nothing(saved, tmp_path, capsys, monkeypatch):
    from offpolicy import export

    def fail(agent, folder):
        (folder / "policy.json").write_text("{}")  # half written
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "write_numpy", fail)
    _one_line_error(capsys, "export", str(saved("dqn").path), "--format", "numpy", "--out",
                    str(tmp_path / "a" / "b"), contains="No space left on device")
    assert list(tmp_path.iterdir()) == []  # its folders went too


@pytest.mark.parametrize("argv,contains", [
    (["--out", "o"], "--format is required"),
    (["--format", "numpy"], "--format numpy needs --out DIR"),
    (["--hub", "h", "--out", "o"], "give --hub or --out, not both"),
    (["--hub", "h", "--format", "onnx"], "--hub writes the model card"),
    (["--format", "pdf", "--out", "o"], "invalid choice: 'pdf'"),
])
def test_bad_arguments_are_one_line(tmp_path, capsys, monkeypatch, argv, contains):
    monkeypatch.chdir(tmp_path)
    _one_line_error(capsys, "export", "run", *argv, contains=contains)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------- the model card
@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny real run: config.yaml, eval.csv (two evaluations), curve.png, checkpoints."""
    run = tmp_path_factory.mktemp("export-run") / "run"
    assert cli.main(["train", "ddpg", "--env", "Pendulum-v1", "--steps", "200",
                     "--warmup-steps", "100", "--eval-every", "100", "--eval-episodes", "2",
                     "--batch-size", "16", "--ddpg.hidden", "16", "16", "--normalize-obs",
                     "--ddpg.actor-lr=3e-4", "--no-save-replay", "--quiet",
                     "--run-dir", str(run)]) == 0
    return run


def _front_matter(readme: Path) -> dict:
    text = readme.read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_card_front_matter_and_command(trained, tmp_path):
    from offpolicy.plotting import read_eval_csv
    from offpolicy.registry import RunConfig, load_yaml
    from offpolicy.train_args import resolve_train

    _export(trained, tmp_path / "card", "--format", "card")
    assert sorted(p.name for p in (tmp_path / "card").iterdir()) == [
        "README.md", "config.yaml", "curve.png", "eval.csv"]
    meta = _front_matter(tmp_path / "card" / "README.md")
    assert meta["library_name"] == "offpolicy"
    assert {"reinforcement-learning", "ddpg", "Pendulum-v1"} <= set(meta["tags"])
    (result,) = meta["model-index"][0]["results"]
    assert result["dataset"]["name"] == "Pendulum-v1"
    final, best = result["metrics"]
    rows = read_eval_csv(trained / "eval.csv")
    assert final["type"] == best["type"] == "mean_reward"
    assert final["value"].startswith(f"{rows[-1]['return_mean']:.2f} +/- ")
    assert f"{max(r['return_mean'] for r in rows):.2f}" in best["value"]
    text = (tmp_path / "card" / "README.md").read_text()
    assert f"offpolicy {offpolicy.__version__}" in text
    assert "![learning curve](curve.png)" in text and "| 200 |" in text
    assert (trained / "config.yaml").read_text().strip() in text
    # the command in the card trains the same configuration
    command = next(ln for ln in text.splitlines() if ln.startswith("offpolicy train ddpg --env"))
    argv = shlex.split(command)
    saved = RunConfig.from_dict(load_yaml(trained / "config.yaml"))
    assert resolve_train(argv[2], argv[3:]).to_dict() == saved.to_dict()


def test_card_command_leaves_out_where_the_run_logged():
    """A run logged to W&B: the card's command trains the same agent without naming the
    author's W&B project, team or mode (LOGGING_ONLY), and everything else resolves alike."""
    from offpolicy.export import LOGGING_ONLY, train_command
    from offpolicy.train_args import resolve_train

    argv = ["--env", "Pendulum-v1", "--steps", "300", "--batch-size", "16",
            "--wandb-project", "secret-project", "--wandb-entity", "my-team",
            "--wandb-mode", "offline", "--ddpg.hidden", "16", "16"]
    run = resolve_train("ddpg", argv)
    command = train_command(run)
    assert not any("wandb" in a or a in ("secret-project", "my-team") for a in command)
    again = resolve_train(command[2], command[3:]).to_dict()
    mine = run.to_dict()
    for name in LOGGING_ONLY:
        assert again["train"].pop(name) != mine["train"].pop(name)
    assert again == mine


def test_hub_folder_loads_and_acts_as_the_run(trained, tmp_path):
    assert cli.main(["export", str(trained), "--hub", str(tmp_path / "hub"),
                     "--checkpoint", "best"]) == 0
    assert (tmp_path / "hub" / "README.md").exists()
    assert not (tmp_path / "hub" / "checkpoint" / "replay.npz").exists()
    obs = np.array([0.5, -0.8, 3.0], np.float32)
    run, hub = offpolicy.load(trained, "best"), offpolicy.load(tmp_path / "hub" / "checkpoint")
    np.testing.assert_array_equal(hub.act(obs), run.act(obs))
    run.close()
    hub.close()


def test_card_needs_a_run_directory(saved, tmp_path, capsys):
    _one_line_error(capsys, "export", str(saved("dqn").path), "--format", "card", "--out",
                    str(tmp_path / "c"), contains="is not a run directory")
