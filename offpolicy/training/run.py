"""The run: schedule, evaluation, checkpoints, signals and the run directory.

It wires an agent (``agents/base.py``) to a :class:`Collector` (envs, noise, episodes, replay
writes) and a :class:`Learner` (sampling, the jitted update, write-back, metrics) and drives
them; it knows no algorithm's math.

One iteration of the loop (Algorithm 1 of the papers, K env copies at once):

1. actions: uniformly random during warm-up (deterministic policies; a stochastic policy samples
   from its initial self, so replay records the density it acted with); else the exploring
   action computed by the last fused update-and-act call, or the policy on the current
   parameters;
2. the collector steps the K env copies and writes the K transitions into replay;
3. updates: ``updates_per_step`` per env step (K env steps give K x as many), the last one
   fused with the policy for the next observations; or, with ``segment_length`` k, every k
   steps one update on the segment just collected plus Poisson(``replay_ratio``) updates from
   replay (ACER's Algorithm 1).

``--pipeline`` reorders 2 and 3 so that they overlap: the update of step t is dispatched on a
batch sampled *before* transition t was stored, then the env steps while it runs; the next
action waits for it and uses its parameters. The departure from Algorithm 1 is that update t
cannot sample transition t (in the papers' order it could): one transition out of a replay of
up to a million.

Resuming restores parameters, optimiser states, targets, replay, counters, keys and every RNG
state from the latest checkpoint; the episodes in progress when it was written restart from a
fresh reset (their transitions so far stay in replay).
"""

from __future__ import annotations

import math
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml

from offpolicy import registry
from offpolicy.agents.acting import HostPolicy
from offpolicy.agents.base import check_agent
from offpolicy.envs.make import (
    action_spec,
    frame_stack,
    is_image_space,
    make_env,
    observation_dtype,
    observation_shape,
)
from offpolicy.envs.wrappers import ObsNormalizer, RewardScaler
from offpolicy.errors import OffpolicyError
from offpolicy.jax_setup import configure_jax
from offpolicy.plotting import last_eval, plot_run, read_eval_csv
from offpolicy.replay.prioritized import RankPrioritized
from offpolicy.replay.refer import FAR
from offpolicy.replay.storage import ReplayBuffer
from offpolicy.training import checkpoint
from offpolicy.training.collector import Collector
from offpolicy.training.evaluation import EVAL_SEED_OFFSET, Evaluator
from offpolicy.training.learner import Learner
from offpolicy.training.lock import LOCK_FILE, RunDirLock
from offpolicy.training.logger import RunLogger, Stopwatch, eval_row

FIRST_CHECKPOINT = 1_000  # the first checkpoint comes early, so --resume has one soon
REPORT_REPLAY_BYTES = 2**30  # a replay that can grow past this says how big, at the start
RUN_FILES = ("config.yaml", "eval.csv", "train.csv", "tb", "checkpoints", "curve.png")


def _collector_state_v1(meta: dict) -> dict | None:
    """The collector's state from a checkpoint written before the collector existed (its
    fields sat at the top level of meta.json, the noise under ``actor``)."""
    if "episodes" not in meta:
        return None
    state = {k: meta[k] for k in ("episodes", "resets", "rng", "obs_norm", "reward_scale",
                                   "reward_ret") if k in meta}
    if "actor" in meta:
        state["noise"] = meta["actor"]
    return state


