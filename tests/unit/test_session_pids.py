"""A session's pids.max held against the daemon's lag (issue 42): a process started after its
session's first, found when the session is full, is ended rather than moved in; one running
before (the first, those found at a start or a reload, those before a failed start) is moved
in as before. The kernel's side (a bomb forked outside while the daemon is stopped) is
pids_scenarios.session_fork_bomb_started_outside_stops_at_its_cap, on v1 and v2."""

import subprocess
import time

import pytest

from governor.cgroups.v1 import CgroupV1Driver
from governor.cgroups.v2 import CgroupV2Driver
from governor.cgroups.limits import CgroupLimits
from governor.core.state import Task
from governor.daemon.session_pids import SessionPids
from governor.errors import EndedAtPidsMax, NoLongerTheUsers
from governor.host.processes import CLOCK_TICKS, birth, boot_clock, end_if


def _sleep() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def _next_tick(after: float) -> None:
    """Wait until the boot clock is a clock tick past ``after``: a process started then is younger."""
    while boot_clock() < after + 2 / CLOCK_TICKS:
        time.sleep(1 / CLOCK_TICKS)


class Full:
    """The hierarchy's one question here: whether a cgroup is at its pids.max."""

    def __init__(self, full: bool = True):
        self.full = full

    def pids_full(self, rel):
        return self.full


class Tree:
    def __init__(self):
        self.queued = 0

    def moving_into(self, rel):
        return self.queued > 0


class Journal:
    def __init__(self):
        self.events = []

    def event(self, kind, message, level=0, **_):
        self.events.append((kind, message))


def _session(pid: int) -> Task:
    return Task("session-1", "A", pid, 1, "alice", (), {"cpu": 0.5}, 0.0)


def _pids(full: bool = True, real_uid=lambda pid: 1) -> tuple[SessionPids, Tree, Journal]:
    """The check of alice's session (uid 1); the processes the tests start are root's, so their
    real uid is ``real_uid``'s (alice's, unless a test says)."""
    tree, journal = Tree(), Journal()
    return SessionPids(Full(full), tree, journal, lambda session: CgroupLimits(pids_max=20), real_uid), tree, journal


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        started.append(_sleep())
        return started[-1]

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_birth_reads_the_kernels_start_time_whatever_the_command_name(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_bytes(b"7 (a) b) (c) S 42 7 7 0 -1 4194560 " + b"0 " * 12 + b"250 0\n")
    assert birth(7, tmp_path) == 250 / CLOCK_TICKS
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "stat").write_bytes(b"8 (cut) S 1 8\n")
    with pytest.raises(ValueError, match="/proc/8/stat has 5 fields"):
        birth(8, tmp_path)
    with pytest.raises(FileNotFoundError):
        birth(9, tmp_path)
    process = _sleep()
    try:
        assert 0 < birth(process.pid) <= boot_clock()
    finally:
        process.kill()
        process.wait()


def test_end_if_signals_only_when_asked_once_the_process_is_pinned(processes):
    kept, ended = processes(), processes()
    assert not end_if(kept.pid, lambda: False) and kept.poll() is None
    assert end_if(ended.pid, lambda: True) and ended.wait(10) == -9
    assert not end_if(ended.pid, lambda: True)  # reaped: gone, no error


@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_pids_full_reads_the_cap_and_the_count_where_the_pids_files_are(tmp_path, mode):
    if mode == "v2":
        driver, directory = CgroupV2Driver(tmp_path), tmp_path / "A" / "session-1"
    else:
        roots = {c: tmp_path / c for c in ("cpu", "cpuacct", "cpuset", "memory", "pids")}
        driver, directory = CgroupV1Driver(roots), tmp_path / "pids" / "A" / "session-1"
    directory.mkdir(parents=True)
    assert not driver.pids_full("A/session-1")  # no files: no pids controller there
    for cap, current, full in (("max", "900", False), ("20", "19", False), ("20", "20", True), ("20", "25", True)):
        (directory / "pids.max").write_text(cap + "\n")
        (directory / "pids.current").write_text(current + "\n")
        assert driver.pids_full("A/session-1") is full
    assert not driver.pids_full("A/gone")


