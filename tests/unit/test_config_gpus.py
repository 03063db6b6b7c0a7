"""``capacity.gpus`` and ``capacity.gpu_control`` (issue 26): checked with the key named, a
``gpu`` resource in the capacity and the demand, and the GPUs handed to CUDA by ``governor run``."""

import json
import os

import pytest

from governor.cli.become_task import hand_gpus
from governor.config.load import parse_config
from governor.config.gpu_rules import GpuGuardRules
from governor.errors import ConfigError
from governor.core.device_identity import DeviceIdentity, DeviceNotFound, locate
from governor.core.gpus import Gpu, GpuInventory
from governor.core.state import Task
from governor.core.task_record import task_fields
from governor.core.task_record import record_of
from governor.wire.reply_types import Started

BASE = '[groups.A]\nusers = ["root"]\n[capacity]\ncpu = 4\nmemory = "8G"\n'


def test_gpus_are_auto_or_listed_nodes_and_add_a_gpu_resource():
    auto = parse_config(BASE + 'gpus = "auto"\n', "g.toml")
    assert auto.gpus == "auto" and auto.gpu_control is None
    assert auto.resources == ("cpu", "memory", "gpu", "pids")
    assert auto.capacity(8, 16 << 30, gpus=4)["gpu"] == 4
    listed = parse_config(BASE + 'gpus = ["/dev/nvidia0", "/scratch/nvidia1"]\ngpu_control = []\n', "g.toml")
    assert listed.gpus == ("/dev/nvidia0", "/scratch/nvidia1") and listed.gpu_control == ()
    assert listed.task_demand(gpu=2)["gpu"] == 2 and "gpu" not in listed.task_demand()
    plain = parse_config(BASE, "g.toml")
    assert plain.gpus is None and "gpu" not in plain.capacity(8, 16 << 30, gpus=4)


@pytest.mark.parametrize("line, key, words", [
    ('gpus = "all"', "capacity.gpus", 'must be "auto" or a non-empty list'),
    ("gpus = []", "capacity.gpus", "non-empty list"),
    ("gpus = 2", "capacity.gpus", "non-empty list"),
    ('gpus = ["nvidia0"]', "capacity.gpus[0]", "absolute path"),
    ('gpus = ["/dev/../dev/nvidia0"]', "capacity.gpus[0]", "normalised"),
    ('gpus = ["/dev/nvidia0", "/dev/nvidia0"]', "capacity.gpus[1]", "listed twice"),
    ('gpu_control = ["/dev/nvidiactl"]', "capacity.gpu_control", "no GPU is governed"),
    ('gpus = "auto"\ngpu_control = "/dev/nvidiactl"', "capacity.gpu_control", "must be a list"),
])
def test_bad_gpu_keys_are_refused_naming_the_key(line, key, words):
    with pytest.raises(ConfigError) as refused:
        parse_config(BASE + line + "\n", "g.toml")
    assert refused.value.key == key and words in str(refused.value)


def parsed(record: dict) -> Task:
    return Task(**task_fields("7", json.dumps(record).encode()))


def test_a_records_gpus_survive_by_identity_and_bad_ones_are_refused():
    held = (DeviceIdentity("195:2", "GPU-cccc"), DeviceIdentity("240:3"))
    task = Task("7", "A", 100, 0, "root", ("train",), {"cpu": 1.0, "memory": 1e9, "gpu": 2.0}, 1.0,
                devices={"gpu": (2, 3)}, device_identities={"gpu": held})
    record = record_of(task)
    assert record["gpus"] == [{"device": "195:2", "uuid": "GPU-cccc"}, {"device": "240:3", "uuid": None}]
    assert "devices" not in record  # no other class held: a record an earlier release reads as before
    again = parsed(record)
    assert again.device_identities == {"gpu": held} and again.devices == {}  # indices come at re-adoption
    old = {k: v for k, v in record.items() if k != "gpus"}
    assert parsed(old).devices == parsed(old).device_identities == {}
    older = parsed({**record, "gpus": [2, 3]})  # an older governor's record: indices
    assert older.devices == {"gpu": (2, 3)} and older.device_identities == {}
    for bad in ([1, 1], [-1], [1.5], "0", [5000], [0, {"device": "195:0", "uuid": None}],
                [{"device": "195:0"}], [{"device": "nvidia0", "uuid": None}], [{"device": "195:0", "uuid": 7}],
                [{"device": "195:0", "uuid": None}, {"device": "195:0", "uuid": None}]):
        with pytest.raises(ValueError, match="gpus"):
            parsed({**record, "gpus": bad})


