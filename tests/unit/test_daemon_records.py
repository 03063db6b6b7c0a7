"""Records that survive a crash (issue 43, point 5), on the in-memory driver: ids continue after
the highest id on record anywhere; a task whose record is unreadable is governed unrecorded;
a launch sent again after a restart finds the task it started; the reconcile pass removes the
empty task cgroups no task has."""

import os

import pytest
from support.daemons import GIB, launch, make_daemon, on_loop

from governor.core.state import Task
from governor.errors import RequestError
from governor.wire.protocol import Peer, PsRequest, StopRequest


def restarted(daemon, tmp_path):
    """The daemon killed and started again on the same tree and state directory: re-adopted."""
    again = make_daemon(tmp_path, driver=daemon.hierarchy.driver)
    on_loop(again, lambda: again.recovery.readopt(again.recovery.load()))
    again.exits.restore_ended()
    return again


def ps(daemon, **fields):
    return on_loop(daemon, lambda: daemon.requests.handle(PsRequest(**fields), Peer(pid=1, uid=0, gid=0)))


def test_ids_continue_after_the_ended_records_when_next_id_is_lost(daemon, tmp_path):
    # Issue 43, point 5: with next-id removed (as the daemon's refusal of a garbage one
    # advises) and no task running, ids restarted at 1: `ps --ended` showed 1, 3, 4, 5, 6 twice.
    for pid in (100, 200, 300):
        launch(daemon, pid, group="A", cpu=0.5)
    on_loop(daemon, lambda: daemon.requests.handle(StopRequest(("1", "2", "3")), Peer(pid=1, uid=0, gid=0)))
    daemon.exits.save_ended()
    (daemon.store.directory / "next-id").unlink()
    again = restarted(daemon, tmp_path)
    assert launch(again, 400, group="A", cpu=0.5)["task"] == "4"
    assert [r["id"] for r in ps(again, ended=True)["ended"]] == ["1", "2", "3"]


def test_ids_continue_after_a_record_set_aside_and_a_task_cgroup_in_the_tree(daemon, tmp_path):
    store, driver = daemon.store, daemon.hierarchy.driver
    (store.directory / "next-id").unlink(missing_ok=True)
    (store.directory / "5.json.bad").write_text("garbage")
    assert make_daemon(tmp_path, driver=driver).store.new_id() == "6"
    driver.create("B/task-9")  # empty: a daemon killed between its mkdir and its record
    again = restarted(daemon, tmp_path)
    assert "B/task-9" not in driver.cgroups
    assert again.store.new_id() == "10"


def unrecorded_task(daemon, memory=3 * GIB):
    """A running task 2 in group A whose record is garbage, as a restart finds it."""
    driver = daemon.hierarchy.driver
    driver.create("A/task-2")
    driver.procs["A/task-2"] = [os.getpid()]
    driver.memory_caps["A/task-2"] = memory
    (daemon.store.directory / "2.json").write_text("{not json")


def test_a_task_whose_record_is_garbage_counts_in_admission_and_shows_in_ps_until_it_ends(daemon, tmp_path):
    # Issue 43, point 5: a garbage record was set aside as 2.json.bad; its sleep ran on in
    # task-2 under a 5G cap, invisible to ps, and its 5G no longer counted in admission.
    unrecorded_task(daemon)
    again = restarted(daemon, tmp_path)
    assert (again.store.directory / "2.json.bad").exists()
    [row] = ps(again, all=True)["tasks"]
    assert (row["id"], row["name"], row["user"], row["state"], row["demand"]) == (
        "2", "(unrecorded)", "root", "running", {"cpu": 1.0, "memory": 3 * GIB, "pids": 4096})  # cpu, pids: [defaults.task]
    with pytest.raises(RequestError) as refused:  # 4G capacity, 3G held: 2G does not fit
        launch(again, 300, group="B", cpu=0.5, memory=2 * GIB, wait=False)
    assert refused.value.code == "would_wait"
    assert not [w for w in again.hierarchy.driver.writes if w[0] == "A/task-2"]  # its caps are the kernel's
    again.hierarchy.driver.procs["A/task-2"] = []
    on_loop(again, lambda: again.exits.check(["2"], "exit"))
    assert not again.tasks and [r["name"] for r in ps(again, ended=True)["ended"]] == ["(unrecorded)"]
    assert launch(again, 300, group="B", cpu=0.5, memory=2 * GIB, wait=False)["task"] == "4"  # 3: refused


