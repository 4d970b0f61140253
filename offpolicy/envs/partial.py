"""Partially observed versions of standard tasks, named as the recurrent-RL literature names
them (pomdp-baselines, Ni et al. 2022, "Recurrent Model-Free RL Can Be a Strong Baseline for
Many POMDPs", Sec. 5.1): ``-P`` keeps the positions and hides the velocities, ``-V`` keeps the
velocities and hides the positions. Nothing else changes: dynamics, rewards, termination and
time limits are the full task's, so a return on ``Pendulum-P`` compares with one on
``Pendulum-v1``.

An agent without memory cannot act optimally on either: from positions alone it cannot tell
where the system is heading (a velocity is a difference of two positions), from velocities
alone it cannot tell where the system is (a position is a sum of velocities).

=====================  ======================================  ===============================
id                      -P keeps (hides the rest)               -V keeps (hides the rest)
=====================  ======================================  ===============================
Pendulum                cos theta, sin theta                    theta-dot
CartPole                cart position, pole angle               cart velocity, pole angular
                                                                velocity
HalfCheetah, Hopper,    the positions the v5 task observes      the velocities (``qvel``,
Walker2d, Swimmer,      (``qpos`` without the x coordinate;     every one)
InvertedPendulum, Ant   Swimmer and Ant: without x and y)
=====================  ======================================  ===============================

Ids: ``offpolicy/<Task>-P-v0`` and ``offpolicy/<Task>-V-v0`` (:data:`TASKS`), built on the
Gymnasium task of the same name (``Pendulum-v1``, ``CartPole-v1``, the MuJoCo ``-v5`` tasks;
Ant without its contact forces, ``include_cfrc_ext_in_observation=False``, as
pomdp-baselines' Ant has none). Keyword arguments go to that task. :class:`PartialObservation`
wraps any env given the indices to keep.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from offpolicy.errors import OffpolicyError

KEEPS = ("P", "V")
# task -> (the Gymnasium id it is built on, its default keyword arguments)
TASKS: dict[str, tuple[str, dict]] = {
    "Pendulum": ("Pendulum-v1", {}),
    "CartPole": ("CartPole-v1", {}),
    "HalfCheetah": ("HalfCheetah-v5", {}),
    "Hopper": ("Hopper-v5", {}),
    "Walker2d": ("Walker2d-v5", {}),
    "Swimmer": ("Swimmer-v5", {}),
    "InvertedPendulum": ("InvertedPendulum-v5", {}),
    "Ant": ("Ant-v5", {"include_cfrc_ext_in_observation": False}),
}
# the classic-control layouts (Gymnasium's docs of each env's observation)
_CLASSIC = {"Pendulum-v1": ([0, 1], [2]),  # [cos theta, sin theta, theta-dot]
            "CartPole-v1": ([0, 2], [1, 3])}  # [x, x-dot, theta, theta-dot]


def env_ids() -> list[str]:
    """Every partially observed id, e.g. ``offpolicy/Pendulum-P-v0``."""
    return [f"offpolicy/{task}-{keep}-v0" for task in TASKS for keep in KEEPS]


def split(env: gym.Env, base_id: str) -> tuple[list[int], list[int]]:
    """(position indices, velocity indices) of ``env``'s flat observation: the classic tasks'
    documented layouts; a MuJoCo task observes its positions first, then its ``nv``
    velocities (checked against the model)."""
    if base_id in _CLASSIC:
        return _CLASSIC[base_id]
    model = getattr(env.unwrapped, "model", None)
    dim = int(np.prod(env.observation_space.shape))
    if model is None or dim <= model.nv:
        raise OffpolicyError(f"cannot split {base_id}'s observation ({dim} values) into "
                             "positions and velocities")
    positions = dim - int(model.nv)
    if positions > model.nq:  # more than qpos and qvel: contact forces, inertias, ...
        raise OffpolicyError(f"{base_id}'s observation holds more than positions and "
                             f"velocities ({dim} values for nq {model.nq}, nv {model.nv})")
    return list(range(positions)), list(range(positions, dim))


class PartialObservation(gym.ObservationWrapper):
    """Keep the observation entries ``indices`` of a flat Box observation (in that order)."""

    def __init__(self, env: gym.Env, indices: list[int]):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise OffpolicyError(f"PartialObservation needs a flat Box observation, got {space}")
        self.indices = np.asarray(indices, np.int64)
        if self.indices.size == 0 or self.indices.min() < 0 \
                or self.indices.max() >= space.shape[0]:
            raise OffpolicyError(f"indices {list(indices)} out of range for an observation of "
                                 f"{space.shape[0]} values")
        self.observation_space = gym.spaces.Box(space.low[self.indices],
                                                space.high[self.indices], dtype=space.dtype)

    def observation(self, obs: np.ndarray) -> np.ndarray:
        return obs[self.indices]


class ActionRewardObservation(gym.Wrapper):
    """Append the previous action and reward to every observation: observation t becomes
    ``[o_t, a_{t-1}, r_{t-1}]``, with ``a`` and ``r`` zero at an episode's first observation
    (after every reset). The input of pomdp-baselines' recurrent cores (Ni et al. 2022,
    Sec. 4) and of R2D2's LSTM (Kapturowski et al. 2019, Sec. 3: "the reward and one-hot
    action vector from the previous time step"); on a ``-V`` task it tells a memory what the
    velocities alone do not: how the system was pushed.

    Actions are flattened as ``gymnasium.spaces.flatten`` does: a Box as it is (in env units,
    as the env received it), a Discrete one-hot, a MultiDiscrete or a Tuple / Dict part by
    part. The reward is the env's own, before any clipping or scaling by the learner. The
    wrapped observation must be a flat Box (frames are refused: there is no channel to put an
    action in)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise OffpolicyError("--observe-action-reward needs a flat observation vector, got "
                                 f"{space} (images have no place for an action)")
        actions = gym.spaces.flatten_space(env.action_space)
        self._zeros = np.zeros(actions.shape[0] + 1, np.float32)
        low = np.concatenate([space.low, actions.low, [-np.inf]]).astype(np.float32)
        high = np.concatenate([space.high, actions.high, [np.inf]]).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)

    def _join(self, obs: np.ndarray, tail: np.ndarray) -> np.ndarray:
        return np.concatenate([np.asarray(obs, np.float32), tail])

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._join(obs, self._zeros), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        tail = np.concatenate([gym.spaces.flatten(self.env.action_space, action),
                               [reward]]).astype(np.float32)
        return self._join(obs, tail), reward, terminated, truncated, info


def make_partial(task: str, keep: str, **kwargs) -> gym.Env:
    """``task`` (a key of :data:`TASKS`) observing only its positions (``keep`` 'P') or only
    its velocities ('V'); the time limit is added by the registration, as the base task's."""
    base_id, defaults = TASKS[task]
    env = gym.make(base_id, disable_env_checker=True, **(defaults | kwargs)).unwrapped
    positions, velocities = split(env, base_id)
    return PartialObservation(env, positions if keep == "P" else velocities)


for _task, (_base, _) in TASKS.items():
    for _keep in KEEPS:
        _id = f"offpolicy/{_task}-{_keep}-v0"
        if _id not in gym.registry:
            gym.register(id=_id, entry_point=make_partial,
                         kwargs={"task": _task, "keep": _keep},
                         max_episode_steps=gym.spec(_base).max_episode_steps)
