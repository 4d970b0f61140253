"""One short loop per update cadence (Algorithm 1 of the papers, K env copies at once).

Every loop steps the collector's K env copies and asks the :class:`Schedule` what is due; the
``run`` does the periodic work (``run.periodic(step)``: logging, evaluation, checkpoints,
progress; True when a signal asks it to stop) and says whether updates may start
(``run.can_learn(step)``). Each returns with ``run.step`` set to the step it reached, also when
it fails.

* :func:`per_step`: ``updates_per_step`` updates after every env step (K env steps owe K x as
  many), the last one fused with the policy for the next observations;
* :func:`segments`: with ``--segment-length`` k, every k steps of each copy one update on the
  segment just collected (agents that learn on segments) plus Poisson(``replay_ratio``)
  updates from replay (ACER's Algorithm 1);
* :func:`pipelined`: ``--pipeline``, the update of step t is dispatched on a batch sampled
  *before* transition t was stored, and the env steps while it runs; the next action waits for
  it and uses its parameters. The departure from Algorithm 1: update t cannot sample
  transition t (in the papers' order it could), one transition out of a replay of up to a
  million.
"""

from __future__ import annotations


def per_step(run, total: int) -> None:
    collector, learner, schedule = run.collector, run.learner, run.schedule
    k, step = collector.num_envs, run.step
    greedy = None  # (action, info) for the current observations from the fused update
    try:
        while step < total:
            action, info = collector.act(step, greedy)
            greedy = None
            collector.step(action, info, step)
            step += k
            if run.can_learn(step):
                n = schedule.updates_due(k)
                if n:
                    for _ in range(n - 1):
                        learner.update()
                    greedy = learner.update_and_act(collector.policy_input)
                    collector.set_acting(learner.acting_state())
            if (schedule.event_due(step) or run.stopping) and run.periodic(step):
                return
    finally:
        run.step = step


def segments(run, total: int) -> None:
    collector, learner, schedule = run.collector, run.learner, run.schedule
    k, step = collector.num_envs, run.step
    length = run.train_cfg.segment_length
    on_policy = learner.data.kind == "sequences" and run.contract.learns_on_segments
    try:
        while step < total:
            action, info = collector.act(step)
            collector.step(action, info, step)
            step += k
            if schedule.segment_ends(step) and run.can_learn(step):
                if on_policy:
                    learner.update_segment(length)
                for _ in range(schedule.replay_updates()):
                    learner.update()
                collector.set_acting(learner.acting_state())
            if (schedule.event_due(step) or run.stopping) and run.periodic(step):
                return
    finally:
        run.step = step


def pipelined(run, total: int) -> None:
    collector, learner, schedule = run.collector, run.learner, run.schedule
    k, step = collector.num_envs, run.step
    pending = None  # the update in flight
    try:
        while step < total:
            action, info = collector.act(step)
            n = schedule.updates_due(k) if run.can_learn(step + k) else 0
            if n:  # dispatched before the env step: they overlap
                learner.finish(pending)
                pending = None
                for _ in range(n - 1):
                    learner.update()
                pending = learner.dispatch()
                collector.set_acting(learner.acting_state())
            collector.step(action, info, step)
            step += k
            if schedule.event_due(step) or run.stopping:
                learner.finish(pending)
                pending = None
                if run.periodic(step):
                    return
    finally:  # the run always holds a live state, never a donated one
        learner.finish(pending)
        run.step = step


def choose(train):
    """The loop of a run's cadence (remote collectors: :func:`distributed.distributed`)."""
    if train.num_collectors:
        from offpolicy.training.distributed import distributed

        return distributed
    if train.segment_length:
        return segments
    return pipelined if train.pipeline else per_step
