"""Running a suite's grid: local processes (``--jobs``) or one Ray task per run (``--ray-address``).

Each run is the ``offpolicy train`` command of its entry, in its own directory
``OUT/<env>/<entry>/s<seed>`` (its output in ``s<seed>.log`` beside it). A run is finished
when its last evaluation and its latest checkpoint reached its steps (:func:`finished`): a
rerun of the suite skips it. An unfinished run
with a checkpoint continues with ``--resume``; one that never checkpointed starts again. So a
suite stopped anyhow (Ctrl-C, SIGTERM, a lost node, a closed laptop) finishes the rest when it
is run again, and a finished suite rerun does no work.

Runs go seed-major (every entry and env of seed 0 first), so that a stopped suite has balanced
partial results. Several drivers may share a grid (one per machine on shared storage): each
takes a run with a lock file ``.<seed>.lock`` holding its PID and host.

On Ray, each run is a task (one CPU) retried when its node is lost or the run fails; the
task waits for the run directory's lock (a lost attempt's process may hold it a moment) and
resumes from the checkpoint if the directory is on storage the nodes share, else reruns. The
task sends the run's small files (config.yaml, eval.csv, train.csv) back to the driver, which
writes them under OUT when its storage is not shared, so the report works either way.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from offpolicy.errors import OffpolicyError
from offpolicy.suites.host import hosts_path, record_start
from offpolicy.suites.spec import Entry, Suite

SMALL_FILES = ("config.yaml", "eval.csv", "train.csv")
BAD_INPUT = 2  # offpolicy train's exit code for bad input: not retried
BUSY = -2  # a Ray task that found its run directory in use: retried


@dataclass(frozen=True)
class RunSpec:
    """One run of the grid."""

    entry: Entry
    env: str
    seed: int
    steps: int
    eval_every: int
    eval_episodes: int
    suite_flags: tuple[str, ...]
    run_dir: Path

    @property
    def label(self) -> str:
        return f"{self.entry.name} s{self.seed} on {self.env}"

    @property
    def log_path(self) -> Path:
        return self.run_dir.parent / f"{self.run_dir.name}.log"


def env_slug(env: str) -> str:
    return env.replace("/", "_")


def default_layout(out: Path) -> Callable[[str, str, int], Path]:
    """``OUT/<env>/<entry>/s<seed>``, absolute: a Ray worker resolves no path against its
    own working directory. A directory that would not lie under ``OUT`` is refused."""
    out = Path(out).resolve()

    def layout(env: str, entry: str, seed: int) -> Path:
        run_dir = out / env_slug(env) / entry / f"s{seed}"
        # spec.parse admits only names that stay put; this holds whatever a Suite was built
        # from. Lexically: a folder under OUT that links elsewhere (a bigger disk) is the
        # user's own choice
        normal = Path(os.path.normpath(run_dir))
        if normal == out or out not in normal.parents:
            raise OffpolicyError(f"the run directory of entry {entry!r} on {env!r} "
                                 f"({run_dir}) would lie outside --out {out}")
        return run_dir

    return layout


def plan(suite: Suite, layout: Callable[[str, str, int], Path]) -> list[RunSpec]:
    """Every run of the suite, seed-major."""
    return [RunSpec(suite.entries[name], e.env, seed, e.steps, min(e.eval_every, e.steps),
                    suite.eval_episodes, suite.flags, Path(layout(e.env, name, seed)))
            for seed in suite.seeds for e in suite.envs for name in e.entries]


def train_command(run: RunSpec, python: str | None = None) -> list[str]:
    """The run's ``offpolicy train`` command: the suite's flags first, so that the entry's own
    override them (argparse keeps the last)."""
    return [python or sys.executable, "-m", "offpolicy", "train", run.entry.algo,
            "--env", run.env, "--steps", str(run.steps), "--seed", str(run.seed),
            "--run-dir", str(run.run_dir), "--quiet", "--eval-every", str(run.eval_every),
            "--eval-episodes", str(run.eval_episodes), *run.suite_flags, *run.entry.flags]


# each start of a run writes "[YYYY-MM-DD HH:MM:SS] command" into its log (a Ray attempt:
# "[...] attempt on HOST ..."); the run's own lines follow, e.g. an evaluation's "[20000] return"
STAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
_STAMPED = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] ")


def stamped(text: str) -> str:
    """``text`` behind the runner's date-and-time stamp, as a run's log gets it at each start."""
    return f"[{time.strftime(STAMP_FORMAT)}] {text}"


def start_lines(log_path: Path) -> list[str]:
    """The lines the runner wrote into a run's log, one per start or attempt, oldest first
    (none when the log is missing)."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return []
    return [x for x in text.splitlines() if _STAMPED.match(x)]


