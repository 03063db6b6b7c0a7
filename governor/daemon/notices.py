"""Notices: the events a person should hear about that no single moment of the daemon's makes,
found at each sample (``[notify]``, :mod:`governor.config.notify_rules`): a task held at its memory
cap, a task queued longer than ``queued_longer_than``, a task held back by a group's limit.
Each is told once per task; the ends (OOM kill, time limit) are told where tasks end
(:mod:`governor.daemon.exits`), a drained GPU where it is freed (:mod:`governor.daemon.handover`).

``governor run`` in a terminal says its own (a warning at 90 % of the cap, its place in the
queue); these reach an admin, or the user elsewhere, through the command.
"""

from __future__ import annotations

import time

from governor.cgroups.stats import CgroupStats
from governor.config.units import format_size, format_timespan
from governor.core.state import Task, Tasks
from governor.daemon.journal import Journal
from governor.daemon.policy import Policy
from governor.daemon.waiting import Queue

__all__ = ["Notices", "described"]

# Memory events that mean the kernel held the cgroup at its cap: reclaimed at memory.max (v1:
# memory.failcnt) or throttled at memory.high.
_HELD = ("max", "high")


def described(task: Task) -> str:
    """A task as a notice names it: ``task 7 (train)``, ``task 8``, ``session of alice``."""
    return f"{task.label} ({task.name})" if task.name else task.label


class Notices:
    """Finds the notices due at a sample and hands them to the journal (:meth:`Journal.alert
    <governor.daemon.journal.Journal.alert>`).

    Args:
        tasks, queue, policy: the running tasks, the launches waiting, the config in force.
        journal: where the notices go.
    """

    def __init__(self, *, tasks: Tasks, queue: Queue, policy: Policy, journal: Journal) -> None:
        self.tasks = tasks
        self.queue = queue
        self.policy = policy
        self.journal = journal
        self._told: set[tuple[str, str]] = set()  # (kind, task id) told already

    def sampled(self, task_id: str, previous: CgroupStats | None, current: CgroupStats) -> None:
        """A task's cgroup was sampled: tell ``memory_held`` the first time its counters show
        the kernel held it at its memory cap since the previous sample."""
        task = self.tasks.get(task_id)
        if task is None or previous is None or ("memory_held", task_id) in self._told:
            return
        held = sum(current.memory_events.get(k, 0) - previous.memory_events.get(k, 0) for k in _HELD)
        cap = task.demand.get("memory")
        used = current.memory_current_bytes
        if held <= 0 or not cap or used is None:
            return
        self._told.add(("memory_held", task_id))
        self.journal.alert("memory_held", f"{described(task)} is held at its memory cap {format_size(cap)} "
                                          f"({format_size(used)} in use): it is reclaimed or "
                                          "throttled there, and may be OOM-killed",
                           task=task, details={"memory_cap_bytes": int(cap), "memory_used_bytes": used,
                                               "held_events": held})

    def waiting(self, now: float | None = None) -> None:
        """Look at the queue (``now``: unix s): tell ``queued`` of a task waiting longer than
        ``queued_longer_than``, and ``group_at_limit`` of one a quota holds back."""
        now = time.time() if now is None else now
        threshold = self.policy.config.notify.queued_longer_than_s
        limited = self.queue.admission.limited if self.queue.admission is not None else {}
        for task_id, entry in self.queue.items():
            waited = max(0.0, now - entry.queued_at)
            task = entry.task
            if waited > threshold and ("queued", task_id) not in self._told:
                self._told.add(("queued", task_id))
                self.journal.alert("queued", f"{described(task)} of {task.user} has waited "
                                             f"{format_timespan(waited)} in group {task.group}'s queue",
                                   task=task, details={"waited_s": waited, "threshold_s": threshold})
            why = limited.get(task_id)
            if why is not None and ("group_at_limit", task_id) not in self._told:
                self._told.add(("group_at_limit", task_id))
                self.journal.alert("group_at_limit", f"{described(task)} waits: {why}", task=task,
                                   details={"waited_s": waited, "why": why})
        # What was told of tasks neither running nor waiting any more is forgotten.
        self._told = {(kind, task_id) for kind, task_id in self._told
                      if self.tasks.get(task_id) is not None or task_id in self.queue}
