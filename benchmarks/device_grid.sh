#!/usr/bin/env bash
# Our entries of a learning grid on a lent GPU machine (the session's `run` tool), inside one
# call's time limit; the run directories, without checkpoints, come back under $OUT.
#
#   bash benchmarks/device_grid.sh SUITE ENV STEPS "SEEDS" "ENTRIES" JOBS LIMIT_S
#
# e.g. (run tool, carry [".whl"], timeout_s 600; LIMIT_S + 60 s for the runs to checkpoint
# after SIGINT + the archive must fit in it):
#   bash benchmarks/device_grid.sh baselines-peers HalfCheetah-v5 100000 "0 1 2 3 4" \
#        "td3-sb3" 10 500
#
# That machine has JAX (CUDA) but not our MuJoCo and logging wheels: carry them in .whl/
# (gymnasium, farama-notifications, mujoco, glfw, pyopengl, tensorboardX, as `pip download
# --no-deps` fetched them here; mujoco's for its Python). No peer entries: SB3 and SBX run here,
# in .venv-bench. Each run is single-threaded on the CPU side (its acting and env) and shares the
# GPU with the others (XLA's preallocation off). At LIMIT_S the driver gets SIGINT: the runs
# checkpoint and stop; only finished runs count, so size JOBS and the grid to finish inside it.
# Back here: `tar xzf runs.tgz` puts runs_gpu/<suite dir>/<entry>/s<seed> (with s<seed>.log and
# s<seed>.hosts.csv beside it); copy those into the same place under the local runs root and run
# learning.py --report-only: each run's hosts file says it ran on the GPU machine.
set -euo pipefail
if [ $# -ne 7 ]; then
    echo "usage: device_grid.sh SUITE ENV STEPS \"SEEDS\" \"ENTRIES\" JOBS LIMIT_S" >&2
    exit 2
fi
suite=$1 env=$2 steps=$3 seeds=$4 entries=$5 jobs=$6 limit=$7
out=${OUT:?set by the run tool: the folder that comes back}
python=${PYTHON:-python3}
root=${RUNS_ROOT:-runs_gpu}
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
    --out-dir "$out/report" 2>&1 | tee "$out/driver.log" || true
tar czf "$out/runs.tgz" --exclude=checkpoints --exclude=tb --exclude='.*lock' "$root"
ls -la "$out"