def test_a_process_started_after_the_sessions_first_is_ended_when_the_session_is_full(processes):
    pids, tree, journal = _pids()  # the daemon starts
    _next_tick(boot_clock())
    older = processes()
    _next_tick(birth(older.pid))
    first = processes()
    _next_tick(birth(first.pid))
    younger = processes()
    pids.asked(1, first.pid)
    check = pids.check(_session(first.pid))
    check("A/session-1", first.pid)  # the first: never
    check("A/session-1", older.pid)  # running before it: moved in, past the cap
    with pytest.raises(EndedAtPidsMax):
        check("A/session-1", younger.pid)
    assert younger.wait(10) == -9 and older.poll() is None and first.poll() is None
    tree.queued = 1
    pids.moved(_session(first.pid), True)
    pids.moved(_session(first.pid), True)
    tree.queued = 0
    pids.moved(_session(first.pid), False)  # the last queued move: the count is said
    assert [message for _, message in journal.events] == [
        "the session of alice is at its pids.max (20): processes started outside it after its first are ended "
        "(SIGKILL) rather than moved in, as a fork inside it would have failed",
        "2 process(es) of alice started outside the session, which is at its pids.max (20), were ended"]
    pids.moved(_session(first.pid), False)
    assert len(journal.events) == 2


def test_nothing_is_ended_while_the_session_has_room(processes):
    pids, _, journal = _pids(full=False)
    _next_tick(boot_clock())
    first = processes()
    _next_tick(birth(first.pid))
    younger = processes()
    pids.asked(1, first.pid)
    pids.check(_session(first.pid))("A/session-1", younger.pid)
    assert younger.poll() is None and not journal.events


def test_what_ran_before_a_reload_or_a_failed_start_is_moved_not_ended(processes):
    pids, _, _ = _pids()
    _next_tick(boot_clock())
    first = processes()
    _next_tick(birth(first.pid))
    running = processes()
    _next_tick(birth(running.pid))
    pids.failed(1)  # its processes ran on where they were
    pids.asked(1, first.pid)
    pids.check(_session(first.pid))("A/session-1", running.pid)
    _next_tick(boot_clock())
    before_reload = processes()
    _next_tick(birth(before_reload.pid))
    pids.reset()
    pids.asked(1, first.pid)
    pids.check(_session(first.pid))("A/session-1", before_reload.pid)
    found = Task("session-2", "A", first.pid, 2, "bob", (), {"cpu": 0.5}, 0.0)  # an earlier daemon's
    pids.real_uid = lambda pid: 2  # (bob's processes)
    pids.check(found)("A/session-2", running.pid)
    assert running.poll() is None and before_reload.poll() is None


def test_a_process_that_cannot_be_signalled_is_moved_in_and_the_queue_goes_on(processes, monkeypatch):
    pids, _, _ = _pids()
    _next_tick(boot_clock())
    first = processes()
    _next_tick(birth(first.pid))
    younger = processes()

    def refused(pid, still):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("governor.daemon.session_pids.end_if", refused)
    pids.asked(1, first.pid)
    pids.check(_session(first.pid))("A/session-1", younger.pid)  # no error: the move is made
    assert younger.poll() is None


def test_a_process_whose_uid_is_no_longer_the_users_is_not_moved_nor_ended(processes):
    # runuser's parent (root's) took alice's uid for a moment: the daemon looked then, and the
    # move came up on the cgroup thread after it had taken root's back. It was moved into her
    # session. The check reads the uid again, just before the move.
    first, parent = processes(), processes()
    uids = {first.pid: 1, parent.pid: 0}
    pids, _, _ = _pids(full=True, real_uid=uids.__getitem__)
    with pytest.raises(NoLongerTheUsers):
        pids.check(_session(first.pid))("A/session-1", parent.pid)
    assert parent.poll() is None  # not ended either
    pids.check(_session(first.pid))("A/session-1", first.pid)  # hers: moved in
