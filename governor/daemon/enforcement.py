"""Enforcement: from the running tasks to the limits in force (DESIGN.md §3). Progressive filling
gives each group its allocation, the plan turns allocations into guarantees (weights, and
quotas while every group wants all of its own), the hierarchy writes what changed, and what the
kernel accepted is what status shows. Only settle calls :meth:`Enforcement.refill`."""

from __future__ import annotations

import logging
import time

from governor.cgroups.limits import CgroupLimits
from governor.daemon.effector import Effector
from governor.daemon.filling import fill
from governor.daemon.journal import Journal
from governor.daemon.policy import Policy
from governor.daemon.unit_protection import UnitProtection
from governor.errors import FillingDiverged
from governor.core.cpu_saturation import hold_scale
from governor.core.plan import group_limits, held_login_limits, inside_root, root_limits
from governor.core.protection import Protection, memory_protection
from governor.core.group_tree import subtree_sums, with_limit
from governor.core.model import DEMAND_MET, Allocation
from governor.core.state import Tasks, one_session_each

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
        policy = self.policy
        demands = self.tasks.demands()
        try:
            self.allocation = fill(policy.config, policy.capacity, policy.fair_weight, demands)
        except FillingDiverged as error:
            self._diverged(trigger, error, full)
            return
        full, self._full_due = full or self._full_due, False
        got = self.allocation.groups if self.allocation else {}
        planned, root = self._desired(demands, full)
        report = self.effector.apply_plan(planned)
        if self.units is not None:
            self.units.follow(root, policy.config.memory_protection)
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

    def _desired(self, demands: dict[str, dict[str, float]], full: bool) -> tuple[dict[str, CgroupLimits], Protection]:
        """The limits the last filling asks for: cgroup → its limits (the root's, every group's,
        each login slice's; with ``full`` every task's and session's caps too, device rules
        included), and the root's ``(memory.min, memory.low)`` in bytes, which governor's
        systemd units follow. Keeps the groups' guarantees, whose weights the next plan keeps
        where it can."""
        policy = self.policy
        got = self.allocation.groups if self.allocation else {}
        logins = self.tasks.logins()
        outside: dict[str, dict[str, float]] = {}
        sessions: dict[str, float] = {}  # group → the memory its session cgroups below the root declare
        for login in one_session_each(self.tasks.sessions()):  # a user's two places count once
            if not login.is_login:
                sessions[login.group] = sessions.get(login.group, 0.0) + login.demand.get("memory", 0.0)
                continue
            total = outside.setdefault(login.group, {})
            for resource, amount in login.demand.items():
                total[resource] = total.get(resource, 0.0) + amount
        fractions = {g: float(a.tasks) for g, a in got.items()}
        allocations, inside = inside_root({g: a.allocation for g, a in got.items()}, demands, fractions, outside)
        # Protection follows what was admitted below the root: a session is never admitted, and
        # is promised none of its cap (issue 43; DESIGN.md §3 "an idle shell holds nothing").
        admitted = {g: {"memory": max(0.0, d.get("memory", 0.0) - sessions.get(g, 0.0))} for g, d in inside.items()}
        # A department's cgroup carries the sum of its labs' below the root (DESIGN.md §3).
        parents = policy.config.parents
        allocations.update(subtree_sums(allocations, parents))
        admitted.update(subtree_sums(admitted, parents))
        nodes = self.allocation.nodes if self.allocation else {}
        root, protection = self._protection(admitted)
        # Held, the groups together use the reserve the system leaves idle too (issue 42).
        scale = hold_scale(policy.capacity.get("cpu", 0.0), policy.lent_cpu)
        guarantees = group_limits(
            policy.capacity, allocations, protection=protection,
            io_devices=policy.io_devices, io_sharing=policy.io_sharing, cpu_mode=policy.config.cpu_enforcement,
            cpus=policy.cpus, previous=self._guarantees,
            met={g for g, a in (*got.items(), *nodes.items()) if a.stop == DEMAND_MET}, saturated=self.cpu_saturated,
            hold_scale=scale, pids=policy.root_caps.get("pids"),
        )
        self._guarantees = guarantees
        config = policy.config
        # The root's bound is the host's less the reserve (whose idle cores it borrows), never
        # less what foreign tenants hold: lowering its memory.max under what governor admitted
        # would reclaim or kill its tasks.
        planned = {"": root_limits(policy.host_capacity, protection=root, caps=policy.root_caps,
                                   lent_cpu=policy.lent_cpu),
                   **{config.place(g): with_limit(limits, config.effective_limit(g))
                      for g, limits in guarantees.items()}}
        if full:  # (an unrecorded task's caps are what its cgroup holds: none to plan)
            planned.update((task.cgroup, policy.caps(task)) for task in self.tasks
                           if not task.is_login and not task.unrecorded)
        for login in logins:
            caps = policy.caps(login)
            planned[login.cgroup] = (held_login_limits(caps, login.demand.get("cpu", 0.0),
                                                       scale * fractions.get(login.group, 0.0))
                                     if self.cpu_saturated else caps)
        return planned, root

    def _protection(self, admitted: dict[str, dict[str, float]]) -> tuple[Protection, dict[str, Protection]]:
        """The root's and each group's ``(memory.min, memory.low)`` (:mod:`governor.core.protection`)
        over the memory the groups' admitted tasks declared below the root (``admitted``: group →
        ``{"memory": bytes}``, sessions' caps not in it); none with ``memory_protection = false``."""
        config = self.policy.config
        if not config.memory_protection:
            return (0.0, 0.0), {}
        guarantees = {rule.name: rule.guarantee["memory"] for rule in config.groups if "memory" in rule.guarantee}
        return memory_protection(self.policy.capacity.get("memory", 0.0),
                                 {g: demand.get("memory", 0.0) for g, demand in admitted.items()}, guarantees,
                                 self.policy.floors(admitted), config.parents)

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
