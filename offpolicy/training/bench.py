"""Throughput of one configuration: env steps/s with the real loop, the update-only rate,
XLA's FLOP count of the update and the machine's float32 matmul rate (DESIGN.md,
"Performance rules"). Used by ``offpolicy bench`` and benchmarks/throughput.py.

The loop and the update-only rate are measured in alternating segments (loop, updates, loop,
updates, ...) and reported as medians, so a drift of the machine's speed affects both alike;
their ratio is the loop's overhead.
"""

from __future__ import annotations

import time

import numpy as np

from offpolicy import registry


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


def update_flops(trainer) -> float:
    """XLA's FLOP count of one update of ``trainer``'s agent on one batch."""
    import jax

    batch = trainer.replay.sample(trainer.train_cfg.batch_size)
    cost = jax.jit(trainer.agent.update).lower(trainer.state, batch).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("flops", float("nan")))


def measure(run: registry.RunConfig, steps: int, warmup: int, rounds: int = 3) -> dict:
    import jax

    from offpolicy.training.loop import Trainer

    big = 10**9
    tc = run.train
    tc.steps, tc.eval_every, tc.checkpoint_every, tc.quiet = big, big, big, True
    peaks = [matmul_gflops()]
    t = Trainer(run, None)
    t.train(until=warmup, final_eval=False)  # fills replay, compiles
    flops = update_flops(t)
    update = jax.jit(t.agent.update, donate_argnums=0)
    batch = t.replay.sample(tc.batch_size)
    spare = jax.tree_util.tree_map(lambda x: x.copy(), t.state)
    spare, _ = update(spare, batch)
    jax.block_until_ready(spare)
    seg = max(steps // rounds, 1)
    loop_rates, update_rates = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        t.train(until=t.step + seg, final_eval=False)
        loop_rates.append(seg / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for _ in range(seg):
            spare, _ = update(spare, batch)
        jax.block_until_ready(spare)
        update_rates.append(seg / (time.perf_counter() - t0))
        peaks.append(matmul_gflops())  # the peak drifts too (shared host): sample it per round
    env_rate, upd_rate, peak = (float(np.median(x)) for x in (loop_rates, update_rates, peaks))
    return {"lib": "offpolicy", "algo": run.algo, "env": tc.env, "steps": seg * rounds,
            "env_steps_per_s": env_rate, "update_per_s": upd_rate,
            "gflop_per_update": flops / 1e9, "matmul_gflops": peak,
            "flop_efficiency": flops * upd_rate / (peak * 1e9),
            "loop_ratio": float(np.median(np.array(loop_rates) / np.array(update_rates))),
            "compiles": t.compile_count, "jax": jax.__version__,
            "backend": jax.default_backend()}
