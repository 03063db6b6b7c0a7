"""Issue 32 on the daemon (in-memory driver): a task waiting for GPUs reserves only the GPUs, so
work without GPUs starts beside it (break 1); an idle group's memory guarantee is kept free of
other groups' admissions, so its task within it starts at once (break 2)."""

import asyncio

import pytest
from support.daemons import GIB, collect, launch, make_daemon
from support.gpus import CONFIG as GPU_CONFIG
from support.gpus import INVENTORY, DeviceDriver

from governor.errors import RequestError
from governor.wire.protocol import LaunchRequest, Peer

MIB = 1024**2
GUARANTEED = """
[capacity]
cpu = 2
memory = "8G"
[groups.A]
users = ["root"]
[groups.B]
users = ["root"]
guarantee = { memory = "1G" }
[sessions]
enabled = false
"""


def test_a_task_waiting_for_gpus_does_not_hold_back_work_without_gpus(tmp_path):
    gpus = make_daemon(tmp_path, GPU_CONFIG, driver=DeviceDriver(), find_gpus=lambda spec, control: INVENTORY)
    launch(gpus, 100, group="A", cpu=0.1, memory=64 * MIB, gpu=1)  # alice: 1 GPU of 2, 64M of 4G

    async def scenario():
        bob = gpus.requests.stream(LaunchRequest(pid=101, group="B", demand={"cpu": 0.1, "memory": 3.5 * GIB, "gpu": 2},
                                        command=("w",)), Peer(pid=101, uid=0, gid=0))
        assert "queued" in await bob.__anext__()
        queue = gpus.observation.status()["queue"]
        assert queue[0]["reason"].startswith("gpu: waits for 1 GPU to free")
        # carol's --no-wait 512M, no GPU: before, bob's reservation held his 3.5G too and she got
        # "waits for 64.0M to free … what frees goes first to task 2".
        carol = await collect(gpus.requests.stream(LaunchRequest(pid=102, group="A", demand={"cpu": 0.1, "memory": GIB / 2},
                                                        command=("w",), wait=False), Peer(pid=102, uid=0, gid=0)))
        assert carol[-1]["task"] == "3"
        await bob.aclose()

    asyncio.run(scenario())


def test_a_task_within_its_groups_memory_guarantee_starts_though_others_queued_first(tmp_path):
    daemon = make_daemon(tmp_path, GUARANTEED)
    launch(daemon, 100, group="A", cpu=0.1, memory=7 * GIB)  # A may take all but B's unused 1G
    with pytest.raises(RequestError) as refused:
        launch(daemon, 101, group="A", cpu=0.1, memory=GIB // 2, wait=False)
    assert refused.value.code == "would_wait"
    started = launch(daemon, 102, group="B", cpu=0.1, memory=GIB, wait=False)  # before: it waited
    assert started["task"] == "3" and daemon.observation.status()["queue"] == []


def test_a_demand_that_could_never_start_beside_the_others_guarantees_is_refused_at_the_door(tmp_path):
    # 7.5G of 8G while B keeps 1G unused: it would wait for ever, so it is refused, not queued.
    daemon = make_daemon(tmp_path, GUARANTEED)
    with pytest.raises(RequestError) as refused:
        launch(daemon, 100, group="A", cpu=0.1, memory=7.5 * GIB)
    assert refused.value.code == "exceeds_capacity" and "headroom (B 1.0G)" in str(refused.value)
    assert launch(daemon, 101, group="B", cpu=0.1, memory=7.5 * GIB)["task"]  # B's own guarantee is no bar to B
