"""CgroupLimits → kernel files: exact strings, documented order, resets and diffing."""

import pytest

from governor.cgroups.limits import (CgroupLimits, IoMax, V1_ORDER, V2_ORDER, diff_writes, v1_files,
                            v1_key, v1_reset, v2_files, v2_key, v2_reset, weight_to_shares)

FULL = CgroupLimits(cpu_quota_usec=150_000, cpu_period_usec=100_000, cpu_weight=200,
                    cpuset_cpus="0-1", memory_high_bytes=1 << 30, memory_max_bytes=2 << 30,
                    io_max=(IoMax("8:0", rbps=2 << 20, wbps=None), IoMax("259:0", wbps=1 << 20)))


def test_v2_files_full_in_documented_order():
    assert v2_files(FULL) == [
        ("cpu.weight", "200"),
        ("cpu.max", "150000 100000"),
        ("cpuset.cpus", "0-1"),
        ("memory.high", "1073741824"),
        ("memory.max", "2147483648"),
        ("io.max", "8:0 rbps=2097152 wbps=max"),
        ("io.max", "259:0 rbps=max wbps=1048576"),
    ]
    files = [f for f, _ in v2_files(FULL)]
    assert files == sorted(files, key=V2_ORDER.index)


def test_v2_files_unset_writes_nothing():
    assert v2_files(CgroupLimits()) == []
    assert v2_files(CgroupLimits(memory_high_bytes=0)) == [("memory.high", "0")]


def test_v1_files_full_in_documented_order():
    assert v1_files(FULL) == [
        ("cpu", "cpu.cfs_period_us", "100000"),
        ("cpu", "cpu.cfs_quota_us", "150000"),
        ("cpu", "cpu.shares", "2048"),
        ("cpuset", "cpuset.cpus", "0-1"),
        ("memory", "memory.soft_limit_in_bytes", "1073741824"),
        ("memory", "memory.limit_in_bytes", "2147483648"),
        ("blkio", "blkio.throttle.read_bps_device", "8:0 2097152"),
        ("blkio", "blkio.throttle.write_bps_device", "259:0 1048576"),
    ]
    pairs = [(c, f) for c, f, _ in v1_files(FULL)]
    assert pairs == sorted(pairs, key=V1_ORDER.index)


def test_weight_to_shares_like_systemd():
    # systemd: shares = weight * 1024 / 100, clamped to [2, 262144]
    assert weight_to_shares(100) == 1024
    assert weight_to_shares(1) == 10
    assert weight_to_shares(50) == 512
    assert weight_to_shares(10000) == 102400
    assert weight_to_shares(333) == 3409


@pytest.mark.parametrize("kwargs, match", [
    ({"cpu_weight": 0}, "cpu_weight"),
    ({"cpu_weight": 10001}, "cpu_weight"),
    ({"cpu_quota_usec": 999}, "cpu_quota_usec"),
    ({"cpu_period_usec": 999}, "cpu_period_usec"),
    ({"memory_max_bytes": -1}, "memory_max_bytes"),
    ({"io_max": (IoMax("8:0", rbps=1), IoMax("8:0", wbps=1))}, "twice"),
])
def test_limits_reject_out_of_range(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CgroupLimits(**kwargs)


def test_io_max_validation():
    with pytest.raises(ValueError, match="MAJ:MIN"):
        IoMax("/dev/sda", rbps=1)
    with pytest.raises(ValueError, match="wbps"):
        IoMax("8:0", wbps=0)


def test_keys_and_resets():
    assert v2_key("io.max", "8:0 rbps=1 wbps=max") == ("io.max", "8:0")
    assert v2_key("memory.max", "4096") == ("memory.max", "")
    assert v2_reset("io.max", "8:0 rbps=1 wbps=max") == "8:0 rbps=max wbps=max"
    assert v2_reset("cpu.max", "30000 50000") == "max 100000"
    assert v2_reset("cpu.weight", "300") == "100"
    assert v2_reset("cpuset.cpus", "1") == ""
    assert v2_reset("memory.high", "1") == "max"
    assert v2_reset("pids.max", "10") == "max"
    assert v1_reset("pids", "pids.max", "10") == "max"
    with pytest.raises(ValueError):
        v2_reset("rdma.max", "10")
    assert v1_key("blkio", "blkio.throttle.write_bps_device", "7:0 10") == (
        "blkio", "blkio.throttle.write_bps_device", "7:0")
    assert v1_reset("blkio", "blkio.throttle.write_bps_device", "7:0 10") == "7:0 0"
    assert v1_reset("cpu", "cpu.cfs_quota_us", "30000") == "-1"
    assert v1_reset("cpu", "cpu.cfs_period_us", "50000") == "100000"
    assert v1_reset("cpu", "cpu.shares", "2048") == "1024"
    assert v1_reset("memory", "memory.limit_in_bytes", "1") == "-1"
    assert v1_reset("memory", "memory.soft_limit_in_bytes", "1") == "-1"
    assert v1_reset("cpuset", "cpuset.cpus", "0") is None
    with pytest.raises(ValueError):
        v1_reset("memory", "memory.swappiness", "0")


def _v2(limits):
    return [(v2_key(f, v), v) for f, v in v2_files(limits)]


def _rank(key):
    return V2_ORDER.index(key[0])


def test_diff_writes_only_changes_and_resets_in_order():
    last = dict(_v2(FULL))
    assert diff_writes(_v2(FULL), last, _rank) == []
    changed = CgroupLimits(cpu_quota_usec=150_000, cpu_weight=200, cpuset_cpus="0-1",
                           memory_high_bytes=1 << 30, memory_max_bytes=3 << 30,
                           io_max=(IoMax("8:0", rbps=2 << 20),))
    assert diff_writes(_v2(changed), last, _rank) == [
        (("memory.max", ""), "3221225472"),
        (("io.max", "259:0"), None),
    ]
    # memory.high is reset before memory.max is written: order follows V2_ORDER, not the cause.
    assert diff_writes(_v2(CgroupLimits(memory_max_bytes=1)), last, _rank) == [
        (("cpu.weight", ""), None), (("cpu.max", ""), None), (("cpuset.cpus", ""), None),
        (("memory.high", ""), None), (("memory.max", ""), "1"),
        (("io.max", "8:0"), None), (("io.max", "259:0"), None),
    ]
