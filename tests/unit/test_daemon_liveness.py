"""When the daemon takes a task for ended, on the in-memory driver: not while its cgroup cannot be
read, on a spurious wake-up, or while its process is still moving in; at a restart, live tasks
re-adopted (one without a record governed unrecorded) and dead ones recorded as ended."""

import asyncio
import os
import threading

from governor.wire.protocol import Peer
from governor.core.state import Task
from support.daemons import GIB, collect, launch, launch_request, on_loop
from support.waits import until


def test_a_task_whose_cgroup_cannot_be_read_is_kept_not_dropped(daemon):
    # Out of file descriptors, the reconcile pass cannot read cgroup.procs: that is no proof the
    # task ended (it once dropped a live task and leaked its cgroup with stale limits).
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    daemon.hierarchy.driver.unreadable.add("A/task-1")
    on_loop(daemon, lambda: daemon.exits.check(["1"], "reconcile"))
    assert [task.id for task in daemon.tasks] == ["1"] and "A/task-1" in daemon.hierarchy.driver.cgroups
    daemon.hierarchy.driver.unreadable.clear()
    daemon.hierarchy.driver.procs["A/task-1"] = []
    on_loop(daemon, lambda: daemon.exits.check(["1"], "reconcile"))
    assert not daemon.tasks


def test_a_live_task_is_kept_on_a_spurious_wake_up(daemon):
    launch(daemon, 100, cpu=1.0, memory=GIB)
    on_loop(daemon, lambda: daemon.exits.check(["1"], "exit"))
    assert len(daemon.tasks) == 1


def test_restart_readopts_live_tasks_and_drops_dead_ones(daemon):
    store, driver = daemon.store, daemon.hierarchy.driver
    for task_id, group, pid in (("1", "A", 100), ("2", "B", 200)):
        store.save(Task(task_id, group, pid, 0, "root", ("work",), {"cpu": 1.0, "memory": GIB}, 0.0))
        driver.create(f"{group}/task-{task_id}")
    driver.procs["A/task-1"] = [100]
    on_loop(daemon, lambda: daemon.recovery.readopt())
    assert [t.id for t in daemon.tasks] == ["1"]
    assert [t.id for t in store.load_all()[0]] == ["1"]
    assert "B" not in driver.cgroups
    assert store.new_id() == "3"
    # Task 2 ended while no daemon ran: it left no trace in ps --ended, the history or the log.
    [ended] = daemon.exits.ended
    assert (ended.task.id, ended.reason) == ("2", "exit")
    assert any(e["message"].startswith("task 2 ended (exit, found at the restart)") for e in daemon.journal.events)


def test_a_live_task_cgroup_without_a_record_is_governed_unrecorded(daemon):
    # Issue 43, point 5: it was only named in the log, its memory no longer counted.
    daemon.hierarchy.driver.create("A/task-9")
    daemon.hierarchy.driver.procs["A/task-9"] = [os.getpid()]
    daemon.hierarchy.driver.memory_caps["A/task-9"] = GIB
    on_loop(daemon, lambda: daemon.recovery.readopt())
    [task] = daemon.tasks
    assert (task.id, task.group, task.name, task.unrecorded, task.demand) == ("9", "A", "(unrecorded)", True,
                                                                               {"cpu": 1.0, "memory": GIB, "pids": 4096})
    assert "task 9 has no readable record" in " ".join(e["message"] for e in daemon.journal.events)


def test_a_task_whose_process_is_moving_in_is_not_taken_for_ended(daemon):
    # The move runs on the cgroup thread; until it is made the task's cgroup is empty, and a
    # reconcile pass then ended the task and queued its cgroup's removal behind the move (EBUSY):
    # the process ran on in a cgroup governor no longer knew.
    driver, release = daemon.hierarchy.driver, threading.Event()
    plain_move = driver.move

    def slow_move(rel, pid):
        release.wait(5)
        plain_move(rel, pid)

    driver.move = slow_move

    async def scenario():
        stream = daemon.requests.stream(launch_request(100, "A", cpu=1.0, memory=GIB), Peer(pid=100, uid=0, gid=0))
        started = asyncio.ensure_future(collect(stream))
        await until(lambda: "A/task-1" in driver.cgroups and daemon.tasks.get("1") is not None, "task 1 to start")
        daemon.exits.check(["1"], "reconcile")  # the cgroup is empty: its process is moving in
        release.set()
        return (await started)[-1]

    reply = asyncio.run(scenario())
    assert reply["task"] == "1" and daemon.tasks.get("1") is not None
    assert driver.procs["A/task-1"] == [100] and "A/task-1" in driver.cgroups
    assert not daemon.exits.ended
