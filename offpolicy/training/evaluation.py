"""The ACE paper's evaluation protocol: deterministic episodes, no exploration noise, on
environments separate from the training one.

All evaluation episodes run side by side (one batched policy call per step for all of them),
and episode i always starts from ``reset(seed=eval_seed + i)``, so two evaluations of the same
policy give identical returns and the same seed gives an identical eval.csv.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from offpolicy.agents.acting import HostMemory, HostPolicy
from offpolicy.agents.base import CoreSpec
from offpolicy.envs.make import make_env, observation_dtype
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import NonFiniteError, env_error

MAX_PARALLEL = 20
EVAL_SEED_OFFSET = 10_000  # evaluation env i starts from reset(seed=run seed + this + i)


def greedy_actions(policy: HostPolicy, params: Any, replacement: Callable | None = None
                   ) -> Callable[[Any], tuple[np.ndarray, dict]]:
    """obs [n, ...] (or a recurrent core's context) -> the deterministic actions of
    ``policy`` with ``params`` and their info, or of ``replacement`` (a policy of the same
    signature: one actor of an ensemble)."""
    if replacement is None:
        return lambda obs: policy.act(params, obs, False)
    jitted = jax.jit(replacement, static_argnums=3)
    key = jax.random.PRNGKey(0)
    return lambda obs: jax.device_get(jitted(params, obs, key, False))


class Evaluator:
    def __init__(self, env_id: str, episodes: int, eval_seed: int, spec: ActionSpec,
                 core: CoreSpec | None = None, observe_action_reward: bool = False):
        """``core``: the agent's recurrent core; its memory of each evaluation episode is kept
        as in training (:class:`~offpolicy.agents.acting.HostMemory`);
        ``observe_action_reward``: as in training (``--observe-action-reward``)."""
        self.env_id = env_id
        self.core = core
        self._memory: HostMemory | None = None
        self.episodes = episodes
        self.eval_seed = eval_seed
        self.spec = spec
        self.envs = [make_env(env_id, eval_seed + i, observe_action_reward)
                     for i in range(min(episodes, MAX_PARALLEL))]
        self.obs_dtype = observation_dtype(self.envs[0])  # as in training: uint8 frames stay

    def run(self, act_batch: Callable[[Any], tuple[np.ndarray, dict]],
            normalize: Callable[[np.ndarray], np.ndarray] = lambda x: x) -> np.ndarray:
        """Return the undiscounted return of each of ``episodes`` deterministic episodes.

        ``act_batch`` maps observations [n, ...] (a recurrent core's context, with ``core``)
        to agent actions [n, m] and their info; it always receives a full batch of n =
        len(self.envs) rows (finished slots repeat their last observation), so the jitted
        policy compiles once.
        """
        n = len(self.envs)
        self._memory = HostMemory(self.core, n) if self.core is not None else None
        returns = np.zeros(self.episodes)
        next_episode = 0
        episode_of = [-1] * n
        obs = [None] * n
        for j in range(n):
            next_episode = self._start(j, next_episode, episode_of, obs)
        while any(e >= 0 for e in episode_of):
            inputs = normalize(np.stack(obs).astype(self.obs_dtype))
            if self._memory is not None:
                inputs = self._memory.observe(inputs)
            actions, info = act_batch(inputs)
            if self._memory is not None:
                self._memory.advance(info)
            for j, env in enumerate(self.envs):
                e = episode_of[j]
                if e < 0:
                    continue
                try:
                    o, r, term, trunc, _ = env.step(self.spec.to_env(actions[j]))
                except Exception as exc:
                    raise env_error(self.env_id, exc, f"in evaluation episode {e}") from exc
                if not np.isfinite(r) or not np.all(np.isfinite(o)):
                    raise NonFiniteError(f"non-finite observation or reward in evaluation "
                                         f"episode {e}")
                returns[e] += r
                obs[j] = o
                if term or trunc:
                    next_episode = self._start(j, next_episode, episode_of, obs)
        return returns

    def _start(self, j: int, next_episode: int, episode_of: list, obs: list) -> int:
        if next_episode >= self.episodes:
            episode_of[j] = -1
            return next_episode
        if self._memory is not None:
            self._memory.reset(j)
        try:
            obs[j], _ = self.envs[j].reset(seed=self.eval_seed + next_episode)
        except Exception as exc:
            raise env_error(self.env_id, exc,
                            f"in reset() of evaluation episode {next_episode}") from exc
        episode_of[j] = next_episode
        return next_episode + 1

    def close(self) -> None:
        for env in self.envs:
            env.close()


def trace_episode(run, inspect: Callable) -> dict:
    """One greedy episode (evaluation seed) of ``run`` with ``inspect(params, obs[1, ...],
    key) -> dict`` called at every step; returns each of its outputs stacked over the steps
    (lists of arrays stacked element-wise) plus ``reward`` [S]. The action taken is
    ``inspect``'s ``action``."""
    import jax

    tc = run.train_cfg
    seed = tc.seed + EVAL_SEED_OFFSET
    env = make_env(tc.env, seed, tc.observe_action_reward)
    dtype = observation_dtype(env)
    fn = jax.jit(inspect)
    params = run.policy.host_params(run.learner.acting_params())
    key = jax.random.PRNGKey(tc.seed)
    obs, _ = env.reset(seed=seed)
    records, rewards = [], []
    done = False
    while not done:
        key, sub = jax.random.split(key)
        batch = run.obs_norm(np.asarray(obs)[None].astype(dtype))
        out = jax.device_get(fn(params, batch, sub))
        obs, r, term, trunc, _ = env.step(run.spec.to_env(np.asarray(out["action"])[0]))
        records.append(out)
        rewards.append(float(r))
        done = term or trunc
    env.close()
    trace = {}
    for k, v in records[0].items():
        if isinstance(v, list):
            trace[k] = [np.stack([np.asarray(r[k][i])[0] for r in records])
                        for i in range(len(v))]
        else:
            trace[k] = np.stack([np.asarray(r[k])[0] for r in records])
    trace["reward"] = np.asarray(rewards)
    return trace
