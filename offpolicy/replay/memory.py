"""How much memory this process may use, and the up-front check that a replay fits in it.

Replay's arrays are mapped lazily (``np.zeros``), so without a check a run would die hours in,
when replay fills up. The limit is the machine's memory, or a lower cgroup limit (containers,
Kubernetes, Slurm jobs and systemd scopes kill a process there, which /proc/meminfo does not
show).
"""

from __future__ import annotations

from pathlib import Path

from offpolicy.errors import OffpolicyError


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _read_stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


_CGROUP_FILES = {  # version: (limit, usage, memory.stat's page-cache key the kernel can drop)
    2: ("memory.max", "memory.current", "inactive_file"),
    1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
}


def _cgroup_memory(root: Path = Path("/sys/fs/cgroup"),
                   self_cgroup: Path = Path("/proc/self/cgroup")) -> tuple[int | None, int | None]:
    """The tightest cgroup memory limit over this process's cgroup and its ancestors, and the
    usage at that level less the inactive page cache (what kubelet and ``docker stats``
    count), in bytes; ``(None, None)`` where no level sets one.

    The process's cgroup comes from ``/proc/self/cgroup`` (v2: the ``0::PATH`` line, under
    ``root``; v1: the line naming the ``memory`` controller, under ``root/memory``). Where
    that path is not mounted (a container sees its own cgroup at the top) the walk starts at
    the top. Containers, Slurm jobs and systemd scopes kill a process at this limit, which
    /proc/meminfo does not show. v1 writes a number near 2^63 for no limit, v2 ``max``."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    paths = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths[2] = parts[2]
        elif "memory" in parts[1].split(","):
            paths[1] = parts[2]
    for version, base in ((2, root), (1, root / "memory")):
        limit_file, usage_file, inactive_key = _CGROUP_FILES[version]
        start = base / paths.get(version, "/").lstrip("/")
        level = start if start.is_dir() else base
        best, seen = None, False
        while True:
            limit = _read_int(level / limit_file)
            seen = seen or (level / limit_file).exists()
            if limit is not None and limit < 2**60 and (best is None or limit < best[0]):
                usage = _read_int(level / usage_file)
                if usage is not None:
                    usage = max(usage - _read_stat(level / "memory.stat", inactive_key), 0)
                best = (limit, usage)
            if level == base or base not in level.parents:
                break
            level = level.parent
        if seen:  # this version's controller is mounted: the other is not consulted
            return best if best is not None else (None, None)
    return None, None


def _meminfo(cgroup_root: Path = Path("/sys/fs/cgroup"),
             self_cgroup: Path = Path("/proc/self/cgroup")) -> dict[str, int]:
    """The memory this process may use, in bytes: /proc/meminfo's MemTotal and MemAvailable,
    lowered to the cgroup's limit and its headroom where there is one (``CgroupLimit`` is then
    set); empty where there is no /proc/meminfo (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f
                    if line.split()[-1:] == ["kB"]}
    except (OSError, ValueError, IndexError):
        return {}
    limit, usage = _cgroup_memory(cgroup_root, self_cgroup)
    if limit is not None and limit < info.get("MemTotal", 2**63):
        info["MemTotal"] = info["CgroupLimit"] = limit
        if usage is not None:
            info["MemAvailable"] = min(info.get("MemAvailable", limit), max(limit - usage, 0))
    return info


def check_memory(capacity: int, per_step: int, meminfo: dict[str, int] | None = None) -> int:
    """Refuse a replay that cannot fit in the memory this process may use once full (the
    arrays are mapped lazily, so without this a run would die hours in, when replay fills
    up), and warn when it would not fit in the memory available now. ``per_step``: bytes per
    stored step of the arrays that stay allocated (the caller adds prioritized replay's);
    temporaries, e.g. of a prioritized re-sort, are not counted. Returns the bytes a full
    replay needs."""
    info = _meminfo() if meminfo is None else meminfo
    need = capacity * per_step
    total, avail = info.get("MemTotal"), info.get("MemAvailable")
    where = ("this container's memory limit (cgroup)" if "CgroupLimit" in info
             else "this machine's memory")
    gb = 1024**3
    if total is not None and need > total:
        raise OffpolicyError(
            f"a full replay of {capacity} steps needs {need / gb:.1f} GiB ({per_step} bytes "
            f"per step), more than {where} of {total / gb:.1f} GiB: lower "
            f"--buffer-size (about {int(0.8 * total / per_step)} steps would use 80%)")
    if avail is not None and need > avail:
        import warnings

        warnings.warn(f"a full replay of {capacity} steps will need {need / gb:.1f} GiB; "
                      f"{avail / gb:.1f} GiB of memory is available now", stacklevel=3)
    return need
