"""The group tree's pure parts: cgroup names at depth, floors per level, subtree sums, a
group's limit on its cgroup, the quotas admission holds tasks to, stored places."""

import json

import pytest

from governor.core.admission import Waiting
from governor.cgroups.limits import CgroupLimits
from governor.config.load import load_config
from governor.errors import RequestError
from governor.core.group_tree import subtree_sums, with_limit
from governor.config.kinds import Kind, cgroup_of, task_in
from governor.core.quotas import check_within_quotas, quotas
from governor.core.state import Task, Tasks
from governor.core.task_record import task_fields
from governor.core.vocabulary import floors
from governor.core.task_record import record_of

G = 1024**3
CONFIG = load_config({"groups": {
    "science": {"limit": {"cpu": 8, "memory": "4G"}},
    "lab": {"parent": "science", "users": ["alice", "bob"], "user_limit": {"cpu": 2}, "limit": {"cpu": 16}},
    "ops": {"users": ["carol"], "weight": 3},
}}, "tree.toml")


def test_task_cgroups_are_found_at_any_depth():
    assert cgroup_of("science/lab", "7") == "science/lab/task-7"
    assert task_in("science/lab/task-7/inner") == (Kind.TASK, "7")
    assert task_in("science/lab/session-1000") == (Kind.SESSION, "session-1000")
    assert task_in("science/lab") is None and task_in("task-7") is None


def test_a_floor_is_the_share_among_siblings_times_the_parents():
    got = floors({"science": 1, "lab": 1, "lab2": 3, "ops": 3}, {"lab": "science", "lab2": "science"})
    assert got == {"science": 0.25, "lab": 0.0625, "lab2": 0.1875, "ops": 0.75}


def test_internal_groups_carry_their_subtrees_sums():
    sums = subtree_sums({"a": {"cpu": 1.0}, "b": {"cpu": 2.0, "memory": 5.0}, "c": {"cpu": 4.0}},
                        {"a": "d", "b": "d", "d": "top"})
    assert sums == {"d": {"cpu": 3.0, "memory": 5.0}, "top": {"cpu": 3.0, "memory": 5.0}}


def test_a_limit_bounds_the_groups_cgroup_and_a_lab_its_departments():
    assert CONFIG.effective_limit("lab") == {"cpu": 8, "memory": 4 * G}  # the department's is lower
    held = CgroupLimits(cpu_weight=100, cpu_quota_usec=50_000)
    assert with_limit(held, {"cpu": 8}).cpu_quota_usec == 50_000  # a hold below the limit stays
    limited = with_limit(CgroupLimits(cpu_weight=100), {"cpu": 0.5, "memory": G})
    assert (limited.cpu_quota_usec, limited.memory_max_bytes) == (50_000, G)
    assert with_limit(held, {}) is held


def tasks_of(*running: Task) -> Tasks:
    tasks = Tasks()
    for task in running:
        tasks.add(task)
    return tasks


def _task(task_id, group, user, cpu, memory=G // 4):
    return Task(task_id, group, 100 + int(task_id), 1000, user, ("w",), {"cpu": cpu, "memory": memory}, 0.0)


def test_quotas_count_what_running_tasks_declare_under_each():
    running = tasks_of(_task("1", "lab", "alice", 1.5, G), _task("2", "lab", "bob", 1.0, 2 * G),
                       _task("3", "ops", "carol", 4))
    found = quotas(CONFIG, running, [Waiting("9", "lab", {"cpu": 1.0, "memory": G}, "alice")])
    by_name = {quota.name: quota for quota in found}
    assert by_name["group science's limit"].used == {"memory": 3 * G}  # the door holds memory only
    assert by_name["alice's user_limit in group lab"].used == {"cpu": 1.5}
    assert quotas(CONFIG, running, [Waiting("9", "ops", {"cpu": 1.0}, "carol")]) == []


def test_a_demand_no_quota_could_admit_is_refused_at_once():
    check_within_quotas(CONFIG, "lab", {"cpu": 2, "memory": G})
    for demand, words in (({"cpu": 3}, "lab's user_limit of 2 cores"), ({"memory": 5 * G}, "group science's limit "
                                                                                           "of 4.0G")):
        with pytest.raises(RequestError) as refused:
            check_within_quotas(CONFIG, "lab", demand)
        assert refused.value.code == "exceeds_capacity" and words in refused.value.message
    check_within_quotas(CONFIG, "alice", {"cpu": 64})  # a per-user group has no quota


def test_a_tasks_place_is_stored_and_checked():
    tasks = Tasks()
    task = Task("1", "lab", 5, 0, "root", ("w",), {"cpu": 1.0}, 0.0, place="science/lab")
    assert task.cgroup == "science/lab/task-1"
    record = record_of(task)

    def parsed(fields):
        return Task(**task_fields("1", json.dumps(fields).encode()))

    assert parsed(record) == task and parsed({**record, "place": ""}).cgroup == "lab/task-1"
    for bad in ("other/lab2", "../lab", "science/task-3/lab", 7):
        with pytest.raises(ValueError, match="place"):
            parsed({**record, "place": bad})
    tasks.add(task)
    assert tasks.places() == {"lab": "science/lab"}
    tasks.remove("1")
    assert tasks.emptied(task) == ["science/lab", "science"]


def test_a_users_login_slice_and_session_cgroup_count_one_session_under_her_user_limit():
    """Issue 32, break 9: her two places were two session demands against her user_limit."""
    running = tasks_of(_task("1", "lab", "alice", 0.5), Task("login-1000", "lab", 7, 1000, "alice", (), {"cpu": 0.5}, 0.0),
                       Task("session-1000", "lab", 8, 1000, "alice", (), {"cpu": 0.5}, 0.0))
    [_, mine] = quotas(CONFIG, running, [Waiting("9", "lab", {"cpu": 1.0}, "alice")])
    assert mine.used == {"cpu": 1.0}  # her task and one session: a 1-core task still fits in 2


def test_a_floor_is_no_more_than_its_limits_smallest_fraction_and_a_labs_follows_its_departments():
    got = floors({"science": 3, "lab": 1, "ops": 1}, {"lab": "science"}, capacity={"cpu": 4, "memory": 8 * G, "gpu": 2},
                 limits={"science": {"memory": 2 * G, "gpu": 0}, "lab": {"memory": 2 * G, "gpu": 0}})
    assert got == {"science": 0.25, "lab": 0.25, "ops": 0.25}  # 2G of 8G; gpus = 0 lowers no promise
    assert floors({"a": 1}, limits={"a": {"cpu": 1}}) == {"a": 1.0}  # no capacity: nothing to clip against
