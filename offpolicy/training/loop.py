"""The training loop: collect, update, evaluate, log, checkpoint. It knows no algorithm's math.

Per env step: act on the host (jitted policy + NumPy noise), step the env, write the transition
into replay, and (after warm-up) run ``updates_per_step`` jitted updates. Nothing in the step
waits on the device except the policy call, which needs the freshly updated parameters anyway.
Metrics are summed on device inside the jitted step and fetched once per ``log_every`` steps;
that fetch is also where NaN/inf losses are caught, before any checkpoint is written.

Time limits: ``truncated`` episodes bootstrap from the next observation, ``terminated`` ones do
not (replay's ``discount`` is 0 only for termination).

Resuming restores parameters, optimiser states, targets, replay, counters and every RNG state
from the latest checkpoint; the episode that was in progress when it was written restarts
from a fresh reset (its transitions so far stay in replay).
"""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from offpolicy import registry
from offpolicy.envs.make import action_spec, make_env, observation_shape
from offpolicy.envs.platform import configure_jax
from offpolicy.envs.wrappers import ObsNormalizer, RewardScaler
from offpolicy.errors import NonFiniteError, OffpolicyError
from offpolicy.replay.storage import ReplayBuffer
from offpolicy.training import checkpoint
from offpolicy.training.evaluation import Evaluator
from offpolicy.training.logger import RunLogger, Stopwatch, eval_row


