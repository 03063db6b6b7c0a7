"""Re-adoption is exact (issue 31): a record keeps each GPU by identity, and a restart or a
reload whose inventory lists the GPUs otherwise finds each held one again, or refuses; on the
in-memory cgroup driver with a fake inventory (:mod:`support.gpus`)."""

import asyncio
import json
from dataclasses import replace

import pytest
from support.gpus import CONFIG, GPU0, GPU1, INVENTORY, DeviceDriver, gpu_holders, gpus_draining
from support.daemons import GIB, launch, make_daemon, on_loop

from governor.host import access
from governor.config.load import parse_config
from governor.daemon.device_places import denied_devices
from governor.errors import GovernorError, RequestError
from governor.core.device_identity import DeviceNotFound, locate
from governor.core.gpus import Gpu, GpuInventory


@pytest.fixture
def gpus(tmp_path):
    return make_daemon(tmp_path, CONFIG, driver=DeviceDriver(), find_gpus=lambda spec, control: INVENTORY)


# Re-adoption is exact (issue 31): a record keeps each GPU by identity, and a restart or a
# reload whose inventory lists the GPUs otherwise finds each held one again, or refuses.
REORDERED = GpuInventory(gpus=(Gpu(0, "/dev/nvidia1", 195, 1, "GPU-bbbb"), Gpu(1, "/dev/nvidia0", 195, 0, "GPU-aaaa")),
                         control=INVENTORY.control, source="listed")


def without_uuids(inventory):
    """The inventory as listed nodes NVML does not know: found by device number alone."""
    return replace(inventory, gpus=tuple(replace(gpu, uuid=None) for gpu in inventory.gpus))


def restarted(tmp_path, driver, inventory):
    daemon = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: inventory)
    on_loop(daemon, lambda: daemon.recovery.readopt())
    return daemon


@pytest.mark.parametrize("known", [lambda inventory: inventory, without_uuids], ids=["by UUID", "by device number"])
def test_a_restart_with_the_gpus_reordered_finds_each_held_gpu_by_identity(tmp_path, known):
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: known(INVENTORY))
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)  # bob's, on /dev/nvidia0
    again = restarted(tmp_path, driver, known(REORDERED))  # [nvidia1, nvidia0]: index 0 is another GPU now
    bob = again.tasks.get("1")
    assert bob.devices["gpu"] == (1,) and gpu_holders(again.tasks) == {1: "1"}
    assert denied_devices(again.policy.devices, bob.devices) == (GPU1,)  # still may open /dev/nvidia0 alone
    alice = launch(again, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)
    assert again.tasks.get("2").devices["gpu"] == (0,) and driver.denied["B/task-2"] == (GPU0,)  # /dev/nvidia1
    assert alice["gpus"] == (["GPU-bbbb"] if known(REORDERED).gpus[0].uuid else ["1"])
    [record] = [t for t in again.store.load_all()[0] if t.id == "1"]
    assert record.device_identities["gpu"] == (known(INVENTORY).gpus[0].identity,)
    again.reloads.load_config = lambda: parse_config(CONFIG, "test.toml")
    again.reloads.reload("the same list")  # nothing moves
    assert again.tasks.get("1").devices["gpu"] == (1,) and again.tasks.get("2").devices["gpu"] == (0,)


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
    gpus.reloads.load_config = lambda: parse_config(CONFIG, "test.toml")
    gpus.reloads.reload("test")
    assert [(t.id, t.devices["gpu"]) for t in gpus.tasks] == [("1", (1,)), ("2", (0,))]  # launch order kept
    assert gpu_holders(gpus.tasks) == {1: "1", 0: "2"}
    assert denied_devices(gpus.policy.devices, gpus.tasks.get("1").devices) == (GPU1,)
    assert denied_devices(gpus.policy.devices, gpus.tasks.get("2").devices) == (GPU0,)


