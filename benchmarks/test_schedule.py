"""The order `make test` starts its test files in (``LONGEST_FIRST`` in tests/conftest.py),
checked against a measured run.

Reads the per-test times that ``pytest --durations=0`` printed (setup, call and teardown), sums
them per file, and replays the files through greedy list scheduling on two workers (each file
goes whole to the worker that frees first, as ``--dist loadfile`` does) in three orders: xdist's
default (files with most tests first), ``LONGEST_FIRST`` then alphabetical, and the exact
longest-first order of this run. The replay of xdist's order should land near the run's own wall
time; that is the check that the model holds.

    python benchmarks/test_schedule.py PYTEST_LOG [--workers 2]
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

DURATION = re.compile(r"^([\d.]+)s (?:call|setup|teardown)\s+(tests/[\w/]+\.py)::", re.M)


def file_durations(log: str) -> dict[str, float]:
    """Seconds per test file, summed over its tests' setup, call and teardown."""
    total: dict[str, float] = collections.defaultdict(float)
    for seconds, path in DURATION.findall(log):
        total[path] += float(seconds)
    return dict(total)


def tests_per_file() -> collections.Counter:
    """The default suite's tests per file, as pytest collects them here."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return collections.Counter(line.split("::")[0] for line in out.splitlines() if "::" in line)


def makespan(order: list[str], seconds: dict[str, float], workers: int) -> list[float]:
    """Each worker's busy time when files start in ``order`` on the worker that frees first."""
    busy = [0.0] * workers
    for path in order:
        i = min(range(workers), key=busy.__getitem__)
        busy[i] += seconds.get(path, 0.0)
    return busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="output of pytest --durations=0")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from conftest import LONGEST_FIRST

    seconds = file_durations(args.log.read_text())
    if not seconds:
        sys.exit(f"{args.log}: no '--durations=0' lines found")
    count = tests_per_file()
    alphabetical = sorted(count)
    listed = ["tests/" + name for name in LONGEST_FIRST]
    orders = {
        "xdist default (most tests first)": sorted(alphabetical, key=lambda f: -count[f]),
        "LONGEST_FIRST": listed + [f for f in alphabetical if f not in listed],
        "exact longest first": sorted(alphabetical, key=lambda f: -seconds.get(f, 0.0)),
    }
    print(f"{sum(seconds.values()):.0f} s of tests in {len(seconds)} files, "
          f"{args.workers} workers")
    for name, order in orders.items():
        busy = makespan(order, seconds, args.workers)
        print(f"{name:34s} {max(busy):7.0f} s  (workers {', '.join(f'{b:.0f}' for b in busy)})")
    print("longest files:")
    for path in orders["exact longest first"][:14]:
        print(f"  {seconds[path]:7.1f} s  {count[path]:3d} tests  {path}")


if __name__ == "__main__":
    main()
