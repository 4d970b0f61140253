"""Remote collectors on Ray: ``--num-collectors K``, one more loop of the runtime.

Each collector is a Ray actor (:class:`CollectorProcess`) that owns ``--num-envs`` env copies,
its own exploration state (noise, warm-up sampler, policy key) seeded from (seed, collector
index, incarnation), and the agent's policy jitted on its host CPU with the newest parameters
it was sent. It collects a chunk (``chunk_steps`` steps of each env copy) and returns it as
plain NumPy (:class:`~offpolicy.training.collector.ChunkSink`: the fields replay stores, episode
starts, behaviour fields) with its collector id, the parameter version it acted with and the
returns of the episodes it finished.

The learner (this process, :func:`distributed`) owns replay, updates, write-back, the
normaliser statistics, evaluation and checkpoints. Collector i's env copies are replay rings
``i*num_envs`` onwards, so a chunk lands in its own rings (``apply_chunk``), episodes never
mixing. The learner publishes the acting parameters and statistics through the object store
every ``--sync-every`` updates; a collector takes the newest with its next chunk.

Replay ratio. Each collector has at most one chunk in flight and is sent its next one as soon
as its last arrives; the learner then runs the updates that chunk owes (``updates_per_step``
per env step through the schedule's credit; with ``--segment-length`` one update on the
collector's segment plus Poisson(``--replay-ratio``) replayed ones), so updates per stored env
step equal the configured ratio at every chunk (the fractional credit aside). When the
learner is slower, arrived chunks wait (the collectors idle: throttled); when it is faster it
waits for the next chunk (paused). train.csv logs the measured ratio, the parameter lag in
updates, and updates/s beside the collected env steps/s.

Faults. A collector that fails (killed, a crash, an exception from its env) is restarted with
the newest parameters and a new incarnation's seeds; its unsent chunk is lost and its rings'
open episodes are closed (as at a resume), so no stored transition crosses the gap. More than
``--max-collector-restarts`` failures stop the run with one line; the latest checkpoint stays.
A local Ray instance is shut down with the run, and a reaper process kills what is left of it
if this process dies without shutting it down.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import subprocess
import sys
import warnings
from typing import Any, NamedTuple

import numpy as np

from offpolicy import registry
from offpolicy.envs.wrappers import ObsNormalizer
from offpolicy.errors import OffpolicyError
from offpolicy.training.build import build_collector
from offpolicy.training.collector import apply_chunk
from offpolicy.training.learner import ActingState
from offpolicy.training.local_replay import WINDOW_PREFIX, StatisticsSink, TeeSink, UnrollQueue

COLUMNS = ["replay_ratio", "param_lag", "collector_restarts"]


class CollectorFailure(NamedTuple):
    """What a pool returns for a chunk that never came: one line on why."""

    message: str


def _normalizer(state: dict, like: ObsNormalizer) -> ObsNormalizer:
    norm = ObsNormalizer(like.rms.mean.shape, bool(state["enabled"]), like.clip)
    norm.rms.load_state_dict(state)
    return norm


class CollectorProcess:
    """One remote collector (a Ray actor runs it; :class:`LocalPool` runs it in this process)."""

    def __init__(self, run_dict: dict, index: int, incarnation: int = 0):
        self.index = index
        self.collector, self.local = build_collector(registry.RunConfig.from_dict(run_dict),
                                                     index, incarnation)
        sink = self.collector.sink
        self.chunks = sink.sinks[0] if isinstance(sink, TeeSink) else sink

    def collect(self, steps: int, payload: tuple, global_step: int) -> dict[str, Any]:
        """``steps`` steps of every env copy with the acting ``payload`` (version, host
        parameters, observation statistics); ``global_step``: the run's env step when the
        chunk was asked for (warm-up is decided by it)."""
        version, params, norm = payload
        c = self.collector
        c.set_acting(ActingState(version, params, _normalizer(norm, c.acting.normalizer)))
        if not c.started:
            c.begin(global_step)
        for i in range(steps):
            step = global_step + i * c.num_envs
            c.step(*c.act(step), step)
        chunk = self.chunks.take()
        if self.local is not None:  # the fresh unrolls and R sampled ones (Algorithm 2)
            chunk |= {WINDOW_PREFIX + k: v for k, v in self.local.unroll_batch().items()}
        chunk["returns"], c.finished = np.asarray(c.finished, np.float64), []
        chunk["collector"], chunk["version"] = np.int64(self.index), np.int64(version)
        return chunk

    def close(self) -> None:
        self.collector.close()


# ---------------------------------------------------------------------- pools
class LocalPool:
    """The collectors in this process, one chunk at a time in the order they were asked for:
    the protocol of :class:`RayPool` without Ray (tests). ``fail``: (collector, chunk number)
    pairs whose chunk raises instead, as a crashed collector's would."""

    def __init__(self, run: registry.RunConfig, fail: set[tuple[int, int]] | None = None):
        self.run_dict = run.to_dict()
        k = run.train.num_collectors
        self.procs = [CollectorProcess(self.run_dict, i) for i in range(k)]
        self.incarnations = [0] * k
        self.asked: collections.deque = collections.deque()
        self.chunks = [0] * k  # chunks asked of each collector so far
        self.fail = set(fail or ())

    def publish(self, payload: tuple) -> tuple:
        return payload

    def launch(self, i: int, steps: int, payload, global_step: int) -> None:
        self.asked.append((i, self.chunks[i], steps, payload, global_step))
        self.chunks[i] += 1

    def next(self) -> tuple[int, dict | CollectorFailure]:
        i, n, steps, payload, global_step = self.asked.popleft()
        try:
            if (i, n) in self.fail:
                raise RuntimeError(f"collector {i} lost (injected at chunk {n})")
            return i, self.procs[i].collect(steps, payload, global_step)
        except Exception as e:
            return i, CollectorFailure(f"{type(e).__name__}: {_one_line(e)}")

    def restart(self, i: int) -> None:
        self.procs[i].close()
        self.incarnations[i] += 1
        self.procs[i] = CollectorProcess(self.run_dict, i, self.incarnations[i])

    def close(self) -> None:
        for p in self.procs:
            p.close()


