"""The run directory: claiming it, its lock, its config, the resume rules, cleaning up a failure.

A run holds the directory's lock (:mod:`offpolicy.training.lock`) from start to end. A new run
takes an empty or new directory, or one whose run stopped before its first checkpoint (those
files are cleared); anything else is refused. A failure before the first checkpoint leaves no
files behind (a directory the user created empty stays, empty).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import yaml

from offpolicy import registry
from offpolicy.errors import OffpolicyError
from offpolicy.training import checkpoint
from offpolicy.training.lock import LOCK_FILE, RunDirLock

RUN_FILES = ("config.yaml", "eval.csv", "train.csv", "tb", "checkpoints", "curve.png", "wandb")


def resumed_config(run_dir: str | Path, requested: registry.RunConfig,
                   train_fields: set[str], agent_fields: set[str]) -> registry.RunConfig:
    """The config a run resumed in ``run_dir`` continues with: the saved ``config.yaml``, with
    the fields set explicitly now (``train_fields`` / ``agent_fields``: by flag, file, preset
    or keyword) taken from ``requested`` where a resumed run may change them
    (``RunConfig.RESUME_CHANGEABLE``); any other change is refused. The one set of resume
    rules, for the CLI and the Python API."""
    saved = Path(run_dir) / "config.yaml"
    if not saved.exists():
        raise OffpolicyError(f"cannot resume: no run in {run_dir} (no config.yaml)")
    saved_run = registry.RunConfig.from_dict(registry.load_yaml(saved), where=str(saved))
    return saved_run.resumed_with(requested, train_fields, agent_fields, where=str(run_dir))


# training fields that say how long a run is (its warm-up scales with it), how it is watched
# or where it keeps files, not what it learns: a run name leaves them out
NAME_SKIPS = {"env", "steps", "seed", "warmup_steps", "eval_every", "eval_episodes",
              "checkpoint_every", "log_every", "quiet", "save_replay", "async_envs",
              "ray_address", "max_collector_restarts", "wandb_project", "wandb_entity",
              "wandb_mode"}
NAME_FLAGS_MAX = 40  # characters of flags in a name; longer: a short hash of them


def _token(name: str, value) -> str:
    """``num_actors`` = 10 -> ``num-actors10``; a tuple joins with x; a bool is its flag."""
    flag = name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"no-{flag}"
    if isinstance(value, (tuple, list)):
        value = "x".join(map(str, value))
    return f"{flag}{value}".replace("/", "_").replace(":", "_")


def name_flags(run: registry.RunConfig) -> list[str]:
    """The settings of ``run`` that differ from its algorithm's (and preset's) defaults on its
    env, as short stable tokens: the replay first, then the training fields, then the
    algorithm's, each in field order."""
    from offpolicy import config as C

    tc = run.train
    plain = registry.resolve(run.algo, preset=run.preset, train_overrides={"env": tc.env})
    # what the replay, the length and the env copies derive (ReF-ER's half-run memory) is not
    # a choice of its own
    derived = {"env": tc.env, "replay": tc.replay, "steps": tc.steps, "num_envs": tc.num_envs}
    base = registry.resolve(run.algo, preset=run.preset, train_overrides=derived)
    # the replay's name, unless a preset of the algorithm has that name (DDPG's `refer`):
    # `--replay refer` and `--preset refer` must not share a run name
    replay = (tc.replay if tc.replay not in registry.get(run.algo).presets
              else f"replay-{tc.replay}")
    out = [replay] if tc.replay != plain.train.replay else []
    if tc.num_envs != plain.train.num_envs:
        out.append(_token("num_envs", tc.num_envs))
    for cfg, ref in ((tc, base.train), (run.agent, base.agent)):
        for f in C.fields_of(type(cfg)):
            if f.name in NAME_SKIPS or f.name in derived:
                continue
            if getattr(cfg, f.name) != getattr(ref, f.name):
                out.append(_token(f.name, getattr(cfg, f.name)))
    return out


