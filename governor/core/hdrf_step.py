"""One step of H-DRF's continuous filling (:mod:`governor.core.hdrf`), typed: the state of the
tree at the current level (:class:`Step`: what each node uses, whether it is blocked, its
dominant share and rule-1 vector, which children grow and which wait) and the rates at which
it moves (:class:`Rates`). Pure: no I/O. The run is :class:`governor.core.hdrf_filling.Filling`;
the events the rates lead to are in :mod:`governor.core.hdrf_events`.

Nodes are numbered as the run numbers them: the leaves first, then the internal nodes;
:data:`governor.core.hdrf_filling.ROOT` (-1) is the tree's root. Vectors are per resource, in the problem's order.
"""

from __future__ import annotations

from dataclasses import dataclass

from governor.core.hdrf_filling import ROOT, Filling
from governor.core.model import Number

__all__ = ["Rates", "Step", "rates", "state"]



@dataclass(frozen=True, slots=True)
class Step:
    """The tree at the current level, bottom-up (nodes with leaves below them, and ROOT).

    Attributes:
        sat: node → per resource, saturated for it (globally, or a limit or phase cap of it or
            an ancestor reached).
        use: node → what its subtree uses; blocked: node → all its leaves are blocked.
        share: node → its dominant share (an internal node's: rule 2, saturated resources
            ignored); vector: internal node → its rule-1 vector.
        dominant: internal node → the resources at its dominant share.
        level: internal node → the least weighted share of its non-blocked children.
        growing, waiting: internal node → its non-blocked children at that level, and above it.
    """

    sat: dict[int, list[bool]]
    use: dict[int, list[Number]]
    blocked: dict[int, bool]
    share: dict[int, Number]
    vector: dict[int, list[Number]]
    dominant: dict[int, list[int]]
    level: dict[int, Number]
    growing: dict[int, list[int]]
    waiting: dict[int, list[int]]


@dataclass(frozen=True, slots=True)
class Rates:
    """How the step moves, per unit of the root's level.

    Attributes:
        rho: node → the rate of its own share (or, flat, of its growth); xdot: leaf → the rate
            of its task count.
        unit_use, unit_vec: node → its use and rule-1 vector per unit of its own rate.
        unit_level: internal node → its level per unit of its own rate.
    """

    rho: dict[int, Number]
    xdot: dict[int, Number]
    unit_use: dict[int, list[Number]]
    unit_vec: dict[int, list[Number]]
    unit_level: dict[int, Number]


def state(f: Filling) -> Step | None:
    """Usage, blocked flags, shares, rule-1 vectors and min sets, bottom-up. None when all blocked."""
    m, p = f.m, f.p
    zero = f.zero
    # Resources saturated for a node: global, or a limit/cap reached by it or an ancestor.
    sat = {}
    for k in f.depth_first:
        up = f.parent[k]
        base = f.saturated if up == ROOT else sat[up]
        own = f.limit_hit[k]
        phase = f.cap_hit[k]
        sat[k] = [base[j] or own[j] or phase[j] for j in range(m)]
    use: dict[int, list[Number]] = {}
    blocked: dict[int, bool] = {}
    share: dict[int, Number] = {}
    vector: dict[int, list[Number]] = {}
    dominant: dict[int, list[int]] = {}
    level: dict[int, Number] = {}
    growing: dict[int, list[int]] = {}
    waiting: dict[int, list[int]] = {}
    capacity = p.capacity
    tol = f.slack
    for k in f.order + [ROOT]:
        if k != ROOT and k < f.n_leaves:
            x = f.x[k]
            use[k] = [x * d for d in f.demand[k]]
            blocked[k] = f.blocked_leaf(k)
            share[k] = x * f.delta[k]
            continue
        kids = [c for c in f.children[k] if c in use]
        total = [zero] * m
        for c in kids:
            total = [a + b for a, b in zip(total, use[c])]
        use[k] = total
        live = [c for c in kids if not blocked[c]]
        blocked[k] = not live
        if not live:
            continue
        weighted = {c: share[c] / f.weight[c] for c in live}
        low = min(weighted.values())
        bound = low + tol * max(low, abs(low))
        grow = [c for c in live if weighted[c] <= bound]
        wait = [c for c in live if weighted[c] > bound]
        for c in grow:
            f.started[c] = True
        level[k] = low
        growing[k] = grow
        waiting[k] = wait
        if k == ROOT:
            continue
        vec = [zero] * m
        for c in kids:
            if c in wait and f.started[c]:
                factor = low * f.weight[c] / share[c]
                vec = [a + b * factor for a, b in zip(vec, use[c])]
            else:
                vec = [a + b for a, b in zip(vec, use[c])]
        vector[k] = vec
        shares = [(vec[j] / capacity[j], j) for j in range(m) if not sat[k][j]]
        top = max(s for s, _ in shares) if shares else zero
        share[k] = top
        cut = top - tol * top
        dominant[k] = [j for s, j in shares if s >= cut]
    if blocked.get(ROOT, True):
        return None
    return Step(sat=sat, use=use, blocked=blocked, share=share, vector=vector,
            dominant=dominant, level=level, growing=growing, waiting=waiting)


