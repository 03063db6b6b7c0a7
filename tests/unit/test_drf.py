"""Weighted DRF on examples worked out by hand (shares in the comments), paper §4."""

from fractions import Fraction as F

import pytest

from governor.core.drf import discrete_filling, progressive_filling
from governor.core.model import GroupDemand as G

PAPER = {"cpu": 9, "memory": 18}
A = G("A", {"cpu": 1, "memory": 4})
B = G("B", {"cpu": 3, "memory": 1})
BOTH = [progressive_filling, discrete_filling]


def tasks(allocation):
    return {name: group.tasks for name, group in allocation.groups.items()}


@pytest.mark.parametrize("fill", BOTH)
def test_paper_example_section_4_1(fill):
    # A's task is <1/9, 2/9> of the host (memory dominant), B's <1/3, 1/18> (cpu dominant).
    # Equal dominant shares 2x/9 = y/3 and x + 3y <= 9 give x = 3, y = 2: both at 2/3.
    result = fill(PAPER, [A, B])
    assert tasks(result) == {"A": 3, "B": 2}
    assert result.groups["A"].allocation == {"cpu": 3, "memory": 12}
    assert result.groups["B"].allocation == {"cpu": 6, "memory": 2}
    assert result.groups["A"].dominant_resources == ("memory",)
    assert result.groups["B"].dominant_resources == ("cpu",)
    assert result.groups["A"].dominant_share == result.groups["B"].dominant_share == F(2, 3)


def test_continuous_paper_example_stops_at_cpu_saturation():
    result = progressive_filling(PAPER, [A, B], trace=True)
    assert [(row.event, row.resource, row.frozen) for row in result.trace] == [("saturated", "cpu", ("A", "B"))]
    assert result.trace[0].allocated == {"cpu": 9, "memory": 14}
    assert result.groups["A"].stop.describe() == "cpu saturated"


def _table_rows(result):
    return [
        (row.group, row.dominant_shares["A"], row.dominant_shares["B"],
         row.allocated["cpu"] / 9, row.allocated["memory"] / 18)
        for row in result.trace if row.event == "placed"
    ]


def test_discrete_trace_is_the_papers_table_1_with_our_tie_break():
    # The paper's Table 1 picks B first; at the start both shares are 0 with no task placed,
    # so our tie-break (fewer placed tasks, then name) picks A first. From then on the same
    # decisions follow, one step shifted: A B A B A instead of B A A B A.
    result = discrete_filling(PAPER, [A, B], trace=True)
    assert _table_rows(result) == [
        ("A", F(2, 9), 0, F(1, 9), F(4, 18)),
        ("B", F(2, 9), F(1, 3), F(4, 9), F(5, 18)),
        ("A", F(4, 9), F(1, 3), F(5, 9), F(9, 18)),
        ("B", F(4, 9), F(2, 3), F(8, 9), F(10, 18)),
        ("A", F(2, 3), F(2, 3), 1, F(14, 18)),
    ]
    # Then neither group's next task fits: CPU is saturated.
    assert [(row.event, row.group, row.resource) for row in result.trace[5:]] == [
        ("skipped", "B", "cpu"), ("skipped", "A", "cpu"),
    ]


def test_discrete_trace_reproduces_table_1_exactly_when_b_wins_the_first_tie():
    # Renaming A to Z makes B win the name tie-break at the start, as in the paper.
    z = G("Z", A.task)
    result = discrete_filling(PAPER, [z, B], trace=True)
    rows = [(row.group, row.dominant_shares["Z"], row.dominant_shares["B"],
             row.allocated["cpu"] / 9, row.allocated["memory"] / 18)
            for row in result.trace if row.event == "placed"]
    assert rows == [  # paper Table 1, row by row
        ("B", 0, F(1, 3), F(3, 9), F(1, 18)),
        ("Z", F(2, 9), F(1, 3), F(4, 9), F(5, 18)),
        ("Z", F(4, 9), F(1, 3), F(5, 9), F(9, 18)),
        ("B", F(4, 9), F(2, 3), F(8, 9), F(10, 18)),
        ("Z", F(2, 3), F(2, 3), 1, F(14, 18)),
    ]


def test_discrete_ties_go_to_fewer_placed_tasks_then_name():
    # cpu 6; A's task is 1/6 of it, B's 2/6. After A, B, A: both at 1/3, A with 2 tasks,
    # B with 1, so B goes next and fills the host. By name alone A would have gone (A 4, B 1).
    result = discrete_filling({"cpu": 6}, [G("A", {"cpu": 1}), G("B", {"cpu": 2})], trace=True)
    assert [row.group for row in result.trace if row.event == "placed"] == ["A", "B", "A", "B"]
    assert tasks(result) == {"A": 2, "B": 2}


