"""The errors of cgroup and device operations, and the base of every governor error.

They live here, in the lowest layer, so that ``cgroups/`` imports nothing from ``governor/``;
:mod:`governor.errors` re-exports them beside the rest of the tree. What an errno means is
decided here and in :mod:`governor.cgroups.files`, where the OS error happens: code above
``cgroups/`` catches :class:`ProcessGone` or :class:`CgroupBusy`, or asks
:attr:`CgroupError.vanished`, and never compares errno values.
"""

from __future__ import annotations

import errno as _errno
import os


class GovernorError(Exception):
    """Base of every error governor raises on purpose."""


class CgroupError(GovernorError):
    """A cgroupfs operation failed.

    Attributes:
        path: the cgroup directory or file concerned.
        errno: the OS errno, or ``None`` when the failure is not an OS error.
    """

    def __init__(self, message: str, *, path: str, errno: int | None = None):
        self.path = path
        self.errno = errno
        detail = f": {os.strerror(errno)} ({_errno.errorcode.get(errno, errno)})" if errno else ""
        super().__init__(f"{message}{detail}")

    @property
    def vanished(self) -> bool:
        """The cgroup is gone (``ENOENT``): its task exited and it was removed, not a fault."""
        return self.errno == _errno.ENOENT


class CgroupReadError(CgroupError):
    """Reading ``path`` failed."""

    @property
    def vanished(self) -> bool:
        """The cgroup is gone: ``ENOENT``, or ``ENODEV`` for a file opened before its cgroup was
        removed (kernfs refuses a read of a removed node). A write keeps ENODEV a fault: io.max
        answers it for a device that does not exist."""
        return self.errno in (_errno.ENOENT, _errno.ENODEV)


class CgroupWriteError(CgroupError):
    """Writing ``value`` to ``path`` failed; the message reads like runc's
    ``failed to write "20000 100000" to /sys/fs/cgroup/g/cpu.max: Invalid argument (EINVAL)``.

    Attributes:
        value: the string that was written.
    """

    def __init__(self, path: str, value: str, errno: int | None):
        self.value = value
        super().__init__(f"failed to write {value!r} to {path}", path=path, errno=errno)


class ProcessGone(CgroupWriteError):
    """Moving a process into a cgroup (writing its pid to ``cgroup.procs``) failed because
    there is no such process any more (``ESRCH``): it exited meanwhile, or never was."""

    def __init__(self, path: str, value: str):
        super().__init__(path, value, _errno.ESRCH)


class CgroupBusy(CgroupError):
    """Removing a cgroup failed because it still holds processes or child cgroups (``EBUSY``;
    ``ENOTEMPTY`` where a plain directory tree stands in for cgroupfs): it is in use, not broken."""


class CgroupUnsupported(CgroupError):
    """The host lacks a cgroup hierarchy, controller or file governor needs."""


class DeviceError(GovernorError, ValueError):
    """A path that should name a block device cannot be resolved to a whole disk's MAJ:MIN.

    Attributes:
        path: the device path as given (``/dev/nvme0n1p2``).
        reason: what is wrong, in words (missing, not a block device, no sysfs entry...).
    """

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")
