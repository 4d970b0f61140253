"""The collector: environments, acting, exploration, episodes; every step goes to a sink.

It owns the K training env copies (``--num-envs``), the policy it acts with (``HostPolicy``:
jitted on the host CPU) and the :class:`~offpolicy.training.learner.ActingState` it was last
given (parameters and the observation statistics it normalises with), the host-side
exploration noise of deterministic policies, the warm-up action sampler and the episode
bookkeeping. It never runs an update and never writes replay itself: every step goes to a
:class:`Sink` as plain NumPy. In one process the sink is the learner's (replay, then the
running statistics); :class:`ChunkSink` fills NumPy chunks instead, what a collector in
another process sends (the wire format of remote collectors), replayed into any sink by
:func:`apply_chunk`.

Time limits: ``truncated`` episodes bootstrap from the next observation, ``terminated`` ones do
not (replay's ``discount`` is 0 only for termination).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from offpolicy.agents.acting import HostMemory, HostNoise, HostPolicy, NoiseSpec
from offpolicy.agents.base import NEXT_CORE_STATE, CoreSpec
from offpolicy.envs.spaces import ActionSpec
from offpolicy.envs.vector import EnvCopies
from offpolicy.errors import NonFiniteError


class Sink(Protocol):
    """Where a collector's steps go (the replay buffer has these verbs)."""

    def start_episode(self, obs: np.ndarray, stream: int = 0) -> None:
        """The first observation of an episode of env copy ``stream``."""

    def add_batch(self, action, reward, terminated, truncated, next_obs,
                  extras: dict | None = None) -> None:
        """One step of every env copy: arrays with a leading K axis, and the behaviour
        fields of the actions taken."""


class ChunkSink:
    """Steps gathered into plain NumPy arrays: :meth:`take` returns a chunk (a dict of arrays,
    no objects), :func:`apply_chunk` writes it into another sink in the original order."""

    def __init__(self):
        self._steps: list[tuple] = []
        self._starts: list[tuple[int, int, np.ndarray]] = []

    def start_episode(self, obs: np.ndarray, stream: int = 0) -> None:
        self._starts.append((len(self._steps), int(stream), np.array(obs)))

    def add_batch(self, action, reward, terminated, truncated, next_obs, extras=None) -> None:
        self._steps.append((np.array(action), np.array(reward), np.array(terminated),
                            np.array(truncated), np.array(next_obs),
                            {k: np.array(v) for k, v in (extras or {}).items()}))

    def __len__(self) -> int:
        return len(self._steps)

    def take(self) -> dict[str, Any]:
        """The chunk gathered since the last take: ``action``, ``reward``, ``terminated``,
        ``truncated``, ``next_obs`` [n, K, ...], ``extra.<field>`` [n, K, ...], and the
        episode starts ``start_at`` (steps before each), ``start_stream``, ``start_obs``."""
        steps, starts = self._steps, self._starts
        self._steps, self._starts = [], []
        chunk: dict[str, Any] = {
            "start_at": np.array([s[0] for s in starts], np.int64),
            "start_stream": np.array([s[1] for s in starts], np.int64),
            "start_obs": np.stack([s[2] for s in starts]) if starts else np.zeros((0,)),
        }
        for i, name in enumerate(("action", "reward", "terminated", "truncated", "next_obs")):
            chunk[name] = np.stack([s[i] for s in steps]) if steps else np.zeros((0,))
        for k in (steps[0][5] if steps else {}):
            chunk[f"extra.{k}"] = np.stack([s[5][k] for s in steps])
        return chunk


def apply_chunk(chunk: dict[str, Any], sink: Sink) -> None:
    """Write a :meth:`ChunkSink.take` chunk into ``sink``, starts and steps in their order."""
    extras = [k for k in chunk if k.startswith("extra.")]
    starts = list(zip(chunk["start_at"], chunk["start_stream"], chunk["start_obs"]))
    j = 0
    for i in range(len(chunk["action"]) + 1):
        while j < len(starts) and starts[j][0] == i:
            sink.start_episode(starts[j][2], int(starts[j][1]))
            j += 1
        if i < len(chunk["action"]):
            sink.add_batch(chunk["action"][i], chunk["reward"][i], chunk["terminated"][i],
                           chunk["truncated"][i], chunk["next_obs"][i],
                           {k[len("extra."):]: chunk[k][i] for k in extras})


