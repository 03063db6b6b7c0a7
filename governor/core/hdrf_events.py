"""The events of H-DRF's continuous filling (:mod:`governor.core.hdrf`), typed. Between two events
everything grows linearly at the rates :mod:`governor.core.hdrf_step` gives, so the run finds the
nearest event ahead (:func:`next_event`, an :class:`Ahead`), moves every growing leaf up to it,
and applies what the new level changes (:func:`apply_events`): leaves stopped, resources
saturated, limits and guarantees reached, each a :class:`Fired` event (one trace row).
Pure: no I/O.

Nodes are numbered as the run numbers them (the leaves first, then the internal nodes;
:data:`governor.core.hdrf_filling.ROOT` the root); resources by their index in the problem's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from governor.errors import FillingDiverged
from governor.core.hdrf_filling import ROOT, Filling
from governor.core.hdrf_step import Rates, Step, rates, state
from governor.core.model import DEMAND_MET, Number, Stop, TraceRow

__all__ = ["Ahead", "Fired", "advance", "apply_events", "next_event"]

AheadKind = Literal["demand_met", "saturated", "cap", "dominant_resource", "reached"]
FiredKind = Literal["demand_met", "saturated", "limit", "guarantee", "dominant_resource", "reached"]


@dataclass(frozen=True, slots=True)
class Ahead:
    """The nearest event ahead of the current level.

    Attributes:
        after: how far ahead, in units of the root's level (each growing leaf's task count
            moves by ``Rates.xdot[leaf] × after``); 0 when it is due now.
        kind: ``"demand_met"`` (leaf ``node`` reaches its task count), ``"saturated"`` (all of
            ``resource`` is used), ``"cap"`` (``node`` reaches its limit on ``resource``, or in
            a guarantee phase its guarantee), ``"dominant_resource"`` (``resource`` joins the
            dominant resources of internal node ``node``), ``"reached"`` (the level of its
            parent reaches the waiting child ``node``).
        node: the node it concerns; None for ``"saturated"``.
        resource: the resource it concerns; None for ``"demand_met"`` and ``"reached"``.
    """

    after: Number
    kind: AheadKind
    node: int | None = None
    resource: int | None = None


@dataclass(frozen=True, slots=True)
class Fired:
    """An event that happened at the current level: one row of the trace.

    Attributes:
        kind: the trace's event name: ``"demand_met"`` (leaf ``node`` got its demand),
            ``"saturated"`` (all of ``resource`` is used), ``"limit"`` / ``"guarantee"`` (node
            ``node`` reached its limit / its guarantee on ``resource``), and, only when nothing
            else fired, the :class:`Ahead` that led here: ``"dominant_resource"``, ``"reached"``.
        node: the node it concerns, or None.
        resource: the resource it concerns, or None.
        frozen: the leaves it stopped (``"demand_met"``: the leaf itself).
    """

    kind: FiredKind
    node: int | None
    resource: int | None
    frozen: tuple[int, ...]


def next_event(f: Filling, st: Step, rates: Rates) -> Ahead | None:
    """The nearest event ahead of the level ``st`` moving at ``rates``; the first offered among
    equals. None when no event lies ahead (every growing leaf would grow for ever)."""
    p, m = f.p, f.m
    rho, xdot = rates.rho, rates.xdot
    best: Ahead | None = None

    def offer(after: Number, kind: AheadKind, node: int | None = None, resource: int | None = None) -> None:
        nonlocal best
        if after < 0:
            after = f.zero
        if best is None or after < best.after:
            best = Ahead(after, kind, node, resource)

    for g, v in xdot.items():
        count = p.tasks[g]
        if count is not None and v > 0:
            offer((count - f.x[g]) / v, "demand_met", g)
    total = [f.zero] * m
    node_rate: dict[int, list[Number] | None] = {}
    # Usage rates per node: leaves from xdot, summed upward.
    for k in f.order:
        if k < f.n_leaves:
            v = xdot.get(k)
            node_rate[k] = [v * d for d in f.demand[k]] if v else None
        else:
            acc = None
            for c in f.children[k]:
                rc = node_rate.get(c)
                if rc is not None:
                    acc = list(rc) if acc is None else [a + b for a, b in zip(acc, rc)]
            node_rate[k] = acc
    for k in f.children[ROOT]:
        rc = node_rate.get(k)
        if rc is not None:
            total = [a + b for a, b in zip(total, rc)]
    use = st.use
    for j in range(m):
        if not f.saturated[j] and total[j] > 0:
            offer((p.capacity[j] - use[ROOT][j]) / total[j], "saturated", resource=j)
    for k in f.order:
        rc = node_rate.get(k)
        if rc is None:
            continue
        caps = f.caps[k]
        for j in range(m):
            if caps[j] is not None and rc[j] > 0 and not (f.limit_hit[k][j] or f.cap_hit[k][j]):
                offer((caps[j] - use[k][j]) / rc[j], "cap", k, j)
    # Dominant-resource changes of growing internal nodes, and the level reaching a waiting child.
    for k, r in rho.items():
        if k == ROOT or k < f.n_leaves or not r:
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
                offer((top - vec[j] / cap[j]) / (sj - speed), "dominant_resource", k, j)
    for k, r in rho.items():
        if k < f.n_leaves and k != ROOT or not r:
            continue
        lvl_rate = r * rates.unit_level[k]
        if not lvl_rate:
            continue
        low = st.level[k]
        for c in st.waiting[k]:
            offer((st.share[c] / f.weight[c] - low) / lvl_rate, "reached", c)
    return best


def apply_events(f: Filling, ahead: Ahead) -> None:
    """Apply what the level ``ahead`` led to changes, within the run's slack: leaves whose
    demand is met, resources saturated, limits and phase caps reached (``ahead``'s own
    saturation or cap counts even if rounding left it short). Updates ``f`` (``x``,
    ``stops``, ``phase_stops``, ``saturated``, ``limit_hit``, ``cap_hit``) and, when it
    traces, appends one :class:`TraceRow` per :class:`Fired` event to ``f.rows``."""
    p, m = f.p, f.m
    slack = f.slack
    fired: list[Fired] = []
    for g in range(f.n_leaves):
        if f.blocked_leaf(g):
            continue
        count = p.tasks[g]
        if count is not None and f.x[g] >= count * (1 - slack):
            f.x[g] = count
            f.stops[g] = DEMAND_MET
            fired.append(Fired("demand_met", g, None, (g,)))
    use = f.usage()
    newly = [j for j in range(m) if not f.saturated[j] and use[ROOT][j] >= p.capacity[j] * (1 - slack)]
    if ahead.kind == "saturated" and ahead.resource not in newly:
        newly.append(ahead.resource)
    if newly:
        for j in newly:
            f.saturated[j] = True
        frozen = []
        for g in range(f.n_leaves):
            if f.blocked_leaf(g):
                continue
            hit = tuple(p.resources[j] for j in sorted(newly) if f.demand[g][j] > 0)
            if hit:
                f.stops[g] = Stop("saturated", hit)
                frozen.append(g)
        for j in sorted(newly):
            fired.append(Fired("saturated", None, j, tuple(g for g in frozen if f.demand[g][j] > 0)))
    for k in f.order:
        caps = f.caps[k]
        for j in range(m):
            if caps[j] is None or f.limit_hit[k][j] or f.cap_hit[k][j]:
                continue
            forced = ahead.kind == "cap" and ahead.node == k and ahead.resource == j
            if not forced and use[k][j] < caps[j] * (1 - slack):
                continue
            real = f.limit[k][j] is not None and caps[j] == f.limit[k][j]
            (f.limit_hit if real else f.cap_hit)[k][j] = True
            frozen = []
            for g in f.leaves_under[k]:
                if not f.blocked_leaf(g) and f.demand[g][j] > 0:
                    stop = Stop("limit", (p.resources[j],))
                    if real:
                        f.stops[g] = stop
                    else:
                        f.phase_stops[g] = stop
                    frozen.append(g)
            fired.append(Fired("limit" if real else "guarantee", k, j, tuple(frozen)))
    if not f.trace:
        return
    if not fired and ahead.kind in ("dominant_resource", "reached"):
        fired.append(Fired(ahead.kind, ahead.node, ahead.resource, ()))
    for event in fired:
        _record(f, event, use)


def _record(f: Filling, event: Fired, use: dict[int, list[Number]]) -> None:
    p = f.p
    shares = {}
    for node in f.order:
        shares[f.names[node]] = max(a / r for a, r in zip(use[node], p.capacity))
    f.rows.append(TraceRow(
        step=len(f.rows) + 1, event=event.kind, group=None if event.node is None else f.names[event.node],
        resource=None if event.resource is None else p.resources[event.resource],
        frozen=tuple(f.names[g] for g in event.frozen), dominant_shares=shares,
        allocated=dict(zip(p.resources, use[ROOT])),
    ))

def advance(f: Filling) -> None:
    """One phase's event loop (the paper's progressive filling, §5, as a sequence of events):
    from the step's state and rates, move every growing leaf to the next event and apply it,
    until every leaf is blocked.

    Raises:
        FillingDiverged: no event ahead while leaves still grow, or no answer after a bound
            on the number of events (a bug, never an input: the daemon keeps its last plan).
    """
    events = 0
    while True:
        current = state(f)
        if current is None:
            break
        events += 1
        speeds = rates(f, current)
        ahead = next_event(f, current, speeds)
        if ahead is None or events > 100 * (f.n + f.m + 10) ** 2:
            raise FillingDiverged("H-DRF: " + ("no event ahead while leaves still grow" if ahead is None else
                                               f"no answer after {events - 1} events"))
        if ahead.after:
            for g, v in speeds.xdot.items():
                f.x[g] += v * ahead.after
        apply_events(f, ahead)
