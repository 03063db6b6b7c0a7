"""GPUs in the daemon (issue 26), on the in-memory cgroup driver with a fake inventory: whole
devices admitted in DRF order, each task given distinct GPUs and denied the others' nodes (and,
holding none, every GPU and control node), the GPUs named in the reply, freed at exit, kept in
the task record across a restart, and a launch asking for GPUs where none is governed refused.
Device rules are part of a task's caps (issue 31): a reload or a restart with another
inventory re-plans and re-applies them in every running task's cgroup. Re-adoption by identity
is in test_daemon_gpu_readopt.py, the hand-over of a freed GPU in test_daemon_handover.py."""

import asyncio

import pytest
from support.gpus import CONFIG, CONTROL, GPU0, GPU1, INVENTORY, DeviceDriver, gpu_holders
from support.daemons import GIB, launch, make_daemon, on_loop

from governor.config.load import parse_config
from governor.daemon import effector
from governor.errors import RequestError
from governor.core.gpus import Gpu, GpuInventory
from governor.wire.protocol import LaunchRequest, Peer


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
    status = gpus.observation.status()
    assert status["capacity"]["gpu"] == 2
    assert [(g["index"], g["task"], g["group"]) for g in status["gpus"]] == [(0, "1", "A"), (1, "2", "B")]
    assert status["groups"]["A"]["reserved"]["gpu"] == 1 and "gpu" not in status["groups"]["A"]["guarantee"]
    tasks = {t["id"]: t["gpus"] for g in status["groups"].values() for t in g["tasks"]}
    assert tasks == {"1": [0], "2": [1], "3": []}


def test_a_gpu_task_waits_in_drf_order_and_gets_the_gpu_a_stop_frees(gpus):
    launch(gpus, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(gpus, 101, group="A", cpu=0.1, memory=GIB // 8, gpu=1)

    async def scenario():
        a_third = gpus.requests.stream(LaunchRequest(pid=102, group="A", demand={"cpu": 0.1, "memory": GIB // 8, "gpu": 1},
                                            command=("w",)), Peer(pid=102, uid=0, gid=0))
        b_first = gpus.requests.stream(LaunchRequest(pid=103, group="B", demand={"cpu": 0.1, "memory": GIB // 8, "gpu": 1},
                                            command=("w",)), Peer(pid=103, uid=0, gid=0))
        a_waits, b_waits = await a_third.__anext__(), await b_first.__anext__()
        assert "queued" in a_waits and "queued" in b_waits
        queue = gpus.observation.status()["queue"]
        assert [q["group"] for q in queue] == ["B", "A"]  # B's dominant share is 0, A's is 1
        assert queue[0]["reason"] == "gpu: waits for 1 GPU to free (held by A 2)"
        gpus.hierarchy.driver.procs["A/task-1"] = []  # A's task on GPU 0 ends
        gpus.exits.check(["1"], "exit")
        started = [p async for p in b_first][-1]
        assert started["gpus"] == ["GPU-aaaa"] and gpus.hierarchy.driver.denied["B/task-4"] == (GPU1,)
        assert [q["group"] for q in gpus.observation.status()["queue"]] == ["A"]
        await a_third.aclose()

    asyncio.run(scenario())


def test_a_tasks_gpus_are_kept_in_its_record_across_a_restart(tmp_path):
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(first, 101, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    again = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY)
    on_loop(again, lambda: again.recovery.readopt())
    assert sorted(gpu_holders(again.tasks)) == [0, 1]
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
    gpus.reloads.load_config = lambda: parse_config(CONFIG, "test.toml")
    with pytest.raises(RequestError) as refused:
        gpus.reloads.reload("test")
    assert refused.value.code == "invalid_config"
    assert "GPU 1 (/dev/nvidia1, device 195:1, GPU-bbbb) is held by task 2 and this config drops it" in refused.value.message
    assert gpus.policy.capacity["gpu"] == 2 and gpus.policy.gpus is INVENTORY


THREE = GpuInventory(gpus=(*INVENTORY.gpus, Gpu(2, "/dev/nvidia2", 195, 2, "GPU-cccc")), control=INVENTORY.control,
                     source="listed")
GPU2 = ("c", 195, 2)


def reload_with(daemon, inventory, nodes):
    daemon.policy.find_gpus = lambda spec, control: inventory
    config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', f"gpus = {nodes}")
    daemon.reloads.load_config = lambda: parse_config(config, "test.toml")
    on_loop(daemon, lambda: daemon.reloads.reload("test"))  # as the daemon reloads: the added GPU drains there


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
    monkeypatch.setattr(effector, "put_guard", lambda plan, denied: put.append(tuple(denied)) or [])
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
    on_loop(again, lambda: again.recovery.readopt())
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
    gpus.reloads.set_weight("A", 2, "root")  # a refill as every event's: groups only (flat in the tasks' number)
