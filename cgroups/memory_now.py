"""What a task's cgroup holds of memory now, for ``governor run`` to warn its user before a
kill (:mod:`governor.cli.memory_warning`): read from the cgroup directory the launch reply
named, by the user who launched it (cgroup v2 files are world-readable).
"""

from __future__ import annotations

from pathlib import Path

from governor.cgroups.errors import CgroupError
from governor.cgroups.files import read_file
from governor.cgroups.parse import parse_flat_keyed, parse_int

__all__ = ["memory_now"]


def memory_now(directory: str) -> tuple[int, int] | None:
    """``(memory.current bytes, memory.events "high" count)`` of the v2 cgroup at
    ``directory``; None where they cannot be read (a v1 hierarchy, whose memory lives in
    another tree; the cgroup removed as the task ended). Never raises."""
    path = Path(directory)
    try:
        return (parse_int(read_file(path, "memory.current")),
                parse_flat_keyed(read_file(path, "memory.events")).get("high", 0))
    except (CgroupError, ValueError):
        return None
