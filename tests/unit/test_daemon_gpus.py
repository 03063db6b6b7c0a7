"""GPUs in the daemon (issue 26), on the in-memory cgroup driver with a fake inventory: whole
devices admitted in DRF order, each task given distinct GPUs and denied the others' nodes (and,
holding none, every GPU and control node), the GPUs named in the reply, freed at exit, kept in
the task record across a restart (by identity: a restart or reload that lists them otherwise
finds each again, or refuses), and a launch asking for GPUs where none is governed refused."""

import asyncio
import json
from dataclasses import replace

import pytest
from test_daemon import GIB, FakeDriver, collect, launch, make_daemon

from governor import access
from governor.config import parse_config
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
    """The in-memory driver, remembering each cgroup's denied devices."""

    def __init__(self):
        super().__init__()
        self.denied: dict[str, tuple] = {}

    def deny_devices(self, rel, denied):
        self.denied[rel] = tuple(denied)

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
    assert again.policy.denied_devices(bob) == (GPU1,)  # still may open /dev/nvidia0 alone
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
    assert gpus.policy.denied_devices(gpus.tasks.get("1")) == (GPU1,)
    assert gpus.policy.denied_devices(gpus.tasks.get("2")) == (GPU0,)


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