def test_an_older_record_holding_indices_is_taken_as_todays_inventorys_and_written_by_identity(tmp_path):
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    path = first.store.directory / "1.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "gpus": [1]}))  # as an older governor wrote it
    again = restarted(tmp_path, driver, INVENTORY)
    assert again.tasks.get("1").devices["gpu"] == (1,)
    assert json.loads(path.read_text())["gpus"] == [{"device": "195:1", "uuid": "GPU-bbbb"}]
    assert any(e["kind"] == "record" and "its record holds GPUs by index" in e["message"] for e in again.journal.events)
    path.write_text(json.dumps({**json.loads(path.read_text()), "gpus": [2]}))
    with pytest.raises(GovernorError, match=r"holds GPU 2 \(by index: an older record\) and this config lists 2 GPUs"):
        make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY).recovery.load()


class JoiningDriver(DeviceDriver):
    """A v1 host whose devices hierarchy joined at the restart: ``elsewhere`` holds the pids of
    a cgroup that only rejoin finds (read from the hierarchies the fake does not model)."""

    def __init__(self):
        super().__init__()
        self.elsewhere: dict[str, list[int]] = {}

    def rejoin(self, rel, leave=None):
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
    assert any("1 process(es) put into the hierarchies" in e["message"] for e in again.journal.events)
    assert asyncio.run(again.requests.stop(["1"], access.identify(0, 0))) == {"stopped": ["1"]}
    assert driver.killed == ["A/task-1"] and not again.tasks


def reload_during_the_make(daemon, inventory, nodes):
    """Put a reload to ``inventory`` in force while the next launch's cgroup is made (the await
    on the cgroup thread, where a reload can run)."""
    call = daemon.tree.call

    async def make_then_reload(work):
        made = await call(work)
        if daemon.tree.call is make_then_reload:
            daemon.tree.call = call
            daemon.policy.find_gpus = lambda spec, control: inventory
            config = CONFIG.replace('gpus = ["/dev/nvidia0", "/dev/nvidia1"]', f"gpus = {nodes}")
            daemon.reloads.load_config = lambda: parse_config(config, "test.toml")
            daemon.reloads.reload("test")
        return made

    daemon.tree.call = make_then_reload


