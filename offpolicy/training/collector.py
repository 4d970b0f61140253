"""The collector: environments, exploration, normalisers' statistics, episodes, replay writes.

It owns the K training env copies (``--num-envs``), the host-side exploration noise of
deterministic policies, the warm-up action sampler, the observation / reward statistics and the
episode bookkeeping, and writes every step into replay. It never runs an update: actions come
from outside (the learner's fused update-and-act step, or a policy with parameters it was
sent), and everything it hands on is plain NumPy, the line a process boundary can go on (Ray).

Time limits: ``truncated`` episodes bootstrap from the next observation, ``terminated`` ones do
not (replay's ``discount`` is 0 only for termination).
"""

from __future__ import annotations

import math

import numpy as np

from offpolicy.agents.acting import HostNoise, NoiseSpec
from offpolicy.envs.spaces import ActionSpec
from offpolicy.envs.vector import EnvCopies
from offpolicy.envs.wrappers import ObsNormalizer, RewardScaler
from offpolicy.errors import NonFiniteError
from offpolicy.replay.storage import ReplayBuffer


class Collector:
    def __init__(self, env_id: str, num_envs: int, seed: int, spec: ActionSpec,
                 obs_shape: tuple[int, ...], replay: ReplayBuffer, noise: NoiseSpec | None,
                 behaviour_fields: dict, obs_norm: ObsNormalizer, reward_scale: RewardScaler,
                 asynchronous: bool = False, clip_reward: float = 0.0):
        self.env_id, self.num_envs, self.seed, self.spec = env_id, num_envs, seed, spec
        self.replay = replay
        self.envs = EnvCopies(env_id, num_envs, seed, spec, asynchronous)
        self.rng = np.random.Generator(np.random.PCG64(seed + 3))  # warm-up actions
        self.noise = (HostNoise(noise, spec.dim, num_envs,
                                np.random.Generator(np.random.PCG64(seed + 1)))
                      if noise is not None else None)
        self.obs_norm, self.reward_scale = obs_norm, reward_scale
        self.clip_reward = float(clip_reward)  # > 0: replay stores clip(r, -c, c)
        self.normalizing = obs_norm.enabled or reward_scale.enabled
        # behaviour info of random warm-up actions: -1 for integer fields (no actor chose it)
        self.default_info = {k: np.full((num_envs, *s), -1 if np.dtype(d).kind in "iu" else 0, d)
                             for k, (s, d) in behaviour_fields.items()}
        self.episodes = 0  # finished episodes
        self.resets = 0  # starts (a resumed run starts its env copies afresh)
        self.obs: np.ndarray | None = None  # raw observations to act on, [K, ...]
        self.obs_n: np.ndarray | None = None  # the same, normalised
        self.ep_return = np.zeros(num_envs, np.float64)
        self.finished: list[float] = []  # returns of episodes finished since the last take

    def begin(self, step: int = 0) -> None:
        """Reset every env copy (at training ``step``) and open an episode for each in
        replay."""
        obs = self.envs.reset(self.seed + 1_000_003 * self.resets, step)
        self.resets += 1
        for i in range(self.num_envs):
            self.replay.start_episode(obs[i], i)
        if self.noise is not None:
            self.noise.reset()
        self.ep_return[:] = 0.0
        self._set_obs(obs)

    @property
    def started(self) -> bool:
        return self.obs is not None

    def _set_obs(self, obs: np.ndarray) -> None:
        self.obs = obs
        self.obs_n = self.obs_norm(obs) if self.normalizing else obs

    def random_actions(self) -> tuple[np.ndarray, dict]:
        """Uniformly random agent-space actions [K, m] (warm-up)."""
        return np.stack([self.spec.sample(self.rng) for _ in range(self.num_envs)]), \
            self.default_info

    def explore(self, greedy: np.ndarray) -> np.ndarray:
        """Greedy actions [K, m] plus the host-side noise (deterministic policies)."""
        return greedy if self.noise is None else self.noise(greedy)

    def step(self, action: np.ndarray, info: dict, step: int) -> None:
        """Step every env copy with agent-space ``action`` [K, m], write the K transitions
        (with their behaviour ``info``) into replay, and start new episodes where one ended."""
        if not np.isfinite(action).all():
            raise NonFiniteError(
                f"the policy produced a non-finite action at step {step}: its parameters "
                "diverged (lower the learning rates or normalise observations)")
        # an env error names the step this iteration completes (as train.csv counts)
        next_obs, obs, reward, terminated, truncated = self.envs.step(action,
                                                                      step + self.num_envs)
        if not (np.isfinite(reward).all() and np.isfinite(next_obs).all()
                and np.isfinite(obs).all()):
            what = "reward" if not np.isfinite(reward).all() else "observation"
            raise NonFiniteError(f"non-finite {what} from {self.env_id} at step {step}; check "
                                 "the environment or its wrappers")
        self.ep_return += reward  # the env's reward: returns are reported unclipped
        if self.clip_reward > 0:
            reward = np.clip(reward, -self.clip_reward, self.clip_reward)
        self.replay.add_batch(action, reward, terminated, truncated, next_obs, info)
        done = terminated | truncated
        if self.normalizing:
            self.obs_norm.update(next_obs)
            self.reward_scale.update(reward, done)
        if done.any():
            for i in np.flatnonzero(done):
                self.episodes += 1
                self.finished.append(float(self.ep_return[i]))
                self.ep_return[i] = 0.0
                self.replay.start_episode(obs[i], int(i))
                if self.noise is not None:
                    self.noise.reset(int(i))
        self._set_obs(obs)

    def mean_finished(self) -> float:
        """Mean return of the episodes finished since the previous call (nan if none)."""
        r, self.finished = self.finished, []
        return float(np.mean(r)) if r else math.nan

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        d = {"episodes": self.episodes, "resets": self.resets,
             "rng": self.rng.bit_generator.state,
             "obs_norm": self.obs_norm.rms.state_dict(),
             "reward_scale": self.reward_scale.rms.state_dict(),
             "reward_ret": self.reward_scale.ret.tolist()}
        if self.noise is not None:
            d["noise"] = self.noise.state_dict()
        return d

    def load_state_dict(self, d: dict) -> None:
        self.episodes, self.resets = int(d["episodes"]), int(d["resets"])
        self.rng.bit_generator.state = d["rng"]
        self.obs_norm.rms.load_state_dict(d["obs_norm"])
        self.reward_scale.rms.load_state_dict(d["reward_scale"])
        ret = np.atleast_1d(np.asarray(d["reward_ret"], np.float64))
        if ret.shape == self.reward_scale.ret.shape:
            self.reward_scale.ret = ret
        if self.noise is not None and "noise" in d:
            self.noise.load_state_dict(d["noise"])
        self.obs = self.obs_n = None  # the episodes in progress restart from a fresh reset

    def close(self) -> None:
        self.envs.close()