def test_a_records_devices_of_another_class_are_kept_by_identity_beside_its_gpus():
    gpus, fpgas = (DeviceIdentity("195:0", "GPU-aaaa"),), (DeviceIdentity("240:1"), DeviceIdentity("240:0"))
    task = Task("7", "A", 100, 0, "root", ("train",), {"cpu": 1.0, "memory": 1e9, "gpu": 1.0, "fpga": 2.0}, 1.0,
                devices={"gpu": (0,), "fpga": (1, 0)}, device_identities={"gpu": gpus, "fpga": fpgas})
    record = record_of(task)
    assert record["gpus"] == [{"device": "195:0", "uuid": "GPU-aaaa"}]
    assert record["devices"] == {"fpga": [{"device": "240:1", "uuid": None}, {"device": "240:0", "uuid": None}]}
    assert parsed(record).device_identities == {"gpu": gpus, "fpga": fpgas}
    for bad in ([], {"fpga": []}, {"fpga": [0]}, {"fpga": "240:0"}, {"gpu": [{"device": "195:0", "uuid": None}]},
                {"fpga": [{"device": "240:0", "uuid": None}] * 2}, {"no such": [{"device": "240:0", "uuid": None}]}):
        with pytest.raises(ValueError, match="devices"):
            parsed({**record, "devices": bad})