def uniform_warmup(warmup_actions: str, warmup_steps: int, noise: NoiseSpec | None) -> int:
    """How many of the first steps act uniformly at random. ``auto``: all warm-up steps of a
    deterministic policy (host noise), none of a stochastic one (no host noise), which warms
    up by sampling from its initial policy: uniform actions carry no behaviour density for
    replay to record (``build`` refuses ``uniform`` where one is recorded)."""
    if warmup_actions == "auto":
        return warmup_steps if noise is not None else 0
    return warmup_steps if warmup_actions == "uniform" else 0


class Collector:
    def __init__(self, env_id: str, num_envs: int, seed: int, spec: ActionSpec, sink: Sink,
                 policy: HostPolicy, acting, noise: NoiseSpec | None, behaviour_fields: dict,
                 warmup_steps: int = 0, asynchronous: bool = False, clip_reward: float = 0.0,
                 core: CoreSpec | None = None, observe_action_reward: bool = False,
                 warmup_actions: str = "auto"):
        """``acting``: the learner's ``ActingState`` to start with (:meth:`set_acting`);
        ``core``: the agent's recurrent core, whose memory of each episode the collector
        keeps (:class:`~offpolicy.agents.acting.HostMemory`); ``observe_action_reward``:
        the env copies' observations end with the previous action and reward;
        ``warmup_actions``: what acts during the ``warmup_steps`` (:func:`uniform_warmup`)."""
        self.env_id, self.num_envs, self.seed, self.spec = env_id, num_envs, seed, spec
        self.sink, self.policy = sink, policy
        self.envs = EnvCopies(env_id, num_envs, seed, spec, asynchronous,
                              observe_action_reward)
        self.rng = np.random.Generator(np.random.PCG64(seed + 3))  # warm-up actions
        self.noise = (HostNoise(noise, spec.dim, num_envs,
                                np.random.Generator(np.random.PCG64(seed + 1)))
                      if noise is not None else None)
        self.uniform_warmup_steps = uniform_warmup(warmup_actions, warmup_steps, noise)
        self.clip_reward = float(clip_reward)  # > 0: the sink gets clip(r, -c, c)
        # behaviour info of random warm-up actions: -1 for integer fields (no actor chose it)
        self.default_info = {k: np.full((num_envs, *s), -1 if np.dtype(d).kind in "iu" else 0, d)
                             for k, (s, d) in behaviour_fields.items()}
        self.episodes = 0  # finished episodes
        self.resets = 0  # starts (a resumed run starts its env copies afresh)
        self.obs: np.ndarray | None = None  # raw observations to act on, [K, ...]
        self.obs_n: np.ndarray | None = None  # the same, normalised
        self.memory = HostMemory(core, num_envs) if core is not None else None
        # what the policy acts on: obs_n, or a recurrent core's context built from it
        self.policy_input: Any = None
        self.ep_return = np.zeros(num_envs, np.float64)
        self.finished: list[float] = []  # returns of episodes finished since the last take
        self.set_acting(acting)

    def set_acting(self, acting) -> None:
        """Act with this ``ActingState`` from now on; its parameters reach the host only when
        the policy is first called with them."""
        self.acting = acting
        self._host_params = None

    def begin(self, step: int = 0) -> None:
        """Reset every env copy (at training ``step``) and open an episode for each."""
        obs = self.envs.reset(self.seed + 1_000_003 * self.resets, step)
        self.resets += 1
        for i in range(self.num_envs):
            self.sink.start_episode(obs[i], i)
        if self.noise is not None:
            self.noise.reset()
        if self.memory is not None:
            self.memory.reset()
        self.ep_return[:] = 0.0
        self._set_obs(obs)

    @property
    def started(self) -> bool:
        return self.obs is not None

    def _set_obs(self, obs: np.ndarray) -> None:
        self.obs = obs
        norm = self.acting.normalizer
        self.obs_n = norm(obs) if norm.enabled else obs
        self.policy_input = self.obs_n if self.memory is None else self.memory.observe(self.obs_n)

    # ------------------------------------------------------------------ acting
    def act(self, step: int, greedy: tuple | None = None) -> tuple[np.ndarray, dict]:
        """The exploring actions [K, m] and their behaviour info at training ``step``: uniform
        in the first ``uniform_warmup_steps`` (:func:`uniform_warmup`), else ``greedy`` (an
        update's fused action)
        or the policy's on the current parameters, plus the host noise. A recurrent core's
        memory moves on with every step, warm-up included."""
        if step < self.uniform_warmup_steps:
            action, info = self.random_actions()
            if self.memory is not None and self.memory.spec.stored:
                info = {**info, NEXT_CORE_STATE: self._policy_act()[1][NEXT_CORE_STATE]}
        elif greedy is not None:
            action, info = self.explore(greedy[0]), greedy[1]
        else:
            action, info = self._policy_act()
            action = self.explore(action)
        if self.memory is None:
            return action, info
        recorded = self.memory.recorded()  # the state before this step
        return action, self.memory.advance(info) | recorded

    def _policy_act(self) -> tuple[np.ndarray, dict]:
        if self._host_params is None:
            self._host_params = self.policy.host_params(self.acting.params)
        return self.policy.act(self._host_params, self.policy_input, True)

    def random_actions(self) -> tuple[np.ndarray, dict]:
        """Uniformly random agent-space actions [K, m] (warm-up)."""
        return np.stack([self.spec.sample(self.rng) for _ in range(self.num_envs)]), \
            self.default_info

    def explore(self, greedy: np.ndarray) -> np.ndarray:
        """Greedy actions [K, m] plus the host-side noise (deterministic policies)."""
        return greedy if self.noise is None else self.noise(greedy)

    # ------------------------------------------------------------------ stepping
    def step(self, action: np.ndarray, info: dict, step: int) -> None:
        """Step every env copy with agent-space ``action`` [K, m], send the K transitions
        (with their behaviour ``info``) to the sink, and start new episodes where one ended."""
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
        self.sink.add_batch(action, reward, terminated, truncated, next_obs, info)
        done = terminated | truncated
        if done.any():
            for i in np.flatnonzero(done):
                self.episodes += 1
                self.finished.append(float(self.ep_return[i]))
                self.ep_return[i] = 0.0
                self.sink.start_episode(obs[i], int(i))
                if self.noise is not None:
                    self.noise.reset(int(i))
                if self.memory is not None:
                    self.memory.reset(int(i))
        self._set_obs(obs)

    def mean_finished(self) -> float:
        """Mean return of the episodes finished since the previous call (nan if none)."""
        r, self.finished = self.finished, []
        return float(np.mean(r)) if r else math.nan

    def log_values(self, seconds: float) -> dict:
        """train.csv's episode columns for the interval that ends now."""
        return {"episodes": self.episodes, "episode_return": self.mean_finished()}

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        d = {"episodes": self.episodes, "resets": self.resets,
             "rng": self.rng.bit_generator.state}
        if self.noise is not None:
            d["noise"] = self.noise.state_dict()
        return d

    def load_state_dict(self, d: dict) -> None:
        self.episodes, self.resets = int(d["episodes"]), int(d["resets"])
        self.rng.bit_generator.state = d["rng"]
        if self.noise is not None and "noise" in d:
            self.noise.load_state_dict(d["noise"])
        # the episodes in progress restart from a fresh reset (and a core's memory with them)
        self.obs = self.obs_n = self.policy_input = None

    def close(self) -> None:
        self.envs.close()
