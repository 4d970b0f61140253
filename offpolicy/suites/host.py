"""Which machine ran a run: the suite runner appends a row to ``s<seed>.hosts.csv``, beside
the run directory ``s<seed>`` and its log, each time it starts or resumes the run (``step`` is
where it started), on the machine that runs it (a local process, a Ray node, a lent GPU
machine). A report made later and elsewhere reads these files and says which host ran which
run; the report's CSVs carry them, so that runs rebuilt from committed CSVs keep their host.
The file sits beside the run directory, not in it: ``offpolicy train`` takes only an empty
directory or its own run's files.

The host line names what changes results or speed (CPU model, cores, memory, GPUs, Python and
JAX versions), not the kernel build, which changes with every lease of the same machine.
"""

from __future__ import annotations

import csv
import glob
import os
import platform
import sys
import time
from pathlib import Path

FIELDS = ("step", "date", "host")


def hosts_path(run_dir: Path) -> Path:
    """``OUT/<env>/<entry>/s<seed>.hosts.csv`` for the run directory ``.../s<seed>``."""
    run_dir = Path(run_dir)
    return run_dir.parent / f"{run_dir.name}.hosts.csv"


def _cpu() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def _memory() -> str:
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(x for x in f if x.startswith("MemTotal")).split()[1])
        return f", {kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        return ""


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def gpus() -> str:
    """``"1x NVIDIA H200"`` from the NVIDIA driver's files, "" without one (or when JAX is
    told to use the CPU only, ``JAX_PLATFORMS=cpu``)."""
    if os.environ.get("JAX_PLATFORMS", "").strip().lower() == "cpu":
        return ""
    models = []
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        try:
            with open(info) as f:
                for line in f:
                    if line.startswith("Model:"):
                        models.append(line.split(":", 1)[1].strip())
                        break
        except OSError:
            continue
    return ", ".join(f"{models.count(m)}x {m}" for m in dict.fromkeys(models))


def machine() -> str:
    """CPU model, cores, memory, OS and Python of this machine, in one line."""
    return (f"{_cpu()}, {_cores()} cores{_memory()}, {platform.system()} {platform.release()}, "
            f"Python {sys.version.split()[0]}")


def host() -> str:
    """This machine as a run's host: CPU, cores, memory, GPUs, Python and JAX versions (of the
    interpreter that records it: the suite's driver; a peer library's run, in its own venv,
    shares the machine but not necessarily these versions)."""
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"{_cpu()}, {_cores()} cores{_memory()}"]
    if gpus():
        parts.append(gpus())
    parts.append(f"Python {sys.version.split()[0]}")
    try:
        parts.append(f"JAX {version('jax')}")
    except PackageNotFoundError:
        pass
    return ", ".join(parts)


def record_start(run_dir: Path, step: int) -> None:
    """Append this machine to the run's hosts file: the run (re)starts here at ``step``."""
    path = hosts_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0  # (an empty file: a crash at creation)
    with open(path, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(FIELDS)
        w.writerow([int(step), time.strftime("%Y-%m-%d %H:%M"), host()])


def read_starts(run_dir: Path) -> list[dict[str, str]]:
    """The run's recorded starts (rows of its hosts file), [] when none were recorded."""
    try:
        with open(hosts_path(run_dir), newline="") as f:
            return [r for r in csv.DictReader(f) if r.get("host")]
    except (OSError, csv.Error):
        return []


def write_starts(run_dir: Path, rows: list[dict[str, str]]) -> None:
    """Write the run's hosts file from rows with the :data:`FIELDS` (a run rebuilt from a
    report's CSV)."""
    with open(hosts_path(run_dir), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def hosts_of(run_dir: Path) -> list[str]:
    """The distinct hosts that ran the run since its last start from step 0 (an earlier
    attempt that started again from scratch left nothing in the run), in order."""
    starts = read_starts(run_dir)
    fresh = [i for i, r in enumerate(starts) if r.get("step", "0").strip() in ("0", "")]
    return list(dict.fromkeys(r["host"] for r in starts[fresh[-1] if fresh else 0:]))
