"""Throughput of one configuration: env steps/s with the real loop, the update-only rate,
XLA's FLOP count of the update and the machine's float32 matmul rate (DESIGN.md,
"Performance rules"). Used by ``offpolicy bench`` and benchmarks/throughput.py.

The loop and the update-only rate are measured in alternating segments (loop, updates, loop,
updates, ...) and reported as medians, so a drift of the machine's speed affects both alike;
their ratio is the loop's overhead.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

from offpolicy import registry
from offpolicy.errors import OffpolicyError


def matmul_gflops(reps: int = 20) -> float:
    """GFLOP/s of a 1024x1024 float32 NumPy matmul (median of ``reps``)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 1024), dtype=np.float32)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * 1024**3 / float(np.median(times)) / 1e9


def compiled_flops(compiled) -> float:
    """XLA's FLOP count of one call of a compiled function (``jit(f).lower(...).compile()``)."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("flops", float("nan")))


def update_flops(parts, batch: dict | None = None) -> float:
    """XLA's FLOP count of one update of the agent of ``parts`` (``build()``'s) on one batch
    (default: sampled from its replay)."""
    import jax

    if batch is None:
        batch = parts.learner.sample()[1]
    key = jax.random.PRNGKey(0)
    return compiled_flops(jax.jit(parts.agent.update).lower(parts.learner.state, batch,
                                                            key).compile())


def first_update_step(tc) -> int:
    """A lower bound of the env step of a run's first update (train config ``tc``): the first
    step past its warm-up, with a batch in replay when it waits for one, then as many steps as
    ``--updates-per-step`` takes to owe one update (segments: the first segment end there;
    ACER's replay updates are Poisson, so its first may come later)."""
    k = tc.num_envs
    start = max((tc.warmup_steps // k + 1) * k, tc.batch_size if tc.wait_for_batch else 1)
    start = -(-start // k) * k  # env steps advance k at a time
    if tc.segment_length:
        seg = tc.segment_length * k
        return -(-start // seg) * seg
    calls = math.ceil(1.0 / (k * tc.updates_per_step)) if tc.updates_per_step > 0 else 1
    return start + (max(calls, 1) - 1) * k


MAX_EXTRA_WARMUP = 100_000  # env steps the default warm-up may run on to reach an update


def _no_update(warmup: int, need: int, tc, explicit: bool) -> OffpolicyError:
    why = (f"this run's first update comes at step {need} or later: {tc.warmup_steps} warm-up "
           f"steps" + (f", a batch of {tc.batch_size} in replay" if tc.wait_for_batch else "")
           + f", --updates-per-step {tc.updates_per_step:g}")
    if explicit:
        return OffpolicyError(f"--bench-warmup {warmup}: no update has run by then ({why}); "
                              "pass a larger one, or leave it out (the default warm-up runs "
                              "until the first update)")
    return OffpolicyError(f"no update in the first {warmup} env steps ({why}): nothing to time")


def _warm_up(t, warmup: int | None, need: int) -> int:
    """Train the run ``t`` untimed to ``warmup`` (None: 1000 or ``need``, then on until its
    first update); the step reached. Its first update (and its compilation) must not fall in
    the timed loop: a run without one is closed and refused."""
    tc = t.train_cfg
    explicit = warmup is not None
    t.train(until=warmup if explicit else max(1000, need), final_eval=False)
    start, chunk = t.step, max(100, tc.segment_length) * tc.num_envs
    while not explicit and t.learner.updates == 0 and t.step < start + MAX_EXTRA_WARMUP:
        t.train(until=t.step + chunk, final_eval=False)
    if t.learner.updates == 0:
        t.close()
        raise _no_update(t.step, need, tc, explicit)
    return t.step


def measure(run: registry.RunConfig, steps: int, warmup: int | None = None,
            rounds: int = 3) -> dict:
    """``warmup`` env steps run untimed first; by default 1000, or on until the run's first
    update has run (and compiled), so that the timed loop updates from its first step. A
    ``warmup`` given that ends before the first update is refused."""
    import jax

    from offpolicy.training.run import Run

    big = 10**9
    tc = run.train
    need = first_update_step(tc)
    if warmup is not None and warmup < need:
        raise _no_update(warmup, need, tc, True)
    tc.steps, tc.eval_every, tc.checkpoint_every, tc.quiet = big, big, big, True
    peaks = [matmul_gflops()]
    t = Run(run, None)  # the real loop, timed as it trains
    warmup = _warm_up(t, warmup, need)
    parts = t.parts
    batch = parts.learner.sample()[1]
    key = jax.random.PRNGKey(0)
    spare = jax.tree_util.tree_map(lambda x: x.copy(), parts.learner.state)
    # the timed update; its FLOP count comes from the compile its calls then use (one compile)
    update = jax.jit(parts.agent.update, donate_argnums=0)
    flops = compiled_flops(update.lower(spare, batch, key).compile())
    spare, _, _ = update(spare, batch, key)
    jax.block_until_ready(spare)
    seg = max(steps // rounds, 1)
    loop_rates, update_rates = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        t.train(until=t.step + seg, final_eval=False)
        loop_rates.append(seg / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for _ in range(seg):
            spare, _, _ = update(spare, batch, key)
        jax.block_until_ready(spare)
        update_rates.append(seg / (time.perf_counter() - t0))
        peaks.append(matmul_gflops())  # the peak drifts too (shared host): sample it per round
    # each round's update rate against the peak sampled right after it (the host drifts, and
    # its peak can jump between modes); the reported values are actual samples (lower median)
    effs = [flops * u / (pk * 1e9) for u, pk in zip(update_rates, peaks[1:])]
    env_rate, upd_rate = float(np.median(loop_rates)), float(np.median(update_rates))
    peak = float(np.percentile(peaks, 50, method="lower"))
    return {"lib": "offpolicy", "algo": run.algo, "env": tc.env, "steps": seg * rounds,
            "warmup": warmup, "updates": t.learner.updates,
            "num_envs": tc.num_envs, "pipeline": tc.pipeline,
            "env_steps_per_s": env_rate, "update_per_s": upd_rate,
            "update_per_s_rounds": update_rates,
            "gflop_per_update": flops / 1e9, "matmul_gflops": peak,
            "matmul_gflops_samples": peaks,
            "flop_efficiency": float(np.percentile(effs, 50, method="lower")),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "loop_ratio": float(np.median(np.array(loop_rates) / np.array(update_rates))),
            "compiles": t.compile_count, "jax": jax.__version__,
            "backend": jax.default_backend(), "device": jax.devices()[0].device_kind}
