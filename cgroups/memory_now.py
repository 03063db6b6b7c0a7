"""What a task's cgroup holds of memory now, for ``governor run`` to warn its user before a
kill (:mod:`governor.cli.memory_warning`): read from the task's own cgroup directories that the
launch reply named (v2: its directory; v1: its directory in the memory hierarchy, which the
reply names apart), by the user who launched it (the files are world-readable).

Never through the task's process: a process that has exited but is not yet reaped (a zombie)
names the root memory cgroup in ``/proc/<pid>/cgroup``, whose usage is the whole host's
(issue 43, point 3: "task 1 is at 1.4G of its 512.0M memory cap" for a loop using 5M).
"""

from __future__ import annotations

from pathlib import Path

from governor.cgroups.errors import CgroupError
from governor.cgroups.files import read_file
from governor.cgroups.parse import parse_flat_keyed, parse_int

__all__ = ["memory_now"]


def memory_now(directory: str, memory_directory: str | None = None) -> tuple[int, int] | None:
    """``(bytes in use, times held at the soft cap)`` of a task's cgroup: on v2
    ``memory.current`` and ``memory.events``' ``high`` in ``directory``; on v1
    ``memory.usage_in_bytes`` in ``memory_directory``, the task's cgroup in the memory
    hierarchy (its soft limit throttles no one, so held is 0 there). None where neither can be
    read (the task ended, its cgroup removed; a v1 reply without ``memory_directory``). Never
    raises."""
    try:
        path = Path(directory)
        return (parse_int(read_file(path, "memory.current")),
                parse_flat_keyed(read_file(path, "memory.events")).get("high", 0))
    except (CgroupError, ValueError):
        pass
    if memory_directory is None:
        return None
    try:
        return parse_int(read_file(Path(memory_directory), "memory.usage_in_bytes")), 0
    except (CgroupError, ValueError):
        return None
