"""The queue's ids and places kept across a restart (governor.daemon.waiting): a launch that
waited when the daemon stopped and is sent again by the same process takes back its id and its
place, ahead of its group's later launches, whatever order the clients come back in."""

import asyncio

import pytest
from support.daemons import GIB, make_daemon
from support.waits import until

from governor.daemon.queue_places import QueuePlaces
from governor.daemon.waiting import HOLD_S
from governor.wire.protocol import LaunchRequest, Peer

CONFIG = """
[capacity]
cpu = 2
memory = "8G"
[groups.A]
users = ["root"]
[groups.X]
users = ["root"]
[sessions]
enabled = false
"""


@pytest.fixture(autouse=True)
def births(monkeypatch):
    # The made-up pids were born at a time of their own (a pid reused since is born later).
    monkeypatch.setattr(QueuePlaces, "waits", lambda self, pid: 1000.0 + pid)


def _stream(daemon, pid, group, memory):
    request = LaunchRequest(pid=pid, group=group, demand={"cpu": 0.1, "memory": memory}, command=("w",))
    return daemon.requests.stream(request, Peer(pid=pid, uid=0, gid=0))


def _waiting_when_stopped(tmp_path):
    """A's 6G task runs; X's 5G tasks of pids 102 (task 2) then 103 (task 3) wait; the daemon
    stops (its waiting clients will ask the next one)."""
    daemon = make_daemon(tmp_path, CONFIG)

    async def scenario():
        clients = [_stream(daemon, 101, "A", 6 * GIB)]  # (a stream dropped is a client gone)
        assert "task" in await clients[0].__anext__()
        for pid in (102, 103):
            clients.append(_stream(daemon, pid, "X", 5 * GIB))
            place = await clients[-1].__anext__()
            assert place["queued"]["task"] == str(pid - 100)
        daemon.inbox.closing = True
        daemon.queue_places.save()  # as the daemon's stop does, before its clients are hung up

    asyncio.run(scenario())


def test_launches_sent_again_take_back_their_ids_and_places_in_any_order(tmp_path):
    _waiting_when_stopped(tmp_path)
    again = make_daemon(tmp_path, CONFIG)  # the restarted daemon: A's task has ended meanwhile

    async def scenario():
        again.queue_places.start()
        later = _stream(again, 103, "X", 5 * GIB)  # task 3's client is back first
        place = await later.__anext__()
        assert place["queued"]["task"] == "3" and "held behind launches of its group" in place["queued"]["reason"]
        first = _stream(again, 102, "X", 5 * GIB)
        assert (await first.__anext__())["task"] == "2"  # then task 2's: it waited longest, and starts
        assert (await later.__anext__())["queued"]["position"] == 1  # task 3 behind it, as before the restart
        fresh = _stream(again, 104, "X", GIB)
        assert (await fresh.__anext__())["queued"]["task"] == "4"  # ids go on after the kept ones

    asyncio.run(scenario())


def test_a_process_that_is_not_the_one_that_waited_queues_afresh(tmp_path, monkeypatch):
    _waiting_when_stopped(tmp_path)
    monkeypatch.setattr(QueuePlaces, "waits", lambda self, pid: 5000.0)  # pid 102 reused since
    again = make_daemon(tmp_path, CONFIG)

    async def scenario():
        again.queue_places.start()
        client = _stream(again, 102, "X", 5 * GIB)
        reply = await client.__anext__()
        assert reply["queued"]["task"] == "4"  # a new id, behind task 3, held for its return

    asyncio.run(scenario())


def test_launches_not_sent_again_are_let_go_when_the_hold_ends(tmp_path, monkeypatch):
    _waiting_when_stopped(tmp_path)
    again = make_daemon(tmp_path, CONFIG)
    now = [0.0]
    again.queue.clock = lambda: now[0]

    async def scenario():
        again.queue_places.start()
        held = _stream(again, 105, "X", GIB)
        assert "held behind" in (await held.__anext__())["queued"]["reason"]
        now[0] += HOLD_S
        again.queue_places.end_hold()  # (call_later's, at HOLD_S)
        await until(lambda: again.tasks.get("4") is not None, "the held launch started")
        return [e["message"] for e in again.journal.events if e["kind"] == "left_queue"]

    assert asyncio.run(scenario()) == ["task(s) 2, 3 left the queue: their clients did not ask again after the restart"]
    assert {place["id"] for place in again.store.load_queued()[0]} <= {"4"}  # 2 and 3 are not kept
