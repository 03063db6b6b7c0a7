"""Every device class is placed device by device (issue 45, point 3): the stand-in second class
(:mod:`support.standin_device`) gets one device of its own per unit asked, is denied the others,
drains before a device is handed on, and is found again by identity at a restart and a reload,
through the same code as the GPUs with no GPU-named code touched. On the in-memory driver, with
a fake /proc for the hand-over."""

import asyncio
import json
import os

import pytest
from support import standin_device
from support.standin_device import FPGA0, FPGA1, NODES
from support.daemons import CONFIG, GIB, launch, make_daemon, on_loop
from support.gpus import DeviceDriver
from support.waits import until

from rich.console import Console

from governor.cli.status_view import status_renderables
from governor.config.load import parse_config
from governor.core.device_identity import DeviceIdentity
from governor.errors import GovernorError, RequestError
from governor.wire.protocol import LaunchRequest, Peer
from governor.wire.status_json import decode

NULL = (os.major(os.stat("/dev/null").st_rdev), os.minor(os.stat("/dev/null").st_rdev))


def test_each_holder_gets_a_device_of_its_own_and_is_denied_the_others(tmp_path, monkeypatch):
    standin_device.register(NODES, monkeypatch.setattr)
    daemon = make_daemon(tmp_path, CONFIG, driver=DeviceDriver())
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, fpga=1)
    launch(daemon, 101, group="B", cpu=0.1, memory=GIB // 8, fpga=1)
    launch(daemon, 102, group="B", cpu=0.1, memory=GIB // 8)
    assert [task.devices for task in daemon.tasks] == [{"fpga": (0,)}, {"fpga": (1,)}, {}]
    assert daemon.tasks.get("1").device_identities == {"fpga": (DeviceIdentity("240:0"),)}
    assert daemon.hierarchy.driver.denied == {"A/task-1": (FPGA1,), "B/task-2": (FPGA0,), "B/task-3": (FPGA0, FPGA1)}
    assert daemon.tasks.free("fpga", 2) == []
    with pytest.raises(RequestError) as refused:
        launch(daemon, 103, group="A", cpu=0.1, memory=GIB // 8, fpga=1, wait=False)
    assert refused.value.code == "would_wait"
    status = daemon.observation.status()
    assert "gpus" not in status and status["devices"] == {"fpga": [
        {"index": 0, "node": "/dev/fpga0", "task": "1", "group": "A", "user": "root", "draining": False},
        {"index": 1, "node": "/dev/fpga1", "task": "2", "group": "B", "user": "root", "draining": False}]}
    console = Console(width=100, record=True)
    console.print(*status_renderables(decode(status), now=0.0))
    shown = console.export_text()
    assert "FPGAs: 2 of 2 held" in shown and "/dev/fpga1" in shown, shown


def test_a_freed_device_drains_until_no_other_process_holds_it_then_goes_to_the_next(tmp_path, monkeypatch):
    standin_device.register([("/dev/null", *NULL)], monkeypatch.setattr)
    daemon = make_daemon(tmp_path, CONFIG, driver=DeviceDriver())
    proc = tmp_path / "proc"
    (proc / "101" / "fd").mkdir(parents=True)
    ended = []
    daemon.handover.proc, daemon.handover.listed = proc, lambda entry, inventory, indices: None
    daemon.handover.kill = lambda holder: ended.append(holder.pid)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, fpga=1)
    launch(daemon, 101, group="A", cpu=0.1, memory=GIB // 8)
    (proc / "101" / "fd" / "5").symlink_to("/dev/null")  # task 2 was passed the device's open fd

    async def scenario():
        waiting = daemon.requests.stream(LaunchRequest(pid=102, group="B", command=("w",),
                                                       demand={"cpu": 0.1, "memory": GIB // 8, "fpga": 1}),
                                         Peer(pid=102, uid=0, gid=0))
        assert "queued" in await waiting.__anext__()
        daemon.hierarchy.driver.procs["A/task-1"] = []
        daemon.exits.check(["1"], "exit")
        await until(lambda: ended, "the holder to be ended")
        assert daemon.tasks.draining() == {("fpga", 0): "1"} and daemon.tasks.get("3") is None
        [device] = daemon.observation.status()["devices"]["fpga"]
        assert device["draining"] and device["task"] is None  # an operator sees why task 3 waits
        events = [e["message"] for e in daemon.observation.status()["events"] if e["kind"] == "device_holder_ended"]
        assert events == ["a process (user root, task 2) ended: it held FPGA 0 open after task 1 ended"]
        (proc / "101" / "fd" / "5").unlink()  # the process is gone
        [_ async for _ in waiting]
        assert daemon.tasks.get("3").devices == {"fpga": (0,)} and daemon.tasks.draining() == {}
        kinds = [e["kind"] for e in daemon.observation.status()["events"]]
        assert "device_free" in kinds and not {"gpu_free", "gpu_drained"} & set(kinds)  # a GPU's kinds, a GPU's alert

    asyncio.run(scenario())


def test_a_restart_finds_a_holders_device_by_identity_where_the_list_moved_it(tmp_path, monkeypatch):
    standin_device.register(NODES, monkeypatch.setattr)
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, fpga=1)  # /dev/fpga0, index 0
    standin_device.register(NODES[::-1], monkeypatch.setattr)  # the list reordered: fpga0 is index 1
    again = make_daemon(tmp_path, CONFIG, driver=driver)
    on_loop(again, lambda: again.recovery.readopt())
    assert again.tasks.get("1").devices == {"fpga": (1,)}
    assert again.tasks.get("1").device_identities == {"fpga": (DeviceIdentity("240:0"),)}
    assert driver.denied["A/task-1"] == (FPGA1,)  # still /dev/fpga0 alone
    launch(again, 101, group="B", cpu=0.1, memory=GIB // 8, fpga=1)
    assert again.tasks.get("2").devices == {"fpga": (0,)} and driver.denied["B/task-2"] == (FPGA0,)


def test_a_restart_or_reload_that_drops_a_held_device_is_refused_naming_it(tmp_path, monkeypatch):
    standin_device.register(NODES, monkeypatch.setattr)
    driver = DeviceDriver()
    daemon = make_daemon(tmp_path, CONFIG, driver=driver)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, fpga=1)
    standin_device.register(NODES[1:], monkeypatch.setattr)
    daemon.reloads.load_config = lambda: parse_config(CONFIG, "test.toml")
    with pytest.raises(RequestError) as refused:
        daemon.reloads.reload("fpga0 dropped")
    assert refused.value.code == "invalid_config" and refused.value.message == (
        "test.toml: the stand-in devices: FPGA 0 (/dev/fpga0, device 240:0) is held by task 1 and this config "
        "drops it; change it once that task has ended")
    assert daemon.tasks.get("1").devices == {"fpga": (0,)}  # the config in force stays
    with pytest.raises(GovernorError, match="task 1 .group A. holds FPGA 240:0 and this config drops it"):
        make_daemon(tmp_path, CONFIG, driver=driver).recovery.load()


def test_a_record_asking_for_a_class_it_names_no_device_of_is_not_readopted_holding_none(tmp_path, monkeypatch):
    # A record of a release that opened a class whole to its askers: the task must not be taken
    # back holding none (the start-up drain would end its processes, another task get its devices).
    standin_device.register(NODES, monkeypatch.setattr)
    driver = DeviceDriver()
    daemon = make_daemon(tmp_path, CONFIG, driver=driver)
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, fpga=1)
    path = tmp_path / "state" / "1.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "devices"}))
    with pytest.raises(GovernorError, match="task 1 .group A. asked for 1 FPGA and its record names none"):
        make_daemon(tmp_path, CONFIG, driver=driver).recovery.load()


def test_a_device_a_reload_starts_governing_drains_before_it_is_handed_out(tmp_path, monkeypatch):
    # Ungoverned, any process could open it: it is looked at as every free device is when the
    # daemon starts. A device governed before, free or held, is not.
    standin_device.register(NODES[:1], monkeypatch.setattr)
    daemon = make_daemon(tmp_path, CONFIG, driver=DeviceDriver())
    daemon.handover.proc, daemon.handover.listed = tmp_path / "proc", lambda entry, inventory, indices: None
    (tmp_path / "proc").mkdir()
    on_loop(daemon, lambda: daemon.handover.start())
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, fpga=1)
    monkeypatch.setattr(standin_device, "_nodes", list(NODES))  # /dev/fpga1 added
    daemon.reloads.load_config = lambda: parse_config(CONFIG, "test.toml")

    async def scenario():
        daemon.reloads.reload("fpga1 added")
        assert daemon.tasks.draining() == {("fpga", 1): ""}
        await until(lambda: not daemon.tasks.draining(), "the new device to drain")

    asyncio.run(scenario())
    launch(daemon, 101, group="B", cpu=0.1, memory=GIB // 8, fpga=1)
    assert daemon.tasks.get("2").devices == {"fpga": (1,)}
