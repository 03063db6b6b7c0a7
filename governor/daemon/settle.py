"""Settle: the one pipeline every event goes through (DESIGN.md §4), and the only caller of a
refill. Events (:mod:`governor.daemon.inbox`: a launch, exits, a session, a reload, a
sample, a GPU handed over) are put in the :class:`~governor.daemon.inbox.Inbox`; those of one
turn of the event loop, or of the :data:`~governor.daemon.inbox.SETTLE_GAP_S` since the last
settle, are settled together (Mesos's coalescing ``allocate()``)::

    admit (discrete DRF on memory) → create (the cgroups, on the cgroup thread) → caps →
    plan + apply (one refill) → records → move (on the cgroup thread) → reply

The decision (admit, and how the admitted start) is a pure step over a snapshot
(:func:`governor.daemon.settle_step.step`); this module takes the snapshot and carries out
its effects. Settles run one after another: what an event brings while one runs waits for
the next.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Mapping

from governor.cgroups.hierarchy import Hierarchy
from governor.daemon import gpu_places
from governor.daemon.enforcement import Enforcement
from governor.daemon.inbox import Batch, Inbox, Reload
from governor.daemon.journal import Journal, vector
from governor.daemon.policy import Policy
from governor.daemon.records import Records
from governor.daemon.settle_step import Snapshot, step
from governor.daemon.tree import Tree
from governor.daemon.waiting import Queue
from governor.errors import GovernorError, ProcessGone, RequestError
from governor.host.notify import Notifier
from governor.core.queue import Entry
from governor.core.state import Task, Tasks

__all__ = ["Settle"]

log = logging.getLogger("governor.daemon")


class Settle:
    """Admission, starts and refills, for every event.

    Args:
        hierarchy, tree: governor's cgroups, and the thread that makes and joins them.
        policy: the config in force; tasks: the running tasks; queue: task id → the launch
            waiting for it, and the last admission (:class:`~governor.daemon.waiting.Queue`); records: their records.
        enforcement: the refill; journal: events; notifier: systemd's STATUS line.
        usage: cgroup → its measured use, as observation keeps it (a session holds what it
            uses: admission counts it).
        inbox: the events to settle (:class:`~governor.daemon.inbox.Inbox`): settle reads
            each batch of it.
        follow: what to do with a task once it started (watch its exit, arm its time limit:
            :meth:`Exits.follow <governor.daemon.exits.Exits.follow>`): called with the task
            and its launch.
        drain_gpus: look for the processes still holding the GPUs ended tasks left
            (:meth:`Handover.drain <governor.daemon.handover.Handover.drain>`); called at each
            settle.
        metrics: optional sink with ``admitted(waited_seconds)``.
    """

    def __init__(self, *, hierarchy: Hierarchy, tree: Tree, policy: Policy, tasks: Tasks, queue: Queue,
                 records: Records, enforcement: Enforcement, journal: Journal, notifier: Notifier,
                 usage: Mapping[str, Mapping[str, float]], inbox: Inbox, follow: Callable[[Task, Entry], None],
                 drain_gpus: Callable[[], None], metrics=None):
        self.hierarchy = hierarchy
        self.tree = tree
        self.policy = policy
        self.tasks = tasks
        self.queue = queue
        self.records = records
        self.enforcement = enforcement
        self.journal = journal
        self.notifier = notifier
        self.usage = usage
        self.metrics = metrics
        self.inbox = inbox
        self.follow = follow
        self.drain_gpus = drain_gpus
        inbox.read_by(self._settle_batch)

    def now(self, event: Reload) -> None:
        """Refill now, for an operation whose reply must find its change in force (a reload,
        a weight set, a restart); waiting tasks are admitted by the next settle. With
        ``event.full`` (a reload, a restart), every running task's caps are planned and applied
        again too (:meth:`Enforcement.refill <governor.daemon.enforcement.Enforcement.refill>`)."""
        self._refill_now(event.trigger, True, time.perf_counter(), event.full)
        if self.queue:
            self.inbox.add(event.trigger, False, time.perf_counter())

    def started_reply(self, task: Task) -> dict:
        """The launch reply of a running task: its id, group, cgroup, the caps in force and,
        when GPUs are governed, ``gpus``: how CUDA names each of its GPUs (UUIDs, else minor
        numbers: :meth:`governor.core.gpus.Gpu.visible_id`)."""
        reply = {"task": task.id, "group": task.group, "cgroup": str(self.hierarchy.path(task.cgroup)),
                 "limits": self.hierarchy.in_force(task.cgroup)}
        if self.policy.gpus is not None:
            known = self.policy.gpus.gpus
            reply["gpus"] = [known[i].visible_id() for i in task.gpus if i < len(known)]
        return reply

    def summary(self) -> str:
        """The daemon in one line, for systemd's STATUS."""
        waiting = f", {len(self.queue)} waiting" if self.queue else ""
        return (f"{len(self.tasks)} task(s) in {len(self.tasks.counts())} group(s){waiting}; "
                f"last filling: {self.enforcement.filling['trigger']}")

    # ── the batch ───────────────────────────────────────────────────────────────────────

    async def _settle_batch(self, batch: Batch) -> None:
        # A refill since the last of these events (a reload's, a weight's) already counted them.
        refill = batch.refill and self.enforcement.refilled_at < batch.latest
        await self._settle(batch.trigger, refill, batch.since)

    def _refill_now(self, trigger: str, refill: bool, since: float, full: bool = False) -> None:
        if self.inbox.closing:
            return
        self.journal.changed()
        self.drain_gpus()
        if refill:
            self.enforcement.refill(trigger, since=since, full=full)
            self.notifier.send(f"STATUS={self.summary()}")
        for entry in self.queue.values():
            entry.wake.set()

    # ── the pipeline ────────────────────────────────────────────────────────────────────

    async def _settle(self, trigger: str, refill: bool, since: float) -> None:
        """Admit the waiting tasks that fit, start them, refill the groups once, and tell the
        clients still waiting where they stand. Nothing starts while the daemon stops: its
        waiting clients will ask the next one."""
        if self.inbox.closing:
            return
        self.journal.changed()  # the queue changes, even when nothing is logged
        self.drain_gpus()
        waiting = [e for e in self.queue.values() if not e.decided]
        effects = step(Snapshot(config=self.policy.config, capacity=self.policy.capacity, gpus=self.policy.gpus,
                                weight=self.policy.fair_weight, tasks=self.tasks, usage=self.usage,
                                waiting=[e.task for e in waiting], cpu_saturated=self.enforcement.cpu_saturated,
                                refill=refill, now=time.time()))
        self.queue.admission = effects.admission
        starting = [self.queue[task.id] for task in effects.starts]
        for entry, task in zip(starting, effects.starts):
            entry.task = task
        if effects.release:
            self.enforcement.hold(False, "a task starts: groups are no longer held to their CPU guarantees")
        started = await self._create(starting)
        if effects.refill or started:
            self.enforcement.refill(trigger, since=since)
        if await self._move_in(started) < len(started):
            self.enforcement.refill(f"failed start after {trigger}")
        for entry in starting:  # decided: the queue holds only what waits
            if self.queue.get(entry.task.id) is entry:
                del self.queue[entry.task.id]
        for entry in self.queue.values():
            entry.wake.set()
        self.notifier.send(f"STATUS={self.summary()}")

    async def _create(self, starting: list[Entry]) -> list[Entry]:
        """Make the admitted tasks' cgroups (where :func:`~governor.daemon.settle_step.step`
        placed them) with their caps, device rules included (before
        :meth:`_move_in`: nothing joins a cgroup before its caps are in force); refuse the
        launches whose cgroup could not be made or limited, or whose GPUs a reload during the
        make took away (:func:`~governor.daemon.gpu_places.starting`)."""
        if not starting:
            return []
        made = await self.tree.call(lambda: self.tree.make([entry.task.cgroup for entry in starting]))
        started = []
        for entry, error in zip(starting, made):
            if error is None and not self._gone(entry):
                try:  # a reload meanwhile may have renumbered the GPUs: found again by identity
                    entry.task = gpu_places.starting(self.policy.gpus, entry.task,
                                                     {*self.tasks.gpu_holders(), *self.tasks.draining()})
                    self.hierarchy.apply(entry.task.cgroup, self.policy.caps(entry.task))
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

    async def _move_in(self, started: list[Entry]) -> int:
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
            try:
                if error is not None:
                    raise error
                self._check(entry)
            except GovernorError as failed:
                self._fail(entry, failed)
                continue
            moved += 1
            self._started(entry)
        return moved

    def _started(self, entry: Entry) -> None:
        task = entry.task
        self.follow(task, entry)
        waited = time.time() - entry.queued_at
        if self.metrics:
            self.metrics.admitted(waited)
        self.journal.event("task_started", f"task {task.id} started: pid {task.pid}, user {task.user}, group "
                                           f"{task.group}, demand {vector(task.demand)}"
                                           + (f", after {waited:.1f} s in the queue" if waited >= 0.1 else ""))
        entry.decide(reply=self.started_reply(task))

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
