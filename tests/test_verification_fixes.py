"""Fixes from an independent verification (issue #34); each test failed before its fix.

* item 1 (V^tbc of a truncated episode) is tested in test_refer.py beside the other stored-target
  checks;
* item 2: ``--async-envs`` workers start without forking the JAX process;
* item 3: frames stored once in replay (test_replay.py has the layout's own checks);
* item 4: a run ends at its ``--steps``;
* item 5: warnings a user should not see.
"""

from __future__ import annotations

import warnings

import pytest
from _helpers import read_csv, run_cli


# ---------------------------------------------------------------------- item 2
@pytest.mark.parametrize("algo,env,extra", [
    ("ddpg", "Pendulum-v1", ["--ddpg.hidden", "32", "32", "--batch-size", "16"]),
    ("acer", "CartPole-v1", []),
])
def test_async_envs_run_to_the_end_without_forking_jax(tmp_path, algo, env, extra):
    """``--num-envs 4 --async-envs`` runs DDPG and ACER to the end, and JAX never warns that
    os.fork() was called in its (multi-threaded) process."""
    p = run_cli("train", algo, "--env", env, "--steps", "400", "--num-envs", "4",
                "--async-envs", "--eval-every", "400", "--eval-episodes", "1", "--quiet",
                "--run-dir", "R", *extra, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "fork" not in p.stderr.lower(), p.stderr
    assert [int(r["step"]) for r in read_csv(tmp_path / "R" / "eval.csv")] == [400]


# ---------------------------------------------------------------------- item 5
def test_mujoco_envs_are_built_without_the_model_files_deprecation(tmp_path, monkeypatch,
                                                                     capfd):
    """Every MuJoCo env construction printed MuJoCo 3.17's 'settotalmass' deprecation about
    Gymnasium's own model files (to the C-level stderr and to MUJOCO_LOG.TXT in the working
    directory); it is filtered where envs are built, and nothing wider."""
    pytest.importorskip("mujoco")
    from offpolicy.envs.make import make_env, mujoco_warning

    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        make_env("HalfCheetah-v5", 0).close()
        make_env("Hopper-v5", 0).close()
    out, err = capfd.readouterr()
    assert "settotalmass" not in out + err, err
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    assert not [w for w in seen if "settotalmass" in str(w.message)], [str(w.message)
                                                                       for w in seen]
    with pytest.warns(UserWarning, match="MuJoCo: Nan, Inf or huge value in QACC"):
        mujoco_warning("Nan, Inf or huge value in QACC at DOF 0")


def test_the_package_metadata_uses_an_spdx_license():
    """``project.license`` as a TOML table is deprecated (setuptools refuses it after
    2027-02-18): an SPDX string and ``license-files``."""
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert all((root / f).is_file() for f in project["license-files"])
    assert "Apache License" in (root / "LICENSE").read_text()


def test_a_box2d_env_without_box2d_names_the_box2d_extra():
    """LunarLander, CarRacing and BipedalWalker need Box2D: the error names offpolicy[box2d],
    not the MuJoCo extra."""
    import importlib.util

    if importlib.util.find_spec("Box2D") is not None:
        pytest.skip("Box2D is installed here")
    from offpolicy.envs.make import make_env
    from offpolicy.errors import OffpolicyError

    with pytest.raises(OffpolicyError, match=r"pip install 'offpolicy\[box2d\]'"):
        make_env("LunarLanderContinuous-v3", 0)
