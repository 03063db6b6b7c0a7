"""The GPU guard where sessions start (issue 31, break 3 and point 4), on the real kernel: a
stand-in login parent ``governor-test-<random>/user.slice`` under the hierarchy's root (never
the host's ``user.slice``), guarded by a sessions-on daemon whose ``gpu_guard_parents`` names
it. A process of a governed user started there opens the stand-in GPU node (a char major in
60–63, 120–127 or 240–254 no driver holds: ``ENXIO`` allowed, ``EPERM`` denied) as its first
act: 0 of 20 succeed, moved into its session yet or not. A reload to ``gpu_guard = "tasks"`` takes the
guard off, one back puts it on again. Once the daemon stops cleanly the guard is gone.
Shared by the v1 (native, ``devices.deny``) and v2 (VM, a BPF program) modules."""

from __future__ import annotations

import contextlib
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from daemon_harness import GOVERNOR, Governor
from support.device_nodes import device_nodes, errno_name, free_major

from governor.cgroups import detect

USER = "gov-gpu-guard"
TRIES = 20
# Opens the node named by its argument, as its first act, and says "ok" or the shell's message
# (ending in the error's strerror: errno_name names it). sh, not Python: twenty Python starts as
# the user took ~70 s of the emulated VM's run of the v2 test.
OPEN = 'err=$( (true <"$1") 2>&1 ) && echo ok || echo "$err"'


def guard_mount() -> Path:
    """Where device access is decided for this host's driver: the cgroup2 mount (v2) or the
    v1 devices hierarchy."""
    if detect.driver_mode() == "v2":
        return Path("/sys/fs/cgroup")
    return detect.v1_mounts()["devices"]


def opens_from(parent: Path, node: str) -> str:
    """What a process of :data:`USER` started in ``parent`` gets opening ``node`` first."""
    wrapper = f'echo $$ > {parent}/cgroup.procs && exec runuser -u {USER} -- sh -c "$0" open "$1"'
    done = subprocess.run(["sh", "-c", wrapper, OPEN, node], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return errno_name(done.stdout)


@contextlib.contextmanager
def login_parent() -> Iterator[tuple[Path, Path, str]]:
    """A stand-in login parent and a stand-in device node a process started there may reach:
    ``(directory for the daemon, the parent cgroup, the node)``; :data:`USER` made for the
    test if missing, all removed afterwards. Skips where no local major is free."""
    major = free_major()
    if major is None:
        import pytest
        pytest.skip("every local/experimental char major (60-63, 120-127, 240-254) is a driver's here")
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", USER], check=True)
        created = True
    shared = Path(tempfile.mkdtemp(prefix="gov-guard-"))
    shared.chmod(0o755)  # the user's process must reach the node
    root = guard_mount() / f"governor-test-{secrets.token_hex(4)}"
    parent = root / "user.slice"
    parent.mkdir(parents=True)
    try:
        with device_nodes(shared, ((major, 0),)) as (node,):
            yield shared, parent, node
    finally:
        for directory in (parent, root):
            directory.rmdir()
        shutil.rmtree(shared, ignore_errors=True)
        if created:
            subprocess.run(["userdel", USER], check=False)


def sessions_open_no_gpu_where_they_start() -> None:
    with login_parent() as (shared, parent, node):
        assert opens_from(parent, node) == "ENXIO"  # no guard yet: the node passes, no driver
        gov = Governor(shared, '[capacity]\ncpu = 1\nmemory = "1G"\n'
                               f'gpus = ["{node}"]\ngpu_control = []\n'
                               f'gpu_guard_parents = ["{parent.relative_to(guard_mount())}"]\n'
                               f'[groups.A]\nusers = ["{USER}"]\n[sessions]\nmemory = "64M"\n')
        try:
            guard = gov.status()["daemon"]["gpu_guard"]
            assert guard["kind"] == "sessions" and guard["guarded"] == [str(parent)], guard
            seen = [opens_from(parent, node) for _ in range(TRIES)]
            print(f"\n[{detect.driver_mode()}] a session process's first open of a GPU node: {seen}")
            assert seen == ["EPERM"] * TRIES, seen
            guarded = (shared / "governor.toml").read_text()
            parents = f'gpu_guard_parents = ["{parent.relative_to(guard_mount())}"]\n'
            # Off: the user exempt too, or the process, moved into its session, would meet its rules.
            off = guarded.replace(parents, 'gpu_guard = "tasks"\n').replace("[sessions]\n",
                                                                              f'[sessions]\nexempt = ["{USER}"]\n')
            for text, expected in ((off, "ENXIO"), (guarded, "EPERM")):
                (shared / "governor.toml").write_text(text)
                reloaded = subprocess.run([GOVERNOR, "reload", "--socket", gov.socket], capture_output=True,
                                          text=True, timeout=60)
                assert reloaded.returncode == 0, reloaded.stderr
                seen = opens_from(parent, node)
                assert seen == expected, (seen, text)  # the reload's guard is in force, not the old one
        finally:
            gov.close()
        after = opens_from(parent, node)
        assert after == "ENXIO", (after, (shared / "daemon.log").read_text()[-3000:])  # a clean stop took the guard off


STANDIN = Path(__file__).parents[1] / "support" / "standin_device.py"


def a_standin_device_class_is_denied_where_sessions_start_and_open_to_tasks() -> None:
    """Issue 45, point 3: the stand-in second device class (:mod:`support.standin_device`; the
    daemon runs with it registered through the registry and the provider table, governing the
    stand-in node, no GPU governed) is denied where sessions start as GPUs are, open to a task
    that asks for it and to no other, and the guard is gone once the daemon stops cleanly."""
    with login_parent() as (shared, parent, node):
        gov = Governor(shared, '[capacity]\ncpu = 1\nmemory = "1G"\n'
                               f'gpu_guard_parents = ["{parent.relative_to(guard_mount())}"]\n'
                               f'[groups.A]\nusers = ["{USER}", "root"]\n[sessions]\nmemory = "64M"\n',
                       wrapper=(sys.executable, str(STANDIN), node))
        try:
            guard = gov.status()["daemon"]["gpu_guard"]
            assert guard["kind"] == "sessions" and guard["guarded"] == [str(parent)], guard
            seen = [opens_from(parent, node) for _ in range(TRIES)]
            assert seen == ["EPERM"] * TRIES, seen
            for asked, expected in (([], "EPERM"), (["--fpgas", "1"], "ENXIO")):
                # A task asking for the class is admitted and opens the node (no driver); one asking none may not.
                task = subprocess.run([sys.executable, str(STANDIN), node, GOVERNOR, "run", "--socket", gov.socket,
                                       "--group", "A", "--cpus", "0.1", "--memory", "32M", *asked, "--",
                                       "sh", "-c", OPEN, "open", node], capture_output=True, text=True, timeout=60)
                assert (task.returncode, errno_name(task.stdout)) == (0, expected), (asked, task.stdout, task.stderr)
        finally:
            gov.close()
        after = opens_from(parent, node)
        assert after == "ENXIO", (after, (shared / "daemon.log").read_text()[-3000:])
