#!/usr/bin/env bash
# The pre-registered long grids on this 2-core machine: two lanes, one run each at a time
# (DESIGN.md, "Decisive runs"; each grid's order is in its pre-registration).
#
#   benchmarks/lanes.sh start    # start both lanes in the background; each resumes where it
#                                # stopped (a finished run is skipped, an unfinished one resumes)
#   benchmarks/lanes.sh status   # what each lane runs now, and how far it has come
#   benchmarks/lanes.sh pause    # stop every process of both lanes (for a timing measurement
#                                # or the clean-clone test run), drivers and runs alike
#   benchmarks/lanes.sh resume   # and let them go on
#   benchmarks/lanes.sh stop     # end both lanes (an unfinished run resumes at the next start)
#   benchmarks/lanes.sh plan     # the commands each lane runs, in order
#
# Each action takes the lanes to act on (default: A B).
#
# Lane A runs issue 68's refer-1m (benchmarks/refer-1m-order.sh), then issue 71's grids; lane B
# runs issue 71's grids in DESIGN.md's order (acer-1m-threads, aql-fig2-500k on cheetah-run and
# walker-walk, ace-1m's seeds 0-2 and then 3-4), then refer-1m. Two drivers on one grid share
# it through the runs' lock files, so a lane whose grids are done joins the other lane's.
#
# Each lane's output goes to $LANES_DIR/<lane>.log and its process group to <lane>.pid
# (LANES_DIR: benchmarks/runs/lanes by default). Pausing stops the whole process tree of a lane:
# its order script, the learning.py driver, the run and what the run started (Ray's processes).
SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.." || exit 2
LANES_DIR=${LANES_DIR:-benchmarks/runs/lanes}
PY=$(printf %q "${PYTHON:-.venv/bin/python}")

refer() { echo "benchmarks/refer-1m-order.sh"; }
issue71() {
    echo "benchmarks/acer-1m-order.sh acer-1m-threads"
    for env in dm_control/cheetah-run-v0 dm_control/walker-walk-v0; do
        echo "$PY benchmarks/learning.py --suite aql-fig2-500k --steps 500000 --seeds 0 1 2 --env $env"
    done
    echo "$PY benchmarks/learning.py --suite ace-1m --steps 1000000 --seeds 0 1 2"
    echo "$PY benchmarks/learning.py --suite ace-1m --steps 1000000 --seeds 0 1 2 3 4"
}
steps() {  # the commands of lane $1, in order
    case $1 in
        A) refer; issue71 ;;
        B) issue71; refer ;;
    esac
}

alive() {  # lane $1 is running: its pid file names a live session leader that runs `bash -c`
    local pid
    pid=$(cat "$LANES_DIR/$1.pid" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    # a finished lane's pid may have gone to another process since
    [[ $(ps -o sid= -p "$pid" | tr -d ' ') == "$pid" ]] || return 1
    [[ $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) == "bash -c "* ]]
}

stat_of() {  # the state of process $1 (ps's STAT: R, S, T, Z...), empty once it is gone
    ps -o stat= -p "$1" 2>/dev/null | tr -d ' '
}

living() {  # those of the pids $@ that still run (not gone, not a zombie)
    local p state
    for p in "$@"; do
        state=$(stat_of "$p")
        [[ -n $state && $state != Z* ]] && echo "$p"
    done
}

tree() {  # pid $1 and all its descendants
    local child
    echo "$1"
    for child in $(pgrep -P "$1"); do
        tree "$child"
    done
}