class Run:
    """One training run: agent, collector, learner, evaluation, logging and checkpoints."""

    def __init__(self, run: registry.RunConfig, run_dir: str | Path | None = None,
                 resume: bool = False, with_replay: bool = True):
        configure_jax()
        self.run = run
        tc = run.train
        self.run_dir = Path(run_dir) if run_dir is not None else None
        # Everything that can fail on bad input happens before the run directory exists.
        probe = make_env(tc.env, tc.seed)
        self.spec = action_spec(probe, tc.discretize)  # every env steps through it
        self.obs_shape = observation_shape(probe)
        self.obs_dtype = observation_dtype(probe)  # uint8 frames stay uint8 in replay
        image = is_image_space(probe.observation_space)
        frames = frame_stack(probe)  # stacked Atari frames: replay keeps one per step
        probe_steps = getattr(probe.spec, "max_episode_steps", None)
        probe.close()
        if image and tc.normalize_obs:
            raise OffpolicyError(
                f"--normalize-obs does not apply to image observations ({tc.env} gives uint8 "
                f"frames {self.obs_shape}, which the network scales by 1/255); drop it")
        self.agent = registry.build_agent(run, self.obs_shape, self.spec)
        check_agent(self.agent)
        fields = dict(self.agent.behaviour_fields) | dict(self.agent.writeback_fields)
        k = tc.num_envs
        stored = getattr(self.agent, "stored_return", None)
        self.replay = ReplayBuffer(
            tc.buffer_size if with_replay else 2 * k, self.obs_shape, self.spec.flat_dim, fields,
            obs_dtype=self.obs_dtype, seed=tc.seed + 2, num_streams=k,
            counted=(FAR,) if FAR in self.agent.writeback_fields else (),
            forget_whole_episodes=tc.replay != "er" or stored is not None,
            overhead_per_step=(RankPrioritized.bytes_per_step(tc.buffer_size)
                               if with_replay and tc.replay == "per" else 0),
            frame_stack=frames)
        if with_replay and self.replay.full_bytes >= REPORT_REPLAY_BYTES:
            print(f"offpolicy: replay of {self.replay.capacity} steps takes up to "
                  f"{self.replay.full_bytes / 2**30:.1f} GiB when full "
                  f"({self.replay.bytes_per_step} bytes per step"
                  + (f"; {frames} stacked frames stored once each" if frames else "") + ")",
                  file=sys.stderr)
        # App. B statistics come from replay (set by the learner), not from running updates.
        # Frames are never normalised (the network scales them; per-pixel statistics would
        # cost 28k floats in every checkpoint): --replay-statistics then scales rewards only.
        self.obs_norm = ObsNormalizer(() if image else self.obs_shape,
                                      (tc.normalize_obs or tc.replay_statistics) and not image,
                                      frozen=tc.replay_statistics)
        self.reward_scale = RewardScaler(getattr(run.agent, "gamma", 0.99),
                                         tc.normalize_reward or tc.replay_statistics, k,
                                         frozen=tc.replay_statistics)
        self._check_cadence(k)
        if stored is not None:
            self._check_stored_returns(k, probe_steps)
        self.learner = Learner(self.agent, self.replay, tc.batch_size, tc.seed, self.obs_norm,
                               self.reward_scale, registry.replay_settings(tc),
                               int(tc.steps * tc.updates_per_step))
        # replay updates per segment ~ Poisson(replay_ratio) (ACER); its state is checkpointed
        self.poisson = np.random.Generator(np.random.PCG64(tc.seed + 7))
        self.policy = HostPolicy(self.agent.policy, tc.seed + 6)
        self._collector: Collector | None = None
        self.step = 0
        self.best_return = -math.inf
        self.elapsed = 0.0
        self.eval_history: list[dict] = []
        self._update_credit = 0.0
        self._ckpt_written = False
        self._owns_dir = False  # this run created the directory (or found it empty)
        self._created_dir = False
        self._last_ckpt_step = -1
        self._best_kept: tuple[str, ...] = ()  # the best checkpoint as of the latest one
        self._evaluator: Evaluator | None = None
        self._saved_collector: dict | None = None
        self._dir_lock: RunDirLock | None = None
        if resume:
            if self.run_dir is None:
                raise OffpolicyError("--resume needs a run directory")
            self._lock_dir()
            if checkpoint.has_checkpoint(self.run_dir):
                self.restore(checkpoint.locate(self.run_dir, "latest"))
                if self.step > tc.steps:
                    raise OffpolicyError(
                        f"--steps {tc.steps} is below step {self.step}, which the run in "
                        f"{self.run_dir} has already reached: give --steps {self.step} or more")
                self._write_config()  # --steps etc. may have changed
            else:  # killed before its first checkpoint: nothing to continue
                print(f"offpolicy: {self.run_dir} has no checkpoint yet (the run stopped before "
                      "its first one); starting it from step 0", file=sys.stderr)
                self._clear_run_files()
                self._owns_dir = True
                self._write_config()
        elif self.run_dir is not None:
            self._claim_dir()
            try:
                self._write_config()
            except OffpolicyError:  # e.g. a full disk: leave no empty run directory behind
                self._cleanup_failed()
                raise

    def _check_stored_returns(self, num_envs: int, max_steps: int | None) -> None:
        """Stored return targets (V-RACER) need whole episodes in each env copy's ring and
        replay-based reward scaling (a running scale would leave stored targets stale)."""
        tc = self.train_cfg
        per_copy = tc.buffer_size // num_envs
        if max_steps is not None and per_copy < max_steps + 1:
            raise OffpolicyError(
                f"{self.run.algo} keeps return targets per episode: --buffer-size "
                f"{tc.buffer_size} gives each of {num_envs} env copies {per_copy} slots, fewer "
                f"than one {max_steps}-step episode needs ({max_steps + 1}); raise "
                "--buffer-size or lower --num-envs")
        if tc.normalize_reward:
            raise OffpolicyError(
                f"{self.run.algo} stores return targets in replay: use --replay-statistics "
                "(rewards scaled by replay's contents, stored targets rescaled with them) "
                "instead of --normalize-reward")

    def _check_cadence(self, num_envs: int) -> None:
        tc = self.train_cfg
        if tc.segment_length == 0:
            return
        if tc.pipeline:
            raise OffpolicyError("--pipeline overlaps the per-step update with the env step; it "
                                 "does not apply with --segment-length (choose one)")
        if not getattr(self.agent, "learns_on_segments", True) and tc.replay_ratio == 0:
            raise OffpolicyError(f"{self.run.algo} learns from replay only here: --replay-ratio 0 "
                                 "would never update (give a ratio > 0 or learn on-policy)")
        longest = (tc.buffer_size // num_envs - 1) // 2
        if self.agent.data.kind == "sequences" and tc.segment_length > longest:
            raise OffpolicyError(f"--segment-length {tc.segment_length} is too long for a replay "
                                 f"of {tc.buffer_size} steps over {num_envs} env copies (at most "
                                 f"{longest})")

    # ------------------------------------------------------------------ run directory
    def _lock_dir(self) -> None:
        """Hold the run directory's lock for the whole run (released by :meth:`close`, or by
        the kernel when the process ends): a second run into it is refused, not interleaved."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OffpolicyError(f"cannot use run directory {self.run_dir}: {e}") from e
        self._dir_lock = RunDirLock(self.run_dir)

    def _claim_dir(self) -> None:
        d = self.run_dir

        def refuse_unless_ours():
            names = {c.name for c in d.iterdir()} - {LOCK_FILE} if d.is_dir() else set()
            if names and not (names <= set(RUN_FILES) and not checkpoint.has_checkpoint(d)):
                raise OffpolicyError(
                    f"run directory {d} already exists and is not empty; pass --resume "
                    "to continue it or choose another --run-dir")
            return names

        try:
            refuse_unless_ours()  # someone else's files: no lock file is left among them
            self._created_dir = not d.exists()
            self._lock_dir()  # a live run there may have no checkpoint yet: it holds the lock
            try:
                stopped = refuse_unless_ours()
            except OffpolicyError:
                self._dir_lock.release()
                raise
            if stopped:
                print(f"offpolicy: {d} holds a run that stopped before its first checkpoint; "
                      "starting afresh there", file=sys.stderr)
                self._clear_run_files()
        except OSError as e:
            raise OffpolicyError(f"cannot use run directory {d}: {e}") from e
        self._owns_dir = True

    def _clear_run_files(self) -> None:
        for name in RUN_FILES:
            p = self.run_dir / name
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()

    def _write_config(self) -> None:
        try:
            checkpoint.write_text_atomic(self.run_dir / "config.yaml",
                                         yaml.safe_dump(self.run.to_dict(), sort_keys=False))
        except OSError as e:
            raise OffpolicyError(f"cannot write {self.run_dir / 'config.yaml'}: {e}") from e

    # ------------------------------------------------------------------ parts
    @property
    def train_cfg(self):
        return self.run.train

    @property
    def collector(self) -> Collector:
        """The training envs, built on first use (evaluating a loaded agent needs none)."""
        if self._collector is None:
            tc = self.train_cfg
            self._collector = Collector(tc.env, tc.num_envs, tc.seed, self.spec, self.obs_shape,
                                        self.replay, self.agent.exploration_noise,
                                        self.agent.behaviour_fields, self.obs_norm,
                                        self.reward_scale, tc.async_envs, tc.clip_reward)
            if self._saved_collector is not None:
                self._collector.load_state_dict(self._saved_collector)
        return self._collector

    @property
    def state(self) -> Any:
        return self.learner.state

    @property
    def compile_count(self) -> int:
        return self.learner.compile_count

    @property
    def episodes(self) -> int:
        if self._collector is not None:
            return self._collector.episodes
        return int((self._saved_collector or {}).get("episodes", 0))

    def act(self, obs: np.ndarray, explore: bool = False
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Agent-space actions for normalised observations [B, ...] with the current
        parameters (greedy unless ``explore``)."""
        params = self.policy.host_params(self.learner.acting_params())
        return self.policy.act(params, obs, explore)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_meta(self) -> dict:
        """Everything but the agent state that a checkpoint holds (meta.json)."""
        return {
            "algo": self.run.algo, "best_return": self.best_return, "elapsed": self.elapsed,
            "update_credit": self._update_credit,
            "collector": (self._collector.state_dict() if self._collector is not None
                          else self._saved_collector or {}),
            "keys": self.learner.keys_state(), "policy": self.policy.state_dict(),
            "poisson": self.poisson.bit_generator.state,
            "obs_norm": self.obs_norm.rms.state_dict(),
            "env_seed": self.run.train.seed, "jax_version": jax.__version__,
            "config": self.run.to_dict(),
        }

    def save_checkpoint(self, kind: str = "latest") -> Path | None:
        if self.run_dir is None:
            return None
        if self._dir_lock is not None:
            self._dir_lock.check()
        root = self.run_dir / "checkpoints"
        replay = self.replay if (kind == "latest" and self.train_cfg.save_replay) else None
        # a best save keeps the best as of the latest checkpoint, which a resume rewinds to
        path = checkpoint.save(root, kind, self.step, self.state, self.checkpoint_meta(),
                               replay, keep=self._best_kept if kind == "best" else ())
        self._ckpt_written = True
        if kind == "latest":
            self._last_ckpt_step = self.step
            best = checkpoint.pointer_target(root, "best")
            self._best_kept = (best,) if best else ()
            checkpoint.prune(root, "best")
        return path

    def restore(self, ckpt: Path, with_replay: bool = True) -> None:
        """Restore everything a checkpoint holds: parameters, optimiser states, targets,
        counters, keys, RNG states, noise, normaliser statistics and (``with_replay``, if
        saved) the replay. Evaluation restores without replay and never reads its file."""
        state, meta = checkpoint.load(ckpt, self.state)
        if meta.get("algo") != self.run.algo:
            raise OffpolicyError(f"checkpoint {ckpt} is for {meta.get('algo')}, "
                                 f"not {self.run.algo}")
        if with_replay:
            if meta.get("has_replay"):
                self.replay.load(ckpt / "replay.npz")
            elif self.run_dir is not None:
                print(f"offpolicy: warning: checkpoint {ckpt} has no replay (save_replay was "
                      "off); training continues with an empty replay buffer", file=sys.stderr)
            self.replay.close_episode()
        self.learner.state = state
        self.learner.load_keys(meta.get("keys", {}))
        if "policy" in meta:
            self.policy.load_state_dict(meta["policy"])
        self.step = int(meta["step"])
        self.best_return = float(meta["best_return"])
        self.elapsed = float(meta["elapsed"])
        self._update_credit = float(meta["update_credit"])
        self.obs_norm.rms.load_state_dict(meta["obs_norm"])
        if "poisson" in meta:
            self.poisson.bit_generator.state = meta["poisson"]
        self._saved_collector = meta.get("collector") or _collector_state_v1(meta)
        if self._saved_collector is not None:  # the learner scales rewards with these
            self.reward_scale.rms.load_state_dict(self._saved_collector["reward_scale"])
        if self._collector is not None and self._saved_collector is not None:
            self._collector.load_state_dict(self._saved_collector)
        self._ckpt_written = True
        self._last_ckpt_step = self.step
        if self.run_dir is not None:
            self._rewind_best()

    def _rewind_best(self) -> None:
        """A resume continues from the latest checkpoint and discards what came after it: a
        ``best`` saved since then goes (the best as of that checkpoint takes its place) and
        the best return is the best evaluation that eval.csv keeps (rows up to the step)."""
        kept = checkpoint.rewind_best(self.run_dir / "checkpoints", self.step)
        self._best_kept = (kept,) if kept else ()
        rows = [r for r in read_eval_csv(self.run_dir / "eval.csv", quiet=True)
                if r["step"] <= self.step and math.isfinite(r["return_mean"])]
        if rows:
            self.best_return = max(r["return_mean"] for r in rows)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, episodes: int | None = None, policy=None) -> np.ndarray:
        """Returns of ``episodes`` (default ``eval_episodes``) deterministic episodes;
        ``policy`` replaces the agent's (e.g. one actor of an ensemble)."""
        tc = self.train_cfg
        n = tc.eval_episodes if episodes is None else episodes
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise OffpolicyError(f"episodes must be a positive integer, got {n!r}")
        if self._evaluator is None or self._evaluator.episodes != n:
            self._evaluator = Evaluator(tc.env, int(n), tc.seed + EVAL_SEED_OFFSET, self.spec)
        params = self.policy.host_params(self.learner.acting_params())
        if policy is None:
            act = lambda o: self.policy.act(params, o, False)[0]  # noqa: E731
        else:
            jitted = jax.jit(policy, static_argnums=3)
            key = jax.random.PRNGKey(0)
            act = lambda o: np.asarray(jitted(params, o, key, False)[0])  # noqa: E731
        return self._evaluator.run(act, self.obs_norm)

    # ------------------------------------------------------------------ the loop
    def train(self, until: int | None = None, final_eval: bool = True) -> dict[str, Any]:
        """Train until env step ``until`` (default: ``train.steps``), then evaluate (unless
        ``final_eval`` is False or that step was just evaluated). Returns a summary with
        ``status`` 'completed' or 'interrupted' and the ``signal`` that stopped it."""
        tc = self.train_cfg
        if self._dir_lock is not None:
            self._dir_lock.check()
        total = until if until is not None else tc.steps
        if total > tc.steps:  # Agent.learn past the planned budget: config.yaml says so
            tc.steps = total
            if self.run_dir is not None:
                self._write_config()
        status = "completed"
        logger = RunLogger(self.run_dir, self.learner.metric_columns(), total, self.step,
                           tc.quiet, f"{self.run.algo} {tc.env} s{tc.seed}")
        self._stop_signal: int | None = None
        old_handlers = self._install_signals()
        try:
            if self.step < total:
                self._loop(total, logger)
            if self._stop_signal is not None:
                status = "interrupted"
            elif final_eval and self._last_eval()[0] != self.step:
                self._do_eval(logger)
            if (self.run_dir is not None and (status == "interrupted" or self.step >= total)
                    and self._last_ckpt_step != self.step):
                self.save_checkpoint("latest")
            logger.close()
        except BaseException:
            try:
                logger.close()
            except OffpolicyError:  # e.g. a full disk: the original error is the one to show
                pass
            self._cleanup_failed()
            raise
        finally:
            self._restore_signals(old_handlers)
        if self.run_dir is not None and status == "completed" and self._last_eval()[0] >= 0:
            plot_run(self.run_dir)  # a run without any evaluation has no curve to draw
        return {"status": status, "signal": self._stop_signal, "step": self.step,
                "final_return": self._last_eval()[1], "best_return": self.best_return,
                "run_dir": str(self.run_dir)}

    def _last_eval(self) -> tuple[int, float]:
        """(step, return_mean) of the newest evaluation, from memory or eval.csv."""
        if self.eval_history:
            return self.eval_history[-1]["step"], self.eval_history[-1]["return_mean"]
        if self.run_dir is not None:
            return last_eval(self.run_dir / "eval.csv")
        return -1, math.nan

    def _do_eval(self, logger: RunLogger) -> None:
        returns = self.evaluate()
        row = eval_row(self.step, returns, self.elapsed)
        self.eval_history.append(row)
        logger.log_eval(row)
        if row["return_mean"] > self.best_return:
            self.best_return = row["return_mean"]
            self.save_checkpoint("best")

    def _can_learn(self, step: int) -> bool:
        """Updates start once warm-up is over and replay holds a batch."""
        return step > self.train_cfg.warmup_steps and self.learner.ready()

    def _updates_due(self, env_steps: int) -> int:
        """How many updates this iteration owes (the credit keeps fractional rates exact)."""
        self._update_credit += env_steps * self.train_cfg.updates_per_step
        n = int(self._update_credit)
        self._update_credit -= n
        return n

    def _loop(self, total: int, logger: RunLogger) -> None:
        tc = self.train_cfg
        collector, learner, k = self.collector, self.learner, tc.num_envs
        segment = tc.segment_length
        on_policy_segments = (segment > 0 and learner.data.kind == "sequences"
                              and getattr(self.agent, "learns_on_segments", True))
        # uniform warm-up actions carry no behaviour density: stochastic policies (no host
        # noise) warm up by sampling from their initial policy, which replay records
        uniform_warmup = self.agent.exploration_noise is not None
        if self.step >= tc.eval_every and \
                self._last_eval()[0] < (self.step // tc.eval_every) * tc.eval_every:
            self._do_eval(logger)  # due when the run stopped, not yet done
        if not collector.started:  # a new run or a restored one: start fresh episodes
            collector.begin(self.step)
        step = self.step
        clock = Stopwatch(self.elapsed)
        interval_t0, interval_s0 = clock(), step
        next_log = (step // tc.log_every + 1) * tc.log_every
        next_eval = (step // tc.eval_every + 1) * tc.eval_every
        next_ckpt = (step // tc.checkpoint_every + 1) * tc.checkpoint_every
        if not self._ckpt_written and step < FIRST_CHECKPOINT:
            next_ckpt = min(next_ckpt, FIRST_CHECKPOINT)
        next_segment = (step // (segment * k) + 1) * segment * k if segment else 0
        next_progress = step + 100
        next_event = min(next_log, next_eval, next_ckpt, next_progress, total)
        last_progress_t, last_progress_step = time.perf_counter(), step
        greedy = None  # (action, info) for the current obs from the fused update
        pending = None  # pipelined: the update in flight
        params_cache = None
        try:
            while step < total:
                if step < tc.warmup_steps and uniform_warmup:
                    action, info = collector.random_actions()
                elif greedy is not None:
                    action, info = collector.explore(greedy[0]), greedy[1]
                else:
                    if params_cache is None:
                        params_cache = self.policy.host_params(learner.acting_params())
                    action, info = self.policy.act(params_cache, collector.obs_n, True)
                    action = collector.explore(action)
                greedy = None
                if tc.pipeline:  # dispatch before the env step: they overlap (no segments)
                    n_updates = self._updates_due(k) if self._can_learn(step + k) else 0
                    if n_updates:
                        learner.finish(pending)
                        pending = None
                        for _ in range(n_updates - 1):
                            learner.update()
                        pending = learner.dispatch()
                        params_cache = None
                    collector.step(action, info, step)
                    step += k
                else:
                    collector.step(action, info, step)
                    step += k
                    if segment:
                        if step >= next_segment:
                            next_segment += segment * k
                            if self._can_learn(step):
                                if on_policy_segments:
                                    learner.update_segment(segment)
                                for _ in range(int(self.poisson.poisson(tc.replay_ratio))):
                                    learner.update()
                                params_cache = None
                    elif self._can_learn(step):
                        n_updates = self._updates_due(k)
                        if n_updates:
                            for _ in range(n_updates - 1):
                                learner.update()
                            greedy = learner.update_and_act(collector.obs_n)
                            params_cache = None
                if step < next_event and self._stop_signal is None:
                    continue
                # ---- periodic work (never more than once per 100 steps) ----
                learner.finish(pending)
                pending = None
                self.step, self.elapsed = step, clock()
                # the NaN check (inside the flush) precedes every evaluation and checkpoint
                if (step >= min(next_log, next_eval, next_ckpt) or self._stop_signal is not None
                        or step >= total):
                    means = learner.flush_metrics(interval_s0, step, self._ckpt_written)
                    elapsed = clock() - interval_t0
                    logger.log_train({"step": step, "wall_time": round(clock(), 3),
                                      "steps_per_s": (step - interval_s0) / max(elapsed, 1e-9),
                                      "episodes": collector.episodes,
                                      "episode_return": collector.mean_finished(), **means})
                    interval_t0, interval_s0 = clock(), step
                    next_log = (step // tc.log_every + 1) * tc.log_every
                if self._stop_signal is not None:
                    return
                if step >= next_eval:
                    self._do_eval(logger)
                    next_eval = (step // tc.eval_every + 1) * tc.eval_every
                if step >= next_ckpt:
                    self.save_checkpoint("latest")
                    next_ckpt = (step // tc.checkpoint_every + 1) * tc.checkpoint_every
                now = time.perf_counter()
                if now - last_progress_t > 0.5 or step >= total:
                    rate = (step - last_progress_step) / max(now - last_progress_t, 1e-9)
                    logger.progress(step, rate)  # steps/s since the previous refresh
                    last_progress_t, last_progress_step = now, step
                next_progress = step + 100
                next_event = min(next_log, next_eval, next_ckpt, next_progress, total)
        finally:  # the Run always holds a live state, never a donated one
            learner.finish(pending)
            self.step, self.elapsed = step, clock()

    def _cleanup_failed(self) -> None:
        """A run that failed before its first checkpoint leaves no files behind (a directory
        the user created empty stays, empty)."""
        if self.run_dir is not None and self._owns_dir and not self._ckpt_written:
            if self._dir_lock is not None:
                self._dir_lock.release()
            if not self.run_dir.exists():
                return
            for child in self.run_dir.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
            if self._created_dir:
                self.run_dir.rmdir()

    def close(self) -> None:
        """Close the envs and release the run directory."""
        if self._collector is not None:
            self._collector.close()
        if self._evaluator is not None:
            self._evaluator.close()
        if self._dir_lock is not None:
            self._dir_lock.release()

    # ------------------------------------------------------------------ signals
    def _install_signals(self):
        def handler(signum, frame):
            if self._stop_signal is not None:  # a second Ctrl-C: stop at once
                raise KeyboardInterrupt
            self._stop_signal = signum

        old = {}
        try:
            for s in (signal.SIGINT, signal.SIGTERM):
                old[s] = signal.signal(s, handler)
        except ValueError:  # not the main thread: no signal handling
            pass
        return old

    def _restore_signals(self, old) -> None:
        for s, h in old.items():
            signal.signal(s, h)