def finished(run_dir: Path, steps: int) -> bool:
    """Its last evaluation reached ``steps``, and so did its latest checkpoint where it has
    checkpoints here (a run that failed after its last evaluation, e.g. saving on a full
    disk, has not finished). A peer's run, and one whose checkpoints stayed on another node
    or were never committed, has its evaluations only."""
    from offpolicy.plotting import last_eval
    from offpolicy.training import checkpoint

    if last_eval(run_dir / "eval.csv")[0] < steps:
        return False
    if not (run_dir / "checkpoints").is_dir():
        return True
    name = checkpoint.pointer_target(run_dir / "checkpoints", "latest")
    try:
        return name is not None and checkpoint.step_of(name) >= steps
    except (ValueError, IndexError):
        return False


def current_step(run_dir: Path) -> int:
    """The last step train.csv (else eval.csv) records: cheap, reads the file's tail only."""
    for name in ("train.csv", "eval.csv"):
        p = run_dir / name
        try:
            with open(p, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - 4096))
                lines = f.read().decode(errors="replace").strip().splitlines()
            if len(lines) >= 2:  # a header and at least one row
                return int(float(lines[-1].split(",", 1)[0]))
        except (OSError, ValueError, IndexError):
            continue
    return 0


# the checkpoint a peer library's run keeps (benchmarks/peer_common.py: CHECKPOINT)
PEER_CHECKPOINT = "checkpoint.npz"


def prepare(run: RunSpec, command_for: Callable[[RunSpec], list[str]] | None = None,
            python: str | None = None) -> list[str]:
    """The command that runs or continues ``run``: ``--resume`` from its checkpoint; a
    directory without one (stopped before its first checkpoint) starts again. A peer's run
    continues from the checkpoint its script keeps (:data:`PEER_CHECKPOINT`, written by
    benchmarks/peers.py after each evaluation) with the same command, or starts again."""
    if run.entry.peer:
        if command_for is None:
            raise OffpolicyError(f"{run.label}: peer entries run from benchmarks/learning.py")
        if run.run_dir.exists() and not (run.run_dir / PEER_CHECKPOINT).exists():
            shutil.rmtree(run.run_dir)
        run.run_dir.parent.mkdir(parents=True, exist_ok=True)
        return command_for(run)
    cmd = train_command(run, python)
    if (run.run_dir / "checkpoints" / "latest").exists():
        cmd.append("--resume")
    elif run.run_dir.exists():
        shutil.rmtree(run.run_dir)
    run.run_dir.parent.mkdir(parents=True, exist_ok=True)
    return cmd


def start_step(run: RunSpec, cmd: list[str]) -> int:
    """The step ``cmd`` (from :func:`prepare`) starts ``run`` at: 0 for a fresh start, else the
    checkpoint's (ours: the latest checkpoint's step; a peer's: its last evaluation, after
    which its script checkpoints)."""
    if run.entry.peer:
        if not (run.run_dir / PEER_CHECKPOINT).exists():
            return 0
        from offpolicy.plotting import last_eval

        return max(last_eval(run.run_dir / "eval.csv")[0], 0)
    if "--resume" not in cmd:
        return 0
    from offpolicy.training import checkpoint

    name = checkpoint.pointer_target(run.run_dir / "checkpoints", "latest")
    try:
        return checkpoint.step_of(name) if name else current_step(run.run_dir)
    except (ValueError, IndexError):
        return current_step(run.run_dir)


