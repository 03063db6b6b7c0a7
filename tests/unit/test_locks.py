"""The daemon's locks (cgroups/locks.py, issue 31 point 7): on files no other user can open, and
taken over from a daemon that is gone. On a temporary directory; the shipped unit under a
real systemd is in tests/system (run.sh, sessions.sh)."""

import fcntl
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from governor.cgroups.hierarchy import hold_root
from governor.cgroups.locks import LockHeld, lock_directory, release, start_time, take
from governor.host.daemons import DaemonEntry, Registry
from governor.errors import CgroupError, GovernorError


def foreign_holder(path, pid, started, claim=None):
    """Lock ``path`` through a descriptor of its own (as a process a daemon forked would keep
    it), naming ``pid`` as the holder; returns the descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, json.dumps({"pid": pid, "started": started, "claim": claim or {}}).encode())
    return fd


def dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_the_lock_is_in_a_directory_only_its_user_may_open(tmp_path):
    path = tmp_path / "locks" / "x.lock"
    fd = take(path, {"what": "test"})
    try:
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        held = json.loads(path.read_text())
        assert held == {"pid": os.getpid(), "started": start_time(os.getpid()), "claim": {"what": "test"}}
        with pytest.raises(LockHeld) as refused:
            take(path, {"what": "second"})
        assert refused.value.pid == os.getpid() and refused.value.claim == {"what": "test"}
    finally:
        release(path, fd)
    assert not path.exists()


@pytest.mark.parametrize("mode", [0o755, 0o711, 0o770])
def test_a_lock_directory_others_may_open_is_refused_naming_it(tmp_path, mode):
    directory = tmp_path / "locks"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(GovernorError) as refused:
        take(directory / "x.lock", {})
    message = str(refused.value)
    assert message.startswith(f"{directory} is open to other users (mode {mode:04o}, not 0700)")
    assert "Remove it" in message


def test_a_lock_a_dead_daemon_left_held_is_taken_over(tmp_path, caplog):
    path = tmp_path / "locks" / "x.lock"
    path.parent.mkdir(mode=0o700)
    gone = dead_pid()
    left = foreign_holder(path, gone, 12345, {"root": "/old"})
    try:
        with caplog.at_level(logging.WARNING, logger="governor.cgroups.locks"):
            fd = take(path, {"root": "/new"})
        assert json.loads(path.read_text())["pid"] == os.getpid()
        assert f"took over {path} from pid {gone}" in caplog.text and "/old" in caplog.text
        os.close(fd)
    finally:
        os.close(left)


def test_a_lock_whose_pid_is_another_process_now_is_taken_over(tmp_path):
    path = tmp_path / "locks" / "x.lock"
    path.parent.mkdir(mode=0o700)
    # This process's own pid, with a start time it never had: the daemon that wrote it is gone
    # and the pid was given to another process.
    left = foreign_holder(path, os.getpid(), start_time(os.getpid()) + 1)
    try:
        os.close(take(path, {}))
    finally:
        os.close(left)


def test_a_live_holder_keeps_the_lock(tmp_path):
    path = tmp_path / "locks" / "x.lock"
    path.parent.mkdir(mode=0o700)
    child = subprocess.Popen(["sleep", "60"])
    try:
        left = foreign_holder(path, child.pid, start_time(child.pid))
        with pytest.raises(LockHeld) as refused:
            take(path, {})
        assert refused.value.pid == child.pid
        os.close(left)
    finally:
        child.kill()
        child.wait()


def test_a_cgroup_root_held_by_a_user_who_locks_its_directory_is_still_taken(tmp_path):
    # The old lock was a flock on the root's directory, which any user may open.
    directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        os.close(hold_root(tmp_path, tmp_path / "locks"))
    finally:
        os.close(directory)


def test_a_second_daemon_on_the_same_root_is_refused_with_the_holders_pid(tmp_path):
    fd = hold_root(tmp_path / "root", tmp_path / "locks")
    try:
        with pytest.raises(CgroupError, match=rf"another governor daemon \(pid {os.getpid()}\) already governs"):
            hold_root(tmp_path / "root", tmp_path / "locks")
        os.close(hold_root(tmp_path / "other-root", tmp_path / "locks"))
    finally:
        os.close(fd)


def test_the_sessions_claim_of_a_dead_daemon_is_taken_over(tmp_path, caplog):
    registry = Registry(tmp_path / "daemons")
    path = tmp_path / "locks" / "sessions.lock"
    path.parent.mkdir(mode=0o700)
    dead = DaemonEntry(dead_pid(), "/gov-old", "/etc/old.toml", "/run/old.sock")
    left = foreign_holder(path, dead.pid, 1, dead.__dict__)
    try:
        with caplog.at_level(logging.WARNING):
            registry.claim_sessions(DaemonEntry(os.getpid(), "/gov-new", "/etc/new.toml", "/run/new.sock"))
        assert registry.holds_sessions and "/gov-old" in caplog.text
        with pytest.raises(GovernorError, match=f"pid {os.getpid()}, cgroup root /gov-new"):
            Registry(tmp_path / "daemons").claim_sessions(DaemonEntry(1, "/x", "/x.toml", "/x.sock"))
    finally:
        registry.release_sessions()
        os.close(left)


def test_an_ordinary_user_gets_a_lock_directory_of_its_own():
    if os.geteuid() != 0:
        assert lock_directory().name == f"governor-locks-{os.geteuid()}"
        return
    probe = ("import os\nfrom pathlib import Path\nfrom governor.cgroups.hierarchy import hold_root\n"
             "from governor.cgroups.locks import lock_directory\n"
             "fd = hold_root(Path('/nonexistent-root'))\n"
             "info = os.stat(lock_directory())\n"
             "print(lock_directory(), oct(info.st_mode & 0o777), info.st_uid)\n")
    nobody = 65534
    scratch = Path(tempfile.mkdtemp())  # in /tmp: nobody can reach it (pytest's tmp_path is root's alone)
    try:
        scratch.chmod(0o1777)  # sticky and open to all, as /tmp is
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, user=nobody,
                              env={**os.environ, "TMPDIR": str(scratch)}, cwd="/")
        if done.returncode and "ModuleNotFoundError" in done.stderr:
            pytest.skip(f"user nobody cannot import this checkout's governor: {done.stderr.strip()[-200:]}")
        assert done.stdout.split() == [str(scratch / f"governor-locks-{nobody}"), "0o700", str(nobody)], done.stderr
    finally:
        shutil.rmtree(scratch)


def test_a_stopping_daemon_gives_up_its_root_lock_and_removes_the_file(tmp_path):
    """Issue 44.1: every daemon left root-<digest>.lock behind (33 on one host, the demo's too)."""
    from governor.cgroups.hierarchy import Hierarchy, root_lock
    from governor.cgroups.locks import held

    path = root_lock(tmp_path / "root", tmp_path / "locks")
    hierarchy = Hierarchy(None, str(tmp_path / "root"), (), lock=(path, hold_root(tmp_path / "root", tmp_path / "locks")))
    assert held(path)
    hierarchy.release_lock()
    hierarchy.release_lock()  # twice is harmless
    assert not path.exists() and list((tmp_path / "locks").iterdir()) == []
