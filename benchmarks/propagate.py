"""What V-RACER's stored-target propagation (ReF-ER Algorithm 3) costs per update, in the
memories a run goes through, against the same function at an earlier revision.

    python benchmarks/propagate.py --rounds 5

After every update, each refreshed step's change of V^tbc is carried back along its episode
(``offpolicy.replay.stored_returns.propagate``): step j gains delta * prod gamma min(1, rho_i)
over the steps in between. How far a change really travels depends on rho: in a full memory
whose policy has moved on (the refer-1m runs hold KL(mu || pi) near 0.3 and 10% of the steps
far-policy), a few dozen steps; with rho near 1 everywhere, the whole episode.

Each regime is a replay of V-RACER's fields holding 1000-step (or 200-step) episodes, rho
drawn log-normal (sigma 0.8 matches the runs' KL of about 0.3, since KL = sigma^2 / 2 for a
shifted Gaussian) and clipped to [1e-3, 1e3] as the importance weight is, or 1 everywhere (no
step refreshed yet: the worst case); batches of V-RACER's size with random changes. Both
implementations replay the same batches on the same memory (its targets restored before each),
alternating within every round. The baseline is ``stored_returns.py`` at ``--baseline-rev``
(default b40ed25, which walked every batch's episodes back together, chunk by chunk, until the
deepest sample's change had died out), read from git. Results: ``results/propagate.{md,csv,png}``.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.throughput import this_machine  # noqa: E402
from offpolicy import registry  # noqa: E402
from offpolicy.replay import stored_returns  # noqa: E402
from offpolicy.replay.removers import OldestEpisode  # noqa: E402
from offpolicy.replay.samplers import Sampler, Uniform  # noqa: E402
from offpolicy.replay.storage import Storage  # noqa: E402
from offpolicy.replay.table import Table  # noqa: E402


class _Storage(Storage):
    """The storage as the baseline revision's ``propagate`` reads it (its offsets private)."""

    _offset = Storage.offset

