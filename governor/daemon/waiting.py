"""The launches waiting to be admitted: shared by settle, which admits, and the views (status,
``explain``, a waiting client's position), which show them.

**Places kept across a restart.** A restarted daemon had every waiting client's launch sent
again (the client waits for it: :data:`governor.cli.become_task.RESTART_GRACE_S`) and queued it
afresh: a new id, and the place of when it came back, so a task queued for an hour went behind
one queued a minute before the restart. So the daemon keeps each waiting launch's place
(``queued.state``: its id, pid, the pid's birth, uid, group and time queued); a launch sent again
by the same process (its pid, born then, of that uid) takes back its id and its place. Until
those remembered come back, or :data:`HOLD_S` after the start, a launch of the same group that
queued after them is not admitted: it would start ahead of a task that waited longer, which
within a group is served first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from governor.core.admission import Admission
from governor.core.queue import Entry

__all__ = ["HOLD_S", "Queue"]

# How long after its start a daemon holds a group's later launches for its remembered ones: the
# clients ask again every half second (RETRY_S) once the socket is back; one not back by then
# has gone (its user gave up, its process ended).
HOLD_S = 3.0


class Queue(dict[str, Entry]):
    """Task id → the launch waiting for it (:class:`~governor.core.queue.Entry`), in arrival order.

    Attributes:
        admission: settle's last admission (:class:`~governor.core.admission.Admission`), for
            the queue's views (:func:`governor.core.queue.queue_view`); None before the first.
        remembered: pid → the place of a launch that waited when the last daemon stopped,
            until it is sent again or the hold ends (:meth:`remember`).
    """

    admission: Admission | None = None

    def __init__(self, clock=time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.remembered: dict[int, Mapping] = {}
        self._hold_until = 0.0

    def remember(self, places: list[Mapping]) -> None:
        """Hold the ``places`` the last daemon saved (:meth:`TaskStore.save_queued
        <governor.host.task_store.TaskStore.save_queued>`) for :data:`HOLD_S` from now."""
        self.remembered = {place["pid"]: place for place in places}
        self._hold_until = self.clock() + HOLD_S

    def take_back(self, pid: int, uid: int, born: float | None) -> Mapping | None:
        """The remembered place of a launch sent again by process ``pid`` of ``uid`` (``born``:
        its birth, None where unknown: then not its own), which it takes back; else None."""
        place = self.remembered.get(pid)
        if place is None or place["uid"] != uid or born is None or abs(place["born"] - born) > 1e-6:
            return None
        del self.remembered[pid]
        return place

    def add(self, entry: Entry) -> None:
        """Queue ``entry``: last, or where its (kept) time queued puts it among the others."""
        last = next(reversed(self.values()), None)  # (in order already: only a kept place can be earlier)
        self[entry.task.id] = entry
        if last is not None and last.queued_at > entry.queued_at:
            ordered = sorted(self.values(), key=lambda other: other.queued_at)
            self.clear()
            self.update((other.task.id, other) for other in ordered)

    def held(self, entry: Entry) -> bool:
        """Whether ``entry`` must not be admitted yet: a remembered launch of its group that
        queued before it is not back, and the hold has not ended."""
        if not self.remembered or self.clock() >= self._hold_until:
            return False
        return any(place["group"] == entry.task.group and place["queued_at"] < entry.queued_at
                   for place in self.remembered.values())

    def hold_left(self) -> float:
        """Seconds until the hold ends (0: it has, or nothing is remembered)."""
        return max(0.0, self._hold_until - self.clock()) if self.remembered else 0.0

    def end_hold(self) -> list[Mapping]:
        """Forget the remembered places not taken back (their clients have gone), and return them."""
        gone, self.remembered = list(self.remembered.values()), {}
        return gone

    def places(self) -> list[dict]:
        """The waiting launches' places, and those remembered not back yet, to be saved
        (:meth:`remember` takes them back)."""
        waiting = [{"id": entry.task.id, "pid": entry.task.pid, "born": entry.born, "uid": entry.task.uid,
                    "group": entry.task.group, "queued_at": entry.queued_at}
                   for entry in self.values() if not entry.decided and entry.born is not None]
        return [*map(dict, self.remembered.values()), *waiting]  # (a second restart within the hold keeps them)