def test_run_hands_the_tasks_gpus_to_cuda(monkeypatch):
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    hand_gpus(Started("7", "A", "/sys/fs/cgroup/A/7", {}, gpus=()))
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    hand_gpus(Started("7", "A", "/sys/fs/cgroup/A/7", {}, gpus=("GPU-aaaa", "GPU-bbbb")))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == os.environ["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa,GPU-bbbb"
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_held_gpu_is_found_by_uuid_wherever_it_is_else_by_device_number_and_never_guessed():
    moved = (Gpu(0, "/dev/nvidia3", 195, 3, "GPU-aaaa"), Gpu(1, "/dev/nvidia0", 195, 0, "GPU-zzzz"))
    assert locate((DeviceIdentity("195:0", "GPU-aaaa"),), moved, "GPU") == (
        (0,), (DeviceIdentity("195:3", "GPU-aaaa"),))
    learned = (Gpu(0, "/dev/nvidia1", 195, 1, None), Gpu(1, "/dev/nvidia0", 195, 0, "GPU-aaaa"))
    assert locate((DeviceIdentity("195:0"),), learned, "GPU") == (
        (1,), (DeviceIdentity("195:0", "GPU-aaaa"),))  # NVML knows it now
    mig = (Gpu(0, "/dev/nvidia0", 195, 0, "MIG-1", mig_parent=0), Gpu(1, "/dev/nvidia0", 195, 0, "MIG-2", mig_parent=0))
    assert locate((DeviceIdentity("195:0", "MIG-2"),), mig, "GPU")[0] == (1,)
    with pytest.raises(DeviceNotFound) as ambiguous:
        locate((DeviceIdentity("195:0"),), mig, "GPU")  # which instance? not guessed
    assert ambiguous.value.candidates == 2
    with pytest.raises(DeviceNotFound, match="GPU 195:1 \\(GPU-bbbb\\) is not in the inventory"):
        locate((DeviceIdentity("195:1", "GPU-bbbb"),), moved, "GPU")


def test_the_gpu_guard_defaults_to_where_sessions_start_and_takes_host_or_tasks():
    assert parse_config(BASE, "g.toml").gpu_guard == GpuGuardRules("sessions", ("user.slice",))
    stand_in = parse_config(BASE + 'gpu_guard_parents = ["test-root/user.slice", "x.slice"]\n', "g.toml")
    assert stand_in.gpu_guard == GpuGuardRules("sessions", ("test-root/user.slice", "x.slice"))
    assert parse_config(BASE + 'gpu_guard = "host"\n', "g.toml").gpu_guard.kind == "host"
    assert parse_config(BASE + 'gpu_guard = "tasks"\n', "g.toml").gpu_guard.kind == "tasks"


@pytest.mark.parametrize("lines, key, words", [
    ('gpu_guard = "everything"', "capacity.gpu_guard", "must be one of 'sessions', 'host', 'tasks'"),
    ('gpu_guard = "host"\ngpu_guard_parents = ["user.slice"]', "capacity.gpu_guard_parents", 'no effect with gpu_guard = "host"'),
    ('gpu_guard_parents = "user.slice"', "capacity.gpu_guard_parents", "must be a list of cgroup paths"),
    ('gpu_guard_parents = ["/user.slice"]', "capacity.gpu_guard_parents[0]", "relative to the cgroup mount"),
    ('gpu_guard_parents = ["a", "../b"]', "capacity.gpu_guard_parents[1]", "relative to the cgroup mount"),
    ('gpu_guard_parents = [3]', "capacity.gpu_guard_parents[0]", "got 3"),
])
def test_a_bad_gpu_guard_is_refused_naming_the_key(lines, key, words):
    with pytest.raises(ConfigError) as refused:
        parse_config(BASE + lines + "\n", "g.toml")
    assert refused.value.key == key and words in str(refused.value), str(refused.value)


def guard_report(monkeypatch, tmp_path, text):
    """check-config's GPU-guard lines for ``text`` on a fake v2 mount holding user.slice, with
    nvidia-persistenced (pid 812) holding a GPU node."""
    from governor.cgroups import detect
    from governor.host import openfiles
    from governor.cgroups.versions import VERSIONS
    from governor.cli import check_config_gpus

    (tmp_path / "user.slice").mkdir()
    monkeypatch.setattr(detect, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(openfiles, "node_holders", lambda numbers: {812: {(195, 0)}})
    monkeypatch.setattr(openfiles, "process_name", lambda pid: "nvidia-persistenced")
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", 195, 0, None),), control=(), source="listed")
    return check_config_gpus.gpu_guard_report(parse_config(BASE + text, "g.toml"), inventory, VERSIONS["v2"])


def test_check_config_says_where_the_gpu_guard_is_and_what_it_leaves(monkeypatch, tmp_path):
    lines = guard_report(monkeypatch, tmp_path, 'gpu_guard_parents = ["user.slice", "gone.slice"]\n')
    assert lines[0] == '  outside governor\'s tasks (gpu_guard = "sessions"):'
    assert lines[1] == (f"    GPU and control nodes denied on {tmp_path / 'user.slice'} (a BPF device program named "
                        "gov_gpu_guard; descendants cannot allow them)")
    assert lines[2] == f"    note: {tmp_path / 'gone.slice'} does not exist here: not guarded"
    assert lines[3].endswith("(processes outside governor are left alone): nvidia-persistenced (pid 812)")


def test_check_config_says_plainly_that_sessions_off_leave_gpus_open(monkeypatch, tmp_path):
    lines = guard_report(monkeypatch, tmp_path, "[sessions]\nenabled = false\n")
    assert lines[0] == '  outside governor\'s tasks (gpu_guard = "sessions", sessions off):'
    assert lines[1].startswith("    processes outside governor's tasks are NOT kept from GPUs")
    assert 'gpu_guard = "host" denies them' in lines[1]
