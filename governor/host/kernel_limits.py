"""The kernel's host-wide limit on processes and threads: what governor's root leaves the system
a reserve of (DESIGN.md §3, "Counts are caps").

A fork (or a thread's clone) fails with ``EAGAIN`` once the host holds ``kernel.threads-max``
tasks, or once no process id below ``kernel.pid_max`` is free: the lower of the two is what the
host can hold (systemd's ``TasksMax=`` percentages are of the same figure).
"""

from __future__ import annotations

import logging
from pathlib import Path

__all__ = ["process_limit"]

log = logging.getLogger(__name__)

_FILES = ("sys/kernel/pid_max", "sys/kernel/threads-max")


def process_limit(proc: Path = Path("/proc")) -> int:
    """The most processes and threads this host holds: the lower of ``/proc/sys/kernel/pid_max``
    and ``/proc/sys/kernel/threads-max``, or 0 where neither can be read (logged: the root then
    has no cap on them)."""
    found = []
    for name in _FILES:
        try:
            found.append(int((proc / name).read_text().strip()))
        except (OSError, ValueError) as error:
            log.warning("cannot read %s: %s", proc / name, error)
    return min(found, default=0)
