"""Users' task commands in the daemon, on the in-memory driver of test_daemon: ``ps`` (whose
tasks each caller sees, and how much of them) and ``stop`` (who may stop what, and what a kill
that misses leaves)."""

import asyncio
import os

import pytest
from support.daemons import GIB, collect, launch, on_loop
from support.user_requests import NOBODY, ask, launch_as

from governor.wire.ps import PROCESSES_SHOWN
from governor.wire.protocol import LaunchRequest, Peer, PsRequest, StopRequest
from governor.host import access
from governor.core.state import SHOWN_COMMAND_CHARS, Task
from governor.errors import RequestError


def test_ps_lists_the_callers_own_tasks_with_name_guarantee_cap_and_processes(daemon):
    launch_as(daemon, os.getpid(), 0, name="nightly")
    launch_as(daemon, 200, NOBODY)
    rows = ask(daemon, PsRequest())["tasks"]
    assert [(r["id"], r["name"], r["state"], r["user"]) for r in rows] == [("1", "nightly", "running", "root")]
    row = rows[0]
    assert row["demand"] == {"cpu": 0.5, "memory": GIB, "pids": 4096} and row["guarantee"] == {"cpu": 0.5}
    assert row["reserved"] == {"memory": GIB}
    assert row["processes"] == [{"pid": os.getpid(), "ppid": os.getppid(), "name": row["processes"][0]["name"]}]
    assert row["processes_total"] == 1
    theirs = ask(daemon, PsRequest(), uid=NOBODY)["tasks"]
    assert [(r["id"], r["name"]) for r in theirs] == [("2", "work")]  # named after the command's basename


def test_ps_of_one_task_lists_only_it_and_only_if_it_is_the_callers(daemon):
    launch_as(daemon, 100, 0)
    launch_as(daemon, 200, NOBODY)
    assert [r["id"] for r in ask(daemon, PsRequest(all=True, task="2"))["tasks"]] == ["2"]
    assert ask(daemon, PsRequest(task="2"))["tasks"] == []  # nobody's, asked by root without --all


def test_ps_all_is_everyones_for_root_and_others_private_to_a_plain_user(daemon):
    launch_as(daemon, 100, 0)
    launch_as(daemon, 200, NOBODY)
    assert [(r["id"], r["pid"]) for r in ask(daemon, PsRequest(all=True))["tasks"]] == [("1", 100), ("2", 200)]
    # Issue 43, point 4: one rule for every view; others' tasks come without pid or command.
    assert [(r["id"], r["pid"], r["command"]) for r in ask(daemon, PsRequest(all=True), uid=NOBODY)["tasks"]] == [
        ("1", None, []), ("2", 200, ["/usr/bin/work", "-v"])]


def while_one_waits(daemon, then):
    """Run ``then(waiting)`` (async) while task 2 waits in the queue behind task 1, whose
    memory leaves no room; ``waiting`` is its launch stream, at its first ``queued``."""
    launch(daemon, 100, group="A", cpu=1.0, memory=3 * GIB)

    async def scenario():
        request = LaunchRequest(pid=200, group="B", demand={"cpu": 1.0, "memory": 2 * GIB}, command=("big",))
        waiting = daemon.requests.stream(request, Peer(pid=200, uid=0, gid=0))
        assert "queued" in await anext(waiting)
        try:
            return await then(waiting)
        finally:
            await waiting.aclose()

    return asyncio.run(scenario())


def test_ps_shows_a_queued_task_with_its_place(daemon):
    async def ps(waiting):
        return (await daemon.requests.handle(PsRequest(), Peer(pid=1, uid=0, gid=0)))["tasks"]

    rows = while_one_waits(daemon, ps)
    assert [(r["id"], r["state"], r.get("position")) for r in rows] == [("1", "running", None), ("2", "queued", 1)]


