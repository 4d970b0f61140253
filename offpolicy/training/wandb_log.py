"""Weights & Biases, with ``--wandb-project NAME`` (the ``wandb`` extra): the scalars
TensorBoard gets, at the same points, against ``env_step``; the resolved config; curve.png at
the end. ``wandb`` is imported here only, and only when a run asks for it.

A run directory keeps its W&B run id in ``RUN_DIR/wandb/run_id``, so a resumed run logs into
the same W&B run (online; offline runs are synced one directory at a time, ``wandb sync``).
Steps logged again after a resume (those after the checkpoint) are logged again there too.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
from pathlib import Path
from typing import Any

from offpolicy.errors import OffpolicyError

MISSING = ("--wandb-project needs the wandb package: pip install 'offpolicy[wandb]' "
           "(or leave --wandb-project empty)")
ID_FILE = "run_id"  # under RUN_DIR/wandb/, beside wandb's own files


def check_available() -> None:
    """Raise the one-line error before anything is built when wandb is not installed."""
    try:
        found = importlib.util.find_spec("wandb") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise OffpolicyError(MISSING)


def mode_of(mode: str) -> str:
    """``--wandb-mode``: auto takes the WANDB_MODE variable, else online."""
    return (os.environ.get("WANDB_MODE") or "online") if mode == "auto" else mode


def open_for(run) -> WandbLog:
    """The W&B run of ``run`` (a :class:`~offpolicy.training.run.Run`) for a train call: its
    own, or one opened now, named after its run directory (a new run that fails to open one
    leaves no files behind)."""
    if isinstance(run.wandb, WandbLog):
        run.wandb.training = True
        return run.wandb
    tc = run.train_cfg
    name = run.run_dir.name if run.run_dir is not None else f"{run.run.algo}-{tc.env}-s{tc.seed}"
    try:
        return WandbLog(tc.wandb_project, tc.wandb_entity, tc.wandb_mode, run.run_dir, name,
                        run.run.to_dict(), tc.quiet)
    except BaseException:
        if run.dir is not None:
            from offpolicy.training.checkpoint import has_checkpoint

            run.dir.cleanup_failed(has_checkpoint(run.run_dir))
        raise


class WandbLog:
    """One W&B run for one offpolicy run: opened at its start, finished when it closes."""

    def __init__(self, project: str, entity: str, mode: str, run_dir: Path | None, name: str,
                 config: dict[str, Any], quiet: bool = False):
        try:
            import wandb
        except ImportError:
            raise OffpolicyError(MISSING) from None
        self._wandb, self.run_dir = wandb, run_dir
        self.training = True  # a train call is in progress: finished without trained(), failed
        run_id = None
        if run_dir is not None:
            folder = Path(run_dir) / "wandb"
            id_file = folder / ID_FILE
            try:
                run_id = id_file.read_text().strip() if id_file.exists() else ""
                if not run_id:
                    run_id = secrets.token_hex(4)  # as W&B's own: 8 characters
                    folder.mkdir(parents=True, exist_ok=True)
                    id_file.write_text(run_id + "\n")
            except OSError as e:
                raise OffpolicyError(f"cannot write {id_file}: {e}") from e
        try:
            self.run = wandb.init(
                project=project, entity=entity or None, config=config, name=name,
                dir=str(run_dir) if run_dir is not None else None, mode=mode_of(mode),
                id=run_id, resume="allow" if run_id else None, reinit="create_new",
                settings=wandb.Settings(console="off", silent=quiet))  # our terminal stays ours
        except Exception as e:  # a bad key, no network online: one line
            raise OffpolicyError(f"--wandb-project {project}: wandb.init failed: "
                                 f"{' '.join(str(e).split())[:300]}") from e
        # every scalar is plotted against the env step, not W&B's count of log calls
        self.run.define_metric("env_step")
        for prefix in ("eval/*", "train/*"):
            self.run.define_metric(prefix, step_metric="env_step")

    def log(self, scalars: dict[str, float], step: int) -> None:
        if scalars and self.run is not None:
            self.run.log({"env_step": int(step), **scalars})

    def trained(self, step: int, status: str, best_return: float) -> None:
        """The end of one ``train`` call: its status and best return into the summary, the
        learning curve (RUN_DIR/curve.png, drawn unless the run was interrupted) as an
        image."""
        self.training = False
        self.run.summary.update({"status": status, "step": int(step),
                                 "best_return": float(best_return)})
        curve = self.run_dir / "curve.png" if self.run_dir is not None else None
        if status != "interrupted" and curve is not None and curve.exists():
            self.run.log({"env_step": int(step), "curve": self._wandb.Image(str(curve))})

    def finish(self) -> None:
        """The run closes: W&B marks it failed when a train call raised."""
        if self.run is not None:
            run, self.run = self.run, None
            run.finish(exit_code=1 if self.training else 0)


class Off:
    """W&B without ``--wandb-project``: nothing logged, nothing imported."""

    def log(self, scalars: dict[str, float], step: int) -> None:
        pass

    def trained(self, step: int, status: str, best_return: float) -> None:
        pass

    def finish(self) -> None:
        pass


OFF = Off()
