"""benchmarks/lanes.sh: the two background lanes of the pre-registered grids. Pausing must stop
a lane's whole process tree (a paused driver whose run kept going once spoiled the wall times
of two acer-1m-threads runs), and every command a lane runs must name a grid that exists."""

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LANES = ROOT / "benchmarks" / "lanes.sh"
sys.path.insert(0, str(ROOT))

from benchmarks import learning  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")


def _lanes(tmp_path, *args):
    return subprocess.run(["bash", str(LANES), *args], capture_output=True, text=True,
                          env=dict(os.environ, LANES_DIR=str(tmp_path)), timeout=60)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _tree(pid: int) -> list[int]:
    out = [pid]
    for child in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                text=True).stdout.split():
        out += _tree(int(child))
    return out


# a driver as benchmarks/learning.py is one: its run in a session of its own (the runner's
# start_new_session), a TERM passed on to the run, which ends before the driver does
DRIVER = """
setsid bash -c 'sleep 120 & sleep 120; wait' &
run=$!
trap 'kill -TERM -- -$run; wait $run; exit 143' TERM
wait $run
"""


def test_pause_stops_a_lanes_whole_tree_and_resume_and_stop_undo_it(tmp_path):
    """Pausing reaches the run in its own session (a pause of the lane's process group alone
    would miss it), and `stop` returns only once the run has ended, its pid file gone."""
    (tmp_path / "driver.sh").write_text(DRIVER)
    # a lane as `start` makes one: `bash -c` in a session of its own, the driver under it
    lane = subprocess.Popen(["setsid", "bash", "-c", f"bash {tmp_path / 'driver.sh'}; true"])
    try:
        (tmp_path / "A.pid").write_text(f"{lane.pid}\n")
        deadline = time.time() + 10
        while len(_tree(lane.pid)) < 5 and time.time() < deadline:
            time.sleep(0.05)
        tree = _tree(lane.pid)
        assert len(tree) == 5, tree
        run = tree[2]
        assert os.getsid(run) == run != os.getsid(lane.pid) == lane.pid  # two sessions
        r = _lanes(tmp_path, "pause", "A")
        assert r.returncode == 0 and "lane A: SIGSTOP to 5 processes" in r.stdout, r
        assert all(_state(p) == "T" for p in tree)
        assert "lane A (paused)" in _lanes(tmp_path, "status", "A").stdout
        assert "lane B: not running" in _lanes(tmp_path, "status").stdout
        assert "lane A" not in _lanes(tmp_path, "status", "B").stdout
        assert _lanes(tmp_path, "resume").returncode == 0
        assert all(_state(p) != "T" for p in tree)
        _lanes(tmp_path, "pause")  # `stop` ends a paused lane too
        r = _lanes(tmp_path, "stop", "A")
        assert r.returncode == 0 and "lane A: stopped" in r.stdout, r
        # when `stop` returns the run has ended, not only the processes it signalled
        assert not any(Path(f"/proc/{p}").exists() and _state(p) != "Z" for p in tree)
        assert not (tmp_path / "A.pid").exists()
        lane.wait(timeout=10)
    finally:
        if lane.poll() is None:
            os.killpg(lane.pid, 9)
        subprocess.run(["pkill", "-9", "-f", "sleep 120"], check=False)


def test_a_pid_file_that_names_no_lane_names_nothing(tmp_path):
    """A finished lane's pid, once another process has it, is not that lane: no signal."""
    other = subprocess.Popen(["sleep", "60"])  # alive, but no session leader running bash -c
    try:
        (tmp_path / "A.pid").write_text(f"{other.pid}\n")
        assert "lane A: not running" in _lanes(tmp_path, "status").stdout
        assert _lanes(tmp_path, "pause", "A").stdout == ""
        assert _state(other.pid) != "T"
        assert "running already" not in _lanes(tmp_path, "stop", "A").stdout
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_lane_that_is_not_there_is_one_line_and_exit_2(tmp_path):
    r = _lanes(tmp_path, "start", "C")
    assert r.returncode == 2 and r.stderr.strip() == "lanes.sh: no lane 'C' (the lanes: A, B)"
    assert not (tmp_path / "C.pid").exists() and not (tmp_path / "A.pid").exists()
    # the usage, also from another directory by a relative path
    r = subprocess.run(["bash", "./lanes.sh", "launch"], cwd=LANES.parent, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "benchmarks/lanes.sh pause" in r.stdout, r


def test_each_lane_runs_every_pre_registered_long_grid_and_only_grids_that_exist(tmp_path):
    r = _lanes(tmp_path, "plan")
    assert r.returncode == 0
    plans, lane = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("lane "):
            lane = line.split()[1].rstrip(":")
            plans[lane] = []
        else:
            plans[lane].append(shlex.split(line))
    grids = set(learning.grids())
    suites = {}
    for lane, cmds in plans.items():
        suites[lane] = []
        for cmd in cmds:
            if cmd[0].endswith("-order.sh"):
                assert (ROOT / cmd[0]).is_file()
                suites[lane].append(cmd[1] if len(cmd) > 1 else Path(cmd[0]).name[:-9])
            else:
                suites[lane].append(cmd[cmd.index("--suite") + 1])
            assert suites[lane][-1] in grids
    assert suites["A"][0] == "refer-1m" and suites["B"][0] == "acer-1m-threads"
    assert set(suites["A"]) == set(suites["B"]) == {"refer-1m", "acer-1m-threads",
                                                    "aql-fig2-500k", "ace-1m"}