def single_threaded_env() -> dict[str, str]:
    """One thread per run: learning curves do not depend on thread counts, and several runs
    side by side with multi-threaded BLAS/OpenMP/XLA oversubscribe the cores badly (SB3 fell
    to 12 steps/s with 4 such runs on 2 cores)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                        "intra_op_parallelism_threads=1").strip()
    return env


# ---------------------------------------------------------------------- claims between drivers
def _claim_path(run_dir: Path) -> Path:
    return run_dir.parent / f".{run_dir.name}.lock"


def claim(run_dir: Path) -> bool:
    """Take the run for this driver: an exclusive file holding our host and PID; a claim of
    this host whose process is gone is stale and taken over."""
    lock = _claim_path(run_dir)
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                parts = lock.read_text().split()
                host, pid = (parts[0], int(parts[1])) if len(parts) == 2 else (
                    socket.gethostname(), int(parts[0]) if parts else 0)
                if host != socket.gethostname():
                    return False  # another machine's driver: trust it
                os.kill(pid, 0)
                return False  # another live driver here runs it
            except (ProcessLookupError, ValueError, OSError):
                lock.unlink(missing_ok=True)
                continue
        with os.fdopen(fd, "w") as f:
            f.write(me)
        return True
    return False


def release(run_dir: Path) -> None:
    _claim_path(run_dir).unlink(missing_ok=True)


# ---------------------------------------------------------------------- outcome and progress
@dataclass
class Outcome:
    done: list[RunSpec] = field(default_factory=list)  # finished before this call
    ran: list[RunSpec] = field(default_factory=list)  # finished by this call
    failed: list[tuple[RunSpec, str]] = field(default_factory=list)
    busy: list[RunSpec] = field(default_factory=list)  # another driver runs them
    stopped: int = 0  # the signal that stopped the suite, 0 if none

    def exit_code(self) -> int:
        if self.stopped:
            return 128 + self.stopped
        return 1 if self.failed else 0


class Progress:
    """One view over the grid: a rich bar of env steps done over all runs, and a line per
    run in flight, on a terminal; one line per run started and ended elsewhere."""

    def __init__(self, runs: list[RunSpec], done: list[RunSpec], enabled: bool = True,
                 stream=None):
        self.stream = stream or sys.stderr
        self.total = sum(r.steps for r in runs)
        self.base = sum(r.steps for r in done)
        self.live = None
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = enabled
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self.live = RichProgress(TextColumn("{task.description}"), BarColumn(bar_width=20),
                                     MofNCompleteColumn(), TimeElapsedColumn(),
                                     console=Console(file=self.stream), transient=False)
            self.grid = self.live.add_task("suite (env steps)", total=self.total,
                                           completed=self.base)
            self.rows: dict[Path, int] = {}
            self.live.start()

    def started(self, run: RunSpec, where: str = "") -> None:
        if self.tty:
            self.rows[run.run_dir] = self.live.add_task(f"  {run.label}{where}", total=run.steps)
        elif self.enabled:
            print(f"[{time.strftime('%H:%M:%S')}] start {run.label}{where} "
                  f"({run.steps} steps; log {run.log_path})", file=self.stream, flush=True)

    def update(self, active: list[RunSpec]) -> None:
        if not self.tty:
            return
        now = 0
        for run in active:
            step = min(current_step(run.run_dir), run.steps)
            now += step
            if run.run_dir in self.rows:
                self.live.update(self.rows[run.run_dir], completed=step)
        self.live.update(self.grid, completed=self.base + now)

    def ended(self, run: RunSpec, ok: bool, what: str = "") -> None:
        if ok:
            self.base += run.steps
        if self.tty:
            task = self.rows.pop(run.run_dir, None)
            if task is not None:
                self.live.remove_task(task)
            self.live.update(self.grid, completed=self.base)
            if not ok:
                self.live.console.print(f"failed: {run.label}: {what}")
        elif self.enabled:
            print(f"[{time.strftime('%H:%M:%S')}] {'done' if ok else 'FAILED'} {run.label}"
                  f"{': ' + what if what else ''}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


@contextlib.contextmanager
def _stop_signals(handler):
    """SIGINT, SIGTERM and SIGHUP (a closed terminal) call ``handler`` (the main thread only)
    for the block's length."""
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _tail(path: Path, n: int = 3) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return " | ".join(x.strip() for x in lines[-n:])


