"""Bad allocator input raises AllocationInputError naming the group and resource."""

import math

import pytest

from governor.core.drf import discrete_filling, progressive_filling
from governor.errors import AllocationInputError
from governor.core.model import GroupDemand as G

CAPACITY = {"cpu": 4, "memory": 8}


@pytest.mark.parametrize(
    ("capacity", "groups", "group", "resource", "words"),
    [
        ({}, [G("a", {"cpu": 1})], None, None, "capacity lists no resource"),
        ({"cpu": -1}, [G("a", {"cpu": 1})], None, "cpu", "negative"),
        ({"cpu": math.inf}, [G("a", {"cpu": 1})], None, "cpu", "finite"),
        (CAPACITY, [G("a", {"cpu": math.nan})], "a", "cpu", "finite"),
        (CAPACITY, [G("a", {"cpu": -0.5})], "a", "cpu", "negative"),
        (CAPACITY, [G("a", {"cpu": "1"})], "a", "cpu", "must be a number"),
        (CAPACITY, [G("a", {"cpu": 1}, weight=0)], "a", None, "weight must be > 0"),
        (CAPACITY, [G("a", {"cpu": 1}, weight=-2)], "a", None, "negative"),
        (CAPACITY, [G("a", {"gpu": 1})], "a", "gpu", "capacity does not list"),
        ({"cpu": 4, "gpu": 0}, [G("a", {"gpu": 1})], "a", "gpu", "capacity is 0"),
        (CAPACITY, [G("a", {"cpu": 0, "memory": 0})], "a", None, "all zero"),
        (CAPACITY, [G("a", {"cpu": 1}, tasks=-1)], "a", None, "task count"),
        (CAPACITY, [G("a", {"cpu": 1}, tasks=1.5)], "a", None, "task count"),
        (CAPACITY, [G("a", {"cpu": 1}), G("a", {"memory": 1})], "a", None, "twice"),
    ],
)
@pytest.mark.parametrize("fill", [progressive_filling, discrete_filling])
def test_bad_input_names_group_and_resource(fill, capacity, groups, group, resource, words):
    with pytest.raises(AllocationInputError) as caught:
        fill(capacity, groups)
    assert caught.value.group == group
    assert caught.value.resource == resource
    assert words in str(caught.value)


def test_a_resource_nobody_demands_may_have_zero_capacity():
    result = progressive_filling({"cpu": 4, "gpu": 0}, [G("a", {"cpu": 1})])
    assert result.groups["a"].tasks == 4


def test_discrete_refuses_an_unbounded_placement_storm():
    with pytest.raises(AllocationInputError, match="task count") as caught:
        discrete_filling({"memory": 2000}, [G("tiny", {"memory": 1})], max_placements=1000)
    assert caught.value.group == "tiny"



def test_discrete_refuses_a_storm_before_placing_a_task(monkeypatch):
    # It placed a million tasks one by one before refusing (a tiny task on a huge capacity:
    # 25 s and 841 MB), each a pop of the heap.
    from governor.core import drf

    monkeypatch.setattr(drf.heapq, "heappop", lambda heap: pytest.fail("placed a task"))
    with pytest.raises(AllocationInputError, match="task count") as caught:
        discrete_filling({"memory": 10 ** 15}, [G("a", {"memory": 5}, tasks=3), G("tiny", {"memory": 1})],
                         max_placements=1000, trace=True)
    assert caught.value.group == "tiny"


def test_a_placement_within_the_bound_runs_to_its_end():
    shared = discrete_filling({"memory": 900, "cpu": 10 ** 6}, [G("a", {"memory": 1}), G("b", {"cpu": 1}, tasks=50)],
                              max_placements=1000)
    assert (shared.groups["a"].tasks, shared.groups["b"].tasks) == (900, 50)


def test_a_discrete_trace_past_its_bound_is_refused_not_built(monkeypatch):
    # 2,000 groups placing 10,000 tasks built 20 million dominant shares: over 90 s, then killed.
    from governor.core import drf

    monkeypatch.setattr(drf, "MAX_TRACE_CELLS", 100)
    groups = [G(f"g{i}", {"cpu": 1}) for i in range(10)]
    with pytest.raises(AllocationInputError, match="the trace would hold more than 100 dominant shares"):
        discrete_filling({"cpu": 50}, groups, trace=True)
    within = [G(f"g{i}", {"cpu": 1}, tasks=5) for i in range(2)]  # 10 rows of 2 shares
    assert len(discrete_filling({"cpu": 50}, within, trace=True).trace) == 10

