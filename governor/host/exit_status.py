"""How a task's launched process exited, though the daemon is not its parent: from a pidfd of
it held since its launch. Linux ≥ 6.15 keeps the wait status of a process for its pidfds
(``PIDFD_GET_INFO`` with ``PIDFD_INFO_EXIT``) once its parent has reaped it; before that, or on
an older kernel, it is unknown (None).
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct

PIDFD_INFO_EXIT = 1 << 3
# struct pidfd_info (uapi linux/pidfd.h), its first version: mask, cgroupid (u64 each); pid,
# tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid (u32 each); exit_code (s32).
_PIDFD_INFO = struct.Struct("=QQ11Ii")
# _IOWR(PIDFS_IOCTL_MAGIC 0xFF, 11, struct pidfd_info)
PIDFD_GET_INFO = (3 << 30) | (_PIDFD_INFO.size << 16) | (0xFF << 8) | 11


def kernel_keeps_exit_status(release: str | None = None) -> bool:
    """Whether the kernel (``release``, default this one's, as ``uname -r`` says it) keeps exit
    statuses for pidfds: Linux ≥ 6.15. Where it does not, no pidfd need be held for it."""
    found = re.match(r"(\d+)\.(\d+)", release or os.uname().release)
    return found is not None and (int(found[1]), int(found[2])) >= (6, 15)


def exit_status(pidfd: int) -> int | None:
    """The wait status (as :func:`os.waitpid` gives it) of the process ``pidfd`` refers to, or
    None while it runs, before its parent reaped it, or where the kernel does not say."""
    info = bytearray(_PIDFD_INFO.size)
    struct.pack_into("=Q", info, 0, PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, PIDFD_GET_INFO, info)
    except OSError:  # ENOTTY/EINVAL before Linux 6.13, ESRCH: reaped before it could be kept
        return None
    fields = _PIDFD_INFO.unpack(info)
    return fields[-1] if fields[0] & PIDFD_INFO_EXIT else None


def describe(status: int) -> dict:
    """A wait status as JSON, in systemd's words: ``{"code": "exited", "status": 3}`` or
    ``{"code": "killed" | "dumped", "signal": "KILL"}``."""
    if os.WIFEXITED(status):
        return {"code": "exited", "status": os.WEXITSTATUS(status)}
    signum = os.WTERMSIG(status)
    try:
        name = signal.Signals(signum).name.removeprefix("SIG")
    except ValueError:  # a real-time signal
        name = str(signum)
    return {"code": "dumped" if os.WCOREDUMP(status) else "killed", "signal": name}
