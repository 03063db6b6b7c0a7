"""A device class is a registry entry plus a provider (issue 45, point 3): NVIDIA's GPUs are
one provider registered against the registry's ``gpu`` entry, and a stand-in second class
(:mod:`support.standin_device`, char nodes on a local major) registered through the same
tables is admitted and denied outside governor's tasks by the guard, beside the GPUs or alone,
with no GPU-named code touched. On the in-memory driver, the guard's kernel calls recorded."""

import pytest
from support import standin_device
from support.standin_device import FPGA0, FPGA1, NODES
from support.daemons import GIB, launch, make_daemon, on_loop
from support.gpus import CONFIG as GPU_CONFIG, CONTROL, GPU0, GPU1, INVENTORY, DeviceDriver

from governor.config import resources
from governor.core.devices import DeviceInventory, Device, denied_nodes
from governor.daemon import effector
from governor.errors import RequestError
from governor.host import devices, nvml

CONFIG = """
[capacity]
cpu = 2
memory = "4G"
[groups.A]
users = ["root"]
[sessions]
enabled = false
"""


@pytest.fixture
def guard_calls(monkeypatch):
    done = []
    monkeypatch.setattr(effector, "put_guard", lambda plan, denied: done.append(("put", tuple(denied))) or [])
    monkeypatch.setattr(effector, "take_guard", lambda plan, denied: done.append(("take", tuple(denied))) or [])
    return done


def test_nvidia_is_one_provider_registered_against_the_registry_gpu_entry():
    assert devices.providers() == (nvml.PROVIDER,)
    assert resources.find(nvml.PROVIDER.entry).kind is resources.ResourceKind.DEVICE
    assert nvml.NVIDIA_MAJOR == 195 and "/dev/nvidiactl" in nvml.CONTROL_NODES


def test_a_provider_of_no_registry_entry_is_refused(monkeypatch):
    monkeypatch.setattr(devices, "PROVIDERS", (*devices.PROVIDERS, standin_device.PROVIDER))
    with pytest.raises(ValueError, match="device providers for fpga: no device entry of that name"):
        devices.providers()


def test_a_class_inventory_denies_its_devices_and_control_nodes_each_once():
    fpgas = DeviceInventory((Device(0, "/dev/fpga0", 240, 0),), control=(("/dev/fpgactl", 240, 255),))
    assert denied_nodes([fpgas, INVENTORY, fpgas]) == [GPU0, GPU1, CONTROL, FPGA0, ("c", 240, 255)]


def test_a_standin_class_alone_is_admitted_and_denied_outside_the_tasks_by_the_guard(tmp_path, monkeypatch,
                                                                                      guard_calls):
    standin_device.register(NODES, monkeypatch.setattr)
    daemon = make_daemon(tmp_path, CONFIG, driver=DeviceDriver())
    assert devices.providers() == (nvml.PROVIDER, standin_device.PROVIDER)
    assert daemon.policy.gpus is None and daemon.policy.capacity["fpga"] == 2
    daemon.gpu_guard.start()
    assert guard_calls == [("put", (FPGA0, FPGA1))]
    assert daemon.observation.status()["daemon"]["gpu_guard"]["kind"] == "tasks"
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, fpga=2)
    assert [task.demand["fpga"] for task in daemon.tasks] == [2]
    with pytest.raises(RequestError) as refused:  # both held: a third waits
        launch(daemon, 101, group="A", cpu=0.1, memory=GIB // 8, fpga=1, wait=False)
    assert refused.value.code == "would_wait"
    launch(daemon, 102, group="A", cpu=0.1, memory=GIB // 8)
    # The task asking for both holds both; a task asking none is denied the class.
    assert daemon.hierarchy.driver.denied == {"A/task-3": (FPGA0, FPGA1)}
    daemon.gpu_guard.stop()
    assert guard_calls[-1] == ("take", (FPGA0, FPGA1))


def test_a_standin_class_beside_the_gpus_is_denied_with_them(tmp_path, monkeypatch, guard_calls):
    standin_device.register(NODES, monkeypatch.setattr)
    daemon = make_daemon(tmp_path, GPU_CONFIG, driver=DeviceDriver(), find_gpus=lambda spec, control: INVENTORY)
    assert daemon.policy.capacity["gpu"] == 2 and daemon.policy.capacity["fpga"] == 2
    daemon.gpu_guard.start()
    assert guard_calls == [("put", (GPU0, GPU1, CONTROL, FPGA0, FPGA1))]
    launch(daemon, 100, group="A", cpu=0.1, memory=GIB // 8, fpga=1)
    launch(daemon, 101, group="A", cpu=0.1, memory=GIB // 8, gpu=1)
    assert daemon.hierarchy.driver.denied == {"A/task-1": (GPU0, GPU1, CONTROL, FPGA1),  # placed: FPGA 0 alone
                                              "A/task-2": (GPU1, FPGA0, FPGA1)}


def test_a_restart_readopts_a_standin_holder_with_its_access_and_counts_what_it_holds(tmp_path, monkeypatch):
    standin_device.register(NODES, monkeypatch.setattr)
    driver = DeviceDriver()
    first = make_daemon(tmp_path, CONFIG, driver=driver)
    launch(first, 100, group="A", cpu=0.1, memory=GIB // 8, fpga=2)
    again = make_daemon(tmp_path, CONFIG, driver=driver)
    on_loop(again, lambda: again.recovery.readopt())
    assert [task.demand["fpga"] for task in again.tasks] == [2]
    assert "A/task-1" not in driver.denied  # its record's demand gives it the class again
    with pytest.raises(RequestError) as refused:
        launch(again, 101, group="A", cpu=0.1, memory=GIB // 8, fpga=1, wait=False)
    assert refused.value.code == "would_wait"
