"""governor.host.nvml against a fake NVML: a module object put in sys.modules["pynvml"] that has only
the functions and error classes governor calls, shaped like nvidia-ml-py's (handles are opaque,
errors carry an NVML code, MIG mode is a [current, pending] list, a process's usedGpuMemory may
be None)."""

from __future__ import annotations

import os
import stat
import sys
import types
from dataclasses import dataclass, field

import pytest

from governor.errors import GovernorError
from governor.core.gpus import Gpu, GpuError, GpuInventory, GpuUse
from governor.host.nvml import CONTROL_NODES, NVIDIA_MAJOR, discover, sample_use

NOT_SUPPORTED, NOT_FOUND, INVALID_ARGUMENT, DRIVER_NOT_LOADED, GPU_IS_LOST = 3, 6, 2, 9, 15
_STRINGS = {NOT_SUPPORTED: "Not Supported", NOT_FOUND: "Not Found", INVALID_ARGUMENT: "Invalid Argument",
            DRIVER_NOT_LOADED: "Driver Not Loaded", GPU_IS_LOST: "GPU is lost"}


class NVMLError(Exception):
    value = 999

    def __init__(self, value: int | None = None):
        super().__init__()
        if value is not None:
            self.value = value

    def __str__(self):
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_NotFound(NVMLError):  # noqa: N801 - pynvml's names
    value = NOT_FOUND


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
    value = INVALID_ARGUMENT


class NVMLLibraryMismatchError(Exception):
    """Not an NVMLError in pynvml either."""


@dataclass(eq=False)
class Device:
    uuid: str | bytes
    name: str | bytes = "NVIDIA A100-SXM4-40GB"
    minor: int = 0
    mig_mode: list[int] | int = NOT_SUPPORTED  # [current, pending], or the error code GetMigMode raises
    max_mig: int = 0
    migs: dict[int, Device] = field(default_factory=dict)  # slot → MIG device
    util: int | Exception = 0
    used: int | Exception = 0
    procs: list[tuple[int, int | None]] | Exception = field(default_factory=list)
    lost: bool = False


def fake_nvml(devices: list[Device], *, init_error: int | None = None, count_error: int | None = None):
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = NVMLError
    nvml.NVMLError_NotFound = NVMLError_NotFound
    nvml.NVMLError_InvalidArgument = NVMLError_InvalidArgument
    nvml.NVMLLibraryMismatchError = NVMLLibraryMismatchError
    nvml.NVML_DEVICE_MIG_DISABLE, nvml.NVML_DEVICE_MIG_ENABLE = 0, 1
    nvml.inits = nvml.shutdowns = 0
    by_uuid = {d.uuid.decode() if isinstance(d.uuid, bytes) else d.uuid: d for d in devices}
    by_uuid.update({m.uuid: m for d in devices for m in d.migs.values()})

    def nvmlInit():
        if init_error is not None:
            raise NVMLError(init_error)
        nvml.inits += 1

    def nvmlShutdown():
        assert nvml.shutdowns < nvml.inits, "nvmlShutdown without a matching nvmlInit"
        nvml.shutdowns += 1

    def initialized():
        if nvml.inits == nvml.shutdowns:
            raise NVMLError(1)

    def nvmlDeviceGetCount():
        initialized()
        if count_error is not None:
            raise NVMLError(count_error)
        return len(devices)

    def nvmlDeviceGetHandleByIndex(index):
        initialized()
        if devices[index].lost:
            raise NVMLError(GPU_IS_LOST)
        return devices[index]

    def nvmlDeviceGetHandleByUUID(uuid):
        initialized()
        if uuid not in by_uuid:
            raise NVMLError_NotFound()
        return by_uuid[uuid]

    def value(v):
        if isinstance(v, BaseException):
            raise v
        return v

    def nvmlDeviceGetMigMode(handle):
        if isinstance(handle.mig_mode, int):
            raise NVMLError(handle.mig_mode)
        return list(handle.mig_mode)

    def nvmlDeviceGetMigDeviceHandleByIndex(handle, index):
        if index >= handle.max_mig:
            raise NVMLError_InvalidArgument()
        if index not in handle.migs:
            raise NVMLError_NotFound()
        return handle.migs[index]

    def nvmlDeviceGetMinorNumber(handle):
        return handle.minor

    def nvmlDeviceGetComputeRunningProcesses(handle):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in value(handle.procs)]

    nvml.__dict__.update(
        nvmlInit=nvmlInit, nvmlShutdown=nvmlShutdown, nvmlDeviceGetCount=nvmlDeviceGetCount,
        nvmlDeviceGetHandleByIndex=nvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByUUID=nvmlDeviceGetHandleByUUID,
        nvmlDeviceGetUUID=lambda h: h.uuid, nvmlDeviceGetName=lambda h: h.name,
        nvmlDeviceGetMinorNumber=nvmlDeviceGetMinorNumber, nvmlDeviceGetMigMode=nvmlDeviceGetMigMode,
        nvmlDeviceGetMaxMigDeviceCount=lambda h: h.max_mig,
        nvmlDeviceGetMigDeviceHandleByIndex=nvmlDeviceGetMigDeviceHandleByIndex,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=value(h.util), memory=0),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=value(h.used), total=40 << 30, free=0),
        nvmlDeviceGetComputeRunningProcesses=nvmlDeviceGetComputeRunningProcesses,
    )
    return nvml


