"""Safe on a shared host, on this host's real cgroup v1 (issue 21): one daemon governs the
sessions, no daemon takes another's processes, a refused start leaves nothing, and a daemon
stopped once its tasks ended leaves nothing in /sys/fs/cgroup."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from daemon_harness import GOVERNOR, Governor
from session_scenarios import SessionUsers, cgroup_of, missing, wait_for
from test_daemon_v1 import _skip_reason

from governor.cgroups import detect
from governor.daemons import REGISTRY

pytestmark = pytest.mark.kernel_v1
SESSIONS = '[groups.A]\nusers = ["gov-alice"]\n[sessions]\ncpu = 0.5\nmemory = "256M"\n'


@pytest.fixture(autouse=True)
def _needs_v1():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)


def made_by(root_name: str) -> list[str]:
    """What a daemon with cgroup root ``root_name`` left: its root in any hierarchy (below this
    process's own cgroup, where a relative root goes) and its entry in the host's registry."""
    left = [str(own / root_name) for own in detect.cgroup_dirs().values() if (own / root_name).exists()]
    if REGISTRY.is_dir():
        left += [str(p) for p in REGISTRY.iterdir() if root_name in p.read_text(errors="replace")]
    return left


def daemon(tmp: Path, config: str, root_name: str, socket: Path) -> subprocess.CompletedProcess:
    """``governor daemon`` as a refused start runs: to its end (it stops at once)."""
    (tmp / "g.toml").write_text(config + f'\n[daemon]\nstate_dir = "{tmp}/state"\n')
    return subprocess.run([GOVERNOR, "daemon", "--config", str(tmp / "g.toml"), "--socket", str(socket),
                           "--cgroup-root", root_name], capture_output=True, text=True, timeout=60)


def test_one_daemon_governs_the_sessions_and_a_refused_start_leaves_nothing(tmp_path):
    for name in ("first", "second", "beside"):
        (tmp_path / name).mkdir()
    first = Governor(tmp_path / "first", '[groups."*"]\n[sessions]\n')
    try:
        second = tmp_path / "second"
        root_name = f"governor-test-{uuid.uuid4().hex[:8]}"
        # Sessions on: refused, naming the first (the issue: two such daemons fought over users).
        refused = daemon(second, '[groups."*"]\n[sessions]\n', root_name, second / "s.sock")
        assert refused.returncode == 1, refused.stderr
        assert f"pid {first.daemon.pid}, cgroup root {first.status()['daemon']['cgroup_root']}" in refused.stderr
        assert "[sessions] enabled = false" in refused.stderr
        # The socket another daemon serves on; a state directory it cannot trust; a bad config.
        refused_too = [daemon(second, '[groups."*"]\n[sessions]\nenabled = false\n', root_name, Path(first.socket))]
        untrusted = second / "bad-state"
        untrusted.mkdir(mode=0o777)
        untrusted.chmod(0o777)
        (second / "g2.toml").write_text(f'[groups."*"]\n[sessions]\nenabled = false\n[daemon]\nstate_dir = "{untrusted}"\n')
        refused_too.append(subprocess.run([GOVERNOR, "daemon", "--config", str(second / "g2.toml"), "--socket",
                                           str(second / "s2.sock"), "--cgroup-root", root_name],
                                          capture_output=True, text=True, timeout=60))
        refused_too.append(daemon(second, '[groups."*"]\nweight = -1\n', root_name, second / "s3.sock"))
        for result, why in zip(refused_too, ("another process is serving on this socket", "writable by others",
                                             "weight")):
            assert result.returncode in (1, 2) and why in result.stderr, result.stderr
        assert not made_by(root_name) and not (second / "state").exists()
        assert first.status()["daemon"]["pid"] == first.daemon.pid  # the first serves on
        # Sessions off: a second daemon may run beside the first.
        beside = Governor(tmp_path / "beside", '[groups."*"]\n')
        beside.close()
    finally:
        first.close()


@pytest.mark.skipif(missing() is not None, reason=f"{missing()}")
def test_a_sessions_daemon_never_takes_another_daemons_processes():
    users = SessionUsers()
    shared = Path(tempfile.mkdtemp(prefix="gov-two-"))
    shared.chmod(0o755)  # alice's governor run must reach the socket
    for name in ("sessions", "tasks"):
        (shared / name).mkdir(mode=0o755)
    sessions = Governor(shared / "sessions", SESSIONS)
    tasks = Governor(shared / "tasks", '[groups.R]\nusers = ["root", "gov-alice"]\n')
    try:
        # Root's task whose processes become alice's (runuser takes her uid): the sessions
        # daemon sees the uid change, and must leave them in the task (the issue: it moved
        # them into her session, and `governor stop` of the task then ended nothing).
        proc = tasks.run("R", ["runuser", "-u", "gov-alice", "--", "sh", "-c", "sleep 600 & sleep 601 & wait"],
                         cpus=0.2, memory="64M")
        wait_for(lambda: len(_pgrep("^sleep 60[01]$")) >= 2, "alice's sleeps")
        pids = _pgrep("^sleep 60[01]$")
        time.sleep(1.5)  # the exec and uid events have been handled
        [task] = tasks.status()["groups"]["R"]["tasks"]
        for pid in pids:
            assert (cgroup_of(pid) or "").endswith(f"/R/task-{task['id']}"), cgroup_of(pid)
        subprocess.run([GOVERNOR, "stop", "--socket", tasks.socket, task["id"]], check=True, capture_output=True)
        wait_for(lambda: not _pgrep("^sleep 60[01]$"), "the task's sleeps to end")
        proc.wait(10)
        # And a process in alice's session may not leave it for another daemon's task.
        asked = subprocess.run(["runuser", "-u", "gov-alice", "--", "sh", "-c",
                                f"sleep 1; exec {GOVERNOR} run --socket {tasks.socket} --memory 32M -- true"],
                               capture_output=True, text=True, timeout=60)
        assert asked.returncode != 0 and "governed by another governor daemon" in asked.stderr, asked.stderr
    finally:
        users.kill_all()
        tasks.close()
        sessions.close()
        users.remove()
        shutil.rmtree(shared, ignore_errors=True)


def test_a_daemon_stopped_once_its_tasks_ended_leaves_nothing(tmp_path):
    gov = Governor(tmp_path, '[groups.R]\nusers = ["root"]\n')
    try:
        gov.run("R", ["sleep", "600"], cpus=0.2, memory="32M")
        [task] = gov.status()["groups"]["R"]["tasks"]
        subprocess.run([GOVERNOR, "stop", "--socket", gov.socket, task["id"]], check=True, capture_output=True)
        gov.wait(lambda: not gov.status()["groups"], "the task to end")
        gov.daemon.send_signal(signal.SIGTERM)
        gov.daemon.wait(20)
        assert not made_by(gov.root_name)
        assert not os.path.exists(gov.socket)
    finally:
        gov.close()


def _pgrep(pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]
