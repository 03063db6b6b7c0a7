"""What the stages tell settle: one typed value per kind of event (DESIGN.md §4), and the
:class:`Inbox` they are put in.

Each is put in the inbox (:meth:`Inbox.put`, or :meth:`Settle.now
<governor.daemon.settle.Settle.now>` for a :class:`Reload`); its
:attr:`trigger` is how the log, status and ``explain`` name the refill it causes, and
:attr:`refill` says whether it changed what the groups are given (a client leaving the queue
did not: only the queue is looked at again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from governor.cgroups.stats import CgroupStats
from governor.core.state import Task

__all__ = ["SETTLE_GAP_S", "Batch", "Event", "Exit", "FairShare", "ForeignChange", "Handover", "Inbox", "Launch", "Left",
           "Reconcile", "Reload", "Sample", "Session"]

log = logging.getLogger("governor.daemon")
# Least time between two settles: under a storm the events of these milliseconds fold into one
# settle (one refill, not one per turn of the event loop); a sparse event settles at once.
SETTLE_GAP_S = 0.005


@dataclass(frozen=True)
class Launch:
    """A task joined the queue (``launch``): ``task``, as it waits (its cgroup not made yet)."""

    task: Task
    refill = True

    @property
    def trigger(self) -> str:
        return f"launch of task {self.task.id}"


@dataclass(frozen=True)
class Left:
    """A queued task left the queue unstarted (its client went away, or it was stopped)."""

    task_id: str
    refill = False

    @property
    def trigger(self) -> str:
        return f"task {self.task_id} left the queue"


@dataclass(frozen=True)
class Exit:
    """Tasks ended, as ``how`` found them (``exit``: the kernel's event; ``reconcile``: the
    periodic pass; ``stop``, ``time limit``): ``tasks``, as they ran (already forgotten by the
    running tasks); ``stats``, each one's cgroup counters as it ended, in the same order (None:
    none could be read); and ``since``, ``time.perf_counter()`` when the end was seen (None: now)."""

    how: str
    tasks: tuple[Task, ...]
    stats: tuple[CgroupStats | None, ...]
    since: float | None = None
    refill = True

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(task.id for task in self.tasks)

    @property
    def labels(self) -> tuple[str, ...]:
        """How the log names them: ``task 7``, ``session of alice``."""
        return tuple(task.label for task in self.tasks)

    @property
    def trigger(self) -> str:
        return f"{self.how} of {self.labels[0]}" if len(self.labels) == 1 else f"{self.how} of {len(self.labels)} tasks"


@dataclass(frozen=True)
class Session:
    """A user's session started (its first process was moved in): ``session``, the session's
    task (its user, uid, group and first pid)."""

    session: Task
    refill = True

    @property
    def trigger(self) -> str:
        return f"session of {self.session.user} started"


@dataclass(frozen=True)
class Sample:
    """A sample found every group using all of its CPU guarantee (``saturated``), or one no
    longer does: the groups are held to their guarantees, or released."""

    saturated: bool
    refill = True

    @property
    def trigger(self) -> str:
        return "saturation" if self.saturated else "slack"


@dataclass(frozen=True)
class FairShare:
    """A fair-share tick moved the effective weights past the step that is worth a refill."""

    refill = True

    @property
    def trigger(self) -> str:
        return "fair share: effective weights moved"


@dataclass(frozen=True)
class Handover:
    """A device drained: no process holds it any more, and it may be handed out. ``device``:
    how messages name it (``GPU 0``)."""

    device: str
    refill = True

    @property
    def trigger(self) -> str:
        return f"{self.device} handed over"


@dataclass(frozen=True)
class ForeignChange:
    """What the foreign tenants hold moved past noise (:mod:`governor.daemon.foreign_poll`): the
    capacity governor divides changed; ``held``, what they hold now, for people."""

    held: str
    refill = True

    @property
    def trigger(self) -> str:
        return f"foreign tenants now hold {self.held}"


@dataclass(frozen=True)
class Reconcile:
    """The periodic pass over the tree ended (whatever it found): the queue is looked at again,
    and the settle that follows tells a waiter the pass is over (``settle_generation``)."""

    refill = False

    @property
    def trigger(self) -> str:
        return "reconcile"


@dataclass(frozen=True)
class Reload:
    """What the groups are given changed by an operation whose reply must find it in force:
    ``what`` (``reload``, ``weight of physics``, ``start``, ``re-adoption``); with ``full``,
    every running task's caps are planned and applied again too."""

    what: str
    full: bool = False
    refill = True

    @property
    def trigger(self) -> str:
        return self.what


Event = Launch | Left | Exit | Session | Sample | FairShare | Handover | ForeignChange | Reconcile | Reload


