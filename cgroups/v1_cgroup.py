"""One cgroup v1 cgroup's directories, for :class:`~governor.cgroups.v1.CgroupV1Driver`: its
counters, read from its directory in each hierarchy in v2's terms
(:class:`~governor.cgroups.stats.CgroupStats`), whether it holds a process, a new cpuset's
CPUs and memory nodes, and its device rules taken back to its parent's."""

from __future__ import annotations

import errno
from collections.abc import Mapping
from pathlib import Path

from governor.cgroups.errors import CgroupReadError, CgroupWriteError
from governor.cgroups.files import list_children, read_file, write_file
from governor.cgroups.foreign_subtrees import V1_UNLIMITED_BYTES
from governor.cgroups.parse import parse_blkio_service_bytes, parse_flat_keyed, parse_int, parse_pids
from governor.cgroups.stats import CgroupStats

__all__ = ["init_cpuset", "memory_cap_bytes", "populated_below", "read_v1_stats", "reset_devices"]

NS_PER_USEC = 1_000


def read_v1_stats(directories: Mapping[str, Path], peak: bool) -> CgroupStats:
    """Sample one cgroup: ``cpuacct.usage`` and ``cpu.stat`` (ns → usec),
    ``memory.usage_in_bytes``, ``memory.failcnt`` (as ``memory_events["max"]``) and
    ``memory.oom_control``'s ``oom_kill`` (Linux ≥ 4.13), ``memory.max_usage_in_bytes`` (as
    ``memory_peak_bytes``, with ``peak``), with blkio, ``blkio.throttle.io_service_bytes``, and
    with pids, ``pids.current`` and ``pids.events``' ``max`` (forks refused).
    ``populated`` is true when the cgroup or a descendant has a process in the cpu hierarchy
    (v2's meaning).

    Args:
        directories: controller (``cpu``, ``cpuacct``, ``memory``; ``blkio``, ``pids`` where governed)
            → the cgroup's directory in that controller's hierarchy.
        peak: read the memory peak too.

    Raises:
        CgroupReadError: a stat file cannot be read (e.g. the cgroup vanished).
    """
    cpu = parse_flat_keyed(read_file(directories["cpu"], "cpu.stat"))
    memory_dir = directories["memory"]
    memory_events = {"max": parse_int(read_file(memory_dir, "memory.failcnt"))}
    oom = parse_flat_keyed(read_file(memory_dir, "memory.oom_control"))
    if "oom_kill" in oom:
        memory_events["oom_kill"] = oom["oom_kill"]
    io_stat = {}
    if "blkio" in directories:
        io_stat = parse_blkio_service_bytes(read_file(directories["blkio"], "blkio.throttle.io_service_bytes"))
    pids = directories.get("pids")
    return CgroupStats(
        cpu_usage_usec=cpu_usage_usec(directories["cpuacct"]),
        cpu_nr_throttled=cpu.get("nr_throttled", 0),
        cpu_throttled_usec=cpu.get("throttled_time", 0) // NS_PER_USEC,
        memory_current_bytes=parse_int(read_file(memory_dir, "memory.usage_in_bytes")),
        memory_events=memory_events,
        io_stat=io_stat,
        populated=populated_below(directories["cpu"]),
        memory_peak_bytes=parse_int(read_file(memory_dir, "memory.max_usage_in_bytes")) if peak else None,
        pids_current=None if pids is None else parse_int(read_file(pids, "pids.current")),
        pids_refused=None if pids is None else parse_flat_keyed(read_file(pids, "pids.events")).get("max", 0),
    )


def cpu_usage_usec(cpuacct_dir: Path) -> int:
    """``cpuacct.usage`` of the cgroup at ``cpuacct_dir`` (its directory in the cpuacct
    hierarchy), ns → µs.

    Raises:
        CgroupReadError: it cannot be read (``vanished``: the cgroup is gone) or is not a number.
    """
    try:
        return parse_int(read_file(cpuacct_dir, "cpuacct.usage")) // NS_PER_USEC
    except ValueError as error:
        raise CgroupReadError(f"cannot parse {cpuacct_dir}/cpuacct.usage: {error}", path=str(cpuacct_dir)) from None


def memory_cap_bytes(memory_dir: Path) -> int | None:
    """The hard memory cap in force in the cgroup at ``memory_dir`` (its directory in the memory
    hierarchy: ``memory.limit_in_bytes``), bytes; None where it bounds nothing (the kernel's
    "unlimited", ``LONG_MAX`` rounded down to a page).

    Raises:
        CgroupReadError: it cannot be read (``vanished``: the cgroup is gone) or is not a number.
    """
    try:
        limit = parse_int(read_file(memory_dir, "memory.limit_in_bytes"))
    except ValueError as error:
        raise CgroupReadError(f"cannot parse {memory_dir}/memory.limit_in_bytes: {error}",
                              path=str(memory_dir)) from None
    return None if limit >= V1_UNLIMITED_BYTES else limit


def populated_below(directory: Path) -> bool:
    """Whether the cgroup at ``directory`` or one below it lists a process (raises
    CgroupReadError: ``vanished``, it is gone). A cgroup below it removed between the listing
    and its read (an ended task's, an emptied group's) holds none: a root's sample in CI once
    failed on a group removed meanwhile."""
    if parse_pids(read_file(directory, "cgroup.procs")):
        return True
    return any(_child_populated(directory / child) for child in list_children(directory))


def _child_populated(directory: Path) -> bool:
    try:
        return populated_below(directory)
    except CgroupReadError as error:
        if error.vanished:
            return False
        raise


def init_cpuset(directory: Path) -> None:
    """Give the cpuset cgroup at ``directory`` its parent's ``cpuset.cpus`` and ``cpuset.mems``
    where it has none (v1 starts a cpuset empty, and no process can join an empty one).

    Raises:
        CgroupReadError, CgroupWriteError: a read or a write failed (path and errno named).
    """
    for file in ("cpuset.cpus", "cpuset.mems"):
        if not read_file(directory, file).strip():
            write_file(directory, file, read_file(directory.parent, file).strip())


def reset_devices(devices_dir: Path) -> None:
    """Take the device rules of the v1 ``devices`` cgroup ``devices_dir`` back to its parent's:
    ``a`` written to ``devices.allow`` makes the kernel drop the cgroup's own exceptions and copy
    its parent's (security/device_cgroup.c), so whatever a daemon before this one denied there
    goes. Its ``devices.list`` cannot say which those are: while a cgroup allows by default the
    kernel lists only ``a *:* rwm``, never the denials. Left as they are, and no error: a cgroup
    with children (``EINVAL``: governor's root and groups, which it gives no device rules), one
    whose parent does not allow every device (``EPERM``: nothing was reset), one that is not in
    the devices hierarchy (``ENOENT``: a task's that started before it was used).

    Raises:
        CgroupWriteError: the kernel refused otherwise (``errno`` set).
    """
    try:
        write_file(devices_dir, "devices.allow", "a")
    except CgroupWriteError as error:
        if error.errno not in (errno.EINVAL, errno.EPERM, errno.ENOENT):
            raise