def default_run_dir(run: registry.RunConfig, new: bool = True, root: str | Path = "runs"
                    ) -> Path:
    """``runs/<algo>-<env>[-<preset>][-<flags>]-s<seed>``: the preset when it is not the
    algorithm's default, then the settings that differ from what the algorithm and preset
    give (:func:`name_flags`: ``ace-HalfCheetah-v5-num-actors10-s0``; beyond
    :data:`NAME_FLAGS_MAX` characters a hash of them, ``cfg1a2b3c4d``); for a ``new`` run that
    finds the name taken, ``_2``, ``_3``... (a resumed run takes the plain name: name another
    with ``--run-dir``)."""
    import hashlib

    base = registry.resolve(run.algo, train_overrides={"env": run.train.env})
    parts = [run.algo, run.train.env.replace("/", "_").replace(":", "_")]
    if run.preset not in (None, base.preset):
        parts.append(run.preset)
    flags = name_flags(run)
    if flags:
        joined = "-".join(flags)
        parts.append(joined if len(joined) <= NAME_FLAGS_MAX else
                     "cfg" + hashlib.sha256(joined.encode()).hexdigest()[:8])
    name = Path(root) / f"{'-'.join(parts)}-s{run.train.seed}"
    n, path = 1, name
    while new and path.exists() and any(c.name != LOCK_FILE for c in path.iterdir()):
        n += 1
        path = name.with_name(f"{name.name}_{n}")
    return path


class RunDirectory:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.lock: RunDirLock | None = None
        self.created = False  # this run created the directory
        self.owned = False  # this run started it (created it, or found it empty)

    def _lock(self) -> None:
        """Hold the lock for the whole run (released by :meth:`release`, or by the kernel
        when the process ends): a second run into it is refused, not interleaved."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OffpolicyError(f"cannot use run directory {self.path}: {e}") from e
        self.lock = RunDirLock(self.path)

    def _foreign(self) -> set[str]:
        """The files of the directory, refused unless they are a run that stopped before its
        first checkpoint."""
        d = self.path
        names = {c.name for c in d.iterdir()} - {LOCK_FILE} if d.is_dir() else set()
        if names and not (names <= set(RUN_FILES) and not checkpoint.has_checkpoint(d)):
            raise OffpolicyError(
                f"run directory {d} already exists and is not empty; pass --resume to "
                "continue it or choose another --run-dir")
        return names

    def check_new(self) -> None:
        """Refuse, before anything is built, a directory a new run cannot take."""
        self._foreign()

    def claim_new(self) -> None:
        """Take the directory for a new run."""
        try:
            self._foreign()  # someone else's files: no lock file is left among them
            self.created = not self.path.exists()
            self._lock()  # a live run there may have no checkpoint yet: it holds the lock
            try:
                stopped = self._foreign()
            except OffpolicyError:
                self.release()
                raise
            if stopped:
                print(f"offpolicy: {self.path} holds a run that stopped before its first "
                      "checkpoint; starting afresh there", file=sys.stderr)
                self.clear()
        except OSError as e:
            raise OffpolicyError(f"cannot use run directory {self.path}: {e}") from e
        self.owned = True

    def claim_resume(self) -> bool:
        """Take the directory to resume its run; False when it has no checkpoint (killed
        before its first one: its files are cleared and it starts from step 0)."""
        self._lock()
        if checkpoint.has_checkpoint(self.path):
            return True
        print(f"offpolicy: {self.path} has no checkpoint yet (the run stopped before its first "
              "one); starting it from step 0", file=sys.stderr)
        self.clear()
        self.owned = True
        return False

    def clear(self) -> None:
        for name in RUN_FILES:
            p = self.path / name
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()

    def write_config(self, run: registry.RunConfig) -> None:
        try:
            checkpoint.write_text_atomic(self.path / "config.yaml",
                                         yaml.safe_dump(run.to_dict(), sort_keys=False))
        except OSError as e:
            raise OffpolicyError(f"cannot write {self.path / 'config.yaml'}: {e}") from e

    def check(self) -> None:
        """Raise if a newer run in this process took the directory over."""
        if self.lock is not None:
            self.lock.check()

    def plot_curve(self) -> None:
        """curve.png of the run's evaluations so far (a full disk: one line; the checkpoints
        and logs are whole)."""
        from offpolicy.plotting import plot_run

        try:
            plot_run(self.path)
        except OSError as e:
            raise OffpolicyError(f"cannot write {self.path / 'curve.png'}: {e}") from e

    def cleanup_failed(self, checkpointed: bool) -> None:
        """A run that failed before its first checkpoint leaves no files behind."""
        if not self.owned or checkpointed:
            return
        self.release()
        if not self.path.exists():
            return
        for child in self.path.iterdir():
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        if self.created:
            self.path.rmdir()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
