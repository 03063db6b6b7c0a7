"""One process, pinned: when it was born, on the kernel's own clock, and an end through a pidfd
that signals the process that was looked at, never one that took its pid since."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["birth", "boot_clock", "end_if"]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat's starttime unit (USER_HZ)


def boot_clock() -> float:
    """Seconds since boot (``CLOCK_BOOTTIME``): the clock :func:`birth` counts on, unmoved by
    changes of the wall clock."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def birth(pid: int, proc: Path = Path("/proc")) -> float:
    """When process ``pid`` was born, seconds since boot (:func:`boot_clock`, to a clock tick:
    10 ms on most kernels): ``/proc/<pid>/stat``'s ``starttime`` (proc(5)).

    Raises:
        OSError: the process is gone (``FileNotFoundError``, ``ProcessLookupError``).
        ValueError: the file is not what the kernel writes.
    """
    text = (proc / str(pid) / "stat").read_bytes()
    # The command name (field 2) is in parentheses and may hold any byte, ")" included.
    fields = text[text.rindex(b")") + 2:].split()
    if len(fields) < 20:
        raise ValueError(f"/proc/{pid}/stat has {len(fields) + 2} fields, not the 22 and more the kernel writes")
    return int(fields[19]) / CLOCK_TICKS


def end_if(pid: int, still: Callable[[], bool]) -> bool:
    """SIGKILL process ``pid`` if ``still()``, asked once a pidfd pins it: from then on the pid
    names that process, whatever ``still`` reads about it.

    Returns:
        Whether it was signalled (False: gone, or ``still()`` said no).

    Raises:
        OSError: it cannot be signalled (EPERM).
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if not still():
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)
