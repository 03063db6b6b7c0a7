"""What a task's cgroup holds of memory now, for ``governor run`` to warn its user before a
kill (:mod:`governor.cli.memory_warning`): read from the cgroup directory the launch reply
named (v2), or from the task's memory hierarchy (v1, whose memory lives in another tree than
the directory the reply names), by the user who launched it (the files are world-readable).
"""

from __future__ import annotations

from pathlib import Path

from governor.cgroups.detect import cgroup_dirs
from governor.cgroups.errors import CgroupError
from governor.cgroups.files import read_file
from governor.cgroups.parse import parse_flat_keyed, parse_int

__all__ = ["memory_now"]


def memory_now(directory: str, pid: int) -> tuple[int, int] | None:
    """``(bytes in use, times held at the soft cap)`` of the cgroup of task ``pid`` whose
    directory the launch reply named: on v2 ``memory.current`` and ``memory.events``' ``high``
    in ``directory``; on v1 ``memory.usage_in_bytes`` in the memory hierarchy ``pid`` is in
    (its soft limit throttles no one, so held is 0 there). None where neither can be read (the
    task ended, its cgroup removed). Never raises."""
    path = Path(directory)
    try:
        return (parse_int(read_file(path, "memory.current")),
                parse_flat_keyed(read_file(path, "memory.events")).get("high", 0))
    except (CgroupError, ValueError):
        pass
    try:
        memory = cgroup_dirs(pid).get("memory")
        return None if memory is None else (parse_int(read_file(memory, "memory.usage_in_bytes")), 0)
    except (CgroupError, ValueError):
        return None
