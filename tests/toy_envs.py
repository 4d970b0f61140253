"""Small Gymnasium environments for the tests, registered when this module is imported.

The CLI reaches them through the ``toy_envs:Name-v0`` form of an env id (``make_env`` imports
the module before the colon), so a subprocess needs the tests directory on ``PYTHONPATH``.

Every env has a Box(3) observation ``[t / k, phase, sin(t + phase)]`` that never depends on the
action (so NaN actions from a diverged policy cannot turn into NaN observations) and, except
``DiscreteToy``, a Box action in [-2, 2]^1. ``obs[0] == 1.0`` marks the final observation of an
episode of ``k`` steps, which lets tests recognise last transitions in sampled batches.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
from gymnasium import spaces

EPISODE_STEPS = 10  # k of ToyTerminate / ToyTruncate
SHORT_STEPS = 3  # k of ToyShort
NAN_AT = 5  # step (1-based, within the first episode) that returns NaN in NaNObs / NaNReward
HUGE_AFTER = 250  # global env step after which HugeReward pays 1e38
HUGE_REWARD = 1e38


class ToyEnv(gym.Env):
    """Terminates after ``k`` steps when ``terminate`` is set; otherwise runs forever (the
    registration adds a TimeLimit)."""

    metadata = {"render_modes": []}

    def __init__(self, k: int = EPISODE_STEPS, terminate: bool = True, discrete: bool = False,
                 nan_obs_at: int | None = None, nan_reward_at: int | None = None,
                 huge_reward_after: int | None = None, raise_in_step_at: int | None = None,
                 raise_in_reset_at: int | None = None):
        self.k = k
        self.raise_in_step_at = raise_in_step_at  # this instance's env step that raises
        self.raise_in_reset_at = raise_in_reset_at  # this instance's reset() call that raises
        self.resets = 0
        self.terminate = terminate
        self.nan_obs_at = nan_obs_at
        self.nan_reward_at = nan_reward_at
        self.huge_reward_after = huge_reward_after
        self.observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = (spaces.Discrete(3) if discrete
                             else spaces.Box(-2.0, 2.0, (1,), np.float32))
        self.t = 0
        self.total = 0  # env steps over all episodes of this instance
        self.phase = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.t / self.k, self.phase, math.sin(self.t + self.phase)], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.resets += 1
        if self.raise_in_reset_at is not None and self.resets == self.raise_in_reset_at:
            raise RuntimeError(f"simulator lost at reset {self.resets}")
        self.t = 0
        self.phase = float(self.np_random.uniform(-1.0, 1.0))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.total += 1
        if self.raise_in_step_at is not None and self.total == self.raise_in_step_at:
            raise RuntimeError(f"simulator diverged at its step {self.total}")
        obs = self._obs()
        reward = -0.1 * self.phase ** 2 + 0.01 * self.t
        if self.nan_obs_at is not None and self.total == self.nan_obs_at:
            obs[1] = np.nan
        if self.nan_reward_at is not None and self.total == self.nan_reward_at:
            reward = float("nan")
        if self.huge_reward_after is not None and self.total > self.huge_reward_after:
            reward = HUGE_REWARD
        terminated = self.terminate and self.t >= self.k
        return obs, float(reward), bool(terminated), False, {}


def _register(name: str, max_episode_steps: int | None = None, **kwargs) -> None:
    if name not in gym.registry:
        gym.register(name, entry_point=ToyEnv, kwargs=kwargs, max_episode_steps=max_episode_steps)


_register("ToyTerminate-v0", k=EPISODE_STEPS, terminate=True)
_register("ToyTruncate-v0", max_episode_steps=EPISODE_STEPS, k=EPISODE_STEPS, terminate=False)
_register("ToyShort-v0", k=SHORT_STEPS, terminate=True)  # shorter than most unrolls
_register("NaNObs-v0", k=50, nan_obs_at=NAN_AT)
_register("NaNReward-v0", k=50, nan_reward_at=NAN_AT)
_register("HugeReward-v0", k=50, huge_reward_after=HUGE_AFTER)
_register("DiscreteToy-v0", k=EPISODE_STEPS, discrete=True)
RAISE_AT = 1500  # the env step of each instance at which RaiseInStep raises
_register("RaiseInStep-v0", k=EPISODE_STEPS, raise_in_step_at=RAISE_AT)
_register("RaiseInReset-v0", k=EPISODE_STEPS, raise_in_reset_at=5)
_register("DiscreteRaise-v0", k=EPISODE_STEPS, discrete=True, raise_in_step_at=RAISE_AT)


GUESS_CHOICES = 3
GUESS_STEPS = 8


class GuessEnv(gym.Env):
    """A contextual bandit in episodes of ``GUESS_STEPS`` steps, for the stochastic toy agent:
    the observation is the one-hot of a target in [0, 3); action == target pays 1, else 0.
    A random policy earns 8/3 per episode, the optimal one 8."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Box(0.0, 1.0, (GUESS_CHOICES,), np.float32)
        self.action_space = spaces.Discrete(GUESS_CHOICES)
        self.t, self.target = 0, 0

    def _obs(self) -> np.ndarray:
        return np.eye(GUESS_CHOICES, dtype=np.float32)[self.target]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        self.target = int(self.np_random.integers(GUESS_CHOICES))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.target)
        self.t += 1
        self.target = int(self.np_random.integers(GUESS_CHOICES))
        return self._obs(), reward, False, self.t >= GUESS_STEPS, {}


if "ToyGuess-v0" not in gym.registry:
    gym.register("ToyGuess-v0", entry_point=GuessEnv)
