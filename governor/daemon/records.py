"""Task records under the state directory, as the stages keep them: written when a task
starts, removed when it ends; a session's that could not be written (a full disk) is kept in
mind and written at the next reconcile pass (governed unrecorded beats ungoverned)."""

from __future__ import annotations

import logging

from governor.daemon.journal import Journal
from governor.errors import GovernorError
from governor.core.state import Task, Tasks
from governor.host.task_store import TaskStore

__all__ = ["Records"]


class Records:
    """The records of running tasks (:class:`~governor.host.task_store.TaskStore`), and those still to
    write.

    Args:
        store: the state directory's records; tasks: the running tasks; journal: events.
    """

    def __init__(self, store: TaskStore, tasks: Tasks, journal: Journal) -> None:
        self.store = store
        self.tasks = tasks
        self.journal = journal
        self.unsaved: set[str] = set()  # governed tasks whose records could not be written yet

    def save(self, task: Task) -> None:
        """Write ``task``'s record (raises GovernorError: the state directory refused)."""
        self.store.save(task)

    def save_or_retry(self, task: Task) -> None:
        """Write ``task``'s record, or note it for :meth:`save_unsaved` (logged)."""
        try:
            self.store.save(task)
        except GovernorError as error:
            self.unsaved.add(task.id)
            self.journal.event("error", f"{task.label} is governed but its record is not written ({error}): a "
                                        "daemon restarted before it is would not re-adopt it; written again at "
                                        "each reconcile", logging.ERROR)

    def save_unsaved(self) -> None:
        """Write the records :meth:`save_or_retry` could not (a reconcile pass)."""
        for task_id in list(self.unsaved):
            task = self.tasks.get(task_id)
            try:
                if task is not None:
                    self.store.save(task)
            except GovernorError:
                return  # still full: the next pass tries again
            self.unsaved.discard(task_id)
            if task is not None:
                self.journal.event("record", f"{task.label}: its record is written now")

    def delete(self, task_id: str) -> None:
        """Remove the record of ``task_id`` (raises GovernorError)."""
        self.unsaved.discard(task_id)
        self.store.delete(task_id)