def test_the_owner_stops_a_task_its_whole_cgroup_is_killed_and_the_record_says_so(daemon):
    launch_as(daemon, 200, NOBODY, name="sim")
    assert ask(daemon, StopRequest(("1",)), uid=NOBODY) == {"stopped": ["1"]}
    driver = daemon.hierarchy.driver
    assert driver.killed == ["nobody/task-1"] and not daemon.tasks and "nobody/task-1" not in driver.cgroups
    [record] = ask(daemon, PsRequest(ended=True), uid=NOBODY)["ended"]
    assert (record["id"], record["name"], record["reason"], record["stopped_by"]) == ("1", "sim", "stop", "nobody")
    # No pidfd here (as before Linux 6.15, the cgroup v2 VM's 6.1): the SIGKILL the daemon sent
    # every process, as v1's 6.18 host said (issue 44, point 6: v1 SIGKILL, v2 "-").
    assert record["exit_status"] == {"code": "killed", "signal": "KILL"}
    assert any(e["kind"] == "task_ended" and "stopped by nobody" in e["message"] and "code=killed/status=KILL" in
               e["message"] for e in daemon.journal.events)


def test_a_stopped_task_whose_end_is_seen_as_an_exit_is_logged_as_stopped(daemon):
    # An attacker's finding: one stop of two tasks logged "ended (stop)" for one and "ended
    # (exit): stopped by root" for the other, whose emptied cgroup the exit watch saw first.
    launch_as(daemon, 100, 0)
    task = daemon.tasks.get("1")
    daemon.hierarchy.driver.survivors[task.cgroup] = [101]  # a child forked past the kill
    on_loop(daemon, lambda: daemon.exits.end(task, "stop", "root"))
    daemon.hierarchy.driver.procs[task.cgroup] = []
    on_loop(daemon, lambda: daemon.exits.check(["1"], "exit"))
    [line] = [e["message"] for e in daemon.journal.events if e["kind"] == "task_ended"]
    assert line.startswith("task 1 ended (stop): stopped by root"), line


def test_another_user_may_not_stop_a_task_but_root_may(daemon):
    launch_as(daemon, 100, 0)
    with pytest.raises(RequestError) as refused:
        ask(daemon, StopRequest(("1",)), uid=NOBODY)
    assert refused.value.code == "forbidden" and "belongs to root: only its owner, root and admins" in refused.value.message
    assert daemon.hierarchy.driver.killed == [] and len(daemon.tasks) == 1
    launch_as(daemon, 200, NOBODY)
    assert ask(daemon, StopRequest(("2",)))["stopped"] == ["2"]


def test_stop_checks_every_id_before_stopping_any(daemon):
    launch_as(daemon, 100, 0)
    with pytest.raises(RequestError) as refused:
        ask(daemon, StopRequest(("1", "99")))
    assert refused.value.code == "not_found" and "no task 99" in refused.value.message
    assert daemon.hierarchy.driver.killed == [] and len(daemon.tasks) == 1


def test_a_session_is_not_stopped(daemon):
    daemon.tasks.add(Task("session-0", "A", 300, 0, "root", (), {"cpu": 0.5, "memory": GIB}, 0.0))
    with pytest.raises(RequestError) as refused:
        ask(daemon, StopRequest(("session-0",)))
    assert refused.value.code == "forbidden" and "session of root" in refused.value.message


def test_stopping_a_queued_task_takes_it_out_and_tells_its_client(daemon):
    async def stop(waiting):
        assert (await daemon.requests.handle(StopRequest(("2",)), Peer(pid=1, uid=0, gid=0))) == {"stopped": ["2"]}
        with pytest.raises(RequestError) as told:
            await anext(waiting)
        return told.value

    told = while_one_waits(daemon, stop)
    assert told.code == "stopped" and "stopped by root before it started" in told.message
    assert not daemon.queue and daemon.hierarchy.driver.killed == []