# name: (memory slots, episode length, episodes stored, sigma of log rho, what it stands for)
REGIMES = {
    "full-moved": (2**18, 1000, 2**18 // 1000 + 3, 0.8,
                   "refer-1m's memory (2^18) full, policy moved on (KL ~0.3: most of a "
                   "1M-step run)"),
    "full-rho1": (2**18, 1000, 2**18 // 1000 + 3, 0.0,
                  "the same memory, rho = 1 everywhere (the worst case: every change "
                  "travels to its episode's start)"),
    "first-episodes": (2**18, 1000, 12, 0.8, "a run's first 12 episodes (about 21 samples "
                                             "per episode and batch)"),
    "short-episodes": (2**16, 200, 2**16 // 200 + 3, 0.8, "2^16 slots of 200-step episodes"),
}


def filled(slots: int, length: int, episodes: int, sigma: float, seed: int):
    """A replay of V-RACER's per-step fields holding ``episodes`` closed episodes (targets by
    Eq. 8; more than fit: the oldest forgotten), and V-RACER's batch size and gamma."""
    rng = np.random.default_rng(seed)
    run = registry.resolve("vracer")
    spec = stored_returns.StoredReturn(run.agent.gamma)
    fields = {"value": ((), np.float32), "v": ((), np.float32, np.nan),
              "v_tbc": ((), np.float32, np.nan), "rho": ((), np.float32, 1.0)}
    table = Table(_Storage(slots, (1,), 1, fields), Sampler(Uniform(seed)), OldestEpisode())
    zero, act = np.zeros(1, np.float32), np.zeros(1, np.float32)
    for _ in range(episodes):
        table.start_episode(zero)
        for t in range(length):
            table.add(act, float(rng.normal()), False, t == length - 1, zero,
                      value=np.float32(rng.normal()))
    buf = table.storage
    buf.extras["rho"][:] = rng.lognormal(0.0, sigma, buf.capacity).clip(1e-3, 1e3)
    for first, last in buf.take_closed_episodes():
        stored_returns.close_episode(buf, spec, first, last)
    return spec, table, run.train.batch_size, run.agent.gamma


def baseline(rev: str):
    """``propagate`` of offpolicy/replay/stored_returns.py at git revision ``rev``."""
    src = subprocess.run(["git", "show", f"{rev}:offpolicy/replay/stored_returns.py"],
                         cwd=HERE.parent, capture_output=True, text=True)
    if src.returncode:
        raise SystemExit(f"propagate.py: cannot read revision {rev}: {src.stderr.strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"stored_returns_{rev}.py"
        path.write_text(src.stdout)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return module.propagate


def timed(fn, buf, spec, batches, closed) -> tuple[float, np.ndarray]:
    """ms per call of ``fn`` over ``batches`` from the closed targets, and the targets after."""
    buf.extras[spec.target][:] = closed
    t0 = time.perf_counter()
    for idx, delta in batches:
        fn(buf, spec, idx, delta)
    ms = (time.perf_counter() - t0) / len(batches) * 1e3
    return ms, buf.extras[spec.target].copy()


def moved(fn, buf, spec, batches, closed) -> float:
    """Mean number of stored targets (of finished episodes) one update changes, as float32
    stores them (untimed)."""
    buf.extras[spec.target][:] = closed
    counts = []
    for idx, delta in batches:
        before = buf.extras[spec.target].copy()
        fn(buf, spec, idx, delta)
        counts.append(int(((buf.extras[spec.target] != before) & np.isfinite(before)).sum()))
    return float(np.mean(counts))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--updates", type=int, default=40, help="batches per regime and round")
    p.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    p.add_argument("--baseline-rev", default="b40ed25")
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.updates < 1:
        p.error("--rounds and --updates must be at least 1")
    a.out_dir.mkdir(parents=True, exist_ok=True)
    old = baseline(a.baseline_rev)
    rows = []
    for name in a.regimes:
        slots, length, episodes, sigma, _ = REGIMES[name]
        spec, table, batch, gamma = filled(slots, length, episodes, sigma, seed=0)
        buf = table.storage
        rng = np.random.default_rng(1)
        batches = [(table.sampler.selector.draw(buf, batch)[0], rng.normal(size=batch) * 10.0)
                   for _ in range(a.updates)]
        closed = buf.extras[spec.target].copy()
        impls = {"current": stored_returns.propagate, a.baseline_rev: old}
        changed = {impl: moved(fn, buf, spec, batches, closed) for impl, fn in impls.items()}
        after = {}
        for r in range(a.rounds):
            pair = list(impls.items())
            for impl, fn in (pair if r % 2 == 0 else pair[::-1]):
                ms, after[impl] = timed(fn, buf, spec, batches, closed)
                rows.append({"regime": name, "implementation": impl, "round": r,
                             "batch": batch, "gamma": gamma, "ms_per_update": ms,
                             "targets_changed_per_update": changed[impl]})
        ok = np.isfinite(closed)
        gap = float(np.max(np.abs(after["current"][ok] - after[a.baseline_rev][ok])))
        for row in rows[-2 * a.rounds:]:
            row["max_gap_to_other"] = gap
        print(f"{name}: " + ", ".join(
            f"{impl} {statistics.median(x['ms_per_update'] for x in rows[-2 * a.rounds:] if x['implementation'] == impl):.2f} ms"  # noqa: E501
            for impl in impls), flush=True)
    with open(a.out_dir / "propagate.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()})
    load = os.getloadavg()[0]  # other work on the machine while this ran
    summary(rows, a, f"{this_machine()}, load average {load:.1f} at the end")
    return 0


def summary(rows: list[dict], a, machine: str) -> None:
    def of(regime, impl, key):
        return [float(r[key]) for r in rows
                if r["regime"] == regime and r["implementation"] == impl]

    def ratios(regime):  # the baseline's time over ours, round by round
        return [o / n for o, n in zip(of(regime, a.baseline_rev, "ms_per_update"),
                                      of(regime, "current", "ms_per_update"))]

    def spread(xs, fmt):
        return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"

    first = rows[0]
    lines = ["# Stored-target propagation (V-RACER, Algorithm 3): cost per update", "",
             "Command: `python benchmarks/propagate.py " + " ".join(sys.argv[1:]) + "`", "",
             f"Machine: {machine}. Batch {first['batch']}, gamma {first['gamma']} (V-RACER's); "
             f"{a.updates} updates per regime and round, {a.rounds} rounds, the two "
             "implementations alternating on the same batches; medians over rounds (min-max), "
             "the speed-up paired within each round. `targets changed`: stored targets of "
             "finished episodes one update changes, as float32 keeps them (mean over a first, "
             "untimed pass, which also warms both up). `max gap`: the largest difference "
             "between the two implementations' targets after the same updates (each drops a "
             "change once it is below 1e-6 of its episode's largest).", "",
             f"| regime | memory | current ms | {a.baseline_rev} ms | speed-up | targets "
             f"changed (current) | targets changed ({a.baseline_rev}) | max gap |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name in a.regimes:
        lines.append(
            f"| {name} | {REGIMES[name][4]} | {spread(of(name, 'current', 'ms_per_update'), '.2f')}"
            f" | {spread(of(name, a.baseline_rev, 'ms_per_update'), '.2f')} | "
            f"{spread(ratios(name), '.2f')}x | "
            f"{of(name, 'current', 'targets_changed_per_update')[0]:.0f} | "
            f"{of(name, a.baseline_rev, 'targets_changed_per_update')[0]:.0f} | "
            f"{of(name, 'current', 'max_gap_to_other')[0]:.1e} |")
    (a.out_dir / "propagate.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    x = np.arange(len(a.regimes))
    for i, impl in enumerate(("current", a.baseline_rev)):
        ax.bar(x + (i - 0.5) * 0.38,
               [statistics.median(of(n, impl, "ms_per_update")) for n in a.regimes],
               0.38, label=impl)
    ax.set_xticks(x, a.regimes)
    ax.set_ylabel("ms per update (median)")
    ax.set_title("V-RACER stored-target propagation, batch 256")
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out_dir / "propagate.png")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
