"""Optional observation and reward normalisation (off by default), host-side and checkpointable.

They are not Gymnasium wrappers on purpose: replay stores raw observations and rewards, and the
loop normalises batches with the statistics current at sampling time, so turning
normalisation on never invalidates replay, and the statistics travel in checkpoints.
"""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Running mean and variance (Chan et al. parallel update), float64."""

    def __init__(self, shape: tuple[int, ...] = ()):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64).reshape((-1, *self.mean.shape))
        batch_mean, batch_var, n = x.mean(0), x.var(0), x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict:
        return {"mean": self.mean, "var": self.var, "count": np.float64(self.count)}

    def load_state_dict(self, d: dict) -> None:
        self.mean, self.var, self.count = np.asarray(d["mean"]), np.asarray(d["var"]), float(
            d["count"])


class ObsNormalizer:
    """z = clip((obs - mean) / sqrt(var + eps), -clip, clip); identity when disabled."""

    def __init__(self, shape: tuple[int, ...], enabled: bool, clip: float = 10.0,
                 frozen: bool = False):
        self.enabled = enabled
        self.rms = RunningMeanStd(shape)
        self.clip = clip
        self.frozen = frozen  # statistics set from outside (ReF-ER App. B: from replay)

    def update(self, obs: np.ndarray) -> None:
        if self.enabled and not self.frozen:
            self.rms.update(obs)

    def set_statistics(self, obs: np.ndarray) -> None:
        """Mean and variance of ``obs`` [N, ...] (ReF-ER App. B, Eq. 14-15: from replay)."""
        obs = np.asarray(obs, np.float64)
        self.rms.mean, self.rms.var, self.rms.count = obs.mean(0), obs.var(0), float(len(obs))

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if not self.enabled:
            return obs
        z = (obs - self.rms.mean) / np.sqrt(self.rms.var + 1e-8)
        return np.clip(z, -self.clip, self.clip).astype(np.float32)


class RewardScaler:
    """Divides rewards by the running std of the discounted return (as SB3's VecNormalize),
    one return per env copy."""

    def __init__(self, gamma: float, enabled: bool, num_envs: int = 1, frozen: bool = False):
        self.enabled = enabled
        self.frozen = frozen  # scale set from outside (ReF-ER App. B: sqrt(mean r^2) of replay)
        self.gamma = gamma
        self.rms = RunningMeanStd(())
        self.ret = np.zeros(num_envs, np.float64)

    def update(self, reward: np.ndarray, done: np.ndarray,
               streams: np.ndarray | None = None) -> None:
        """``reward``, ``done``: [K] for the K env copies (or for the copies ``streams``)."""
        if not self.enabled or self.frozen:
            return
        if streams is None:
            self.ret = self.ret * self.gamma + reward
            self.rms.update(self.ret)
            self.ret[np.asarray(done, bool)] = 0.0
            return
        ret = self.ret[streams] * self.gamma + reward
        self.rms.update(ret)
        ret[np.asarray(done, bool)] = 0.0
        self.ret[streams] = ret

    def set_second_moment(self, rewards: np.ndarray) -> None:
        """Scale by 1 / sqrt(mean r^2) of ``rewards`` (ReF-ER App. B, Eq. 16: from replay)."""
        self.rms.var = np.float64(np.mean(np.square(rewards, dtype=np.float64)))

    def _std(self) -> np.float64:
        return np.sqrt(self.rms.var + 1e-8)

    @property
    def factor(self) -> float:
        """What rewards are multiplied by (1 when disabled)."""
        return float(1.0 / self._std()) if self.enabled else 1.0

    def __call__(self, reward: np.ndarray) -> np.ndarray:
        if not self.enabled:
            return reward
        return (reward / self._std()).astype(np.float32)