def two_gpus() -> list[Device]:
    """GPU 0 whole (MIG not supported, old pynvml's bytes); GPU 1 with MIG on and 2 of 7 slots used."""
    mig_a = Device(uuid="MIG-1111", name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", util=NVMLError(NOT_SUPPORTED),
                   used=5 << 30, procs=[(10, 50), (12, 7)])
    mig_b = Device(uuid="MIG-2222", name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", util=NVMLError(NOT_SUPPORTED),
                   used=NVMLError(GPU_IS_LOST), procs=NVMLLibraryMismatchError("use _v2"))
    return [
        Device(uuid=b"GPU-aaaa", name=b"NVIDIA A100-SXM4-40GB", minor=0, util=50, used=1 << 30,
               procs=[(10, 100), (11, None)]),
        Device(uuid="GPU-bbbb", minor=3, mig_mode=[1, 1], max_mig=7, migs={0: mig_a, 2: mig_b}),
    ]


@pytest.fixture
def nvml(monkeypatch):
    fake = fake_nvml(two_gpus())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)


def make_node(path, major: int, minor: int) -> str:
    """A character device node at ``path``: needs root (CAP_MKNOD), else the test is skipped."""
    if os.geteuid() != 0:
        pytest.skip("creating a character device node needs root")
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(major, minor))
    except PermissionError as e:
        pytest.skip(f"mknod refused even as root (no CAP_MKNOD here): {e}")
    return str(path)


# --- discover("auto") ---------------------------------------------------------------------

