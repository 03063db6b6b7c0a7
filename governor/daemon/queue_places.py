"""The queue's places kept across a restart (:mod:`governor.daemon.waiting` says why): saved to
the state directory as launches wait and leave, read back when the daemon starts, and held for
:data:`~governor.daemon.waiting.HOLD_S` while their clients send their launches again."""

from __future__ import annotations

import asyncio
import logging

from governor.daemon.inbox import Inbox, Left
from governor.daemon.journal import Journal
from governor.daemon.waiting import Queue
from governor.errors import GovernorError
from governor.host.processes import birth
from governor.host.task_store import TaskStore

__all__ = ["QueuePlaces"]

# At most one write of the places per this many seconds: a storm of queued launches writes a
# few files a second, not one per launch; a kill -9 loses at most this much of the queue's changes.
SAVE_GAP_S = 0.2
log = logging.getLogger("governor.daemon")


class QueuePlaces:
    """Keeps ``queue``'s places in ``store`` (``queued.state``).

    Args:
        queue: the launches waiting; store: the state directory; inbox: told of a remembered
            launch that did not come back (it left the queue: settle admits what it held);
        journal: events (``queue_kept``).
    """

    def __init__(self, *, queue: Queue, store: TaskStore, inbox: Inbox, journal: Journal):
        self.queue = queue
        self.store = store
        self.inbox = inbox
        self.journal = journal
        self._pending: asyncio.TimerHandle | None = None
        self._failing = False

    def start(self) -> None:
        """(On the loop, at start) remember the places the last daemon saved, and end their hold
        :data:`~governor.daemon.waiting.HOLD_S` from now."""
        places, problems = self.store.load_queued()
        for problem in problems:
            log.warning("%s", problem)
        if not places:
            return
        self.queue.remember(places)
        self.journal.event("queue_kept", f"{len(places)} launch(es) waited when the last daemon stopped: each keeps "
                                         f"its id and place when its client asks again (for {self.queue.hold_left():.0f} s)")
        asyncio.get_running_loop().call_later(self.queue.hold_left(), self.end_hold)

    def waits(self, pid: int) -> float | None:
        """When process ``pid``, whose launch waits, was born (its place is saved with it);
        None where it is gone or unreadable (its place is not kept)."""
        try:
            return birth(pid)
        except (OSError, ValueError):
            return None

    def changed(self) -> None:
        """A launch waits or left: save the places soon (:data:`SAVE_GAP_S`), unless the daemon
        is stopping (its clients hang up then; :meth:`save` has kept their places)."""
        if self._pending is None and not self.inbox.closing:
            self._pending = asyncio.get_running_loop().call_later(SAVE_GAP_S, self._save_soon)

    def _save_soon(self) -> None:
        self._pending = None
        if not self.inbox.closing:
            self.save()

    def save(self) -> None:
        """Write the places now (at a stop, before the clients are hung up). A failure is
        logged once until a write succeeds: the queue serves on, its places not kept."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        try:
            self.store.save_queued(self.queue.places())
            self._failing = False
        except GovernorError as error:
            if not self._failing:
                log.warning("the queue's places are not kept across a restart: %s", error)
            self._failing = True

    def end_hold(self) -> None:
        """The hold ended: the launches not sent again have gone; what they held back is admitted."""
        gone = self.queue.end_hold()
        if not gone:
            return
        ids = ", ".join(place["id"] for place in gone)
        self.journal.event("left_queue", f"task(s) {ids} left the queue: their clients did not ask again after the restart")
        self.save()
        self.inbox.put(Left(gone[0]["id"]))
