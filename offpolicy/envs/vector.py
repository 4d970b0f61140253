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

An exception from an env's ``reset()`` or ``step()`` (in this process or in a worker) becomes
one :class:`~offpolicy.errors.EnvError` naming the env and the exception; the caller adds the
step. Workers ignore Ctrl-C (the training process stops at its next step and closes them) and
exit silently once the training process is gone (a SIGKILL), instead of printing a traceback
per worker.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys

import numpy as np

from offpolicy.envs.make import make_env, observation_dtype
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError, env_error

# The resource tracker cleans up the workers' queue semaphores after a SIGKILL of the training
# process and then warns about each "leaked" one: the cleanup is the point, the warning noise.
# Child interpreters (tracker, fork server) take their -W options from sys.warnoptions.
_QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"


class _ParentPipe:
    """A worker's end of its pipe to the training process: when that process is gone (EOF or a
    broken pipe), the worker exits at once and silently."""

    def __init__(self, conn):
        self._conn = conn

    def recv(self):
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            os._exit(0)

    def send(self, obj) -> None:
        try:
            self._conn.send(obj)
        except OSError:
            os._exit(0)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _quiet_worker(index, env_fn, pipe, *rest) -> None:
    """Gymnasium's async worker, deaf to Ctrl-C and silent when its parent dies."""
    from gymnasium.vector.async_vector_env import _async_worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _async_worker(index, env_fn, _ParentPipe(pipe), *rest)


@contextlib.contextmanager
def _gym_errors_silenced():
    """Gymnasium logs a worker's traceback (dozens of lines) before re-raising its exception
    here; the exception is what we report, in one line."""
    from gymnasium import logger

    level, logger.min_level = logger.min_level, logger.ERROR + 10
    try:
        yield
    finally:
        logger.min_level = level


def _make_copy(env_id: str, seed: int, spec, observe_action_reward: bool = False) -> object:
    """One env copy in an async worker, registering ``spec`` there first if the worker does
    not know ``env_id`` (an env registered at run time in the parent)."""
    import gymnasium as gym

    try:
        return make_env(env_id, seed, observe_action_reward)
    except OffpolicyError:
        if spec is None or env_id in gym.registry:
            raise
        gym.registry[env_id] = spec
        return make_env(env_id, seed, observe_action_reward)


def _start_method() -> str:
    """A start method that does not fork the (multi-threaded) training process."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def _where(call: str, step: int | None) -> str:
    return call if step is None else f"at step {step}"


class EnvCopies:
    def __init__(self, env_id: str, num_envs: int, seed: int, spec: ActionSpec,
                 asynchronous: bool = False, observe_action_reward: bool = False):
        self.env_id, self.num_envs, self.spec = env_id, int(num_envs), spec
        self.asynchronous = asynchronous
        if asynchronous:
            import gymnasium as gym
            from gymnasium.vector import AsyncVectorEnv, AutoresetMode

            # bad ids fail here, with the one-line error
            probe = make_env(env_id, seed, observe_action_reward)
            self.obs_dtype = observation_dtype(probe)
            probe.close()
            # an id the user registered in this process is unknown to a fresh worker: its spec
            # travels with the factory (Gymnasium pickles factories with cloudpickle)
            spec = gym.registry.get(env_id)
            fns = [functools.partial(_make_copy, env_id, seed + i, spec, observe_action_reward)
                   for i in range(self.num_envs)]
            if _QUIET_TRACKER not in sys.warnoptions:
                sys.warnoptions.append(_QUIET_TRACKER)
            try:
                with _gym_errors_silenced():
                    self._vec = AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP,
                                               context=_start_method(), worker=_quiet_worker)
            except OffpolicyError:
                raise
            except Exception as e:  # a copy that fails in its worker, after the probe passed
                raise env_error(env_id, e, "while starting its workers") from e
            self._space = self._vec.single_action_space
            self._actions = gym.vector.utils.create_empty_array(self._space, self.num_envs)
            self.envs = []
        else:
            self.envs = [make_env(env_id, seed + i, observe_action_reward)
                         for i in range(self.num_envs)]
            self.obs_dtype = observation_dtype(self.envs[0])

    def reset(self, seed: int, step: int | None = None) -> np.ndarray:
        """Reset every copy (copy i with ``seed + i``); observations [K, ...]. An exception
        from the env is raised as ``EnvError`` (naming the training ``step`` if given)."""
        try:
            if self.asynchronous:
                with _gym_errors_silenced():
                    obs, _ = self._vec.reset(seed=[seed + i for i in range(self.num_envs)])
                return np.asarray(obs, self.obs_dtype)
            return np.stack([np.asarray(e.reset(seed=seed + i)[0], self.obs_dtype)
                             for i, e in enumerate(self.envs)])
        except OffpolicyError:
            raise
        except Exception as e:
            raise env_error(self.env_id, e, _where("in reset()", step)) from e

    def step(self, actions: np.ndarray, step: int | None = None):
        """Agent-space actions [K, m] -> (next_obs, obs, reward, terminated, truncated), each
        with a leading K axis; ``obs`` differs from ``next_obs`` where an episode ended. An
        exception from the env (its ``step()``, or the ``reset()`` that starts the next
        episode) is raised as ``EnvError`` (naming the training ``step`` if given)."""
        items = [self.spec.to_env(a) for a in actions]
        try:
            if self.asynchronous:
                with _gym_errors_silenced():
                    return self._step_async(items)
            return self._step_sync(items)
        except OffpolicyError:
            raise
        except Exception as e:
            raise env_error(self.env_id, e, _where("in step()", step)) from e

    def _step_sync(self, items: list):
        k = self.num_envs
        next_obs = np.empty((k, *self._obs_shape()), self.obs_dtype)
        obs = next_obs.copy() if k > 1 else None
        reward = np.empty(k, np.float64)
        terminated = np.empty(k, bool)
        truncated = np.empty(k, bool)
        for i, env in enumerate(self.envs):
            o, r, te, tr, _ = env.step(items[i])
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

    def _step_async(self, items: list):
        import gymnasium as gym

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
                # a worker that raised is already gone (gymnasium dropped its pipe): the rest
                # close normally; terminate only if that fails
                try:
                    with _gym_errors_silenced():
                        self._vec.close()
                except (OSError, EOFError):
                    self._vec.close(terminate=True)
            for e in self.envs:
                e.close()
        except Exception as e:  # closing must never mask the run's own outcome: warn only
            import warnings

            warnings.warn(f"could not close {self.env_id}: {e}", stacklevel=2)
