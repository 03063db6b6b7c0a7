"""The group tree in the daemon (issue 25), on the in-memory cgroup driver: each group's cgroup
below its parent's, H-DRF's weights at every level, a group's limit on its cgroup and at the
door, a member's user_limit, re-adoption and clean-up at depth, a reload that would move a
running group refused, and fair share over time."""

import asyncio
import math
import time

import pytest
from support.daemons import GIB, TREE, collect, launch, make_daemon, on_loop

from governor.config.load import parse_config
from governor.errors import RequestError
from governor.wire.protocol import LaunchRequest, Peer
from governor.core.state import Task



@pytest.fixture
def tree(tmp_path):
    return make_daemon(tmp_path, TREE)


def weight(daemon, rel):
    return int(daemon.hierarchy.driver.in_force(rel)["cpu.weight"])


def test_each_group_is_a_cgroup_below_its_parent_and_weighs_its_hdrf_share(tree):
    for group, pid, cpu in (("D1", 100, 2.0), ("L1", 200, 1.0), ("L2", 300, 1.0)):
        reply = launch(tree, pid, group=group, cpu=cpu, memory=GIB // 4)
        assert reply["group"] == group
    driver = tree.hierarchy.driver
    assert driver.procs["D1/task-1"] == [100] and driver.procs["D2/L1/task-2"] == [200]
    assert driver.procs["D2/L2/task-3"] == [300]
    got = tree.enforcement.allocation
    # H-DRF: D1 and D2 halve the 2 cores; D2's labs halve its 1.
    assert got.groups["D1"].allocation["cpu"] == pytest.approx(1.0)
    assert got.groups["L1"].allocation["cpu"] == pytest.approx(0.5)
    assert got.nodes["D2"].allocation["cpu"] == pytest.approx(1.0)
    assert weight(tree, "D1") == weight(tree, "D2") and weight(tree, "D2/L1") == weight(tree, "D2/L2")
    assert weight(tree, "D1") / weight(tree, "D2/L1") == pytest.approx(2, rel=0.01)  # one scale for all levels
    # D2's limit is its cgroup's cpu.max and memory.max.
    in_force = driver.in_force("D2")
    assert in_force["cpu.max"] == "150000 100000" and in_force["memory.max"] == str(3 * GIB)
    status = tree.observation.status()["groups"]
    assert status["L1"]["parent"] == "D2" and status["D2"]["internal"] and status["D2"]["parent"] is None
    assert status["D2"]["limits"]["cpu.max"] == "150000 100000"
    assert status["D2"]["allocation"]["cpu"] == pytest.approx(1.0)
    assert tree.observation.status()["guaranteed"]["cpu"] == pytest.approx(2.0)  # D2 is not counted twice
    explain = tree.requests.explain()
    assert explain["parents"]["L1"] == "D2" and explain["nodes"]["D2"]["allocation"]["cpu"] == pytest.approx(1.0)


def test_a_task_past_its_groups_memory_limit_waits_and_one_past_it_alone_is_refused(tree):
    launch(tree, 100, group="L2", cpu=0.1, memory=2 * GIB)
    with pytest.raises(RequestError) as refused:
        launch(tree, 101, group="L2", cpu=0.1, memory=int(3.5 * GIB))
    assert refused.value.code == "exceeds_capacity" and "group D2's limit of 3.0G" in refused.value.message
    with pytest.raises(RequestError) as refused:
        launch(tree, 102, group="L2", cpu=1.6, memory=GIB // 4)
    assert "exceeds group D2's limit of 1.5 cores" in refused.value.message
    request = LaunchRequest(pid=103, group="L2", demand={"cpu": 0.1, "memory": 1.5 * GIB}, command=("w",), wait=False)
    with pytest.raises(RequestError) as waits:
        asyncio.run(collect(tree.requests.stream(request, Peer(pid=103, uid=0, gid=0))))
    # The host has room (4G), the group's limit has not: the task would wait, told why.
    assert waits.value.code == "would_wait" and "group D2's limit: memory 2.0G of 3.0G declared" in waits.value.message


def test_a_member_is_held_to_the_user_limit_the_others_are_not(tree):
    launch(tree, 100, group="L1", cpu=0.75, memory=GIB // 4)
    request = LaunchRequest(pid=101, group="L1", demand={"cpu": 0.5, "memory": GIB // 4}, command=("w",), wait=False)
    with pytest.raises(RequestError) as waits:
        asyncio.run(collect(tree.requests.stream(request, Peer(pid=101, uid=0, gid=0))))
    assert "root's user_limit in group L1: cpu 0.75 cores of 1 core declared" in waits.value.message
    launch(tree, 102, group="L2", cpu=0.5, memory=GIB // 4)  # L2 has no user limit


def test_restart_readopts_nested_tasks_and_removes_empty_groups_at_every_depth(tree):
    store, driver = tree.store, tree.hierarchy.driver
    store.save(Task("1", "L1", 100, 0, "root", ("w",), {"cpu": 1.0, "memory": GIB}, 0.0, place="D2/L1"))
    store.save(Task("2", "L2", 200, 0, "root", ("w",), {"cpu": 1.0, "memory": GIB}, 0.0, place="D2/L2"))
    for rel in ("D2/L1/task-1", "D2/L2/task-2", "D9/old/task-7"):
        driver.create(rel)
    driver.procs["D2/L1/task-1"] = [100]
    on_loop(tree, lambda: tree.recovery.readopt())
    asyncio.run(tree.tree.settled())
    assert [t.id for t in tree.tasks] == ["1"] and tree.tasks.get("1").cgroup == "D2/L1/task-1"
    assert "D2/L2" not in driver.cgroups and "D2/L1/task-1" in driver.cgroups
    # an unrecorded empty task cgroup two levels down is removed, and its groups with it
    assert not {"D9/old/task-7", "D9/old", "D9"} & driver.cgroups


def test_the_last_task_of_a_lab_takes_its_cgroup_and_an_emptied_department_with_it(tree):
    launch(tree, 100, group="L1", cpu=0.5, memory=GIB // 4)
    launch(tree, 200, group="D1", cpu=0.5, memory=GIB // 4)
    tree.hierarchy.driver.procs["D2/L1/task-1"] = []
    on_loop(tree, lambda: tree.exits.check(["1"], "exit"))
    asyncio.run(tree.tree.settled())
    assert not {"D2/L1", "D2"} & tree.hierarchy.driver.cgroups and "D1" in tree.hierarchy.driver.cgroups


def test_a_reload_that_moves_a_running_group_is_refused(tree, tmp_path):
    launch(tree, 100, group="L1", cpu=0.5, memory=GIB // 4)
    moved = tmp_path / "moved.toml"
    moved.write_text(TREE.replace('[groups.L1]\nparent = "D2"', '[groups.L1]\nparent = "D1"').replace(
        '[groups.D1]\nusers = ["root"]', "[groups.D1]"))
    tree.reloads.load_config = lambda: parse_config(moved.read_text(), str(moved))
    with pytest.raises(RequestError) as refused:
        tree.reloads.reload("test")
    assert refused.value.code == "invalid_config"
    assert "groups.L1.parent: would move group L1 from D2/L1 to D1/L1 while its task 1 runs" in refused.value.message
    assert tree.policy.config.place("L1") == "D2/L1"  # the old config stays in force


FAIR = """
[capacity]
cpu = 2
memory = "4G"
[groups.A]
users = ["root"]
[groups.B]
users = ["root"]
[fairshare]
half_life = "1h"
[sessions]
enabled = false
"""


def test_a_group_that_ran_alone_weighs_less_and_its_history_survives_a_restart(tmp_path):
    daemon = make_daemon(tmp_path, FAIR)
    launch(daemon, 100, group="A", cpu=2.0, memory=GIB)
    stage = daemon.fair_share
    now = time.time()
    stage.counted("A", "A", 5_000_000)  # A's cgroup's cumulative CPU counter, as the sampler reads it…
    on_loop(daemon, lambda: stage.tick(now - 3600, 0.0))
    stage.counted("A", "A", 5_000_000 + 7200 * 10**6)  # …rose by the whole host's 2 cores…
    on_loop(daemon, lambda: stage.tick(now, 3600.0))  # …over the last hour (an injected clock)
    weights = daemon.policy.effective
    assert weights["A"] < 0.6 and weights["B"] == 1.0  # 2^-(U/S) = 2^-(1/0.5) = 0.25, floored at none
    launch(daemon, 200, group="B", cpu=2.0, memory=GIB)
    got = daemon.enforcement.allocation.groups
    assert got["B"].allocation["cpu"] > 1.5 > got["A"].allocation["cpu"]  # B did not run: it goes first
    explained = daemon.requests.explain()["fairshare"]
    assert explained["A"]["weight"] == 1.0 and explained["A"]["effective"] == pytest.approx(weights["A"])
    assert explained["A"]["usage"] == pytest.approx(3600 / math.log(2) / 2, rel=1e-3)  # an hour, decaying as it went
    assert daemon.observation.status()["groups"]["A"]["effective_weight"] == pytest.approx(weights["A"])
    stage.close()  # saved, as at shutdown
    again = make_daemon(tmp_path, FAIR)
    again.fair_share.tick(now, 0.0)
    assert again.policy.effective["A"] == pytest.approx(weights["A"], rel=1e-6)


def test_status_and_explain_show_a_floor_clipped_to_the_groups_limit(tmp_path):
    # Issue 32, break 6: A's weight promises 2/3, its limit lets it have 1G of 4G.
    daemon = make_daemon(tmp_path, '[capacity]\ncpu = 2\nmemory = "4G"\n[groups.A]\nweight = 2\nusers = ["root"]\n'
                                   'limit = { memory = "1G" }\n[groups.B]\nusers = ["root"]\n'
                                   '[sessions]\nenabled = false\n')
    assert daemon.observation.status()["groups"]["A"]["floor"] == 0.25 and daemon.observation.status()["groups"]["B"]["floor"] == 1 / 3
    assert daemon.requests.explain()["configured"]["A"]["floor"] == 0.25
