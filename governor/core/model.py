"""The allocation problem and its answer, as plain data (DESIGN.md §1–2).

A problem is a **capacity** vector ``R`` (resource name → amount: cores, bytes, bytes/s…) and
a set of **groups**, each with a **weight**, a per-task **demand vector** ``d_g`` and a task
count ``n_g`` (``None`` = unbounded). The daemon, whose tasks differ, passes a group's summed
demand ``D_g`` as one task (``n_g = 1``), so ``tasks`` in the answer is the DESIGN's ``λ_g``.

Numbers are exact (``int``/``Fraction``) or ``float``; :func:`normalize` checks a problem and
converts it to one kind, so the allocators never mix them.

Each answer has one JSON form, its ``to_json()``, used by ``simulate --json``, the daemon's
``explain`` and ``status`` objects alike: every amount (base units: cores, bytes, bytes/s),
share, weight and λ is a float, whatever the arithmetic; counts (a trace's ``step``, discrete
``tasks``) are ints.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, Union

from governor.errors import AllocationInputError

Number = Union[int, float, Fraction]
Vector = Mapping[str, Number]

# Float inputs (production) carry rounding error: a resource counts as saturated, a limit as
# reached, a task as fitting and shares as equal within this relative slack (DRF and H-DRF
# alike). Exact inputs (tests, simulate) use none.
FLOAT_SLACK = 1e-9


@dataclass(slots=True)
class GroupDemand:
    """One DRF "user". (Slotted, not frozen, like :class:`GroupAllocation`: the daemon builds
    one per group on every refill.)

    Attributes:
        name: the group's name (unique within a problem).
        task: per-task demand vector, resource → amount in base units (cores, bytes, bytes/s).
            Resources left out are not demanded (0).
        weight: > 0; weighted DRF equalises ``dominant share / weight`` (paper §4.3).
        tasks: how many tasks the group wants to run; ``None`` for as many as fit.
    """

    name: str
    task: Vector
    weight: Number = 1
    tasks: int | None = None


Mode = Literal["continuous", "discrete"]
StopKind = Literal["demand_met", "saturated", "no_fit", "limit"]


@dataclass(frozen=True)
class Stop:
    """Why a group's share stopped growing.

    ``demand_met``: it got every task it asked for. ``saturated``: a resource it demands is
    fully allocated (continuous filling). ``no_fit``: its next task does not fit in what is
    left of ``resources`` (discrete filling). ``limit``: a group limit (its own or an enclosing
    group's) on ``resources`` is reached (hierarchical filling, :mod:`governor.core.hdrf`).
    """

    kind: StopKind
    resources: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for people: ``"demand met"``, ``"cpu saturated"``, ``"next task does not fit: cpu"``,
        ``"limit reached: cpu"``."""
        if self.kind == "demand_met":
            return "demand met"
        names = ", ".join(self.resources)
        if self.kind == "limit":
            return f"limit reached: {names}"
        return f"{names} saturated" if self.kind == "saturated" else f"next task does not fit: {names}"


DEMAND_MET = Stop("demand_met")


@dataclass(slots=True)
class GroupAllocation:
    """What a policy gives one group. (Slotted, not frozen: the daemon builds one per group on
    every refill, and a frozen dataclass costs several times more to create.)

    Attributes:
        tasks: tasks-worth allocated, ``x_g`` (real in continuous mode, whole in discrete mode).
        allocation: ``x_g · d_g`` per resource, base units.
        dominant_resources: the resource(s) where ``d_gj / R_j`` is largest (ties kept, capacity order).
        dominant_share: ``max_j allocation_j / R_j``, a fraction of the host in [0, 1].
        stop: why its share stopped growing.
    """

    name: str
    weight: Number
    demanded_tasks: int | None
    tasks: Number
    allocation: dict[str, Number]
    dominant_resources: tuple[str, ...]
    dominant_share: Number
    stop: Stop

    def to_json(self) -> dict:
        """``{"weight": float, "allocation": {resource: float}, "dominant_resources": [resource],
        "dominant_share": float, "stop": str}``: what every view of a group's allocation shares
        (``simulate`` adds the tasks-worth, the daemon λ and the demand)."""
        return {"weight": float(self.weight), "allocation": floats(self.allocation),
                "dominant_resources": list(self.dominant_resources),
                "dominant_share": float(self.dominant_share), "stop": self.stop.describe()}


@dataclass(slots=True)
class TraceRow:
    """One event of continuous filling or one decision of discrete filling (paper Table 1).

    Attributes:
        step: 1-based index.
        event: ``"placed"``/``"skipped"`` (discrete) or ``"demand_met"``/``"saturated"`` (continuous).
        group: the group placed, skipped or whose demand was met; ``None`` for a saturation.
        resource: the resource that saturated, or that the skipped group's task did not fit in.
        frozen: groups whose share stopped growing at this event (continuous filling).
        dominant_shares: every group's dominant share after the event.
        allocated: total allocated per resource after the event, base units.
    """

    step: int
    event: str
    group: str | None
    resource: str | None
    frozen: tuple[str, ...]
    dominant_shares: dict[str, Number]
    allocated: dict[str, Number]

    def to_json(self) -> dict:
        """``{"step": int, "event", "group", "resource", "frozen": [group], "dominant_shares":
        {group: float}, "allocated": {resource: float}}``."""
        return {"step": self.step, "event": self.event, "group": self.group, "resource": self.resource,
                "frozen": list(self.frozen), "dominant_shares": floats(self.dominant_shares),
                "allocated": floats(self.allocated)}


@dataclass(frozen=True)
class Allocation:
    """A policy's answer: per group allocation, in group order, and the trace if asked for.

    Hierarchical filling (:mod:`governor.core.hdrf`) also fills ``nodes``, the internal groups of the
    tree (their subtree's sum; see :func:`governor.core.hdrf.hierarchical_filling`), and ``parents``,
    node → parent (``None``: a child of the root) for every group and node in the answer. Both
    are empty for a flat answer.
    """

    mode: Mode
    policy: Literal["drf", "asset", "ceei"]
    capacity: dict[str, Number]
    groups: dict[str, GroupAllocation]
    trace: tuple[TraceRow, ...] = field(default=())
    nodes: dict[str, GroupAllocation] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)

    def to_json(self) -> dict:
        """``{"mode", "policy", "capacity": {resource: float}, "groups": {name: {"tasks",
        "demanded_tasks", **GroupAllocation.to_json()}}, "trace": [TraceRow.to_json()]}``.

        ``tasks`` (tasks-worth allocated) is an int in discrete mode, a float in continuous
        mode; ``demanded_tasks`` is None for unbounded. A hierarchical answer adds ``"nodes"``
        (internal groups, the same form as ``"groups"``) and ``"parents"`` ({name: parent or
        None}); a flat one has neither key.
        """
        whole = self.mode == "discrete"
        answer = {
            "mode": self.mode, "policy": self.policy, "capacity": floats(self.capacity),
            "groups": {name: {"tasks": int(got.tasks) if whole else float(got.tasks),
                              "demanded_tasks": got.demanded_tasks, **got.to_json()}
                       for name, got in self.groups.items()},
            "trace": [row.to_json() for row in self.trace],
        }
        if self.nodes:
            answer["nodes"] = {name: {"tasks": float(got.tasks), "demanded_tasks": got.demanded_tasks,
                                      **got.to_json()} for name, got in self.nodes.items()}
        if self.parents:
            answer["parents"] = dict(self.parents)
        return answer


