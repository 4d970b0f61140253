"""K copies of one environment stepped side by side, with same-step auto-reset.

``EnvCopies.step`` takes K agent-space actions and returns, for every copy, the observation
the transition ends in (``next_obs``, the true final observation when an episode ended) and
the observation to act on next (the reset observation there), as float32, or uint8 for frames
(``observation_dtype``). Synchronous copies run in this
process as a plain list (a few microseconds per step; Gymnasium's SyncVectorEnv adds ~40 us
per step of info merging we do not need); ``asynchronous=True`` runs them in subprocesses with
Gymnasium's ``AsyncVectorEnv`` (same-step auto-reset), worth it when one env step costs more
than the inter-process round trip. Its workers start from a fork server (or spawn), never by
forking this process: JAX's threads are running here, and a fork of a multi-threaded process
can deadlock (JAX warns about it).
"""

from __future__ import annotations

import functools

import numpy as np

from offpolicy.envs.make import make_env, observation_dtype
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError


def _make_copy(env_id: str, seed: int, spec) -> object:
    """One env copy in an async worker, registering ``spec`` there first if the worker does
    not know ``env_id`` (an env registered at run time in the parent)."""
    import gymnasium as gym

    try:
        return make_env(env_id, seed)
    except OffpolicyError:
        if spec is None or env_id in gym.registry:
            raise
        gym.registry[env_id] = spec
        return make_env(env_id, seed)


def _start_method() -> str:
    """A start method that does not fork the (multi-threaded) training process."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


class EnvCopies:
    def __init__(self, env_id: str, num_envs: int, seed: int, spec: ActionSpec,
                 asynchronous: bool = False):
        self.env_id, self.num_envs, self.spec = env_id, int(num_envs), spec
        self.asynchronous = asynchronous
        if asynchronous:
            import gymnasium as gym
            from gymnasium.vector import AsyncVectorEnv, AutoresetMode

            probe = make_env(env_id, seed)  # bad ids fail here, with the one-line error
            self.obs_dtype = observation_dtype(probe)
            probe.close()
            # an id the user registered in this process is unknown to a fresh worker: its spec
            # travels with the factory (Gymnasium pickles factories with cloudpickle)
            spec = gym.registry.get(env_id)
            fns = [functools.partial(_make_copy, env_id, seed + i, spec)
                   for i in range(self.num_envs)]
            self._vec = AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP,
                                       context=_start_method())
            self._space = self._vec.single_action_space
            self._actions = gym.vector.utils.create_empty_array(self._space, self.num_envs)
            self.envs = []
        else:
            self.envs = [make_env(env_id, seed + i) for i in range(self.num_envs)]
            self.obs_dtype = observation_dtype(self.envs[0])

    def reset(self, seed: int) -> np.ndarray:
        """Reset every copy (copy i with ``seed + i``); observations [K, ...]."""
        if self.asynchronous:
            obs, _ = self._vec.reset(seed=[seed + i for i in range(self.num_envs)])
            return np.asarray(obs, self.obs_dtype)
        return np.stack([np.asarray(e.reset(seed=seed + i)[0], self.obs_dtype)
                         for i, e in enumerate(self.envs)])

    def step(self, actions: np.ndarray):
        """Agent-space actions [K, m] -> (next_obs, obs, reward, terminated, truncated), each
        with a leading K axis; ``obs`` differs from ``next_obs`` where an episode ended."""
        if self.asynchronous:
            return self._step_async(actions)
        k = self.num_envs
        next_obs = np.empty((k, *self._obs_shape()), self.obs_dtype)
        obs = next_obs.copy() if k > 1 else None
        reward = np.empty(k, np.float64)
        terminated = np.empty(k, bool)
        truncated = np.empty(k, bool)
        to_env = self.spec.to_env
        for i, env in enumerate(self.envs):
            o, r, te, tr, _ = env.step(to_env(actions[i]))
            next_obs[i], reward[i], terminated[i], truncated[i] = o, r, te, tr
            if te or tr:
                if obs is None:
                    obs = next_obs.copy()
                obs[i] = env.reset()[0]
            elif obs is not None:
                obs[i] = o
        return next_obs, (next_obs if obs is None else obs), reward, terminated, truncated

    def _obs_shape(self):
        if not hasattr(self, "_shape"):
            self._shape = self.envs[0].observation_space.shape
        return self._shape

    def _step_async(self, actions: np.ndarray):
        import gymnasium as gym

        items = [self.spec.to_env(a) for a in actions]
        batch = gym.vector.utils.concatenate(self._space, items, self._actions)
        obs, reward, terminated, truncated, info = self._vec.step(batch)
        obs = np.asarray(obs, self.obs_dtype)
        next_obs = obs.copy()
        ended = np.asarray(info.get("_final_obs", np.zeros(self.num_envs, bool)), bool)
        for i in np.flatnonzero(ended):
            next_obs[i] = info["final_obs"][i]
        return (next_obs, obs, np.asarray(reward, np.float64), np.asarray(terminated, bool),
                np.asarray(truncated, bool))

    def close(self) -> None:
        try:
            if self.asynchronous:
                self._vec.close()
            for e in self.envs:
                e.close()
        except Exception as e:  # closing must never mask the run's own outcome: warn only
            import warnings

            warnings.warn(f"could not close {self.env_id}: {e}", stacklevel=2)
