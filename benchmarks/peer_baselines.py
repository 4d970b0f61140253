"""SB3's TD3, SAC and DQN as our ``--preset sb3`` reproduces them, and the peer library's model
built from them: the settings of the learning runs (``BASELINES``) and of the throughput
protocol (``THROUGHPUT``, one update per env step, SB3's SAC networks for TD3 too).

Shared by ``peers.py`` (which runs them), ``update_parity.py`` (which compares one update of
theirs with ours) and ``init_law.py`` (their initial networks). Like ``peers.py`` it runs in the
peers' bench venv (``make bench-venv``); it imports SB3 and SBX only when a model is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym
    from stable_baselines3.common.base_class import BaseAlgorithm

Lib = Literal["sb3", "sbx"]
LIBS: tuple[Lib, ...] = ("sb3", "sbx")


@dataclass(frozen=True)
class BaselineConfig:
    """TD3, SAC or DQN as SB3 runs it by default (see peers.py's docstring)."""

    hidden: tuple[int, ...]
    batch_size: int
    learning_rate: float
    buffer_size: int = 1_000_000
    tau: float = 0.005
    gamma: float = 0.99
    train_freq: int = 1
    gradient_steps: int = 1
    action_sigma: float = 0.1  # TD3's Gaussian exploration noise
    target_update_interval: int = 10_000  # DQN, env steps
    exploration_fraction: float = 0.1  # DQN
    device: str = "cpu"


BASELINES = {
    "td3": BaselineConfig((400, 300), 256, 1e-3),
    "sac": BaselineConfig((256, 256), 256, 3e-4),
    "dqn": BaselineConfig((64, 64), 32, 1e-4, tau=1.0, train_freq=4),
}
# the throughput protocol: one update per env step, SB3's SAC networks for TD3 too
THROUGHPUT = {
    "td3": BaselineConfig((256, 256), 256, 1e-3),
    "sac": BaselineConfig((256, 256), 256, 3e-4),
    "dqn": BaselineConfig((64, 64), 32, 1e-4, tau=1.0, train_freq=1),
}


def update_kwargs(cfg: BaselineConfig) -> dict[str, Any]:
    """The settings of ``cfg`` that one update sees (learning rate, batch, tau, gamma, the
    networks), as SB3's and SBX's constructors take them (update_parity.py uses them too)."""
    return dict(learning_rate=cfg.learning_rate, batch_size=cfg.batch_size, tau=cfg.tau,
                gamma=cfg.gamma, policy_kwargs=dict(net_arch=list(cfg.hidden)))


def make_baseline(lib: Lib, algo: str, env: gym.Env[Any, Any], cfg: BaselineConfig,
                  warmup: int, seed: int, variant: str = "own") -> BaseAlgorithm:
    """The peer's TD3, SAC or DQN with ``cfg`` on ``env`` (relu networks: both libraries'
    default activation). ``variant="sb3"`` (SBX's TD3 only): SBX's TD3 with SB3's initial
    law, delayed targets and Q_1 actor loss (benchmarks/sbx_variant.py)."""
    import importlib

    module = importlib.import_module("stable_baselines3" if lib == "sb3" else "sbx")
    common: dict[str, Any] = dict(
        **update_kwargs(cfg), buffer_size=cfg.buffer_size, learning_starts=warmup,
        train_freq=cfg.train_freq, gradient_steps=cfg.gradient_steps, verbose=0, seed=seed)
    if lib == "sb3":
        common["device"] = cfg.device
    if variant != "own" and (variant, lib, algo) != ("sb3", "sbx", "td3"):
        raise ValueError(f"variant {variant!r} is defined for SBX's TD3 ('sb3') only")
    if algo == "td3":
        from stable_baselines3.common.noise import NormalActionNoise

        n = int(np.prod(env.action_space.shape))  # type: ignore[arg-type]
        common["action_noise"] = NormalActionNoise(np.zeros(n), cfg.action_sigma * np.ones(n))
        if variant == "sb3":
            from sbx_variant import TD3SB3Choices

            return TD3SB3Choices("MlpPolicy", env, **common)
        return module.TD3("MlpPolicy", env, **common)
    if algo == "sac":
        return module.SAC("MlpPolicy", env, **common)
    if algo == "dqn":
        return module.DQN("MlpPolicy", env, target_update_interval=cfg.target_update_interval,
                          exploration_fraction=cfg.exploration_fraction, **common)
    raise ValueError(f"unknown algo {algo!r}")