def test_auto_lists_whole_gpus_and_mig_instances_in_place_of_their_parent(nvml):
    inventory = discover("auto", control=())

    assert inventory == GpuInventory(
        gpus=(Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, "GPU-aaaa", "NVIDIA A100-SXM4-40GB"),
              Gpu(1, "/dev/nvidia3", NVIDIA_MAJOR, 3, "MIG-1111", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", mig_parent=3),
              Gpu(2, "/dev/nvidia3", NVIDIA_MAJOR, 3, "MIG-2222", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", mig_parent=3)),
        control=(), source="nvml", notes=("MIG enabled on GPU 1: 2 instances",))
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_auto_offers_a_gpu_whose_mig_mode_is_only_pending_whole(monkeypatch):
    # current 0, pending 1: MIG is on only after a reset, so CUDA still sees the whole GPU.
    fake = fake_nvml([Device(uuid="GPU-cccc", minor=1, mig_mode=[0, 1], max_mig=7)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    assert discover("auto", control=()).gpus == (Gpu(0, "/dev/nvidia1", NVIDIA_MAJOR, 1, "GPU-cccc",
                                                     "NVIDIA A100-SXM4-40GB"),)


def test_auto_leaves_out_a_gpu_nvml_cannot_describe_and_numbers_the_rest_densely(monkeypatch):
    fake = fake_nvml([Device(uuid="GPU-lost", lost=True), Device(uuid="GPU-ok", minor=1)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    inventory = discover("auto", control=())

    assert [(g.index, g.uuid) for g in inventory.gpus] == [(0, "GPU-ok")]
    assert inventory.notes == ("GPU 0 left out: NVML: GPU is lost",)


def test_auto_without_pynvml_says_what_to_install(no_nvml):
    with pytest.raises(GpuError) as caught:
        discover("auto")

    message = str(caught.value)
    assert message.startswith('[capacity] gpus = "auto": NVML is not available: install nvidia-ml-py')
    assert "pip install 'drf-governor[nvidia]'" in message
    assert isinstance(caught.value, GovernorError) and isinstance(caught.value, ValueError)


def test_auto_when_nvml_init_fails_gives_nvmls_message_and_does_not_shut_down(monkeypatch):
    fake = fake_nvml(two_gpus(), init_error=DRIVER_NOT_LOADED)
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    with pytest.raises(GpuError, match=r'^\[capacity\] gpus = "auto": nvmlInit failed: Driver Not Loaded$'):
        discover("auto")
    assert fake.shutdowns == 0


@pytest.mark.parametrize("devices", [
    pytest.param([], id="no-gpus"),
    pytest.param([Device(uuid="GPU-m", mig_mode=[1, 1], max_mig=7)], id="mig-without-instances"),
])
def test_auto_with_no_usable_gpu_is_refused_after_shutting_nvml_down(monkeypatch, devices):
    fake = fake_nvml(devices)
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    with pytest.raises(GpuError, match=r'^\[capacity\] gpus = "auto": no GPU found'):
        discover("auto")
    assert (fake.inits, fake.shutdowns) == (1, 1)


def test_auto_shuts_nvml_down_when_counting_fails(monkeypatch):
    fake = fake_nvml(two_gpus(), count_error=DRIVER_NOT_LOADED)
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    with pytest.raises(GpuError, match="NVML cannot count the GPUs: Driver Not Loaded"):
        discover("auto")
    assert (fake.inits, fake.shutdowns) == (1, 1)


def test_a_string_other_than_auto_is_refused(nvml):
    with pytest.raises(GpuError, match=r"""^\[capacity\] gpus = '/dev/nvidia0': expected "auto" or a list"""):
        discover("/dev/nvidia0")


# --- discover([paths]) --------------------------------------------------------------------

def test_listed_nodes_get_their_uuid_from_nvml_by_minor_number(nvml, tmp_path):
    first = make_node(tmp_path / "nvidia3", NVIDIA_MAJOR, 3)
    second = make_node(tmp_path / "nvidia0", NVIDIA_MAJOR, 0)
    unknown = make_node(tmp_path / "nvidia9", NVIDIA_MAJOR, 9)

    inventory = discover([first, second, unknown], control=())

    assert inventory.gpus == (Gpu(0, first, NVIDIA_MAJOR, 3, "GPU-bbbb", "NVIDIA A100-SXM4-40GB"),
                              Gpu(1, second, NVIDIA_MAJOR, 0, "GPU-aaaa", "NVIDIA A100-SXM4-40GB"),
                              Gpu(2, unknown, NVIDIA_MAJOR, 9, None, ""))
    assert inventory.source == "listed"
    assert inventory.notes == (f"{unknown}: NVML knows no GPU at 195:9: CUDA is told its minor number",)
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_listed_nodes_without_nvml_have_no_uuid_and_a_note_says_so(no_nvml, tmp_path):
    node = make_node(tmp_path / "nvidia1", NVIDIA_MAJOR, 1)

    inventory = discover([node], control=())

    assert inventory.gpus == (Gpu(0, node, NVIDIA_MAJOR, 1, None),)
    assert inventory.gpus[0].visible_id() == "1"
    assert len(inventory.notes) == 1 and inventory.notes[0].startswith("NVML is not available")


def test_listed_nodes_when_nvml_init_fails_have_no_uuid(monkeypatch, tmp_path):
    fake = fake_nvml(two_gpus(), init_error=DRIVER_NOT_LOADED)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    node = make_node(tmp_path / "nvidia0", NVIDIA_MAJOR, 0)

    inventory = discover([node], control=())

    assert inventory.gpus[0].uuid is None
    assert inventory.notes == ("nvmlInit failed (Driver Not Loaded): CUDA is told the listed GPUs by minor number",)


def test_a_listed_node_of_another_driver_is_kept_without_asking_nvml_about_its_minor(nvml):
    # /dev/null is 1:3 on every Linux: a character device anyone can stat.
    inventory = discover(["/dev/null"], control=())

    assert inventory.gpus == (Gpu(0, "/dev/null", 1, 3, None),)


def test_a_listed_regular_file_is_refused_with_its_path(nvml, tmp_path):
    path = tmp_path / "nvidia9"
    path.write_text("")

    with pytest.raises(GpuError, match=rf"^\[capacity\] gpus: {path}: not a character device$"):
        discover([str(path)])


def test_a_listed_missing_path_is_refused_with_its_path(nvml, tmp_path):
    path = tmp_path / "nvidia9"

    with pytest.raises(GpuError, match=rf"^\[capacity\] gpus: {path}: cannot stat: No such file or directory$"):
        discover(["/dev/null", str(path)])


def test_a_node_listed_twice_is_refused(nvml):
    with pytest.raises(GpuError, match=r"^\[capacity\] gpus: /dev/null: listed twice$"):
        discover(["/dev/null", "/dev/zero", "/dev/null"])


def test_two_paths_to_one_node_are_refused(nvml, tmp_path):
    link = tmp_path / "gpu0"
    link.symlink_to("/dev/null")

    with pytest.raises(GpuError, match=rf"^\[capacity\] gpus: {link}: the same device as /dev/null \(1:3\)$"):
        discover(["/dev/null", str(link)])


def test_an_empty_list_is_refused(nvml):
    with pytest.raises(GpuError, match=r"^\[capacity\] gpus: no GPU listed$"):
        discover([])


# --- control nodes ------------------------------------------------------------------------

def test_only_control_nodes_that_exist_as_character_devices_are_kept(nvml, tmp_path):
    regular = tmp_path / "nvidiactl"
    regular.write_text("")

    inventory = discover("auto", control=["/dev/null", str(tmp_path / "nvidia-uvm"), str(regular)])

    assert inventory.control == (("/dev/null", 1, 3),)
    assert f"control node {regular} is not a character device: left out" in inventory.notes


def test_control_defaults_to_nvidias_control_nodes(nvml, monkeypatch):
    asked = []
    real_stat = os.stat

    def stat_(path, *args, **kwargs):
        asked.append(path)
        return real_stat("/dev/null")

    monkeypatch.setattr("governor.host.nvml.os.stat", stat_)

    inventory = discover("auto")

    assert tuple(asked) == CONTROL_NODES
    assert inventory.control == tuple((path, 1, 3) for path in CONTROL_NODES)


# --- Gpu ----------------------------------------------------------------------------------

def test_visible_id_is_the_uuid_else_the_minor_number():
    assert Gpu(0, "/dev/nvidia2", NVIDIA_MAJOR, 2, "GPU-aaaa").visible_id() == "GPU-aaaa"
    assert Gpu(0, "/dev/nvidia2", NVIDIA_MAJOR, 2, "MIG-1111", mig_parent=2).visible_id() == "MIG-1111"
    assert Gpu(0, "/dev/nvidia2", NVIDIA_MAJOR, 2, None).visible_id() == "2"


def test_to_json_names_mig_parent_only_for_a_mig_instance():
    assert Gpu(1, "/dev/nvidia2", NVIDIA_MAJOR, 2, "GPU-aaaa", "A100").to_json() == {
        "index": 1, "node": "/dev/nvidia2", "uuid": "GPU-aaaa", "name": "A100"}
    assert Gpu(2, "/dev/nvidia2", NVIDIA_MAJOR, 2, "MIG-1111", "A100 MIG", mig_parent=2).to_json() == {
        "index": 2, "node": "/dev/nvidia2", "uuid": "MIG-1111", "name": "A100 MIG", "mig_parent": 2}
    assert Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, None).to_json()["uuid"] is None


# --- sample_use ---------------------------------------------------------------------------

def test_sample_use_reports_utilization_memory_and_per_process_memory(nvml):
    inventory = discover("auto", control=())

    use = sample_use(inventory)

    # GPU 0 busy half the time; the MIG instances have no utilization (NotSupported), the
    # second no memory (lost) and no process list (library mismatch): left out, not raised.
    assert use == GpuUse(utilization={0: 0.5}, memory_used={0: 1 << 30, 1: 5 << 30},
                         process_memory={10: 150, 12: 7})
    assert nvml.inits == nvml.shutdowns == 2


def test_sample_use_leaves_out_a_gpu_nvml_no_longer_knows(nvml):
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, "GPU-gone"),
                                   Gpu(1, "/dev/nvidia0", NVIDIA_MAJOR, 0, "GPU-aaaa")), control=(), source="nvml")

    use = sample_use(inventory)

    assert use is not None
    assert (use.utilization, use.memory_used) == ({1: 0.5}, {1: 1 << 30})


def test_sample_use_is_none_without_nvml(no_nvml):
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, "GPU-aaaa"),), control=(), source="nvml")

    assert sample_use(inventory) is None


def test_sample_use_is_none_without_uuids_and_does_not_start_nvml(nvml):
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, None),), control=(), source="listed")

    assert sample_use(inventory) is None
    assert nvml.inits == 0


def test_sample_use_is_none_when_nvml_init_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(two_gpus(), init_error=DRIVER_NOT_LOADED))
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, "GPU-aaaa"),), control=(), source="nvml")

    assert sample_use(inventory) is None