def floats(vector: Mapping[str, Number]) -> dict[str, float]:
    """A vector with every amount as a float, for JSON (one rule for every view)."""
    return {key: float(value) for key, value in vector.items()}


@dataclass(frozen=True)
class Problem:
    """A checked problem with every number of one kind (all exact, or all float).

    ``demands[g][j]`` follows ``resources`` order; ``capacity`` likewise. ``dominant_shares[g]``
    is the share of the host one task of group g takes on its dominant resource(s),
    ``dominant_resources[g]``.
    """

    resources: tuple[str, ...]
    capacity: tuple[Number, ...]
    names: tuple[str, ...]
    weights: tuple[Number, ...]
    demands: tuple[tuple[Number, ...], ...]
    tasks: tuple[int | None, ...]
    exact: bool
    dominant_shares: tuple[Number, ...]
    dominant_resources: tuple[tuple[str, ...], ...]


_NUMBER_TYPES = {int, float, Fraction}


def normalize(capacity: Vector, groups: Sequence[GroupDemand]) -> Problem:
    """Check a problem and convert its numbers to one kind.

    Exact (Fraction) when every number is an int or Fraction, float otherwise. Checks run in
    bulk; only when one fails is each value looked at, to name the culprit.

    Raises:
        AllocationInputError: naming the group and resource, for an empty capacity; a negative,
            NaN or infinite value; a weight ≤ 0; a task count that is not a whole number ≥ 0;
            a demand on a resource the capacity does not list or whose capacity is 0; a group
            whose demand is all zero; a duplicate group name.
    """
    if not capacity:
        raise AllocationInputError("capacity lists no resource")
    resources = tuple(capacity)
    types = {type(v) for v in capacity.values()}
    for group in groups:
        types.update(map(type, group.task.values()))
        types.add(type(group.weight))
    exact = float not in types
    convert = Fraction if exact else float
    if not types <= _NUMBER_TYPES:
        _find_bad_value(capacity, groups)

    capacity_vector = tuple(map(convert, capacity.values()))
    if not _all_valid(capacity_vector):
        _find_bad_value(capacity, groups)
    inverse = tuple(1 / c if c else c for c in capacity_vector)
    zero_capacity = not all(capacity_vector)
    known = set(resources)
    zeros = [0] * len(resources)
    names, weights, demands, tasks, dominant_shares, dominant_resources = [], [], [], [], [], []
    every_demand: list[Number] = []
    for group in groups:
        name, task = group.name, group.task
        if not task.keys() <= known:
            unknown = sorted(task.keys() - known)[0]
            raise AllocationInputError(
                f"demands a resource the capacity does not list (capacity has: {', '.join(resources)})",
                group=name, resource=unknown,
            )
        demand = tuple(map(convert, map(task.get, resources, zeros)))
        every_demand.extend(demand)
        weight = convert(group.weight)
        if not weight > 0:
            _amount(group.weight, name, None, what="weight")
            raise AllocationInputError(f"weight must be > 0, got {group.weight!r}", group=name)
        if zero_capacity:
            for resource, amount, cap in zip(resources, demand, capacity_vector):
                if amount > 0 and cap == 0:
                    raise AllocationInputError("demands a resource whose capacity is 0", group=name, resource=resource)
        shares = list(map(operator.mul, demand, inverse))
        top = max(shares)
        if top == 0 or top != top:
            if not _all_valid(demand):
                _find_bad_value(capacity, groups)
            raise AllocationInputError("demand vector is all zero", group=name)
        count = group.tasks
        if count is not None and (type(count) is not int or count < 0):
            raise AllocationInputError(
                f"task count must be a whole number ≥ 0 or unbounded, got {count!r}", group=name
            )
        names.append(name)
        weights.append(weight)
        demands.append(demand)
        tasks.append(count)
        dominant_shares.append(top)
        if shares.count(top) == 1:
            dominant_resources.append((resources[shares.index(top)],))
        else:
            dominant_resources.append(tuple(r for r, share in zip(resources, shares) if share == top))
    if every_demand and not _all_valid(every_demand):
        _find_bad_value(capacity, groups)
    if len(set(names)) != len(names):
        twice = next(n for i, n in enumerate(names) if n in names[:i])
        raise AllocationInputError("group appears twice", group=twice)
    return Problem(resources, capacity_vector, tuple(names), tuple(weights), tuple(demands), tuple(tasks),
                   exact, tuple(dominant_shares), tuple(dominant_resources))


