"""What the stages tell settle: one typed value per kind of event (DESIGN.md §4).

Each is put in settle's inbox (:meth:`Settle.put <governor.daemon.settle.Settle.put>`, or
:meth:`Settle.now <governor.daemon.settle.Settle.now>` for a :class:`Reload`); its
:attr:`trigger` is how the log, status and ``explain`` name the refill it causes, and
:attr:`refill` says whether it changed what the groups are given (a client leaving the queue
did not: only the queue is looked at again).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Event", "Exit", "FairShare", "Handover", "Launch", "Left", "Reconcile", "Reload", "Sample", "Session"]


@dataclass(frozen=True)
class Launch:
    """A task joined the queue (``launch``)."""

    task_id: str
    refill = True

    @property
    def trigger(self) -> str:
        return f"launch of task {self.task_id}"


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
    periodic pass; ``stop``, ``time limit``): their labels (``task 7``, ``session of alice``),
    and ``since``, ``time.perf_counter()`` when the end was seen (None: now)."""

    how: str
    labels: tuple[str, ...]
    since: float | None = None
    refill = True

    @property
    def trigger(self) -> str:
        return f"{self.how} of {self.labels[0]}" if len(self.labels) == 1 else f"{self.how} of {len(self.labels)} tasks"


@dataclass(frozen=True)
class Session:
    """A user's session started (its first process was moved in)."""

    user: str
    refill = True

    @property
    def trigger(self) -> str:
        return f"session of {self.user} started"


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
    """GPU ``gpu`` drained: no process holds it any more, and it may be handed out."""

    gpu: int
    refill = True

    @property
    def trigger(self) -> str:
        return f"GPU {self.gpu} handed over"


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


Event = Launch | Left | Exit | Session | Sample | FairShare | Handover | Reconcile | Reload
