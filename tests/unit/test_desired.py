"""The desired limits (:func:`governor.daemon.desired.desired`): the running tasks under the
policy in force in, every governed cgroup's limits out, with nothing written."""

import copy

from support.daemons import GIB, make_daemon

from governor.core.state import Task
from governor.daemon.desired import desired


def task(task_id: str, group: str, cpu: float, memory_gib: float) -> Task:
    return Task(task_id, group, 1000 + int(task_id), 0, "root", ("work",), {"cpu": cpu, "memory": memory_gib * GIB},
                0.0, place=group)


def running(tmp_path, *tasks: Task):
    daemon = make_daemon(tmp_path)
    for each in tasks:
        daemon.tasks.add(each)
    return daemon


def test_the_root_and_every_running_group_get_limits_and_nothing_is_written(tmp_path):
    daemon = running(tmp_path, task("1", "A", 1.5, 1), task("2", "B", 0.5, 3))
    driver = daemon.hierarchy.driver
    before = (copy.deepcopy(driver.writes), set(driver.cgroups))
    want = desired(daemon.policy, daemon.tasks, cpu_saturated=False, full=False, previous={})
    assert set(want.limits) == {"", "A", "B"}  # task caps change only with a full plan
    # DRF (paper §4.1): A's dominant share is CPU, B's memory; both dominant shares are equal.
    shares = {g: a.dominant_share for g, a in want.allocation.groups.items()}
    assert abs(shares["A"] - shares["B"]) < 1e-9, shares
    assert set(want.guarantees) == {"A", "B"}
    assert (driver.writes, driver.cgroups) == before


def test_a_full_plan_adds_every_tasks_caps_as_the_policy_gives_them(tmp_path):
    first, second = task("1", "A", 1.0, 1), task("2", "A", 0.5, 0.5)
    daemon = running(tmp_path, first, second)
    want = desired(daemon.policy, daemon.tasks, cpu_saturated=False, full=True, previous={})
    assert want.limits[first.cgroup] == daemon.policy.caps(first)
    assert want.limits[second.cgroup] == daemon.policy.caps(second)
    assert set(want.limits) == {"", "A", first.cgroup, second.cgroup}


def test_no_task_leaves_the_root_alone_planned(tmp_path):
    daemon = running(tmp_path)
    want = desired(daemon.policy, daemon.tasks, cpu_saturated=True, full=True, previous={})
    assert want.allocation is None and set(want.limits) == {""} and want.guarantees == {}
