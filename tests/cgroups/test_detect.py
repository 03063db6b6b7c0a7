"""detect.py against this machine (consistency with /proc, not hard-coded answers) and against
fake /proc trees for the cases this machine does not have."""

import os
from pathlib import Path

import pytest

from governor.cgroups.detect import (Mount, cgroup_dirs, host_mode, own_cgroup, parse_mountinfo,
                            v1_mounts, v2_controllers, v2_mount)
from governor.cgroups.parse import parse_pids
from governor.errors import CgroupReadError, CgroupUnsupported

CGROUP_ROOT = Path("/sys/fs/cgroup")
needs_cgroups = pytest.mark.skipif(not CGROUP_ROOT.is_dir(), reason="no /sys/fs/cgroup")


def raw_cgroup_mounts():
    """(mount point, fstype, super options) of cgroup mounts, parsed the naive way."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ")
        fstype, _, options = right.split()
        if fstype in ("cgroup", "cgroup2"):
            mounts.append((Path(left.split()[4]), fstype, set(options.split(","))))
    return mounts


@needs_cgroups
def test_host_mode_consistent_with_mountinfo():
    mounts = raw_cgroup_mounts()
    mode = host_mode(CGROUP_ROOT)
    print(f"host mode: {mode}")
    if (CGROUP_ROOT, "cgroup2") in [(p, t) for p, t, _ in mounts]:
        assert mode == "unified"
    else:
        assert any(t == "cgroup" for _, t, _ in mounts)
        has_v2 = any(t == "cgroup2" and CGROUP_ROOT in p.parents for p, t, _ in mounts)
        assert mode == ("hybrid" if has_v2 else "legacy")


@needs_cgroups
def test_own_cgroup_matches_proc_self_cgroup():
    own = own_cgroup()
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    assert own, "no hierarchy parsed"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            assert own[name] == path
    assert own_cgroup(os.getpid()) == own


@needs_cgroups
def test_cgroup_dirs_hold_this_process():
    dirs = cgroup_dirs()
    assert dirs
    for key, directory in dirs.items():
        assert os.getpid() in parse_pids((directory / "cgroup.procs").read_text()), key


@needs_cgroups
def test_v1_mounts_and_v2_mount_match_mountinfo():
    mounts = raw_cgroup_mounts()
    for controller, path in v1_mounts().items():
        assert any(p == path and t == "cgroup" and controller in o for p, t, o in mounts)
    v2 = v2_mount()
    assert v2 == next((p for p, t, _ in mounts if t == "cgroup2"), None)
    if v2 is not None:
        text = (v2 / "cgroup.controllers").read_text()
        assert v2_controllers(v2) == set(text.split())


def write_proc(tmp_path, mountinfo, cgroup="0::/\n"):
    (tmp_path / "self").mkdir(exist_ok=True)
    (tmp_path / "self" / "mountinfo").write_text(mountinfo)
    (tmp_path / "self" / "cgroup").write_text(cgroup)
    return tmp_path


UNIFIED = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
LEGACY = ("32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
          "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
          "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n")
HYBRID = LEGACY + "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"


@pytest.mark.parametrize("mountinfo, mode", [(UNIFIED, "unified"), (LEGACY, "legacy"),
                                             (HYBRID, "hybrid")])
def test_host_mode_on_fake_mount_tables(tmp_path, mountinfo, mode):
    assert host_mode(CGROUP_ROOT, proc=write_proc(tmp_path, mountinfo)) == mode


def test_host_mode_without_cgroups_is_unsupported(tmp_path):
    proc = write_proc(tmp_path, "22 1 0:5 / /proc rw - proc proc rw\n")
    with pytest.raises(CgroupUnsupported, match="no cgroup hierarchy"):
        host_mode(CGROUP_ROOT, proc=proc)
    with pytest.raises(CgroupReadError):
        host_mode(CGROUP_ROOT, proc=tmp_path / "missing")


def test_parse_mountinfo_comounted_named_and_escaped():
    text = HYBRID + r"50 31 0:40 /docker/abc /mnt/my\040cg rw - cgroup cgroup rw,pids" + "\n"
    mounts = parse_mountinfo(text)
    assert mounts[0] == Mount(Path("/sys/fs/cgroup/cpu,cpuacct"), "/", "cgroup",
                              frozenset({"cpu", "cpuacct"}))
    assert mounts[2].controllers == frozenset()  # name=systemd has no controller
    assert mounts[3].fstype == "cgroup2"
    assert mounts[4] == Mount(Path("/mnt/my cg"), "/docker/abc", "cgroup", frozenset({"pids"}))


def test_fake_v1_mounts_and_cgroup_dirs_strip_mount_root(tmp_path):
    mountinfo = (LEGACY + "50 31 0:40 /docker/abc /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
                 + "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    cgroup = ("4:cpu,cpuacct:/user.slice\n3:memory:/m\n2:pids:/docker/abc/inner\n"
              "1:name=systemd:/s\n0::/u\n")
    proc = write_proc(tmp_path, mountinfo, cgroup)
    assert v1_mounts(proc) == {"cpu": Path("/sys/fs/cgroup/cpu,cpuacct"),
                               "cpuacct": Path("/sys/fs/cgroup/cpu,cpuacct"),
                               "memory": Path("/sys/fs/cgroup/memory"),
                               "pids": Path("/sys/fs/cgroup/pids")}
    assert cgroup_dirs(proc=proc) == {
        "cpu": Path("/sys/fs/cgroup/cpu,cpuacct/user.slice"),
        "cpuacct": Path("/sys/fs/cgroup/cpu,cpuacct/user.slice"),
        "memory": Path("/sys/fs/cgroup/memory/m"),
        "pids": Path("/sys/fs/cgroup/pids/inner"),
        "": Path("/sys/fs/cgroup/unified/u"),
    }


def test_v2_controllers_fake(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert v2_controllers(tmp_path) == {"cpuset", "cpu", "io", "memory", "pids"}
    with pytest.raises(CgroupReadError):
        v2_controllers(tmp_path / "nope")
