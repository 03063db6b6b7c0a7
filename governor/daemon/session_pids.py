"""A session's ``pids.max`` held against the daemon's own lag.

A process of a governed user found outside any task is moved into the user's session once the
daemon has seen it and, for the first, made the session's cgroup: milliseconds, more under
load. What it forks meanwhile is born outside, uncapped, and moved in after it; a move is no
fork, and ``pids.max`` refuses none. A fork bomb started outside a session so outran its cap:
1,001 processes against 100 in a native run on cgroup v1 (docs/benchmarks.md, isolation).

So a process born after the first one its session was asked for counts against the cap as if
it had been born inside: when the session is full (``pids.current`` at ``pids.max``), it is
ended (SIGKILL) rather than moved in, as a fork inside would have failed. One that was running
before (the session's first process; every process found at the daemon's start, at a reload, or
before a session's start failed) is moved in as before, past the cap if need be: governing ends
nothing that was running when it began to govern it. Birth times are the kernel's
(``/proc/<pid>/stat``, to a clock tick, rounded down: a process born within a tick of the first
is taken for older, never the reverse).

The check before each move reads the process's real uid once more, first: the daemon looked at
it on the event loop, maybe long before the move comes up on the cgroup thread, and root's
``runuser`` parent takes the user's uid for a moment and its own back. A process no longer the
user's stays where it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psutil

from governor.cgroups.hierarchy import Hierarchy
from governor.cgroups.limits import CgroupLimits
from governor.core.state import Task
from governor.daemon.journal import Journal
from governor.daemon.tree import Tree
from governor.errors import EndedAtPidsMax, NoLongerTheUsers
from governor.host.processes import birth, boot_clock, end_if

__all__ = ["SessionPids"]


class SessionPids:
    """Since when each session's cap holds, the check made before each move into one, and the
    journal of what it ended.

    Args:
        hierarchy: governor's cgroups (``pids.max``, ``pids.current``, read on the cgroup thread).
        tree: the cgroup thread (whether moves into a session are still queued).
        journal: told once when a session starts ending processes, and how many when its
            queued moves are done (event ``session_pids_ended``).
        caps: a session → its caps (``pids_max``, named in the journal).
        real_uid: a process's real uid now (raises OSError or psutil.Error: gone).
    """

    def __init__(self, hierarchy: Hierarchy, tree: Tree, journal: Journal,
                 caps: Callable[[Task], CgroupLimits], real_uid: Callable[[int], int]) -> None:
        self.hierarchy = hierarchy
        self.real_uid = real_uid
        self.tree = tree
        self.journal = journal
        self.caps = caps
        self._looked = boot_clock()  # when this daemon last began to look at every process (start, reload)
        self._since: dict[int, float] = {}  # uid → births after this count against its session's cap (boot clock, s)
        self._failed: dict[int, float] = {}  # uid → when its session's start last failed
        self._ended: dict[str, int] = {}  # session cgroup → processes ended since its queue was last empty

    def reset(self) -> None:
        """Every process is looked at again (a reload): those running now are older than any
        session asked for from now on."""
        self._looked = boot_clock()

    def asked(self, uid: int, pid: int) -> None:
        """The session of ``uid`` is asked for, for process ``pid``: the processes born after it
        count against the session's cap (after the daemon's last look, after a failed start)."""
        try:
            born = birth(pid)
        except (OSError, ValueError):
            born = boot_clock()  # gone: whatever is born from now on is younger
        self._since[uid] = max(born, self._looked, self._failed.get(uid, 0.0))

    def failed(self, uid: int) -> None:
        """The session of ``uid`` could not be started: its processes stay where they are and
        run, and are older than the next one asked for."""
        self._failed[uid] = boot_clock()

    def check(self, session: Task) -> Callable[[str, int], None]:
        """The check before a move into ``session`` (:meth:`Tree.join_soon
        <governor.daemon.tree.Tree.join_soon>`'s ``check``), run on the cgroup thread: it reads
        only what it was given now and the kernel.

        The check raises :class:`~governor.errors.NoLongerTheUsers` where the process's real
        uid is no longer the session's user's, and :class:`~governor.errors.EndedAtPidsMax` once
        it has ended the process: the session is full and the process was born after the
        session's first (:meth:`asked`). A process that is gone, unreadable, older or not to be
        signalled is left to the move.
        """
        since = self._since.get(session.uid, self._looked)  # one found at the start: the start
        first, full = session.pid, self.hierarchy.pids_full

        def check(rel: str, pid: int) -> None:
            try:
                uid = self.real_uid(pid)
            except (OSError, psutil.Error):
                return  # gone: the move says so
            if uid != session.uid:
                raise NoLongerTheUsers(rel, pid)
            if pid == first or not full(rel):
                return
            try:
                born = birth(pid)
                ended = born > since and end_if(pid, lambda: _born_at(pid, born))
            except (OSError, ValueError):
                return  # gone (the move says so), or not to be signalled (EPERM): moved in as before
            if ended:
                raise EndedAtPidsMax(rel, pid)

        return check

    def moved(self, session: Task, ended: bool) -> None:
        """(On the loop) a move into ``session`` is done: ``ended``, its process was ended
        rather than moved in. Journalled at the first ended, and with their count once no move
        into the session is queued."""
        if session.cgroup not in self._ended and not ended:
            return
        cap = self.caps(session).pids_max
        if ended:
            if session.cgroup not in self._ended:
                self.journal.event("session_pids_ended", f"the session of {session.user} is at {_cap(cap)}: "
                                   "processes started outside it after its first are ended (SIGKILL) "
                                   "rather than moved in, as a fork inside it would have failed", logging.WARNING)
            self._ended[session.cgroup] = self._ended.get(session.cgroup, 0) + 1
        if session.cgroup in self._ended and not self.tree.moving_into(session.cgroup):
            count = self._ended.pop(session.cgroup)
            self.journal.event("session_pids_ended", f"{count} process(es) of {session.user} started outside "
                                                     f"the session, which is at {_cap(cap)}, were ended",
                               logging.WARNING)


def _cap(cap: int | None) -> str:
    return f"its pids.max ({cap})" if cap is not None else "its pids.max"


def _born_at(pid: int, born: float) -> bool:
    """Whether the process at ``pid`` now is the one born at ``born`` (pid reuse)."""
    try:
        return birth(pid) == born
    except (OSError, ValueError):
        return False
