"""Whether a move into a cgroup waits for an RCU grace period on this host (issue 46).

Every write of a pid to ``cgroup.procs`` takes the kernel's ``cgroup_threadgroup_rwsem`` for
writing. Unless the cgroup2 hierarchy is mounted with ``favordynmods`` (Linux 6.1 and later; or
booted with ``cgroup_favordynmods=1``), that lock's fast path for readers (every fork and exit)
has to be switched off first, which waits for an RCU grace period: milliseconds in each launch
and each session's move, after a quiet spell (moves in a row share one). With the option the
wait is gone, at the cost of slightly dearer forks and exits. ``governor check-config`` says so
on a cgroup v2 host mounted without it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["favordynmods_advice", "moves_wait"]

MOUNTS = Path("/proc/mounts")
CGROUP_ROOT = "/sys/fs/cgroup"
_OPTION = "favordynmods"


def moves_wait(mounts: str, root: str = CGROUP_ROOT) -> bool:
    """Whether ``root`` is a cgroup2 mount without ``favordynmods`` in ``mounts`` (the text of
    ``/proc/mounts``: device, mount point, type, options… a line). False where ``root`` is no
    cgroup2 mount (a v1 or hybrid host, which governor drives through its v1 hierarchies)."""
    found = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == root:
            found = fields  # the last mount at a point is the one in force
    return found is not None and found[2] == "cgroup2" and _OPTION not in found[3].split(",")


def favordynmods_advice(mounts: Path | None = None, root: str = CGROUP_ROOT) -> str | None:
    """What to do where moves into cgroups wait for an RCU grace period (:func:`moves_wait`
    of ``mounts``' text, default :data:`MOUNTS`), or None: they do not, or ``mounts`` cannot be
    read (nothing to say: the daemon's own checks report an unreadable host)."""
    try:
        text = (mounts or MOUNTS).read_text()
    except OSError:
        return None
    if not moves_wait(text, root):
        return None
    return (f"cgroup2 at {root} is mounted without {_OPTION}: each move into a task's cgroup waits for an RCU "
            f"grace period (milliseconds per launch); mount it with -o {_OPTION} (Linux 6.1 and later: "
            f"`mount -o remount,{_OPTION} {root}`) or boot with cgroup_favordynmods=1")
