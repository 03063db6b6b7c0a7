"""GPUs in the daemon (issue 26), on the in-memory cgroup driver with a fake inventory: whole
devices admitted in DRF order, each task given distinct GPUs and denied the others' nodes (and,
holding none, every GPU and control node), the GPUs named in the reply, freed at exit, kept in
the task record across a restart (by identity: a restart or reload that lists them otherwise
finds each again, or refuses), and a launch asking for GPUs where none is governed refused.
Device rules are part of a task's caps (issue 31): a reload or a restart with another
inventory re-plans and re-applies them in every running task's cgroup."""

import asyncio
import json
import os
from dataclasses import replace

import pytest
from test_daemon import GIB, FakeDriver, collect, launch, make_daemon

from governor import access
from governor.cgroups.device_rules import devices_text
from governor.cgroups.limits import V2_DEVICE_PROGRAM
from governor.config import parse_config
from governor.daemon import gpu_guard
from governor.daemon.handover import SWEEP_AFTER_HANDOVER_S
from governor.errors import GovernorError, RequestError
from governor.gpus import Gpu, GpuInventory
from governor.protocol import LaunchRequest, Peer

CONFIG = """
[capacity]
cpu = 2
memory = "4G"
gpus = ["/dev/nvidia0", "/dev/nvidia1"]
[groups.A]
users = ["root"]
[groups.B]
users = ["root"]
[sessions]
enabled = false
"""
INVENTORY = GpuInventory(
    gpus=(Gpu(0, "/dev/nvidia0", 195, 0, "GPU-aaaa", "Fake A100"), Gpu(1, "/dev/nvidia1", 195, 1, "GPU-bbbb")),
    control=(("/dev/nvidiactl", 195, 255),), source="listed")
GPU0, GPU1, CONTROL = ("c", 195, 0), ("c", 195, 1), ("c", 195, 255)


class DeviceDriver(FakeDriver):
    """The in-memory driver, keeping each cgroup's device rules as the v2 driver records them
    (one "device program" entry), and the lists it was asked to put in force."""

    def __init__(self):
        super().__init__()
        self.denied: dict[str, tuple] = {}  # cgroup → the denied devices in force
        self.device_writes: list[tuple[str, tuple]] = []  # (cgroup, list) for each change, in order

    def _apply_one(self, rel, limits):
        before = self._written.get(rel, {}).get(V2_DEVICE_PROGRAM, "")
        written, errors = super()._apply_one(rel, limits)  # rewrites the record without devices
        wanted = devices_text(limits.devices_denied)
        if not errors:
            if wanted:
                self._record(rel)[V2_DEVICE_PROGRAM] = wanted
            if wanted != before:
                self.denied[rel] = limits.devices_denied
                self.device_writes.append((rel, limits.devices_denied))
                written.append(V2_DEVICE_PROGRAM[0])
        return written, errors

    def device_guard_problem(self):
        return None


@pytest.fixture
def gpus(tmp_path):
    return make_daemon(tmp_path, CONFIG, driver=DeviceDriver(), find_gpus=lambda spec, control: INVENTORY)


