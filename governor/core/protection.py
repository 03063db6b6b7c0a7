"""Memory protection follows the promise (DESIGN.md §3; cgroup v2 ``memory.min``/``memory.low``). Pure.

What governor promises a group of memory is kept from reclaim by the kernel, so that another
group's (or the rest of the host's) pressure reclaims elsewhere first, as Kubernetes' memory
QoS and systemd's ``MemoryMin=``/``MemoryLow=`` do::

    memory.min  = G_g                        its ``guarantee.memory``: never reclaimed
    memory.low  = max(G_g, min(R_g, f_g·C))  what it reserved (admitted), up to its floor's
                                              share of the capacity, and at least G_g

with ``R_g`` the memory its admitted tasks declared below governor's root, ``f_g`` its floor
(:func:`governor.core.vocabulary.floors`) and ``C`` the memory capacity. The kernel bounds a
cgroup's protection by its parent's (``mm/memcontrol.c``, ``effective_protection``), so every
level carries at least the sum below it: an internal group takes the larger of its own value
and its children's sum, and governor's root the sum of its top-level groups' (not the
capacity: under ``memory_recursiveprot`` a parent's unclaimed protection is shared out to its
children's unprotected use, which would shield a group's use beyond its reservation). Nothing
exceeds the capacity.

A reservation beyond the floor is not protected: while every group is busy DRF promises each
its floor, no more (sharing incentive). A task's own files (:func:`governor.core.plan.task_limits`)
protect its declaration; the kernel bounds that by its group's. A session (governor's session
cgroup or logind's slice) was never admitted: none of its cap is in ``R_g`` and its own files
protect nothing (issue 43: idle shells were promised their whole cap, 6G of ``memory.min`` on a
2.9G host). Its use counts in what admission holds back (its reserved memory), and beyond that
it shares the group's unclaimed protection with the tasks' use (``memory_recursiveprot``).
So every ``memory.min`` and ``memory.low`` governor writes sums, level by level, to at most the
capacity: the leaves' are admitted declarations, and governor's root, which bounds its groups',
is at most the capacity.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["Protection", "memory_protection"]

# (memory.min, memory.low) of one cgroup, bytes.
Protection = tuple[float, float]


def memory_protection(capacity: float, reserved: Mapping[str, float], guarantees: Mapping[str, float],
                      floors: Mapping[str, float],
                      parents: Mapping[str, str]) -> tuple[Protection, dict[str, Protection]]:
    """The protection of governor's root and of each group's cgroup (see the module).

    Args:
        capacity: the memory governor divides, bytes (≥ 0).
        reserved: every group with a cgroup below the root → its reserved memory there, bytes:
            a leaf's admitted tasks', an internal group's subtree's sum. Its ancestors must be
            keys too (the plan makes their cgroups).
        guarantees: group → its ``guarantee.memory``, bytes; left out: none.
        floors: group → its floor, a fraction in [0, 1]; left out: 0.
        parents: group → the group it nests under; top-level groups left out.

    Returns:
        ``(root, groups)``: ``(memory.min, memory.low)`` in bytes for the root, and for each
        group of ``reserved`` (in its order); ``min ≤ low ≤ capacity`` in each, and a parent's
        each at least its children's sum (or the capacity).
    """
    def depth(group: str) -> int:
        levels, node = 0, parents.get(group)
        while node is not None:
            levels, node = levels + 1, parents.get(node)
        return levels

    below: dict[str | None, list[float]] = {}  # parent (None: the root) → [Σ min, Σ low] of its children
    found: dict[str, Protection] = {}
    for group in sorted(reserved, key=depth, reverse=True):  # children before their parents
        own_min = min(capacity, guarantees.get(group, 0.0))
        own_low = max(own_min, min(reserved[group], floors.get(group, 0.0) * capacity))
        children = below.get(group, [0.0, 0.0])
        least = min(capacity, max(own_min, children[0]))
        found[group] = (least, min(capacity, max(own_low, children[1], least)))
        total = below.setdefault(parents.get(group), [0.0, 0.0])
        total[0] += found[group][0]
        total[1] += found[group][1]
    top = below.get(None, [0.0, 0.0])
    return (min(capacity, top[0]), min(capacity, top[1])), {group: found[group] for group in reserved}
