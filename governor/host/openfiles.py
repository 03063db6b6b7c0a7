"""Which processes hold a character device node open: a host fact read from ``/proc``.

A GPU's node opened before its task ended (or passed to another process over a Unix socket,
``SCM_RIGHTS``) stays usable after the device cgroup stops allowing it: the kernel checks
device rules at ``open()`` only. Who still holds a node is found by the device numbers of the
files each process has open, ``os.stat("/proc/<pid>/fd/<n>").st_rdev`` (the link's target
path says nothing certain: a node may be opened through another name).

Every ``/proc`` read of the GPU hand-over is in this module.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from pathlib import Path

__all__ = ["PROC", "node_holders", "owner_uid", "process_name"]

PROC = Path("/proc")


def node_holders(nodes: Collection[tuple[int, int]], proc: Path = PROC,
                 pids: Collection[int] | None = None) -> dict[int, set[tuple[int, int]]]:
    """The processes holding any of ``nodes`` open, each with the nodes it holds.

    Args:
        nodes: character devices as ``(major, minor)``.
        proc: the proc filesystem (tests pass a fake one whose ``<pid>/fd/<n>`` are links).
        pids: look at these processes only (default: every ``<proc>/<pid>``).

    Returns:
        pid → the ``(major, minor)`` of ``nodes`` it has open; a process that holds none, that
        ended meanwhile or whose descriptors cannot be read is left out.

    Never raises for a process: processes come and go while the scan reads.
    """
    wanted = set(nodes)
    found: dict[int, set[tuple[int, int]]] = {}
    if not wanted:
        return found
    for pid in _pids(proc) if pids is None else pids:
        held = _held(proc / str(pid) / "fd", wanted)
        if held:
            found[pid] = held
    return found


def owner_uid(pid: int, proc: Path = PROC) -> int | None:
    """The uid owning process ``pid`` (of its ``/proc`` directory, its real uid's), or None
    when it is gone."""
    try:
        return os.stat(proc / str(pid)).st_uid
    except OSError:
        return None


def _pids(proc: Path) -> list[int]:
    try:
        with os.scandir(proc) as entries:
            return [int(entry.name) for entry in entries if entry.name.isdigit()]
    except OSError:
        return []


def _held(fd_dir: Path, wanted: set[tuple[int, int]]) -> set[tuple[int, int]]:
    held: set[tuple[int, int]] = set()
    try:
        with os.scandir(fd_dir) as entries:
            for entry in entries:
                try:
                    info = entry.stat()  # follows the link: the open file itself
                except OSError:
                    continue  # closed since the listing
                if stat.S_ISCHR(info.st_mode):
                    number = (os.major(info.st_rdev), os.minor(info.st_rdev))
                    if number in wanted:
                        held.add(number)
    except OSError:
        pass  # the process ended, or is a kernel thread's without descriptors
    return held


def process_name(pid: int, proc: Path = PROC) -> str | None:
    """The command name of process ``pid`` (``/proc/<pid>/comm``, e.g. ``nvidia-persistenced``),
    or None when it is gone."""
    try:
        return (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return None
