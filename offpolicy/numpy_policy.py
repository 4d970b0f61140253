"""A deterministic policy exported by ``offpolicy export RUN_DIR --format numpy``: NumPy only.

``offpolicy export`` copies this file, as ``policy.py``, next to ``policy.json`` (the layers and
the action space) and ``policy.npz`` (the weights and the observation statistics)::

    from policy import Policy

    policy = Policy()          # reads policy.json and policy.npz next to policy.py
    action = policy(obs)       # obs [obs_dim] -> one action; a batch [B, obs_dim] -> [B, ...]

It computes what ``offpolicy.load(RUN_DIR).act(obs)`` does, without JAX or offpolicy:

    z = clip((obs - mean) / sqrt(var + 1e-8), -clip, clip)   the run's observation
                                                              normalisation (frozen statistics),
                                                              only when it trained with it
    x = the network's steps on z (policy.json "network"):
        dense      x @ kernel + bias, then its activation (tanh, relu, softsign or none)
        slice      x[..., start:stop]    (the mean among a head's outputs)
        tanh       tanh(x)               (the squash into the agent's box [-1, 1])
        log_softmax  x - log sum exp x   (a categorical policy's log-probabilities)
        dueling    V(x) + A(x) - mean A(x)   (DQN's dueling heads)
        argmax     the index of the largest entry (a discrete action)
    action = continuous: clip(x, -1, 1) * (high - low) / 2 + (high + low) / 2, clipped to
             [low, high]; discrete: the index itself
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ACTIVATIONS = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, np.float32(0.0)),
    "softsign": lambda x: x / (np.float32(1.0) + np.abs(x)),
    "none": lambda x: x,
}


class Policy:
    """The exported policy in ``folder`` (default: the folder this file is in)."""

    def __init__(self, folder: str | Path | None = None):
        folder = Path(folder) if folder is not None else Path(__file__).resolve().parent
        self.spec = json.loads((folder / "policy.json").read_text())
        with np.load(folder / "policy.npz", allow_pickle=False) as arrays:
            self.arrays = {k: arrays[k] for k in arrays.files}
        self.obs_shape = tuple(self.spec["observation"]["shape"])

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """The run's observation normalisation, in float64 as the library computes it."""
        norm = self.spec["observation"]["normalize"]
        if not norm:
            return obs
        z = (obs - self.arrays["obs_mean"]) / np.sqrt(self.arrays["obs_var"] + 1e-8)
        return np.clip(z, -norm["clip"], norm["clip"]).astype(np.float32)

    def network(self, x: np.ndarray) -> np.ndarray:
        a = self.arrays
        for step in self.spec["network"]:
            op = step["op"]
            if op == "dense":
                x = ACTIVATIONS[step["activation"]](x @ a[step["name"] + ".kernel"]
                                                    + a[step["name"] + ".bias"])
            elif op == "slice":
                x = x[..., step["start"]:step["stop"]]
            elif op == "tanh":
                x = np.tanh(x)
            elif op == "log_softmax":
                shifted = x - np.max(x, axis=-1, keepdims=True)
                x = shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))
            elif op == "dueling":
                value = x @ a[step["value"] + ".kernel"] + a[step["value"] + ".bias"]
                advantage = x @ a[step["advantage"] + ".kernel"] + a[step["advantage"] + ".bias"]
                x = value + advantage - np.mean(advantage, axis=-1, keepdims=True)
            elif op == "argmax":
                x = np.argmax(x, axis=-1)
            else:
                raise ValueError(f"policy.json: unknown step {op!r}")
        return x

    def to_env(self, x: np.ndarray) -> np.ndarray:
        """The agent's action -> the env's (continuous: [-1, 1] rescaled to the env's box)."""
        if self.spec["action"]["kind"] == "discrete":
            return x.astype(np.int64)
        a = self.arrays
        x = np.clip(x.astype(np.float32), -1.0, 1.0)
        return np.clip(x * a["action_scale"] + a["action_offset"], a["action_low"],
                       a["action_high"])

    def __call__(self, obs) -> np.ndarray:
        obs = np.asarray(obs, np.float32)
        single = obs.shape == self.obs_shape
        if not single and obs.shape[1:] != self.obs_shape:
            raise ValueError(f"observation shape {obs.shape}: expected {self.obs_shape} or "
                             f"[B, {', '.join(map(str, self.obs_shape))}]")
        batch = obs[None] if single else obs
        action = self.to_env(self.network(self.normalize(batch)))
        return action[0] if single else action


if __name__ == "__main__":  # a smoke test: the action for an all-zero observation
    p = Policy()
    print(p(np.zeros(p.obs_shape, np.float32)))
