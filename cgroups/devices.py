"""Block device paths → the whole disk's ``MAJ:MIN``, the form ``io.max``/blkio accept.

The kernel rejects a partition's numbers in ``io.max`` (bandwidth is throttled per request
queue, which belongs to the disk), so a configured ``/dev/nvme0n1p2`` is resolved to
``/dev/nvme0n1`` through sysfs: ``/sys/dev/block/MAJ:MIN`` links to the device's directory;
a partition's directory has a ``partition`` file and sits inside its disk's directory, whose
``dev`` file holds the disk's ``MAJ:MIN``.

This module is the edge for device paths: ``OSError`` becomes :class:`DeviceError`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from governor.cgroups.errors import DeviceError

__all__ = ["device_number", "io_sharing", "parent_disk", "whole_disk"]

SYS = Path("/sys")
DEV = Path("/dev")
CGROUP_MOUNT = Path("/sys/fs/cgroup")


def device_number(device_path: str | Path, dev: Path = DEV) -> tuple[int, int]:
    """Return ``(major, minor)`` of a block device node. A bare name (``"vda"``) is looked up
    in ``dev``; symlinks (``/dev/disk/by-id/...``) are followed.

    Raises:
        DeviceError: the path is missing, unreadable, or not a block device.
    """
    path = Path(device_path)
    if len(path.parts) == 1:
        path = dev / path
    try:
        st = os.stat(path)
    except OSError as e:
        raise DeviceError(str(path), f"cannot stat: {e.strerror}") from e
    if not stat.S_ISBLK(st.st_mode):
        raise DeviceError(str(path), "not a block device")
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def parent_disk(major: int, minor: int, sys: Path = SYS) -> str:
    """Return the ``MAJ:MIN`` of the whole disk holding block device ``major:minor`` (itself
    when it is not a partition), using the sysfs tree at ``sys``.

    Raises:
        DeviceError: sysfs has no entry for the device or its disk.
    """
    number = f"{major}:{minor}"
    link = sys / "dev" / "block" / number
    if not link.exists():
        raise DeviceError(number, f"no block device {number} in {link.parent}")
    if not (link / "partition").exists():
        return number
    disk_dev = link.resolve().parent / "dev"
    try:
        return disk_dev.read_text().strip()
    except OSError as e:
        raise DeviceError(number, f"partition without a readable disk entry {disk_dev}: "
                                  f"{e.strerror}") from e


def whole_disk(device_path: str | Path, sys: Path = SYS, dev: Path = DEV) -> str:
    """Return ``"MAJ:MIN"`` of the whole disk behind ``device_path`` (a partition resolves to
    its disk; a disk, loop or dm device to itself).

    Raises:
        DeviceError: missing path, not a block device, or no sysfs entry (the message names
            the path).
    """
    major, minor = device_number(device_path, dev)
    try:
        return parent_disk(major, minor, sys)
    except DeviceError as e:
        raise DeviceError(str(device_path), e.reason) from e


def io_sharing(disk: str, *, mode: str, cgroup_mount: Path = CGROUP_MOUNT, sys: Path = SYS) -> str:
    """How an I/O guarantee on whole disk ``disk`` (``MAJ:MIN``) can be enforced on this host.

    Returns:
        ``"io.weight"`` when io.cost is enabled for the disk (cgroup v2: a line
        ``MAJ:MIN enable=1`` in the root's ``io.cost.qos``); ``"io.bfq.weight"`` when the
        disk's scheduler is BFQ (``[bfq]`` in ``queue/scheduler``; v2 ``io.bfq.weight``, v1
        ``blkio.bfq.weight_device``); else ``"io.max"``: no proportional controller, so the
        guarantee becomes a hard limit (not work-conserving). Enabling io.cost or BFQ is the
        administrator's choice (a host-wide setting); governor only reads it.
    """
    if mode == "v2":
        for line in _read_optional(cgroup_mount / "io.cost.qos").splitlines():
            fields = line.split()
            if fields and fields[0] == disk and "enable=1" in fields[1:]:
                return "io.weight"
    if "[bfq]" in _read_optional(sys / "dev" / "block" / disk / "queue" / "scheduler"):
        return "io.bfq.weight"
    return "io.max"


def _read_optional(path: Path) -> str:
    """A probe: the file's text, or "" when the kernel does not offer it (no io.cost, no queue)."""
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return ""
