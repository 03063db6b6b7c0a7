"""CgroupV1Driver against the real v1 hierarchies (hybrid/legacy hosts, as root).

Each test gets its own root, ``governor-test-<random>``, under this process's own cgroup in
every hierarchy; only children started here are moved into it; everything is killed and
removed afterwards.
"""

import errno
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest

from governor.cgroups.detect import cgroup_dirs, v1_mounts
from governor.cgroups.devices import whole_disk
from governor.cgroups.files import read_file
from governor.cgroups.limits import CgroupLimits, IoMax
from governor.cgroups.v1 import CgroupV1Driver
from cgroup_helpers import (BUSY, HOG, SLEEPER, Children, cpu_tolerance, kill_forking_tree, measure_cores,
                            removal_order)
from governor.errors import CgroupWriteError

pytestmark = pytest.mark.kernel_v1
V1_NEEDED = ("cpu", "cpuacct", "cpuset", "memory")


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    missing = [c for c in V1_NEEDED if c not in v1_mounts()]
    if missing:
        return f"cgroup v1 hierarchies not mounted: {' '.join(missing)}"
    return None


@pytest.fixture
def v1():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    dirs = cgroup_dirs()
    name = f"governor-test-{secrets.token_hex(4)}"
    driver = CgroupV1Driver({c: dirs[c] / name for c in (*V1_NEEDED, "blkio") if c in dirs})
    children = Children()
    try:
        driver.create("")
        yield driver, children
    finally:
        children.kill_all()
        for rel in removal_order(driver):
            driver.remove(rel)
        assert not any(root.exists() for root in driver.roots.values())


def test_cpu_quota_holds_busy_child(v1, record_property):
    driver, children = v1
    driver.create("g/t")
    assert driver.apply("g", CgroupLimits(cpu_quota_usec=30_000)) == [
        "cpu.cfs_period_us", "cpu.cfs_quota_us"]
    busy = children.python(BUSY)
    driver.move("g/t", busy.pid)
    assert driver.pids("g/t") == [busy.pid]
    assert driver.pids("g") == []
    measure_cores(driver, "g", 0.5)  # let the child start
    cores = measure_cores(driver, "g", 2.0)
    print(f"v1 cpu.cfs_quota_us 30000/100000: busy child used {cores:.3f} cores")
    record_property("v1_cpu_cores_at_0.3", round(cores, 3))
    assert abs(cores - 0.3) <= cpu_tolerance()
    child_cores = sum(psutil.Process(busy.pid).cpu_times()[:2])
    assert child_cores > 0
    stats = driver.read_stats("g")
    assert stats.populated and driver.read_stats("g/t").populated
    assert driver.populated("g") and driver.populated("g/t")
    assert stats.cpu_nr_throttled > 0 and stats.cpu_throttled_usec > 0
    assert stats.cpu_usage_usec >= 0.3 * 2.0e6 * 0.8
    assert 0 < stats.memory_current_bytes < 1 << 30
    busy.kill()
    busy.wait()
    assert not driver.read_stats("g").populated
    assert not driver.populated("g") and not driver.populated("g/t")


def test_apply_diff_reset_and_cpuset_on_real_files(v1):
    driver, children = v1
    driver.create("g")
    cpu_dir, cpuset_dir = driver.controller_path("cpu", "g"), driver.controller_path("cpuset", "g")
    assert read_file(cpuset_dir, "cpuset.cpus").strip() == read_file(
        cpuset_dir.parent, "cpuset.cpus").strip()  # copied from the parent on create
    limits = CgroupLimits(cpu_quota_usec=50_000, cpu_weight=200, cpuset_cpus="0",
                          memory_high_bytes=32 << 20, memory_max_bytes=64 << 20)
    assert len(driver.apply("g", limits)) == 6
    assert driver.apply("g", limits) == []
    assert read_file(cpu_dir, "cpu.cfs_quota_us").strip() == "50000"
    assert read_file(cpu_dir, "cpu.shares").strip() == "2048"
    assert read_file(driver.controller_path("memory", "g"), "memory.limit_in_bytes").strip() == str(64 << 20)
    sleeper = children.python(SLEEPER)
    driver.move("g", sleeper.pid)
    assert psutil.Process(sleeper.pid).cpu_affinity() == [0]
    assert driver.apply("g", CgroupLimits(memory_max_bytes=64 << 20)) == [
        "cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.shares", "cpuset.cpus",
        "memory.soft_limit_in_bytes"]
    assert read_file(cpu_dir, "cpu.cfs_quota_us").strip() == "-1"
    assert read_file(cpu_dir, "cpu.shares").strip() == "1024"
    parent_cpus = read_file(cpuset_dir.parent, "cpuset.cpus").strip()
    assert read_file(cpuset_dir, "cpuset.cpus").strip() == parent_cpus
    assert len(psutil.Process(sleeper.pid).cpu_affinity()) == psutil.cpu_count()


