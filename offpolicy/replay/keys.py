"""The names replay and the agents share, each named once: the stored fields, the batch and
write-back keys, and the data specs (what an update learns from).

A batch is a dict of NumPy arrays under these keys (transitions [B, ...]; sequences and
episodes time-major [T, B, ...], ``obs`` [T+1, B, ...]); an update's write-back is a dict under
the write-back keys, shaped like the batch's step index. An agent's own per-step fields (its
behaviour and write-back fields) are named by the agent, except the ones below that replay's
extensions read.
"""

from __future__ import annotations

from dataclasses import dataclass

# ------------------------------------------------------------------ what every step stores
OBS = "obs"  # the observation a step starts from ([T+1, B, ...] in windows: obs[t+1] is next)
ACTION = "action"
REWARD = "reward"
TERMINATED = "terminated"
TRUNCATED = "truncated"
VALID = "valid"  # a slot holds a transition (not a final observation, not forgotten)
CORE_FIELDS = (OBS, ACTION, REWARD, TERMINATED, TRUNCATED, VALID)

# ------------------------------------------------------------------ what a sample adds
NEXT_OBS = "next_obs"  # transitions: the observation after the step
DISCOUNT = "discount"  # 0.0 where the step terminated its episode, else 1.0
MASK = "mask"  # windows: 1.0 while the window is inside the episode it started in
RESERVED = CORE_FIELDS + (NEXT_OBS, DISCOUNT, MASK)  # no agent field may take these names

# a recurrent core (DataSpec.with_context): the behaviour field of the core's state before
# each step, and the batch keys of a context, which replace ``obs`` / ``next_obs``
CORE_STATE = "core_state"
CONTEXT_OBS = "context_obs"
CONTEXT_POSITION = "context_position"
CONTEXT_STATE = "context_state"
OBSERVATION_KEYS = (OBS, NEXT_OBS, CONTEXT_OBS)  # what observation normalisation applies to

# ------------------------------------------------------------------ ReF-ER and PER
RHO = "rho"  # write-back field: each step's latest importance weight pi / mu
FAR = "far"  # write-back field: each step's far-policy flag (0/1), counted by replay
FAR_FRACTION = "far_fraction"  # batch: n_far / N of the whole memory (ReF-ER Eq. 12)
WEIGHT = "weight"  # batch: PER's importance-sampling weights (prioritized replay only)
PRIORITY = "td_abs"  # write-back: |TD| of each sampled step, PER's new priority (not a field)

# ------------------------------------------------------------------ stored returns (V-RACER)
V_TBC = "v_tbc"  # write-back field: the stored target V^tbc_t
V_LATEST = "v"  # write-back field: the latest V(s_t) (NaN until first refreshed)
V_BEHAVIOUR = "value"  # behaviour field: V(s_t) when the step was taken
NEXT_V_TBC = "next_v_tbc"  # batch: the stored target of step t + 1 (NaN at an episode's end)

FieldSpecs = dict[str, tuple]  # name -> (shape, dtype) or (shape, dtype, initial)

# ------------------------------------------------------------------ data specs
DATA_KINDS = ("transitions", "sequences", "episodes")


@dataclass(frozen=True)
class DataSpec:
    """What an update learns from; build with :func:`transitions`, :func:`sequences` or
    :func:`episodes` (a recurrent agent adds a context: :meth:`with_context`)."""

    kind: str
    length: int = 1  # sequences: window length T; episodes: the maximum episode length
    # recurrent agents: up to this many steps of the same episode before each sampled step
    # (transitions) or window (sequences), as ``context_obs``; with ``context_state``, the
    # core state recorded while acting at the context's first step too
    context: int = 0
    context_state: bool = False
    recurrent: bool = False  # samples carry a context (even of no earlier steps: window 1)

    def __post_init__(self):
        if self.kind not in DATA_KINDS:
            raise ValueError(f"unknown data kind {self.kind!r} (valid: {', '.join(DATA_KINDS)})")
        if self.length < 1:
            raise ValueError(f"{self.kind} length must be >= 1, got {self.length}")
        if self.context < 0 or (self.context_state and self.kind == "episodes"):
            raise ValueError(f"invalid context for {self.kind}: {self.context}")

    @property
    def windows(self) -> bool:
        """Samples are time-major windows (sequences, episodes), not single transitions."""
        return self.kind != "transitions"

    def with_context(self, steps: int, state: bool) -> DataSpec:
        """This spec with a recurrent context: each sample also carries ``context_obs``
        [steps + span + 1, B, ...], the observations from up to ``steps`` steps before the
        sampled step (transitions; span 1) or window (sequences; span T) to its end, never
        reaching into another episode, its offset ``context_position`` [B] (how many steps
        before the sample it starts) and, with ``state``, ``context_state`` [B, S]: the
        behaviour field :data:`CORE_STATE` at its first step. The context replaces the
        batch's ``obs`` and ``next_obs`` (it holds them) and its per-step core states."""
        return DataSpec(self.kind, self.length, int(steps), bool(state), True)


def transitions() -> DataSpec:
    """Batches of single steps: obs, action, reward, next_obs, discount [B] + stored fields."""
    return DataSpec("transitions")


def sequences(length: int) -> DataSpec:
    """Time-major windows of ``length`` steps of one episode: obs [T+1, B], action, reward,
    terminated, truncated, discount, mask [T, B] + stored fields [T, B, ...]."""
    return DataSpec("sequences", int(length))


def episodes(max_length: int) -> DataSpec:
    """Whole episodes from their first step, padded to ``max_length`` (same layout as
    sequences; an episode longer than ``max_length`` is cut there, its mask stays 1)."""
    return DataSpec("episodes", int(max_length))
