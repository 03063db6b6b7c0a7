"""The one place that touches cgroupfs: read, write, create, list and remove cgroup files and dirs.

Every ``OSError`` becomes a :mod:`governor.errors` error that names the full path (and, for
writes, the value) plus the errno, e.g.::

    failed to write '20000 100000' to /sys/fs/cgroup/g/cpu.max: Invalid argument (EINVAL)

Directories are :class:`pathlib.Path` objects given by the caller, so the same code works on
the real ``/sys/fs/cgroup`` and on a temporary tree in tests. The drivers also read the few
``/proc`` files they need (``/proc/self/cgroup``, ``mountinfo``) through :func:`read_file`, so
those failures are reported the same way.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from pathlib import Path, PurePosixPath

from governor.cgroups.errors import CgroupBusy, CgroupError, CgroupReadError, CgroupWriteError, ProcessGone

__all__ = ["read_file", "write_file", "make_dir", "remove_dir", "list_children", "relative_parts", "below"]

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 16
# Cgroup paths kept parsed: pathlib's parsing cost as much as the eight reads of a sample
# (read_stats 188 us, half of it in pathlib). Enough for a launch's calls and every group's
# samples; a kept path costs ~1 KiB (scripts/bench at 10,000 tasks: 32,768 kept, RSS +24 MiB;
# 8,192, +8 MiB and 7 % of a core less).
PATHS_KEPT = 2048


@functools.lru_cache(maxsize=PATHS_KEPT)
def relative_parts(rel: str) -> tuple[str, ...]:
    """Split a cgroup path relative to a driver's root into its components (``""`` → ``()``).

    Raises:
        ValueError: ``rel`` is absolute or contains ``..``: drivers never leave their root.
    """
    path = PurePosixPath(rel)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"cgroup path must be relative to the driver's root, got {rel!r}")
    return tuple(p for p in path.parts if p != ".")


@functools.lru_cache(maxsize=PATHS_KEPT)
def below(root: Path, rel: str) -> Path:
    """The directory of cgroup ``rel`` under ``root`` (raises ValueError as
    :func:`relative_parts` does)."""
    return root.joinpath(*relative_parts(rel))


def read_file(directory: Path, name: str) -> str:
    """Return the whole text of ``directory/name``.

    Raises:
        CgroupReadError: the file cannot be opened or read (path and errno in the error).
    """
    path = os.path.join(directory, name)
    # os.read, not open(): a text file object costs as much as the kernel's read (measured
    # 19 -> 10 us a file), and the daemon reads eight files a cgroup a sample.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks = []
            while chunk := os.read(fd, READ_CHUNK):  # a seq_file may hand over a page at a time
                chunks.append(chunk)
        finally:
            os.close(fd)
    except OSError as e:
        raise CgroupReadError(f"failed to read {path}", path=str(path), errno=e.errno) from e
    return b"".join(chunks).decode("ascii", errors="replace")


def write_file(directory: Path, name: str, value: str) -> None:
    """Write ``value`` to ``directory/name`` in a single ``write(2)``.

    The file is opened without ``O_CREAT``: on cgroupfs a missing file means the controller is
    not enabled, and creating a regular file in a fake tree would hide that. One write per
    call matters because the kernel parses each ``write(2)`` as one setting (one ``io.max``
    line, one pid for ``cgroup.procs``).

    A cgroup that vanished (``ENOENT``: its task exited and it was removed) is logged at debug
    level, not as a fault (systemd's ``LOG_LEVEL_CGROUP_WRITE``); the error is raised all the same.

    Raises:
        ProcessGone: the pid written to ``cgroup.procs`` (or v1's ``tasks``) names no process
            (``ESRCH``: it exited meanwhile).
        CgroupWriteError: open or write failed otherwise; carries the path, the value and the
            errno (``ENOENT`` when the cgroup vanished, ``EINVAL`` for a rejected value,
            ``EBUSY``/``ENOSPC`` for refused moves...).
    """
    path = os.path.join(directory, name)
    data = value.encode("ascii")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as e:
        # ESRCH: only a pid written to a procs file draws it.
        error = ProcessGone(path, value) if e.errno == errno.ESRCH else CgroupWriteError(path, value, e.errno)
        if error.vanished:
            log.debug("%s (cgroup vanished, its task probably exited)", error)
        raise error from e
    if written != len(data):
        # kernfs accepts a whole page per write; a short write means the value was cut.
        raise CgroupWriteError(str(path), value, errno.EIO)


def make_dir(directory: Path) -> bool:
    """Create the cgroup ``directory`` (its parent must exist).

    Returns:
        True if it was created, False if it already existed (creating is idempotent).

    Raises:
        CgroupError: mkdir failed for another reason (path and errno in the error).
    """
    try:
        os.mkdir(directory)
    except FileExistsError:
        return False
    except OSError as e:
        raise CgroupError(f"failed to create cgroup {directory}", path=str(directory),
                          errno=e.errno) from e
    return True


def remove_dir(directory: Path) -> bool:
    """Remove the leaf cgroup ``directory``.

    Returns:
        True if it was removed, False if it did not exist.

    Raises:
        CgroupBusy: it still holds processes or child cgroups (``EBUSY``; ``ENOTEMPTY`` on a
            plain directory tree).
        CgroupError: rmdir failed otherwise (path and errno in the error).
    """
    try:
        os.rmdir(directory)
    except FileNotFoundError:
        return False
    except OSError as e:
        kind = CgroupBusy if e.errno in (errno.EBUSY, errno.ENOTEMPTY) else CgroupError
        raise kind(f"failed to remove cgroup {directory}", path=str(directory), errno=e.errno) from e
    return True


def list_children(directory: Path) -> list[str]:
    """Return the names of the child cgroups (sub-directories) of ``directory``, sorted.

    Raises:
        CgroupReadError: the directory cannot be listed.
    """
    try:
        with os.scandir(directory) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError as e:
        raise CgroupReadError(f"failed to list {directory}", path=str(directory),
                              errno=e.errno) from e
