"""Weighted Dominant Resource Fairness by progressive filling (Ghodsi et al., NSDI 2011).

Pure: no I/O, no clock. Two modes over one share measure:

* :func:`progressive_filling` — continuous (DESIGN.md §2, paper §4.1 and §4.3): a water level
  ``t`` rises; every unfrozen group's weighted share is ``w_g · t``, so it holds
  ``x_g = w_g · t / c_g`` tasks, where ``c_g`` is the share one of its tasks costs. A group
  freezes when ``x_g = n_g`` (demand met) or when a resource it demands saturates; groups that
  need none of a saturated resource keep growing. The level jumps from event to event (the
  nearest demand-met or saturation level), so the cost is O(n log n + n·m) for n groups and
  m resources, never a number of small increments.
* :func:`discrete_filling` — the paper's Algorithm 1 (§4.2) with a heap: tasks are atomic; the
  group with the lowest weighted share that still has a task to place goes next; if that task
  does not fit in what is left, the group is skipped for good (its tasks are identical and the
  free capacity only shrinks). Ties go to fewer placed tasks, then group name (Mesos's sorter).

The share measure ``c_g`` is ``max_j d_gj / R_j`` for DRF (the dominant share of one task); asset
fairness (paper §5.1) uses ``Σ_j d_gj / R_j`` with the same machinery, see
:mod:`governor.core.policies`. Reported dominant shares are always ``max_j A_gj / R_j``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Literal

from governor.errors import AllocationInputError
from governor.core.model import (
    DEMAND_MET,
    FLOAT_SLACK,
    Allocation,
    GroupDemand,
    Number,
    Problem,
    Stop,
    TraceRow,
    Vector,
    assemble,
    normalize,
)

Measure = Literal["dominant", "aggregate"]
_POLICY = {"dominant": "drf", "aggregate": "asset"}

# Unbounded task counts in discrete mode place tasks one by one; a demand that is tiny against
# the capacity would loop for hours, so refuse it with a clear error instead.
MAX_PLACEMENTS = 1_000_000
# A trace row of the discrete filling holds every group's dominant share: 2,000 groups placing
# 10,000 tasks built 20 million of them (over 90 s, gigabytes) for a table no one could read.
MAX_TRACE_CELLS = 1_000_000


def progressive_filling(
    capacity: Vector,
    groups: Sequence[GroupDemand],
    *,
    trace: bool = False,
    measure: Measure = "dominant",
) -> Allocation:
    """Continuous weighted progressive filling with demand caps.

    Args:
        capacity: resource → amount (cores, bytes, bytes/s), all ≥ 0.
        groups: the groups; their per-task demand vectors name only capacity resources.
        trace: also return one :class:`TraceRow` per event (demand met, resource saturated).
        measure: ``"dominant"`` for DRF; ``"aggregate"`` for asset fairness (paper §5.1).

    Returns:
        an :class:`Allocation` in continuous mode: real ``tasks`` per group, exact when every
        input is an int or Fraction, float otherwise.

    Raises:
        AllocationInputError: bad input, see :func:`governor.core.model.normalize`.
    """
    problem = normalize(capacity, groups)
    return _Continuous(problem, measure, trace).run()


def discrete_filling(
    capacity: Vector,
    groups: Sequence[GroupDemand],
    *,
    trace: bool = False,
    measure: Measure = "dominant",
    max_placements: int = MAX_PLACEMENTS,
) -> Allocation:
    """Discrete progressive filling, paper Algorithm 1 with a heap (O(log n) per decision).

    Args: as :func:`progressive_filling`; ``trace`` gives one row per placement or skip.

    Returns:
        an :class:`Allocation` in discrete mode: whole ``tasks`` per group.

    Raises:
        AllocationInputError: bad input, or more than ``max_placements`` tasks to place
            (give the groups task counts), or with ``trace`` more than :data:`MAX_TRACE_CELLS`
            dominant shares in its rows.
    """
    problem = normalize(capacity, groups)
    _check_placements(problem, max_placements)
    costs = _costs(problem, measure)
    slack = 0 if problem.exact else FLOAT_SLACK
    limit = [r * (1 + slack) for r in problem.capacity]
    used: list[Number] = [r * 0 for r in problem.capacity]
    placed = [0] * len(problem.names)
    stops: dict[int, Stop] = {}
    rows: list[TraceRow] = []

    heap = []
    for g, name in enumerate(problem.names):
        if problem.tasks[g] == 0:
            stops[g] = DEMAND_MET
        else:
            heap.append((costs[g] * 0, 0, name, g))
    heapq.heapify(heap)
    total = 0
    while heap:
        _, count, name, g = heapq.heappop(heap)
        demand = problem.demands[g]
        short = tuple(
            r for r, d, u, cap in zip(problem.resources, demand, used, limit) if d > 0 and u + d > cap
        )
        if short:
            stops[g] = Stop("no_fit", short)
        else:
            used = [u + d for u, d in zip(used, demand)]
            placed[g] = count = count + 1
            total += 1
            if total > max_placements:
                raise AllocationInputError(
                    f"discrete filling would place more than {max_placements} tasks; give it a task count",
                    group=name,
                )
            if count == problem.tasks[g]:
                stops[g] = DEMAND_MET
            else:
                heapq.heappush(heap, (count * costs[g] / problem.weights[g], count, name, g))
        if trace:
            if (len(rows) + 1) * len(problem.names) > MAX_TRACE_CELLS:
                raise AllocationInputError(
                    f"the trace would hold more than {MAX_TRACE_CELLS:,} dominant shares ({len(problem.names):,} "
                    "groups, a row per placement): ask without it, or give the groups task counts")
            shares = {n: placed[h] * problem.dominant_shares[h] for h, n in enumerate(problem.names)}
            rows.append(TraceRow(
                step=len(rows) + 1,
                event="skipped" if short else "placed",
                group=name,
                resource=short[0] if short else None,
                frozen=(name,) if g in stops else (),
                dominant_shares=shares,
                allocated=dict(zip(problem.resources, used)),
            ))
    return assemble(problem, "discrete", _POLICY[measure], placed, stops, rows)


def _check_placements(problem: Problem, max_placements: int) -> None:
    """Refuse at once a filling sure to place more than ``max_placements`` tasks, rather than
    after placing them one by one (a tiny task on a huge capacity took 25 s and 841 MB).

    A group of unbounded (or larger) task count stops only when its next task does not fit:
    some resource ``j`` it demands is then within ``d_gj`` of full, and every task placed holds
    at most the largest demand of ``j``, so at least ``(c_j − d_gj) / max_h d_hj`` tasks were
    placed. Where that is past the bound for every resource the group demands, so is the filling.

    Raises:
        AllocationInputError: naming the group.
    """
    for g, name in enumerate(problem.names):
        count = problem.tasks[g]
        if count is not None and count <= max_placements:
            continue
        fewest = min((problem.capacity[j] - d) / max(demands[j] for demands in problem.demands)
                     for j, d in enumerate(problem.demands[g]) if d > 0)
        if fewest > max_placements:
            raise AllocationInputError(
                f"discrete filling would place more than {max_placements} tasks; give it a task count",
                group=name,
            )


class _Continuous:
    """State of one continuous filling run; see the module docstring for the method."""

    def __init__(self, problem: Problem, measure: Measure, trace: bool):
        self.p = problem
        self.measure = measure
        self.trace = trace
        n, m = len(problem.names), len(problem.resources)
        zero = problem.capacity[0] * 0
        self.zero = zero
        self.costs = _costs(problem, measure)
        # x_g(t) = speed_g · t while g is active.
        self.speed = [problem.weights[g] / self.costs[g] for g in range(n)]
        self.x: list[Number | None] = [None] * n
        self.stops: dict[int, Stop] = {}
        self.frozen_use = [zero] * m  # Σ over frozen groups of x_g · d_gj
        self.rate = [zero] * m  # d/dt of what active groups use of j
        self.demanders = [[] for _ in range(m)]  # groups with d_gj > 0
        self.active_demanders = [0] * m
        self.saturated = [False] * m
        for g in range(n):
            for j, d in enumerate(problem.demands[g]):
                if d > 0:
                    self.rate[j] += self.speed[g] * d
                    self.demanders[j].append(g)
                    self.active_demanders[j] += 1
        self.rows: list[TraceRow] = []

    def run(self) -> Allocation:
        p = self.p
        # Level at which each bounded group's demand is met; equal levels keep group order.
        met_level = [None if n is None else n / v for n, v in zip(p.tasks, self.speed)]
        met_order = sorted((g for g, at in enumerate(met_level) if at is not None), key=met_level.__getitem__)
        next_met = 0
        active = len(p.names)
        level = self.zero
        while active:
            while next_met < len(met_order) and self.x[met_order[next_met]] is not None:
                next_met += 1
            saturation = self._next_saturation()
            g = met_order[next_met] if next_met < len(met_order) else None
            if g is not None and (saturation is None or met_level[g] <= saturation[0]):
                level = met_level[g]
                self._freeze(g, p.tasks[g], DEMAND_MET)
                active -= 1
                self._record("demand_met", p.names[g], None, (p.names[g],), level)
            else:
                # Every active group has a positive demand somewhere, and it has no task
                # count (met is None) only if it is unbounded, so some resource must saturate.
                assert saturation is not None
                level = max(level, saturation[0])
                j = saturation[1]
                frozen = self._saturate(j, level)
                active -= len(frozen)
                self._record("saturated", None, p.resources[j], frozen, level)
        return assemble(p, "continuous", _POLICY[self.measure], self.x, self.stops, self.rows)

    def _next_saturation(self) -> tuple[Number, int] | None:
        best = None
        for j, cap in enumerate(self.p.capacity):
            if self.saturated[j] or not self.active_demanders[j]:
                continue
            at = (cap - self.frozen_use[j]) / self.rate[j]
            if best is None or at < best[0]:
                best = (at, j)
        return best

    def _freeze(self, g: int, tasks: Number, stop: Stop) -> None:
        self.x[g] = tasks
        self.stops[g] = stop
        for j, d in enumerate(self.p.demands[g]):
            if d > 0:
                self.frozen_use[j] += tasks * d
                self.active_demanders[j] -= 1
                # Exact zero once nobody active demands j, so float drift never fakes a rate.
                self.rate[j] = self.rate[j] - self.speed[g] * d if self.active_demanders[j] else self.zero

    def _saturate(self, j: int, level: Number) -> tuple[str, ...]:
        """Mark every resource saturated at ``level`` and freeze the active groups demanding them."""
        p = self.p
        newly = [j]
        slack = 0 if p.exact else FLOAT_SLACK
        for k, cap in enumerate(p.capacity):
            if k != j and not self.saturated[k] and self.active_demanders[k]:
                if self.frozen_use[k] + self.rate[k] * level >= cap * (1 - slack):
                    newly.append(k)
        for k in newly:
            self.saturated[k] = True
        frozen = []
        stop = Stop("saturated", tuple(p.resources[k] for k in newly))
        for k in newly:
            for g in self.demanders[k]:
                if self.x[g] is None:
                    if len(newly) > 1:
                        stop = Stop("saturated", tuple(p.resources[i] for i in newly if p.demands[g][i] > 0))
                    self._freeze(g, self.speed[g] * level, stop)
                    frozen.append(p.names[g])
        return tuple(frozen)

    def _record(self, event: str, group: str | None, resource: str | None, frozen, level: Number) -> None:
        if not self.trace:
            return
        p = self.p
        shares = {}
        for g, name in enumerate(p.names):
            tasks = self.x[g] if self.x[g] is not None else self.speed[g] * level
            shares[name] = tasks * p.dominant_shares[g]
        allocated = {
            r: self.frozen_use[j] + self.rate[j] * level for j, r in enumerate(p.resources)
        }
        self.rows.append(TraceRow(len(self.rows) + 1, event, group, resource, tuple(frozen), shares, allocated))


def _costs(problem: Problem, measure: Measure) -> list[Number]:
    """The share of the host one task of each group costs under ``measure``."""
    if measure == "dominant":
        return list(problem.dominant_shares)
    return [sum(d / r for d, r in zip(demand, problem.capacity) if d > 0) for demand in problem.demands]