class RayPool:
    """The collectors as Ray actors, on a local Ray instance started (and shut down) for the
    run, or on the cluster at ``--ray-address`` / ``RAY_ADDRESS``."""

    def __init__(self, run: registry.RunConfig):
        try:
            import ray
        except ImportError as e:
            raise OffpolicyError("--num-collectors needs Ray: pip install "
                                 "'offpolicy[distributed]'") from e
        self.ray, tc = ray, run.train
        address = tc.ray_address or os.environ.get("RAY_ADDRESS", "")
        self.started = not ray.is_initialized()
        self.reaper = None
        if self.started:
            kw = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
            # the reaper watches from before the first Ray process starts: a kill during
            # ray.init leaves none behind either
            self.reaper = None if address else _start_reaper()
            try:
                with _spawning(), _signals_kept(ray):
                    if address:
                        ray.init(address=address, **kw)
                    else:
                        ray.init(num_cpus=os.cpu_count(), **kw)
            except BaseException as e:
                self._stop_reaper()
                if not isinstance(e, Exception):
                    raise
                raise OffpolicyError(f"cannot start Ray{' at ' + address if address else ''}: "
                                     f"{type(e).__name__}: {_one_line(e)}") from e
        # collectors act on the CPU whatever the learner uses; their env modules import as
        # this process's do
        env_vars = {"JAX_PLATFORMS": "cpu"} | {k: os.environ[k] for k in (
            "PYTHONPATH", "OFFPOLICY_CACHE_DIR", "OFFPOLICY_XLA_DEFAULTS") if k in os.environ}
        self.actor = ray.remote(num_cpus=0, max_restarts=0)(CollectorProcess).options(
            runtime_env={"env_vars": env_vars})
        self.run_dict = run.to_dict()
        self.incarnations = [0] * tc.num_collectors
        self.actors = [self.actor.remote(self.run_dict, i) for i in range(tc.num_collectors)]
        self.pending: dict = {}

    def publish(self, payload: tuple):
        return self.ray.put(payload)

    def launch(self, i: int, steps: int, payload, global_step: int) -> None:
        self.pending[self.actors[i].collect.remote(steps, payload, global_step)] = i

    def next(self) -> tuple[int, dict | CollectorFailure]:
        ready, _ = self.ray.wait(list(self.pending), num_returns=1)
        i = self.pending.pop(ready[0])
        try:
            return i, self.ray.get(ready[0])
        except self.ray.exceptions.RayError as e:
            return i, CollectorFailure(_ray_failure(e))

    def restart(self, i: int) -> None:
        self.ray.kill(self.actors[i], no_restart=True)
        self.incarnations[i] += 1
        self.actors[i] = self.actor.remote(self.run_dict, i, self.incarnations[i])

    def close(self) -> None:
        try:
            for a in self.actors:
                self.ray.kill(a, no_restart=True)
            if self.started:
                self.ray.shutdown()
        finally:
            self._stop_reaper()

    def _stop_reaper(self) -> None:
        """The reaper kills what Ray's shutdown left (its agents outlive the raylet by about
        a minute), then exits."""
        if self.reaper is not None:
            self.reaper.stdin.close()
            self.reaper.wait(timeout=30)
            self.reaper = None


