"""What a checkpoint holds of a run besides the agent's state, and how a run is restored from
one (the file format itself is :mod:`offpolicy.training.checkpoint`).

meta.json holds the counters, the best return, the schedule's credit and Poisson state, the
collector's state (episodes, resets, warm-up RNG, noise), the learner's normaliser statistics
and keys, the policy's key and the run's config. Checkpoints written before the learner owned
the normalisers (they sat in the collector's state) and before the collector existed (its
fields at the top level) are read too.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax

from offpolicy.errors import OffpolicyError
from offpolicy.plotting import read_eval_csv
from offpolicy.training import checkpoint


def _legacy_state(meta: dict) -> tuple[dict | None, dict]:
    """(collector state, normaliser state) of a checkpoint written before the learner owned
    the normalisers (they sat in the collector's state; before the collector existed, its
    fields sat at the top level of meta.json, the noise under ``actor``)."""
    coll = meta.get("collector")
    if not coll and "episodes" in meta:
        coll = {k: meta[k] for k in ("episodes", "resets", "rng", "reward_scale", "reward_ret")
                if k in meta}
        if "actor" in meta:
            coll["noise"] = meta["actor"]
    norm = {k: coll[k] for k in ("reward_scale", "reward_ret") if coll and k in coll}
    return coll or None, {"obs_norm": meta.get("obs_norm"), **norm}


def meta_of(run) -> dict:
    """Everything but the agent state that a checkpoint holds (meta.json)."""
    return {"algo": run.run.algo, "best_return": run.best_return, "elapsed": run.elapsed,
            **run.schedule.state_dict(), "collector": run.collector_state(),
            "normalizers": run.learner.statistics.state_dict(),
            "keys": run.learner.keys_state(), "policy": run.policy.state_dict(),
            "env_seed": run.run.train.seed, "jax_version": jax.__version__,
            "config": run.run.to_dict()}


def save(run, kind: str) -> Path:
    """Write checkpoint ``kind`` of ``run`` into its directory. A ``best`` save keeps the best
    as of the latest checkpoint, which a resume rewinds to; a ``latest`` one lets it go."""
    run.dir.check()
    root = run.run_dir / "checkpoints"
    replay = run.replay if (kind == "latest" and run.train_cfg.save_replay) else None
    path = checkpoint.save(root, kind, run.step, run.learner.state, meta_of(run), replay,
                           keep=run.best_kept if kind == "best" else ())
    run.checkpointed(run.step if kind == "latest" else None)
    if kind == "latest":
        best = checkpoint.pointer_target(root, "best")
        run.best_kept = (best,) if best else ()
        checkpoint.prune(root, "best")
    return path


def restore(run, ckpt: Path, with_replay: bool = True) -> None:
    """Restore everything a checkpoint holds: parameters, optimiser states, targets,
    counters, keys, RNG states, noise, normaliser statistics and (``with_replay``, if
    saved) the replay. Evaluation restores without replay and never reads its file."""
    state, meta = checkpoint.load(ckpt, run.state)
    if meta.get("algo") != run.run.algo:
        raise OffpolicyError(f"checkpoint {ckpt} is for {meta.get('algo')}, "
                             f"not {run.run.algo}")
    if with_replay:
        if meta.get("has_replay"):
            run.replay.load(ckpt / "replay.npz")
        elif run.run_dir is not None:
            print(f"offpolicy: warning: checkpoint {ckpt} has no replay (save_replay was "
                  "off); training continues with an empty replay buffer", file=sys.stderr)
        run.replay.close_episode()
    run.learner.state = state
    run.learner.load_keys(meta.get("keys", {}))
    if "policy" in meta:
        run.policy.load_state_dict(meta["policy"])
    run.step, run.elapsed = int(meta["step"]), float(meta["elapsed"])
    run.best_return = float(meta["best_return"])
    run.schedule.load_state_dict(meta)
    collector, norm = _legacy_state(meta)
    run.learner.statistics.load_state_dict(meta.get("normalizers") or norm)
    run.load_collector_state(collector)
    run.checkpointed(run.step)
    if run.run_dir is not None:
        _rewind_best(run)


def _rewind_best(run) -> None:
    """A resume continues from the latest checkpoint and discards what came after it: a
    ``best`` saved since then goes (the best as of that checkpoint takes its place) and
    the best return is the best evaluation that eval.csv keeps (rows up to the step)."""
    kept = checkpoint.rewind_best(run.run_dir / "checkpoints", run.step)
    run.best_kept = (kept,) if kept else ()
    rows = [r for r in read_eval_csv(run.run_dir / "eval.csv", quiet=True)
            if r["step"] <= run.step and math.isfinite(r["return_mean"])]
    if rows:
        run.best_return = max(r["return_mean"] for r in rows)


def resume_in_dir(run) -> None:
    """Continue the run in ``run.dir`` from its latest checkpoint (or from step 0 if it was
    killed before its first one), refusing a ``--steps`` below the step it reached; then
    ``config.yaml`` records what may have changed (``--steps`` and the like)."""
    if run.dir is None:
        raise OffpolicyError("--resume needs a run directory")
    if run.dir.claim_resume():
        ckpt = checkpoint.locate(run.run_dir, "latest")
        restore(run, ckpt)
        if run.step > run.train_cfg.steps:
            raise OffpolicyError(
                f"--steps {run.train_cfg.steps} is below step {run.step}, which the run in "
                f"{run.run_dir} has already reached: give --steps {run.step} or more")
        print(f"offpolicy: resuming {run.run_dir} from step {run.step} (checkpoint "
              f"{ckpt.name})", file=sys.stderr)
    run.dir.write_config(run.run)


def snapshot(run, path: Path, with_replay: bool = True) -> Path:
    """Write ``run`` as it is now to the new or empty directory ``path`` as a run directory of
    its own (``RunView.save``; the ``checkpoint_every`` callback): config.yaml, eval.csv and
    train.csv so far, and a ``latest`` checkpoint of this step, with the replay unless
    ``with_replay`` or ``save_replay`` is off. It loads (``offpolicy.load``) and resumes
    (``--resume``) as the run itself would from that checkpoint. Returns ``path``."""
    import shutil

    import yaml

    path = Path(path)
    try:
        if path.exists() and any(path.iterdir()):
            raise OffpolicyError(f"{path} exists and is not empty")
        path.mkdir(parents=True, exist_ok=True)
        if run.run_dir is not None:
            for name in ("eval.csv", "train.csv"):
                if (run.run_dir / name).exists():
                    shutil.copyfile(run.run_dir / name, path / name)
        checkpoint.write_text_atomic(path / "config.yaml",
                                     yaml.safe_dump(run.run.to_dict(), sort_keys=False))
    except OSError as e:
        raise OffpolicyError(f"cannot write a snapshot to {path}: {e}") from e
    replay = run.replay if with_replay and run.train_cfg.save_replay else None
    checkpoint.save(path / "checkpoints", "latest", run.step, run.learner.state, meta_of(run),
                    replay)
    return path
