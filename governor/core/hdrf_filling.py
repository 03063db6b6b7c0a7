"""One run of H-DRF's continuous filling (:mod:`governor.core.hdrf`): the group tree numbered, the
state of the run, its phases (guarantees first, innermost first, then every leaf), the event
loop of each phase, and the answer. Pure: no I/O. The paper, the rules and the quotas are
described in :mod:`governor.core.hdrf`; one step's state and rates in :mod:`governor.core.hdrf_step`;
the events in :mod:`governor.core.hdrf_events`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

from governor.core.model import (
    DEMAND_MET,
    FLOAT_SLACK,
    Allocation,
    GroupAllocation,
    Number,
    Problem,
    Stop,
    TraceRow,
    TreeNode,
)

__all__ = ["ROOT", "Filling"]

# The tree's root, as a node number (leaves and internal nodes are 0 and up).
ROOT = -1


class Filling:
    """The tree and the state of one run (mutable, owned by the run); see :mod:`governor.core.hdrf`.

    Nodes are numbered: the leaves ``0 .. n_leaves-1`` in the problem's order, then the
    internal nodes in the tree's order; :data:`governor.core.hdrf_filling.ROOT` (-1) is the root.
    Resources are numbered in the problem's order; amounts are in base units (cores, bytes,
    bytes/s); numbers are all exact (Fraction) or all float, as in ``p``.

    The tree (fixed):
        p: the checked problem; trace: whether to record ``rows``.
        slack: relative tolerance of every threshold (0 when exact, else ``FLOAT_SLACK``);
            zero: 0 in the run's kind of number.
        n, m, n_leaves: how many nodes, resources, leaves; names: node → group name.
        parent: node → its parent (ROOT at the top); children: node (and ROOT) → its children.
        weight: node → its weight among its siblings (> 0).
        guarantee, limit: node → per resource, its quota or None.
        order: the nodes with leaves below them, children before parents; depth_first: the
            same, parents before children; leaves_under: node → the leaves of its subtree.
        demand: leaf → one task's demand per resource; delta: leaf → one task's dominant share.

    The run (changes from event to event):
        x: leaf → tasks-worth allocated (fractional).
        stops: leaf → why it stopped for good (:class:`Stop`); phase_stops: leaf → why it
            stopped for the rest of this phase (a guarantee reached).
        saturated: per resource, all of it allocated.
        limit_hit: node → per resource, its limit reached (for good).
        caps: node → per resource, what it may reach this phase (its limit; in a guarantee
            phase the least of limit and guarantee); cap_hit: node → per resource, a
            guarantee cap reached this phase.
        participating: leaf → whether it takes part in this phase.
        started: node → whether it has grown this phase (a waiting child counts in its
            parent's rule-1 vector rescaled only once it has).
        rows: the trace so far, one row per event.
    """

    def __init__(self, problem: Problem, tree: Sequence[TreeNode], trace: bool):
        """Number ``tree`` (checked by :func:`governor.core.hdrf.hierarchical_filling`) over the leaves
        of ``problem``; nothing is filled yet. ``trace``: record a row per event."""
        self.p = problem
        self.trace = trace
        self.slack = 0 if problem.exact else FLOAT_SLACK
        convert = Fraction if problem.exact else float
        self.zero = convert(0)
        m = self.m = len(problem.resources)
        index_of_resource = {r: j for j, r in enumerate(problem.resources)}
        by_name = {node.name: node for node in tree}
        leaf_index = {name: g for g, name in enumerate(problem.names)}
        internal = {node.parent for node in tree if node.parent is not None}
        # Nodes: the leaves (problem order), then the internal nodes (tree order).
        names = list(problem.names) + [node.name for node in tree if node.name in internal]
        self.names: list[str] = names
        index = {name: k for k, name in enumerate(names)}
        n = self.n = len(names)
        self.n_leaves = len(problem.names)
        self.parent: list[int] = [ROOT] * n
        self.weight: list[Number] = [self.zero] * n
        self.children: dict[int, list[int]] = {ROOT: []}
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
            self.parent[k] = ROOT if node.parent is None else index[node.parent]
            for resource, amount in node.guarantee.items():
                self.guarantee[k][index_of_resource[resource]] = convert(amount)
            for resource, amount in node.limit.items():
                self.limit[k][index_of_resource[resource]] = convert(amount)
        for k in range(n):
            self.children[self.parent[k]].append(k)
        # Post-order (children before parents) over the nodes with leaves below them.
        self.order: list[int] = []
        self.leaves_under: list[list[int]] = [[] for _ in range(n)]
        self._walk(ROOT)
        self.depth_first: list[int] = list(reversed(self.order))  # parents before children
        self.demand: tuple[tuple[Number, ...], ...] = problem.demands
        self.delta: tuple[Number, ...] = problem.dominant_shares
        # State.
        self.x: list[Number] = [self.zero] * self.n_leaves
        self.stops: dict[int, Stop] = {}
        self.saturated: list[bool] = [False] * m
        self.limit_hit: list[list[bool]] = [[False] * m for _ in range(n)]  # real limits reached (permanent)
        self.cap_hit: list[list[bool]] = [[False] * m for _ in range(n)]  # phase caps (guarantees) reached
        self.caps: list[list[Number | None]] = self.limit
        self.participating: list[bool] = [True] * self.n_leaves
        self.started: list[bool] = [False] * n
        self.phase_stops: dict[int, Stop] = {}
        self.rows: list[TraceRow] = []

    def _walk(self, root: int) -> None:
        stack = [(root, False)]
        while stack:
            k, done = stack.pop()
            if done:
                if k != ROOT:
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

    def run(self, advance: Callable[[Filling], None]) -> Allocation:
        """Fill: the guarantee phases, innermost first, then H-DRF over every leaf; the answer as
        :func:`governor.core.hdrf.hierarchical_filling` returns it. ``advance`` runs one phase's
        event loop (:func:`governor.core.hdrf_events.advance`: it builds on this state, so it is
        handed in rather than imported). Raises FillingDiverged."""
        self.advance = advance
        n, m = self.n, self.m
        # Guarantee depth: guaranteed nodes on the path from the root to a node, inclusive.
        gdepth = [0] * n
        for k in self.depth_first:
            above = 0 if self.parent[k] == ROOT else gdepth[self.parent[k]]
            gdepth[k] = above + (1 if any(a is not None for a in self.guarantee[k]) else 0)
        for d in range(max(gdepth, default=0), 0, -1):
            # A leaf takes part when the guaranteed node of this depth above it guarantees a
            # resource it demands (a guarantee on other resources gives it nothing first).
            participating = [gdepth[g] >= d and g not in self.stops and self._guaranteed_demand(g, d, gdepth)
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
            self._phase(participating, caps)
        self._phase([True] * self.n_leaves, self.limit)
        return self._answer()

    def _phase(self, participating: list[bool], caps: list[list[Number | None]]) -> None:
        self.participating = participating
        self.caps = caps
        self.cap_hit = [[False] * self.m for _ in range(self.n)]
        self.started = [False] * self.n
        self._fill()

    def _guaranteed_demand(self, g: int, d: int, gdepth: list[int]) -> bool:
        k = g
        while k != ROOT and not (gdepth[k] == d and any(a is not None for a in self.guarantee[k])):
            k = self.parent[k]
        return k != ROOT and any(a is not None and dj > 0 for a, dj in zip(self.guarantee[k], self.demand[g]))

    # ---- one phase: the event loop ----------------------------------------------------------

    def blocked_leaf(self, g: int) -> bool:
        """Whether leaf ``g`` stopped for good, sits this phase out, or stopped for this phase."""
        return g in self.stops or not self.participating[g] or g in self.phase_stops

    def _fill(self) -> None:
        self.phase_stops = {}
        # Limits reached in an earlier phase stop the leaves that sat that phase out.
        for k in self.order:
            hit = [j for j in range(self.m) if self.limit_hit[k][j]]
            for g in self.leaves_under[k] if hit else ():
                if g not in self.stops and any(self.demand[g][j] > 0 for j in hit):
                    self.stops[g] = Stop("limit", tuple(self.p.resources[j] for j in hit if self.demand[g][j] > 0))
        # Resources an earlier phase used up stop the leaves that demand them before they move
        # (no event would come: a saturated resource offers none).
        for g in range(self.n_leaves):
            if not self.blocked_leaf(g):
                hit = tuple(self.p.resources[j] for j in range(self.m) if self.saturated[j] and self.demand[g][j] > 0)
                if hit:
                    self.stops[g] = Stop("saturated", hit)
        self.advance(self)

    def usage(self) -> dict[int, list[Number]]:
        """Node (and ROOT) → what its subtree uses now, per resource (base units)."""
        zero = self.zero
        use: dict[int, list[Number]] = {}
        for k in self.order + [ROOT]:
            if k != ROOT and k < self.n_leaves:
                use[k] = [self.x[k] * d for d in self.demand[k]]
            else:
                total = [zero] * self.m
                for c in self.children[k]:
                    if c in use:
                        total = [a + b for a, b in zip(total, use[c])]
                use[k] = total
        return use

    # ---- the answer -------------------------------------------------------------------------

    def _answer(self) -> Allocation:
        p = self.p
        resources = p.resources
        use = self.usage()
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
            parents[self.names[k]] = None if up == ROOT else self.names[up]
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
