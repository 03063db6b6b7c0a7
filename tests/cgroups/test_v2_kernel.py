"""CgroupV2Driver against a real cgroup v2 hierarchy: runs where /sys/fs/cgroup is cgroup2
with cpu, memory and io available (the VM: ``../shared/vm/run-in-vm``), as root.

The test root, ``governor-test-<random>``, is created under this process's own cgroup. If that
cgroup is not the hierarchy root, this process first moves itself into a leaf (the
no-internal-process rule; the root is exempt) and enables the controllers there, undoing both
afterwards. Only children started here are moved into the test root.
"""

import errno
import os
import re
import secrets
import subprocess
from pathlib import Path

import pytest

from governor.cgroups.detect import cgroup_dirs, host_mode, v2_controllers, v2_mount
from governor.cgroups.devices import whole_disk
from governor.cgroups.files import read_file, remove_dir, write_file
from governor.cgroups.limits import CgroupLimits, IoMax
from governor.cgroups.parse import parse_cgroup_events, parse_controllers
from governor.cgroups.v2 import CgroupV2Driver, move_self_to_leaf
from cgroup_helpers import (BUSY, HOG, SLEEPER, Children, cpu_tolerance, kill_forking_tree, measure_cores,
                            removal_order)
from governor.errors import CgroupError, CgroupWriteError

pytestmark = pytest.mark.kernel_v2
CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ["cpu", "memory", "io"]


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    try:
        mode = host_mode(CGROUP_ROOT)
    except CgroupError as e:
        return f"no cgroup hierarchy: {e}"
    if mode != "unified":
        return f"{CGROUP_ROOT} is {mode}, not cgroup2: run in the VM (../shared/vm/run-in-vm)"
    missing = set(CONTROLLERS) - v2_controllers(CGROUP_ROOT)
    if missing:
        return f"controllers missing at {CGROUP_ROOT}: {' '.join(sorted(missing))}"
    return None


@pytest.fixture
def v2():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    own, token = cgroup_dirs()[""], secrets.token_hex(4)
    driver = CgroupV2Driver(own / f"governor-test-{token}")
    children = Children()
    leaf = added = None
    try:
        driver.create("")
        if own != v2_mount():
            leaf = move_self_to_leaf(own, f"governor-test-self-{token}")
            before = parse_controllers(read_file(own, "cgroup.subtree_control"))
            try:
                CgroupV2Driver(own).enable_controllers(driver.root.name, CONTROLLERS)
            except CgroupWriteError as e:
                if e.errno != errno.EBUSY:
                    raise
                pytest.skip(f"other processes share this test's cgroup {own}")
            added = [c for c in CONTROLLERS if c not in before]
        yield driver, children
    finally:
        children.kill_all()
        for rel in removal_order(driver):
            driver.remove(rel)
        if added:
            write_file(own, "cgroup.subtree_control", " ".join(f"-{c}" for c in added))
        if leaf is not None:
            write_file(own, "cgroup.procs", str(os.getpid()))
            remove_dir(leaf)
        assert not driver.root.exists()


def test_cpu_max_holds_busy_child(v2, record_property):
    driver, children = v2
    driver.create("g/t")
    driver.enable_controllers("g/t", CONTROLLERS)
    assert parse_controllers(read_file(driver.path("g/t"), "cgroup.controllers")) >= set(CONTROLLERS)
    assert driver.apply("g", CgroupLimits(cpu_quota_usec=30_000)) == ["cpu.max"]
    assert read_file(driver.path("g"), "cpu.max") == "30000 100000\n"
    busy = children.python(BUSY)
    driver.move("g/t", busy.pid)
    assert driver.pids("g/t") == [busy.pid]
    measure_cores(driver, "g", 1.0)  # let the child start
    cores = measure_cores(driver, "g", 2.0)
    print(f"v2 cpu.max 30000 100000 ({os.environ.get('VMLAB_ACCEL', 'native')}): "
          f"busy child used {cores:.3f} cores")
    record_property("v2_cpu_cores_at_0.3", round(cores, 3))
    assert abs(cores - 0.3) <= cpu_tolerance()
    stats = driver.read_stats("g")
    assert stats.populated and stats.cpu_nr_throttled > 0 and stats.cpu_throttled_usec > 0
    assert stats.memory_current_bytes > 0
    assert parse_cgroup_events(driver.events_path("g/t").read_text()).populated
    busy.kill()
    busy.wait()
    assert not parse_cgroup_events(driver.events_path("g/t").read_text()).populated
    assert not driver.read_stats("g").populated


def test_memory_max_oom_kills_only_the_offender(v2, record_property):
    driver, children = v2
    driver.create("m")
    driver.enable_controllers("m", CONTROLLERS)
    driver.apply("m", CgroupLimits(memory_high_bytes=None, memory_max_bytes=64 << 20))
    calm = children.python(SLEEPER)
    hog = children.python(HOG, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    driver.move("m", calm.pid)
    driver.move("m", hog.pid)
    hog.stdin.write(b"\n")
    hog.stdin.flush()
    assert hog.wait(timeout=300) == -9
    assert hog.stdout.read() == b""
    assert calm.poll() is None
    stats = driver.read_stats("m")
    print(f"v2 memory.max 64M: hog rc={hog.returncode}, memory.events={stats.memory_events},"
          f" memory.current={stats.memory_current_bytes}")
    record_property("v2_memory_events", stats.memory_events)
    assert stats.memory_events["oom_kill"] >= 1 and stats.memory_events["max"] > 0
    assert stats.memory_current_bytes <= 64 << 20
    assert driver.pids("m") == [calm.pid]


def test_io_max_wbps_on_scratch_disk(v2, record_property):
    driver, children = v2
    disks = os.environ.get("VMLAB_DISK_DEVS", "").split()
    if not disks:
        pytest.skip("no scratch disk (VMLAB_DISKS=64 gives the VM /dev/vda)")
    device, rate = whole_disk(disks[0]), 10 << 20
    driver.create("io")
    driver.enable_controllers("io", CONTROLLERS)
    assert driver.apply("io", CgroupLimits(io_max=(IoMax(device, wbps=rate),))) == ["io.max"]
    assert read_file(driver.path("io"), "io.max").split() == [device, "rbps=max",
                                                              f"wbps={rate}", "riops=max",
                                                              "wiops=max"]
    dd = children.start(["sh", "-c", f"read go; exec dd if=/dev/zero of={disks[0]} bs=1M "
                                     "count=30 oflag=direct"],
                        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver.move("io", dd.pid)
    dd.stdin.write("\n")
    dd.stdin.close()
    assert dd.wait(timeout=120) == 0
    report = dd.stderr.read()
    copied, seconds = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", report).groups()
    measured = int(copied) / float(seconds)
    print(f"v2 io.max wbps={rate} on {disks[0]} ({device}): {measured / 2**20:.2f} MiB/s")
    record_property("v2_io_wbps_MiB", round(measured / 2**20, 2))
    assert abs(measured - rate) <= 0.15 * rate
    assert driver.read_stats("io").io_stat[device]["wbytes"] >= 30 << 20


def test_kill_ends_a_forking_tree_and_the_counters_stay_readable(v2, record_property):
    driver, children = v2
    seconds = kill_forking_tree(driver, children, "v2")
    record_property("v2_kill_ms", round(seconds * 1000))
