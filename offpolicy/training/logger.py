"""Run-directory logging: eval.csv, train.csv, TensorBoard (tensorboardX), rich progress, and
with ``--wandb-project`` the same scalars to Weights & Biases (:mod:`.wandb_log`).

Every write happens in the caller's thread, and an ``OSError`` from it (a full disk, a removed
directory) becomes a one-line ``OffpolicyError`` naming the file.
"""

from __future__ import annotations

import contextlib
import csv
import os
import sys
import time
from pathlib import Path

import numpy as np

from offpolicy.errors import OffpolicyError
from offpolicy.plotting import parse_csv
from offpolicy.training.wandb_log import OFF

EVAL_COLUMNS = ["step", "return_mean", "return_std", "return_se", "episodes", "wall_time"]


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


@contextlib.contextmanager
def _writing(what: Path | str):
    """Turn an ``OSError`` while writing ``what`` into a one-line ``OffpolicyError``."""
    try:
        yield
    except OSError as e:
        raise OffpolicyError(f"cannot write {what}: {_one_line(e)}") from e


def _truncate_csv(path: Path, max_step: int) -> None:
    """Drop rows logged after ``max_step`` (a resumed run re-logs them) and an incomplete last
    line (a run killed while writing it), so that appending starts on a line of its own. The
    file is replaced atomically, so a failed write (a full disk) leaves it as it was; a row
    that is not a run's (no numeric step) is a one-line error naming the file and the line."""
    if not path.exists():
        return
    header, rows, incomplete = parse_csv(path)
    if incomplete:
        rows = rows[:-1]
    keep = [header] if header else []
    for n, r in enumerate(rows, start=2):
        if not r:
            continue
        try:
            step = int(float(r[0]))
        except ValueError:
            raise OffpolicyError(f"{path}, line {n}: the step is not a number: "
                                 f"{r[0][:40]!r}; fix or remove the line to resume") from None
        if step <= max_step:
            keep.append(r)
    if len(keep) == len(rows) + 1 and not incomplete:
        return
    _replace_rows(path, keep)


def _replace_rows(path: Path, rows) -> None:
    """Write ``rows`` to ``path`` atomically: a failed write (a full disk) leaves it as it was."""
    with _writing(path):
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            with open(tmp, "w", newline="") as f:
                csv.writer(f).writerows(rows)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _widen_header(path: Path, columns: list[str]) -> list[str]:
    """The columns to append with to the CSV at ``path``: its own header's, plus (the file
    rewritten atomically, older rows blank there) the ``columns`` it lacks. A run resumed by a
    newer version that logs another column keeps one header for every row."""
    if not path.exists() or path.stat().st_size == 0:
        return columns
    header, rows, _ = parse_csv(path)
    if not header:
        return columns
    missing = [c for c in columns if c not in header]
    if not missing:
        return header
    wide = header + missing
    _replace_rows(path, [wide, *(r + [""] * len(missing) for r in rows if r)])
    return wide


class CsvLog:
    def __init__(self, path: Path, columns: list[str]):
        self.path = path
        self.columns = _widen_header(path, columns)
        with _writing(path):
            new = not path.exists() or path.stat().st_size == 0
            self._f = open(path, "a", newline="")
            try:
                self._w = csv.writer(self._f)
                if new:
                    self._w.writerow(columns)
                    self._f.flush()
            except BaseException:
                _close_quietly(self._f)
                raise

    def write(self, row: dict) -> None:
        with _writing(self.path):
            self._w.writerow([_fmt(row.get(c, "")) for c in self.columns])
            self._f.flush()

    def close(self) -> None:
        with _writing(self.path):
            self._f.close()


def _close_quietly(f) -> None:
    """Close ``f`` even when flushing its buffer fails (the data is lost either way)."""
    try:
        f.close()
    except OSError:
        with contextlib.suppress(Exception):
            f.close()  # the buffer was dropped by the failed close; this releases the fd


