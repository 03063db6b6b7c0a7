"""The group tree in the plan of limits (DESIGN.md §3): each internal group's guarantee is the
sum of its subtree's, and a group's ``limit`` bounds its cgroup. Pure.

The cgroup tree mirrors the group tree, so the kernel's hierarchical weights enforce every
level: among siblings, ``cpu.weight`` ∝ each one's allocation, which for a department is the
sum of its labs'. A group's ``limit`` is written on its own cgroup (``cpu.max``,
``memory.max``), where it bounds everything below it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from governor.cgroups.limits import CgroupLimits

__all__ = ["subtree_sums", "with_limit"]


def subtree_sums(vectors: Mapping[str, Mapping[str, float]],
                 parents: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Each ancestor of the groups in ``vectors`` → the sum of the vectors below it.

    Args:
        vectors: leaf group → a vector (resource → cores, bytes, bytes/s).
        parents: group → the group it nests under (top-level groups left out).

    Returns:
        internal group → the resource-wise sum over its leaves in ``vectors`` (only the
        internal groups with such a leaf), nearest ancestors first per leaf's order.
    """
    sums: dict[str, dict[str, float]] = {}
    for leaf, vector in vectors.items():
        node = parents.get(leaf)
        while node is not None:
            total = sums.setdefault(node, {})
            for resource, amount in vector.items():
                total[resource] = total.get(resource, 0.0) + amount
            node = parents.get(node)
    return sums


def with_limit(limits: CgroupLimits, limit: Mapping[str, float]) -> CgroupLimits:
    """``limits`` bounded by a group's ``limit`` (``cpu`` cores → ``cpu.max``, the lower of it
    and a quota already planned; ``memory`` bytes → ``memory.max``; ``pids`` → ``pids.max``,
    the lower of it and the one planned); the same object when ``limit`` is empty."""
    if not limit:
        return limits
    changes: dict = {}
    if "cpu" in limit:
        quota = round(limit["cpu"] * limits.cpu_period_usec)
        changes["cpu_quota_usec"] = quota if limits.cpu_quota_usec is None else min(quota, limits.cpu_quota_usec)
    if "memory" in limit:
        changes["memory_max_bytes"] = int(limit["memory"])
    if "pids" in limit:
        pids = int(limit["pids"])
        changes["pids_max"] = pids if limits.pids_max is None else min(pids, limits.pids_max)
    return dataclasses.replace(limits, **changes)
