"""Device rules as limits (issue 31) on fake cgroup trees in tmp_path: the v1 driver's
``devices.deny`` / ``devices.allow`` lines and the v2 driver's device program, each diffed
against the record of what the kernel accepted, as every other limit is. The kernel's side (the
rules deny what they list) is in test_device_filter_kernel.py."""

import errno

import pytest

import governor.cgroups.v1
import governor.cgroups.v2
from governor.cgroups.limits import CgroupLimits, v1_files, v1_key
from governor.cgroups.v1 import CgroupV1Driver
from governor.cgroups.v2 import CgroupV2Driver
from governor.errors import CgroupUnsupported, CgroupWriteError

A, B, C = ("c", 241, 0), ("c", 241, 1), ("c", 241, 255)


def denying(*devices, **others):
    return CgroupLimits(devices_denied=devices, **others)


@pytest.fixture
def v1(tmp_path, monkeypatch):
    """A v1 driver over empty directories, and every (hierarchy, file, value) it writes."""
    roots = {c: tmp_path / c / "governor" for c in ("cpu", "cpuacct", "cpuset", "memory", "devices")}
    writes = []
    monkeypatch.setattr(governor.cgroups.v1, "write_file",
                        lambda directory, file, value: writes.append((directory.relative_to(tmp_path).parts[0], file,
                                                                      value)))
    return CgroupV1Driver(roots), writes


def test_v1_limits_deny_each_node_in_one_line_keyed_by_its_rule():
    lines = [(c, f, v) for c, f, v in v1_files(denying(B, A)) if c == "devices"]
    assert lines == [("devices", "devices.deny", "c 241:0 rwm"), ("devices", "devices.deny", "c 241:1 rwm")]
    assert v1_key(*lines[0]) == ("devices", "devices.deny", "c 241:0")


def test_v1_a_changed_list_denies_the_new_nodes_first_then_allows_the_old_again(v1):
    driver, writes = v1
    assert driver.apply("t", denying(A)) == ["devices.deny"]
    assert driver.apply("t", denying(A, B)) == ["devices.deny"]  # only B: A is in force already
    assert driver.apply("t", denying(B, C)) == ["devices.deny", "devices.allow"]
    assert driver.apply("t", denying(B, C)) == []
    assert writes == [("devices", "devices.deny", "c 241:0 rwm"), ("devices", "devices.deny", "c 241:1 rwm"),
                      ("devices", "devices.deny", "c 241:255 rwm"), ("devices", "devices.allow", "c 241:0 rwm")]
    assert driver.in_force("t") == {"devices.deny": "c 241:1 rwm, c 241:255 rwm"}
    driver.apply("t", CgroupLimits())
    assert writes[-2:] == [("devices", "devices.allow", "c 241:1 rwm"), ("devices", "devices.allow", "c 241:255 rwm")]
    assert driver.in_force("t") == {}


def test_v1_a_refused_rule_stays_out_of_the_record_and_is_tried_again(v1, monkeypatch):
    driver, writes = v1

    def refuse(directory, file, value):
        raise CgroupWriteError(str(directory / file), value, errno.EPERM)

    monkeypatch.setattr(governor.cgroups.v1, "write_file", refuse)
    with pytest.raises(CgroupWriteError) as refused:
        driver.apply("t", denying(A))
    assert refused.value.errno == errno.EPERM and refused.value.value == "c 241:0 rwm"
    assert driver.in_force("t") == {}
    monkeypatch.setattr(governor.cgroups.v1, "write_file", lambda directory, file, value: writes.append(value))
    assert driver.apply("t", denying(A)) == ["devices.deny"] and writes == ["c 241:0 rwm"]


def test_v1_rules_without_a_devices_hierarchy_are_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(governor.cgroups.v1, "write_file", lambda directory, file, value: None)
    driver = CgroupV1Driver({c: tmp_path / c for c in ("cpu", "cpuacct", "cpuset", "memory")})
    with pytest.raises(CgroupUnsupported, match="devices"):
        driver.apply("t", denying(A))
    assert driver.device_guard_problem() is not None


@pytest.fixture
def v2(tmp_path, monkeypatch):
    """A v2 driver over an empty directory, and every (cgroup, list) it asks the kernel for."""
    asked = []
    monkeypatch.setattr(governor.cgroups.v2, "attach_deny_program",
                        lambda directory, denied: asked.append((directory.name, tuple(denied))))
    (tmp_path / "root" / "t").mkdir(parents=True)
    return CgroupV2Driver(tmp_path / "root"), asked


def test_v2_one_program_per_list_recorded_as_its_canonical_text(v2):
    driver, asked = v2
    assert driver.apply("t", denying(C, A)) == ["device program"]
    assert driver.in_force("t") == {"device program": "c 241:0, c 241:255"}
    assert driver.apply("t", denying(A, C, A)) == []  # the same list: no program loaded again
    assert driver.apply("t", denying(A, B, C)) == ["device program"]
    assert driver.in_force("t") == {"device program": "c 241:0, c 241:1, c 241:255"}
    assert driver.apply("t", CgroupLimits()) == ["device program"]  # none: ours detached
    assert driver.in_force("t") == {}
    assert asked == [("t", (A, C)), ("t", (A, B, C)), ("t", ())]


def test_v2_a_refused_program_keeps_the_old_list_in_force_and_is_tried_again(v2, monkeypatch):
    driver, asked = v2
    driver.apply("t", denying(A))

    def refuse(directory, denied):
        raise CgroupWriteError(str(directory), "BPF device program denying c 241:0, c 241:1", errno.EPERM)

    monkeypatch.setattr(governor.cgroups.v2, "attach_deny_program", refuse)
    with pytest.raises(CgroupWriteError):
        driver.apply("t", denying(A, B))
    assert driver.in_force("t") == {"device program": "c 241:0"}
    monkeypatch.setattr(governor.cgroups.v2, "attach_deny_program", lambda directory, denied: asked.append(denied))
    assert driver.apply("t", denying(A, B)) == ["device program"]
    assert driver.in_force("t") == {"device program": "c 241:0, c 241:1"}


@pytest.mark.parametrize("device", [("a", 1, 3), ("c", -1, 0), ("c", 4096, 0), ("c", 195, -2), ("b", 8, 1 << 20),
                                    ("c", 195), "c 195:0"])
def test_limits_refuse_a_device_the_kernel_cannot_name(device):
    with pytest.raises(ValueError, match="device"):
        CgroupLimits(devices_denied=(device,))
