"""governor.core.scenario: good files become exact numbers; each bad input names its key."""

from __future__ import annotations

from fractions import Fraction

import pytest

from governor.errors import AllocationInputError, ConfigError
from governor.core.model import GroupDemand
from governor.core.scenario import allocation_error, load_scenario
from support.key_edits import DELETE as _DELETE, edited

G = 1024**3
M = 1024**2

# The paper's §4.1 example plus an I/O device (dotted keys, as tomllib returns them: nested).
GOOD = {
    "capacity": {"cpu": 9, "memory": "18G", "io": {"sda": {"read": "2G"}}},
    "groups": {
        "A": {"task": {"cpu": 1, "memory": "4G"}},
        "B": {"task": {"cpu": 3, "memory": "1G", "io": {"sda": {"read": "512M"}}}, "weight": 2.5, "tasks": 10},
    },
}


def test_good_scenario_parses_to_exact_values():
    scenario = load_scenario(GOOD, "s.toml")

    assert scenario.capacity == {"cpu": 9, "memory": 18 * G, "io.sda.read": 2 * G}
    assert all(type(v) is Fraction for v in scenario.capacity.values())
    assert list(scenario.capacity) == ["cpu", "memory", "io.sda.read"]
    assert scenario.groups == [
        GroupDemand("A", {"cpu": Fraction(1), "memory": Fraction(4 * G)}, Fraction(1), None),
        GroupDemand("B", {"cpu": Fraction(3), "memory": Fraction(G), "io.sda.read": Fraction(512 * M)},
                    Fraction(5, 2), 10),
    ]


def test_float_amounts_are_read_as_written_decimals():
    data = {"capacity": {"cpu": 0.3}, "groups": {"A": {"task": {"cpu": 0.1}, "weight": 0.1}}}
    scenario = load_scenario(data, "s.toml")
    assert scenario.capacity["cpu"] == Fraction(3, 10)
    assert scenario.groups[0].task["cpu"] == Fraction(1, 10)
    assert scenario.groups[0].weight == Fraction(1, 10)


def test_quoted_resource_name_equals_dotted_one():
    data = {"capacity": {"io.sda.read": "1G"}, "groups": {"A": {"task": {"io": {"sda": {"read": "1M"}}}}}}
    assert load_scenario(data, "s.toml").groups[0].task == {"io.sda.read": M}


def _with(path: tuple[str, ...], value) -> dict:
    """GOOD with the key at ``path`` set to ``value`` (or removed when value is _DELETE)."""
    return edited(GOOD, path, value)


BAD = [
    # (path to change, new value, expected key, words expected in the reason)
    (("capacity",), _DELETE, "capacity", "missing section"),
    (("groups",), _DELETE, "groups", "missing section"),
    (("capacity",), 9, "capacity", "must be a table"),
    (("capacity",), {}, "capacity", "no resource"),
    (("groups",), {}, "groups", "no group"),
    (("extra",), 1, "extra", "allowed keys: capacity, groups"),
    (("capacity", "memory"), "18X", "capacity.memory", "suffix"),
    (("capacity", "memory"), -1, "capacity.memory", "negative"),
    (("capacity", "cpu"), float("inf"), "capacity.cpu", "finite"),
    (("capacity", "cpu"), float("nan"), "capacity.cpu", "finite"),
    (("capacity", "cpu"), True, "capacity.cpu", "expected a number"),
    (("capacity", "cpu"), 1e308, "capacity.cpu", "at most 4,611,686,018,427,387,904"),
    (("capacity", "cpu"), [1], "capacity.cpu", "expected a number"),
    (("capacity", "io", "sda", "read"), "fast", "capacity.io.sda.read", "suffix"),
    (("groups", "A"), 3, "groups.A", "must be a table"),
    (("groups", "A", "task"), _DELETE, "groups.A.task", "missing"),
    (("groups", "A", "task"), 1, "groups.A.task", "must be a table"),
    (("groups", "A", "cpus"), 1, "groups.A.cpus", "allowed keys: task, weight, tasks"),
    (("groups", "A", "task", "cpu"), "1 core", "groups.A.task.cpu", "suffix"),
    (("groups", "A", "task", "cpu"), -0.5, "groups.A.task.cpu", "negative"),
    (("groups", "A", "task", "gpu"), 1, "groups.A.task.gpu", "not in [capacity] (capacity has: cpu, memory, io.sda.read)"),
    (("groups", "A", "task"), {"cpu": 0, "memory": "0G"}, "groups.A.task", "demands nothing"),
    (("groups", "A", "weight"), 0, "groups.A.weight", "must be a number between 0.001 and 1000, got 0"),
    (("groups", "A", "weight"), 1e307, "groups.A.weight", "between 0.001 and 1000"),
    (("groups", "A", "weight"), -2, "groups.A.weight", "must be a number between 0.001 and 1000, got -2"),
    (("groups", "A", "weight"), "2", "groups.A.weight", "must be a number between 0.001 and 1000, got a string"),
    (("groups", "A", "weight"), float("inf"), "groups.A.weight", "must be a number between 0.001 and 1000, got inf"),
    (("groups", "A", "tasks"), 2.5, "groups.A.tasks", "whole number"),
    (("groups", "A", "tasks"), -1, "groups.A.tasks", "whole number"),
    (("groups", "A", "tasks"), True, "groups.A.tasks", "whole number"),
    (("groups", "A", "tasks"), "3", "groups.A.tasks", "whole number"),
]