signal_lanes() {  # send signal $1 to every process of each running lane of LANES
    local lane pids new round
    for lane in "${LANES[@]}"; do
        alive "$lane" || continue
        pids=""
        # again until the tree holds no process it has not had: one forked in between (the
        # driver starting the next run, a run starting Ray) is caught by the next round
        for round in 1 2 3 4 5; do
            new=$(comm -13 <(tr ' ' '\n' <<< "$pids" | sort) \
                           <(tree "$(cat "$LANES_DIR/$lane.pid")" | sort))
            [[ -z $new ]] && break
            # shellcheck disable=SC2086
            kill "-$1" $new 2>/dev/null
            pids="$pids $new"
        done
        echo "lane $lane: SIG$1 to $(echo $pids | wc -w) processes"
    done
}

ACTION=${1:-}
shift
LANES=("$@")
[[ ${#LANES[@]} -eq 0 ]] && LANES=(A B)
for lane in "${LANES[@]}"; do
    if [[ $lane != A && $lane != B ]]; then
        echo "lanes.sh: no lane '$lane' (the lanes: A, B)" >&2
        exit 2
    fi
done

case $ACTION in
    start)
        mkdir -p "$LANES_DIR"
        for lane in "${LANES[@]}"; do
            if alive "$lane"; then
                echo "lane $lane: running already (pid $(cat "$LANES_DIR/$lane.pid"))"
                continue
            fi
            mapfile -t cmds < <(steps "$lane")
            # the lane's last act: its pid file goes, so that the pid, once free, names nothing
            script=$(printf '%s\n' "${cmds[@]}" "rm -f $(printf %q "$LANES_DIR/$lane.pid")")
            # its own session, so that `stop` ends the lane's process group and nothing else
            setsid nohup bash -c "$script" >> "$LANES_DIR/$lane.log" 2>&1 < /dev/null &
            echo $! > "$LANES_DIR/$lane.pid"
            echo "lane $lane: started (pid $!, log $LANES_DIR/$lane.log)"
        done
        ;;
    pause) signal_lanes STOP ;;
    resume) signal_lanes CONT ;;
    stop)
        for lane in "${LANES[@]}"; do
            alive "$lane" || continue
            pid=$(cat "$LANES_DIR/$lane.pid")
            pids=$(tree "$pid")
            # shellcheck disable=SC2086
            kill -CONT $pids 2>/dev/null  # a paused run cannot checkpoint
            # the order script and the driver; the driver passes it on to its run, which
            # writes its checkpoint and lets go of its lock (it has a session of its own)
            kill -TERM -- "-$pid" 2>/dev/null
            # a `start` right after must find the run free, or it would skip it
            for _ in $(seq 600); do
                # shellcheck disable=SC2086
                [[ -z $(living $pids) ]] && break
                sleep 0.5
            done
            # shellcheck disable=SC2086
            left=$(living $pids)
            if [[ -n $left ]]; then
                echo "lane $lane: still running after 5 minutes: $(echo $left)" >&2
                exit 1
            fi
            rm -f "$LANES_DIR/$lane.pid"
            echo "lane $lane: stopped"
        done
        ;;
    status)
        for lane in "${LANES[@]}"; do
            if ! alive "$lane"; then
                echo "lane $lane: not running"
                continue
            fi
            pid=$(cat "$LANES_DIR/$lane.pid")
            state=running
            [[ $(stat_of "$pid") == T* ]] && state=paused
            echo "lane $lane ($state): $(grep -E '\] (start|done) ' "$LANES_DIR/$lane.log" | tail -n 1)"
            for p in $(tree "$pid"); do
                dir=$(tr '\0' '\n' < "/proc/$p/cmdline" 2>/dev/null | grep -A1 -x -- --run-dir |
                      tail -n 1)
                if [[ -n $dir && -f $dir/eval.csv ]]; then
                    echo "  $dir: last evaluation at step $(tail -n 1 "$dir/eval.csv" | cut -d, -f1)"
                fi
            done
        done
        ;;
    plan)
        for lane in "${LANES[@]}"; do
            echo "lane $lane:"
            steps "$lane" | sed 's/^/  /'
        done
        ;;
    *)
        # the usage is this file's opening comment
        awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$SELF"
        exit 2
        ;;
esac