class TensorBoardLog:
    """TensorBoard scalars in a TFRecord event file that this class owns and
    writes synchronously (tensorboardX builds the protos). tensorboardX's ``SummaryWriter``
    writes from a background thread that dies with a traceback on a full disk, after which its
    bounded queue blocks the training loop forever."""

    def __init__(self, logdir: Path, purge_step: int | None = None, flush_secs: float = 30.0):
        import socket

        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self.logdir = logdir
        self._Event = Event
        self._flush_secs = flush_secs
        self._next_flush = time.monotonic() + flush_secs
        self._f = None
        with self._writing():
            logdir.mkdir(parents=True, exist_ok=True)
            name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
            self._f = open(logdir / name, "ab")
        try:
            self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
            if purge_step is not None:  # TensorBoard drops the older events from this step on
                self._write(Event(step=purge_step, wall_time=time.time(),
                                  session_log=SessionLog(status=SessionLog.START)))
            self.flush()
        except BaseException:
            self.close(quiet=True)
            raise

    def _writing(self):
        return _writing(f"TensorBoard events to {self.logdir}")

    def _write(self, event) -> None:
        import struct

        from tensorboardX.record_writer import masked_crc32c

        if self._f is None:
            return
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        record = (header + struct.pack("<I", masked_crc32c(header)) + data
                  + struct.pack("<I", masked_crc32c(data)))
        with self._writing():
            self._f.write(record)
            if time.monotonic() >= self._next_flush:
                self._f.flush()
                self._next_flush = time.monotonic() + self._flush_secs

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        from tensorboardX.summary import scalar

        self._write(self._Event(summary=scalar(tag, float(value)), step=int(step),
                                wall_time=time.time()))

    def flush(self) -> None:
        if self._f is not None:
            with self._writing():
                self._f.flush()
            self._next_flush = time.monotonic() + self._flush_secs

    def close(self, quiet: bool = False) -> None:
        f, self._f = self._f, None
        if f is None:
            return
        if quiet:
            _close_quietly(f)
        else:
            with self._writing():
                f.close()


def _fmt(v) -> str:
    """A CSV field: floats to 8 significant digits (the float32 the losses are computed in
    carries about 7), so files stay readable."""
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.8g}" if np.isfinite(v) else str(float(v))
    return str(v)


def eval_row(step: int, returns: np.ndarray, wall_time: float) -> dict:
    n = len(returns)
    std = float(np.std(returns))
    return {"step": step, "return_mean": float(np.mean(returns)), "return_std": std,
            "return_se": float(std / np.sqrt(n)), "episodes": n, "wall_time": round(wall_time, 3)}


def _clock_text(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _num(v: float) -> str:
    """A short number for the terminal (4 significant digits, blank when unknown)."""
    if not isinstance(v, (int, float, np.floating)) or not np.isfinite(v):
        return "-"
    return f"{v:.1f}" if abs(v) >= 100 else f"{v:.4g}"


def eval_scalars(row: dict) -> dict[str, float]:
    """The scalars of an evaluation row that TensorBoard and W&B get."""
    return {"eval/return_mean": row["return_mean"]}


def train_scalars(row: dict) -> dict[str, float]:
    """The scalars of a train.csv row that TensorBoard and W&B get: every finite number."""
    return {f"train/{k}": float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (float, int, np.floating)) and np.isfinite(v)}


