"""Where the daemon finds the ``[notify]`` events (governor.daemon.notices, exits): each is told
once per task, with the task's fields; a reload with a bad ``[notify]`` leaves the old one."""

from __future__ import annotations

import asyncio
import time

import pytest

from governor.cgroups.stats import CgroupStats
from governor.config.load import parse_config
from governor.config.notify_rules import NotifyRules
from governor.errors import RequestError
from governor.wire.protocol import LaunchRequest, Peer
from governor.wire.request_types import ReloadRequest
from support.daemons import CONFIG, GIB, TREE, launch, make_daemon


class Told:
    """Stands for the runner: keeps each document the journal hands over."""

    def __init__(self) -> None:
        self.documents: list[dict] = []

    def wants(self, kind: str) -> bool:
        return True

    def put(self, document: dict) -> bool:
        self.documents.append(document)
        return True


def _told(daemon) -> Told:
    daemon.journal.alerts = told = Told()
    return told


def _held(memory_bytes: int, times: int) -> CgroupStats:
    return CgroupStats(0, 0, 0, memory_bytes, memory_events={"max": times, "high": 0})


def test_a_task_held_at_its_memory_cap_is_told_once(daemon):
    told = _told(daemon)
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    driver = daemon.hierarchy.driver
    daemon.observation.sample()  # the first sample: nothing to compare with
    driver.stats["A/task-1"] = _held(GIB - 4096, 0)
    daemon.observation.sample()
    assert told.documents == []  # under its cap, never held
    for times in (5, 9):
        driver.stats["A/task-1"] = _held(GIB - 4096, times)
        daemon.observation.sample()
    [document] = told.documents  # the second time held is not told again
    assert (document["kind"], document["task"]["id"], document["group"], document["uid"]) == ("memory_held", "1", "A", 0)
    assert document["details"] == {"memory_cap_bytes": GIB, "memory_used_bytes": GIB - 4096, "held_events": 5}
    assert "held at its memory cap 1.0G" in document["message"]


def test_a_task_queued_past_the_threshold_and_one_held_by_a_group_limit_are_told_once(tmp_path):
    tree = make_daemon(tmp_path, TREE + '[notify]\ncommand = "/bin/true"\nqueued_longer_than = 60\n')
    told = _told(tree)
    launch(tree, 100, group="L2", cpu=0.1, memory=2 * GIB)

    async def scenario():
        request = LaunchRequest(pid=200, group="L2", demand={"cpu": 0.1, "memory": 1.5 * GIB}, command=("w",))
        waiting = tree.requests.stream(request, Peer(pid=200, uid=0, gid=0))
        assert "queued" in await anext(waiting)
        try:
            entry = tree.queue["2"]
            tree.observation.notices.waiting(now=entry.queued_at + 30)
            [limited] = told.documents  # held by D2's limit; not waiting long yet
            tree.observation.notices.waiting(now=entry.queued_at + 61)
            tree.observation.notices.waiting(now=entry.queued_at + 120)
            return limited, told.documents[1:]
        finally:
            await waiting.aclose()

    limited, later = asyncio.run(scenario())
    assert (limited["kind"], limited["task"]["id"], limited["group"]) == ("group_at_limit", "2", "L2")
    assert "group D2's limit: memory 2.0G of 3.0G declared" in limited["details"]["why"]
    [queued] = later
    assert queued["kind"] == "queued" and queued["details"] == {"waited_s": 61.0, "threshold_s": 60.0}


def test_a_time_limit_is_told_with_its_figures(daemon):
    told = _told(daemon)

    async def scenario():
        request = LaunchRequest(pid=100, group="A", demand={"cpu": 1.0, "memory": GIB}, command=("sim", "--long"),
                                name="sim", time_limit=0.05)
        async for _ in daemon.requests.stream(request, Peer(pid=100, uid=0, gid=0)):
            pass
        deadline = time.monotonic() + 10
        while daemon.tasks:  # the daemon's own fact: its time limit ended the task
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    [document] = told.documents
    assert (document["kind"], document["task"]["command"], document["details"]["time_limit_s"]) == \
        ("time_limit", ["sim", "--long"], 0.05)
    assert document["details"]["wall_s"] >= 0.05 and "time limit of" in document["message"]


def test_a_reload_with_a_bad_notify_table_keeps_the_one_in_force(daemon, tmp_path):
    path = tmp_path / "governor.toml"
    path.write_text(CONFIG + '[notify]\ncommand = "/bin/true"\nmax_running = 2\n')
    daemon.reloads.load_config = lambda: parse_config(path.read_text(), str(path))
    asyncio.run(daemon.requests.handle(ReloadRequest(), Peer(pid=1, uid=0, gid=0)))
    assert daemon.policy.config.notify == NotifyRules(command=("/bin/true",), max_running=2)
    path.write_text(CONFIG + '[notify]\ncommand = "true"\n')
    with pytest.raises(RequestError) as caught:
        asyncio.run(daemon.requests.handle(ReloadRequest(), Peer(pid=1, uid=0, gid=0)))
    assert caught.value.code == "invalid_config" and "notify.command" in caught.value.message
    assert daemon.policy.config.notify.max_running == 2
