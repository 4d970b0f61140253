"""How well `make test` spreads its test files over two workers, replayed from a measured run.

Reads the per-test times that ``pytest --durations=0`` printed (setup, call and teardown
summed per test) and replays the suite on two workers as pytest-xdist 3.8's ``--dist loadfile``
schedules it (``xdist/scheduler/loadscope.py``): each file goes whole to one worker; at the start
each worker gets one file, and one more while it has at most two tests pending; afterwards a
worker gets the next file whenever a test of its completes and at most two of its tests are
still pending (the running one included). The tests that start Ray take turns (the ``ray_turn``
fixture and ``test_distributed_ray.py``'s module fixture, tests/_helpers.py
``one_ray_at_a_time``): a worker whose next test needs Ray waits while the other holds it.
Tests are taken in the collection order of this checkout; a test absent from the log counts 0 s.

Two file orders are replayed: xdist's default (files with most tests first), which `make test`
uses, and the exact longest-first order of the logged run; and a perfect split (half the work
each) is printed beside them. The replay of xdist's order should land near the run's own wall
time; that is the check that the model holds.

    python benchmarks/test_schedule.py PYTEST_LOG
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATION = re.compile(r"^([\d.]+)s (?:call|setup|teardown)\s+(tests/\S.*?)\s*$", re.M)
# the tests that hold the run's one Ray (a file name alone: its module fixture holds it for
# all of its tests, which run back to back on one worker)
RAY_TESTS = ("tests/test_readme.py::test_readme_command_line_block_runs_in_order",
             "tests/test_suites.py::test_ray_dispatch_survives_a_lost_node")
RAY_FILES = ("tests/test_distributed_ray.py",)
HANDOFF = 2  # xdist hands a worker its next file once it has at most this many tests pending


def test_durations(log: str) -> dict[str, float]:
    """Seconds per test id, its setup, call and teardown summed."""
    total: dict[str, float] = collections.defaultdict(float)
    for seconds, nodeid in DURATION.findall(log):
        total[nodeid] += float(seconds)
    return dict(total)


def collected() -> dict[str, list[str]]:
    """The default suite's test ids per file, in collection order."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    files: dict[str, list[str]] = collections.defaultdict(list)
    for line in out.splitlines():
        if "::" in line:
            files[line.split("::")[0]].append(line.strip())
    return dict(files)


def replay(order: list[str], tests: dict[str, list[str]], seconds: dict[str, float],
           workers: int = 2) -> list[float]:
    """Each worker's finishing time when the files are queued in ``order``."""
    queue = collections.deque(order)
    todo: list[collections.deque] = [collections.deque() for _ in range(workers)]
    clock = [0.0] * workers
    ray_free_at, ray_holder = 0.0, None

    def hand_out(w: int) -> None:
        if queue and len(todo[w]) <= HANDOFF:
            todo[w].extend(tests[queue.popleft()])

    for w in range(workers):
        hand_out(w)
    for w in range(workers):
        hand_out(w)
    while any(todo):
        w = min((k for k in range(workers) if todo[k]), key=clock.__getitem__)
        test = todo[w][0]
        path = test.split("::")[0]
        if test in RAY_TESTS or path in RAY_FILES:
            if ray_holder not in (None, w) and ray_free_at > clock[w]:
                clock[w] = ray_free_at  # wait for the other worker's Ray to go
            if ray_holder != w or ray_free_at <= clock[w]:
                span = ([t for t in todo[w] if t.split("::")[0] == path]
                        if path in RAY_FILES else [test])
                ray_holder, ray_free_at = w, clock[w] + sum(seconds.get(t, 0.0) for t in span)
        clock[w] += seconds.get(test, 0.0)
        todo[w].popleft()
        hand_out(w)
    return clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="output of pytest --durations=0")
    args = parser.parse_args()
    seconds = test_durations(args.log.read_text())
    if not seconds:
        sys.exit(f"{args.log}: no '--durations=0' lines found")
    tests = collected()
    per_file = {f: sum(seconds.get(t, 0.0) for t in ids) for f, ids in tests.items()}
    alphabetical = sorted(tests)
    orders = {
        "xdist default (most tests first)": sorted(alphabetical, key=lambda f: -len(tests[f])),
        "exact longest first": sorted(alphabetical, key=lambda f: -per_file[f]),
    }
    total = sum(per_file.values())
    print(f"{total:.0f} s of tests in {len(tests)} files, 2 workers")
    print(f"{'perfect split':34s} {total / 2:7.0f} s")
    for name, order in orders.items():
        clock = replay(order, tests, seconds)
        print(f"{name:34s} {max(clock):7.0f} s  (workers end at "
              f"{', '.join(f'{c:.0f}' for c in clock)})")
    print("longest files:")
    for path in orders["exact longest first"][:14]:
        print(f"  {per_file[path]:7.1f} s  {len(tests[path]):3d} tests  {path}")


if __name__ == "__main__":
    main()
