"""The device deny list against a real kernel, as root: the BPF program on cgroup v2 (the VM:
``../shared/vm/run-in-vm``) and ``devices.deny`` on a v1 devices hierarchy (this host).

Two stand-in char nodes, ``M:0`` and ``M:1`` on a major ``M`` no driver holds here
(:func:`device_nodes.stand_in_nodes`: so on a host with a real NVIDIA driver too), are made in a
scratch directory. A child started here, and only it, is moved into a test cgroup
``governor-test-<random>`` under this process's own cgroup; it opens the nodes and reports the
errnos. The denied node must give ``EPERM``; the other, which passes the device check, reaches
no driver and gives ``ENXIO``.
"""

import errno
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cgroup_helpers import Children
from support.device_nodes import stand_in_nodes
from governor.cgroups.detect import cgroup_dirs, host_mode, v1_mounts
from governor.cgroups.device_filter import (PROGRAM_NAME, attach_deny_program, attached_programs,
                                            bpf_device_filter_supported, deny_program)
from governor.cgroups.device_rules import v1_line
from governor.cgroups.files import make_dir, remove_dir, write_file
from governor.cgroups.limits import CgroupLimits
from governor.cgroups.v1 import CgroupV1Driver
from governor.cgroups.v2 import CgroupV2Driver
from governor.errors import CgroupError, CgroupWriteError

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Any major will do where the kernel is only asked to refuse (the verifier test).
SOME_MAJOR = 240
# Waits for a line on stdin (sent once it is in its cgroup), then tries each "open PATH" or
# "mknod PATH MAJOR MINOR" of its arguments and prints {argument: "ok" or the errno's name}.
PROBE = ("import errno, json, os, stat, sys\n"
         "sys.stdin.readline()\n"
         "result = {}\n"
         "for step in sys.argv[1:]:\n"
         "    op, path, *numbers = step.split()\n"
         "    try:\n"
         "        if op == 'open':\n"
         "            os.close(os.open(path, os.O_RDONLY))\n"
         "        else:\n"
         "            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(*map(int, numbers)))\n"
         "        result[step] = 'ok'\n"
         "    except OSError as e:\n"
         "        result[step] = errno.errorcode[e.errno]\n"
         "print(json.dumps(result), flush=True)\n")


def skip_reason(mode: str) -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups and device nodes"
    try:
        if mode == "v2" and host_mode(CGROUP_ROOT) != "unified":
            return f"{CGROUP_ROOT} is not cgroup2: run in the VM (../shared/vm/run-in-vm)"
        if mode == "v1" and v1_mounts().get("devices") != CGROUP_ROOT / "devices":
            return f"{CGROUP_ROOT / 'devices'} is not a v1 devices hierarchy"
    except CgroupError as e:
        return f"no cgroup hierarchy: {e}"
    return None


@pytest.fixture
def nodes(tmp_path):
    """``(major, denied, allowed)``: stand-in char nodes ``major:0`` and ``major:1``."""
    with stand_in_nodes(tmp_path) as (major, paths):
        yield major, *map(Path, paths)


@pytest.fixture
def stand_ins(tmp_path):
    """``(major, (node0, node1, node2))``: three stand-in GPU nodes."""
    with stand_in_nodes(tmp_path, 3) as (major, paths):
        yield major, tuple(map(Path, paths))


