"""How many times the kernel's OOM killer struck in this process's memory cgroup: read before and after a
child runs, it tells an out-of-memory kill from any other SIGKILL (cgroup v1 and v2)."""

from __future__ import annotations

from pathlib import Path


def oom_kill_count() -> int | None:
    """The kernel's out-of-memory kill count for this process's memory cgroup, if readable: cgroup v2's
    memory.events, else v1's memory.oom_control (a v1 or hybrid machine has both lines in
    /proc/self/cgroup, and v2's unified tree there has no memory controller)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        relative = path.lstrip("/")
        if controllers == "":  # v2
            candidates = [Path("/sys/fs/cgroup") / relative / "memory.events",
                          Path("/sys/fs/cgroup/unified") / relative / "memory.events"]
        elif "memory" in controllers.split(","):  # v1
            candidates = [Path("/sys/fs/cgroup/memory") / relative / "memory.oom_control"]
        else:
            continue
        for candidate in candidates:
            count = _oom_kill_entry(candidate)
            if count is not None:
                return count
    return None


def _oom_kill_entry(path: Path) -> int | None:
    """The `oom_kill N` entry of a cgroup's memory.events (v2) or memory.oom_control (v1)."""
    try:
        for entry in path.read_text().splitlines():
            key, _, value = entry.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None
