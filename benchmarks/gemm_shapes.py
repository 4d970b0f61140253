"""How fast do the update's own GEMM shapes run on this machine, each timed alone?

    python benchmarks/gemm_shapes.py --rounds 3

Issue 11 asks the ACE update to run at >= 60% of the machine's float32 matmul throughput (a
1024x1024 NumPy matmul). An update is a few dozen GEMMs of the network's shapes (batch 64,
widths 300-400, K = 64 for the weight gradients) plus elementwise work (tanh, Adam, Polyak
averaging). This benchmark takes every ``dot_general`` of the update from its jaxpr (forward
and backward, with their exact operand shapes and dimension numbers), times each one alone
under XLA (``reps`` dots per jitted call, so dispatch is amortised, operands in cache) and
under NumPy (OpenBLAS, the library the peak is measured with), and sums the times:
``gemm_efficiency = dot FLOPs / summed dot time / peak`` says how close to the 1024x1024 peak
these shapes get at all. It is indicative, not a strict bound: inside the update XLA fuses
and schedules the dots with their neighbours, which can run them somewhat faster than alone.

The peak is sampled after every round, as in ``offpolicy bench``; the table reports medians
over rounds. Results: ``results/gemm_shapes.{md,csv}``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.throughput import BASE, ENTRIES, this_machine  # noqa: E402

# our throughput entries (DDPG, the three ACE configurations, TD3 and SAC of issue 33),
# named without "ours-"
CONFIGS = {name.removeprefix("ours-"): ENTRIES[name][1:]
           for name in [*BASE, "ours-td3", "ours-sac"]}


def dot_generals(jaxpr) -> list[tuple[tuple, tuple, object]]:
    """(lhs shape, rhs shape, dimension_numbers) of every dot_general in a jaxpr, sub-jaxprs
    (pjit, custom_jvp/vjp, ...) included."""
    from jax.extend import core

    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            lhs, rhs = (v.aval for v in eqn.invars)
            out.append((tuple(lhs.shape), tuple(rhs.shape), eqn.params["dimension_numbers"]))
        for p in eqn.params.values():
            subs = p if isinstance(p, (list, tuple)) else [p]
            for s in subs:
                if isinstance(s, core.ClosedJaxpr):
                    out += dot_generals(s.jaxpr)
                elif isinstance(s, core.Jaxpr):
                    out += dot_generals(s)
    return out


def dot_flops(lhs: tuple, rhs: tuple, dn) -> float:
    """2 x (output elements) x (contracted size) of one dot_general."""
    (lc, rc), (lb, rbd) = dn
    contracted = int(np.prod([lhs[i] for i in lc]))
    batch = int(np.prod([lhs[i] for i in lb]))
    lhs_free = int(np.prod([d for i, d in enumerate(lhs) if i not in lc and i not in lb]))
    rhs_free = int(np.prod([d for j, d in enumerate(rhs) if j not in rc and j not in rbd]))
    return 2.0 * batch * lhs_free * rhs_free * contracted


def time_xla(lhs, rhs, dn, reps: int, trials: int) -> float:
    """Seconds per dot under XLA: ``reps`` dots per jitted call (amortising the dispatch), each
    on its own argument, all arguments the same two buffers (so XLA cannot merge the dots and
    the operands stay in cache, as the activations and weights of an update mostly are)."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal(lhs, dtype=np.float32))
    b = jnp.asarray(rng.standard_normal(rhs, dtype=np.float32))

    @jax.jit
    def f(*args):
        return [jax.lax.dot_general(args[i], args[reps + i], dn) for i in range(reps)]

    args = [a] * reps + [b] * reps
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(trials):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append((time.perf_counter() - t0) / reps)
    return float(np.median(times))


def einsum_spec(lhs_ndim: int, rhs_ndim: int, dn) -> str:
    """The np.einsum subscripts of a dot_general (output: batch, lhs free, rhs free dims)."""
    (lc, rc), (lb, rbd) = dn
    letters = "abcdefghijklmnopqrstuvwxyz"
    ls = list(letters[:lhs_ndim])
    rs = list(letters[lhs_ndim:lhs_ndim + rhs_ndim])
    for i, j in [*zip(lc, rc), *zip(lb, rbd)]:
        rs[j] = ls[i]
    out = [ls[i] for i in lb] + [c for i, c in enumerate(ls) if i not in lc and i not in lb]
    out += [c for j, c in enumerate(rs) if j not in rc and j not in rbd]
    return f"{''.join(ls)},{''.join(rs)}->{''.join(out)}"