def test_each_task_gets_its_own_gpus_and_may_open_no_other(gpus):
    first = launch(gpus, 100, group="A", cpu=0.5, memory=GIB // 4, gpu=1)
    second = launch(gpus, 101, group="B", cpu=0.5, memory=GIB // 4, gpu=1)
    plain = launch(gpus, 102, group="B", cpu=0.5, memory=GIB // 4)
    assert (first["gpus"], second["gpus"], plain["gpus"]) == (["GPU-aaaa"], ["GPU-bbbb"], [])
    denied = gpus.hierarchy.driver.denied
    assert denied["A/task-1"] == (GPU1,) and denied["B/task-2"] == (GPU0,)
    assert set(denied["B/task-3"]) == {GPU0, GPU1, CONTROL}  # no GPU: no control node either
    status = gpus.status()
    assert status["capacity"]["gpu"] == 2
    assert [(g["index"], g["task"], g["group"]) for g in status["gpus"]] == [(0, "1", "A"), (1, "2", "B")]
    assert status["groups"]["A"]["reserved"]["gpu"] == 1 and "gpu" not in status["groups"]["A"]["guarantee"]
    tasks = {t["id"]: t["gpus"] for g in status["groups"].values() for t in g["tasks"]}
    assert tasks == {"1": [0], "2": [1], "3": []}


def test_a_gpu_task_waits_in_drf_order_and_gets_the_gpu_a_stop_frees(gpus):
    launch(gpus, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(gpus, 101, group="A", cpu=0.1, memory=GIB // 8, gpu=1)

    async def scenario():
        a_third = gpus.stream(LaunchRequest(pid=102, group="A", demand={"cpu": 0.1, "memory": GIB // 8, "gpu": 1},
                                            command=("w",)), Peer(pid=102, uid=0, gid=0))
        b_first = gpus.stream(LaunchRequest(pid=103, group="B", demand={"cpu": 0.1, "memory": GIB // 8, "gpu": 1},
                                            command=("w",)), Peer(pid=103, uid=0, gid=0))
        a_waits, b_waits = await a_third.__anext__(), await b_first.__anext__()
        assert "queued" in a_waits and "queued" in b_waits
        queue = gpus.status()["queue"]
        assert [q["group"] for q in queue] == ["B", "A"]  # B's dominant share is 0, A's is 1
        assert queue[0]["reason"] == "gpu: waits for 1 GPU to free (held by A 2)"
        gpus.hierarchy.driver.procs["A/task-1"] = []  # A's task on GPU 0 ends
        gpus.check(["1"], "exit")
        started = [p async for p in b_first][-1]
        assert started["gpus"] == ["GPU-aaaa"] and gpus.hierarchy.driver.denied["B/task-4"] == (GPU1,)
        assert [q["group"] for q in gpus.status()["queue"]] == ["A"]
        await a_third.aclose()

    asyncio.run(scenario())


def test_a_tasks_gpus_are_kept_in_its_record_across_a_restart(tmp_path):
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(first, 101, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    again = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY)
    again.readopt()
    assert sorted(again.tasks.gpu_holders()) == [0, 1]
    with pytest.raises(RequestError) as refused:
        launch(again, 102, group="B", cpu=0.1, memory=GIB // 8, gpu=1, wait=False)
    assert refused.value.code == "would_wait"


def test_gpus_asked_where_none_is_governed_or_more_than_exist_are_refused(tmp_path, gpus):
    plain = make_daemon(tmp_path / "plain", CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]\n', ""))
    with pytest.raises(RequestError) as refused:
        launch(plain, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    assert refused.value.code == "bad_request" and "no GPU is governed" in refused.value.message
    with pytest.raises(RequestError) as refused:
        launch(gpus, 101, group="A", cpu=0.1, memory=GIB // 8, gpu=3)
    assert refused.value.code == "exceeds_capacity" and "gpu = 3 exceeds the capacity of 2" in refused.value.message


def test_a_reload_that_drops_a_held_gpu_is_refused_and_the_old_config_stays(gpus, tmp_path):
    launch(gpus, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(gpus, 101, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    smaller = GpuInventory(gpus=INVENTORY.gpus[:1], control=(), source="listed")
    gpus.policy.find_gpus = lambda spec, control: smaller
    gpus.load_config = lambda: parse_config(CONFIG, "test.toml")
    with pytest.raises(RequestError) as refused:
        gpus.reload("test")
    assert refused.value.code == "invalid_config"
    assert "GPU 1 (/dev/nvidia1, device 195:1, GPU-bbbb) is held by task 2 and this config drops it" in refused.value.message
    assert gpus.policy.capacity["gpu"] == 2 and gpus.policy.gpus is INVENTORY


THREE = GpuInventory(gpus=(*INVENTORY.gpus, Gpu(2, "/dev/nvidia2", 195, 2, "GPU-cccc")), control=INVENTORY.control,
                     source="listed")
GPU2 = ("c", 195, 2)


def reload_with(daemon, inventory, nodes):
    daemon.policy.find_gpus = lambda spec, control: inventory
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', f"gpus = {nodes}")
    daemon.load_config = lambda: parse_config(config, "test.toml")
    daemon.reload("test")


def test_a_reload_that_adds_a_gpu_denies_it_to_the_running_tasks_that_do_not_hold_it(gpus):
    launch(gpus, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(gpus, 101, group="B", cpu=0.1, memory=GIB // 8)
    driver = gpus.hierarchy.driver
    assert driver.denied == {"A/task-1": (GPU1,), "B/task-2": (GPU0, GPU1, CONTROL)}
    written = len(driver.device_writes)
    reload_with(gpus, THREE, '["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]')
    assert driver.denied == {"A/task-1": (GPU1, GPU2), "B/task-2": (GPU0, GPU1, GPU2, CONTROL)}
    assert gpus.policy.capacity["gpu"] == 3
    # status shows what is in force: the rules, as one canonical text per cgroup.
    assert gpus.hierarchy.in_force("B/task-2")["device program"] == "c 195:0, c 195:1, c 195:2, c 195:255"
    assert gpus.hierarchy.in_force("A/task-1")["device program"] == "c 195:1, c 195:2"
    assert len(driver.device_writes) == written + 2
    reload_with(gpus, THREE, '["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]')
    assert len(driver.device_writes) == written + 2  # the same config again: nothing rewritten


def test_a_reload_puts_the_gpu_guard_again_denying_the_gpus_it_adds(gpus, monkeypatch):
    put = []
    monkeypatch.setattr(gpu_guard, "put_guard", lambda plan, denied: put.append(tuple(denied)) or [])
    reload_with(gpus, THREE, '["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]')
    assert put == [(GPU0, GPU1, GPU2, CONTROL)]
    assert gpus.gpu_guard.plan is not None


def test_control_nodes_added_by_a_reload_are_denied_to_a_running_task_without_gpus(tmp_path):
    bare = GpuInventory(gpus=INVENTORY.gpus, control=(), source="listed")
    daemon = make_daemon(tmp_path, CONFIG, driver=DeviceDriver(), find_gpus=lambda spec, control: bare)
    launch(daemon, 100, group="B", cpu=0.1, memory=GIB // 8)
    assert daemon.hierarchy.driver.denied["B/task-1"] == (GPU0, GPU1)
    reload_with(daemon, INVENTORY, '["/dev/nvidia0", "/dev/nvidia1"]')
    assert daemon.hierarchy.driver.denied["B/task-1"] == (GPU0, GPU1, CONTROL)


def test_a_restart_with_a_new_inventory_applies_its_rules_to_the_tasks_it_takes_back(tmp_path):
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY)
    launch(first, 100, group="B", cpu=0.1, memory=GIB // 8)
    assert driver.denied["B/task-1"] == (GPU0, GPU1, CONTROL)
    again = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: THREE)
    again.readopt()
    assert driver.denied["B/task-1"] == (GPU0, GPU1, GPU2, CONTROL)
    assert again.hierarchy.in_force("B/task-1")["device program"] == "c 195:0, c 195:1, c 195:2, c 195:255"


def test_a_task_cgroup_gets_its_device_rules_before_its_process_joins(gpus):
    order = []
    driver = gpus.hierarchy.driver
    apply_one, move = driver._apply_one, driver.move
    driver._apply_one = lambda rel, limits: order.append(("caps", rel, limits.devices_denied)) or apply_one(rel, limits)
    driver.move = lambda rel, pid: order.append(("move", rel, pid)) or move(rel, pid)
    launch(gpus, 100, group="B", cpu=0.1, memory=GIB // 8)
    task = [step for step in order if step[1] == "B/task-1"]
    assert task[0] == ("caps", "B/task-1", (GPU0, GPU1, CONTROL)) and task[-1] == ("move", "B/task-1", 100)


def test_a_refused_device_rule_is_an_error_event_and_in_force_keeps_the_old_rules(gpus):
    launch(gpus, 100, group="B", cpu=0.1, memory=GIB // 8)
    gpus.hierarchy.driver.refuse.add("B/task-1")
    reload_with(gpus, THREE, '["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]')
    assert gpus.hierarchy.in_force("B/task-1")["device program"] == "c 195:0, c 195:1, c 195:255"
    errors = [e for e in gpus.journal.events if e["kind"] == "error"]
    assert any("B/task-1" in e["message"] and "the value in force stays" in e["message"] for e in errors)


def test_only_a_full_refill_plans_the_running_tasks_cgroups(gpus):
    launch(gpus, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(gpus, 101, group="B", cpu=0.1, memory=GIB // 8)
    planned = []
    apply_plan = gpus.hierarchy.apply_plan
    gpus.hierarchy.apply_plan = lambda plan: planned.append(list(plan)) or apply_plan(plan)
    gpus.set_weight("A", 2, "root")  # a refill as every event's: groups only (flat in the tasks' number)
    assert planned[-1] == ["", "A", "B"]
    reload_with(gpus, INVENTORY, '["/dev/nvidia0", "/dev/nvidia1"]')
    assert planned[-1] == ["", "A", "B", "A/task-1", "B/task-2"]  # parents before children


# Re-adoption is exact (issue 31): a record keeps each GPU by identity, and a restart or a
# reload whose inventory lists the GPUs otherwise finds each held one again, or refuses.
REORDERED = GpuInventory(gpus=(Gpu(0, "/dev/nvidia1", 195, 1, "GPU-bbbb"), Gpu(1, "/dev/nvidia0", 195, 0, "GPU-aaaa")),
                         control=INVENTORY.control, source="listed")


def without_uuids(inventory):
    """The inventory as listed nodes NVML does not know: found by device number alone."""
    return replace(inventory, gpus=tuple(replace(gpu, uuid=None) for gpu in inventory.gpus))


def restarted(tmp_path, driver, inventory):
    daemon = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: inventory)
    daemon.readopt()
    return daemon


@pytest.mark.parametrize("known", [lambda inventory: inventory, without_uuids], ids=["by UUID", "by device number"])
def test_a_restart_with_the_gpus_reordered_finds_each_held_gpu_by_identity(tmp_path, known):
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: known(INVENTORY))
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)  # bob's, on /dev/nvidia0
    again = restarted(tmp_path, driver, known(REORDERED))  # [nvidia1, nvidia0]: index 0 is another GPU now
    bob = again.tasks.get("1")
    assert bob.gpus == (1,) and again.tasks.gpu_holders() == {1: "1"}
    assert again.policy.denied_devices(bob.gpus) == (GPU1,)  # still may open /dev/nvidia0 alone
    alice = launch(again, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)
    assert again.tasks.get("2").gpus == (0,) and driver.denied["B/task-2"] == (GPU0,)  # /dev/nvidia1
    assert alice["gpus"] == (["GPU-bbbb"] if known(REORDERED).gpus[0].uuid else ["1"])
    [record] = [t for t in again.store.load_all()[0] if t.id == "1"]
    assert record.gpu_identities == (known(INVENTORY).gpus[0].identity,)
    again.load_config = lambda: parse_config(CONFIG, "test.toml")
    again.reload("the same list")  # nothing moves
    assert again.tasks.get("1").gpus == (1,) and again.tasks.get("2").gpus == (0,)


def test_a_restart_whose_inventory_lacks_a_held_gpu_refuses_to_start_naming_task_gpu_and_what_to_do(tmp_path):
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(first, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)
    only_first = replace(INVENTORY, gpus=INVENTORY.gpus[:1])
    again = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: only_first)
    with pytest.raises(GovernorError) as refused:
        again.recovery.load()
    assert str(refused.value) == (
        "test.toml: capacity.gpus: task 2 (group B) holds GPU 195:1 (GPU-bbbb) and this config drops it: the daemon "
        "does not start, lest another task get it. List that GPU again, start the daemon and stop the task (governor "
        "stop 2), then change the config")
    assert not again.tasks and [t.id for t in again.store.load_all()[0]] == ["1", "2"]  # nothing taken, nothing lost


def test_a_reload_that_reorders_the_gpus_re_maps_the_held_ones(gpus):
    launch(gpus, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)  # nvidia0
    launch(gpus, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)  # nvidia1
    gpus.policy.find_gpus = lambda spec, control: REORDERED
    gpus.load_config = lambda: parse_config(CONFIG, "test.toml")
    gpus.reload("test")
    assert [(t.id, t.gpus) for t in gpus.tasks] == [("1", (1,)), ("2", (0,))]  # launch order kept
    assert gpus.tasks.gpu_holders() == {1: "1", 0: "2"}
    assert gpus.policy.denied_devices(gpus.tasks.get("1").gpus) == (GPU1,)
    assert gpus.policy.denied_devices(gpus.tasks.get("2").gpus) == (GPU0,)


def test_an_older_record_holding_indices_is_taken_as_todays_inventorys_and_written_by_identity(tmp_path):
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    path = first.store.directory / "1.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "gpus": [1]}))  # as an older governor wrote it
    again = restarted(tmp_path, driver, INVENTORY)
    assert again.tasks.get("1").gpus == (1,)
    assert json.loads(path.read_text())["gpus"] == [{"device": "195:1", "uuid": "GPU-bbbb"}]
    assert any(e["kind"] == "record" and "its record holds GPUs by index" in e["message"] for e in again.events)
    path.write_text(json.dumps({**json.loads(path.read_text()), "gpus": [2]}))
    with pytest.raises(GovernorError, match=r"holds GPU 2 \(by index: an older record\) and this config lists 2 GPUs"):
        make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY).recovery.load()


class JoiningDriver(DeviceDriver):
    """A v1 host whose devices hierarchy joined at the restart: ``elsewhere`` holds the pids of
    a cgroup that only rejoin finds (read from the hierarchies the fake does not model)."""

    def __init__(self):
        super().__init__()
        self.elsewhere: dict[str, list[int]] = {}

    def rejoin(self, rel):
        moved = self.elsewhere.pop(rel, [])
        self.procs[rel] = sorted({*self.procs.get(rel, []), *moved})
        return moved


def test_a_restart_that_turns_gpus_on_rejoins_the_processes_before_asking_whether_a_task_lives(tmp_path):
    driver = JoiningDriver()
    first = make_daemon(tmp_path, CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]\n', ""), driver=driver)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8)
    driver.procs["A/task-1"], driver.elsewhere["A/task-1"] = [], [100]
    again = restarted(tmp_path, driver, INVENTORY)
    assert [t.id for t in again.tasks] == ["1"] and driver.procs["A/task-1"] == [100]
    assert any("pid(s) 100 put into the hierarchies" in e["message"] for e in again.events)
    assert asyncio.run(again.requests.stop(["1"], access.identify(0, 0))) == {"stopped": ["1"]}
    assert driver.killed == ["A/task-1"] and not again.tasks


# ── The hand-over (issue 31, point 5) ────────────────────────────────────────────────────

NULL = (os.major(os.stat("/dev/null").st_rdev), os.minor(os.stat("/dev/null").st_rdev))
ONE_GPU = GpuInventory(gpus=(Gpu(0, "/dev/null", *NULL, "GPU-aaaa"),), control=(), source="listed")


async def until(fact, seconds=5.0):
    """Wait (on the event loop) until ``fact()`` holds."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not fact():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_freed_gpu_goes_to_the_next_task_only_once_no_other_process_holds_it(tmp_path):
    # Break 4: task 1 holds GPU 0 and passes its open fd (SCM_RIGHTS) to task 2, which holds
    # no GPU, then ends. GPU 0 drains: task 2's process is ended and logged, and the task
    # waiting for a GPU gets it only once no process holds the node.
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', 'gpus = ["/dev/null"]')
    daemon = make_daemon(tmp_path, config, driver=DeviceDriver(), find_gpus=lambda spec, control: ONE_GPU)
    proc = tmp_path / "proc"
    (proc / "101" / "fd").mkdir(parents=True)
    ended, looks = [], []
    daemon.handover.proc, daemon.handover.listed = proc, lambda inventory, gpus: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    find = daemon.handover._find
    daemon.handover._find = lambda nodes: looks.append(nodes) or find(nodes)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(daemon, 101, group="A", cpu=0.1, memory=GIB // 8)
    (proc / "101" / "fd" / "5").symlink_to("/dev/null")  # the receiver holds GPU 0's node

    async def scenario():
        waiting = daemon.stream(LaunchRequest(pid=102, group="B", demand={"cpu": 0.1, "memory": GIB // 8, "gpu": 1},
                                              command=("w",)), Peer(pid=102, uid=0, gid=0))
        assert "queued" in await waiting.__anext__()
        daemon.hierarchy.driver.procs["A/task-1"] = []
        daemon.check(["1"], "exit")
        await until(lambda: ended and len(looks) >= 3)  # looked again and again: the holder stays
        assert ended == [101]  # ended once, not at every look
        status = daemon.status()
        assert status["gpus"][0]["draining"] and status["gpus"][0]["task"] is None
        assert [q["task"] for q in status["queue"]] == ["3"]
        event = [e["message"] for e in status["events"] if e["kind"] == "gpu_holder_ended"]
        assert event == ["process 101 (user root, task 2) ended: it held GPU 0 open after task 1 ended"]
        (proc / "101" / "fd" / "5").unlink()  # the process is gone
        started = [p async for p in waiting][-1]
        assert started["gpus"] == ["GPU-aaaa"]
        assert [(g["task"], g["draining"]) for g in daemon.status()["gpus"]] == [("3", False)]
        # An fd that was in flight (sent, not yet received) at the hand-over: its receiver is
        # found by the look that follows a hand-over.
        (proc / "101" / "fd" / "6").symlink_to("/dev/null")
        await until(lambda: ended == [101, 101], seconds=SWEEP_AFTER_HANDOVER_S + 5)

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
    daemon.handover.proc, daemon.handover.listed = proc, lambda inventory, gpus: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(daemon, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)
    for pid in (1, 101):  # 1: outside governor; 101: task 2, on MIG instance 1
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "fd" / "3").symlink_to("/dev/null")
    daemon.hierarchy.driver.procs["A/task-1"] = []
    daemon.check(["1"], "exit")  # no event loop: the look is made at once
    assert ended == [] and daemon.tasks.draining() == {} and daemon.tasks.free_gpus(2) == [0]
    assert [e["kind"] for e in daemon.status()["events"]].count("gpu_free") == 1


def test_the_sweep_ends_a_governed_process_holding_a_gpu_it_was_not_given(tmp_path):
    # Where the kernel cannot deny the nodes where sessions start, a process that opened one
    # before governor moved it is found by the sweep: ended and logged; the GPU's own task is not.
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', 'gpus = ["/dev/null"]')
    daemon = make_daemon(tmp_path, config, driver=DeviceDriver(), find_gpus=lambda spec, control: ONE_GPU)
    proc, ended = tmp_path / "proc", []
    daemon.handover.proc, daemon.handover.listed = proc, lambda inventory, gpus: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(daemon, 101, group="B", cpu=0.1, memory=GIB // 8)
    for pid in (100, 101):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "fd" / "4").symlink_to("/dev/null")
    daemon.handover.sweep()  # no event loop: at once
    assert ended == [101]
    event = [e["message"] for e in daemon.status()["events"] if e["kind"] == "gpu_holder_ended"]
    assert event == ["process 101 (user root, task 2) ended: it held GPU 0 open though task 2 was not given it"]


def test_a_starting_daemon_drains_the_free_gpus_before_handing_them_out(tmp_path):
    # A task that ended while no daemon ran may have passed its GPU on: the next daemon looks
    # before it hands any free GPU out.
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', 'gpus = ["/dev/null"]')
    daemon = make_daemon(tmp_path, config, driver=DeviceDriver(), find_gpus=lambda spec, control: ONE_GPU)
    proc, ended = tmp_path / "proc", []
    daemon.handover.proc, daemon.handover.listed = proc, lambda inventory, gpus: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    launch(daemon, 101, group="B", cpu=0.1, memory=GIB // 8)
    (proc / "101" / "fd").mkdir(parents=True)
    (proc / "101" / "fd" / "4").symlink_to("/dev/null")
    daemon.handover.start()
    assert daemon.status()["gpus"][0]["draining"]
    daemon.handover.drain()
    assert ended == [101] and daemon.tasks.free_gpus(1) == []
    (proc / "101" / "fd" / "4").unlink()
    daemon.handover.drain()
    assert daemon.tasks.free_gpus(1) == [0]
    messages = [e["message"] for e in daemon.status()["events"] if e["kind"].startswith("gpu_")]
    assert messages == ["process 101 (user root, task 1) ended: it held GPU 0 open after its task ended, before the "
                        "daemon started", "GPU 0 is free: no process holds it at the daemon's start"]
