"""The observation / reward statistics the learner owns, and how batches are normalised with
them.

Observation normalisation applies to every observation-like key of a batch (``obs``,
``next_obs``, a recurrent context's observations: transitions, sequences and episodes alike)
and reward scaling to ``reward``, with the statistics current at sampling time, so replay keeps
raw data. The statistics run over every step stored (:meth:`Statistics.observe`) or, frozen
(``--replay-statistics``), are set from replay's contents (ReF-ER App. B:
:meth:`Statistics.from_replay`).
"""

from __future__ import annotations

import numpy as np

from offpolicy.envs.wrappers import ObsNormalizer, RewardScaler
from offpolicy.replay.keys import OBS, OBSERVATION_KEYS, REWARD

RESCALE_EVERY = 1000  # updates between reward-scale recomputations (ReF-ER App. B)


class Statistics:
    def __init__(self, obs_norm: ObsNormalizer, reward_scale: RewardScaler):
        """``obs_norm`` / ``reward_scale``: running, or frozen (set from replay)."""
        self.obs_norm, self.reward_scale = obs_norm, reward_scale
        self.enabled = obs_norm.enabled or reward_scale.enabled
        self.from_replay_contents = reward_scale.frozen

    def observe(self, next_obs: np.ndarray, reward: np.ndarray, done: np.ndarray,
                streams: np.ndarray | None = None) -> None:
        """The running statistics, from the steps just stored (one per env copy; of the copies
        ``streams`` when one remote collector's)."""
        if self.enabled:
            self.obs_norm.update(next_obs)
            self.reward_scale.update(reward, done, streams)

    def from_replay(self, replay, updates: int) -> None:
        """ReF-ER App. B, before update ``updates``' sample: the observation statistics from
        replay at the first update (off for frames: build.py), the reward scale every
        RESCALE_EVERY updates, replay's fields in reward units rescaled with it."""
        if not self.from_replay_contents or updates % RESCALE_EVERY:
            return
        if updates == 0 and self.obs_norm.enabled:
            self.obs_norm.set_statistics(replay.valid_values(OBS))
        old = self.reward_scale.factor
        self.reward_scale.set_second_moment(replay.valid_values(REWARD))
        if updates > 0:
            replay.rescale(self.reward_scale.factor / old)

    def normalize_observations(self, batch: dict) -> dict:
        if self.obs_norm.enabled:
            for k in OBSERVATION_KEYS:
                if k in batch:
                    batch[k] = self.obs_norm(batch[k])
        return batch

    def normalize(self, batch: dict) -> dict:
        if self.enabled:
            self.normalize_observations(batch)
            batch[REWARD] = self.reward_scale(batch[REWARD])
        return batch

    def state_dict(self) -> dict:
        return {"obs_norm": self.obs_norm.rms.state_dict(),
                "reward_scale": self.reward_scale.rms.state_dict(),
                "reward_ret": self.reward_scale.ret.tolist()}

    def load_state_dict(self, d: dict) -> None:
        """Restore what a checkpoint holds of the statistics (an ``Agent.save`` written before
        any training had no reward statistics: those stay as they are)."""
        self.obs_norm.rms.load_state_dict(d["obs_norm"])
        if "reward_scale" in d:
            self.reward_scale.rms.load_state_dict(d["reward_scale"])
        ret = np.atleast_1d(np.asarray(d.get("reward_ret", []), np.float64))
        if ret.shape == self.reward_scale.ret.shape:
            self.reward_scale.ret = ret