def rates(f: Filling, st: Step) -> Rates:
    """Directions bottom-up (per unit of a node's own share, or flat), rates top-down."""
    m, p = f.m, f.p
    zero = f.zero
    capacity = p.capacity
    unit_use: dict[int, list[Number]] = {}
    unit_vec: dict[int, list[Number]] = {}
    flat: dict[int, bool] = {}
    coef: dict[int, dict[int, Number]] = {}
    unit_level: dict[int, Number] = {}
    blocked = st.blocked
    for k in f.order + [ROOT]:
        if blocked.get(k, True):
            continue
        if k != ROOT and k < f.n_leaves:
            unit_use[k] = [d / f.delta[k] for d in f.demand[k]]
            flat[k] = False
            continue
        grow = st.growing[k]
        free = [c for c in grow if flat[c]]
        if free:
            co = {c: 1 for c in free}
            u = [zero] * m
            for c in free:
                u = [a + b for a, b in zip(u, unit_use[c])]
            v = list(u)
            lvl = zero
        else:
            co = {c: f.weight[c] for c in grow}
            u = [zero] * m
            for c in grow:
                w = f.weight[c]
                u = [a + w * b for a, b in zip(u, unit_use[c])]
            v = list(u)
            if k != ROOT:
                for c in st.waiting[k]:
                    if f.started[c]:
                        scale = f.weight[c] / st.share[c]
                        v = [a + scale * b for a, b in zip(v, st.use[c])]
            lvl = 1
        if k == ROOT:
            coef[k], unit_use[k], unit_level[k], flat[k] = co, u, lvl, False
            continue
        sigma = max((v[j] / capacity[j] for j in st.dominant[k]), default=zero)
        if sigma == 0:
            flat[k] = True
            coef[k], unit_use[k], unit_vec[k], unit_level[k] = co, u, v, lvl
        else:
            flat[k] = False
            coef[k] = {c: a / sigma for c, a in co.items()}
            unit_use[k] = [a / sigma for a in u]
            unit_vec[k] = [a / sigma for a in v]
            unit_level[k] = lvl / sigma
    rho = {ROOT: 1}
    xdot: dict[int, Number] = {}
    for k in [ROOT] + f.depth_first:
        r = rho.get(k)
        if not r:
            continue
        if k != ROOT and k < f.n_leaves:
            xdot[k] = r / f.delta[k]
            continue
        for c, a in coef[k].items():
            rho[c] = r * a
    return Rates(rho=rho, xdot=xdot, unit_use=unit_use, unit_vec=unit_vec, unit_level=unit_level)
