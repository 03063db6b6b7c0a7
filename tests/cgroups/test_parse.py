"""Pure parsers: exact inputs as the kernel prints them, exact outputs."""

import pytest

from governor.cgroups.parse import (CgroupEvents, format_cpu_max, format_max, parse_blkio_service_bytes,
                           parse_cgroup_events, parse_controllers, parse_cpu_max,
                           parse_flat_keyed, parse_int, parse_max, parse_nested_keyed,
                           parse_pids, parse_proc_cgroup)


def test_max_round_trip():
    assert parse_max("max\n") is None
    assert parse_max("1048576\n") == 1048576
    assert format_max(None) == "max"
    assert format_max(0) == "0"
    assert parse_max(format_max(4096)) == 4096


def test_max_rejects_garbage():
    with pytest.raises(ValueError, match="'unlimited'"):
        parse_max("unlimited")
    with pytest.raises(ValueError):
        parse_int("")


def test_flat_keyed_cpu_stat():
    text = ("usage_usec 123456\nuser_usec 100000\nsystem_usec 23456\n"
            "nr_periods 40\nnr_throttled 12\nthrottled_usec 987654\n")
    assert parse_flat_keyed(text) == {"usage_usec": 123456, "user_usec": 100000,
                                      "system_usec": 23456, "nr_periods": 40,
                                      "nr_throttled": 12, "throttled_usec": 987654}


def test_flat_keyed_memory_events_and_bad_line():
    assert parse_flat_keyed("low 0\nhigh 3\nmax 7\noom 1\noom_kill 1\n") == {
        "low": 0, "high": 3, "max": 7, "oom": 1, "oom_kill": 1}
    with pytest.raises(ValueError, match="key value"):
        parse_flat_keyed("high 1 2\n")


def test_nested_keyed_io_stat_and_io_max():
    io_stat = ("8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n"
               "254:0 rbytes=4096 wbytes=31457280 rios=1 wios=30 dbytes=0 dios=0\n")
    assert parse_nested_keyed(io_stat) == {
        "8:0": {"rbytes": 1, "wbytes": 2, "rios": 3, "wios": 4, "dbytes": 0, "dios": 0},
        "254:0": {"rbytes": 4096, "wbytes": 31457280, "rios": 1, "wios": 30, "dbytes": 0,
                  "dios": 0},
    }
    assert parse_nested_keyed("8:0 rbps=max wbps=10485760 riops=max wiops=max\n") == {
        "8:0": {"rbps": None, "wbps": 10485760, "riops": None, "wiops": None}}
    assert parse_nested_keyed("") == {}
    with pytest.raises(ValueError, match="rbps"):
        parse_nested_keyed("8:0 rbps\n")


def test_cpu_max():
    assert parse_cpu_max("max 100000\n") == (None, 100000)
    assert parse_cpu_max("20000 100000\n") == (20000, 100000)
    assert format_cpu_max(30000, 100000) == "30000 100000"
    assert format_cpu_max(None, 50000) == "max 50000"
    with pytest.raises(ValueError):
        parse_cpu_max("max")


def test_cgroup_events():
    assert parse_cgroup_events("populated 1\nfrozen 0\n") == CgroupEvents(True, False)
    assert parse_cgroup_events("populated 0\nfrozen 1\n") == CgroupEvents(False, True)
    assert parse_cgroup_events("populated 0\n") == CgroupEvents(False, False)
    with pytest.raises(ValueError, match="populated"):
        parse_cgroup_events("frozen 0\n")


def test_pids_and_controllers():
    assert parse_pids("12\n345\n") == [12, 345]
    assert parse_pids("") == []
    assert parse_controllers("cpuset cpu io memory pids\n") == {"cpuset", "cpu", "io", "memory",
                                                                 "pids"}
    assert parse_controllers("\n") == set()


def test_proc_cgroup_hybrid_and_comounted():
    text = ("12:cpu,cpuacct:/user.slice\n4:memory:/process_api/abc\n"
            "1:name=systemd:/init.scope\n0::/init.scope\n")
    assert parse_proc_cgroup(text) == {"cpu": "/user.slice", "cpuacct": "/user.slice",
                                       "memory": "/process_api/abc",
                                       "name=systemd": "/init.scope", "": "/init.scope"}
    assert parse_proc_cgroup("0::/\n") == {"": "/"}
    with pytest.raises(ValueError):
        parse_proc_cgroup("garbage\n")


def test_blkio_service_bytes():
    text = ("7:0 Read 4096\n7:0 Write 8192\n7:0 Sync 8192\n7:0 Async 4096\n"
            "7:0 Discard 0\n7:0 Total 12288\nTotal 12288\n")
    assert parse_blkio_service_bytes(text) == {"7:0": {"rbytes": 4096, "wbytes": 8192,
                                                       "dbytes": 0}}
    assert parse_blkio_service_bytes("Total 0\n") == {}
