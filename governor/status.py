"""The status object the daemon serves (``governor status --json``; schema in the README). Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cgroups.limits import CgroupLimits
from governor.limits import group_cgroup
from governor.model import Allocation
from governor.state import Tasks

def _split(vector: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """Measured usage → (resources used, pressure signs such as ``cpu.nr_throttled``)."""
    used, pressure = {}, {}
    for key, value in vector.items():
        (used if key in ("cpu", "memory") or key.startswith("io.") else pressure)[key] = value
    return used, pressure


def build_status(*, daemon: dict, capacity: Mapping[str, float], allocation: Allocation | None, tasks: Tasks,
                 limits: Mapping[str, CgroupLimits], usage: Mapping[str, Mapping[str, float]],
                 filling: dict, files: Callable[[CgroupLimits], dict[str, str]], events: list[dict]) -> dict:
    """Assemble the status object.

    Args:
        daemon: ``pid``, ``started`` (unix s), ``cgroup_mode``, ``cgroup_root``, ``config``.
        capacity: what governor divides (cores, bytes, bytes/s).
        allocation: the last progressive filling's answer, None with no task.
        tasks: the running tasks.
        limits: cgroup (relative) → limits in force.
        usage: cgroup (relative) → measured usage (:func:`governor.usage.usage`).
        filling: ``at`` (unix s or None), ``trigger``, ``duration_ms`` of the last filling.
        files: limits → kernel file → value, for this hierarchy.
        events: recent events, oldest first: ``at`` (unix s), ``kind``, ``message``.

    ``fair_level`` is the highest dominant share / weight among the groups: the water level at
    which the last filling stopped the groups a saturated resource held back.
    """
    groups = {}
    allocated = {r: 0.0 for r in capacity}
    used = {r: 0.0 for r in capacity}
    demands = tasks.demands()
    for name, members in tasks.groups().items():
        got = allocation.groups[name] if allocation and name in allocation.groups else None
        group_usage, group_pressure = _split(usage.get(group_cgroup(name), {}))
        for resource, amount in (got.allocation if got else {}).items():
            allocated[resource] = allocated.get(resource, 0.0) + float(amount)
        for resource, amount in group_usage.items():
            used[resource] = used.get(resource, 0.0) + amount
        groups[name] = {
            "weight": float(got.weight) if got else 1.0,
            "demand": dict(demands[name]),
            "allocation": {r: float(v) for r, v in got.allocation.items()} if got else {},
            "lambda": float(got.tasks) if got else 0.0,
            "dominant_resources": list(got.dominant_resources) if got else [],
            "dominant_share": float(got.dominant_share) if got else 0.0,
            "stop": got.stop.describe() if got else "",
            "limits": files(limits[group_cgroup(name)]) if group_cgroup(name) in limits else {},
            "usage": group_usage,
            "pressure": group_pressure,
            "tasks": [_task(t, limits, usage, files) for t in members],
        }
    fair_level = max((g["dominant_share"] / g["weight"] for g in groups.values()), default=0.0)
    return {"daemon": daemon, "capacity": dict(capacity), "allocated": allocated, "used": used,
            "filling": dict(filling), "fair_level": fair_level, "events": events, "groups": groups}


def _task(task, limits: Mapping[str, CgroupLimits], usage: Mapping[str, Mapping[str, float]],
          files: Callable[[CgroupLimits], dict[str, str]]) -> dict:
    used, pressure = _split(usage.get(task.cgroup, {}))
    return {"id": task.id, "pid": task.pid, "uid": task.uid, "user": task.user, "command": list(task.command),
            "started": task.started, "demand": dict(task.demand),
            "limits": files(limits[task.cgroup]) if task.cgroup in limits else {},
            "usage": used, "pressure": pressure}
