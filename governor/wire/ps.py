"""The rows of ``governor ps``: a user's tasks, running and queued, with what each declared
(its cap), what DRF guarantees it and what it uses (schema in docs/user.md). The processes of
each task come from the caller (:func:`processes` names the pids of its cgroup).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import psutil

from governor.core.model import Allocation
from governor.core.queue import Entry
from governor.core.state import SHOWN_COMMAND_CHARS, Task
from governor.core import vocabulary
from governor.wire.status import split_usage

# Processes listed per task; ``processes_total`` counts them all.
PROCESSES_SHOWN = 32
# Tasks whose processes one reply lists (the first ones, in launch order): each costs cgroup
# and /proc reads on the daemon's event loop, and ``ps --all`` on a host of 10,000 tasks must
# not hold launches and exits for seconds. The rest have ``processes_total`` null.
TREES_LISTED = 256


def task_rows(running: Iterable[Task], queued: Iterable[Entry], *, allocation: Allocation | None,
              usage: Mapping[str, Mapping[str, float]], positions: Mapping[str, int],
              processes: Callable[[Task], tuple[list[dict], int]], asker: int,
              reserved: Mapping[str, Mapping[str, float]] | None = None) -> list[dict]:
    """One row per task, running first (in launch order), then queued (in queue order).

    Args:
        running: the running tasks to show.
        queued: the waiting launches to show.
        allocation: the last progressive filling's answer: a running task's guarantee is its
            group's λ times its declared cpu and I/O, as :mod:`governor.core.vocabulary` says.
        usage: cgroup → measured use (:func:`governor.core.usage.usage`).
        reserved: task id → what it holds in the admission count: its declared memory (a
            session: what it uses, a user's two places once), as
            :func:`governor.core.vocabulary.reserved_by_task` gives it over every running task;
            None: worked out over ``running`` (right when it holds each user's every task).
        positions: task id → its place in the queue (:func:`governor.core.queue.queue_view`'s item:
            ``position``, ``reason``).
        processes: a task → the processes listed for it (``{"pid", "ppid", "name"}`` each, at
            most :data:`PROCESSES_SHOWN`) and how many it holds; asked of the first
            :data:`TREES_LISTED` running tasks only.
        asker: the uid asking: its own tasks' command lines are whole, others' cut to
            :data:`~governor.core.state.SHOWN_COMMAND_CHARS` (``ps --all``).
    """
    running = list(running)
    if reserved is None:
        reserved = vocabulary.reserved_by_task(running, usage)
    rows = []
    for index, task in enumerate(running):
        got = allocation.groups.get(task.group) if allocation else None
        used, _ = split_usage(usage.get(task.cgroup, {}))
        listed, total = processes(task) if index < TREES_LISTED else ([], None)
        rows.append({**task.to_json(command_chars=_shown(task, asker)), "state": "running",
                     "guarantee": vocabulary.task_guarantee(task.demand, float(got.tasks) if got else 0.0),
                     "reserved": dict(reserved.get(task.id, {})), "usage": used,
                     "processes": listed, "processes_total": total})
    for entry in queued:
        rows.append({**entry.task.to_json(command_chars=_shown(entry.task, asker)), "state": "queued", "started": None, "queued_at": entry.queued_at,
                     "position": positions.get(entry.task.id, {}).get("position"),
                     "reason": positions.get(entry.task.id, {}).get("reason"), "guarantee": {}, "reserved": {}, "usage": {},
                     "processes": [],
                     "processes_total": 0})
    return rows


def ps_filter(asker: int, *, everyone: bool, users: Iterable[str], groups: Iterable[str],
              task: str | None) -> Callable[[Task], bool]:
    """Which tasks ``ps`` lists (``ps``'s request): the ``asker``'s (a uid) own, or with
    ``everyone`` everyone's; with ``users`` (names or uids, ``ps -u``) only theirs, with
    ``groups`` (``--group``) only those in these groups, whoever's, as ps and squeue filter;
    with ``task`` only the task of that id."""
    users, groups = frozenset(users), frozenset(groups)
    anyone = everyone or bool(users) or bool(groups)

    def chosen(listed: Task) -> bool:
        return ((anyone or listed.uid == asker) and task in (None, listed.id)
                and (not users or listed.user in users or str(listed.uid) in users)
                and (not groups or listed.group in groups))
    return chosen


def _shown(task: Task, asker: int) -> int | None:
    return None if task.uid == asker else SHOWN_COMMAND_CHARS


def processes(pids: Iterable[int]) -> list[dict]:
    """``{"pid", "ppid", "name"}`` of each of ``pids`` that still runs, in order (psutil)."""
    found = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            with process.oneshot():
                found.append({"pid": pid, "ppid": process.ppid(), "name": process.name()})
        except psutil.Error:
            continue  # exited meanwhile
    return found
