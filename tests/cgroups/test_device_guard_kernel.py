"""The GPU guard on a stand-in parent cgroup (issue 31, point 4): a process started in it or
below opens a denied node 0 times in 20 (``EPERM``), a program a descendant attaches cannot
take the denial back, and the guard is found by its name and taken off (the node opens again:
``ENXIO``, no driver). Never on the host's real ``user.slice`` nor a root cgroup: the parent is
``governor-test-<random>/user.slice`` under the hierarchy's root.

The stand-in node has a local char major (60–63, 120–127, 240–254) that no driver registered
(``/proc/devices``), made with mknod in a scratch directory: allowed, it opens nothing (``ENXIO``); denied, ``EPERM``.
v2 runs on any cgroup2 mount: the VM's ``/sys/fs/cgroup``, or a hybrid host's ``unified``.
"""

import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from cgroup_helpers import Children
from support.device_nodes import stand_in_nodes
from governor.cgroups.detect import v1_mounts
from governor.cgroups.device_filter import attach_deny_program, bpf_device_filter_supported
from governor.cgroups.device_guard import (attach_guard, detach_guards, guard_v1, guards_attached, plan_guard,
                                           put_guard, take_guard, unguard_v1)
from governor.cgroups.files import write_file
from governor.errors import CgroupWriteError

TRIES = 20
# Waits for a line (sent once it is in its cgroup), opens the node TRIES times, prints the errnos.
PROBE = ("import errno, os, sys\n"
         "sys.stdin.readline()\n"
         "seen = []\n"
         f"for _ in range({TRIES}):\n"
         "    try:\n"
         "        os.close(os.open(sys.argv[1], os.O_RDONLY)); seen.append('ok')\n"
         "    except OSError as e:\n"
         "        seen.append(errno.errorcode[e.errno])\n"
         "print(' '.join(seen), flush=True)\n")


def cgroup2_mount() -> Path | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            return Path(fields[1])
    return None


@pytest.fixture
def node(tmp_path):
    """``(path, device)``: one stand-in node (:func:`device_nodes.stand_in_nodes`)."""
    with stand_in_nodes(tmp_path, 1) as (major, (path,)):
        yield Path(path), ("c", major, 0)


@pytest.fixture
def tree(request):
    """``(parent, session)``: ``governor-test-<random>/user.slice`` and a cgroup below it, in
    the hierarchy the test names (``"v2"``: a cgroup2 mount; ``"v1"``: the devices hierarchy)."""
    if request.param == "v2":
        mount = cgroup2_mount()
        reason = bpf_device_filter_supported() or (None if mount else "no cgroup2 mount here")
    else:
        mount = v1_mounts().get("devices")
        reason = None if mount else "no v1 devices hierarchy here"
    if reason:
        pytest.skip(reason)
    root = mount / f"governor-test-{secrets.token_hex(4)}"
    parent, session = root / "user.slice", root / "user.slice" / "user-1000.slice"
    session.mkdir(parents=True)
    try:
        yield parent, session
    finally:
        for directory in (session, parent, root):
            directory.rmdir()


def opens_in(cgroup_dir: Path, node: Path) -> list[str]:
    """What :data:`PROBE` gets opening ``node`` :data:`TRIES` times as a process of ``cgroup_dir``."""
    children = Children()
    try:
        child = children.start([sys.executable, "-c", PROBE, str(node)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
        write_file(cgroup_dir, "cgroup.procs", str(child.pid))
        out, _ = child.communicate("\n", timeout=120)
        return out.split()
    finally:
        children.kill_all()


@pytest.mark.kernel_v2
@pytest.mark.parametrize("tree", ["v2"], indirect=True)
def test_the_v2_guard_denies_below_the_parent_whatever_a_descendant_attaches(node, tree):
    path, device = node
    parent, session = tree
    assert opens_in(session, path) == ["ENXIO"] * TRIES  # no guard: the node passes, no driver
    attach_guard(parent, [device])
    attach_deny_program(session, [("b", 4095, 0)])  # a descendant's own program, allowing the node
    try:
        assert guards_attached(parent) == 1 and guards_attached(session) == 0
        assert opens_in(parent, path) == ["EPERM"] * TRIES
        assert opens_in(session, path) == ["EPERM"] * TRIES
        assert opens_in(session, "/dev/null") == ["ok"] * TRIES  # only the listed nodes
    finally:
        assert detach_guards(parent) == 1
    assert guards_attached(parent) == 0
    assert opens_in(session, path) == ["ENXIO"] * TRIES


@pytest.mark.kernel_v1
@pytest.mark.parametrize("tree", ["v1"], indirect=True)
def test_the_v1_guard_denies_below_the_parent_and_is_taken_back(node, tree):
    path, device = node
    parent, session = tree
    guard_v1(parent, [device])
    try:
        assert opens_in(parent, path) == ["EPERM"] * TRIES
        assert opens_in(session, path) == ["EPERM"] * TRIES  # the kernel took it from the child too
        with pytest.raises(CgroupWriteError):  # a child may not allow what its parent denies
            write_file(session, "devices.allow", f"c {device[1]}:{device[2]} rwm")
        assert opens_in(session, "/dev/null") == ["ok"] * TRIES
    finally:
        unguard_v1(parent, [device])
    assert opens_in(session, path) == ["ENXIO"] * TRIES


@pytest.mark.kernel_v2
@pytest.mark.parametrize("tree", ["v2"], indirect=True)
def test_a_stale_v2_guard_is_replaced_not_doubled_and_taken_off_with_the_plan(node, tree):
    # A daemon killed before it took its guard off leaves it; the next one replaces it.
    path, device = node
    parent, session = tree
    plan = plan_guard("sessions", [parent.name, "absent.slice"], mode="v2", mount=parent.parent,
                      governor_root=parent.parent / "governor")
    assert plan.places == (parent,) and plan.notes == (f"{parent.parent / 'absent.slice'} does not exist here: "
                                                       "not guarded",)
    attach_guard(parent, [("c", device[1], device[2] + 1)])  # a stale one, of another list
    try:
        assert put_guard(plan, [device]) == []
        assert guards_attached(parent) == 1
        assert opens_in(session, path) == ["EPERM"] * TRIES
    finally:
        assert take_guard(plan, [device]) == []
    assert guards_attached(parent) == 0 and opens_in(session, path) == ["ENXIO"] * TRIES


@pytest.mark.kernel_v1
@pytest.mark.parametrize("tree", ["v1"], indirect=True)
def test_the_v1_guard_is_put_and_taken_with_the_plan(node, tree):
    path, device = node
    parent, session = tree
    plan = plan_guard("sessions", [parent.name], mode="v1", mount=parent.parent, governor_root=parent.parent / "g")
    assert put_guard(plan, [device]) == [] and put_guard(plan, [device]) == []  # again: no harm
    try:
        assert opens_in(session, path) == ["EPERM"] * TRIES
    finally:
        assert take_guard(plan, [device]) == []
    assert opens_in(session, path) == ["ENXIO"] * TRIES
