"""Starts: the effector of the tasks settle admitted (:class:`~governor.daemon.settle_step.Effects`
``starts``): their cgroups made and limited, their records written, their processes moved in
and their clients answered, through the cgroup tree (:class:`~governor.daemon.tree.Tree`) and
the hierarchy's driver. The refill that goes between is settle's (:class:`~governor.daemon.settle.Settle`)."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

from governor.cgroups.hierarchy import Hierarchy
from governor.core.queue import Entry
from governor.core.state import GPU, Task, Tasks
from governor.daemon import device_places
from governor.daemon.history import start_entry
from governor.daemon.journal import Journal, vector
from governor.daemon.policy import Policy
from governor.daemon.records import Records
from governor.daemon.tree import Tree
from governor.daemon.waiting import Queue
from governor.errors import GovernorError, ProcessGone, RequestError
from governor.host.accounting import STOP
from governor.host.processes import birth, boot_clock

__all__ = ["Starts"]

log = logging.getLogger("governor.daemon")


class Starts:
    """Carries out the starts settle decided, and answers the launches.

    Args:
        hierarchy, tree: governor's cgroups, and the thread that makes and joins them (its
            effector writes their caps).
        policy: the config in force (caps, GPUs); tasks: the running tasks; queue: the
            launches waiting (a launch stopped meanwhile is not started); records: the task
            records; journal: events.
        follow: what to do with a task once it started (watch its exit, arm its time limit:
            :meth:`Exits.follow <governor.daemon.exits.Exits.follow>`): called with the task
            and its launch (None: one withdrawn during its move, whose pidfd closed with its client).
        end: how a started task is ended, why and by whom (:meth:`Exits.end
            <governor.daemon.exits.Exits.end>`): one stopped during its move.

    A start is counted in the journal's metrics (``admitted(waited_seconds)``), where it has any.
    """

    def __init__(self, *, hierarchy: Hierarchy, tree: Tree, policy: Policy, tasks: Tasks, queue: Queue,
                 records: Records, journal: Journal, follow: Callable[[Task, Entry | None], None],
                 end: Callable[[Task, str, str | None], bool]):
        self.hierarchy = hierarchy
        self.tree = tree
        self.effector = tree.effector
        self.policy = policy
        self.tasks = tasks
        self.queue = queue
        self.records = records
        self.journal = journal
        self.follow = follow
        self.end = end
        self.metrics = journal.metrics

    def started_reply(self, task: Task) -> dict:
        """The launch reply of a running task: its id, group, cgroup, the caps in force,
        ``memory_cgroup`` where its memory files are in another directory (v1's memory
        hierarchy: ``governor run`` reads its memory there, not through a pid) and, when GPUs
        are governed, ``gpus``: how CUDA names each of its GPUs (UUIDs, else minor
        numbers: :meth:`governor.core.gpus.Gpu.visible_id`)."""
        reply = {"task": task.id, "group": task.group, "cgroup": str(self.hierarchy.path(task.cgroup)),
                 "limits": self.hierarchy.in_force(task.cgroup)}
        memory = str(self.hierarchy.memory_path(task.cgroup))
        if memory != reply["cgroup"]:
            reply["memory_cgroup"] = memory
        if self.policy.gpus is not None:
            known = self.policy.gpus.gpus
            reply["gpus"] = [known[i].visible_id() for i in task.devices.get(GPU, ()) if i < len(known)]
        return reply

    async def create(self, starting: list[Entry]) -> list[Entry]:
        """Make the admitted tasks' cgroups (where :func:`~governor.daemon.settle_step.step`
        placed them) with their caps, device rules included (before
        :meth:`move_in`: nothing joins a cgroup before its caps are in force); refuse the
        launches whose cgroup could not be made or limited, or whose devices a reload during the
        make took away (:func:`~governor.daemon.device_places.starting`)."""
        if not starting:
            return []
        made = await self.tree.call(lambda: self.tree.make([entry.task.cgroup for entry in starting]))
        started = []
        for entry, error in zip(starting, made):
            if error is None and not self._gone(entry):
                try:  # a reload meanwhile may have renumbered the devices: found again by identity
                    entry.task = device_places.starting(self.policy.devices, entry.task,
                                                        {*self.tasks.holders(), *self.tasks.draining()})
                    self.effector.apply(entry.task.cgroup, self.policy.caps(entry.task))
                except GovernorError as refused:
                    error = refused
            task = entry.task
            if error is not None or self._gone(entry):
                self.tree.remove([task.cgroup], groups=self.tasks.emptied(task))
                if not entry.decided:
                    entry.decide(error=RequestError("unavailable", str(error)))
                continue
            self.tasks.add(task)
            started.append(entry)
        return started

    async def move_in(self, started: list[Entry]) -> int:
        """Move each started task's pid into its cgroup and answer its client; returns how many
        were moved.

        The pid is the client's only while the client's process lives: it is checked before the
        move, and after it (had the process ended meanwhile, the pid moved may be another's).
        The record is written first: a daemon killed after the move must find it, or the
        process would run on in a cgroup nobody governs (killed before the move, the record of
        an empty cgroup is dropped at the restart)."""
        ready = []
        for entry in started:
            try:
                self._check(entry)
                self.records.save(entry.task)
            except GovernorError as error:
                self._fail(entry, error)
                continue
            ready.append(entry)
        if not ready:
            return 0
        moves = await self.tree.join([(e.task.cgroup, e.task.pid) for e in ready])
        moved = 0
        for entry, error in zip(ready, moves):
            withdrawn = False
            try:
                if error is not None:
                    raise error
                # Withdrawn during the move (its client left, a stop, a reload's refusal) with
                # its process moved in: undone, the process would run on in the task's cgroup
                # under its caps, counted nowhere (a client that closes its socket mid-move,
                # again and again, would so run outside admission). It is the started task.
                withdrawn = self._gone(entry) and self._moved_in(entry)
                if not withdrawn:
                    self._check(entry)
            except GovernorError as failed:
                self._fail(entry, failed)
                continue
            moved += 1
            self._started(entry, withdrawn)
        return moved

    def _started(self, entry: Entry, withdrawn: bool = False) -> None:
        """Follow a started task and answer its client (one still waiting: a launch
        ``withdrawn`` during the move keeps what its client was told; one stopped so is ended,
        as the stop asked)."""
        task = entry.task
        self.follow(task, None if withdrawn else entry)  # (a withdrawn launch's pidfd is its closed connection's)
        waited = time.time() - entry.queued_at
        if self.metrics:
            self.metrics.admitted(waited)
        self.journal.event("task_started", f"task {task.id} started: user {task.user}, group {task.group}, "
                                           f"demand {vector(task.demand)}"
                                           + (f", after {waited:.1f} s in the queue" if waited >= 0.1 else "")
                                           + ("; its launch was withdrawn while its process was moved in, and "
                                              "it is governed as started" if withdrawn else ""),
                           detail=f"pid {task.pid}")
        if entry.held_launch is not None:  # (its user left many launches unstarted: Launches)
            self.journal.record(entry.held_launch)
            entry.held_launch = None
        self.journal.record(start_entry(task, waited))
        if not entry.decided:
            entry.decide(reply=self.started_reply(task))
        elif entry.stopped_by is not None:
            self.end(task, STOP, entry.stopped_by)  # a kill the kernel refused is journalled there

    def _moved_in(self, entry: Entry) -> bool:
        """Whether the process that asked for ``entry``'s launch is in its task's cgroup: its pid
        is there, and the process of that pid was born before the launch queued (not one that
        took the pid since). Asked without the launch's pidfd, which closed with its client."""
        task = entry.task
        try:
            if task.pid not in self.hierarchy.pids(task.cgroup):
                return False
            age = boot_clock() - birth(task.pid)
        except (GovernorError, OSError, ValueError):
            return False
        return age >= time.time() - entry.queued_at

    def _check(self, entry: Entry) -> None:
        """Raise unless the launch still stands: not stopped, its client still there, and the
        process that asked still running (its pidfd).

        Raises:
            RequestError: ``bad_request``, the process has exited; ``stopped`` (already
                decided, or the client left the queue).
        """
        if self._gone(entry):
            raise entry.error or RequestError("stopped", f"task {entry.task.id} left the queue before it started")
        if entry.pidfd is None:
            return
        try:
            signal.pidfd_send_signal(entry.pidfd, 0)
        except ProcessLookupError:
            raise RequestError("bad_request", f"process {entry.task.pid}, which asked to be governed, has exited; "
                                              "its pid is not governed") from None
        except PermissionError:
            pass  # alive, and not ours to signal (a daemon not run as root)

    def _gone(self, entry: Entry) -> bool:
        """Whether a launch being started was decided meanwhile (stopped) or left the queue."""
        return entry.decided or self.queue.get(entry.task.id) is not entry

    def _fail(self, entry: Entry, error: GovernorError) -> None:
        """Undo a start that failed after the task was added, and answer its client."""
        task = entry.task
        self.tasks.remove(task.id)
        try:
            self.records.delete(task.id)
        except GovernorError as undone:
            log.warning("cannot remove the record of task %s: %s", task.id, undone)
        self.tree.remove([task.cgroup], groups=self.tasks.emptied(task))
        if entry.decided:
            return
        if not isinstance(error, RequestError):
            code = "bad_request" if isinstance(error, ProcessGone) else "unavailable"
            error = RequestError(code, str(error))
        entry.decide(error=error)