def _all_valid(values: Sequence[Number]) -> bool:
    """True when every value is ≥ 0 and finite (NaN and ±inf make the sum non-finite)."""
    return min(values) >= 0 and math.isfinite(sum(values))


def _find_bad_value(capacity: Vector, groups: Sequence[GroupDemand]) -> None:
    """Raise the error for the first bad number, naming where it is."""
    for resource, value in capacity.items():
        _amount(value, None, resource)
    for group in groups:
        for resource, value in group.task.items():
            _amount(value, group.name, resource)
        _amount(group.weight, group.name, None, what="weight")
    raise AssertionError("a bulk check failed but no single value is bad")


def _amount(value: object, group: str | None, resource: str | None, *, what: str = "value") -> Number:
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise AllocationInputError(f"{what} must be a number, got {value!r}", group=group, resource=resource)
    if isinstance(value, float) and not math.isfinite(value):
        raise AllocationInputError(f"{what} must be finite, got {value!r}", group=group, resource=resource)
    if value < 0:
        raise AllocationInputError(f"{what} must not be negative, got {value!r}", group=group, resource=resource)
    return value


def assemble(
    problem: Problem,
    mode: Mode,
    policy: Literal["drf", "asset", "ceei"],
    tasks: Sequence[Number],
    stops: Mapping[int, Stop],
    rows: Sequence[TraceRow] = (),
) -> Allocation:
    """Build an :class:`Allocation` from tasks-worth per group (``tasks[g]``, problem order)."""
    groups = {}
    resources = problem.resources
    for g, name in enumerate(problem.names):
        x = tasks[g]
        groups[name] = GroupAllocation(
            name, problem.weights[g], problem.tasks[g], x,
            dict(zip(resources, [x * d for d in problem.demands[g]])),
            problem.dominant_resources[g], x * problem.dominant_shares[g], stops[g],
        )
    capacity = dict(zip(problem.resources, problem.capacity))
    return Allocation(mode, policy, capacity, groups, tuple(rows))


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