@contextlib.contextmanager
def _spawning():
    """Ray and the reaper start processes with fork + exec, which is safe in a multi-threaded
    process (the child runs nothing of ours before exec); JAX warns about every fork all the
    same, so its warning is silenced here, and only here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called",
                                category=RuntimeWarning)
        yield


@contextlib.contextmanager
def _signals_kept(ray):
    """ray.init installs SIGTERM handlers of its own as it goes (the driver's: sys.exit(15); a
    local node's: kill its processes, sys.exit(1)): a SIGTERM during the seconds it takes
    ended the run with exit 15 or an abort (134), without a checkpoint and with Ray's agents
    left running. They are not installed, so the run's handler stays: the run stops once
    Ray is up, as at any other moment."""
    utils = ray._private.utils
    install = utils.set_sigterm_handler
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = install


def _ray_failure(e: BaseException) -> str:
    """One line for a collector's failure: the exception inside the collector (Ray wraps it,
    with the remote traceback, in its own), else Ray's own (an actor killed or lost)."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {_one_line(cause)}"
    for line in reversed(str(e).splitlines()):
        m = re.match(r"([\w.]+(?:Error|Exception|Interrupt|Exit)): (.+)",
                     re.sub(r"\x1b\[[0-9;]*m", "", line).strip())
        if m:
            return f"{m.group(1).rsplit('.', 1)[-1]}: {_one_line(m.group(2))}"
    return f"{type(e).__name__}: {_one_line(e)}"


def _one_line(e: BaseException | str) -> str:
    text = " ".join(str(e).split())
    return text[:300] + "..." if len(text) > 300 else text


