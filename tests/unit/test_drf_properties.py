"""What DRF guarantees (paper §3, §6, Table 2), checked exactly with Fractions on random problems.

Continuous progressive filling with weights and demand caps; each property states the weighted,
capped form that DRF satisfies. 1,000 examples per property (tests/conftest.py).
"""

from dataclasses import replace
from fractions import Fraction

from hypothesis import assume, given
from hypothesis import strategies as st
from support.problems import amounts, cap, demand_vectors, problems, tasks_from

from governor.core.drf import discrete_filling, progressive_filling
from governor.core.model import GroupDemand


@given(problems())
def test_feasible_and_pareto_efficient(problem):
    """No resource is over-allocated, and every group short of its demand is stopped by a
    saturated resource it needs: no group can grow without taking from another."""
    capacity, groups = problem
    result = progressive_filling(capacity, groups)
    used = {r: sum(g.allocation[r] for g in result.groups.values()) for r in capacity}
    assert all(used[r] <= capacity[r] for r in capacity)
    for group in groups:
        got = result.groups[group.name]
        if got.tasks < cap(group.tasks):
            assert any(used[r] == capacity[r] for r, d in group.task.items() if d > 0)
        else:
            assert got.tasks == group.tasks


@given(problems())
def test_sharing_incentive(problem):
    """Each group runs at least as many tasks as in its own static partition, weight/Σweights
    of every resource (or all it asked for)."""
    capacity, groups = problem
    result = progressive_filling(capacity, groups)
    total_weight = sum(g.weight for g in groups)
    for group in groups:
        partition = {r: capacity[r] * group.weight / total_weight for r in capacity}
        alone = min(cap(group.tasks), tasks_from(partition, group.task))
        assert result.groups[group.name].tasks >= alone


@given(problems(min_groups=2), st.data())
def test_strategy_proof(problem, data):
    """A group that reports a false demand vector never gets more tasks of its true demand."""
    capacity, groups = problem
    liar = data.draw(st.sampled_from(groups))
    lie = data.draw(demand_vectors(list(capacity)))
    assume(lie != liar.task)
    truthful = progressive_filling(capacity, groups).groups[liar.name].tasks
    lied = [replace(g, task=lie) if g is liar else g for g in groups]
    allocation = progressive_filling(capacity, lied).groups[liar.name].allocation
    assert min(cap(liar.tasks), tasks_from(allocation, liar.task)) <= truthful


@given(problems(min_groups=2))
def test_envy_free(problem):
    """No group would run more tasks with another group's allocation scaled by their weights."""
    capacity, groups = problem
    result = progressive_filling(capacity, groups)
    for group in groups:
        mine = result.groups[group.name].tasks
        for other in groups:
            if other is not group:
                theirs = result.groups[other.name].allocation
                scaled = {r: a * group.weight / other.weight for r, a in theirs.items()}
                assert min(cap(group.tasks), tasks_from(scaled, group.task)) <= mine


def weighted_max_min(capacity, demands, weights):
    """Reference weighted max-min fairness (water-filling) on one resource."""
    allocation, remaining, active = {}, capacity, set(demands)
    while active:
        level = remaining / sum(weights[g] for g in active)
        met = {g for g in active if demands[g] <= weights[g] * level}
        if not met:
            allocation.update({g: weights[g] * level for g in active})
            break
        for g in met:
            allocation[g] = demands[g]
            remaining -= demands[g]
        active -= met
    return allocation


@given(problems(max_resources=1))
def test_single_resource_fairness(problem):
    """With one resource, DRF is weighted max-min fairness."""
    capacity, groups = problem
    (resource,) = capacity
    result = progressive_filling(capacity, groups)
    demands = {g.name: cap(g.tasks) * g.task[resource] for g in groups}
    expected = weighted_max_min(capacity[resource], demands, {g.name: g.weight for g in groups})
    assert {n: g.allocation[resource] for n, g in result.groups.items()} == expected


@st.composite
def bottleneck_problems(draw):
    """Problems where resource r0 is the most demanded, percent-wise, by every group."""
    capacity, groups = draw(problems(min_resources=2))
    widened = []
    for group in groups:
        need = max(d / capacity[r] for r, d in group.task.items()) * capacity["r0"]
        extra = draw(st.fractions(min_value=0, max_value=2, max_denominator=4))
        widened.append(replace(group, task={**group.task, "r0": need + extra}))
    return capacity, widened


