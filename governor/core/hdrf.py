"""Hierarchical Dominant Resource Fairness (H-DRF) with quotas, by continuous progressive filling.

Bhattacharya, Culler, Friedman, Ghodsi, Shenker, Stoica, "Hierarchical Scheduling for Diverse
Datacenter Workloads", SoCC 2013, §4 (§4.1 static H-DRF; §4.2–4.3 why collapsing the tree into
a flat DRF, or a naive per-level DRF, is wrong; the two ideas of dynamic H-DRF). Pure: no I/O.

Groups form a tree; weights apply among siblings; leaves (the groups with demand) hold tasks.
Progressive filling raises allocations so that, at every internal node, the weighted dominant
shares ``s_c / w_c`` of its non-blocked children stay equal; a node is *blocked* when all its
leaves are (demand met, a resource they demand saturated, or a limit reached). An internal
node's dominant share follows the paper's two rules (the naive versions starve groups):

1. **Rescaling.** Let ``M`` be the least weighted dominant share among the node's NON-BLOCKED
   children. Each non-blocked child's consumption vector is rescaled so its dominant share is
   ``M · w_c``; blocked children's vectors are added as they are; the node's consumption
   vector is that sum.
2. **Saturated resources are ignored** in the dominant share of every internal node.

In exact continuous filling the growing children all sit at ``M``, so rule 1 only rescales a
child that is above the level: after rule 2 lowered a sibling's share at a saturation, or (one
exception, see below) a child that starts above the level from its guarantee.

Continuous filling as the limit of the paper's dynamic H-DRF (each step descends from the root
to the child with the least weighted share and gives its leaf an infinitesimal amount):

* at a node, the non-blocked children at the least weighted share ``M`` grow, keeping their
  weighted shares equal; children above ``M`` wait until the level reaches them;
* a child whose growth does not raise its own dominant share (*flat*: its dominant resource is
  held by demand-met children and nothing growing uses it) grows first, alone, as the greedy
  keeps choosing it; the level of its parent stands still meanwhile;
* a node's share is ``max_j P_j / R_j`` over the resources not saturated (for it), ``P`` its
  rule-1 vector.

Everything is piecewise linear between **events**: a leaf's demand met, a resource saturated, a
limit (or, in a guarantee phase, a guarantee) reached, an internal node's dominant resource
changing, the level reaching a waiting child. The run jumps from event to event (no small
increments, no bisection); the cost is O(E · n · m) for E events, n nodes, m resources.

**Quotas** (Mesos quota semantics), on any node:

* ``limit``: the node's subtree never gets more of a resource than its limit. When a node
  reaches it, the resource is treated as saturated inside that subtree (its leaves that demand
  it stop with ``Stop("limit", …)``; rule 2 ignores it in the subtree's shares).
* ``guarantee``: satisfied first. Phase 1 fills only the leaves under guaranteed nodes, each
  guaranteed node capped at its guarantee (on the guaranteed resources; by its demand
  otherwise), dividing a guarantee among the node's children by the same H-DRF. Nested
  guarantees go first (innermost phase first). Phase 2 runs H-DRF over every leaf, each starting
  from what phase 1 gave it: a node above the level waits until the level reaches it. Its
  guaranteed allocation counts in its share and, while it waits, **in its parent's vector as it
  is** (not rescaled down by rule 1): a guarantee deep in the tree must not lift its ancestors'
  shares above what they hold, or siblings of the ancestors would lose to it.

Numbers: exact (Fraction) when every input is an int or Fraction, float otherwise, with
``model.FLOAT_SLACK`` as the relative slack for saturation, limits and equal shares.

The run is :class:`governor.core.hdrf_filling.Filling`; one step's state and rates are in
:mod:`governor.core.hdrf_step`; its events in :mod:`governor.core.hdrf_events`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

from governor.core.drf import progressive_filling
from governor.errors import AllocationInputError
from governor.core.hdrf_events import advance
from governor.core.hdrf_filling import Filling
from governor.core.model import Allocation, GroupDemand, TreeNode, Vector, normalize

__all__ = ["TreeNode", "hierarchical_filling"]


def hierarchical_filling(
    capacity: Vector,
    groups: Sequence[GroupDemand],
    tree: Sequence[TreeNode] = (),
    *,
    trace: bool = False,
) -> Allocation:
    """Continuous weighted H-DRF with demand caps, guarantees and limits.

    Args:
        capacity: resource → amount (cores, bytes, bytes/s), all ≥ 0.
        groups: the leaves, with demand (per-task vector naming only capacity resources, task
            count or ``None`` for unbounded). A group not named in ``tree`` is a child of the
            root with its ``GroupDemand.weight`` and no quota; a group named in ``tree`` takes
            parent, weight, guarantee and limit from its :class:`TreeNode` (its
            ``GroupDemand.weight`` is then ignored).
        tree: the group tree. Internal nodes are the nodes some node names as parent; a node
            that is neither a parent nor a group with demand is idle (gets nothing and is not in
            the answer).
        trace: also return one :class:`TraceRow` per event; its ``dominant_shares`` hold every
            leaf and internal node (``max_j allocation_j / R_j``).

    Returns:
        an :class:`Allocation` (mode ``"continuous"``, policy ``"drf"``) whose ``groups`` are the
        leaves, as :func:`governor.core.drf.progressive_filling` gives them (``tasks``: tasks-worth
        allocated; ``dominant_share = max_j allocation_j / R_j``; ``stop``), plus ``nodes``: each
        internal node's :class:`GroupAllocation` (``allocation``: the sum over its subtree;
        ``tasks``: its dominant share, the only scalar that means the same for every subtree;
        ``demanded_tasks`` None; ``stop``: demand met when all its leaves met theirs, the limit
        when the node reached its own, else the stop its other leaves share — the union of
        their resources, limits first), and ``parents`` (name → parent, ``None`` at the top)
        for every leaf and internal node. Exact when every input is an int or Fraction, float
        otherwise. With no parent, guarantee or limit anywhere in ``tree``, the answer is
        exactly ``progressive_filling`` (with the tree's weights).

    Raises:
        AllocationInputError: bad input as in :func:`governor.core.model.normalize`; and, naming the
            node: a weight ≤ 0; a negative, NaN, infinite or non-number quota; a quota on a
            resource the capacity does not list; a duplicate node; a parent not in ``tree``; a
            cycle; a group with demand that has child groups.
    """
    by_name = _check_tree(capacity, groups, tree)
    flat = not any(node.parent is not None or node.guarantee or node.limit for node in tree)
    groups = [replace(g, weight=by_name[g.name].weight) if g.name in by_name else g for g in groups]
    if flat:
        return progressive_filling(capacity, groups, trace=trace)
    return _hierarchical(capacity, groups, tree, trace)


def _check_tree(capacity: Vector, groups: Sequence[GroupDemand], tree: Sequence[TreeNode]) -> dict[str, TreeNode]:
    by_name: dict[str, TreeNode] = {}
    for node in tree:
        if node.name in by_name:
            raise AllocationInputError("group appears twice in the tree", group=node.name)
        by_name[node.name] = node
        weight = node.weight
        _number(weight, node.name, None, "weight")
        if not weight > 0:
            raise AllocationInputError(f"weight must be > 0, got {weight!r}", group=node.name)
        for what, quota in (("guarantee", node.guarantee), ("limit", node.limit)):
            for resource, amount in quota.items():
                if resource not in capacity:
                    raise AllocationInputError(
                        f"{what} names a resource the capacity does not list "
                        f"(capacity has: {', '.join(capacity)})", group=node.name, resource=resource)
                _number(amount, node.name, resource, what)
                if amount < 0:
                    raise AllocationInputError(f"{what} must not be negative, got {amount!r}",
                                               group=node.name, resource=resource)
    parents = {node.parent for node in tree}
    for group in groups:
        if group.name in parents:
            raise AllocationInputError("a group with members cannot have child groups", group=group.name)
    for node in tree:
        if node.parent is not None and node.parent not in by_name:
            raise AllocationInputError(f"parent {node.parent!r} is not a group of the tree", group=node.name)
    for node in tree:
        seen = {node.name}
        up = node.parent
        while up is not None:
            if up in seen:
                raise AllocationInputError(f"the tree has a cycle through {up!r}", group=node.name)
            seen.add(up)
            up = by_name[up].parent
    return by_name


def _number(value: object, group: str, resource: str | None, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise AllocationInputError(f"{what} must be a number, got {value!r}", group=group, resource=resource)
    if isinstance(value, float) and not math.isfinite(value):
        raise AllocationInputError(f"{what} must be finite, got {value!r}", group=group, resource=resource)


def _hierarchical(capacity: Vector, groups: Sequence[GroupDemand], tree: Sequence[TreeNode], trace: bool) -> Allocation:
    """The H-DRF engine on any tree (also a flat one: tests compare it with flat DRF)."""
    floats = any(isinstance(v, float) for node in tree for v in
                 (node.weight, *node.guarantee.values(), *node.limit.values()))
    if floats:
        capacity = {r: float(v) for r, v in capacity.items()}
    problem = normalize(capacity, groups)
    return Filling(problem, tree, trace).run(advance)
