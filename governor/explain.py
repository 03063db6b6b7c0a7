"""Why each group holds what it holds: the live host's progressive filling, as data. Pure.

The trace rows are the paper's Table 1 for this host: one row per event (a group's demand met,
a resource saturated), with every group's dominant share and the total allocated after it.
"""

from __future__ import annotations

from collections.abc import Mapping

from governor.model import Allocation


def explain(allocation: Allocation | None, capacity: Mapping[str, float],
            demands: Mapping[str, Mapping[str, float]], queue: list[dict] = (),
            runs: Mapping[str, tuple[int, list[str]]] | None = None) -> dict:
    """The ``explain`` payload: capacity, per group weight, demand D_g, allocation, λ, dominant
    resource(s) and share, why it stopped, what it runs (``tasks``: how many launched tasks,
    ``sessions``: whose sessions, from ``runs``: group → (tasks, session users)); the trace
    (an allocation computed with a trace); and the admission queue (items of
    :func:`governor.queue.queue_view`, their wait is ``now - queued_at``)."""
    groups = {}
    for name, got in (allocation.groups.items() if allocation else ()):
        groups[name] = {
            "weight": float(got.weight), "demand": dict(demands.get(name, {})),
            "allocation": {r: float(v) for r, v in got.allocation.items()}, "lambda": float(got.tasks),
            "dominant_resources": list(got.dominant_resources), "dominant_share": float(got.dominant_share),
            "stop": got.stop.describe(),
            "tasks": (runs or {}).get(name, (0, []))[0], "sessions": list((runs or {}).get(name, (0, []))[1]),
        }
    trace = [
        {"step": row.step, "event": row.event, "group": row.group, "resource": row.resource,
         "frozen": list(row.frozen), "dominant_shares": {g: float(s) for g, s in row.dominant_shares.items()},
         "allocated": {r: float(v) for r, v in row.allocated.items()}}
        for row in (allocation.trace if allocation else ())
    ]
    return {"capacity": dict(capacity), "groups": groups, "trace": trace, "queue": list(queue)}