class Trainer:
    """Owns one run: env, agent, replay, actor, logger and checkpoints."""

    def __init__(self, run: registry.RunConfig, run_dir: str | Path | None = None,
                 resume: bool = False):
        configure_jax()
        self.run = run
        tc = run.train
        self.run_dir = Path(run_dir) if run_dir is not None else None
        # Everything that can fail on bad input happens before the run directory exists.
        self.env = make_env(tc.env, tc.seed)
        self.spec = action_spec(self.env)
        self.obs_shape = observation_shape(self.env)
        self.agent = registry.build_agent(run, self.obs_shape, self.spec)
        # distinct buffers for every leaf (targets start as copies), as donation requires
        self.state = jax.tree_util.tree_map(jnp.array,
                                            self.agent.init(jax.random.PRNGKey(tc.seed)))
        self.actor = self.agent.make_actor(tc.seed + 1)
        self.replay = ReplayBuffer(tc.buffer_size, self.obs_shape, self.spec.flat_dim,
                                   getattr(self.agent, "replay_extras", {}), seed=tc.seed + 2)
        self.rng = np.random.Generator(np.random.PCG64(tc.seed + 3))  # warm-up actions
        self.obs_norm = ObsNormalizer(self.obs_shape, tc.normalize_obs)
        gamma = getattr(run.agent, "gamma", 0.99)
        self.reward_scale = RewardScaler(gamma, tc.normalize_reward)
        self.step = 0
        self.episodes = 0
        self.resets = 0
        self.best_return = -math.inf
        self.elapsed = 0.0
        self.eval_history: list[dict] = []
        self._update_credit = 0.0
        self._traces = {"train_step": 0, "train_act_step": 0}
        self._metric_names: list[str] | None = None
        self._ckpt_written = False
        self._owns_dir = False  # this run created the directory (or found it empty)
        self._created_dir = False
        self._obs: np.ndarray | None = None  # the episode in progress between train() calls
        self._ep_return = 0.0
        self._last_ckpt_step = -1
        self._train_step = self._build_train_step()
        if resume:
            if self.run_dir is None:
                raise OffpolicyError("--resume needs a run directory")
            self.restore(checkpoint.locate(self.run_dir, "latest"))
            self._write_config()  # --steps etc. may have changed
        elif self.run_dir is not None:
            try:
                self._created_dir = not self.run_dir.exists()
                if not self._created_dir and any(self.run_dir.iterdir()):
                    raise OffpolicyError(
                        f"run directory {self.run_dir} already exists and is not empty; "
                        "pass --resume to continue it or choose another --run-dir")
                self.run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise OffpolicyError(f"cannot use run directory {self.run_dir}: {e}") from e
            self._owns_dir = True
            self._write_config()
        self._evaluator: Evaluator | None = None

    def _write_config(self) -> None:
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self.run.to_dict(),
                                                                 sort_keys=False))

    # ------------------------------------------------------------------ jitted step
    def _build_train_step(self):
        agent = self.agent

        def update(state, acc, batch):
            state, metrics = agent.update(state, batch)
            acc = {k: acc[k] + metrics[k] for k in metrics} | {"count": acc["count"] + 1}
            return state, acc

        def train_step(state, acc, batch):
            self._traces["train_step"] += 1  # runs only while tracing: counts compilations
            return update(state, acc, batch)

        def train_act_step(state, acc, batch, obs):
            """The update, then the greedy action for the next observation with the new
            parameters: one dispatch and one host sync per env step instead of two."""
            self._traces["train_act_step"] += 1
            state, acc = update(state, acc, batch)
            action, info = agent.policy(agent.acting_params(state), obs[None])
            return state, acc, action[0], {k: v[0] for k, v in info.items()}

        self._train_act_step = jax.jit(train_act_step, donate_argnums=(0, 1))
        return jax.jit(train_step, donate_argnums=(0, 1))

    def _zero_acc(self, metric_names: list[str]) -> dict:
        return {k: jnp.zeros((), jnp.float32) for k in metric_names} | {
            "count": jnp.zeros((), jnp.int32)}

    def metric_names(self) -> list[str]:
        """The update's metric names (traced once, abstractly: no compile, no FLOPs)."""
        if self._metric_names is None:
            batch = self.replay.gather(np.zeros(self.train_cfg.batch_size, np.int64))
            _, metrics = jax.eval_shape(self.agent.update, self.state, batch)
            self._metric_names = sorted(metrics)
        return self._metric_names

    @property
    def train_cfg(self):
        return self.run.train

    @property
    def compile_count(self) -> int:
        """The most times any jitted step function was traced: 1 once training has started
        means the update compiled on its first call and never again."""
        return max(self._traces.values())

    # ------------------------------------------------------------------ checkpoints
    def _meta(self) -> dict:
        return {
            "algo": self.run.algo, "episodes": self.episodes, "resets": self.resets,
            "best_return": self.best_return, "elapsed": self.elapsed,
            "update_credit": self._update_credit,
            "rng": self.rng.bit_generator.state, "actor": self.actor.state_dict(),
            "obs_norm": self.obs_norm.rms.state_dict(),
            "reward_scale": self.reward_scale.rms.state_dict(),
            "reward_ret": self.reward_scale.ret,
            "env_seed": self.run.train.seed, "jax_version": jax.__version__,
            "config": self.run.to_dict(),
        }

    def save_checkpoint(self, kind: str = "latest") -> Path | None:
        if self.run_dir is None:
            return None
        replay = self.replay if (kind == "latest" and self.train_cfg.save_replay) else None
        path = checkpoint.save(self.run_dir / "checkpoints", kind, self.step, self.state,
                               self._meta(), replay)
        self._ckpt_written = True
        if kind == "latest":
            self._last_ckpt_step = self.step
        return path

    def restore(self, ckpt: Path) -> None:
        """Restore everything a checkpoint holds: parameters, optimiser states, targets,
        counters, RNG states, noise, normaliser statistics and (if saved) the replay."""
        state, meta = checkpoint.load(ckpt, self.state)
        if meta.get("algo") != self.run.algo:
            raise OffpolicyError(f"checkpoint {ckpt} is for {meta.get('algo')}, "
                                 f"not {self.run.algo}")
        if meta.get("has_replay"):
            self.replay.load(ckpt / "replay.npz")
        elif self.run_dir is not None:
            import sys

            print(f"offpolicy: warning: checkpoint {ckpt} has no replay (save_replay was off); "
                  "training continues with an empty replay buffer", file=sys.stderr)
        self.replay.close_episode()
        self.state = state
        self.step = int(meta["step"])
        self.episodes = int(meta["episodes"])
        self.resets = int(meta["resets"])
        self.best_return = float(meta["best_return"])
        self.elapsed = float(meta["elapsed"])
        self._update_credit = float(meta["update_credit"])
        self.rng.bit_generator.state = meta["rng"]
        self.actor.load_state_dict(meta["actor"])
        self.obs_norm.rms.load_state_dict(meta["obs_norm"])
        self.reward_scale.rms.load_state_dict(meta["reward_scale"])
        self.reward_scale.ret = float(meta["reward_ret"])
        self._ckpt_written = True
        self._last_ckpt_step = self.step
        if self.run_dir is not None:  # a best save may have followed the latest one
            try:
                best_meta = checkpoint.load_meta(checkpoint.locate(self.run_dir, "best"))
                self.best_return = max(self.best_return, float(best_meta["best_return"]))
            except (OffpolicyError, KeyError, ValueError):
                pass

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, episodes: int | None = None, policy=None) -> np.ndarray:
        tc = self.train_cfg
        n = episodes or tc.eval_episodes
        if self._evaluator is None or self._evaluator.episodes != n:
            self._evaluator = Evaluator(tc.env, n, tc.seed + 10_000, self.spec)
        params = self.actor.host_params(self.agent.acting_params(self.state))
        if policy is None:
            act = lambda o: self.actor.act_batch(params, o)  # noqa: E731
        else:
            act = lambda o: np.asarray(policy(params, o)[0])  # noqa: E731
        return self._evaluator.run(act, self.obs_norm)

    # ------------------------------------------------------------------ the loop
    def train(self, until: int | None = None, final_eval: bool = True) -> dict[str, Any]:
        """Train until env step ``until`` (default: ``train.steps``), then evaluate (unless
        ``final_eval`` is False or that step was just evaluated). Returns a summary."""
        tc = self.train_cfg
        total = until if until is not None else tc.steps
        status = "completed"
        metric_names = self.metric_names()
        logger = RunLogger(self.run_dir, metric_names, total, self.step, tc.quiet,
                           f"{self.run.algo} {tc.env} s{tc.seed}")
        self._stop_signal: int | None = None
        old_handlers = self._install_signals()
        try:
            if self.step < total:
                self._loop(total, logger, metric_names)
            if self._stop_signal is not None:
                status = "interrupted"
            elif final_eval and self._last_eval_step() != self.step:
                self._do_eval(logger)
        except BaseException:
            logger.close()
            self._cleanup_failed()
            raise
        finally:
            self._restore_signals(old_handlers)
        if (self.run_dir is not None and (status == "interrupted" or self.step >= total)
                and self._last_ckpt_step != self.step):
            self.save_checkpoint("latest")
        logger.close()
        if self.run_dir is not None and status == "completed":
            from offpolicy.plotting import plot_run

            plot_run(self.run_dir)
        final = self.final_return()
        return {"status": status, "step": self.step, "final_return": final,
                "best_return": self.best_return, "run_dir": str(self.run_dir)}

    def _last_eval(self) -> tuple[int, float]:
        """(step, return_mean) of the newest evaluation, from memory or eval.csv."""
        if self.eval_history:
            return self.eval_history[-1]["step"], self.eval_history[-1]["return_mean"]
        if self.run_dir is not None and (self.run_dir / "eval.csv").exists():
            rows = (self.run_dir / "eval.csv").read_text().strip().splitlines()[1:]
            if rows:
                step, ret = rows[-1].split(",")[:2]
                return int(step), float(ret)
        return -1, float("nan")

    def _last_eval_step(self) -> int:
        return self._last_eval()[0]

    def final_return(self) -> float:
        return self._last_eval()[1]

    def _do_eval(self, logger: RunLogger) -> None:
        returns = self.evaluate()
        row = eval_row(self.step, returns, self.elapsed)
        self.eval_history.append(row)
        logger.log_eval(row)
        if row["return_mean"] > self.best_return:
            self.best_return = row["return_mean"]
            self.save_checkpoint("best")

    def _loop(self, total: int, logger: RunLogger, metric_names: list[str]) -> None:
        tc = self.train_cfg
        agent, actor, replay, env, spec = self.agent, self.actor, self.replay, self.env, self.spec
        obs_norm, reward_scale = self.obs_norm, self.reward_scale
        normalizing = tc.normalize_obs or tc.normalize_reward
        # behaviour info of random warm-up actions: -1 for integer fields (no actor chose it)
        default_info = {k: np.full(s, -1 if d.kind in "iu" else 0, d)
                        for k, (s, d) in replay.extra_specs.items()}
        acc = self._zero_acc(metric_names)
        train_step, train_act_step = self._train_step, self._train_act_step
        batch_size = tc.batch_size
        per_step = tc.updates_per_step
        learn_from = max(tc.warmup_steps, 0)
        state = self.state
        if self.step > 0 and self.step % tc.eval_every == 0 and \
                self._last_eval_step() < self.step:
            self._do_eval(logger)  # due when the run stopped, not yet done

        if self._obs is None:  # a new run or a restored one: start a fresh episode
            obs, _ = env.reset(seed=tc.seed + 1_000_003 * self.resets)
            self.resets += 1
            replay.start_episode(obs)
            actor.reset()
            self._ep_return = 0.0
        else:  # the Python API's next learn(): continue the episode in progress
            obs = self._obs
        obs_n = obs_norm(obs)
        ep_return, ep_returns = self._ep_return, []
        step = self.step
        clock = Stopwatch(self.elapsed)
        interval_t0, interval_s0 = clock(), step
        next_log = (step // tc.log_every + 1) * tc.log_every
        next_eval = (step // tc.eval_every + 1) * tc.eval_every
        next_ckpt = (step // tc.checkpoint_every + 1) * tc.checkpoint_every
        next_progress = step + 100
        next_event = min(next_log, next_eval, next_ckpt, next_progress, total)
        last_progress_t, last_progress_step = time.perf_counter(), step
        greedy = None  # (action, info) for obs from the fused update, when one ran
        try:
            while step < total:
                if step < tc.warmup_steps:
                    action, info = spec.sample(self.rng), default_info
                elif greedy is not None:
                    action, info = actor.explore(greedy[0]), greedy[1]
                else:
                    action, info = actor.act(actor.host_params(agent.acting_params(state)), obs_n,
                                             explore=True)
                if not np.isfinite(action).all():
                    raise NonFiniteError(
                        f"the policy produced a non-finite action at step {step}: its parameters "
                        "diverged (lower the learning rates or normalise observations)")
                next_obs, reward, terminated, truncated, _ = env.step(spec.to_env(action))
                if not (math.isfinite(reward) and np.isfinite(next_obs).all()):
                    raise NonFiniteError(
                        f"non-finite {'reward' if not math.isfinite(reward) else 'observation'} "
                        f"from {tc.env} at step {step}; check the environment or its wrappers")
                replay.add(action, reward, terminated, truncated, next_obs, **info)
                ep_return += reward
                if normalizing:
                    obs_norm.update(next_obs)
                    reward_scale.update(reward, terminated or truncated)
                step += 1
                if terminated or truncated:
                    self.episodes += 1
                    ep_returns.append(ep_return)
                    ep_return = 0.0
                    next_obs, _ = env.reset()
                    replay.start_episode(next_obs)
                    actor.reset()
                obs = next_obs
                obs_n = obs_norm(obs) if normalizing else obs
                greedy = None
                if step > learn_from and len(replay) >= batch_size:
                    self._update_credit += per_step
                    while self._update_credit >= 1.0:
                        self._update_credit -= 1.0
                        batch = replay.sample(batch_size)
                        if normalizing:
                            batch["obs"] = obs_norm(batch["obs"])
                            batch["next_obs"] = obs_norm(batch["next_obs"])
                            batch["reward"] = reward_scale(batch["reward"])
                        if self._update_credit >= 1.0:
                            state, acc = train_step(state, acc, batch)
                        else:  # the last update of this step also computes the next action
                            state, acc, a, i = train_act_step(state, acc, batch, obs_n)
                            greedy = (np.asarray(a), {k: np.asarray(v) for k, v in i.items()})
                if step < next_event and self._stop_signal is None:
                    continue
                # ---- periodic work (never more than once per 100 steps) ----
                self.state, self.step, self.elapsed = state, step, clock()
                # the NaN check (inside the flush) precedes every evaluation and checkpoint
                if (step >= min(next_log, next_eval, next_ckpt) or self._stop_signal is not None
                        or step == total):
                    acc = self._flush_metrics(acc, logger, ep_returns, clock, interval_t0,
                                              interval_s0)
                    interval_t0, interval_s0, ep_returns = clock(), step, []
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
                if now - last_progress_t > 0.5 or step == total:
                    rate = (step - last_progress_step) / max(now - last_progress_t, 1e-9)
                    logger.progress(step, rate)  # steps/s since the previous refresh
                    last_progress_t, last_progress_step = now, step
                next_progress = step + 100
                next_event = min(next_log, next_eval, next_ckpt, next_progress, total)
        finally:  # the Trainer always holds the live state, never a donated one
            self.state, self.step, self.elapsed = state, step, clock()
            self._obs, self._ep_return = obs, ep_return

    def _flush_metrics(self, acc, logger, ep_returns, clock, t0, s0):
        host = jax.device_get(acc)
        count = int(host.pop("count"))
        means = {k: float(v) / count for k, v in host.items()} if count else {
            k: float("nan") for k in host}
        if count and not all(math.isfinite(v) for v in means.values()):
            bad = ", ".join(k for k, v in means.items() if not math.isfinite(v))
            kept = ("its last good checkpoint is kept" if self._ckpt_written else
                    "no checkpoint had been written yet")
            raise NonFiniteError(
                f"non-finite loss ({bad}) between steps {s0} and {self.step}; the run stopped "
                f"and {kept}")
        elapsed = clock() - t0
        row = {"step": self.step, "wall_time": round(clock(), 3),
               "steps_per_s": (self.step - s0) / max(elapsed, 1e-9),
               "episodes": self.episodes,
               "episode_return": float(np.mean(ep_returns)) if ep_returns else float("nan"),
               **means}
        logger.log_train(row)
        extra = getattr(self.agent, "log_extras", None)
        if extra is not None:
            extra(self, logger)
        return self._zero_acc(list(host))

    def _cleanup_failed(self) -> None:
        """A run that failed before its first checkpoint leaves no files behind (a directory
        the user created empty stays, empty)."""
        if self.run_dir is not None and self._owns_dir and not self._ckpt_written:
            import shutil

            for child in self.run_dir.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
            if self._created_dir:
                self.run_dir.rmdir()

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