def probe_in(cgroup_dir: Path | None, steps: list[str]) -> dict[str, str]:
    """Run :data:`PROBE` with ``steps`` in ``cgroup_dir`` (``None``: where this process is)."""
    children = Children()
    try:
        child = children.start([sys.executable, "-c", PROBE, *steps], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
        if cgroup_dir is not None:
            write_file(cgroup_dir, "cgroup.procs", str(child.pid))
        out, _ = child.communicate("\n", timeout=120)
        assert child.returncode == 0
        return json.loads(out)
    finally:
        children.kill_all()


def check_denies_only_the_listed_node(cgroup_dir: Path, major: int, denied: Path, allowed: Path, mode: str) -> None:
    steps = [f"open {denied}", f"open {allowed}", "open /dev/null",
             f"mknod {denied.parent}/again0 {major} 0", f"mknod {denied.parent}/again1 {major} 1"]
    outside = probe_in(None, steps[:2])
    inside = probe_in(cgroup_dir, steps)
    print(f"{mode} device deny c {major}:0: outside the cgroup {outside}, inside {inside}")
    # Outside, both nodes reach the (absent) driver: EPERM inside comes from the deny list alone.
    assert set(outside.values()) <= {"ENXIO", "ENODEV"}
    assert inside[steps[0]] == "EPERM"
    assert inside[steps[1]] in ("ENXIO", "ENODEV")
    assert inside[steps[2]] == "ok"
    assert inside[steps[3]] == "EPERM" and inside[steps[4]] == "ok"


@pytest.mark.kernel_v2
def test_bpf_program_denies_only_the_listed_node(nodes):
    reason = skip_reason("v2")
    if reason:
        pytest.skip(reason)
    assert bpf_device_filter_supported() is None
    # No controller is enabled below this process's cgroup, so (unlike the driver tests) it
    # need not move itself to a leaf: the no-internal-process rule does not apply.
    cgroup_dir = cgroup_dirs()[""] / f"governor-test-{secrets.token_hex(4)}"
    make_dir(cgroup_dir)
    try:
        attach_deny_program(cgroup_dir, [("c", nodes[0], 0)])
        check_denies_only_the_listed_node(cgroup_dir, *nodes, "v2")
    finally:
        remove_dir(cgroup_dir)


def test_without_cap_sys_admin_the_filter_is_reported_unsupported():
    # Review of main, finding 1: under the unit's CAP_BPF alone a program loaded, but none could
    # be replaced or detached later (BPF_PROG_GET_FD_BY_ID needs CAP_SYS_ADMIN): say so at once.
    reason = bpf_device_filter_supported() or (None if shutil.which("setpriv") else "no setpriv here")
    if reason:
        pytest.skip(reason)
    check = "from governor.cgroups.device_filter import bpf_device_filter_supported as s; print(s())"
    out = subprocess.run(["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", sys.executable, "-c",
                          check], capture_output=True, text=True, check=True).stdout
    assert out.startswith("bpf(BPF_PROG_GET_FD_BY_ID) of a device program it loaded failed: Operation not "
                          "permitted: this process lacks CAP_SYS_ADMIN"), out


def test_a_refused_program_reports_the_verifier_log(monkeypatch, tmp_path):
    reason = bpf_device_filter_supported()
    if reason:
        pytest.skip(reason)
    # A program that ends without exit: the verifier refuses it (EINVAL) before any cgroup is
    # touched, so any directory will do.
    monkeypatch.setattr("governor.cgroups.device_filter.deny_program", lambda denied: deny_program([])[:-8])
    with pytest.raises(CgroupWriteError) as raised:
        attach_deny_program(tmp_path, [("c", SOME_MAJOR, 0)])
    assert raised.value.errno == errno.EINVAL and raised.value.path == str(tmp_path)
    assert raised.value.value == f"BPF device program denying c {SOME_MAJOR}:0"
    assert "verifier log: last insn is not an exit or jmp" in str(raised.value)


@pytest.mark.kernel_v1
def test_v1_devices_deny_denies_only_the_listed_node(nodes):
    reason = skip_reason("v1")
    if reason:
        pytest.skip(reason)
    cgroup_dir = cgroup_dirs()["devices"] / f"governor-test-{secrets.token_hex(4)}"
    make_dir(cgroup_dir)
    try:
        write_file(cgroup_dir, "devices.deny", v1_line(("c", nodes[0], 0)))
        check_denies_only_the_listed_node(cgroup_dir, *nodes, "v1")
    finally:
        remove_dir(cgroup_dir)


def check_denied_exactly(cgroup_dir: Path, paths: tuple[Path, ...], denied: set[int], mode: str) -> None:
    """A process in ``cgroup_dir`` gets EPERM opening exactly the nodes ``paths[i]`` for ``i``
    in ``denied``, and ENXIO (no driver) opening the others."""
    steps = [f"open {path}" for path in paths]
    inside = probe_in(cgroup_dir, steps)
    print(f"{mode}: denied {sorted(denied)}: {inside}")
    assert inside == {step: "EPERM" if i in denied else "ENXIO" for i, step in enumerate(steps)}


@pytest.mark.kernel_v1
def test_v1_driver_follows_a_cgroups_denied_list_as_it_changes(stand_ins):
    major, paths = stand_ins
    reason = skip_reason("v1")
    if reason:
        pytest.skip(reason)
    a, b = ("c", major, 0), ("c", major, 1)
    own, name = cgroup_dirs(), f"governor-test-{secrets.token_hex(4)}"
    driver = CgroupV1Driver({c: own[c] / name for c in ("cpu", "cpuacct", "cpuset", "memory", "devices")})
    driver.create("t")
    try:
        directory = driver.controller_path("devices", "t")
        for denied, expected in (([a], {0}), ([a, b], {0, 1}), ([b], {1}), ([], set())):
            driver.apply("t", CgroupLimits(devices_denied=denied))
            shown = ", ".join(f"c {major}:{minor} rwm" for minor in sorted(expected))
            assert driver.in_force("t").get("devices.deny", "") == shown
            check_denied_exactly(directory, paths, expected, "v1 devices.deny")
    finally:
        driver.remove("t")
        driver.remove("")


@pytest.mark.kernel_v1
def test_v1_a_restarted_driver_with_nothing_to_deny_takes_the_earlier_rules_back(stand_ins):
    # Review of main, finding 3: a driver with no record (a restarted daemon) and an empty list
    # wrote nothing, and the devices.deny lines of the daemon before stayed in force.
    major, paths = stand_ins
    reason = skip_reason("v1")
    if reason:
        pytest.skip(reason)
    own, name = cgroup_dirs(), f"governor-test-{secrets.token_hex(4)}"
    roots = {c: own[c] / name for c in ("cpu", "cpuacct", "cpuset", "memory", "devices")}
    driver = CgroupV1Driver(roots)
    driver.create("t")
    try:
        directory = driver.controller_path("devices", "t")
        driver.apply("t", CgroupLimits(devices_denied=[("c", major, 0), ("c", major, 2)]))
        check_denied_exactly(directory, paths, {0, 2}, "v1 devices.deny")
        restarted = CgroupV1Driver(roots)
        restarted.apply("t", CgroupLimits())
        assert restarted.in_force("t") == {}
        check_denied_exactly(directory, paths, set(), "v1 after a restart")
    finally:
        driver.remove("t")
        driver.remove("")


@pytest.mark.kernel_v2
def test_v2_driver_replaces_its_program_and_a_restarted_one_finds_it(stand_ins):
    major, paths = stand_ins
    reason = skip_reason("v2")
    if reason:
        pytest.skip(reason)
    a, b = ("c", major, 0), ("c", major, 1)
    # No controller is enabled below this process's cgroup: it need not move to a leaf.
    root = cgroup_dirs()[""] / f"governor-test-{secrets.token_hex(4)}"
    driver = CgroupV2Driver(root)
    driver.create("t")
    directory = driver.path("t")
    try:
        driver.apply("t", CgroupLimits(devices_denied=[a]))
        first = attached_programs(directory)
        assert list(first.values()) == [PROGRAM_NAME]
        check_denied_exactly(directory, paths, {0}, "v2 device program")
        driver.apply("t", CgroupLimits(devices_denied=[a, b]))
        second = attached_programs(directory)
        assert list(second.values()) == [PROGRAM_NAME] and not second.keys() & first.keys()  # the old one detached
        assert driver.in_force("t") == {"device program": f"c {major}:0, c {major}:1"}
        check_denied_exactly(directory, paths, {0, 1}, "v2 device program")
        restarted = CgroupV2Driver(root)  # no record: it finds its predecessor's program by its name
        restarted.apply("t", CgroupLimits(devices_denied=[b]))
        third = attached_programs(directory)
        assert list(third.values()) == [PROGRAM_NAME] and not third.keys() & second.keys()
        check_denied_exactly(directory, paths, {1}, "v2 device program")
        # Review of main, finding 3: one more restart, now with nothing to deny (GPUs turned off
        # meanwhile): the diff alone wrote nothing and the program stayed.
        CgroupV2Driver(root).apply("t", CgroupLimits())
        assert attached_programs(directory) == {}
        check_denied_exactly(directory, paths, set(), "v2 device program")
    finally:
        remove_dir(directory)
        remove_dir(root)