def split_finished(runs: list[RunSpec]) -> tuple[list[RunSpec], list[RunSpec]]:
    done = [r for r in runs if finished(r.run_dir, r.steps)]
    return done, [r for r in runs if r not in done]


# ---------------------------------------------------------------------- local processes
def run_local(runs: list[RunSpec], jobs: int = 1,
              command_for: Callable[[RunSpec], list[str]] | None = None,
              progress: bool = True, stream=None,
              after_each: Callable[[RunSpec], None] | None = None) -> Outcome:
    """Run the unfinished ``runs``, ``jobs`` at a time, each a subprocess; ``after_each(run)``
    once each has ended (the report is rewritten there; its failure is a warning, never the
    suite's end). SIGINT, SIGTERM or SIGHUP stop every run with SIGTERM (each writes its
    checkpoint) and return; a second signal kills them. Rerunning continues."""
    if jobs < 1:
        raise OffpolicyError(f"--jobs must be at least 1, got {jobs}")
    done, todo = split_finished(runs)
    out = Outcome(done=done)
    view = Progress(runs, done, progress, stream)
    active: dict[Path, tuple[RunSpec, subprocess.Popen, object]] = {}
    stop = []

    def on_signal(signum, frame):
        stop.append(signum)
        for _, proc, _ in active.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM if len(stop) == 1 else signal.SIGKILL)

    try:
        with _stop_signals(on_signal):
            while (todo or active) and not (stop and not active):
                while todo and len(active) < jobs and not stop:
                    run = todo.pop(0)
                    started = _start(run, command_for, out, view)
                    if started is not None:
                        active[run.run_dir] = started
                        if stop:  # a signal while it started: it stops with the rest
                            started[1].send_signal(signal.SIGTERM)
                for key in list(active):
                    run, proc, log = active[key]
                    rc = proc.poll()
                    if rc is None:
                        continue
                    log.close()
                    release(run.run_dir)
                    del active[key]
                    if stop:
                        continue
                    if rc == 0 and finished(run.run_dir, run.steps):
                        out.ran.append(run)
                        view.ended(run, True)
                    else:
                        why = f"exit code {rc}; log {run.log_path}: {_tail(run.log_path, 1)}"
                        out.failed.append((run, why))
                        view.ended(run, False, why)
                    _after(after_each, run, view)
                view.update([r for r, _, _ in active.values()])
                time.sleep(0.25)
    finally:
        for run, proc, log in active.values():  # an exception here: stop what we started
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
            release(run.run_dir)
        view.close()
    if stop:
        out.stopped = stop[0]
    return out


def _start(run: RunSpec, command_for, out: Outcome, view: Progress):
    """Claim and start ``run``: (run, process, log), or None when another driver has it, it
    finished meanwhile, or it could not start (recorded as failed)."""
    if not claim(run.run_dir):
        out.busy.append(run)
        return None
    if finished(run.run_dir, run.steps):  # another driver finished it since we looked
        release(run.run_dir)
        out.done.append(run)
        view.base += run.steps
        return None
    if run_dir_in_use(run.run_dir):  # a process a stopped driver left behind still runs it
        release(run.run_dir)
        out.busy.append(run)
        return None
    log = None
    try:
        cmd = prepare(run, command_for)
        log = open(run.log_path, "a")
        print(stamped(" ".join(cmd)), file=log, flush=True)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env=single_threaded_env(), start_new_session=True)
        with contextlib.suppress(OSError):  # a record, never a reason to stop the run
            record_start(run.run_dir, start_step(run, cmd))
    except (OSError, OffpolicyError) as e:
        if log is not None:
            log.close()
        release(run.run_dir)
        why = f"could not start: {' '.join(str(e).split())}"
        out.failed.append((run, why))
        view.ended(run, False, why)
        return None
    except BaseException:
        if log is not None:
            log.close()
        release(run.run_dir)
        raise
    view.started(run)
    return run, proc, log


