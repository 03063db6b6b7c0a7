"""The GPU guard outside governor's tasks (``[capacity] gpu_guard``, DESIGN.md §3 devices):
the GPU and control nodes denied where processes start before governor governs them, put on
when the daemon starts, put again after a reload, and taken off when it stops cleanly (a daemon
killed leaves it on, and the next one replaces it: :func:`~governor.cgroups.device_guard.put_guard`).

Where the kernel cannot deny at the start (a v1 host whose users start in the root ``devices``
cgroup, a parent that does not exist), a session process found holding a GPU node is ended and
logged instead, by the hand-over's sweep (:meth:`~governor.daemon.handover.Handover.sweep`):
:attr:`GpuGuard.sweeps` says so.
"""

from __future__ import annotations

import logging

from governor.cgroups.device_guard import GuardPlan, undo_guard
from governor.cgroups.hierarchy import Hierarchy
from governor.core.devices import denied_nodes
from governor.daemon.effector import Effector
from governor.daemon.journal import Journal
from governor.daemon.policy import Policy
from governor.host.daemons import Registry

__all__ = ["GpuGuard"]


class GpuGuard:
    """Put on and take off the guard the config asks for.

    Args:
        hierarchy: governor's cgroups (which hierarchy, where its root is); policy: the GPUs
            and the config; journal: events.
        registry: this host's daemons (:mod:`governor.host.daemons`): only the one that holds the
            sessions guards where they start (two would take each other's guard off, which is
            found by name); None: no other daemon is known.

    Attributes:
        plan: where the guard is now (None: off, or no GPU governed).
    """

    def __init__(self, *, hierarchy: Hierarchy, policy: Policy, journal: Journal, registry: Registry | None = None):
        self.hierarchy = hierarchy
        self.policy = policy
        self.journal = journal
        self.registry = registry
        self.plan: GuardPlan | None = None
        self._denied: list[tuple[str, int, int]] = []

    def start(self) -> None:
        """Put the guard on where the config asks, denying the nodes of every governed device
        class (:attr:`Policy.devices <governor.daemon.policy.Policy.devices>`: GPUs and their
        control nodes, and any other class the registry has a provider for); nothing when no
        device is governed, or with ``"sessions"`` while sessions are off. A place the kernel refuses is an ``error``
        event: the daemon runs on."""
        inventories, rules = self.policy.devices, self.policy.config.gpu_guard
        if not inventories:
            return
        kind = "tasks" if rules.kind == "sessions" and not self._holds_sessions() else rules.kind
        self.plan = self.hierarchy.guard_plan(kind, rules.parents)
        self._denied = denied_nodes(inventories.values())
        for problem in Effector.put_guard(self.plan, self._denied):
            self.journal.event("error", f"GPU guard: {problem}", logging.ERROR)
        guarded = ", ".join(map(str, self.plan.places)) or "nowhere"
        self.journal.event("gpu_guard", f"GPU guard ({kind}): GPU nodes denied on {guarded}"
                                        + "".join(f"; {note}" for note in self.plan.notes))

    def reapply(self) -> None:
        """Put the guard the config now in force asks for (after a reload: ``capacity.gpus``,
        ``gpu_control``, ``gpu_guard`` or ``gpu_guard_parents`` may have changed), as
        :meth:`start` does; then take it off the places the earlier one guarded and this one
        does not, and, on v1 (whose denials add up, where v2's program of the same name is
        replaced), allow again on the places kept the nodes no longer denied. A place the kernel
        refuses is an ``error`` event."""
        before, denied_before = self.plan, self._denied
        self.plan, self._denied = None, []
        self.start()
        if before is None:
            return
        for plan, denied in undo_guard(before, denied_before, self.plan, self._denied):
            for problem in Effector.take_guard(plan, denied):
                self.journal.event("error", f"GPU guard: {problem}", logging.ERROR)

    def stop(self) -> None:
        """Take the guard off (the daemon stops cleanly)."""
        if self.plan is None:
            return
        for problem in Effector.take_guard(self.plan, self._denied):
            self.journal.event("error", f"GPU guard: {problem}", logging.ERROR)
        self.plan = None

    @property
    def sweeps(self) -> bool:
        """Whether session processes must be looked at for device nodes held open (any class's):
        sessions are governed and the guard covers no place where they start."""
        return bool(self.policy.devices) and self._holds_sessions() and not (self.plan and self.plan.places)

    def _holds_sessions(self) -> bool:
        return self.policy.owners.enabled and (self.registry is None or self.registry.holds_sessions)

    def describe(self) -> dict:
        """For status: ``{"kind", "guarded": [cgroup dirs], "notes": [sentences]}``; kind
        ``"tasks"`` when only governor's tasks are guarded."""
        if self.plan is None:
            return {"kind": "tasks", "guarded": [], "notes": ["processes outside governor's tasks are not kept from "
                                                               "GPUs"]}
        kind = self.policy.config.gpu_guard.kind if self.plan.places else "tasks"
        return {"kind": kind, "guarded": [str(p) for p in self.plan.places], "notes": list(self.plan.notes)}
