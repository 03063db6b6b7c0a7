"""What happened, told once for every reader: the log, status's recent events, the metrics'
counts, and the one count of changes the status snapshot is kept by."""

from __future__ import annotations

import logging
import socket
import time
from collections import deque
from collections.abc import Mapping

from governor.config.resources import format_amount
from governor.core.state import Task
from governor.host.alerts import Alerts
from governor.wire.notice import notice

__all__ = ["EVENTS_KEPT", "Journal", "vector"]

# Every stage logs under the daemon's name (journalctl -u governor; the tests' filters).
log = logging.getLogger("governor.daemon")
EVENTS_KEPT = 50


class Journal:
    """The daemon's events and its count of changes.

    Args:
        metrics: optional sink with ``event(kind)`` (:class:`governor.wire.metrics.Metrics`).
        alerts: the ``[notify]`` command's runner (:class:`~governor.host.alerts.Alerts`), or None.
        history: the history journal (:class:`~governor.daemon.history.History`), or None.

    Attributes:
        events: the last :data:`EVENTS_KEPT` events, oldest first: ``{"at": unix s, "kind",
            "message"}``.
        version: counts what changes the status (an event, a sample, the queue, the alerts'
            counts): a status built at one version is served until the next.
    """

    def __init__(self, metrics=None, alerts: Alerts | None = None, history=None) -> None:
        self.metrics = metrics
        self.alerts = alerts
        self.history = history
        self.host = socket.gethostname()
        self.events: deque[dict] = deque(maxlen=EVENTS_KEPT)
        self._changes = 0

    @property
    def version(self) -> int:
        return self._changes + (self.alerts.version if self.alerts is not None else 0)

    def changed(self) -> None:
        """Something the status shows changed without an event (a sample, the queue)."""
        self._changes += 1

    def event(self, kind: str, message: str, level: int = logging.INFO, *, detail: str = "") -> None:
        """Log ``message`` at ``level`` and keep it as an event of ``kind`` (``task_started``,
        ``refill``, ``error``…). ``detail`` (pids) goes to the log alone, after the message in
        parentheses: status's events are everyone's, and no view shows another user's pids
        (docs/user.md, "Who sees what"); the log is the admins'."""
        self._changes += 1
        if detail:
            log.log(level, "%s (%s)", message, detail)
        else:
            log.log(level, "%s", message)
        self.events.append({"at": time.time(), "kind": kind, "message": message})
        if self.metrics:
            self.metrics.event(kind)

    def record(self, entry: dict) -> None:
        """Append ``entry`` (:mod:`governor.daemon.history`'s builders) to the history journal,
        if the daemon keeps one; returns at once."""
        if self.history is not None:
            self.history.put(entry)

    def alert(self, kind: str, message: str, *, task: Task | None = None, group: str | None = None,
              details: Mapping[str, object] | None = None) -> None:
        """Tell the ``[notify]`` command of an event a person should hear about, if it asks for
        ``kind`` (:data:`governor.config.notify_rules.EVENTS`); the document is
        :func:`governor.wire.notice.notice`'s. Returns at once: the command runs later. Logs nothing
        (the caller logs its event as it does any other)."""
        if self.alerts is not None and self.alerts.wants(kind):
            self.alerts.put(notice(kind, message, at=time.time(), host=self.host, task=task, group=group,
                                   details=details))


def vector(amounts: Mapping[str, float]) -> str:
    """A demand or capacity vector for the log: ``cpu 1 core, memory 1.0G``."""
    return ", ".join(f"{r} {format_amount(r, v, unit=True)}" for r, v in amounts.items())
