"""governor.host.nvml's ``discover`` against a fake NVML (:mod:`support.nvml`): ``gpus = "auto"``
(whole GPUs, MIG instances in place of their parent), listed device nodes, the control nodes
kept, and the :class:`Gpu` records it makes."""

import os
import stat
import sys

import pytest

from governor.errors import GovernorError
from governor.core.gpus import Gpu, GpuError, GpuInventory
from governor.host.nvml import CONTROL_NODES, NVIDIA_MAJOR, discover
from support.nvml import DRIVER_NOT_LOADED, Device, fake_nvml, two_gpus


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
