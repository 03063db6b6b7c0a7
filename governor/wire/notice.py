"""The document a ``[notify]`` command reads on stdin, one per event (docs/notify.md): versioned
by :data:`SCHEMA`, JSON, the task's fields as every other view shows them.

Pure: the daemon passes the time and the host name. Whatever a user put in a command line or a
task name stays data in a JSON string (:func:`governor.host.alerts.encode`); the command runs with
no shell.
"""

from __future__ import annotations

from collections.abc import Mapping

from governor.core.state import SHOWN_COMMAND_CHARS, Task

__all__ = ["SCHEMA", "notice"]

# Bumped when a field changes meaning or goes; new fields may be added within a version.
SCHEMA = "governor.notify/1"


def notice(kind: str, message: str, *, at: float, host: str, task: Task | None = None, group: str | None = None,
           details: Mapping[str, object] | None = None) -> dict:
    """One notification document.

    Args:
        kind: one of :data:`governor.config.notify_rules.EVENTS`.
        message: a sentence for a person (``task 7 (train) ends: its time limit of 2s was reached``).
        at: unix time of the event, seconds; host: this host's name.
        task: the task it is about, if any (:meth:`Task.to_json <governor.core.state.Task.to_json>`,
            its command cut to :data:`~governor.core.state.SHOWN_COMMAND_CHARS`).
        group: the group it is about, when no task says (defaults to the task's).
        details: the kind's figures, units in the names (``memory_cap_bytes``, ``waited_s``, ``gpu``).

    Returns:
        ``{"schema", "kind", "time", "host", "message", "group", "user", "uid", "task", "details"}``;
        ``user``/``uid``/``task`` are None for an event about no task.
    """
    return {"schema": SCHEMA, "kind": kind, "time": at, "host": host, "message": message,
            "group": group if group is not None or task is None else task.group,
            "user": None if task is None else task.user, "uid": None if task is None else task.uid,
            "task": None if task is None else task.to_json(command_chars=SHOWN_COMMAND_CHARS),
            "details": dict(details or {})}

