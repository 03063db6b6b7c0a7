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
``drf._FLOAT_SLACK`` as the relative slack for saturation, limits and equal shares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from governor.drf import _FLOAT_SLACK, progressive_filling
from governor.errors import AllocationInputError, FillingDiverged
from governor.hdrf_step import ROOT as _ROOT
from governor.hdrf_step import Rates, Step, rates as step_rates, state as step_state
from governor.model import (
    DEMAND_MET,
    Allocation,
    GroupAllocation,
    GroupDemand,
    Number,
    Problem,
    Stop,
    TraceRow,
    Vector,
    normalize,
)

__all__ = ["TreeNode", "hierarchical_filling"]


@dataclass(frozen=True)
class TreeNode:
    """One node of the group tree.

    Attributes:
        name: the group's name; a leaf when a :class:`GroupDemand` of that name is given, an
            internal node when some node names it as ``parent``, idle otherwise.
        parent: the enclosing group's name; ``None`` for a child of the root.
        weight: > 0, among its siblings. For a leaf it replaces ``GroupDemand.weight``.
        guarantee: resource → amount (base units) the subtree gets first, before fair sharing
            (bounded by its demand).
        limit: resource → amount the subtree never exceeds.
    """

    name: str
    parent: str | None = None  # None: a child of the root
    weight: Number = 1  # > 0, among its siblings
    guarantee: Mapping[str, Number] = field(default_factory=dict)
    limit: Mapping[str, Number] = field(default_factory=dict)


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
        leaves, as :func:`governor.drf.progressive_filling` gives them (``tasks``: tasks-worth
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
        AllocationInputError: bad input as in :func:`governor.model.normalize`; and, naming the
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
    return _Filling(problem, tree, trace).run()


class _Filling:
    """The tree, the state of one run, and the event loop; see the module docstring."""

    def __init__(self, problem: Problem, tree: Sequence[TreeNode], trace: bool):
        p = self.p = problem
        self.trace = trace
        self.exact = problem.exact
        self.slack = 0 if problem.exact else _FLOAT_SLACK
        convert = Fraction if problem.exact else float
        self.zero = convert(0)
        m = self.m = len(problem.resources)
        index_of_resource = {r: j for j, r in enumerate(problem.resources)}
        by_name = {node.name: node for node in tree}
        leaf_index = {name: g for g, name in enumerate(problem.names)}
        internal = {node.parent for node in tree if node.parent is not None}
        # Nodes: the leaves (problem order), then the internal nodes (tree order).
        names = list(problem.names) + [node.name for node in tree if node.name in internal]
        self.names = names
        index = {name: k for k, name in enumerate(names)}
        n = self.n = len(names)
        self.n_leaves = len(problem.names)
        self.parent = [_ROOT] * n
        self.weight: list[Number] = [self.zero] * n
        self.children: dict[int, list[int]] = {_ROOT: []}
        for k in range(n):
            self.children[k] = []
        self.guarantee: list[list[Number | None]] = [[None] * m for _ in range(n)]
        self.limit: list[list[Number | None]] = [[None] * m for _ in range(n)]
        for k, name in enumerate(names):
            node = by_name.get(name)
            if node is None:
                self.weight[k] = problem.weights[leaf_index[name]]
                continue
            self.weight[k] = convert(node.weight)
            self.parent[k] = _ROOT if node.parent is None else index[node.parent]
            for resource, amount in node.guarantee.items():
                self.guarantee[k][index_of_resource[resource]] = convert(amount)
            for resource, amount in node.limit.items():
                self.limit[k][index_of_resource[resource]] = convert(amount)
        for k in range(n):
            self.children[self.parent[k]].append(k)
        # Post-order (children before parents) over the nodes with leaves below them.
        self.order: list[int] = []
        self.leaves_under: list[list[int]] = [[] for _ in range(n)]
        self._walk(_ROOT)
        self.depth_first = list(reversed(self.order))  # parents before children
        self.demand = problem.demands
        self.delta = problem.dominant_shares
        # State.
        self.x: list[Number] = [self.zero] * self.n_leaves
        self.stops: dict[int, Stop] = {}
        self.saturated = [False] * m
        self.limit_hit = [[False] * m for _ in range(n)]  # real limits reached (permanent)
        self.cap_hit = [[False] * m for _ in range(n)]  # phase caps (guarantees) reached
        self.caps: list[list[Number | None]] = self.limit
        self.participating = [True] * self.n_leaves
        self.started = [False] * n
        self.rows: list[TraceRow] = []
        self.phase = 0

    def _walk(self, root: int) -> None:
        stack = [(root, False)]
        while stack:
            k, done = stack.pop()
            if done:
                if k != _ROOT:
                    if k < self.n_leaves:
                        self.leaves_under[k] = [k]
                    else:
                        self.leaves_under[k] = [g for c in self.children[k] for g in self.leaves_under[c]]
                    if self.leaves_under[k]:
                        self.order.append(k)
                continue
            stack.append((k, True))
            stack.extend((c, False) for c in reversed(self.children[k]))

    # ---- phases -------------------------------------------------------------------------------

    def run(self) -> Allocation:
        n, m = self.n, self.m
        # Guarantee depth: guaranteed nodes on the path from the root to a node, inclusive.
        gdepth = [0] * n
        for k in self.depth_first:
            above = 0 if self.parent[k] == _ROOT else gdepth[self.parent[k]]
            gdepth[k] = above + (1 if any(a is not None for a in self.guarantee[k]) else 0)
        for d in range(max(gdepth, default=0), 0, -1):
            self.phase = d
            # A leaf takes part when the guaranteed node of this depth above it guarantees a
            # resource it demands (a guarantee on other resources gives it nothing first).
            self.participating = [gdepth[g] >= d and g not in self.stops and self._guaranteed_demand(g, d, gdepth)
                                  for g in range(self.n_leaves)]
            caps = []
            for k in range(n):
                row = list(self.limit[k])
                if gdepth[k] == d and any(a is not None for a in self.guarantee[k]):
                    for j in range(m):
                        if self.guarantee[k][j] is not None:
                            g = self.guarantee[k][j]
                            row[j] = g if row[j] is None else min(row[j], g)
                caps.append(row)
            self.caps = caps
            self.cap_hit = [[False] * m for _ in range(n)]
            self.started = [False] * n
            self._fill()
        self.phase = 0
        self.participating = [True] * self.n_leaves
        self.caps = self.limit
        self.cap_hit = [[False] * m for _ in range(n)]
        self.started = [False] * n
        self._fill()
        return self._answer()

    def _guaranteed_demand(self, g: int, d: int, gdepth: list[int]) -> bool:
        k = g
        while k != _ROOT and not (gdepth[k] == d and any(a is not None for a in self.guarantee[k])):
            k = self.parent[k]
        return k != _ROOT and any(a is not None and dj > 0 for a, dj in zip(self.guarantee[k], self.demand[g]))

    # ---- one phase: the event loop ----------------------------------------------------------

    def _blocked_leaf(self, g: int) -> bool:
        return g in self.stops or not self.participating[g] or g in self.phase_stops

    def _fill(self) -> None:
        self.phase_stops: dict[int, Stop] = {}
        # Limits reached in an earlier phase stop the leaves that sat that phase out.
        for k in self.order:
            hit = [j for j in range(self.m) if self.limit_hit[k][j]]
            for g in self.leaves_under[k] if hit else ():
                if g not in self.stops and any(self.demand[g][j] > 0 for j in hit):
                    self.stops[g] = Stop("limit", tuple(self.p.resources[j] for j in hit if self.demand[g][j] > 0))
        # Resources an earlier phase used up stop the leaves that demand them before they move
        # (no event would come: a saturated resource offers none).
        for g in range(self.n_leaves):
            if not self._blocked_leaf(g):
                hit = tuple(self.p.resources[j] for j in range(self.m) if self.saturated[j] and self.demand[g][j] > 0)
                if hit:
                    self.stops[g] = Stop("saturated", hit)
        guard = 0
        while True:
            state = step_state(self)
            if state is None:
                break
            guard += 1
            rates = step_rates(self, state)
            tau, cause = self._next_event(state, rates)
            if tau is None or guard > 100 * (self.n + self.m + 10) ** 2:
                raise FillingDiverged("H-DRF: " + ("no event ahead while leaves still grow" if tau is None else
                                                   f"no answer after {guard - 1} events"))
            xdot = rates.xdot
            if tau:
                for g, v in xdot.items():
                    self.x[g] += v * tau
            self._apply_events(cause)

    def _next_event(self, st: Step, rates: Rates):
        p, m = self.p, self.m
        rho, xdot = rates.rho, rates.xdot
        best = None

        def offer(tau, cause):
            nonlocal best
            if tau < 0:
                tau = self.zero
            if best is None or tau < best[0]:
                best = (tau, cause)

        for g, v in xdot.items():
            count = p.tasks[g]
            if count is not None and v > 0:
                offer((count - self.x[g]) / v, ("demand_met", g))
        total = [self.zero] * m
        node_rate: dict[int, list[Number]] = {}
        # Usage rates per node: leaves from xdot, summed upward.
        for k in self.order:
            if k < self.n_leaves:
                v = xdot.get(k)
                node_rate[k] = [v * d for d in self.demand[k]] if v else None
            else:
                acc = None
                for c in self.children[k]:
                    rc = node_rate.get(c)
                    if rc is not None:
                        acc = list(rc) if acc is None else [a + b for a, b in zip(acc, rc)]
                node_rate[k] = acc
        for k in self.children[_ROOT]:
            rc = node_rate.get(k)
            if rc is not None:
                total = [a + b for a, b in zip(total, rc)]
        use = st.use
        for j in range(m):
            if not self.saturated[j] and total[j] > 0:
                offer((p.capacity[j] - use[_ROOT][j]) / total[j], ("saturated", j))
        for k in self.order:
            rc = node_rate.get(k)
            if rc is None:
                continue
            caps = self.caps[k]
            for j in range(m):
                if caps[j] is not None and rc[j] > 0 and not (self.limit_hit[k][j] or self.cap_hit[k][j]):
                    offer((caps[j] - use[k][j]) / rc[j], ("limit", k, j))
        # Dominant-resource changes of growing internal nodes, and the level reaching a waiting child.
        for k, r in rho.items():
            if k == _ROOT or k < self.n_leaves or not r:
                continue
            vec, vdot = st.vector[k], rates.unit_vec[k]
            top = st.share[k]
            dom = st.dominant[k]
            cap = p.capacity
            speed = max(vdot[j] / cap[j] for j in dom) * r
            sat = st.sat[k]
            for j in range(m):
                if sat[j] or j in dom:
                    continue
                sj = vdot[j] / cap[j] * r
                if sj > speed:
                    offer((top - vec[j] / cap[j]) / (sj - speed), ("dominant", k, j))
        for k, r in rho.items():
            if k < self.n_leaves and k != _ROOT or not r:
                continue
            lvl_rate = r * rates.unit_level[k]
            if not lvl_rate:
                continue
            low = st.level[k]
            for c in st.waiting[k]:
                offer((st.share[c] / self.weight[c] - low) / lvl_rate, ("reached", c))
        return (None, None) if best is None else best

    def _apply_events(self, cause) -> None:
        p, m = self.p, self.m
        slack = self.slack
        fired = []
        # Demand met.
        for g in range(self.n_leaves):
            if self._blocked_leaf(g):
                continue
            count = p.tasks[g]
            if count is not None and self.x[g] >= count * (1 - slack):
                self.x[g] = count
                self.stops[g] = DEMAND_MET
                fired.append(("demand_met", g, None, (g,)))
        use = self._usage()
        newly = [j for j in range(m) if not self.saturated[j] and use[_ROOT][j] >= p.capacity[j] * (1 - slack)]
        if cause and cause[0] == "saturated" and cause[1] not in newly:
            newly.append(cause[1])
        if newly:
            for j in newly:
                self.saturated[j] = True
            frozen = []
            for g in range(self.n_leaves):
                if self._blocked_leaf(g):
                    continue
                hit = tuple(p.resources[j] for j in sorted(newly) if self.demand[g][j] > 0)
                if hit:
                    self.stops[g] = Stop("saturated", hit)
                    frozen.append(g)
            for j in sorted(newly):
                fired.append(("saturated", None, j, tuple(g for g in frozen if self.demand[g][j] > 0)))
        for k in self.order:
            caps = self.caps[k]
            for j in range(m):
                if caps[j] is None or self.limit_hit[k][j] or self.cap_hit[k][j]:
                    continue
                forced = cause and cause[0] == "limit" and cause[1] == k and cause[2] == j
                if not forced and use[k][j] < caps[j] * (1 - slack):
                    continue
                real = self.limit[k][j] is not None and caps[j] == self.limit[k][j]
                (self.limit_hit if real else self.cap_hit)[k][j] = True
                frozen = []
                for g in self.leaves_under[k]:
                    if not self._blocked_leaf(g) and self.demand[g][j] > 0:
                        stop = Stop("limit", (p.resources[j],))
                        if real:
                            self.stops[g] = stop
                        else:
                            self.phase_stops[g] = stop
                        frozen.append(g)
                fired.append(("limit" if real else "guarantee", k, j, tuple(frozen)))
        if not self.trace:
            return
        if not fired and cause:
            if cause[0] == "dominant":
                fired.append(("dominant_resource", cause[1], cause[2], ()))
            elif cause[0] == "reached":
                fired.append(("reached", cause[1], None, ()))
        for event, k, j, frozen in fired:
            self._record(event, k, j, frozen, use)

    def _usage(self) -> dict[int, list[Number]]:
        zero = self.zero
        use: dict[int, list[Number]] = {}
        for k in self.order + [_ROOT]:
            if k != _ROOT and k < self.n_leaves:
                use[k] = [self.x[k] * d for d in self.demand[k]]
            else:
                total = [zero] * self.m
                for c in self.children[k]:
                    if c in use:
                        total = [a + b for a, b in zip(total, use[c])]
                use[k] = total
        return use

    def _record(self, event, k, j, frozen, use) -> None:
        p = self.p
        shares = {}
        for node in self.order:
            shares[self.names[node]] = max(a / r for a, r in zip(use[node], p.capacity))
        self.rows.append(TraceRow(
            step=len(self.rows) + 1, event=event, group=None if k is None else self.names[k],
            resource=None if j is None else p.resources[j], frozen=tuple(self.names[g] for g in frozen),
            dominant_shares=shares, allocated=dict(zip(p.resources, use[_ROOT])),
        ))

    # ---- the answer -------------------------------------------------------------------------

    def _answer(self) -> Allocation:
        p = self.p
        resources = p.resources
        use = self._usage()
        groups = {}
        for g, name in enumerate(p.names):
            x = self.x[g]
            groups[name] = GroupAllocation(
                name, self.weight[g], p.tasks[g], x, dict(zip(resources, use[g])),
                p.dominant_resources[g], x * p.dominant_shares[g], self.stops[g],
            )
        nodes = {}
        for k in self.order:
            if k < self.n_leaves:
                continue
            shares = [a / r for a, r in zip(use[k], p.capacity)]
            top = max(shares)
            dominant = tuple(r for r, s in zip(resources, shares) if s == top) if top else ()
            nodes[self.names[k]] = GroupAllocation(
                self.names[k], self.weight[k], None, top, dict(zip(resources, use[k])), dominant, top,
                self._node_stop(k),
            )
        parents = {}
        for k in self.order:
            up = self.parent[k]
            parents[self.names[k]] = None if up == _ROOT else self.names[up]
        capacity = dict(zip(resources, p.capacity))
        return Allocation("continuous", "drf", capacity, groups, tuple(self.rows), nodes, parents)

    def _node_stop(self, k: int) -> Stop:
        resources = self.p.resources
        own = tuple(resources[j] for j in range(self.m) if self.limit_hit[k][j])
        if own:
            return Stop("limit", own)
        stops = [self.stops[g] for g in self.leaves_under[k] if self.stops[g].kind != "demand_met"]
        if not stops:
            return DEMAND_MET
        kind = "limit" if any(s.kind == "limit" for s in stops) else stops[0].kind
        named = {r for s in stops if s.kind == kind for r in s.resources}
        return Stop(kind, tuple(r for r in resources if r in named))