def test_kernel_rejects_bad_value_with_named_error(v1):
    driver, _ = v1
    driver.create("g")
    with pytest.raises(CgroupWriteError) as info:
        driver.apply("g", CgroupLimits(cpuset_cpus="63"))
    assert info.value.errno in (errno.EINVAL, errno.ERANGE)  # kernel-version dependent
    assert info.value.path == str(driver.controller_path("cpuset", "g") / "cpuset.cpus")
    assert info.value.value.endswith("63")  # widened first (old ∪ new), refused there
    assert "cpuset.cpus" not in driver.in_force("g")


def test_memory_limit_oom_kills_only_the_offender(v1, record_property):
    driver, children = v1
    driver.create("m")
    driver.apply("m", CgroupLimits(memory_max_bytes=64 << 20))
    calm = children.python(SLEEPER)
    hog = children.python(HOG, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    driver.move("m", calm.pid)
    driver.move("m", hog.pid)
    hog.stdin.write(b"\n")
    hog.stdin.flush()
    assert hog.wait(timeout=60) == -9
    assert hog.stdout.read() == b""
    assert calm.poll() is None
    stats = driver.read_stats("m")
    print(f"v1 memory.limit_in_bytes 64M: hog rc={hog.returncode}, events={stats.memory_events},"
          f" usage={stats.memory_current_bytes}")
    record_property("v1_memory_events", stats.memory_events)
    assert stats.memory_events["max"] > 0
    assert stats.memory_events.get("oom_kill", 1) >= 1
    assert stats.memory_current_bytes <= 64 << 20
    assert driver.pids("m") == [calm.pid]


@pytest.fixture
def loop_device(tmp_path):
    if not shutil.which("losetup"):
        pytest.skip("losetup not installed")
    image = tmp_path / "scratch.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    result = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True,
                            text=True)
    if result.returncode != 0:
        pytest.skip(f"losetup failed: {result.stderr.strip()}")
    device = result.stdout.strip()
    try:
        yield Path(device)
    finally:
        subprocess.run(["losetup", "-d", device], check=True)