def test_a_reload_during_a_launch_gives_the_starting_task_its_gpu_at_its_new_index(gpus):
    # Break 2: A holds nvidia0 (index 0); B starts with nvidia1 (index 1); a reload reorders
    # them while B's cgroup is made: B must hold nvidia1, now index 0, and may not open nvidia0.
    launch(gpus, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    reload_during_the_make(gpus, REORDERED, '["/dev/nvidia1", "/dev/nvidia0"]')
    started = launch(gpus, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)
    assert started["gpus"] == ["GPU-bbbb"]
    assert gpus.tasks.get("2").devices["gpu"] == (0,) and gpu_holders(gpus.tasks) == {1: "1", 0: "2"}
    assert gpus.hierarchy.driver.denied["B/task-2"] == (GPU0,)  # nvidia0 is A's
    [record] = [t for t in gpus.store.load_all()[0] if t.id == "2"]
    assert record.device_identities["gpu"] == (INVENTORY.gpus[1].identity,)  # nvidia1, by identity


def test_a_reload_during_a_launch_that_drops_its_gpu_refuses_the_launch(gpus):
    launch(gpus, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    only_first = replace(INVENTORY, gpus=INVENTORY.gpus[:1])
    reload_during_the_make(gpus, only_first, '["/dev/nvidia0"]')
    with pytest.raises(RequestError) as refused:
        launch(gpus, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)
    assert refused.value.code == "unavailable"
    assert "task 2 cannot start: a reload while it started changed the GPUs: GPU 195:1 (GPU-bbbb) is not in the " \
           "inventory" in refused.value.message
    assert gpu_holders(gpus.tasks) == {0: "1"} and "B/task-2" not in gpus.hierarchy.driver.cgroups


def test_a_reload_that_reorders_the_gpus_re_maps_the_draining_ones(gpus):
    # Break 3: task 1's nvidia0 drains (a holder may keep it); a reload reorders the GPUs:
    # nvidia0, now index 1, still drains, and the GPU now at index 0 (task 2's) is not free.
    gpus.settle.drain_devices = lambda: None  # no look: the GPU stays draining
    launch(gpus, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)  # nvidia0
    launch(gpus, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)  # nvidia1
    gpus.hierarchy.driver.procs["A/task-1"] = []
    on_loop(gpus, lambda: gpus.exits.check(["1"], "exit"))
    assert gpus_draining(gpus.tasks) == {0: "1"}
    gpus.policy.find_gpus = lambda spec, control: REORDERED
    gpus.reloads.load_config = lambda: parse_config(CONFIG, "test.toml")
    gpus.reloads.reload("test")
    assert gpu_holders(gpus.tasks) == {0: "2"} and gpus_draining(gpus.tasks) == {1: "1"}
    assert gpus.tasks.free("gpu", 2) == []
    gpus.policy.find_gpus = lambda spec, control: replace(REORDERED, gpus=REORDERED.gpus[:1])
    gpus.reloads.reload("nvidia0 dropped")  # a GPU governor no longer governs has nothing to hand over
    assert gpus.tasks.draining() == {}


def test_a_dead_tasks_record_holding_a_dropped_gpu_is_removed_and_the_daemon_starts(tmp_path):
    # Break 9: task 2 ended while no daemon ran; the new config drops its GPU. Only a live
    # task's GPU keeps the daemon from starting (the refusal above).
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: INVENTORY)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    launch(first, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)
    driver.procs["B/task-2"] = []
    again = restarted(tmp_path, driver, replace(INVENTORY, gpus=INVENTORY.gpus[:1]))
    assert [t.id for t in again.tasks] == ["1"] and [t.id for t in again.store.load_all()[0]] == ["1"]
    assert any(e["kind"] == "cleanup" and "task 2" in e["message"] and "ended while no daemon ran" in e["message"]
               for e in again.journal.events)
    assert "B/task-2" not in driver.cgroups


# Task 2's GPU is known by its device number alone; a new inventory renumbers task 1's GPU
# (found by its UUID) to that device number: both would be found at index 0.
NO_UUID = replace(INVENTORY, gpus=(INVENTORY.gpus[0], replace(INVENTORY.gpus[1], uuid=None)))
CLASHING = replace(INVENTORY, gpus=(Gpu(0, "/dev/nvidia1", 195, 1, "GPU-aaaa"), Gpu(1, "/dev/nvidia0", 195, 0, "GPU-cccc")))


def test_two_held_gpus_found_at_one_index_are_refused_by_a_reload_and_by_a_restart(tmp_path):
    # Break 11: a reload or restart must not give one GPU to two tasks.
    driver = DeviceDriver()
    daemon = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: NO_UUID)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, gpu=1)  # GPU-aaaa
    launch(daemon, 101, group="B", cpu=0.1, memory=GIB // 8, gpu=1)  # 195:1, no UUID
    daemon.policy.find_gpus = lambda spec, control: CLASHING
    daemon.reloads.load_config = lambda: parse_config(CONFIG, "test.toml")
    with pytest.raises(RequestError) as refused:
        daemon.reloads.reload("test")
    assert refused.value.code == "invalid_config"
    assert "tasks 1 and 2 would both hold GPU 0 (/dev/nvidia1)" in refused.value.message
    assert gpu_holders(daemon.tasks) == {0: "1", 1: "2"} and daemon.policy.gpus is NO_UUID
    again = make_daemon(tmp_path, CONFIG, driver=driver, find_gpus=lambda spec, control: CLASHING)
    with pytest.raises(GovernorError, match="tasks 1 and 2 would both hold GPU 0: this config cannot tell"):
        again.recovery.load()
    assert not again.tasks and [t.id for t in again.store.load_all()[0]] == ["1", "2"]
    driver.procs["A/task-1"] = []  # task 1 ends: only the live task keeps the GPU
    again = restarted(tmp_path, driver, CLASHING)
    assert gpu_holders(again.tasks) == {0: "2"} and [t.id for t in again.store.load_all()[0]] == ["2"]
    assert any(e["kind"] == "cleanup" and e["message"].startswith("task 1 ended while no daemon ran: its record, "
                                                                  "holding GPU 0, which task 2 holds too")
               for e in again.journal.events)


def test_two_gpus_of_one_task_found_at_one_index_are_not_located():
    held = (INVENTORY.gpus[0].identity, NO_UUID.gpus[1].identity)
    with pytest.raises(DeviceNotFound) as lost:
        locate(held, CLASHING.gpus, "GPU")
    assert lost.value.same_as == held[0] and str(lost.value) == (
        "GPU 195:1 is where 195:0 (GPU-aaaa) is too in the inventory")
