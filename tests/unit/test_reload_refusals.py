"""What a reload may not do to work the daemon admitted: cap memory below what the running tasks
declared (the kernel would OOM-kill them), or start a waiting task in a group it removed."""

from __future__ import annotations

import asyncio

import pytest
from support.daemons import CONFIG, GIB, collect, launch
from support.waits import until

from governor.config.load import parse_config
from governor.errors import RequestError
from governor.wire.protocol import LaunchRequest, Peer


def test_a_reload_that_would_cap_memory_below_what_runs_is_refused_and_the_old_config_stays(daemon):
    launch(daemon, 100, group="A", cpu=0.5, memory=3 * GIB)  # of the test config's 4G
    daemon.reloads.load_config = lambda: parse_config(CONFIG.replace('memory = "4G"', 'memory = "1G"'), "test.toml")
    with pytest.raises(RequestError) as refused:
        daemon.reloads.reload("test")
    assert refused.value.code == "invalid_config"
    assert "capacity.memory: leaves 1.0G to divide, below the 3.0G the running tasks declared" in refused.value.message
    assert daemon.policy.capacity["memory"] == 4 * GIB  # it was put in force: the root capped at 1G, tasks OOM-killed


def test_a_task_waiting_in_a_group_a_reload_removed_is_refused_not_started_there(daemon):
    launch(daemon, 100, group="A", cpu=0.5, memory=3 * GIB)

    async def scenario():
        request = LaunchRequest(pid=200, group="B", demand={"cpu": 0.5, "memory": 2 * GIB}, command=("work",))
        client = asyncio.ensure_future(collect(daemon.requests.stream(request, Peer(pid=200, uid=0, gid=0))))
        await until(lambda: daemon.queue, "task 2 queued behind A's 3G")
        daemon.reloads.load_config = lambda: parse_config(CONFIG.replace("[groups.B]\nusers = [\"root\"]\n", ""),
                                                          "test.toml")
        daemon.reloads.reload("test")
        with pytest.raises(RequestError) as refused:
            await asyncio.wait_for(client, 10)  # before the fix it waited on, to start in the removed group
        return refused.value

    refused = asyncio.run(scenario())
    assert refused.code == "not_found" and "group B is no longer in the config" in refused.message
    assert not daemon.queue and [task.group for task in daemon.tasks] == ["A"]
    # Said in the log and the history as a refused launch is (the reload's refusals were silent).
    assert any("task 2 (work) refused at the reload: group B is no longer" in e["message"] for e in daemon.journal.events)
