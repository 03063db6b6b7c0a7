"""A session's caps are the ``[sessions]`` in force: those of a session that starts, and, after a
reload or a restart under a config that changed them, those of every session running (an admin
who lowers them means the shells running now too; before, a session kept the caps it started
with until its user's last process ended). Memory is never lowered below what a session uses:
memory is incompressible, and to meet a lower cap the kernel would reclaim, then OOM-kill."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from governor.cgroups.hierarchy import Hierarchy
from governor.config.units import format_size
from governor.core.state import Task, Tasks
from governor.daemon.journal import Journal, vector
from governor.daemon.policy import Policy
from governor.daemon.records import Records
from governor.errors import CgroupError

__all__ = ["SessionCaps", "followed"]


def followed(demand: Mapping[str, float], asked: Mapping[str, float],
             in_use: float | None) -> dict[str, float]:
    """The demand vector a running session gets under ``asked`` (the ``[sessions]`` in force,
    cores, bytes, bytes/s, pids), having had ``demand``: ``asked``, its memory no lower than the
    session's ``in_use`` (bytes, ``memory.current``; None: unknown, so never lowered), which its
    old cap bounds."""
    new = dict(asked)
    if "memory" in new and "memory" in demand:
        old = demand["memory"]
        new["memory"] = max(new["memory"], old if in_use is None else min(float(in_use), old))
    return new


class SessionCaps:
    """The caps of sessions, both kinds (a login session's are set through systemd at each refill).

    Args:
        policy: the config in force; tasks: the running tasks, sessions among them; hierarchy:
            what a session uses (``memory.current``); records: a session's record, written again
            with its new demand; journal: one event per session whose caps change.
    """

    def __init__(self, policy: Policy, tasks: Tasks, hierarchy: Hierarchy, records: Records,
                 journal: Journal) -> None:
        self.policy = policy
        self.tasks = tasks
        self.hierarchy = hierarchy
        self.records = records
        self.journal = journal

    def asked(self) -> dict[str, float]:
        """A session's demand vector under the config in force: ``[sessions]``, each amount at
        most the host's capacity of it (cores, bytes, bytes/s, pids)."""
        capacity = self.policy.host_capacity
        return {resource: min(amount, capacity.get(resource, amount))
                for resource, amount in self.policy.config.session_demand().items()}

    def follow(self, trigger: str) -> bool:
        """Give every running session the caps of :meth:`asked` (:func:`followed`: memory kept
        at what it uses where that is more), its record written again and its change logged;
        the caller's next full refill applies them. Returns whether any session's changed."""
        asked = self.asked()
        changed = False
        for session in self.tasks.sessions():
            if session.unrecorded:
                continue  # governed at what its cgroup holds: nothing of it is written
            in_use = self._in_use(session)
            demand = followed(session.demand, asked, in_use)
            if demand == session.demand:
                continue
            now = replace(session, demand=demand)
            self.tasks.update(now)
            self.records.save_or_retry(now)
            kept = demand.get("memory", 0.0) > asked.get("memory", 0.0)
            self.journal.event("session", f"{session.label}: caps of [sessions] now ({trigger}): {vector(demand)}, "
                                          f"were {vector(session.demand)}"
                                          + (f"; memory kept at the {format_size(demand['memory'])} it uses, "
                                             f"above the {format_size(asked['memory'])} asked" if kept else ""))
            changed = True
        return changed

    def _in_use(self, session: Task) -> float | None:
        try:
            return self.hierarchy.read_stats(session.cgroup).memory_current_bytes
        except CgroupError:
            return None
