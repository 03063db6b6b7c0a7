"""CgroupV2Driver on a fake cgroupfs in tmp_path: diffing, write order and error paths only
(the behaviour of real limits is proved in test_v2_kernel.py)."""

import errno
import logging
import shutil
import signal
import subprocess
import sys

import pytest

import governor.cgroups.v2
from governor.cgroups.limits import CgroupLimits, IoMax
from governor.cgroups.v2 import CgroupV2Driver
from governor.errors import CgroupError, CgroupUnsupported, CgroupWriteError

LIMIT_FILES = ("cpu.weight", "cpu.max", "cpuset.cpus", "memory.high", "memory.max", "io.max")
LIMITS = CgroupLimits(cpu_quota_usec=30_000, cpu_weight=50, cpuset_cpus="1",
                      memory_high_bytes=64 << 20, memory_max_bytes=128 << 20,
                      io_max=(IoMax("8:0", wbps=10 << 20), IoMax("8:16", rbps=1 << 20)))


def fake_cgroup(directory, controllers="cpuset cpu io memory pids", current_bytes=0):
    """A directory that looks like a v2 cgroup with every governed controller enabled."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cgroup.controllers").write_text(controllers + "\n")
    (directory / "cgroup.subtree_control").write_text("\n")
    (directory / "cgroup.procs").write_text("")
    (directory / "memory.current").write_text(f"{current_bytes}\n")
    for name in LIMIT_FILES:
        (directory / name).write_text("")
    return directory


@pytest.fixture
def writes(monkeypatch):
    """Every (file name, value) the driver writes, in order."""
    log = []
    real = governor.cgroups.v2.write_file

    def recording(directory, name, value):
        log.append((name, value))
        real(directory, name, value)

    monkeypatch.setattr(governor.cgroups.v2, "write_file", recording)
    return log


@pytest.fixture
def driver(tmp_path):
    fake_cgroup(tmp_path / "root")
    fake_cgroup(tmp_path / "root" / "g")
    return CgroupV2Driver(tmp_path / "root")


def test_first_apply_writes_everything_in_documented_order(driver, writes):
    written = driver.apply("g", LIMITS)
    assert written == ["cpu.weight", "cpu.max", "cpuset.cpus", "memory.high", "memory.max",
                       "io.max", "io.max"]
    assert writes == [("cpu.weight", "50"), ("cpu.max", "30000 100000"), ("cpuset.cpus", "1"),
                      ("memory.high", "67108864"), ("memory.max", "134217728"),
                      ("io.max", "8:0 rbps=max wbps=10485760"),
                      ("io.max", "8:16 rbps=1048576 wbps=max")]


def test_second_identical_apply_writes_nothing(driver, writes):
    driver.apply("g", LIMITS)
    writes.clear()
    assert driver.apply("g", LIMITS) == []
    assert writes == []


def test_changed_field_writes_only_that_file(driver, writes):
    driver.apply("g", LIMITS)
    writes.clear()
    changed = CgroupLimits(cpu_quota_usec=45_000, cpu_weight=50, cpuset_cpus="1",
                           memory_high_bytes=64 << 20, memory_max_bytes=128 << 20,
                           io_max=LIMITS.io_max)
    assert driver.apply("g", changed) == ["cpu.max"]
    assert writes == [("cpu.max", "45000 100000")]
    assert (driver.path("g") / "cpu.max").read_text() == "45000 100000"


def test_cgroups_with_equal_limits_share_one_record_and_a_change_to_one_leaves_the_other(driver, tmp_path, writes):
    fake_cgroup(tmp_path / "root" / "h")
    driver.apply("g", LIMITS)
    driver.apply("h", LIMITS)
    assert driver._written["g"] is driver._written["h"]  # 10,000 tasks with the same caps hold one
    writes.clear()
    changed = CgroupLimits(cpu_quota_usec=45_000, cpu_weight=50, cpuset_cpus="1",
                           memory_high_bytes=64 << 20, memory_max_bytes=128 << 20, io_max=LIMITS.io_max)
    assert driver.apply("h", changed) == ["cpu.max"]
    assert driver.in_force("g")["cpu.max"] == "30000 100000" and driver.in_force("h")["cpu.max"] == "45000 100000"
    assert driver.apply("g", LIMITS) == [] and writes == [("cpu.max", "45000 100000")]


def test_unset_field_is_reset_to_unlimited(driver, writes):
    driver.apply("g", LIMITS)
    writes.clear()
    fewer = CgroupLimits(cpu_weight=50, cpuset_cpus="1", memory_high_bytes=64 << 20,
                         io_max=(IoMax("8:0", wbps=10 << 20),))
    assert driver.apply("g", fewer) == ["cpu.max", "memory.max", "io.max"]
    assert writes == [("cpu.max", "max 100000"), ("memory.max", "max"),
                      ("io.max", "8:16 rbps=max wbps=max")]
    writes.clear()
    assert driver.apply("g", fewer) == []


def test_failed_write_names_file_value_errno_and_is_retried(driver, writes):
    (driver.path("g") / "memory.max").unlink()  # as if the memory controller were off
    with pytest.raises(CgroupWriteError) as info:
        driver.apply("g", LIMITS)
    assert info.value.path == str(driver.path("g") / "memory.max")
    assert info.value.value == "134217728"
    assert info.value.errno == errno.ENOENT
    (driver.path("g") / "memory.max").write_text("")
    writes.clear()
    # Everything before the failure is recorded as written; only the rest is retried.
    assert driver.apply("g", LIMITS) == ["memory.max", "io.max", "io.max"]


def test_vanished_cgroup_is_logged_at_debug(driver, tmp_path, caplog):
    vanished = CgroupV2Driver(tmp_path / "root")
    caplog.set_level(logging.DEBUG, logger="governor.cgroups")
    with pytest.raises(CgroupWriteError) as info:
        vanished.apply("task-gone", CgroupLimits(cpu_weight=10))
    assert info.value.errno == errno.ENOENT
    [record] = [r for r in caplog.records if "vanished" in r.getMessage()]
    assert record.levelno == logging.DEBUG


def test_a_refused_write_keeps_the_old_value_in_the_record(tmp_path, monkeypatch):
    fake_cgroup(tmp_path / "root")
    fake_cgroup(tmp_path / "root" / "g")
    driver = CgroupV2Driver(tmp_path / "root")
    driver.apply("g", CgroupLimits(cpu_weight=100, memory_high_bytes=64 << 20))
    real = governor.cgroups.v2.write_file

    def refuse_memory(directory, name, value):
        if name == "memory.high":
            raise CgroupWriteError(str(directory / name), value, errno.EBUSY)
        real(directory, name, value)

    monkeypatch.setattr(governor.cgroups.v2, "write_file", refuse_memory)
    with pytest.raises(CgroupWriteError):
        driver.apply("g", CgroupLimits(cpu_weight=200, memory_high_bytes=32 << 20))
    # The other file was still written; the refused one keeps its accepted value.
    assert driver.in_force("g") == {"cpu.weight": "200", "memory.high": str(64 << 20)}
    report = driver.apply_plan({"g": CgroupLimits(cpu_weight=300, memory_high_bytes=32 << 20)})
    assert report.written == 1 and [e.errno for e in report.errors] == [errno.EBUSY]


def test_enable_controllers_top_down_only_missing(tmp_path, writes):
    root = fake_cgroup(tmp_path / "root")
    fake_cgroup(root / "g")
    fake_cgroup(root / "g" / "t")
    (root / "cgroup.subtree_control").write_text("cpu\n")
    CgroupV2Driver(root).enable_controllers("g/t", ["cpu", "memory", "io"])
    assert writes == [("cgroup.subtree_control", "+memory +io"),
                      ("cgroup.subtree_control", "+cpu +memory +io")]
    assert (root / "g" / "cgroup.subtree_control").read_text() == "+cpu +memory +io"


def test_enable_missing_controller_is_unsupported(tmp_path, writes):
    root = fake_cgroup(tmp_path / "root", controllers="cpu memory")
    fake_cgroup(root / "g")
    with pytest.raises(CgroupUnsupported, match="io not available") as info:
        CgroupV2Driver(root).enable_controllers("g", ["cpu", "io"])
    assert info.value.path == str(root / "cgroup.controllers")
    assert writes == []


def test_create_remove_and_forget(tmp_path, writes):
    driver = CgroupV2Driver(tmp_path / "root")
    driver.create("g/t")
    driver.create("g/t")
    assert driver.children() == ["g"] and driver.children("g") == ["t"]
    with pytest.raises(CgroupError):
        driver.remove("g")  # has a child
    driver.remove("g/t")
    driver.remove("g/t")  # already gone: fine
    assert driver.children("g") == []


def test_removed_cgroup_is_forgotten(driver, monkeypatch):
    # On cgroupfs rmdir takes the interface files with it; a plain directory needs rmtree.
    monkeypatch.setattr(governor.cgroups.v2, "remove_dir", lambda d: shutil.rmtree(d) or True)
    driver.apply("g", CgroupLimits(cpu_weight=10))
    driver.remove("g")
    driver.forget("g")
    fake_cgroup(driver.path("g"))
    assert driver.apply("g", CgroupLimits(cpu_weight=10)) == ["cpu.weight"]


def test_move_pids_and_paths(driver, writes):
    driver.move("g", 4242)
    assert writes == [("cgroup.procs", "4242")]
    assert driver.pids("g") == [4242]
    assert driver.events_path("g") == driver.root / "g" / "cgroup.events"
    with pytest.raises(ValueError):
        driver.path("../escape")
    with pytest.raises(ValueError):
        driver.path("/abs")


@pytest.mark.parametrize("cpu_stat", ["user_usec 5\n", "usage_usec x\n"])
def test_counters_the_kernel_would_not_write_are_a_read_error(driver, cpu_stat):
    # A parse error must not abort a whole sampling pass (issue 12): it is one cgroup's read error.
    group = driver.root / "g"
    (group / "cpu.stat").write_text(cpu_stat)
    (group / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    (group / "cgroup.controllers").write_text("cpu\n")
    with pytest.raises(CgroupError, match="cannot parse the counters of cgroup 'g'"):
        driver.read_stats("g")
    (group / "cpu.stat").write_text("usage_usec 7\n")
    assert driver.read_stats("g").cpu_usage_usec == 7


def test_kill_writes_cgroup_kill(driver, writes):
    (driver.root / "g" / "cgroup.kill").write_text("")
    assert driver.kill("g") == 0
    assert writes == [("cgroup.kill", "1")]


def test_a_kernel_without_cgroup_kill_gets_sigkill_pid_by_pid(driver):
    # Linux < 5.14: no cgroup.kill file. The pids are a real child of this test, so the
    # fallback's signal is proved to land.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (driver.root / "g" / "cgroup.procs").write_text(f"{sleeper.pid}\n")
        assert driver.kill("g") == 1
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
    finally:
        sleeper.kill()
        sleeper.wait()


def test_killing_a_vanished_cgroup_says_so(driver):
    with pytest.raises(CgroupError) as caught:
        driver.kill("gone")
    assert caught.value.vanished


def test_memory_peak_is_read_where_the_kernel_has_it(driver):
    group = driver.root / "g"
    (group / "cpu.stat").write_text("usage_usec 7\n")
    (group / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    (group / "memory.events").write_text("oom_kill 0\n")
    (group / "cgroup.controllers").write_text("cpu memory\n")
    assert driver.read_stats("g", peak=True).memory_peak_bytes is None  # before Linux 5.19
    (group / "memory.peak").write_text("1048576\n")
    assert driver.read_stats("g", peak=True).memory_peak_bytes == 1 << 20
    assert driver.read_stats("g").memory_peak_bytes is None  # a sample does not read it


@pytest.mark.parametrize("cgroup_root, advice", [
    ("governor", "A relative --cgroup-root is made below the daemon's own cgroup; give an absolute one whose "
                 "parent has cpu (e.g. --cgroup-root /governor), or run the daemon from its systemd unit"),
    ("/a/b/governor", "enable it there, or give another --cgroup-root")])
def test_a_root_whose_parent_lacks_a_controller_is_refused_saying_why_and_what_to_do(tmp_path, cgroup_root, advice):
    # Issue 31, point 6: a daemon started with a relative root in a cgroup whose parent does not
    # delegate cpu said only "cgroup v2 controller cpu is not available in …".
    from governor.cgroups.hierarchy import open_hierarchy

    mount = tmp_path / "cgroup"
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(f"30 23 0:26 / {mount} rw - cgroup2 cgroup2 rw,nsdelegate\n")
    (proc / "self" / "cgroup").write_text("0::/a/b\n")
    fake_cgroup(mount)
    fake_cgroup(mount / "a", controllers="cpu memory pids").joinpath("cgroup.subtree_control").write_text("memory pids\n")
    fake_cgroup(mount / "a" / "b", controllers="memory pids")
    fake_cgroup(mount / "a" / "b" / "daemon", controllers="memory pids")
    with pytest.raises(CgroupUnsupported) as refused:
        open_hierarchy(cgroup_root, cgroup_mount=mount, proc=proc)
    assert str(refused.value) == (
        f"cgroup v2 controller cpu is not available in {mount}/a/b: its parent {mount}/a does not delegate it "
        f"(cpu is not in {mount}/a/cgroup.subtree_control){'. ' if cgroup_root[0] != '/' else ': '}{advice}"
        + (" (governor install-systemd), whose cgroup systemd delegates every controller"
           if cgroup_root[0] != "/" else ""))


def test_the_cpu_counter_alone_reads_cpu_stat_alone(driver):
    # Issue 37: a group's counter read as it is removed, from its one file.
    group = driver.root / "g"
    (group / "cpu.stat").write_text("usage_usec 7\nuser_usec 5\n")
    assert driver.cpu_usage_usec("g") == 7
    (group / "cpu.stat").write_text("user_usec 5\n")
    with pytest.raises(CgroupError, match="cannot parse the CPU counter of cgroup 'g'"):
        driver.cpu_usage_usec("g")