# Each id names the deleted key, not the sentinel's address: ids must be the same in every
# pytest-xdist worker.
@pytest.mark.parametrize(("path", "value", "key", "reason"), BAD,
                         ids=[f"{k}={'(deleted)' if v is _DELETE else repr(v)}" for _, v, k, _ in BAD])
def test_bad_input_names_file_key_and_reason(path, value, key, reason):
    with pytest.raises(ConfigError) as caught:
        load_scenario(_with(path, value), "bad.toml")
    error = caught.value
    assert (error.file, error.key) == ("bad.toml", key)
    assert reason in error.reason
    assert str(error) == f"bad.toml: {key}: {error.reason}"


def test_demand_on_zero_capacity_names_the_task_key():
    data = _with(("capacity", "io", "sda", "read"), 0)
    with pytest.raises(ConfigError) as caught:
        load_scenario(data, "bad.toml")
    assert caught.value.key == "groups.B.task.io.sda.read"
    assert "capacity.io.sda.read, which is 0" in caught.value.reason


def test_zero_capacity_is_fine_when_nobody_demands_it():
    data = _with(("capacity", "io", "sda", "read"), 0)
    del data["groups"]["B"]["task"]["io"]
    assert load_scenario(data, "s.toml").capacity["io.sda.read"] == 0


def test_resource_given_twice_is_refused():
    data = _with(("capacity", "io.sda.read"), "1G")
    with pytest.raises(ConfigError) as caught:
        load_scenario(data, "bad.toml")
    assert (caught.value.key, "given twice" in caught.value.reason) == ("capacity.io.sda.read", True)


def test_group_name_needing_quotes_is_quoted_in_the_key():
    data = _with(("groups", "lab a"), {"task": {"cpu": -1}})
    with pytest.raises(ConfigError) as caught:
        load_scenario(data, "bad.toml")
    assert caught.value.key == 'groups."lab a".task.cpu'


@pytest.mark.parametrize(
    ("error", "key"),
    [
        (AllocationInputError("too many", group="A"), "groups.A"),
        (AllocationInputError("bad", group="A", resource="cpu"), "groups.A.task.cpu"),
        (AllocationInputError("bad", resource="memory"), "capacity.memory"),
        (AllocationInputError("bad"), None),
    ],
)
def test_allocation_error_points_at_the_scenario_key(error, key):
    converted = allocation_error(error, "s.toml")
    assert (converted.file, converted.key, converted.reason) == ("s.toml", key, error.reason)


@pytest.mark.parametrize(("groups", "key", "reason"), [
    ({"A": {"task": {"cpu": 1}, "parent": "nope"}}, "groups.A.parent", "another [groups.<name>]"),
    ({"A": {"task": {"cpu": 1}, "parent": "A"}}, "groups.A.parent", "another [groups.<name>]"),
    ({"A": {"parent": "B"}, "B": {"parent": "A"}}, "groups.A.parent", "cycle: A -> B -> A"),
    ({"D": {"task": {"cpu": 1}}, "A": {"task": {"cpu": 1}, "parent": "D"}}, "groups.D.task", "no task of its own"),
    ({"D": {"tasks": 3}, "A": {"task": {"cpu": 1}, "parent": "D"}}, "groups.D.task", "no task of its own"),
    ({"D": {"x": 1}, "A": {"task": {"cpu": 1}, "parent": "D"}}, "groups.D.x", "unknown key"),
    ({"A": {"task": {"cpu": 1}, "limit": {"gpu": 1}}}, "groups.A.limit.gpu", "not in [capacity]"),
    ({"A": {"task": {"cpu": 1}, "guarantee": 3}}, "groups.A.guarantee", "must be a table"),
    ({"A": {"task": {"cpu": 1}, "guarantee": {"cpu": -1}}}, "groups.A.guarantee.cpu", "negative"),
])
def test_a_bad_group_tree_names_the_key(groups, key, reason):
    with pytest.raises(ConfigError) as caught:
        load_scenario({"capacity": {"cpu": 4, "memory": "8G"}, "groups": groups}, "s.toml")
    assert caught.value.key == key and reason in caught.value.reason, caught.value


def test_a_tree_scenario_gives_every_group_a_node_and_a_flat_one_none():
    loaded = load_scenario({"capacity": {"cpu": 4}, "groups": {"D": {"weight": 2, "limit": {"cpu": 3}},
                                                                 "A": {"task": {"cpu": 1}, "parent": "D"}}}, "s.toml")
    assert [g.name for g in loaded.groups] == ["A"]
    assert [(n.name, n.parent, n.weight, dict(n.limit)) for n in loaded.tree] == [("D", None, 2, {"cpu": 3}),
                                                                                   ("A", "D", 1, {})]
    assert load_scenario(GOOD, "s.toml").tree == []
