"""Run-directory logging: eval.csv, train.csv, TensorBoard (tensorboardX), rich progress."""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

import numpy as np

EVAL_COLUMNS = ["step", "return_mean", "return_std", "return_se", "episodes", "wall_time"]


def _truncate_csv(path: Path, max_step: int) -> None:
    """Drop rows logged after ``max_step`` (a resumed run re-logs them)."""
    if not path.exists():
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return
    keep = [rows[0]] + [r for r in rows[1:] if r and int(float(r[0])) <= max_step]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(keep)


class CsvLog:
    def __init__(self, path: Path, columns: list[str]):
        self.path = path
        self.columns = columns
        new = not path.exists() or path.stat().st_size == 0
        self._f = open(path, "a", newline="")
        self._w = csv.writer(self._f)
        if new:
            self._w.writerow(columns)
            self._f.flush()

    def write(self, row: dict) -> None:
        self._w.writerow([_fmt(row.get(c, "")) for c in self.columns])
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        return repr(float(v)) if np.isfinite(v) else str(float(v))
    return str(v)


def eval_row(step: int, returns: np.ndarray, wall_time: float) -> dict:
    n = len(returns)
    std = float(np.std(returns))
    return {"step": step, "return_mean": float(np.mean(returns)), "return_std": std,
            "return_se": std / np.sqrt(n), "episodes": n, "wall_time": round(wall_time, 3)}


class RunLogger:
    """Writes eval.csv and train.csv, TensorBoard scalars, and shows progress."""

    def __init__(self, run_dir: Path | None, metric_names: list[str], total_steps: int,
                 start_step: int, quiet: bool, title: str):
        self.run_dir = run_dir
        self.quiet = quiet or not sys.stderr.isatty()
        self.total = total_steps
        self.title = title
        self.train_columns = ["step", "wall_time", "steps_per_s", "episodes",
                              "episode_return"] + metric_names
        self.last_eval = float("nan")
        self._eval = self._train = self._tb = None
        if run_dir is not None:
            for name in ("eval.csv", "train.csv"):
                _truncate_csv(run_dir / name, start_step)
            self._eval = CsvLog(run_dir / "eval.csv", EVAL_COLUMNS)
            self._train = CsvLog(run_dir / "train.csv", self.train_columns)
            from tensorboardX import SummaryWriter

            # events after the checkpoint are logged again; those at its step are kept
            self._tb = SummaryWriter(str(run_dir / "tb"), purge_step=start_step + 1
                                     if start_step else None, flush_secs=30)
        self._progress = None
        if not self.quiet:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[sps]:>6.0f} steps/s"),
                TextColumn("eval {task.fields[ret]:>9.1f}"), TimeRemainingColumn(),
                transient=False)
            self._task = self._progress.add_task(title, total=total_steps, completed=start_step,
                                                 sps=0.0, ret=float("nan"))
            self._progress.start()

    def progress(self, step: int, sps: float) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=step, sps=sps, ret=self.last_eval)

    def log_eval(self, row: dict) -> None:
        self.last_eval = row["return_mean"]
        if self._eval is not None:
            self._eval.write(row)
            self._tb.add_scalar("eval/return_mean", row["return_mean"], row["step"])
        line = (f"{self.title} step {row['step']:>8d}  eval return {row['return_mean']:9.2f} "
                f"+- {row['return_se']:.2f} (se, {row['episodes']} episodes)")
        if self._progress is not None:
            self._progress.console.print(line)
        else:
            print(line, flush=True)

    def log_train(self, row: dict) -> None:
        if self._train is not None:
            self._train.write(row)
            for k, v in row.items():
                if k != "step" and isinstance(v, (float, int, np.floating)) and np.isfinite(v):
                    self._tb.add_scalar(f"train/{k}", v, row["step"])

    def log_histogram(self, tag: str, values: np.ndarray, step: int) -> None:
        if self._tb is not None and len(values):
            self._tb.add_histogram(tag, values, step)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        for h in (self._eval, self._train):
            if h is not None:
                h.close()
        if self._tb is not None:
            self._tb.close()
        self._eval = self._train = self._tb = None


class Stopwatch:
    def __init__(self, offset: float = 0.0):
        self.t0 = time.perf_counter() - offset

    def __call__(self) -> float:
        return time.perf_counter() - self.t0
