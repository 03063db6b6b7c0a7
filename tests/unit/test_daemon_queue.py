"""The daemon's queue, on the in-memory driver: a task whose memory does not fit waits, told its
place and what holds it, and starts when memory frees, the lower dominant share first; with
--no-wait it is refused at once, and a client that leaves the queue leaves nothing."""

import asyncio

import pytest

from governor.errors import RequestError
from governor.wire.protocol import Peer
from support.daemons import GIB, launch, launch_request


def test_a_task_whose_memory_does_not_fit_waits_and_starts_when_memory_frees(daemon):
    # Capacity 4G: A runs 3G; B's 2G waits (held by A), and starts when A's task ends.
    launch(daemon, 100, group="A", cpu=1.0, memory=3 * GIB)

    async def scenario():
        stream = daemon.requests.stream(launch_request(200, "B", cpu=1.0, memory=2 * GIB), Peer(pid=200, uid=0, gid=0))
        first = await anext(stream)
        assert daemon.hierarchy.driver.procs.get("B/task-2") is None and "B" not in daemon.hierarchy.driver.cgroups
        queued = daemon.observation.status()["queue"]
        daemon.hierarchy.driver.procs["A/task-1"] = []
        daemon.exits.check(["1"], "exit")
        return first, queued, await anext(stream)

    first, queued, started = asyncio.run(scenario())
    assert first["queued"]["position"] == 1 and first["queued"]["waiting_for"] == GIB
    assert first["queued"]["held_by"] == [{"group": "A", "memory": 3 * GIB}]
    assert [(q["task"], q["group"]) for q in queued] == [("2", "B")]
    assert started["task"] == "2" and daemon.hierarchy.driver.procs["B/task-2"] == [200]
    assert not daemon.queue and [e["kind"] for e in daemon.journal.events][-2:] == ["refill", "task_started"]


def test_with_two_groups_waiting_the_lower_dominant_share_starts_first(daemon):
    # Capacity <2 cores, 4G>. A runs <0.1, 3G>; B runs <1, 0.125G> (share 1/2, cpu). 0.875G is
    # free: neither waiting 1G task fits until A's task ends; then A's share is 0, B's 1/2.
    launch(daemon, 100, group="A", cpu=0.1, memory=3 * GIB)
    launch(daemon, 101, group="B", cpu=1.0, memory=GIB // 8)

    async def scenario():
        peer = lambda pid: Peer(pid=pid, uid=0, gid=0)  # noqa: E731
        b = daemon.requests.stream(launch_request(200, "B", cpu=0.1, memory=GIB), peer(200))
        c = daemon.requests.stream(launch_request(300, "A", cpu=0.1, memory=GIB), peer(300))
        await anext(b), await anext(c)
        daemon.hierarchy.driver.procs["A/task-1"] = []
        daemon.exits.check(["1"], "exit")  # 3G frees: both fit now, in share order
        return (await anext(b))["task"], (await anext(c))["task"]

    asyncio.run(scenario())
    started = [e["message"].split(":")[0] for e in daemon.journal.events if e["kind"] == "task_started"]
    # A (share 0 after its task ended) goes before B (share 1/2), though B queued first.
    assert started[-2:] == ["task 4 started", "task 3 started"]


def test_no_wait_refuses_at_once_and_leaves_nothing(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=3 * GIB)
    with pytest.raises(RequestError) as caught:
        launch(daemon, 200, group="B", cpu=1.0, memory=2 * GIB, wait=False)
    assert caught.value.code == "would_wait" and "held by A 3.0G" in caught.value.message
    assert not daemon.queue and "B" not in daemon.hierarchy.driver.cgroups
    assert [e["kind"] for e in daemon.journal.events if e["kind"] in ("queued", "left_queue")] == []


def test_a_client_that_leaves_the_queue_leaves_nothing(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=3 * GIB)

    async def scenario():
        stream = daemon.requests.stream(launch_request(200, "B", cpu=1.0, memory=2 * GIB), Peer(pid=200, uid=0, gid=0))
        await anext(stream)
        await stream.aclose()  # what the server does when the client's connection ends

    asyncio.run(scenario())
    assert not daemon.queue and daemon.observation.status()["queue"] == []
    assert "B" not in daemon.hierarchy.driver.cgroups and daemon.journal.events[-1]["kind"] == "left_queue"
