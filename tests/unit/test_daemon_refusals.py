"""A launch the daemon refuses or rolls back, on the in-memory driver: each refusal leaves
nothing behind (no task, no cgroup), a pid that vanished before its move or a client that exited
is never governed; a pid that asks again gets its task, a reused pid a task of its own."""

import asyncio
import os
import subprocess

import pytest

from governor.errors import RequestError
from governor.wire.protocol import LaunchRequest, Peer
from support.daemons import GIB, GONE_PID, collect, guarantee_cores, launch


@pytest.mark.parametrize(("pid", "peer_pid", "uid", "group", "demand", "code", "words"), [
    (100, 101, 0, None, {}, "forbidden", "only its own pid"),
    (100, 100, 65534, "A", {}, "forbidden", "may not launch into group 'A'"),
    (100, 100, 0, "nosuch", {}, "not_found", "no group 'nosuch'"),
    (100, 100, 65534, "nosuch", {}, "not_found", "no group 'nosuch' in the config (yours: "),  # was forbidden: 77
    (100, 100, 0, None, {"cpu": 3.0}, "exceeds_capacity", "exceeds the capacity of 2 cores"),
    (100, 100, 0, None, {"memory": 5 * GIB}, "exceeds_capacity", "memory"),
    (100, 100, 0, None, {"io_write": 1000}, "bad_request", "no I/O device is governed"),
    (100, 100, 0, None, {"cpu": 0.0}, "bad_request", "demand.cpu must be > 0"),
])
def test_refusals_leave_nothing_behind(daemon, pid, peer_pid, uid, group, demand, code, words):
    request = LaunchRequest(pid=pid, group=group, demand=demand, command=())
    with pytest.raises(RequestError) as caught:
        asyncio.run(collect(daemon.requests.stream(request, Peer(pid=peer_pid, uid=uid, gid=0))))
    assert caught.value.code == code
    assert words in caught.value.message
    assert len(daemon.tasks) == 0 and daemon.hierarchy.driver.cgroups == {""}


def test_a_memory_declaration_below_the_minimum_is_refused(daemon):
    # Once 1 byte rounded to "no limit"; now the cap is what was declared, and a declaration
    # too small for any process is refused where it enters.
    with pytest.raises(RequestError) as caught:
        launch(daemon, 100, group="A", cpu=1.0, memory=1)
    assert caught.value.code == "bad_request" and "at least 1.0M" in caught.value.message
    assert not daemon.tasks and not daemon.queue


def test_a_cpu_declaration_below_the_kernels_smallest_quota_is_refused(daemon):
    # 1e-320 cores was admitted, shown as 0 and enforced as 0.01 (cpu.max's smallest quota).
    with pytest.raises(RequestError) as caught:
        launch(daemon, 100, group="A", cpu=1e-320, memory=GIB)
    assert caught.value.code == "bad_request" and "at least 0.01 cores" in caught.value.message
    assert not daemon.tasks and not daemon.queue


def test_a_pid_that_vanished_before_the_move_is_rolled_back(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    with pytest.raises(RequestError) as caught:
        launch(daemon, GONE_PID, group="B", cpu=1.0, memory=GIB)
    assert caught.value.code == "bad_request"
    assert "B" not in daemon.hierarchy.driver.cgroups
    assert [t.id for t in daemon.tasks] == ["1"] and not daemon.queue
    assert guarantee_cores(daemon, "A") == pytest.approx(1.0)
    assert [t.id for t in daemon.store.load_all()[0]] == ["1"]


def test_a_client_whose_process_exited_cannot_have_its_pid_governed(daemon):
    # Pid reuse: the client connected as pid P, P exited, and P may now be another user's
    # process. The pidfd taken at connect() still refers to the exited client.
    gone = subprocess.Popen(["true"])
    pidfd = os.pidfd_open(gone.pid)
    gone.wait()
    try:
        request = LaunchRequest(pid=gone.pid, group="A", demand={"cpu": 1.0, "memory": GIB}, command=("work",))
        with pytest.raises(RequestError) as caught:
            asyncio.run(collect(daemon.requests.stream(request, Peer(pid=gone.pid, uid=0, gid=0, pidfd=pidfd))))
    finally:
        os.close(pidfd)
    assert caught.value.code == "bad_request" and "has exited" in caught.value.message
    assert not daemon.tasks and "A" not in daemon.hierarchy.driver.cgroups
    assert gone.pid not in sum(daemon.hierarchy.driver.procs.values(), [])  # nothing was moved


def test_a_running_client_with_a_pidfd_is_governed(daemon):
    pidfd = os.pidfd_open(os.getpid())
    try:
        request = LaunchRequest(pid=os.getpid(), group="A", demand={"cpu": 1.0, "memory": GIB}, command=("work",))
        reply = asyncio.run(collect(daemon.requests.stream(request, Peer(pid=os.getpid(), uid=0, gid=0, pidfd=pidfd))))[-1]
    finally:
        os.close(pidfd)
    assert reply["task"] == "1" and daemon.hierarchy.driver.procs["A/task-1"] == [os.getpid()]


def test_a_client_that_asks_again_for_its_running_pid_gets_the_same_task(daemon):
    first = launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    again = launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    assert again["task"] == first["task"] and len(daemon.tasks) == 1


def test_a_pid_that_wrapped_round_to_a_running_tasks_launch_pid_gets_a_task_of_its_own(daemon):
    # Issue 22, point 6: task 1 outlives its launched process 100 (its child 101 runs on); a
    # later process given pid 100 asks to launch: it must not be handed task 1 (another
    # user's task and group) while staying ungoverned itself.
    launch(daemon, 100, group="A", cpu=0.5, memory=GIB)
    daemon.hierarchy.driver.procs["A/task-1"] = [101]
    reply = launch(daemon, 100, group="B", cpu=0.5, memory=GIB)
    assert reply["task"] == "2" and reply["group"] == "B"
    assert daemon.hierarchy.driver.procs["B/task-2"] == [100]