class RunLogger:
    """Writes eval.csv and train.csv and TensorBoard scalars (and the same scalars to ``wandb``,
    a :class:`~offpolicy.training.wandb_log.WandbLog`, when given), and shows progress: a rich
    bar on a terminal; without one (a log file, a cluster job) one line per logging interval
    with the same fields; with ``quiet`` the evaluations only."""

    def __init__(self, run_dir: Path | None, metric_names: list[str], total_steps: int,
                 start_step: int, quiet: bool, title: str, wandb=None):

        self.run_dir = run_dir
        self._wandb = wandb or OFF
        self.quiet = quiet
        self.bar = not quiet and sys.stderr.isatty()
        self.total = total_steps
        self.title = title
        self.last_train: dict | None = None  # the newest train.csv row (Agent.learn returns it)
        self.train_columns = ["step", "wall_time", "steps_per_s", "updates_per_s", "episodes",
                              "episode_return"] + metric_names
        # what the terminal shows of the algorithm: its first two losses
        self.headline = [m for m in metric_names if "loss" in m][:2]
        self.last_eval = float("nan")
        self.latest: dict = {}  # the newest train.csv row
        self._eval = self._train = self._tb = None
        self._progress = None
        if run_dir is not None:
            try:
                for name in ("eval.csv", "train.csv"):
                    _truncate_csv(run_dir / name, start_step)
                self._eval = CsvLog(run_dir / "eval.csv", EVAL_COLUMNS)
                self._train = CsvLog(run_dir / "train.csv", self.train_columns)
                # events after the checkpoint are logged again; those at its step are kept
                self._tb = TensorBoardLog(run_dir / "tb", purge_step=start_step + 1
                                          if start_step else None, flush_secs=30)
            except BaseException:
                self.close()  # inside the handler: quiet, the first error is the one raised
                raise
        if self.bar:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            class TwoLines(Progress):
                """The bar on one line, the run's numbers on the two lines under it: rates,
                training episode and evaluation; then the losses (each fits 80 columns)."""

                def get_renderables(self):
                    from rich.text import Text

                    yield self.make_tasks_table(self.tasks)
                    for task in self.tasks:
                        for line in task.fields["info"]:
                            yield Text("  " + line, overflow="fold")

            self._progress = TwoLines(
                TextColumn("[bold]{task.description}"), BarColumn(bar_width=10),
                MofNCompleteColumn(), TextColumn("elapsed"), TimeElapsedColumn(),
                TextColumn("left"), TimeRemainingColumn(), transient=False)
            self._task = self._progress.add_task(title, total=total_steps, completed=start_step,
                                                 info=self._field_lines())
            self._progress.start()

    def start(self, clock: Stopwatch, step: int) -> None:
        """Training (re)starts at ``step``; ``clock`` reads the run's elapsed wall time."""
        self._clock = clock
        self.interval_step = step  # where the train.csv row being gathered began
        self._interval_time = clock()
        self._last_tick = time.perf_counter()

    def interval_seconds(self) -> float:
        """Wall seconds since the train.csv row being gathered began."""
        return self._clock() - self._interval_time

    def log_interval(self, step: int, values: dict) -> None:
        """The train.csv row of the steps since the last one: ``values`` plus the wall time
        and the env steps per second over the interval; on the terminal, its fields."""
        now = self._clock()
        sps = (step - self.interval_step) / max(now - self._interval_time, 1e-9)
        self.latest = {"step": step, "wall_time": round(now, 3), "steps_per_s": sps, **values}
        self.log_train(self.latest)
        self.interval_step, self._interval_time = step, self._clock()
        if self._progress is not None:  # every interval's numbers reach the screen
            self.tick(step, final=True)
        if not self.bar and not self.quiet:
            left = (self.total - step) / max(sps, 1e-9)
            print(f"{self.title} {step}/{self.total} {_clock_text(now)} elapsed "
                  f"{_clock_text(left)} left | {self._fields()}", flush=True)

    def _field_lines(self) -> list[str]:
        """What the terminal shows: rates, the mean return of recent training episodes and
        the latest evaluation (blank before the first); then the headline losses."""
        r = self.latest
        rates = [f"{_num(r.get('steps_per_s'))} steps/s", f"{_num(r.get('updates_per_s'))} upd/s",
                 f"episode {_num(r.get('episode_return'))}"]
        if np.isfinite(self.last_eval):
            rates.append(f"eval {_num(self.last_eval)}")
        losses = [f"{m} {_num(r.get(m))}" for m in self.headline]
        return [" | ".join(rates)] + ([" | ".join(losses)] if losses else [])

    def _fields(self) -> str:
        return " | ".join(self._field_lines())

    def tick(self, step: int, final: bool = False) -> None:
        """Refresh the progress bar at most twice a second (and at the end)."""
        now = time.perf_counter()
        if now - self._last_tick > 0.5 or final:
            if self._progress is not None:
                self._progress.update(self._task, completed=step, info=self._field_lines())
            self._last_tick = now

    def log_eval(self, row: dict) -> None:
        self.last_eval = row["return_mean"]
        if self._eval is not None:
            self._eval.write(row)
            for tag, v in eval_scalars(row).items():
                self._tb.add_scalar(tag, v, row["step"])
        self._wandb.log(eval_scalars(row), row["step"])
        n = row["episodes"]
        what = f"step {row['step']} eval {row['return_mean']:.2f} +- {row['return_se']:.2f}"
        line = f"{self.title} {what} (s.e. over {n} episode{'s' if n != 1 else ''})"
        if len(line) > 80:  # fits 80 columns where it can: the env stays, the note shrinks
            line = f"{self.title} {what} (s.e., {n} ep.)"
        if len(line) > 80:
            line = f"{self.title} {what}"
        if self._progress is not None:
            self._progress.console.print(line)
        else:
            print(line, flush=True)

    def log_train(self, row: dict) -> None:
        self.last_train = {k: (v.item() if isinstance(v, np.generic) else v)
                           for k, v in row.items()}
        if self._train is not None:
            self._train.write(row)
            for tag, v in train_scalars(row).items():
                self._tb.add_scalar(tag, v, row["step"])
        self._wandb.log(train_scalars(row), row["step"])

    def close(self) -> None:
        """Close every file, even when one of them fails. A failure (a full disk flushing the
        last rows) is raised as one-line ``OffpolicyError``, except while an exception is being
        handled (the training loop closes the logger on its way out of a failure: that error
        must not be replaced)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        handles = [h for h in (self._eval, self._train, self._tb) if h is not None]
        self._eval = self._train = self._tb = None
        first: OffpolicyError | None = None
        for h in handles:
            try:
                h.close()
            except OffpolicyError as e:
                first = first or e
        if first is not None and sys.exc_info()[1] is None:
            raise first


class Stopwatch:
    def __init__(self, offset: float = 0.0):
        self.t0 = time.perf_counter() - offset

    def __call__(self) -> float:
        return time.perf_counter() - self.t0