def test_blkio_write_bps_on_loop_device(v1, loop_device, record_property):
    driver, children = v1
    if "blkio" not in driver.roots:
        pytest.skip("blkio hierarchy not mounted")
    device = whole_disk(loop_device)
    rate = 10 << 20
    driver.create("io")
    driver.apply("io", CgroupLimits(io_max=(IoMax(device, wbps=rate),)))
    dd = children.start(["sh", "-c", f"read go; exec dd if=/dev/zero of={loop_device} bs=1M "
                                     "count=30 oflag=direct"],
                        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver.move("io", dd.pid)
    dd.stdin.write("\n")
    dd.stdin.close()
    assert dd.wait(timeout=60) == 0
    report = dd.stderr.read()
    copied, seconds = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", report).groups()
    measured = int(copied) / float(seconds)
    print(f"v1 blkio write_bps {rate} on {loop_device} ({device}): {measured / 2**20:.2f} MiB/s")
    record_property("v1_blkio_wbps_MiB", round(measured / 2**20, 2))
    assert abs(measured - rate) <= 0.15 * rate
    assert driver.read_stats("io").io_stat[device]["wbytes"] >= 30 << 20


def test_cpuset_shrinks_and_grows_under_a_populated_child(v1):
    """v1 children keep their own cpuset.cpus: narrowing a parent below a child's list is
    refused (EBUSY) unless the child narrows first. The driver orders the writes itself."""
    driver, children = v1
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    first, second = str(cpus[0]), str(cpus[1])
    driver.create("g/task-1")
    child = children.python(SLEEPER)
    driver.move("g/task-1", child.pid)
    for cpus_now in (first, second, f"{first},{second}", first):
        driver.apply("g", CgroupLimits(cpuset_cpus=cpus_now))
        shown = cpus_now.replace(",", "-") if cpus_now == f"{first},{second}" and cpus[1] == cpus[0] + 1 else cpus_now
        assert read_file(driver.controller_path("cpuset", "g"), "cpuset.cpus").strip() == shown
        assert read_file(driver.controller_path("cpuset", "g/task-1"), "cpuset.cpus").strip() == shown
        assert driver.in_force("g")["cpuset.cpus"] == cpus_now


def test_kill_ends_a_forking_tree_and_the_counters_stay_readable(v1, record_property):
    driver, children = v1
    seconds = kill_forking_tree(driver, children, "v1")
    record_property("v1_kill_ms", round(seconds * 1000))


def test_a_parent_quota_stays_at_least_its_childrens_and_a_larger_child_raises_it_first(v1):
    # v1 refuses (EINVAL) a parent quota below a child's and a child's above its parent's: a
    # group held to 1 core keeps its 2-core task's cap, and a 3-core task raises it first.
    driver, _ = v1
    driver.create("g/t")
    driver.apply("g/t", CgroupLimits(cpu_quota_usec=200_000))
    driver.apply("g", CgroupLimits(cpu_quota_usec=100_000, cpu_weight=100))
    assert driver.in_force("g")["cpu.cfs_quota_us"] == "200000"
    assert read_file(driver.controller_path("cpu", "g"), "cpu.cfs_quota_us").strip() == "200000"
    driver.create("g/u")
    driver.apply("g/u", CgroupLimits(cpu_quota_usec=300_000))
    assert [driver.in_force(rel)["cpu.cfs_quota_us"] for rel in ("g", "g/u")] == ["300000", "300000"]
    assert read_file(driver.controller_path("cpu", "g"), "cpu.cfs_quota_us").strip() == "300000"
    driver.apply("g", CgroupLimits(cpu_weight=100))  # no longer held
    assert "cpu.cfs_quota_us" not in driver.in_force("g")
    assert read_file(driver.controller_path("cpu", "g"), "cpu.cfs_quota_us").strip() == "-1"


def test_a_group_without_a_quota_passes_its_tasks_caps_up_to_the_root(v1):
    # v1 bounds a cgroup with no quota by its parent's: a 1.5-core task in a group not held to
    # its guarantee keeps the root at 1.5 cores when a reload asks 1 (the kernel refused the
    # root's write, EINVAL, and the old value stayed), a 3-core task there raises the root
    # first, and the root goes to 1 core once they are gone.
    driver, _ = v1
    root = driver.controller_path("cpu", "")
    driver.apply("", CgroupLimits(cpu_quota_usec=200_000))
    driver.create("A/task-1")
    driver.apply("A/task-1", CgroupLimits(cpu_quota_usec=150_000))
    driver.apply("", CgroupLimits(cpu_quota_usec=100_000))
    assert read_file(root, "cpu.cfs_quota_us").strip() == driver.in_force("")["cpu.cfs_quota_us"] == "150000"
    driver.create("A/task-2")
    driver.apply("A/task-2", CgroupLimits(cpu_quota_usec=300_000))
    assert read_file(driver.controller_path("cpu", "A/task-2"), "cpu.cfs_quota_us").strip() == "300000"
    assert read_file(root, "cpu.cfs_quota_us").strip() == "300000"
    for rel in ("A/task-2", "A/task-1"):  # as the daemon does: the record forgotten, then the cgroup removed
        driver.forget(rel)
        driver.remove(rel)
    driver.apply("", CgroupLimits(cpu_quota_usec=100_000))
    assert read_file(root, "cpu.cfs_quota_us").strip() == "100000"


def test_a_restarted_driver_takes_the_quotas_an_earlier_one_left(v1):
    # An earlier daemon held G at 0.5 cores (its task at 0.3) and left the root at 2 cores with a
    # 1.5-core task in A. The next one's first plan (capacity 1 core, G not held) is taken with no
    # refusal: the root stays at A's task's cap, and G gives its quota up, so that a new 1-core
    # task in G is not refused under the old 0.5 (it was: EINVAL, the launch "unavailable").
    driver, _ = v1
    driver.apply("", CgroupLimits(cpu_quota_usec=200_000))
    for rel, quota in (("G", 50_000), ("G/task-1", 30_000), ("A/task-2", 150_000)):
        driver.create(rel)
        driver.apply(rel, CgroupLimits(cpu_quota_usec=quota))
    again = CgroupV1Driver(driver.roots)
    report = again.apply_plan({"": CgroupLimits(cpu_quota_usec=100_000), "A": CgroupLimits(), "G": CgroupLimits(),
                               "G/task-1": CgroupLimits(cpu_quota_usec=30_000),
                               "A/task-2": CgroupLimits(cpu_quota_usec=150_000)})
    assert not report.errors, [str(error) for error in report.errors]
    quota = lambda rel: read_file(driver.controller_path("cpu", rel), "cpu.cfs_quota_us").strip()  # noqa: E731
    assert (quota(""), quota("G")) == ("150000", "-1")
    again.create("G/task-3")
    again.apply("G/task-3", CgroupLimits(cpu_quota_usec=100_000))
    assert quota("G/task-3") == "100000"


def test_a_group_made_by_this_driver_is_not_read_for_an_earlier_daemons_quota(v1, monkeypatch):
    # A group is made again at each launch after its last task ended: made here, its quota is
    # the kernel's default, and its plan (no quota: not held) reads nothing.
    import governor.cgroups.v1_quotas as quotas

    driver, _ = v1
    read = []
    monkeypatch.setattr(quotas, "read_file", lambda directory, name: read.append(name) or read_file(directory, name))
    driver.create("H/task-9")
    assert not driver.apply_plan({"H": CgroupLimits(cpu_weight=100)}).errors
    assert read == []


def test_a_hierarchy_that_joined_since_gets_the_processes_at_rejoin(v1):
    """A daemon restarted to govern GPUs opens the devices hierarchy too: the task's cgroup is
    not there, its processes are read from the others, and rejoin puts them in (issue 31)."""
    driver, children = v1
    dirs = cgroup_dirs()
    if "devices" not in dirs:
        pytest.skip("the cgroup v1 devices hierarchy is not mounted")
    driver.create("g/t")
    sleeper = children.python(SLEEPER)
    driver.move("g/t", sleeper.pid)
    joined = CgroupV1Driver({**driver.roots, "devices": dirs["devices"] / driver.roots["cpu"].name})
    try:
        assert joined.pids("g/t") == [sleeper.pid]  # the devices hierarchy lacks g/t: read from the others
        assert joined.rejoin("g/t") == [sleeper.pid]
        assert read_file(joined.roots["devices"] / "g" / "t", "cgroup.procs").split() == [str(sleeper.pid)]
        assert Path(f"/proc/{sleeper.pid}/cgroup").read_text().count(f"{driver.roots['cpu'].name}/g/t\n") >= 4
        assert joined.rejoin("g/t") == []  # in every hierarchy now
        joined.kill("g/t")
        assert sleeper.wait(timeout=10) == -9
    finally:
        children.kill_all()
        for directory in ("g/t", "g", ""):  # the fixture removes the others
            (joined.roots["devices"] / directory).rmdir()


def test_the_cpu_counter_alone_is_the_one_every_counter_reads(v1):
    # Issue 37: a group's counter read as it is removed is one file, the same number read_stats gives.
    driver, children = v1
    driver.create("g/t")
    busy = children.python(BUSY)
    driver.move("g/t", busy.pid)
    busy.kill()
    busy.wait()
    alone, every = driver.cpu_usage_usec("g"), driver.read_stats("g").cpu_usage_usec
    assert 0 < alone and alone == every


def test_a_file_read_as_its_cgroup_is_removed_is_a_vanished_cgroup(v1, monkeypatch):
    # CI (the fork-bomb scenario's walk): a group removed between the file's open and its read
    # read ENODEV, which was not "vanished" (ENOENT only), and the walk failed on it.
    from governor.cgroups import files
    from governor.errors import CgroupReadError

    driver, _ = v1
    driver.create("g")
    gone = driver.roots["cpu"] / "g"
    read = os.read

    def removed_first(fd, size):
        if gone.exists():
            gone.rmdir()  # after the open: kernfs now refuses the read
        return read(fd, size)

    monkeypatch.setattr(files.os, "read", removed_first)
    try:
        with pytest.raises(CgroupReadError) as info:
            read_file(gone, "cpu.shares")
    finally:
        monkeypatch.undo()
        driver.remove("g")  # in the other hierarchies
    assert info.value.errno == errno.ENODEV and info.value.vanished