def _after(after_each, run: RunSpec, view: Progress) -> None:
    if after_each is None:
        return
    try:
        after_each(run)
    except Exception as e:  # a report that cannot be drawn must not stop the grid
        print(f"offpolicy: warning: after {run.label}: {type(e).__name__}: "
              f"{' '.join(str(e).split())[:300]}", file=view.stream, flush=True)


def run_dir_in_use(run_dir: Path) -> bool:
    """Whether a live process holds the run directory's lock (``offpolicy train`` holds it
    from start to end)."""
    from offpolicy.training.lock import in_use

    return in_use(run_dir)


# ---------------------------------------------------------------------- Ray
def _set_parent_death_signal() -> None:
    """In the child of a Ray task: die with SIGKILL when the task's worker dies (a lost
    node), instead of training on unowned."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _wait_for_run_lock(run_dir: Path, timeout: float) -> bool:
    """Wait until no process holds the run directory's lock (a lost attempt's may, briefly);
    False if one still does after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while run_dir_in_use(run_dir):
        if time.monotonic() > deadline:
            return False
        time.sleep(1.0)
    return True


def run_task(run: RunSpec, lock_timeout: float = 300.0) -> dict:
    """One run, on whatever node Ray chose: its exit code, the node, the run's small files
    and the tail of its log."""
    run.run_dir.parent.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    if not _wait_for_run_lock(run.run_dir, lock_timeout):
        return {"rc": BUSY, "host": host, "files": {},
                "log": f"{run.run_dir} still in use after {lock_timeout:.0f} s"}
    if finished(run.run_dir, run.steps):  # an earlier attempt finished it after all
        rc = 0
    else:
        cmd = prepare(run)
        with contextlib.suppress(OSError):
            record_start(run.run_dir, start_step(run, cmd))
        try:  # which Ray node: several may share a host
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:
            node = "?"
        with open(run.log_path, "a") as log:
            print(stamped(f"attempt on {host} node {node} (pid {os.getpid()}): "
                          f"{' '.join(cmd)}"), file=log, flush=True)
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    env=single_threaded_env(),
                                    preexec_fn=_set_parent_death_signal)
            try:
                rc = proc.wait()
            except BaseException:  # cancelled (the driver stopped): checkpoint and go
                proc.send_signal(signal.SIGTERM)
                proc.wait()
                raise
    files = {}
    for name in SMALL_FILES:
        with contextlib.suppress(OSError):
            files[name] = (run.run_dir / name).read_text()
    with contextlib.suppress(OSError):  # beside the run directory
        files[f"../{hosts_path(run.run_dir).name}"] = hosts_path(run.run_dir).read_text()
    return {"rc": rc, "host": host, "files": files, "log": _tail(run.log_path, 3)}


