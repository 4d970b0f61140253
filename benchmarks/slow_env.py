"""A slow simulator for benchmarks/distributed.py: an env whose every step takes 10 ms more.

Registered as ``slow_env:SlowPendulum-v1`` (``make_env`` imports this module for the id), so
remote collectors find it with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import time

import gymnasium as gym

STEP_SECONDS = 0.010


class Sleepy(gym.Wrapper):
    """Sleeps ``seconds`` in every step: latency, not CPU (a simulator on another machine)."""

    def __init__(self, env: gym.Env, seconds: float = STEP_SECONDS):
        super().__init__(env)
        self.seconds = seconds

    def step(self, action):
        time.sleep(self.seconds)
        return self.env.step(action)


def _slow_pendulum(**kwargs) -> gym.Env:
    return Sleepy(gym.make("Pendulum-v1", **kwargs))


if "SlowPendulum-v1" not in gym.registry:
    gym.register("SlowPendulum-v1", entry_point=_slow_pendulum, max_episode_steps=200)