@given(bottleneck_problems())
def test_bottleneck_fairness(problem):
    """When one resource is every group's bottleneck, DRF is weighted max-min on it."""
    capacity, groups = problem
    result = progressive_filling(capacity, groups)
    demands = {g.name: cap(g.tasks) * g.task["r0"] for g in groups}
    expected = weighted_max_min(capacity["r0"], demands, {g.name: g.weight for g in groups})
    assert {n: g.allocation["r0"] for n, g in result.groups.items()} == expected


@given(problems(min_groups=2, positive=True), st.data())
def test_population_monotonic(problem, data):
    """When a group leaves, no remaining group's allocation decreases.

    In the paper's setting, where every group demands every resource. With zero demands the
    filling that goes on past a saturation (for Pareto efficiency, §4.1) can break it: see
    test_population_monotonicity_needs_positive_demands.
    """
    capacity, groups = problem
    leaver = data.draw(st.sampled_from(groups))
    before = progressive_filling(capacity, groups)
    after = progressive_filling(capacity, [g for g in groups if g is not leaver])
    for name, group in after.groups.items():
        assert group.tasks >= before.groups[name].tasks


@given(problems())
def test_weighted_shares_are_equal_among_groups_stopped_together(problem):
    """Groups frozen by the same event end at the same weighted dominant share (the level)."""
    capacity, groups = problem
    result = progressive_filling(capacity, groups, trace=True)
    weights = {g.name: g.weight for g in groups}
    for row in result.trace:
        if row.event == "saturated":
            levels = {result.groups[n].dominant_share / weights[n] for n in row.frozen}
            assert len(levels) == 1


@given(problems())
def test_floats_agree_with_fractions(problem):
    capacity, groups = problem
    exact = progressive_filling(capacity, groups)
    as_float = progressive_filling(
        {r: float(v) for r, v in capacity.items()},
        [replace(g, task={r: float(d) for r, d in g.task.items()}, weight=float(g.weight)) for g in groups],
    )
    for name, group in exact.groups.items():
        assert abs(as_float.groups[name].tasks - float(group.tasks)) <= 1e-9 * max(1.0, float(group.tasks))


@given(problems(max_groups=4))
def test_discrete_is_feasible_and_stops_only_when_no_task_fits(problem):
    capacity, groups = problem
    groups = [replace(g, tasks=g.tasks if g.tasks is not None else 6) for g in groups]
    result = discrete_filling(capacity, groups)
    used = {r: sum(g.allocation[r] for g in result.groups.values()) for r in capacity}
    assert all(used[r] <= capacity[r] for r in capacity)
    for group in groups:
        got = result.groups[group.name]
        if got.tasks < group.tasks:
            assert any(used[r] + d > capacity[r] for r, d in group.task.items() if d > 0)


@given(amounts, st.integers(1, 5))
def test_identical_groups_get_identical_shares(amount, count):
    groups = [GroupDemand(f"g{i}", {"cpu": amount}) for i in range(count)]
    result = progressive_filling({"cpu": Fraction(12)}, groups)
    assert {g.tasks for g in result.groups.values()} == {Fraction(12) / amount / count}


def test_population_monotonicity_needs_positive_demands():
    # r0 = r1 = 1. g1 needs only r0, g4 both, the others only r1; every task is 1/4 of what
    # it uses. All five: r1 saturates at t = 1/4 (g0, g2, g3, g4 at 1 task); g1 then fills r0
    # alone: 3 tasks. Without g0, r1 holds out until t = 1/3, g4 keeps 4/3 tasks, so g1 gets
    # only 8/3. Leaving helped g4 and hurt g1.
    q = Fraction(1, 4)
    groups = [GroupDemand("g0", {"r1": q}), GroupDemand("g1", {"r0": q}), GroupDemand("g2", {"r1": q}),
              GroupDemand("g3", {"r1": q}), GroupDemand("g4", {"r0": q, "r1": q})]
    capacity = {"r0": 1, "r1": 1}
    assert progressive_filling(capacity, groups).groups["g1"].tasks == 3
    assert progressive_filling(capacity, groups[1:]).groups["g1"].tasks == Fraction(8, 3)