# The reaper: a stdlib-only process that notes this process's descendants started since it
# did (the local Ray instance: its raylet, GCS, agents and workers) four times a second and,
# once this process is gone or done with Ray (its end of the pipe closes), kills the ones
# still there, and any process whose environment names one of them as its raylet
# (RAY_RAYLET_PID): an agent the raylet started since the last look, orphaned when the raylet
# died with this process. Ray's agents otherwise outlive a killed driver by about a minute.
_REAPER = r"""
import os, select, signal, sys
parent = int(sys.argv[1])

def table():
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
                fields = stat[stat.rindex(")") + 2:].split()
                out[int(d)] = (int(fields[1]), fields[19])
            except (OSError, ValueError):
                pass
    return out

def descendants(procs):
    children = {}
    for pid, (ppid, start) in procs.items():
        if int(start) >= born:  # a child from before Ray started is not Ray's
            children.setdefault(ppid, []).append((pid, start))
    out, todo = {}, [parent]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            if pid != os.getpid():
                out[pid] = start
                todo.append(pid)
    return out

def raylet_of(pid):
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return None
    for var in environ:
        if var.startswith(b"RAY_RAYLET_PID="):
            try:
                return int(var[15:])
            except ValueError:
                return None
    return None

born = int(table()[os.getpid()][1])
seen = {}
while True:
    seen.update(descendants(table()))
    ready, _, _ = select.select([sys.stdin], [], [], 0.25)
    if ready and not sys.stdin.read(1):
        break
procs = table()
seen.update(descendants(procs))
for pid, (_, start) in procs.items():
    if pid not in seen and pid != os.getpid() and raylet_of(pid) in seen:
        seen[pid] = start
for pid, start in seen.items():
    if pid in procs and procs[pid][1] == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def _start_reaper() -> subprocess.Popen | None:
    if not os.path.isdir("/proc"):
        return None  # not Linux: Ray's own shutdown has to do
    return subprocess.Popen([sys.executable, "-c", _REAPER, str(os.getpid())],
                            stdin=subprocess.PIPE, start_new_session=True)


# ---------------------------------------------------------------------- the learner's loop
class CollectionStats:
    """What train.csv says of remote collection: episodes finished (and their mean return),
    the measured replay ratio and the parameter lag over each logging interval."""

    def __init__(self, episodes: int = 0):
        self.episodes, self.restarts = episodes, 0
        self.finished: list[float] = []
        self._steps = self._updates = 0
        self._lags: list[int] = []

    def received(self, chunk: dict, env_steps: int, learner_version: int) -> None:
        self.finished += chunk["returns"].tolist()
        self.episodes += len(chunk["returns"])
        self._steps += env_steps
        self._lags.append(learner_version - int(chunk["version"]))

    def updated(self, n: int) -> None:
        self._updates += n

    def log_values(self, seconds: float) -> dict:
        r, self.finished = self.finished, []
        values = {"episodes": self.episodes,
                  "episode_return": float(np.mean(r)) if r else float("nan"),
                  "replay_ratio": self._updates / max(self._steps, 1),
                  "param_lag": float(np.mean(self._lags)) if self._lags else float("nan"),
                  "collector_restarts": self.restarts}
        self._steps = self._updates = 0
        self._lags = []
        return values

    def state_dict(self) -> dict:
        return {"episodes": self.episodes}


def distributed(run, total: int) -> None:
    """Start ``run.pool_factory``'s collectors, learn from their chunks until step ``total``
    (exactly: the last chunks are cut to end there), stop them."""
    tc, learner, schedule = run.train_cfg, run.learner, run.schedule
    if run.collection is None:  # their episodes, across this run's learn() calls
        run.collection = CollectionStats(run.episodes)
    if run.stopping:  # a signal during start-up: no Ray to start and stop again
        return
    pool = run.pool_factory(run.run)
    run.signals.reinstall()  # in case Ray's handlers replaced ours: a SIGTERM must checkpoint
    k, per = tc.num_envs, registry.chunk_steps(tc)
    step, stats = run.step, run.collection
    rings = [np.arange(i * k, (i + 1) * k) for i in range(tc.num_collectors)]
    payload, published = pool.publish(learner.acting_payload()), learner.updates
    asked: dict[int, int] = {}  # collector -> the env steps of its chunk in flight
    queue = UnrollQueue(tc.batch_size) if tc.collector_replay else None

    def ask(i: int) -> None:
        # the last chunks are shorter where whole ones would pass ``total``: Agent.learn(n)
        # takes any multiple of --num-envs (the command line's --steps is whole chunks)
        n = min(per, (total - step - sum(asked.values())) // k)
        if n > 0 and not run.stopping:
            pool.launch(i, n, payload, step)
            asked[i] = n * k

    try:
        for i in range(tc.num_collectors):
            ask(i)
        while asked:
            i, chunk = pool.next()
            size = asked.pop(i)
            if isinstance(chunk, CollectorFailure):
                _restart(run, pool, i, rings[i], chunk, stats)
                ask(i)
                continue
            if queue is None:
                apply_chunk(chunk, learner.sink(rings[i]))
            else:  # no central replay: the statistics, and the unrolls into the queue
                apply_chunk(chunk, StatisticsSink(learner, rings[i]))
                queue.put({k[len(WINDOW_PREFIX):]: v for k, v in chunk.items()
                           if k.startswith(WINDOW_PREFIX)})
            step += size
            stats.received(chunk, size, learner.updates)
            ask(i)  # it collects the next chunk while the learner learns from this one
            before = learner.updates
            _learn(run, step, size, rings[i], queue)
            stats.updated(learner.updates - before)
            if learner.updates - published >= tc.sync_every:
                payload, published = pool.publish(learner.acting_payload()), learner.updates
            if (schedule.event_due(step) or run.stopping) and run.periodic(step):
                return
    finally:
        run.step = step
        pool.close()


def _learn(run, step: int, size: int, rings: np.ndarray, queue: UnrollQueue | None) -> None:
    """The updates one chunk owes, by the run's cadence; with collectors' own replays, one
    per batch of unrolls queued (the unrolls that arrive during warm-up are not learned
    from)."""
    tc, learner, schedule = run.train_cfg, run.learner, run.schedule
    if queue is not None:
        if step <= tc.warmup_steps:
            queue.drop()
            return
        while (batch := queue.take()) is not None:
            learner.update(None, learner.statistics.normalize(batch))
        return
    if not run.can_learn(step):
        return
    if tc.segment_length:
        if learner.data.kind == "sequences" and run.contract.learns_on_segments:
            learner.update_segment(tc.segment_length, rings)
        for _ in range(schedule.replay_updates()):
            learner.update()
        return
    for _ in range(schedule.updates_due(size)):
        learner.update()


def _restart(run, pool, i: int, rings: np.ndarray, failure: CollectorFailure,
             stats: CollectionStats) -> None:
    stats.restarts += 1
    if stats.restarts > run.train_cfg.max_collector_restarts:
        run.save_checkpoint("latest")
        raise OffpolicyError(
            f"collector {i} failed ({failure.message}); {stats.restarts} failures exceed "
            f"--max-collector-restarts {run.train_cfg.max_collector_restarts}; the latest "
            "checkpoint is kept")
    run.learner.abandon_episodes(rings)
    print(f"offpolicy: collector {i} failed ({failure.message}); restarted "
          f"({stats.restarts} of at most {run.train_cfg.max_collector_restarts})",
          file=sys.stderr, flush=True)
    pool.restart(i)
