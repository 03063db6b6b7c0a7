"""The paper's comparison policies (§5) and the properties §6 says they break, beside DRF."""

from fractions import Fraction as F

import pytest

from governor.errors import AllocationInputError
from governor.core.model import GroupDemand as G
from governor.core.policies import allocate, asset_fairness, ceei, drf_policy

PAPER = {"cpu": 9, "memory": 18}
PAPER_GROUPS = [G("A", {"cpu": 1, "memory": 4}), G("B", {"cpu": 3, "memory": 1})]


def tasks(allocation):
    return {name: group.tasks for name, group in allocation.groups.items()}


def test_asset_fairness_paper_example():
    # A spends 1/9 + 4/18 = 1/3 of the host per task, B 3/9 + 1/18 = 7/18: 6x = 7y with
    # x + 3y = 9 (CPU saturates) gives x = 63/25 = 2.52, y = 54/25 = 2.16 (§5.1).
    assert tasks(asset_fairness(PAPER, PAPER_GROUPS)) == {"A": F(63, 25), "B": F(54, 25)}


def test_ceei_paper_example():
    # Maximise x·y under both constraints: both bind, x = 45/11, y = 18/11 (§5.2).
    result = ceei(PAPER, PAPER_GROUPS)
    assert result.groups["A"].tasks == pytest.approx(45 / 11, rel=1e-7)
    assert result.groups["B"].tasks == pytest.approx(18 / 11, rel=1e-7)
    assert result.groups["A"].stop.resources == ("cpu", "memory")


def test_ceei_respects_demand_caps():
    result = ceei(PAPER, [G("A", {"cpu": 1, "memory": 4}, tasks=2), PAPER_GROUPS[1]])
    assert result.groups["A"].tasks == pytest.approx(2, rel=1e-7)
    assert result.groups["A"].stop.kind == "demand_met"
    assert result.groups["B"].tasks == pytest.approx(7 / 3, rel=1e-6)


def test_asset_fairness_violates_sharing_incentive():
    # <30, 30>; D1 = <1, 3>, D2 = <1, 1> (§6.1.1, Theorem 1): asset fairness gives user 2
    # 12 tasks, <12, 12>: less than the 15 its own half of the host would run. DRF gives >= 15.
    capacity = {"r1": 30, "r2": 30}
    groups = [G("1", {"r1": 1, "r2": 3}), G("2", {"r1": 1, "r2": 1})]
    assert tasks(asset_fairness(capacity, groups)) == {"1": 6, "2": 12}
    assert drf_policy(capacity, groups).groups["2"].tasks >= 15


def test_asset_fairness_violates_bottleneck_fairness():
    # <21, 21>; D1 = <3, 2>, D2 = <4, 1>: r1 is everyone's bottleneck (§6.1.1, Theorem 2).
    # Asset fairness gives 3 tasks each: user 1 holds 9/21 = 3/7 of r1, not half. DRF splits r1.
    capacity = {"r1": 21, "r2": 21}
    groups = [G("1", {"r1": 3, "r2": 2}), G("2", {"r1": 4, "r2": 1})]
    assert asset_fairness(capacity, groups).groups["1"].allocation["r1"] == 9
    assert {g.allocation["r1"] for g in drf_policy(capacity, groups).groups.values()} == {F(21, 2)}


def test_asset_fairness_violates_resource_monotonicity():
    # <77, 77>; A = <4, 2>, B = <1, 1>: A gets <44, 22>. Doubling r2 drops A to <42, 21>.
    groups = [G("A", {"r1": 4, "r2": 2}), G("B", {"r1": 1, "r2": 1})]
    assert asset_fairness({"r1": 77, "r2": 77}, groups).groups["A"].allocation == {"r1": 44, "r2": 22}
    assert asset_fairness({"r1": 77, "r2": 154}, groups).groups["A"].allocation == {"r1": 42, "r2": 21}


def test_ceei_is_not_strategy_proof_and_drf_is():
    # <100, 100>; user 1 truly needs <16, 1>, user 2 <1, 2> (§6.1.2). Claiming <16, 8>,
    # user 1 leaves less of r2 for the market to clear and ends with more true tasks.
    capacity = {"r1": 100, "r2": 100}
    truth = [G("1", {"r1": 16, "r2": 1}), G("2", {"r1": 1, "r2": 2})]
    lie = [G("1", {"r1": 16, "r2": 8}), truth[1]]

    def true_tasks(policy, groups):
        held = policy(capacity, groups).groups["1"].allocation
        return min(held["r1"] / 16, held["r2"] / 1)

    assert true_tasks(ceei, lie) > true_tasks(ceei, truth) * 1.2
    assert true_tasks(drf_policy, lie) <= true_tasks(drf_policy, truth)


def test_ceei_is_not_population_monotonic():
    # <100, 100>; <4, 1>, <1, 16>, <16, 1>: when user 3 leaves, user 2's tasks fall
    # (5.35 -> 4.76) while DRF never takes from a group when another leaves.
    capacity = {"r1": 100, "r2": 100}
    three = [G("1", {"r1": 4, "r2": 1}), G("2", {"r1": 1, "r2": 16}), G("3", {"r1": 16, "r2": 1})]
    before, after = ceei(capacity, three), ceei(capacity, three[:2])
    assert after.groups["2"].tasks < before.groups["2"].tasks * 0.95
    drf_before, drf_after = drf_policy(capacity, three), drf_policy(capacity, three[:2])
    assert all(drf_after.groups[n].tasks >= drf_before.groups[n].tasks for n in ("1", "2"))


def test_drf_is_not_resource_monotonic_either():
    # No policy with sharing incentive and Pareto efficiency can be (§6.2). <8, 1> -> <8, 8>:
    # memory-bound group 0 <3, 3> now takes CPU that CPU-only group 1 <1, 0> had: 64/9 -> 4.
    groups = [G("0", {"cpu": 3, "memory": 3}), G("1", {"cpu": 1})]
    assert drf_policy({"cpu": 8, "memory": 1}, groups).groups["1"].tasks == F(64, 9)
    assert drf_policy({"cpu": 8, "memory": 8}, groups).groups["1"].tasks == 4


def test_ceei_has_no_discrete_mode():
    with pytest.raises(AllocationInputError, match="continuous"):
        allocate("ceei", PAPER, PAPER_GROUPS, mode="discrete")


def test_unknown_policy_is_refused():
    with pytest.raises(AllocationInputError, match="drf, asset, ceei"):
        allocate("fifo", PAPER, PAPER_GROUPS)


@pytest.mark.parametrize("policy", ["drf", "asset"])
def test_discrete_modes_place_whole_tasks(policy):
    result = allocate(policy, PAPER, PAPER_GROUPS, mode="discrete")
    assert all(isinstance(g.tasks, int) for g in result.groups.values())
