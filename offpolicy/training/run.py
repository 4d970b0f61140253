"""The run: the run directory, signals, resume, evaluation, logging and checkpoints.

It builds the parts (:func:`~offpolicy.training.build.build`), drives them with the loop of
its cadence (:mod:`~offpolicy.training.loops`) and does the periodic work the
:class:`~offpolicy.training.schedule.Schedule` says is due; it knows no algorithm's math.

Resuming restores parameters, optimiser states, targets, replay, counters, keys and every RNG
state from the latest checkpoint; the episodes in progress when it was written restart from a
fresh reset (their transitions so far stay in replay).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from offpolicy import registry
from offpolicy.errors import OffpolicyError
from offpolicy.plotting import last_eval
from offpolicy.training import loops, resume, wandb_log
from offpolicy.training.build import build, fits_in_memory
from offpolicy.training.callbacks import Callbacks, summary_of
from offpolicy.training.collector import Collector
from offpolicy.training.distributed import COLUMNS, RayPool
from offpolicy.training.evaluation import EVAL_SEED_OFFSET, Evaluator, greedy_actions
from offpolicy.training.logger import RunLogger, Stopwatch, eval_row
from offpolicy.training.resume import resume_in_dir
from offpolicy.training.rundir import RunDirectory
from offpolicy.training.schedule import Schedule
from offpolicy.training.signals import StopSignals


class Run:
    """One training run: the parts, evaluation, logging and checkpoints."""

    def __init__(self, run: registry.RunConfig, run_dir: str | Path | None = None,
                 resume: bool = False, with_replay: bool = True):
        self.run = run
        # everything that can fail on bad input happens before the run directory exists
        self.parts = p = build(run, with_replay)
        self.agent, self.contract, self.spec = p.agent, p.contract, p.spec
        self.obs_shape, self.obs_dtype = p.obs_shape, p.obs_dtype
        self.replay, self.learner, self.policy = p.replay, p.learner, p.policy
        self.schedule = Schedule(run.train)
        self._collector: Collector | None = None
        self._saved_collector: dict | None = None
        self._evaluator: Evaluator | None = None
        self.step, self.elapsed, self.best_return = 0, 0.0, -math.inf
        self.eval_history: list[dict] = []
        self._ckpt_written, self._last_ckpt_step = False, -1
        self.best_kept: tuple[str, ...] = ()  # the best checkpoint as of the latest one
        self.signals = StopSignals()
        self.callbacks, self.logger, self.wandb = Callbacks(), None, wandb_log.OFF
        # remote collectors (--num-collectors): who runs them, and their statistics
        self.pool_factory, self.collection = RayPool, None
        self.dir = RunDirectory(run_dir) if run_dir is not None else None
        self.run_dir = self.dir.path if self.dir is not None else None
        if resume:
            resume_in_dir(self)
        elif self.dir is not None:
            self.dir.claim_new()
            try:
                self.dir.write_config(run)
            except OffpolicyError:  # e.g. a full disk: leave no empty run directory behind
                self.dir.cleanup_failed(checkpointed=False)
                raise

    # ------------------------------------------------------------------ parts
    @property
    def train_cfg(self):
        return self.run.train

    @property
    def collector(self) -> Collector:
        """The training envs, built on first use (evaluating a loaded agent needs none)."""
        if self._collector is None:
            self._collector = self.parts.collector()
            if self._saved_collector is not None:
                self._collector.load_state_dict(self._saved_collector)
        return self._collector

    @property
    def episode_source(self):
        """Where train.csv's episode columns come from: the collector, or the remote ones'
        statistics."""
        return self.collection if self.train_cfg.num_collectors else self.collector

    @property
    def state(self) -> Any:
        return self.learner.state

    @property
    def obs_norm(self):
        return self.learner.obs_norm

    @property
    def reward_scale(self):
        return self.learner.reward_scale

    @property
    def compile_count(self) -> int:
        return self.learner.compile_count

    @property
    def episodes(self) -> int:
        if self.collection is not None:
            return self.collection.episodes
        if self._collector is not None:
            return self._collector.episodes
        return int((self._saved_collector or {}).get("episodes", 0))

    def collector_state(self) -> dict:
        """The collector's state for a checkpoint (the restored one, if it was never built;
        remote collectors restart afresh: their episode count only)."""
        if self.collection is not None:
            return self.collection.state_dict()
        if self._collector is not None:
            return self._collector.state_dict()
        return self._saved_collector or {}

    def load_collector_state(self, d: dict | None) -> None:
        """Restore the collector's state (now, or when it is built) and its acting state."""
        self._saved_collector = d
        if self._collector is not None:
            self._collector.set_acting(self.learner.acting_state())
            if d is not None:
                self._collector.load_state_dict(d)

    def checkpointed(self, latest_step: int | None) -> None:
        """A checkpoint was written (or restored from); the latest one holds ``latest_step``
        (None: a ``best`` one)."""
        self._ckpt_written = True
        if latest_step is not None:
            self._last_ckpt_step = latest_step

    @property
    def stopping(self) -> bool:
        """A signal or a callback asked the run to stop (at its next periodic check)."""
        return self.signals.received is not None or self.callbacks.stop

    def act(self, obs: np.ndarray, explore: bool = False
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Agent-space actions for normalised observations [B, ...] with the current
        parameters (greedy unless ``explore``)."""
        params = self.policy.host_params(self.learner.acting_params())
        return self.policy.act(params, obs, explore)

    def evaluate(self, episodes: int | None = None, policy=None) -> np.ndarray:
        """Returns of ``episodes`` (default ``eval_episodes``) deterministic episodes;
        ``policy`` replaces the agent's (e.g. one actor of an ensemble)."""
        tc = self.train_cfg
        n = tc.eval_episodes if episodes is None else episodes
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise OffpolicyError(f"episodes must be a positive integer, got {n!r}")
        if self._evaluator is None or self._evaluator.episodes != n:
            self._evaluator = Evaluator(tc.env, int(n), tc.seed + EVAL_SEED_OFFSET, self.spec,
                                        self.contract.core, tc.observe_action_reward)
        params = self.policy.host_params(self.learner.acting_params())
        return self._evaluator.run(greedy_actions(self.policy, params, policy), self.obs_norm)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_meta(self) -> dict:
        """Everything but the agent state that a checkpoint holds (meta.json)."""
        return resume.meta_of(self)

    def save_checkpoint(self, kind: str = "latest") -> Path | None:
        """Write the ``latest`` or ``best`` checkpoint (:func:`resume.save`)."""
        return resume.save(self, kind) if self.dir is not None else None

    def restore(self, ckpt: Path, with_replay: bool = True) -> None:
        """Restore everything a checkpoint holds (:func:`resume.restore`)."""
        resume.restore(self, ckpt, with_replay)

    # ------------------------------------------------------------------ training
    def train(self, until: int | None = None, final_eval: bool = True,
              callbacks: Callbacks | None = None) -> dict[str, Any]:
        """Train to env step ``until`` (default: ``train.steps``) with ``learn``'s ``callbacks``,
        then evaluate unless ``final_eval`` is False or it just did; :func:`summary_of`."""
        tc = self.train_cfg
        if self.dir is not None:
            self.dir.check()
        total = until if until is not None else tc.steps
        if total > tc.steps:  # Agent.learn past the planned budget: config.yaml says so
            tc.steps = total
            if self.dir is not None:
                self.dir.write_config(self.run)
        self.callbacks = callbacks or Callbacks()
        self.wandb = wandb_log.open_for(self) if tc.wandb_project else wandb_log.OFF
        columns = self.learner.metric_columns() + (COLUMNS if tc.num_collectors else [])
        self.logger = RunLogger(self.run_dir, columns, total, self.step, tc.quiet,
                                f"{self.run.algo} {tc.env} s{tc.seed}", wandb=self.wandb)
        with self.signals:
            status = self._train(total, final_eval)
        if self.run_dir is not None and status != "interrupted" and self.last_eval()[0] >= 0:
            self.dir.plot_curve()  # a run without any evaluation has no curve to draw
        self.wandb.trained(self.step, status, self.best_return)
        return summary_of(self, status)

    def _train(self, total: int, final_eval: bool) -> str:
        status = "completed"
        try:
            with fits_in_memory(self.run):  # the first update is where activations show
                if self.step < total:
                    self._loop(total)
                if self.stopping:
                    status = "interrupted" if self.signals.received is not None else "stopped"
                elif final_eval and self.last_eval()[0] != self.step:
                    self._do_eval()
            if (self.dir is not None and (status != "completed" or self.step >= total)
                    and self._last_ckpt_step != self.step):
                self.save_checkpoint("latest")
            self.logger.close()
        except BaseException:
            try:
                self.logger.close()
            except OffpolicyError:  # e.g. a full disk: the original error is the one to show
                pass
            if self.dir is not None:
                self.dir.cleanup_failed(self._ckpt_written)
            raise
        return status

    def _loop(self, total: int) -> None:
        tc = self.train_cfg
        if self.step >= tc.eval_every and \
                self.last_eval()[0] < (self.step // tc.eval_every) * tc.eval_every:
            self._do_eval()  # due when the run stopped, not yet done
        if not tc.num_collectors and not self.collector.started:
            self.collector.begin(self.step)  # a new or restored run: start fresh episodes
        self.schedule.begin(self.step, total, self._ckpt_written, self.callbacks.every)
        self._clock = Stopwatch(self.elapsed)
        self.logger.start(self._clock, self.step)
        self._logged_updates = self.learner.updates
        try:
            loops.choose(tc)(self, total)
        finally:
            self.elapsed = self._clock()

    def can_learn(self, step: int) -> bool:
        """Updates start once warm-up is over and replay holds a batch (with
        ``--no-wait-for-batch``: any transition)."""
        return step > self.train_cfg.warmup_steps and self.learner.ready(
            self.train_cfg.wait_for_batch)

    def periodic(self, step: int) -> bool:
        """The work due at ``step`` (at most once per 100 steps): the train.csv row (whose NaN
        check precedes every evaluation and checkpoint), the evaluation, the checkpoint, the
        callbacks, the progress bar. True when a signal or a callback asked the run to stop."""
        self.step, self.elapsed = step, self._clock()
        schedule = self.schedule
        if schedule.log_due(step) or self.stopping:
            means = self.learner.flush_metrics(self.logger.interval_step, step,
                                               self._ckpt_written)
            seconds = self.logger.interval_seconds()
            values = self.episode_source.log_values(seconds) | {
                "updates_per_s": (self.learner.updates - self._logged_updates) / max(seconds,
                                                                                     1e-9)}
            self._logged_updates = self.learner.updates
            self.logger.log_interval(step, values | means)
            schedule.logged(step)
        if self.stopping:
            return True
        if evaluated := schedule.eval_due(step):
            self._do_eval()
        if schedule.checkpoint_due(step):
            self.save_checkpoint("latest")
        self.callbacks.call(self, schedule.callback_due(step), evaluated)
        self.logger.tick(step, final=step >= schedule.total)
        schedule.progressed(step)
        return self.callbacks.stop

    def last_eval(self) -> tuple[int, float]:
        """(step, return_mean) of the newest evaluation, from memory or eval.csv."""
        if self.eval_history:
            return self.eval_history[-1]["step"], self.eval_history[-1]["return_mean"]
        if self.run_dir is not None:
            return last_eval(self.run_dir / "eval.csv")
        return -1, math.nan

    def _do_eval(self) -> None:
        row = eval_row(self.step, self.evaluate(), self.elapsed)
        self.eval_history.append(row)
        self.logger.log_eval(row)
        if row["return_mean"] > self.best_return:
            self.best_return = row["return_mean"]
            self.save_checkpoint("best")

    def close(self) -> None:
        """Close the envs, finish the W&B run and release the run directory."""
        self.wandb.finish()
        if self._collector is not None:
            self._collector.close()
        if self._evaluator is not None:
            self._evaluator.close()
        if self.dir is not None:
            self.dir.release()