@dataclass
class Batch:
    """Events to settle together: when they are settled (``done``), what they were
    (``triggers``), whether any needs a refill, when the first was seen and when the last was
    added (``time.perf_counter()``), and the events themselves with their data, in the order
    they were put (``events``; a trigger :meth:`Inbox.add` was given has none)."""

    done: asyncio.Future
    triggers: list[str]
    refill: bool
    since: float
    latest: float
    events: list[Event] = field(default_factory=list)

    @property
    def trigger(self) -> str:
        """One trigger for the events settled together: ``launch of 3 tasks, reload``."""
        if len(self.triggers) == 1:
            return self.triggers[0]
        tasks: dict[str, list[str]] = {}
        for trigger in self.triggers:
            kind, of_task, _ = trigger.partition(" of task ")
            tasks.setdefault(kind if of_task else trigger, []).append(trigger)
        return ", ".join(same[0] if len(same) == 1 else f"{kind} of {len(same)} tasks" if " of task " in same[0]
                         else kind for kind, same in tasks.items())


class Inbox:
    """The events waiting for settle, built before every stage that puts one: those of one
    turn of the event loop, or of the :data:`SETTLE_GAP_S` since the last settle, are handed to
    its reader together (Mesos's coalescing ``allocate()``); one batch at a time: what comes
    while one is read waits for the next.

    Attributes:
        closing: set when the daemon stops: nothing starts any more (settle and the stages
            that would put an event look at it).
        generation: settle passes finished since the start (``daemon.settle_generation`` in
            status): a client that saw generation ``g`` and caused an event knows the daemon
            has acted on it once the generation passes ``g`` (the tests wait on it, not on a
            sleep).
    """

    def __init__(self) -> None:
        self.closing = False
        self.generation = 0
        self._reader: Callable[[Batch], Awaitable[None]] | None = None
        self._batch: Batch | None = None  # events waiting for the next settle
        self._running: asyncio.Task | None = None  # the settle under way
        self._settled_at = 0.0  # time.perf_counter() when the last settle ended

    def read_by(self, reader: Callable[[Batch], Awaitable[None]]) -> None:
        """Hand every batch to ``reader`` from now on (settle, when it is built).

        Raises:
            RuntimeError: the inbox has a reader already.
        """
        if self._reader is not None:
            raise RuntimeError("the inbox has a reader already")
        self._reader = reader

    def put(self, event: Event) -> asyncio.Future:
        """Settle once for ``event`` and every other of this turn of the event loop, or of the
        :data:`SETTLE_GAP_S` since the last settle (later still while one runs). The refill's
        delay is measured from the event's ``since`` (an :class:`Exit`; others: now).

        Returns:
            A future done once settled, which raises what settling raised (also logged).

        Raises:
            RuntimeError: no event loop runs in this thread (the daemon runs on one).
        """
        since = event.since if isinstance(event, Exit) and event.since is not None else time.perf_counter()
        done = self.add(event.trigger, event.refill, since)
        self._batch.events.append(event)
        return done

    def add(self, trigger: str, refill: bool, since: float) -> asyncio.Future:
        """:meth:`put` for an event known by its ``trigger``, whether it needs a ``refill``,
        and when it was seen (``since``, ``time.perf_counter()``)."""
        loop = asyncio.get_running_loop()
        batch = self._batch
        if batch is None:
            batch = self._batch = Batch(loop.create_future(), [], False, since, since)
            self._schedule(loop)
        batch.triggers.append(trigger)
        batch.refill |= refill
        batch.since = min(batch.since, since)
        batch.latest = time.perf_counter()
        return batch.done

    async def drain(self) -> None:
        """Wait until every settle asked for so far is done (the daemon stopping; or
        :meth:`Daemon.settled <governor.daemon.root.Daemon.settled>`)."""
        while self.pending:
            running = self._running is not None and not self._running.done()
            await asyncio.wait([self._running if running else self._batch.done])

    @property
    def pending(self) -> bool:
        """Whether a settle is asked for or under way."""
        return self._batch is not None or (self._running is not None and not self._running.done())

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._running is not None and not self._running.done():
            return  # the settle under way starts the next when it ends
        wait = self._settled_at + SETTLE_GAP_S - time.perf_counter()
        if wait > 0:
            loop.call_later(wait, self._start)
        else:
            loop.call_soon(self._start)

    def _start(self) -> None:
        if self._batch is None or (self._running is not None and not self._running.done()):
            return
        batch, self._batch = self._batch, None
        self._running = asyncio.get_running_loop().create_task(self._read(batch))

    async def _read(self, batch: Batch) -> None:
        try:
            await self._reader(batch)
        except Exception as error:
            log.exception("settling after %s failed", batch.trigger)
            batch.done.set_exception(error)
            batch.done.exception()  # logged above: only a launch that awaits it raises it again
        else:
            batch.done.set_result(None)
        finally:
            self._settled_at = time.perf_counter()
            self._running = None
            if self._batch is not None:
                self._schedule(asyncio.get_running_loop())
