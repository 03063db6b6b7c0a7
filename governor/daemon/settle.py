"""Settle: the one pipeline every event goes through (DESIGN.md §4), and the only caller of a
refill. Events (:mod:`governor.daemon.inbox`: a launch, exits, a session, a reload, a
sample, a GPU handed over) are put in the :class:`~governor.daemon.inbox.Inbox`; those of one
turn of the event loop, or of the :data:`~governor.daemon.inbox.SETTLE_GAP_S` since the last
settle, are settled together (Mesos's coalescing ``allocate()``)::

    admit (discrete DRF on memory) → create (the cgroups, on the cgroup thread) → caps →
    plan + apply (one refill) → records → move (on the cgroup thread) → reply

The decision (admit, and how the admitted start) is a pure step over a snapshot
(:func:`governor.daemon.settle_step.step`); this module takes the snapshot and carries out
its effects: the refill (:class:`~governor.daemon.enforcement.Enforcement`) and the starts
(:class:`~governor.daemon.starts.Starts`). Settles run one after another: what an event brings while one runs waits for
the next.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from governor.daemon.enforcement import Enforcement
from governor.daemon.inbox import Batch, Inbox, Reload
from governor.daemon.journal import Journal
from governor.daemon.policy import Policy
from governor.daemon.settle_step import Snapshot, step
from governor.daemon.starts import Starts
from governor.daemon.waiting import Queue
from governor.host.sd_notify import Notifier
from governor.core.state import Tasks

__all__ = ["Settle"]


class Settle:
    """Admission, starts and refills, for every event.

    Args:
        policy: the config in force; tasks: the running tasks; queue: task id → the launch
            waiting for it, and the last admission (:class:`~governor.daemon.waiting.Queue`).
        starts: what carries out the starts decided (:class:`~governor.daemon.starts.Starts`).
        enforcement: the refill; journal: events; notifier: systemd's STATUS line.
        usage: cgroup → its measured use, as observation keeps it (a session holds what it
            uses: admission counts it).
        inbox: the events to settle (:class:`~governor.daemon.inbox.Inbox`): settle reads
            each batch of it.
        drain_devices: look for the processes still holding the devices ended tasks left
            (:meth:`Handover.drain <governor.daemon.handover.Handover.drain>`); called at each
            settle.
    """

    def __init__(self, *, policy: Policy, tasks: Tasks, queue: Queue, starts: Starts, enforcement: Enforcement,
                 journal: Journal, notifier: Notifier, usage: Mapping[str, Mapping[str, float]], inbox: Inbox,
                 drain_devices: Callable[[], None]):
        self.policy = policy
        self.tasks = tasks
        self.queue = queue
        self.starts = starts
        self.enforcement = enforcement
        self.journal = journal
        self.notifier = notifier
        self.usage = usage
        self.inbox = inbox
        self.drain_devices = drain_devices
        inbox.read_by(self._settle_batch)

    def now(self, event: Reload) -> None:
        """Refill now, for an operation whose reply must find its change in force (a reload,
        a weight set, a restart); waiting tasks are admitted by the next settle. With
        ``event.full`` (a reload, a restart), every running task's caps are planned and applied
        again too (:meth:`Enforcement.refill <governor.daemon.enforcement.Enforcement.refill>`)."""
        self._refill_now(event.trigger, True, time.perf_counter(), event.full)
        if self.queue:
            self.inbox.add(event.trigger, False, time.perf_counter())

    def summary(self) -> str:
        """The daemon in one line, for systemd's STATUS."""
        waiting = f", {len(self.queue)} waiting" if self.queue else ""
        return (f"{len(self.tasks)} task(s) in {len(self.tasks.counts())} group(s){waiting}; "
                f"last filling: {self.enforcement.filling['trigger']}")

    # ── the batch ───────────────────────────────────────────────────────────────────────

    async def _settle_batch(self, batch: Batch) -> None:
        # A refill since the last of these events (a reload's, a weight's) already counted them.
        refill = batch.refill and self.enforcement.refilled_at < batch.latest
        try:
            await self._settle(batch.trigger, refill, batch.since)
        finally:
            self._passed()  # failed or not, this batch's events were acted on

    def _refill_now(self, trigger: str, refill: bool, since: float, full: bool = False) -> None:
        if self.inbox.closing:
            return
        self.journal.changed()
        self.drain_devices()
        if refill:
            self.enforcement.refill(trigger, since=since, full=full)
            self.notifier.send(f"STATUS={self.summary()}")
        for entry in self.queue.values():
            entry.wake.set()
        self._passed()

    def _passed(self) -> None:
        self.inbox.generation += 1  # what the stages put in has been acted on
        self.journal.changed()  # status shows the new generation

    # ── the pipeline ────────────────────────────────────────────────────────────────────

    async def _settle(self, trigger: str, refill: bool, since: float) -> None:
        """Admit the waiting tasks that fit, start them, refill the groups once, and tell the
        clients still waiting where they stand. Nothing starts while the daemon stops: its
        waiting clients will ask the next one."""
        if self.inbox.closing:
            return
        self.journal.changed()  # the queue changes, even when nothing is logged
        self.drain_devices()
        # (A launch behind one of its group that waited before a restart and is not back yet
        # waits for it: governor.daemon.waiting.)
        waiting = [e for e in self.queue.values() if not e.decided and not self.queue.held(e)]
        effects = step(Snapshot(config=self.policy.config, capacity=self.policy.capacity, devices=self.policy.devices,
                                weight=self.policy.fair_weight, tasks=self.tasks, usage=self.usage,
                                waiting=[e.task for e in waiting], cpu_saturated=self.enforcement.cpu_saturated,
                                refill=refill, now=time.time()))
        self.queue.admission = effects.admission
        starting = [self.queue[task.id] for task in effects.starts]
        for entry, task in zip(starting, effects.starts):
            entry.task = task
        if effects.release:
            self.enforcement.hold(False, "a task starts: groups are no longer held to their CPU guarantees")
        started = await self.starts.create(starting)
        if effects.refill or started:
            self.enforcement.refill(trigger, since=since)
        if await self.starts.move_in(started) < len(started):
            self.enforcement.refill(f"failed start after {trigger}")
        for entry in starting:  # decided: the queue holds only what waits
            if self.queue.get(entry.task.id) is entry:
                del self.queue[entry.task.id]
        for entry in self.queue.values():
            entry.wake.set()
        self.notifier.send(f"STATUS={self.summary()}")
