"""The Python API: ``offpolicy.make`` and ``offpolicy.load``.

    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, actor_lr=1e-4)
    agent.learn(20_000)
    agent.save("ddpg-pendulum")
    agent = offpolicy.load("ddpg-pendulum")
    action = agent.act(obs)          # env observation in, env action out
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from offpolicy import config as C
from offpolicy import registry
from offpolicy.errors import OffpolicyError
from offpolicy.training import checkpoint
from offpolicy.training.loop import Trainer


def _split_overrides(algo: str, overrides: dict[str, Any]) -> tuple[dict, dict]:
    section = registry.get(algo).config_cls
    train_names = {f.name for f in C.fields_of(C.TrainConfig)}
    agent_names = {f.name for f in C.fields_of(section)}
    train, agent = {}, {}
    for k, v in overrides.items():
        if k in agent_names:
            agent[k] = v
        elif k in train_names:
            train[k] = v
        else:
            raise OffpolicyError(
                f"unknown option '{k}' for {algo} (valid: "
                f"{', '.join(sorted(train_names | agent_names))})")
    return train, agent


def make(algo: str, env: str = "Pendulum-v1", seed: int = 0, run_dir: str | Path | None = None,
         preset: str | None = None, **overrides: Any) -> Agent:
    """Create an agent for ``env``. Overrides name any training or algorithm config field."""
    train, agent = _split_overrides(algo, overrides)
    train.update(env=env, seed=seed)
    run = registry.resolve(algo, preset=preset, train_overrides=train, agent_overrides=agent)
    return Agent(Trainer(run, run_dir))


def load(path: str | Path, which: str = "latest") -> Agent:
    """Load an agent from a run directory (its ``latest`` or ``best`` checkpoint) or from a
    checkpoint directory written by ``Agent.save``."""
    path = Path(path)
    if not path.exists():
        raise OffpolicyError(f"no such run or checkpoint directory: {path}")
    if which not in ("latest", "best"):
        raise OffpolicyError(f"invalid checkpoint '{which}' (valid: latest, best)")
    ckpt = checkpoint.locate(path, which)
    import json

    try:
        meta = json.loads((ckpt / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise OffpolicyError(f"corrupt checkpoint {ckpt}: {e}") from e
    if "config" not in meta:
        raise OffpolicyError(f"corrupt checkpoint {ckpt}: meta.json has no config")
    run = registry.RunConfig.from_dict(meta["config"], where=str(ckpt / "meta.json"))
    run.train.quiet = True
    trainer = Trainer(run, None)
    trainer.restore(ckpt)
    return Agent(trainer)


class Agent:
    """A trained or training agent. ``learn`` continues from where it stopped."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer

    @property
    def config(self) -> registry.RunConfig:
        return self.trainer.run

    @property
    def step(self) -> int:
        return self.trainer.step

    def learn(self, steps: int) -> dict[str, Any]:
        """Train for ``steps`` more env steps, evaluating on the configured schedule
        (``eval_every``). Successive calls continue the same episode, replay and noise. After
        ``offpolicy.load`` of a run directory's latest checkpoint the replay is restored too;
        ``Agent.save`` stores no replay, so learning after loading it starts with an empty
        one."""
        if steps < 1:
            raise OffpolicyError(f"steps must be >= 1, got {steps}")
        return self.trainer.train(until=self.trainer.step + steps, final_eval=False)

    def act(self, obs: np.ndarray) -> Any:
        """The deterministic (evaluation) action for one env observation, in env units."""
        t = self.trainer
        obs = np.asarray(obs, np.float32)
        if obs.shape != t.obs_shape:
            raise OffpolicyError(f"observation shape {obs.shape} != {t.obs_shape}")
        params = t.actor.host_params(t.agent.acting_params(t.state))
        action, _ = t.actor.act(params, t.obs_norm(obs), explore=False)
        return t.spec.to_env(action)

    def evaluate(self, episodes: int = 10) -> np.ndarray:
        """Returns of ``episodes`` deterministic evaluation episodes."""
        return self.trainer.evaluate(episodes)

    def save(self, path: str | Path) -> Path:
        """Write a self-contained checkpoint directory (parameters, optimiser, config)."""
        path = Path(path)
        if path.exists() and any(path.iterdir()):
            raise OffpolicyError(f"{path} exists and is not empty")
        path.mkdir(parents=True, exist_ok=True)
        t = self.trainer
        out = checkpoint.save(path, "latest", t.step, t.state, t._meta(), None)
        return out
