#!/usr/bin/env bash
# Our entries of a learning grid on a lent GPU machine (the session's `run` tool), inside one
# call's time limit; the run directories come back under $OUT.
#
#   bash benchmarks/device_grid.sh SUITE ENV STEPS "SEEDS" "ENTRIES" JOBS LIMIT_S
#
# e.g. (run tool, carry [".whl"], timeout_s 600; LIMIT_S + 60 s for the runs to checkpoint
# after SIGINT + the archives must fit in it):
#   bash benchmarks/device_grid.sh baselines-peers HalfCheetah-v5 100000 "0 1 2 3 4" \
#        "td3-sb3" 10 500
#
# That machine has JAX (CUDA) but not our MuJoCo and logging wheels: carry them in .whl/
# (gymnasium, farama-notifications, mujoco, glfw, pyopengl, tensorboardX, as `pip download
# --no-deps` fetched them here; mujoco's for its Python). No peer entries: SB3 and SBX run here,
# in .venv-bench. Each run is single-threaded on the CPU side (its acting and env) and shares the
# GPU with the others (XLA's preallocation off). At LIMIT_S the driver gets SIGINT: the runs
# checkpoint and stop.
#
# What comes back ($OUT holds at most 8 files, 16 MiB each, 64 MiB together):
#   driver.log      the driver's output
#   runs.tgz        runs_gpu/<suite dir>/<entry>/s<seed> without checkpoints, with s<seed>.log
#                   and s<seed>.hosts.csv beside each
#   ckpt.tgz.part-* the latest checkpoint (no best) of each run the limit stopped, whole runs
#                   only, as many as fit in CKPT_MIB (default 56) MiB, in 15 MiB parts
# Back here: `tar xzf runs.tgz`, then `cat ckpt.tgz.part-* | tar xzf -` over it; copy
# runs_gpu/<suite dir>/... into the same place under the local runs root. Finished runs count as
# they are; a stopped run resumes here from its checkpoint (its `best` checkpoint stays
# behind: the resume starts without one). Then learning.py --report-only: each run's hosts file
# says which machine started or resumed it. The driver's own report stays on that machine.
set -euo pipefail
if [ $# -ne 7 ]; then
    echo "usage: device_grid.sh SUITE ENV STEPS \"SEEDS\" \"ENTRIES\" JOBS LIMIT_S" >&2
    exit 2
fi
suite=$1 env=$2 steps=$3 seeds=$4 entries=$5 jobs=$6 limit=$7
out=${OUT:?set by the run tool: the folder that comes back}
python=${PYTHON:-python3}
root=${RUNS_ROOT:-runs_gpu}
ckpt_mib=${CKPT_MIB:-56}
mkdir -p "$out"
wheels=${WHEELS:-.whl}
if ls "$wheels"/*.whl >/dev/null 2>&1; then
    "$python" -m pip install -q --no-index --no-deps --target /tmp/site "$wheels"/*.whl
    export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export XLA_PYTHON_CLIENT_PREALLOCATE=false
"$python" -c "import jax; print('jax', jax.__version__, jax.devices())"
# word splitting of seeds and entries is intended
# shellcheck disable=SC2086
timeout -k 60 -s INT "$limit" "$python" benchmarks/learning.py --suite "$suite" --env "$env" \
    --steps "$steps" --seeds $seeds --entries $entries --jobs "$jobs" --runs-root "$root" \
    --out-dir /tmp/device_grid_report 2>&1 | tee "$out/driver.log" || true
# the runs have their own sessions: the driver's KILL at LIMIT_S + 60 leaves any still
# writing its checkpoint; give them up to a minute more before reading their folders
for _ in $(seq 60); do
    pgrep -f -- "--run-dir $root/" >/dev/null 2>&1 || break
    sleep 1
done
# tar's exit 1 (a file changed while read) is not a reason to return nothing
tar czf "$out/runs.tgz" --exclude=checkpoints --exclude=tb --exclude='.*lock' "$root" \
    || [ $? -eq 1 ]
# the latest checkpoint of each run the limit stopped (its eval.csv short of STEPS), while
# they fit; the runs are found by the package's own rules (runner.finished,
# checkpoint.pointer_target), one "RUN<TAB>CHECKPOINT NAME" line each
list=/tmp/device_grid_ckpts
: > "$list"
total=0
if ! "$python" - "$root" "$steps" > /tmp/device_grid_stopped <<'PY'; then
import sys
from pathlib import Path

from offpolicy.suites.runner import finished
from offpolicy.training.checkpoint import pointer_target

root, steps = Path(sys.argv[1]), int(sys.argv[2])
for run in sorted(p for p in root.glob("*/*/s*") if p.is_dir()):
    try:
        if finished(run, steps):  # no eval.csv yet: not finished
            continue
    except Exception as e:  # an unreadable eval.csv: more likely stopped than finished
        print(f"device_grid: {run}: {e}", file=sys.stderr)
    name = pointer_target(run / "checkpoints", "latest")
    if name and (run / "checkpoints" / name).is_dir():
        print(f"{run}\t{name}")
PY
    echo "device_grid: could not list the stopped runs" >&2
fi
while IFS=$'\t' read -r run name; do
    ckpt="$run/checkpoints/$name"
    mib=$(du -sm "$ckpt" 2>/dev/null | cut -f1) || continue  # gone since it was listed
    if [ $((total + mib)) -gt "$ckpt_mib" ]; then
        echo "device_grid: $run's checkpoint ($mib MiB) does not fit; it stays behind" >&2
        continue
    fi
    total=$((total + mib))
    printf '%s\n%s\n' "$run/checkpoints/latest" "$ckpt" >> "$list"
done < /tmp/device_grid_stopped
if [ -s "$list" ]; then
    tar czf /tmp/device_grid_ckpt.tgz -T "$list" || [ $? -eq 1 ]
    split -b 15M -d /tmp/device_grid_ckpt.tgz "$out/ckpt.tgz.part-"
fi
ls -la "$out"
