#!/usr/bin/env bash
# Issue 71's ACER grid in its pre-registered order (benchmarks/suites/acer-1m.preregistration.md,
# "Order"): seeds 0-2 of every arm on HalfCheetah-v5, then Walker2d-v5, then Hopper-v5, then
# seeds 3-4 of each. Start it once per free core, in the background:
#
#   nohup benchmarks/acer-1m-order.sh > acer-lane.log 2>&1 &
#
# An argument names another grid of the same tasks and order: `acer-1m-threads` (the
# follow-up, pre-registered in benchmarks/suites/acer-1m-threads.preregistration.md).
#
# Drivers share the grid through the runs' lock files; a finished run is skipped and an
# interrupted one resumes, so the same command restarts the grid where it stopped. A 1M-step
# run takes about 6 minutes of one core here.
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-.venv/bin/python}
SUITE=${1:-acer-1m}
grid() { "$PY" benchmarks/learning.py --suite "$SUITE" --steps 1000000 "$@"; }
for seeds in "0 1 2" "0 1 2 3 4"; do
    for env in HalfCheetah-v5 Walker2d-v5 Hopper-v5; do
        # shellcheck disable=SC2086
        grid --seeds $seeds --env "$env"
    done
done
echo "$SUITE: every pre-registered step has run"
