"""The arithmetic of what is due: updates, segments, logging, evaluation, checkpoints.

The loops (:mod:`offpolicy.training.loops`) ask it after every env step; the run does what it
says. It holds the two pieces of that arithmetic that carry over between steps and into
checkpoints: the update credit (fractional ``--updates-per-step`` stay exact) and the Poisson
generator of ACER's replay updates per segment.
"""

from __future__ import annotations

import math

import numpy as np

FIRST_CHECKPOINT = 1_000  # the first checkpoint comes early, so --resume has one soon
PROGRESS_EVERY = 100  # env steps between looks at the clock (progress bar, signals)


class Schedule:
    def __init__(self, train):
        """``train``: the run's ``TrainConfig`` (read at every :meth:`begin`: ``--steps`` and
        the intervals may change when a run is resumed or learns further)."""
        self.train = train
        self.credit = 0.0  # updates owed but not yet run (fractional --updates-per-step)
        # replay updates per segment ~ Poisson(replay_ratio) (ACER); its state is checkpointed
        self.poisson = np.random.Generator(np.random.PCG64(train.seed + 7))

    def begin(self, step: int, total: int, checkpointed: bool, callback_every: int = 0) -> None:
        """Start counting at ``step`` of a run that goes to ``total``; without any checkpoint
        yet the first one is due at FIRST_CHECKPOINT. ``callback_every`` > 0: ``learn``'s
        callbacks are due every so many env steps (0: none are)."""
        tc, k = self.train, self.train.num_envs
        self.total = total
        self.callback_every = callback_every
        self.next_callback = ((step // callback_every + 1) * callback_every if callback_every
                              else math.inf)
        self.next_log = (step // tc.log_every + 1) * tc.log_every
        self.next_eval = (step // tc.eval_every + 1) * tc.eval_every
        self.next_ckpt = (step // tc.checkpoint_every + 1) * tc.checkpoint_every
        if not checkpointed and step < FIRST_CHECKPOINT:
            self.next_ckpt = min(self.next_ckpt, FIRST_CHECKPOINT)
        seg = tc.segment_length * k
        self.next_segment = (step // seg + 1) * seg if seg else 0
        self.progressed(step)

    # ------------------------------------------------------------------ updates
    def updates_due(self, env_steps: int) -> int:
        """Updates owed for ``env_steps`` more env steps (the credit keeps rates exact)."""
        self.credit += env_steps * self.train.updates_per_step
        n = int(self.credit)
        self.credit -= n
        return n

    def segment_ends(self, step: int) -> bool:
        """Whether ``step`` completes a segment of every env copy (counted whether or not the
        run can learn yet)."""
        if step < self.next_segment:
            return False
        self.next_segment += self.train.segment_length * self.train.num_envs
        return True

    def replay_updates(self) -> int:
        """ACER's replay updates after a segment: Poisson(replay_ratio)."""
        return int(self.poisson.poisson(self.train.replay_ratio))

    # ------------------------------------------------------------------ periodic work
    def event_due(self, step: int) -> bool:
        """Whether anything periodic may be due at ``step`` (checked after every env step)."""
        return step >= self.next_event

    def log_due(self, step: int) -> bool:
        """Metrics are flushed (and NaN caught) before any evaluation or checkpoint."""
        return step >= min(self.next_log, self.next_eval, self.next_ckpt,
                           self.next_callback) or step >= self.total

    def logged(self, step: int) -> None:
        self.next_log = (step // self.train.log_every + 1) * self.train.log_every

    def eval_due(self, step: int) -> bool:
        if step < self.next_eval:
            return False
        self.next_eval = (step // self.train.eval_every + 1) * self.train.eval_every
        return True

    def checkpoint_due(self, step: int) -> bool:
        if step < self.next_ckpt:
            return False
        self.next_ckpt = (step // self.train.checkpoint_every + 1) * self.train.checkpoint_every
        return True

    def callback_due(self, step: int) -> bool:
        """``learn``'s callbacks are due (besides after every evaluation)."""
        if step < self.next_callback:
            return False
        self.next_callback = (step // self.callback_every + 1) * self.callback_every
        return True

    def progressed(self, step: int) -> None:
        """The periodic work of ``step`` is done: the next look comes within PROGRESS_EVERY."""
        self.next_event = min(self.next_log, self.next_eval, self.next_ckpt,
                              self.next_callback, step + PROGRESS_EVERY, self.total)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {"update_credit": self.credit, "poisson": self.poisson.bit_generator.state}

    def load_state_dict(self, d: dict) -> None:
        self.credit = float(d["update_credit"])
        if "poisson" in d:
            self.poisson.bit_generator.state = d["poisson"]
