"""``governor run``'s one warning before a memory kill: while it waits for its command, it looks
at the task's memory now and then, and the first time the task passes :data:`WARN_AT` of its
memory cap, or is being held at its soft cap, says so once on stderr::

    governor: task 12 is at 46.0M of its 50.0M memory cap

so that the user hears before the kernel OOM-kills it, not only after.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from governor.config.units import format_size

# The share of its memory cap past which a task's user is warned.
WARN_AT = 0.9
# How often governor run looks, seconds: a file read or two, the daemon never asked.
LOOK_EVERY_S = 1.0


class MemoryWatch:
    """Looks at one started task's memory (:meth:`look`) and warns once.

    Args:
        started: the launch reply: ``task`` (its id), ``cgroup`` (its directory),
            ``memory_cgroup`` (v1: its directory in the memory hierarchy), ``limits``
            (the caps in force, in bytes as text: a hard cap, ``memory.max`` or v1's
            ``memory.limit_in_bytes``, or a soft one, ``memory.high`` or
            ``memory.soft_limit_in_bytes``: :data:`governor.wire.limit_files.MEMORY_CAPS`).
        read: the task's cgroup directory and its memory hierarchy's (v1; else None) →
            ``(bytes in use, times held at the soft cap)`` or None
            (:func:`governor.host.task_memory.memory_now`; a test's stand-in): the task's
            own cgroup, never a process's, which may be a zombie's naming the root.
    """

    def __init__(self, started: dict, read: Callable[[str, str | None], tuple[int, int] | None]) -> None:
        # Imported here (systemd's driver, logging): governor run imports this module before it
        # launches, and makes a watch only once its command has run for LOOK_EVERY_S.
        from governor.wire.limit_files import memory_cap

        limits = started.get("limits") or {}
        self.task, self.cgroup, self.read = started.get("task"), started.get("cgroup"), read
        memory = started.get("memory_cgroup")
        self.memory_cgroup = memory if isinstance(memory, str) else None
        cap = memory_cap(limits)
        self.soft = cap is not None and cap[0] == "soft"
        self.cap = None if cap is None else cap[1]
        self.warned = self.cap is None or not isinstance(self.cgroup, str)  # nothing to watch

    def look(self) -> str | None:
        """Read the task's memory; the warning's line the first time it is due (also written
        to stderr), else None."""
        if self.warned:
            return None
        now = self.read(self.cgroup, self.memory_cgroup)
        if now is None:
            return None
        used, held = now
        kind = "soft memory cap" if self.soft else "memory cap"
        if used >= WARN_AT * self.cap:
            line = f"governor: task {self.task} is at {format_size(used)} of its {format_size(self.cap)} {kind}"
        elif self.soft and held:
            line = (f"governor: task {self.task} is held at its {format_size(self.cap)} {kind} "
                    f"({format_size(used)} in use): it is throttled there")
        else:
            return None
        self.warned = True
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        return line