def test_weighted_drf_equalises_share_over_weight():
    # Weight 2 for A: s_A = 2t, s_B = t, so x = 9t and y = 3t. CPU: 18t <= 9 (t <= 1/2);
    # memory: 36t + 3t <= 18 (t <= 6/13): memory saturates first, at t = 6/13.
    result = progressive_filling(PAPER, [G("A", A.task, weight=2), B])
    assert tasks(result) == {"A": F(54, 13), "B": F(18, 13)}
    assert result.groups["A"].dominant_share == F(12, 13)
    assert result.groups["B"].dominant_share == F(6, 13)
    assert result.groups["A"].stop.resources == ("memory",)


@pytest.mark.parametrize("fill", BOTH)
def test_single_resource_is_weighted_max_min(fill):
    # 10 cores: a wants 2, b (weight 3) and c want as much as they can get. Level t: a = t
    # until 2 is met, then the 8 left split 3:1.
    groups = [G("a", {"cpu": 1}, tasks=2), G("b", {"cpu": 1}, weight=3), G("c", {"cpu": 1})]
    assert tasks(fill({"cpu": 10}, groups)) == {"a": 2, "b": 6, "c": 2}


def test_demand_cap_hands_leftovers_to_others():
    # A needs only 2 tasks (<2, 8>); B grows on until CPU saturates: (9 - 2) / 3 = 7/3 tasks.
    result = progressive_filling(PAPER, [G("A", A.task, tasks=2), B], trace=True)
    assert tasks(result) == {"A": 2, "B": F(7, 3)}
    assert result.groups["A"].stop.kind == "demand_met"
    assert [row.event for row in result.trace] == ["demand_met", "saturated"]
    # Discretely B's third task needs 3 CPUs with 1 left: it stays at 2.
    assert tasks(discrete_filling(PAPER, [G("A", A.task, tasks=2), B])) == {"A": 2, "B": 2}


@pytest.mark.parametrize("fill", BOTH)
def test_group_needing_none_of_a_saturated_resource_keeps_growing(fill):
    # cpu 4, memory 8. A <1 cpu>, B <1 cpu, 1 mem>, C <1 mem>: x_A = x_B = 4t, x_C = 8t.
    # CPU saturates at t = 1/2 (A = B = 2); C then fills memory alone: 2 + x_C = 8.
    groups = [G("A", {"cpu": 1}), G("B", {"cpu": 1, "memory": 1}), G("C", {"memory": 1})]
    result = fill({"cpu": 4, "memory": 8}, groups)
    assert tasks(result) == {"A": 2, "B": 2, "C": 6}
    assert result.groups["C"].dominant_share == F(3, 4)


def test_any_resources_and_names():
    capacity = {"gpu": 4, "cpu": 32, "memory": 256, "io.nvme0n1.read": 2000}
    groups = [G("vision", {"gpu": 1, "cpu": 4, "memory": 32}), G("etl", {"cpu": 2, "io.nvme0n1.read": 500})]
    # vision: gpu 1/4 dominant, x = 4t; etl: io 1/4 dominant, y = 4t. gpu and io saturate
    # together at t = 1 (cpu 24 <= 32, memory 128 <= 256).
    result = progressive_filling(capacity, groups)
    assert tasks(result) == {"vision": 4, "etl": 4}
    assert result.groups["vision"].dominant_resources == ("gpu",)


def test_tied_dominant_resources_are_all_reported():
    result = progressive_filling({"cpu": 2, "memory": 4}, [G("g", {"cpu": 1, "memory": 2})])
    assert result.groups["g"].dominant_resources == ("cpu", "memory")


def test_floats_give_the_same_answer_as_fractions():
    result = progressive_filling({"cpu": 9.0, "memory": 18 * 1024.0**3},
                                 [G("A", {"cpu": 1.0, "memory": 4 * 1024.0**3}), G("B", {"cpu": 3.0, "memory": 1024.0**3})])
    assert result.groups["A"].tasks == pytest.approx(3, rel=1e-12)
    assert result.groups["B"].tasks == pytest.approx(2, rel=1e-12)
    assert isinstance(result.groups["A"].tasks, float)


def test_zero_tasks_group_gets_nothing():
    result = discrete_filling(PAPER, [G("A", A.task, tasks=0), B])
    assert tasks(result) == {"A": 0, "B": 3}
    assert progressive_filling(PAPER, [G("A", A.task, tasks=0), B]).groups["B"].tasks == 3
