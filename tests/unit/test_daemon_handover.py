"""The hand-over of a freed GPU (issue 31, point 5): a GPU drains until no governed process
holds its node, and the sweep ends a governed process holding a GPU it was not given; on the
in-memory cgroup driver, with a fake /proc whose fds point at /dev/null (:mod:`support.gpus`)."""

import asyncio
import os
import pwd
from types import SimpleNamespace

from support.gpus import CONFIG, DeviceDriver, gpu_holders
from support.daemons import GIB, launch, make_daemon
from support.waits import until

from governor.daemon.handover import SWEEP_AFTER_HANDOVER_S
from governor.core.gpus import Gpu, GpuInventory
from governor.wire.protocol import LaunchRequest, Peer

NULL = (os.major(os.stat("/dev/null").st_rdev), os.minor(os.stat("/dev/null").st_rdev))
ONE_GPU = GpuInventory(gpus=(Gpu(0, "/dev/null", *NULL, "GPU-aaaa"),), control=(), source="listed")


def test_a_freed_gpu_goes_to_the_next_task_only_once_no_other_process_holds_it(tmp_path):
    # Break 4: task 1 holds GPU 0 and passes its open fd (SCM_RIGHTS) to task 2, which holds
    # no GPU, then ends. GPU 0 drains: task 2's process is ended and logged, and the task
    # waiting for a GPU gets it only once no process holds the node.
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', 'gpus = ["/dev/null"]')
    daemon = make_daemon(tmp_path, config, driver=DeviceDriver(), find_gpus=lambda spec, control: ONE_GPU)
    proc = tmp_path / "proc"
    (proc / "101" / "fd").mkdir(parents=True)
    ended, looks = [], []
    daemon.handover.proc, daemon.handover.listed = proc, lambda entry, inventory, indices: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    find = daemon.handover._find
    daemon.handover._find = lambda nodes: looks.append(nodes) or find(nodes)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(daemon, 101, group="A", cpu=0.1, memory=GIB // 8)
    (proc / "101" / "fd" / "5").symlink_to("/dev/null")  # the receiver holds GPU 0's node

    async def scenario():
        waiting = daemon.requests.stream(LaunchRequest(pid=102, group="B", demand={"cpu": 0.1, "memory": GIB // 8, "gpu": 1},
                                              command=("w",)), Peer(pid=102, uid=0, gid=0))
        assert "queued" in await waiting.__anext__()
        daemon.hierarchy.driver.procs["A/task-1"] = []
        daemon.exits.check(["1"], "exit")
        await until(lambda: ended and len(looks) >= 3, "the holder to be looked for three times")  # it stays
        assert ended == [101]  # ended once, not at every look
        status = daemon.observation.status()
        assert status["gpus"][0]["draining"] and status["gpus"][0]["task"] is None
        assert [q["task"] for q in status["queue"]] == ["3"]
        event = [e["message"] for e in status["events"] if e["kind"] == "gpu_holder_ended"]
        assert event == ["a process (user root, task 2) ended: it held GPU 0 open after task 1 ended"]
        (proc / "101" / "fd" / "5").unlink()  # the process is gone
        started = [p async for p in waiting][-1]
        assert started["gpus"] == ["GPU-aaaa"]
        assert [(g["task"], g["draining"]) for g in daemon.observation.status()["gpus"]] == [("3", False)]
        # An fd that was in flight (sent, not yet received) at the hand-over: its receiver is
        # found by the look that follows a hand-over.
        (proc / "101" / "fd" / "6").symlink_to("/dev/null")
        await until(lambda: ended == [101, 101], "the sweep to end 101 again", timeout=SWEEP_AFTER_HANDOVER_S + 5)

    asyncio.run(scenario())


def test_processes_outside_governor_and_a_mig_sibling_keep_the_node_and_the_gpu_frees(tmp_path):
    # nvidia-persistenced (outside governor's root) and a task holding another MIG instance of
    # the same GPU hold its node rightly: neither is ended, and neither keeps the GPU draining.
    mig = GpuInventory(gpus=(Gpu(0, "/dev/null", *NULL, "MIG-a", mig_parent=NULL[1]),
                             Gpu(1, "/dev/null", *NULL, "MIG-b", mig_parent=NULL[1])), control=(), source="listed")
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', 'gpus = ["/dev/null"]')
    daemon = make_daemon(tmp_path, config, driver=DeviceDriver(), find_gpus=lambda spec, control: mig)
    proc = tmp_path / "proc"
    ended = []
    daemon.handover.proc, daemon.handover.listed = proc, lambda entry, inventory, indices: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(daemon, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)
    for pid in (1, 101):  # 1: outside governor; 101: task 2, on MIG instance 1
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "fd" / "3").symlink_to("/dev/null")
    daemon.hierarchy.driver.procs["A/task-1"] = []

    async def ended_task_1():
        daemon.exits.check(["1"], "exit")
        await until(lambda: daemon.tasks.draining() == {}, "the look, on the hand-over thread, to drain nothing")

    asyncio.run(ended_task_1())
    assert ended == [] and daemon.tasks.free("gpu", 2) == [0]
    assert [e["kind"] for e in daemon.observation.status()["events"]].count("gpu_free") == 1


def test_the_sweep_ends_a_governed_process_holding_a_gpu_it_was_not_given(tmp_path):
    # Where the kernel cannot deny the nodes where sessions start, a process that opened one
    # before governor moved it is found by the sweep: ended and logged; the GPU's own task is not.
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', 'gpus = ["/dev/null"]')
    daemon = make_daemon(tmp_path, config, driver=DeviceDriver(), find_gpus=lambda spec, control: ONE_GPU)
    proc, ended = tmp_path / "proc", []
    daemon.handover.proc, daemon.handover.listed = proc, lambda entry, inventory, indices: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(daemon, 101, group="B", cpu=0.1, memory=GIB // 8)
    for pid in (100, 101):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "fd" / "4").symlink_to("/dev/null")

    async def sweep():
        daemon.handover.sweep()
        await until(lambda: ended, "the look, on the hand-over thread, to end the holder")

    asyncio.run(sweep())
    assert ended == [101]
    event = [e["message"] for e in daemon.observation.status()["events"] if e["kind"] == "gpu_holder_ended"]
    assert event == ["a process (user root, task 2) ended: it held GPU 0 open though task 2 was not given it"]


def test_a_starting_daemon_drains_the_free_gpus_before_handing_them_out(tmp_path):
    # A task that ended while no daemon ran may have passed its GPU on: the next daemon looks
    # before it hands any free GPU out.
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', 'gpus = ["/dev/null"]')
    daemon = make_daemon(tmp_path, config, driver=DeviceDriver(), find_gpus=lambda spec, control: ONE_GPU)
    proc, ended = tmp_path / "proc", []
    daemon.handover.proc, daemon.handover.listed = proc, lambda entry, inventory, indices: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    launch(daemon, 101, group="B", cpu=0.1, memory=GIB // 8)
    (proc / "101" / "fd").mkdir(parents=True)
    (proc / "101" / "fd" / "4").symlink_to("/dev/null")

    async def start():
        daemon.handover.start()
        assert daemon.observation.status()["gpus"][0]["draining"]
        daemon.handover.drain()
        await until(lambda: ended, "the first look to end the holder")
        assert ended == [101] and daemon.tasks.free("gpu", 1) == []
        (proc / "101" / "fd" / "4").unlink()
        await until(lambda: daemon.tasks.free("gpu", 1) == [0], "the next look to free GPU 0")

    asyncio.run(start())
    messages = [e["message"] for e in daemon.observation.status()["events"] if e["kind"].startswith("gpu_")]
    assert messages == ["a process (user root, task 1) ended: it held GPU 0 open after its task ended, before the "
                        "daemon started", "GPU 0 is free: no process holds it at the daemon's start"]


def test_a_starting_daemon_ends_a_governed_process_holding_a_gpu_a_running_task_holds(tmp_path):
    # Break 6: while no daemon ran (a clean stop takes the guard off), task 2's process, given
    # no GPU, opened the one task 1 holds. The new daemon sweeps every GPU once it has its
    # tasks back: that process is ended; task 1's own is not.
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', 'gpus = ["/dev/null"]')
    driver = DeviceDriver()
    first = make_daemon(tmp_path, config, driver=driver, find_gpus=lambda spec, control: ONE_GPU)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(first, 101, group="B", cpu=0.1, memory=GIB // 8)
    proc, ended = tmp_path / "proc", []
    for pid in (100, 101):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "fd" / "4").symlink_to("/dev/null")
    again = make_daemon(tmp_path, config, driver=driver, find_gpus=lambda spec, control: ONE_GPU)
    again.handover.proc, again.handover.listed = proc, lambda entry, inventory, indices: None
    again.handover.kill = lambda holder: ended.append(holder.pid)

    async def restart():
        again.recovery.readopt()
        again.handover.start()  # as serve() does, after re-adoption
        await until(lambda: ended, "the sweep, on the hand-over thread, to end the holder")

    asyncio.run(restart())
    assert ended == [101] and gpu_holders(again.tasks) == {0: "1"}
    event = [e["message"] for e in again.observation.status()["events"] if e["kind"] == "gpu_holder_ended"]
    assert event == ["a process (user root, task 2) ended: it held GPU 0 open though task 2 was not given it"]


USER = pwd.getpwuid(1).pw_name  # uid 1 stands for a login user: uid_min is 1 below
SESSIONS = f"""
[capacity]
cpu = 2
memory = "4G"
gpus = ["/dev/null"]
[groups.A]
users = ["{USER}"]
[sessions]
cpu = 0.5
memory = "1G"
"""


def test_a_process_moved_into_a_session_holding_a_gpu_open_is_ended(tmp_path):
    # Break 7: a cron job of a governed user (system.slice, outside the guarded login slices)
    # opened the GPU before governor moved it into the user's session: once moved, it is
    # ended and logged; one holding no GPU node is not.
    driver = DeviceDriver()
    driver.move = lambda rel, pid: driver.procs.setdefault(rel, []).append(pid)
    daemon = make_daemon(tmp_path, SESSIONS, driver=driver, uid_min=1, host_pids=lambda: [500, 501],
                         find_gpus=lambda spec, control: ONE_GPU)
    daemon.sessions.real_uid = daemon.sessions.effective_uid = lambda pid: 1
    proc, ended = tmp_path / "proc", []
    daemon.handover.proc, daemon.handover.listed = proc, lambda entry, inventory, indices: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    for pid in (500, 501):
        (proc / str(pid) / "fd").mkdir(parents=True)
    (proc / "500" / "fd" / "3").symlink_to("/dev/null")

    async def govern():
        assert daemon.sessions.govern_process(501, 1) and daemon.sessions.govern_process(500, 1)
        await daemon.settled()
        await until(lambda: ended, "the look at the moved pids to end the holder")

    asyncio.run(govern())
    assert driver.procs["A/session-1"] == [501, 500] and ended == [500]
    [event] = [e["message"] for e in daemon.observation.status()["events"] if e["kind"] == "gpu_holder_ended"]
    assert event.startswith("a process (") and event.endswith(
        f", session of {USER}) ended: it held GPU 0 open though session of {USER} was not given it")


def test_the_periodic_sweep_follows_the_guard_in_force(tmp_path):
    # Break 7: whether the daemon sweeps is asked at each turn, not only at start: a reload
    # that leaves the sessions' places unguarded starts the sweeping, one that guards them
    # stops it.
    daemon = make_daemon(tmp_path, SESSIONS, driver=DeviceDriver(), uid_min=1, host_pids=lambda: [],
                         find_gpus=lambda spec, control: ONE_GPU)
    swept = []
    daemon.handover.sweep = lambda: swept.append(True)
    daemon.gpu_guard.plan = SimpleNamespace(places=("user.slice",))  # guarded where they start
    daemon.sweep()
    assert swept == []
    daemon.gpu_guard.plan = None  # a reload left them unguarded
    daemon.sweep()
    assert swept == [True]
