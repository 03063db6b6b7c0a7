"""A launch withdrawn while its process is moved into its task's cgroup (its client leaves, a
stop): the process is in the cgroup by then, and must not run on there counted nowhere."""

import asyncio
import os

from support.daemons import GIB, collect
from support.waits import until

from governor.wire.protocol import LaunchRequest, Peer

PID = os.getpid()  # a real process, born before any launch here: the one a client launches


def _moving_then(daemon, step):
    """Have the fake driver's move call ``step(loop)`` on the loop as the move is made (the
    thread's move returns after it is scheduled: the loop runs it before it hears of the move)."""
    driver = daemon.hierarchy.driver
    move, loop = driver.move, asyncio.get_running_loop()

    def moving(rel, pid):
        move(rel, pid)
        loop.call_soon_threadsafe(step, loop)

    driver.move = moving


def _launch(daemon):
    request = LaunchRequest(pid=PID, group="A", demand={"cpu": 0.5, "memory": GIB}, command=("work",))
    return asyncio.ensure_future(collect(daemon.requests.stream(request, Peer(pid=PID, uid=0, gid=0))))


def test_a_client_that_leaves_while_its_process_is_moved_in_leaves_it_governed_and_counted(daemon):
    async def scenario():
        client = None
        _moving_then(daemon, lambda loop: client.cancel())  # the client closes its connection mid-move
        client = _launch(daemon)
        await until(lambda: client.done() and not daemon.queue, "the client gone and the start done")
        await daemon.settled()

    asyncio.run(scenario())
    task = daemon.tasks.get("1")
    assert task is not None and task.pid == PID  # governed: counted in admission and the filling
    assert daemon.hierarchy.driver.procs["A/task-1"] == [PID] and "A/task-1" in daemon.hierarchy.driver.cgroups
    assert daemon.records.store.load_all()[0][0].id == "1"  # a restart re-adopts it
    assert "withdrawn while its process was moved in" in daemon.journal.events[-1]["message"]


def test_a_task_stopped_while_its_process_is_moved_in_is_ended(daemon):
    stopped = []

    async def scenario():
        who = daemon.policy.identities.identify(0, 0)
        _moving_then(daemon, lambda loop: stopped.append(loop.create_task(daemon.requests.stop(["1"], who))))
        client = _launch(daemon)
        await until(lambda: client.done() and stopped and stopped[0].done(), "the stop and the start done")
        await daemon.settled()
        return client.exception(), stopped[0].result()

    refused, answered = asyncio.run(scenario())
    assert refused.code == "stopped" and answered == {"stopped": ["1"]}  # what both were told stands
    assert daemon.hierarchy.driver.killed == ["A/task-1"]  # and the process moved in is ended
    ended = daemon.exits.ended[-1]
    assert (ended.task.id, ended.reason, ended.stopped_by) == ("1", "stop", "root")  # its record says so, not a SIGKILL exit