def run_ray(runs: list[RunSpec], address: str, retries: int = 3, progress: bool = True,
            stream=None, after_each: Callable[[RunSpec], None] | None = None,
            connect_timeout: float = 10.0) -> Outcome:
    """One Ray task per unfinished run on the cluster at ``address`` (``auto``: the one this
    machine belongs to). A run whose task fails (its node lost, the run's process failed) is
    submitted again, up to ``retries`` more times; a bad input (exit 2) is not retried. An
    address that accepts no connection within ``connect_timeout`` seconds is refused."""
    if retries < 0:
        raise OffpolicyError(f"--retries must be 0 or more, got {retries}")
    try:
        import ray
    except ImportError as e:
        raise OffpolicyError("--ray-address needs Ray: pip install 'offpolicy[distributed]'") \
            from e
    import logging

    from offpolicy.ray_address import check_ray_address
    from offpolicy.training.distributed import (
        _one_line,
        _ray_failure,
        _signals_kept,
        _spawning,
    )

    if any(r.entry.peer for r in runs):
        raise OffpolicyError("peer entries run locally (--jobs), not on Ray")
    done, todo = split_finished(runs)
    out = Outcome(done=done)
    if not todo:
        return out
    check_ray_address(address, connect_timeout)
    stop = []

    def on_signal(signum, frame):
        stop.append(signum)

    # the driver's handlers from before ray.init, whose own SIGTERM handler (sys.exit(15)) is
    # not installed (issue 74's start-up protection, as a run's): a stop at any moment of the
    # start-up claims nothing, submits nothing and leaves no Ray connection behind
    with _stop_signals(on_signal):
        try:
            with _spawning(), _signals_kept(ray):
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR)
        except Exception as e:
            raise OffpolicyError(f"cannot join the Ray cluster at {address}: "
                                 f"{type(e).__name__}: {_one_line(e)}") from e
        view = Progress(runs, done, progress, stream)
        claimed: list[RunSpec] = []
        pending = {}
        try:
            env_vars = {k: os.environ[k] for k in ("PYTHONPATH", "OFFPOLICY_CACHE_DIR",
                                                   "JAX_PLATFORMS") if k in os.environ}
            # Ray itself does not retry: the driver counts every attempt
            task = ray.remote(num_cpus=1, max_retries=0, retry_exceptions=False)(run_task) \
                .options(runtime_env={"env_vars": env_vars} if env_vars else None)
            attempts: dict[Path, int] = {}
            for run in todo:
                if stop:
                    break
                if not claim(run.run_dir):  # a driver of this machine, local or Ray, runs it
                    out.busy.append(run)
                    continue
                claimed.append(run)
                attempts[run.run_dir] = 1
                pending[task.remote(run)] = run
                view.started(run)
            while pending and not stop:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                view.update(list(pending.values()))
                for ref in ready:
                    run = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as e:
                        result = {"rc": -1, "host": "?", "files": {}, "log": _ray_failure(e)}
                    _write_back(run, result["files"])
                    if result["rc"] == 0 and finished(run.run_dir, run.steps):
                        out.ran.append(run)
                        view.ended(run, True)
                    elif result["rc"] != BAD_INPUT and attempts[run.run_dir] <= retries:
                        attempts[run.run_dir] += 1
                        pending[task.remote(run)] = run
                        continue
                    else:
                        why = (f"exit code {result['rc']} on {result['host']} after "
                               f"{attempts[run.run_dir]} attempts: {result['log']}")
                        out.failed.append((run, why))
                        view.ended(run, False, why)
                    _after(after_each, run, view)
        finally:
            if stop:
                for ref in pending:
                    with contextlib.suppress(Exception):
                        ray.cancel(ref)
                if pending:
                    with contextlib.suppress(Exception):
                        ray.wait(list(pending), num_returns=len(pending), timeout=60)
                out.stopped = stop[0]
            for run in claimed:
                release(run.run_dir)
            view.close()
            ray.shutdown()
    return out


def _write_back(run: RunSpec, files: dict[str, str]) -> None:
    """The run's small files, as the node that ran it sent them, where this driver reads them
    (the same files already on shared storage: left as they are); ``../NAME`` is a file
    beside the run directory (its hosts file)."""
    for name, text in files.items():
        p = (run.run_dir.parent / name[3:]) if name.startswith("../") else run.run_dir / name
        try:
            if p.exists() and p.read_text() == text:
                continue
        except OSError:
            pass
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".part")
        tmp.write_text(text)
        os.replace(tmp, p)