def test_what_a_kill_missed_is_killed_again_before_stop_answers(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    driver = daemon.hierarchy.driver
    driver.survivors["A/task-1"] = [101]  # forked past the kill
    assert ask(daemon, StopRequest(("1",))) == {"stopped": ["1"]}
    assert driver.killed == ["A/task-1", "A/task-1"]
    assert not daemon.tasks and daemon.exits.ended[-1].reason == "stop"


def test_a_stop_whose_processes_outlive_the_kill_names_them_and_the_next_check_kills_again(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    launch(daemon, 200, group="B", cpu=0.5, memory=GIB)
    driver = daemon.hierarchy.driver
    driver.procs["A/task-1"] = [100, 101]
    unkillable = {"A/task-1"}  # in uninterruptible sleep, say: SIGKILL waits
    kill = driver.kill
    driver.kill = lambda rel: len(driver.killed.append(rel) or driver.procs[rel]) if rel in unkillable else kill(rel)
    daemon.exits.stop_wait_s = 0.05
    with pytest.raises(RequestError) as refused:
        ask(daemon, StopRequest(("1", "2")))
    assert refused.value.code == "unavailable"
    assert refused.value.message == ("not stopped: task 1: pids 100, 101 still running 0.05 s after SIGKILL; the "
                                     "daemon kills them again at its next check (stopped: 2)")
    assert [t.id for t in daemon.tasks] == ["1"] and daemon.exits.ended[-1].task.id == "2"
    unkillable.clear()
    on_loop(daemon, lambda: daemon.exits.check(["1"], "reconcile"))
    assert driver.killed[-1] == "A/task-1" and driver.procs["A/task-1"] == []
    on_loop(daemon, lambda: daemon.exits.check(["1"], "exit"))  # the kernel reports them gone
    assert not daemon.tasks and daemon.exits.ended[-1].reason == "stop"


def test_ps_names_the_first_processes_of_a_large_task_and_counts_the_rest(daemon):
    launch_as(daemon, os.getpid(), 0)
    daemon.hierarchy.driver.procs["A/task-1"] = [os.getpid()] * 41
    [row] = ask(daemon, PsRequest())["tasks"]
    assert row["processes_total"] == 41 and len(row["processes"]) == PROCESSES_SHOWN


def test_ps_looks_up_the_processes_of_the_first_tasks_only(monkeypatch):
    import governor.wire.ps as ps

    monkeypatch.setattr(ps, "TREES_LISTED", 2)
    tasks = [Task(str(i), "A", 100 + i, 0, "root", ("x",), {"cpu": 1.0}, 0.0) for i in range(3)]
    asked = []
    rows = ps.task_rows(tasks, [], allocation=None, usage={}, positions={},
                        processes=lambda task: asked.append(task.id) or ([], 1), asker=0)
    assert asked == ["0", "1"] and [r["processes_total"] for r in rows] == [1, 1, None]


def test_everyone_sees_a_long_command_line_cut_and_its_owner_whole(daemon):
    long = tuple(["x" * 4000] * 15)  # 60,000 characters: 250 such tasks made a status 15.6 MB
    request = LaunchRequest(pid=100, group="A", demand={"cpu": 0.5, "memory": GIB}, command=long)
    asyncio.run(collect(daemon.requests.stream(request, Peer(pid=100, uid=0, gid=0))))
    [entry] = daemon.observation.status()["groups"]["A"]["tasks"]
    assert sum(map(len, entry["command"])) <= SHOWN_COMMAND_CHARS + 1 and entry["command"][-1].endswith("…")
    assert entry["command_cut"] == 60_000 - SHOWN_COMMAND_CHARS
    mine = daemon.requests.ps(PsRequest(), access.identify(0, 0))["tasks"][0]
    assert (len(mine["command"]), mine["command_cut"]) == (15, 0)  # its owner gets it whole
    import governor.wire.ps as ps
    [theirs] = ps.task_rows(daemon.tasks, [], allocation=None, usage={}, positions={},
                            processes=lambda task: ([], 0), asker=7)  # an admin's ps --all
    assert theirs["command_cut"] == entry["command_cut"]


def test_ps_of_a_group_no_config_knows_says_so(daemon):
    # `ps --group nosuch` printed an empty table, where `ps -u nosuch` says there is no such user
    # (new-user check); a known group with no task is an empty table still.
    launch(daemon, 100, group="A", cpu=0.5, memory=GIB)
    with pytest.raises(RequestError) as refused:
        ask(daemon, PsRequest(groups=("nosuch",)))
    assert refused.value.code == "not_found" and "no group 'nosuch'" in str(refused.value)
    with pytest.raises(RequestError):
        ask(daemon, PsRequest(groups=("nosuch",), ended=True))
    assert ask(daemon, PsRequest(groups=("B",)))["tasks"] == []
    assert [r["id"] for r in ask(daemon, PsRequest(groups=("A", "nosuch")))["tasks"]] == ["1"]
