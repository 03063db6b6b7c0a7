"""Why each group holds what it holds: the live host's progressive filling, as data. Pure.

The trace rows are the paper's Table 1 for this host: one row per event (a group's demand met,
a resource saturated), with every group's dominant share and the total allocated after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from governor.core.foreign_capacity import Tenant
from governor.core.model import Allocation


def explain(allocation: Allocation | None, capacity: Mapping[str, float],
            demands: Mapping[str, Mapping[str, float]], queue: list[dict] = (),
            runs: Mapping[str, tuple[int, list[str]]] | None = None,
            configured: Mapping[str, Mapping] | None = None,
            fairshare: Mapping[str, object] | None = None,
            stalls: Mapping[str, Mapping] | None = None, task_stalls: Mapping[str, Mapping] | None = None,
            psi: Mapping[str, object] | None = None, host_capacity: Mapping[str, float] | None = None,
            foreign: Mapping[str, Tenant] | None = None) -> dict:
    """The ``explain`` payload: capacity, per group weight, demand D_g, allocation, λ, dominant
    resource(s) and share, why it stopped (:meth:`GroupAllocation.to_json` with ``demand``,
    ``lambda``), what it runs (``tasks``: how many launched tasks, ``sessions``: whose
    sessions, from ``runs``: group → (tasks, session users)); the trace (an allocation computed
    with a trace); the admission queue (items of :func:`governor.core.queue.queue_view`, their wait
    is ``now - queued_at``); and ``configured``: every group of the host → its ``weight`` and
    ``floor`` (:func:`governor.core.vocabulary.floors`), so a group with no task is explained too, and
    each group's ``floor``. With a group tree (H-DRF), ``nodes``: each internal group with a
    running task below it → its allocation (its subtree's sum), dominant share, why it stopped
    and floor; ``parents``: group → the group it nests under. With ``[fairshare]``,
    ``fairshare``: group → ``weight`` (configured), ``usage`` (decayed, capacity-seconds),
    ``usage_share``, ``weight_share``, ``factor`` and ``effective`` (the weight filling used):
    :class:`governor.core.fairshare.Standing`. ``stalls``: group → its ``stall`` as status
    has it (:func:`governor.core.usage.stalls`), each group's ``stall``; ``task_stalls``: group →
    task id → the task's, each group's ``task_stalls``; ``psi``: status's
    ``psi`` (whether the host measures stalls, and why not), the payload's. ``host_capacity`` (None: ``capacity``) is the
    host's less the reserve, before what the ``foreign`` tenants hold (name →
    :class:`~governor.core.foreign_capacity.Tenant`) was subtracted."""
    runs = runs or {}
    groups = {}
    for name, got in (allocation.groups.items() if allocation else ()):
        count, sessions = runs.get(name, (0, []))
        groups[name] = {**got.to_json(), "demand": dict(demands.get(name, {})), "lambda": float(got.tasks),
                        "tasks": count, "sessions": list(sessions), "stall": dict((stalls or {}).get(name, {})),
                        "task_stalls": dict((task_stalls or {}).get(name, {})),
                        "floor": float((configured or {}).get(name, {}).get("floor", 0.0))}
    nodes = {name: {**got.to_json(), "floor": float((configured or {}).get(name, {}).get("floor", 0.0))}
             for name, got in (allocation.nodes.items() if allocation else ())}
    trace = [row.to_json() for row in (allocation.trace if allocation else ())]
    return {"capacity": dict(capacity), "psi": dict(psi or {}), "host_capacity": dict(capacity if host_capacity is None else host_capacity),
            "foreign": {name: tenant.to_json() for name, tenant in (foreign or {}).items()},
            "groups": groups, "nodes": nodes,
            "parents": dict(allocation.parents) if allocation else {}, "trace": trace, "queue": list(queue),
            "fairshare": {name: dataclasses.asdict(standing) for name, standing in (fairshare or {}).items()},
            "configured": {name: {"weight": float(about["weight"]), "floor": float(about["floor"])}
                           for name, about in (configured or {}).items()}}
