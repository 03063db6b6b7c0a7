"""The desired limits: from the running tasks under the policy in force to every cgroup's limits
a refill writes (DESIGN.md §3). Pure: no I/O and no clock. Progressive filling gives each
group its allocation (paper §4.1, H-DRF over the group tree); the plan turns allocations into
guarantees (weights, and quotas while every group wants all of its own), protection follows what
was admitted below the root, and the root is bounded by the host's less the reserve.
:class:`~governor.daemon.enforcement.Enforcement` applies what this returns through the
effector."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from governor.cgroups.limits import CgroupLimits
from governor.core.cpu_saturation import hold_scale
from governor.core.group_tree import subtree_sums, with_limit
from governor.core.model import DEMAND_MET, Allocation
from governor.core.plan import group_limits, held_login_limits, inside_root, root_limits
from governor.core.protection import Protection, memory_protection
from governor.core.state import Tasks, one_session_each
from governor.daemon.filling import fill
from governor.daemon.policy import Policy

__all__ = ["Desired", "desired"]


@dataclass(frozen=True)
class Desired:
    """What one refill asks of the kernel.

    Attributes:
        allocation: the progressive filling (None with no task).
        limits: cgroup (relative to governor's root; ``""`` the root) → its limits: the root's,
            every group's, each login slice's, and with a full refill every task's and session's
            caps, device rules included.
        root: the root's ``(memory.min, memory.low)``, bytes, which governor's systemd units follow.
        guarantees: group → its guarantees, whose weights the next plan keeps where it can
            (``previous`` of the next :func:`desired`).
    """

    allocation: Allocation | None
    limits: dict[str, CgroupLimits]
    root: Protection
    guarantees: dict[str, CgroupLimits]


def desired(policy: Policy, tasks: Tasks, *, cpu_saturated: bool, full: bool,
            previous: Mapping[str, CgroupLimits]) -> Desired:
    """The limits the running ``tasks`` ask for under ``policy``: progressive filling over the
    groups' summed demands (:func:`~governor.daemon.filling.fill`), then the plan of every
    governed cgroup. With ``cpu_saturated`` the groups are held to their CPU guarantees (and a
    login slice to its share of its group's); with ``full`` every task's and session's caps are
    planned too (a reload, a restart: the config, the inventory or a record changed), else only
    the root's, the groups' and the login slices' (a refill's cost stays flat however many
    tasks run). ``previous``: the last plan's guarantees, group → limits.

    Raises:
        FillingDiverged: the filling reached no answer; the caller keeps the plan in force.
    """
    demands = tasks.demands()
    allocation = fill(policy.config, policy.capacity, policy.fair_weight, demands)
    got = allocation.groups if allocation else {}
    outside: dict[str, dict[str, float]] = {}
    sessions: dict[str, float] = {}  # group → the memory its session cgroups below the root declare
    for login in one_session_each(tasks.sessions()):  # a user's two places count once
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
    nodes = allocation.nodes if allocation else {}
    root, protection = _protection(policy, admitted)
    # Held, the groups together use the reserve the system leaves idle too (issue 42).
    scale = hold_scale(policy.capacity.get("cpu", 0.0), policy.lent_cpu)
    guarantees = group_limits(
        policy.capacity, allocations, protection=protection,
        io_devices=policy.io_devices, io_sharing=policy.io_sharing, cpu_mode=policy.config.cpu_enforcement,
        cpus=policy.cpus, previous=previous,
        met={g for g, a in (*got.items(), *nodes.items()) if a.stop == DEMAND_MET}, saturated=cpu_saturated,
        hold_scale=scale, pids=policy.root_caps.get("pids"),
    )
    config = policy.config
    # The root's bound is the host's less the reserve (whose idle cores it borrows), never
    # less what foreign tenants hold: lowering its memory.max under what governor admitted
    # would reclaim or kill its tasks.
    limits = {"": root_limits(policy.host_capacity, protection=root, caps=policy.root_caps, lent_cpu=policy.lent_cpu),
              **{config.place(g): with_limit(each, config.effective_limit(g)) for g, each in guarantees.items()}}
    if full:  # (an unrecorded task's caps are what its cgroup holds: none to plan)
        limits.update((task.cgroup, policy.caps(task)) for task in tasks if not task.is_login and not task.unrecorded)
    for login in tasks.logins():
        caps = policy.caps(login)
        limits[login.cgroup] = (held_login_limits(caps, login.demand.get("cpu", 0.0),
                                                  scale * fractions.get(login.group, 0.0))
                                if cpu_saturated else caps)
    return Desired(allocation, limits, root, guarantees)


def _protection(policy: Policy, admitted: dict[str, dict[str, float]]) -> tuple[Protection, dict[str, Protection]]:
    """The root's and each group's ``(memory.min, memory.low)`` (:mod:`governor.core.protection`)
    over the memory the groups' admitted tasks declared below the root (``admitted``: group →
    ``{"memory": bytes}``, sessions' caps not in it); none with ``memory_protection = false``."""
    config = policy.config
    if not config.memory_protection:
        return (0.0, 0.0), {}
    guarantees = {rule.name: rule.guarantee["memory"] for rule in config.groups if "memory" in rule.guarantee}
    return memory_protection(policy.capacity.get("memory", 0.0),
                             {g: demand.get("memory", 0.0) for g, demand in admitted.items()}, guarantees,
                             policy.floors(admitted), config.parents)