def time_numpy(lhs, rhs, dn, reps: int, trials: int) -> float:
    """Seconds per dot with NumPy (OpenBLAS), the issue's reference library for the peak."""
    spec = einsum_spec(len(lhs), len(rhs), dn)
    rng = np.random.default_rng(0)
    a = rng.standard_normal(lhs, dtype=np.float32)
    b = rng.standard_normal(rhs, dtype=np.float32)
    path = np.einsum_path(spec, a, b, optimize="greedy")[0]
    np.einsum(spec, a, b, optimize=path)
    times = []
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(reps):
            np.einsum(spec, a, b, optimize=path)
        times.append((time.perf_counter() - t0) / reps)
    return float(np.median(times))


def time_update(update, state, batch, reps: int) -> float:
    """Seconds per call of the jitted update on one batch, state donated (as in training)."""
    import jax

    key = jax.random.PRNGKey(0)
    state = jax.tree_util.tree_map(lambda x: x.copy(), state)
    for _ in range(3):
        state, _, _ = update(state, batch, key)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    for _ in range(reps):
        state, _, _ = update(state, batch, key)
    jax.block_until_ready(state)
    return (time.perf_counter() - t0) / reps


def measure(name: str, rounds: int, reps: int) -> dict:
    import jax

    from offpolicy import registry
    from offpolicy.training.bench import matmul_gflops, update_flops
    from offpolicy.training.build import build

    algo, over = CONFIGS[name]
    # an entry's ".flag" keys are training fields (--batch-size), the others the algorithm's
    train = {k[1:].replace("-", "_"): v for k, v in over.items() if k.startswith(".")}
    run = registry.resolve(algo, train_overrides={"env": "HalfCheetah-v5", "quiet": True,
                                                  **train},
                           agent_overrides={k: v for k, v in over.items()
                                            if not k.startswith(".")})
    t = build(run)  # the parts: no run needed to trace and time the update
    batch = t.learner.example_batch()[1]
    jaxpr = jax.make_jaxpr(t.agent.update)(t.learner.state, batch, jax.random.PRNGKey(0))
    dots = dot_generals(jaxpr.jaxpr)
    # identical shapes are timed once and counted as often as they occur
    shapes: dict[tuple, int] = {}
    for lhs, rhs, dn in dots:
        key = (lhs, rhs, tuple(tuple(tuple(x) for x in part) for part in dn))
        shapes[key] = shapes.get(key, 0) + 1
    total_flops = update_flops(t, batch)
    dflops = sum(n * dot_flops(lhs, rhs, dn) for (lhs, rhs, dn), n in shapes.items())
    rows = []
    update = jax.jit(t.agent.update, donate_argnums=0)
    update_reps = max(20, int(2e9 / max(total_flops, 1)))  # about 2 GFLOP per timing
    peaks = [matmul_gflops()]
    for rnd in range(1, rounds + 1):
        tx = sum(n * time_xla(lhs, rhs, dn, reps, 5) for (lhs, rhs, dn), n in shapes.items())
        tn = sum(n * time_numpy(lhs, rhs, dn, reps, 5) for (lhs, rhs, dn), n in shapes.items())
        tu = time_update(update, t.learner.state, batch, update_reps)
        peaks.append(matmul_gflops())
        peak = peaks[-1] * 1e9
        rows.append({"round": rnd, "config": name, "dots": len(dots),
                     "distinct_shapes": len(shapes), "dot_gflop": dflops / 1e9,
                     "update_gflop": total_flops / 1e9, "matmul_gflops": peaks[-1],
                     "xla_dot_ms": tx * 1e3, "numpy_dot_ms": tn * 1e3, "update_ms": tu * 1e3,
                     "xla_gemm_efficiency": dflops / tx / peak,
                     "numpy_gemm_efficiency": dflops / tn / peak,
                     "update_efficiency": total_flops / tu / peak,
                     "update_over_gemm": (total_flops / tu) / (dflops / tx)})
        print(f"round {rnd} {name:9s} {len(dots)} dots, {dflops / 1e9:.3f} of "
              f"{total_flops / 1e9:.3f} GFLOP; XLA dots {tx * 1e3:.2f} ms "
              f"(gemm eff {rows[-1]['xla_gemm_efficiency']:.2f}), NumPy {tn * 1e3:.2f} ms "
              f"(gemm eff {rows[-1]['numpy_gemm_efficiency']:.2f}); update {tu * 1e3:.2f} ms "
              f"(eff {rows[-1]['update_efficiency']:.2f}, "
              f"{rows[-1]['update_over_gemm']:.2f}x the GEMMs'); peak {peaks[-1]:.0f} GFLOP/s",
              flush=True)
    return {"rows": rows, "shapes": shapes}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=8, help="independent dots per timed call")
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    p.add_argument("--out-name", default="gemm_shapes",
                   help="the result files' name (.md, .csv), e.g. gemm_shapes_baselines")
    a = p.parse_args()
    from offpolicy.jax_setup import configure_jax

    configure_jax()  # our XLA:CPU defaults, as in training
    a.out_dir.mkdir(parents=True, exist_ok=True)
    rows, shape_lines = [], []
    for name in a.configs:
        res = measure(name, a.rounds, a.reps)
        rows += res["rows"]
        shape_lines.append(f"- {name}: " + "; ".join(
            f"{n}x {list(lhs)}.{list(rhs)}" for (lhs, rhs, _), n in
            sorted(res["shapes"].items(), key=lambda kv: -dot_flops(*kv[0]) * kv[1])[:6]))
    with open(a.out_dir / f"{a.out_name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()})
    def med(cfg, key):
        return float(np.median([r[key] for r in rows if r["config"] == cfg]))

    lines = ["# GEMM shapes of the update, each timed alone, HalfCheetah-v5 (batch 64; TD3 "
             "and SAC 256)", "",
             "Command: `python benchmarks/gemm_shapes.py " + " ".join(sys.argv[1:]) + "`", "",
             f"Machine: {this_machine()}; date {time.strftime('%Y-%m-%d')}; "
             f"XLA_FLAGS `{os.environ.get('XLA_FLAGS', '')}`; medians over {a.rounds} rounds", "",
             "Every dot_general of the update (forward and backward) timed alone and summed. "
             "GEMM efficiency: dot FLOPs / summed time / the 1024x1024 NumPy float32 matmul "
             "peak sampled after each round. Indicative, not a strict bound (inside the update "
             "XLA fuses and schedules dots with their neighbours).", "",
             "Update: the jitted update itself, timed in the same round on one batch (state "
             "donated, as in training); `update / GEMMs` = (update FLOPs / update time) / (dot "
             "FLOPs / summed XLA dot time), i.e. the update's efficiency over its own GEMMs' "
             "(issue bound: >= 0.9).", "",
             "| config | dots | dot GFLOP | update GFLOP | XLA dots ms | XLA GEMM eff | "
             "NumPy dots ms | NumPy GEMM eff | update ms | update eff | update / GEMMs | "
             "peak GFLOP/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for cfg in a.configs:
        first = next(r for r in rows if r["config"] == cfg)
        lines.append(
            f"| {cfg} | {first['dots']} | {first['dot_gflop']:.3f} | {first['update_gflop']:.3f}"
            f" | {med(cfg, 'xla_dot_ms'):.2f} | {med(cfg, 'xla_gemm_efficiency'):.2f} | "
            f"{med(cfg, 'numpy_dot_ms'):.2f} | {med(cfg, 'numpy_gemm_efficiency'):.2f} | "
            f"{med(cfg, 'update_ms'):.2f} | {med(cfg, 'update_efficiency'):.2f} | "
            f"{med(cfg, 'update_over_gemm'):.2f} | {med(cfg, 'matmul_gflops'):.0f} |")
    lines += ["", "Largest GEMMs (count x lhs.rhs shapes):", *shape_lines]
    text = "\n".join(lines) + "\n"
    (a.out_dir / f"{a.out_name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
