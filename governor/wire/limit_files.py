"""How the limits a status or a launch reply names read: which one is a memory cap, and of
what kind.

The daemon sends a cgroup's limits in force as the kernel's files name them (``memory.max``,
v1's ``memory.limit_in_bytes``, values as written) and a login session's as the systemd
properties that set them (``MemoryMax``: :data:`governor.cgroups.systemd.MEMORY_PROPERTIES`).
The views (``status``, ``top``) and ``governor run``'s memory warning read them here, not from
the drivers. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from governor.cgroups.systemd import MEMORY_PROPERTIES

__all__ = ["MEMORY_CAPS", "kernel_file", "memory_cap"]

# Kernel file → the kind of memory cap it is: memory_max_bytes is the hard one (the default),
# memory_high_bytes the soft one ([enforcement] memory = "soft"), on v2 and v1.
MEMORY_CAPS = {"memory.max": "hard", "memory.limit_in_bytes": "hard",
               "memory.high": "soft", "memory.soft_limit_in_bytes": "soft"}


def kernel_file(name: str) -> str:
    """The kernel file a limit's name stands for: a systemd memory property (``MemoryMin``) as
    the file it sets (``memory.min``); a file's own name as it is."""
    return MEMORY_PROPERTIES.get(name, name)


def memory_cap(limits: Mapping[str, object]) -> tuple[str, int] | None:
    """The memory cap among a cgroup's limits in force (file → value as written, e.g. a launch
    reply's ``limits``; bytes as text or int): ``("hard" | "soft", bytes)``, the hard one where
    both are set; None where neither is set to a number of bytes."""
    for kind in ("hard", "soft"):
        for file, value in limits.items():
            if MEMORY_CAPS.get(file) == kind and (type(value) is int or isinstance(value, str) and value.isdigit()):
                return kind, int(value)
    return None
