"""Device rules as limits (issue 31) on fake cgroup trees in tmp_path: the v1 driver's
``devices.deny`` / ``devices.allow`` lines and the v2 driver's device program, each diffed
against the record of what the kernel accepted, as every other limit is. The kernel's side (the
rules deny what they list) is in test_device_filter_kernel.py."""

import errno

import pytest

import governor.cgroups.v1
import governor.cgroups.v1_cgroup
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
    def write(directory, file, value):
        writes.append((directory.relative_to(tmp_path).parts[0], file, value))

    monkeypatch.setattr(governor.cgroups.v1, "write_file", write)
    monkeypatch.setattr(governor.cgroups.v1_cgroup, "write_file", write)
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


def test_v1_a_cgroup_first_given_no_rules_is_reset_to_its_parents_rules(v1):
    # Review of main, finding 3: after a restart the record is empty, so a task whose list is
    # now empty kept the devices.deny lines the daemon before wrote (devices.list, which lists no
    # denial while a cgroup allows by default, cannot say which): "a" to devices.allow drops them.
    driver, writes = v1
    driver.apply("t", CgroupLimits())
    assert writes == [("devices", "devices.allow", "a")] and driver.in_force("t") == {}
    driver.apply("t", CgroupLimits(cpu_weight=50))  # once per cgroup: the rules are known now
    assert [w for w in writes if w[0] == "devices"] == [("devices", "devices.allow", "a")]
    writes.clear()
    driver.apply("u", denying(A))  # something to deny: never allow all first, not even for a moment
    assert writes == [("devices", "devices.deny", "c 241:0 rwm")]


@pytest.fixture
def v2(tmp_path, monkeypatch):
    """A v2 driver over an empty directory, and every (cgroup, list) it asks the kernel for."""
    asked = []
    monkeypatch.setattr(governor.cgroups.v2, "attach_deny_program",
                        lambda directory, denied: asked.append((directory.name, tuple(denied))))
    monkeypatch.setattr(governor.cgroups.v2, "bpf_device_filter_supported", lambda: None)
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


def test_v2_a_cgroup_first_given_no_rules_loses_an_earlier_daemons_program(v2, monkeypatch):
    # Review of main, finding 3: a restarted daemon's record is empty; with an empty list the
    # diff wrote nothing, and the program the daemon before attached stayed while in_force said
    # none. Now the first apply takes governor's program off (attach_deny_program(dir, ())).
    driver, asked = v2
    (driver.path("t") / "cpu.weight").write_text("100")
    assert driver.apply("t", CgroupLimits(cpu_weight=50)) == ["cpu.weight"]
    assert asked == [("t", ())] and driver.in_force("t") == {"cpu.weight": "50"}
    driver.apply("t", CgroupLimits(cpu_weight=60))
    assert asked == [("t", ())]  # once per cgroup
    driver.forget("t")
    driver.apply("t", CgroupLimits())
    assert asked == [("t", ()), ("t", ())]  # a new cgroup of that name: looked at again

    def refuse(directory, denied):
        raise CgroupWriteError(str(directory), "BPF device program denying nothing", errno.EPERM)

    monkeypatch.setattr(governor.cgroups.v2, "attach_deny_program", refuse)
    with pytest.raises(CgroupWriteError):
        driver.apply("u", CgroupLimits())
    monkeypatch.setattr(governor.cgroups.v2, "attach_deny_program",
                        lambda directory, denied: asked.append((directory.name, tuple(denied))))
    driver.apply("u", CgroupLimits())  # refused: tried again
    assert asked[-1] == ("u", ())


def test_v2_no_earlier_program_is_looked_for_where_none_can_be(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(governor.cgroups.v2, "bpf_device_filter_supported", lambda: "no bpf() here")
    monkeypatch.setattr(governor.cgroups.v2, "attach_deny_program", lambda directory, denied: asked.append(denied))
    (tmp_path / "root" / "t").mkdir(parents=True)
    CgroupV2Driver(tmp_path / "root").apply("t", CgroupLimits())
    assert asked == []
    monkeypatch.setattr(governor.cgroups.v2, "bpf_device_filter_supported", lambda: None)

    def not_cgroup2(directory, denied):
        raise CgroupWriteError(str(directory), "BPF device program denying nothing", errno.EBADF)

    monkeypatch.setattr(governor.cgroups.v2, "attach_deny_program", not_cgroup2)
    assert CgroupV2Driver(tmp_path / "root").apply("t", CgroupLimits()) == []  # not cgroup2: nothing there
