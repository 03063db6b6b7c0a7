"""The group tree in the config: ``parent``, ``guarantee``, ``limit``, ``user_limit``."""

import math
import re
from pathlib import Path

import pytest

from governor.config.load import load_config, parse_config
from governor.errors import ConfigError

G = 1024**3
EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "governor.toml"

TREE = {
    "science": {"guarantee": {"cpu": 4, "memory": "16G"}, "limit": {"cpu": 16, "memory": "64G"}},
    "physics-lab": {"parent": "science", "unix_groups": ["physics"], "user_limit": {"cpu": 2, "memory": "8G"},
                    "guarantee": {"cpu": 1}},
    "biology-lab": {"parent": "science", "unix_groups": ["biology"], "weight": 3},
    "ops": {"users": ["bob"]},
}


def _load(groups: dict):
    return load_config({"groups": groups}, "tree.toml")


def _refused(groups: dict, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(groups)
    assert caught.value.key == key, caught.value
    assert re.search(reason, str(caught.value)), caught.value


def test_a_tree_parses_into_places_and_quotas():
    config = _load(TREE)
    science, physics, biology, ops = config.groups
    assert (physics.parent, biology.parent, science.parent) == ("science", "science", None)
    assert science.guarantee == {"cpu": 4.0, "memory": 16.0 * G} and science.limit == {"cpu": 16.0, "memory": 64.0 * G}
    assert physics.user_limit == {"cpu": 2.0, "memory": 8.0 * G} and biology.weight == 3.0
    assert config.place("physics-lab") == "science/physics-lab" and config.place("ops") == "ops"
    assert config.place("alice") == "alice"  # a per-user group sits at the top
    assert config.ancestors("physics-lab") == ["science"] and config.nested
    assert not _load({"ops": {"users": ["bob"], "weight": 2}}).nested
    # an internal node has no members, so nobody launches into it
    assert config.allowed_groups("carol", ["physics"]) == ["physics-lab"]


def test_the_example_tree_parses_once_uncommented():
    text = EXAMPLE.read_text()
    start = text.index("# [groups.science]")
    block = text[start:text.index("\n\n", start)]
    config = parse_config(text.replace(block, block.replace("# ", "")), str(EXAMPLE))
    assert config.place("physics-lab") == "science/physics-lab"


@pytest.mark.parametrize("groups, key, reason", [
    ({"a": {"users": ["x"], "parent": "a"}}, "groups.a.parent", "itself"),
    ({"a": {"users": ["x"], "parent": "nope"}}, "groups.a.parent", "no \\[groups"),
    ({"a": {"users": ["x"], "parent": "*"}, "*": {}}, "groups.a.parent", "many groups"),
    ({"a": {"users": ["x"], "parent": 3}}, "groups.a.parent", "name of another group"),
    ({"a": {"parent": "b"}, "b": {"parent": "a"}}, "groups.a.parent", "cycle: a -> b -> a"),
    ({"d": {}, "a": {"users": ["x"], "parent": "d"}, "d2": {"users": ["y"], "parent": "a"}}, "groups.a",
     "no members of its own"),
    ({"d": {"user_limit": {"cpu": 1}}, "a": {"users": ["x"], "parent": "d"}}, "groups.d.user_limit", "no members"),
    ({"a": {"users": ["x"], "guarantee": {"cpu": 5}, "limit": {"cpu": 4}}}, "groups.a.guarantee.cpu",
     "above the group's own limit"),
    ({"d": {"guarantee": {"memory": "1G"}}, "a": {"users": ["x"], "parent": "d", "guarantee": {"memory": "2G"}}},
     "groups.a.guarantee.memory", "add up to 2.0G, more than d's guarantee, 1.0G"),
    ({"d": {"limit": {"cpu": 2}}, "a": {"users": ["x"], "parent": "d", "guarantee": {"cpu": 1.5}},
      "b": {"users": ["y"], "parent": "d", "guarantee": {"cpu": 1}}}, "groups.a.guarantee.cpu", "more than d's limit"),
    ({"a": {"users": ["x"], "limit": {"gpu": 1}}}, "groups.a.limit.gpu", "unknown key; allowed keys: cpu, memory"),
    ({"a": {"users": ["x"], "limit": {"cpu": -1}}}, "groups.a.limit.cpu", "negative|>= 0|≥ 0|not"),
    ({"a": {"users": ["x"], "limit": {"cpu": math.nan}}}, "groups.a.limit.cpu", "finite|NaN|nan"),
    ({"a": {"users": ["x"], "limit": {"cpu": 0}}}, "groups.a.limit.cpu", "> 0"),
    ({"a": {"users": ["x"], "limit": {"memory": "0"}}}, "groups.a.limit.memory", "more than 0"),
    ({"a": {"users": ["x"], "guarantee": {"cpu": 1e308}}}, "groups.a.guarantee.cpu", "at most"),
    ({"a": {"users": ["x"], "limit": 4}}, "groups.a.limit", "must be a table"),
])
def test_a_bad_tree_is_refused_naming_the_key(groups, key, reason):
    _refused(groups, key, reason)


def test_a_tree_deeper_than_eight_levels_is_refused():
    groups = {"g0": {}}
    for level in range(1, 9):
        groups[f"g{level}"] = {"parent": f"g{level - 1}"}
    groups["g9"] = {"parent": "g8", "users": ["x"]}
    _refused(groups, "groups.g8.parent", "9 levels deep; at most 8")


def test_top_level_guarantees_must_fit_the_capacity():
    config = _load({"a": {"users": ["x"], "guarantee": {"cpu": 3}}, "b": {"users": ["y"], "guarantee": {"cpu": 2}}})
    assert config.capacity(8, 4 * G)["cpu"] == 7.75
    with pytest.raises(ConfigError) as caught:
        config.capacity(4, 4 * G)  # 3.75 cores after the reserve
    assert caught.value.key == "groups.a.guarantee.cpu" and "add up to 5 cores, more than the capacity here, 3.75 " \
        "cores" in str(caught.value)


def test_exclusive_cores_do_not_nest():
    with pytest.raises(ConfigError) as caught:
        load_config({"enforcement": {"cpu": "cores"}, "groups": {"d": {}, "a": {"users": ["x"], "parent": "d"}}}, "t")
    assert caught.value.key == "enforcement.cpu" and "need \"quota\"" in str(caught.value)


def test_fairshare_takes_a_half_life():
    assert load_config({"groups": {"*": {}}}, "t").fairshare_half_life_s is None
    config = load_config({"groups": {"*": {}}, "fairshare": {"half_life": "1d"}}, "t")
    assert config.fairshare_half_life_s == 86400
    for table, reason in (({}, "missing"), ({"half_life": 3}, "time span"), ({"half_life": "soon"}, ""),
                          ({"half_life": "1d", "x": 1}, "unknown key")):
        with pytest.raises(ConfigError) as caught:
            load_config({"groups": {"*": {}}, "fairshare": table}, "t")
        assert caught.value.key in ("fairshare.half_life", "fairshare.x") and reason in str(caught.value)