def test_an_unrecorded_task_is_readopted_as_such_and_its_user_is_unknown_without_a_process_owner(daemon, tmp_path):
    unrecorded_task(daemon)
    restarted(daemon, tmp_path)
    again = make_daemon(tmp_path, driver=daemon.hierarchy.driver)
    again.recovery.owner = lambda pid: None  # its processes' owner cannot be read
    on_loop(again, lambda: again.recovery.readopt())
    [task] = again.tasks
    assert (task.id, task.unrecorded, task.user, task.demand) == ("2", True, "unknown", {"cpu": 1.0, "memory": 3 * GIB, "pids": 4096})


def test_a_launch_sent_again_after_a_restart_is_answered_with_the_task_it_started(daemon, tmp_path):
    # Issue 43, point 5: the daemon killed (-9) after moving the client's pid, before its
    # answer. The client sends the same launch (its own pid) to the next daemon: nothing
    # starts twice, no id is spent.
    started = launch(daemon, 100, group="A", cpu=0.5, memory=GIB)
    again = restarted(daemon, tmp_path)
    resent = launch(again, 100, group="A", cpu=0.5, memory=GIB)
    assert resent["task"] == started["task"] == "1" and "nested" not in resent
    assert [t.id for t in again.tasks] == ["1"] and again.store.new_id() == "2"


def test_a_launch_sent_again_into_an_unrecorded_task_is_answered_with_it(daemon, tmp_path):
    unrecorded_task(daemon)
    again = restarted(daemon, tmp_path)
    assert launch(again, os.getpid(), group="A", cpu=0.5)["task"] == "2"
    assert len(again.tasks) == 1


def test_a_launch_sent_again_after_a_restart_before_its_move_starts_it_once(daemon, tmp_path):
    # Killed after the record, before the move: the record's cgroup is empty, dropped at the
    # restart, and the launch sent again starts a task of its own.
    daemon.store.save(Task("1", "A", 100, 0, "root", ("work",), {"cpu": 0.5}, 0.0, place="A"))
    daemon.hierarchy.driver.create("A/task-1")
    daemon.store.new_id()
    again = restarted(daemon, tmp_path)
    assert not again.tasks
    assert launch(again, 100, group="A", cpu=0.5)["task"] == "2"
    assert [t.id for t in again.tasks] == ["2"] and "A/task-1" not in again.hierarchy.driver.cgroups


def test_reconcile_removes_empty_task_cgroups_no_task_has_and_the_groups_they_leave(daemon):
    # Issue 43, point 5: 620 launches abandoned by their clients left 6 empty task cgroups
    # that no pass removed; the daemon's root could then not be removed at its stop (EBUSY).
    driver = daemon.hierarchy.driver
    launch(daemon, 100, group="A", cpu=0.5)
    driver.create("A/task-50")
    driver.create("B/task-51")
    driver.create("B/task-52")
    driver.procs["B/task-52"] = [4242]  # a process in it: not empty, stays
    on_loop(daemon, lambda: list(daemon.reconcile()))
    assert "A/task-50" not in driver.cgroups and "B/task-51" not in driver.cgroups
    assert {"A", "A/task-1", "B", "B/task-52"} <= driver.cgroups
    driver.procs["B/task-52"] = []
    on_loop(daemon, lambda: list(daemon.reconcile()))
    assert "B" not in driver.cgroups and "A/task-1" in driver.cgroups
    assert any("removed 2 empty task cgroup(s)" in e["message"] for e in daemon.journal.events)


def test_reconcile_leaves_the_cgroup_of_a_launch_in_flight(daemon):
    driver = daemon.hierarchy.driver
    launch(daemon, 100, group="A", cpu=1.0, memory=3 * GIB)

    async def scenario():
        from governor.wire.protocol import LaunchRequest

        request = LaunchRequest(pid=200, group="B", demand={"cpu": 1.0, "memory": 2 * GIB}, command=("big",))
        waiting = daemon.requests.stream(request, Peer(pid=200, uid=0, gid=0))
        assert "queued" in await anext(waiting)
        driver.create("B/task-2")  # as if its start were under way: made, not joined yet
        for _ in daemon.reconcile():
            pass
        await daemon.settled()
        await waiting.aclose()

    on_loop(daemon, scenario)
    assert "B/task-2" in driver.cgroups
