"""Enforcement: from the running tasks to the limits in force (DESIGN.md §3). The pure
:func:`~governor.daemon.desired.desired` says every governed cgroup's limits (progressive
filling, then the plan); the effector writes what changed, and what the kernel accepted is what
status shows. Only settle calls :meth:`Enforcement.refill`."""

from __future__ import annotations

import logging
import time

from governor.cgroups.limits import CgroupLimits
from governor.core.model import Allocation
from governor.core.state import Tasks
from governor.daemon.desired import desired
from governor.daemon.effector import Effector
from governor.daemon.journal import Journal
from governor.daemon.policy import Policy
from governor.daemon.unit_protection import UnitProtection
from governor.errors import FillingDiverged

__all__ = ["Enforcement"]

log = logging.getLogger("governor.daemon")
# Triggers of a refill that follow a state that flips (inbox.Sample): the journal tells the state
# once it holds (Observation.check_saturation), not every refill it causes.
_FLIPS = ("saturation", "slack")


class Enforcement:
    """The allocation in force and the limits that carry it.

    Args:
        effector: what writes the limits (:class:`~governor.daemon.effector.Effector`);
            policy: the config in force; tasks: the running tasks; journal: events, and the
            metrics sink where it has one (``refill(seconds)``, ``write_error()``,
            ``allocation_failure()``).

    Attributes:
        allocation: the last progressive filling (paper §4.1), None with no task.
        cpu_saturated: every group wants all of its CPU guarantee, so each is held to it
            (:meth:`hold`).
        filling: the last refill for status: ``at`` (unix s), ``trigger``, ``duration_ms``,
            ``files_written``, ``delay_ms`` (from the event it answers to the last write);
            ``failures``: refills whose filling diverged since the start; ``error``: while the
            last one did, ``{"at": unix s, "trigger", "message"}`` (its plan not made: the last
            good one stays in force), else None.
        refilled_at: ``time.perf_counter()`` when the last refill began.
        units: the systemd units above governor's root whose memory protection follows the
            root's (:class:`~governor.daemon.unit_protection.UnitProtection`), or None.
    """

    def __init__(self, *, effector: Effector, policy: Policy, tasks: Tasks, journal: Journal,
                 units: UnitProtection | None = None):
        self.effector = effector
        self.policy = policy
        self.tasks = tasks
        self.journal = journal
        self.metrics = journal.metrics
        self.allocation: Allocation | None = None
        self.cpu_saturated = False
        self.filling: dict = {"at": None, "trigger": "start", "duration_ms": 0.0, "files_written": 0,
                              "failures": 0, "error": None}
        self.refilled_at = 0.0
        self.units = units
        self._guarantees: dict[str, CgroupLimits] = {}  # the last plan, whose weights a refill keeps where it can
        self._full_due = False  # a full refill diverged: the next one that succeeds plans the caps too

    def refill(self, trigger: str, *, since: float | None = None, full: bool = False) -> None:
        """Re-run progressive filling over the running tasks and write the guarantees that
        changed: the root's and the groups' files (a login session's CPU quota too: it follows
        the hold, its group's quota not covering it). ``since`` (``time.perf_counter()``) is
        when the event it answers was seen.

        With ``full`` (after a reload or a restart: the config, the inventory or the record
        changed), every running task's and session's caps are planned and applied too, device
        rules included, so that they follow the config in force; otherwise task caps, which
        change only with it, are left out (a refill's cost stays flat however many run).

        A filling that diverges (:class:`~governor.errors.FillingDiverged`) changes nothing:
        the last good allocation and plan stay in force, and it is an error event, counted in
        ``filling`` and the metrics (DESIGN.md §2)."""
        start = self.refilled_at = time.perf_counter()
        full, self._full_due = full or self._full_due, False
        try:
            want = desired(self.policy, self.tasks, cpu_saturated=self.cpu_saturated, full=full,
                           previous=self._guarantees)
        except FillingDiverged as error:
            self._diverged(trigger, error, full)
            return
        self.allocation, self._guarantees = want.allocation, want.guarantees
        got = want.allocation.groups if want.allocation else {}
        report = self.effector.apply_plan(want.limits)
        if self.units is not None:
            self.units.follow(want.root, self.policy.config.memory_protection)
        for error in report.errors:
            if self.metrics:
                self.metrics.write_error()
            self.journal.event("error", f"{error}; the value in force stays", logging.ERROR)
        end = time.perf_counter()
        seconds = end - start
        delay_ms = (end - (start if since is None else since)) * 1000
        self.filling = {"at": time.time(), "trigger": trigger, "duration_ms": seconds * 1000,
                        "files_written": report.written, "delay_ms": delay_ms,
                        "failures": self.filling["failures"], "error": None}
        if self.metrics:
            self.metrics.refill(seconds)
        shares = ", ".join(f"{g} {a.dominant_share:.1%}" for g, a in got.items()) or "no tasks"
        line = (f"refill after {trigger}: {shares} ({seconds * 1000:.2f} ms, {report.written} files written, "
                f"{delay_ms:.2f} ms after the event)")
        if trigger in _FLIPS:
            log.debug("%s", line)
        else:
            self.journal.event("refill", line)

    def _diverged(self, trigger: str, error: FillingDiverged, full: bool) -> None:
        """Report a filling that diverged; the plan in force is left as it is (no fallback
        division: flat DRF would drop the tree's guarantees and limits)."""
        self._full_due |= full
        message = f"refill after {trigger}: the allocation failed ({error}); the last good plan stays in force"
        self.filling = {**self.filling, "failures": self.filling["failures"] + 1,
                        "error": {"at": time.time(), "trigger": trigger, "message": str(error)}}
        if self.metrics:
            self.metrics.allocation_failure()
        self.journal.event("error", message, logging.ERROR)

    def hold(self, saturated: bool, why: str) -> None:
        """Hold every group to its CPU guarantee, or let it borrow again, from the next refill.
        Logged at debug only: the journal tells the state once it holds
        (:meth:`Observation.check_saturation <governor.daemon.observation.Observation.check_saturation>`)."""
        self.cpu_saturated = saturated
        log.debug("%s", why)
