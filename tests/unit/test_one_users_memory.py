"""One user's tasks may not reserve all the memory governor divides, where the config bounds
them: an attacker's check held all 23.3G with two idle ``sleep`` tasks, and every other user's
launch waited until they ended. ``[groups."*"]`` takes a ``user_limit`` for each of its users
(each a group of her own, which nothing could bound before), and ``check-config`` names the
groups in which nothing bounds one user's memory."""

import pytest

from governor.cli.check_config import memory_bound_warnings
from governor.config.load import load_config
from governor.core.admission import Waiting
from governor.core.quotas import check_within_quotas, quotas
from governor.core.state import Task, Tasks
from governor.errors import ConfigError, RequestError

G = 1024**3


def config(groups: dict):
    return load_config({"groups": groups}, "g.toml")


def test_each_user_of_everyone_is_held_to_its_user_limit_and_others_are_not_held_by_her():
    everyone = config({"*": {"user_limit": {"memory": "8G"}}, "lab": {"users": ["carol"]}})
    assert everyone.user_limit("alice") == {"memory": 8 * G} and everyone.user_limit("lab") == {}
    running = Tasks()
    running.add(Task("1", "alice", 101, 1000, "alice", ("sleep",), {"memory": 6 * G}, 0.0))
    waiting = [Waiting("2", "alice", {"memory": 4 * G}, "alice"), Waiting("3", "bob", {"memory": 4 * G}, "bob")]
    found = {quota.name: quota for quota in quotas(everyone, running, waiting)}
    assert set(found) == {"alice's user_limit in group alice", "bob's user_limit in group bob"}
    assert found["alice's user_limit in group alice"].used == {"memory": 6 * G}  # 6G + 4G > 8G: she waits
    assert found["bob's user_limit in group bob"].used == {}  # he does not
    with pytest.raises(RequestError, match="exceeds alice's user_limit of 8.0G"):
        check_within_quotas(everyone, "alice", {"memory": 9 * G})
    check_within_quotas(everyone, "lab", {"memory": 9 * G})  # an explicit group's own, none here


def test_everyone_takes_a_weight_and_a_user_limit_and_nothing_else():
    assert config({"*": {"weight": 2}}).everyone_user_limit == {}
    with pytest.raises(ConfigError, match=r"groups\.\"\*\"\.user_limit.*memory"):
        config({"*": {"user_limit": {"memory": -1}}})
    with pytest.raises(ConfigError, match="limit"):
        config({"*": {"limit": {"memory": "8G"}}})  # each user is her own group: user_limit says it


@pytest.mark.parametrize("groups, named", [
    ({"attack": {"users": ["nobody"]}, "victim": {"users": ["www-data"]}}, "groups.attack, groups.victim"),
    ({"*": {}}, 'groups."*"'),
    ({"*": {"user_limit": {"memory": "24G"}}}, 'groups."*"'),  # no less than all of it
    ({"dept": {"limit": {"memory": "24G"}}, "lab": {"parent": "dept", "unix_groups": ["lab"]}}, "groups.lab"),
])
def test_check_config_names_the_groups_where_one_user_may_reserve_all_the_memory(groups, named):
    [warning] = memory_bound_warnings(config(groups), 23.3 * G)
    assert warning.startswith(f"{named}: nothing bounds the memory one user's tasks declare below the 23.3G")
    assert "user_limit.memory" in warning


@pytest.mark.parametrize("groups", [
    {"solo": {"users": ["alice"]}},  # one user: no one else to wait
    {"*": {"user_limit": {"memory": "8G"}}, "lab": {"unix_groups": ["lab"], "user_limit": {"memory": "8G"}}},
    {"dept": {"limit": {"memory": "8G"}}, "lab": {"parent": "dept", "unix_groups": ["lab"]},
     "ops": {"users": ["carol", "dave"], "limit": {"memory": "4G"}}},
])
def test_no_warning_where_one_users_memory_is_bounded(groups):
    assert memory_bound_warnings(config(groups), 23.3 * G) == []


def test_a_uid_the_user_database_does_not_know_gets_no_group_of_its_own():
    # A reviewer's: a user's subordinate uids (/etc/subuid, 65,536 each on Debian), speaking to the
    # socket from a user namespace, were each a group of their own under "*": a share, a
    # user_limit, task and connection bounds each. access.identify names such a uid by its number.
    everyone = config({"*": {"user_limit": {"memory": "8G"}}, "lab": {"users": ["carol"], "unix_groups": ["lab"]}})
    assert everyone.allowed_groups("alice", ["alice"]) == ["alice"]
    assert everyone.allowed_groups("100000", ["100000"]) == []
    assert everyone.allowed_groups("100001", ["lab"]) == ["lab"]  # an explicit group may still name it
