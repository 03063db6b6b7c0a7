"""Sessions: who is governed, the process-events parser, and the daemon's session flow on the
in-memory driver. The kernel side (moves within 100 ms, escapes, DRF split) is proven in
tests/integration (scenarios.sessions_*)."""

import asyncio
import os
import pwd
import struct
import subprocess
import sys
import time

import pytest

from governor.host import procevents
from governor.config.load import parse_config
from governor.errors import RequestError
from governor.host.procevents import ProcessEvents, parse_events
from governor.host.session_rules import NOBODY_UID, SessionOwners, login_uid_min
from governor.cgroups.hierarchy import Hierarchy, Location
from support.daemons import GIB, FakeDriver, collect, on_loop
from support.proc_messages import message as _message
from support.sessions import CONFIG, USER, session_daemon
from governor.wire.protocol import LaunchRequest, Peer

pytestmark = pytest.mark.daemon(make=session_daemon)  # the `daemon` fixture: sessions on


def owners(text: str = CONFIG, uid_min: int = 1) -> SessionOwners:
    return SessionOwners(parse_config(text, "t.toml"), uid_min)


def test_uid_min_is_read_from_login_defs(tmp_path):
    defs = tmp_path / "login.defs"
    defs.write_text("# UID_MIN 5\nMAIL_DIR /var/mail\nUID_MIN\t\t\t 2000\nUID_MAX 60000\n")
    assert login_uid_min(defs) == 2000
    defs.write_text("UID_MIN 0\n")
    assert login_uid_min(defs) == 1000
    assert login_uid_min(tmp_path / "missing") == 1000


def test_root_system_users_nobody_exempt_and_groupless_users_have_no_session():
    rules = owners()
    assert rules.owner(1) == (USER, "A")
    assert rules.owner(0) is None
    assert owners(uid_min=2).owner(1) is None
    assert rules.owner(NOBODY_UID) is None
    assert rules.owner(2) is None  # in no group
    assert rules.owner(4_000_000) is None  # unknown to the user database
    assert owners(CONFIG + f'exempt = ["{USER}"]\n').owner(1) is None
    assert owners(CONFIG.replace("[sessions]", "[sessions]\nenabled = false")).owner(1) is None


def test_owners_are_looked_up_again_after_forget(monkeypatch):
    rules = owners()
    assert rules.owner(1) == (USER, "A")
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))
    assert rules.owner(1) == (USER, "A")  # cached
    rules.forget()
    assert rules.owner(1) is None


def test_uid_events_give_tgid_and_effective_uid_and_execs_are_not_read():
    seen: list = []
    parse_events(_message(0x2, 101, 100), seen)  # PROC_EVENT_EXEC: sessions do not need it
    # Root's su -l parent in pam_keyinit, setreuid(1000, 0): root's still (the event gave 1000,
    # and a session was started for it when its /proc was read in that moment).
    parse_events(_message(procevents.PROC_EVENT_UID, 201, 200, 1000, 0), seen)
    parse_events(_message(procevents.PROC_EVENT_UID, 100, 100, 1001, 1001), seen)
    assert seen == [("uid", 200, 0), ("uid", 100, 1001)]


def test_fork_events_give_new_processes_and_their_parents_not_threads():
    seen: list = []
    parse_events(_message(procevents.PROC_EVENT_FORK, 10, 10, 11, 11), seen)
    parse_events(_message(procevents.PROC_EVENT_FORK, 11, 11, 12, 11), seen)  # a thread of 11
    assert seen == [("fork", 11, 10)]


@pytest.mark.parametrize("data", [
    b"", b"\x00" * 10,
    _message(0x1, 1, 2, 3, 4),  # fork: not asked for
    _message(procevents.PROC_EVENT_UID, 5, 5, 1, 1, index=2),  # another connector
    _message(procevents.PROC_EVENT_UID, 5, 5, 1, 1, kind=2),  # an error message
    _message(procevents.PROC_EVENT_UID, 5, 5, 1, 1)[:-4],  # cut short: its length says more
    struct.pack("=IHHII", 8, 3, 0, 0, 0),  # a length below the header's
])
def test_other_or_broken_messages_are_skipped(data):
    seen: list = []
    parse_events(data, seen)
    assert seen == []


def test_several_messages_in_one_datagram():
    seen: list = []
    parse_events(_message(procevents.PROC_EVENT_FORK, 6, 6, 7, 7) + _message(procevents.PROC_EVENT_UID, 8, 8, 5, 5), seen)
    assert seen == [("fork", 7, 6), ("uid", 8, 5)]


@pytest.mark.skipif(os.geteuid() != 0, reason="the process-events connector needs CAP_NET_ADMIN (root)")
@pytest.mark.parametrize("watch", [False, True], ids=["classic filter", "eBPF filter"])
def test_the_kernel_reports_a_uid_change(watch):
    events = ProcessEvents(watch=watch)
    try:
        child = subprocess.Popen([sys.executable, "-c", "pass"], preexec_fn=lambda: os.setuid(1))
        child.wait()
        seen: dict = {}
        forked: set = set()
        deadline = time.monotonic() + 5
        while child.pid not in seen or seen[child.pid] is None:
            assert time.monotonic() < deadline, f"no event for pid {child.pid}: {seen}"
            time.sleep(0.01)
            got, _ = events.read()
            forked.update(pid for kind, pid, _ in got if kind == "fork")
            seen.update((pid, uid) for kind, pid, uid in got if kind == "uid")
        # The child's fork by this (unwatched) process: seen through the classic filter only.
        assert seen[child.pid] == 1 and (child.pid in forked) is (events.watched is None)
    finally:
        events.close()



def test_an_event_uid_a_process_no_longer_has_moves_nothing(daemon):
    # A process that took the user's uid and another since, before its event was read: it says 1.
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(900, 1))
    assert not daemon.tasks


def test_a_process_that_took_roots_uid_back_before_its_move_stays_where_it_is(daemon, caplog):
    # runuser's parent: alice's uid at the look (on the loop), root's again by the time its
    # move came up on the cgroup thread. It was moved into her session all the same.
    import threading

    first = daemon.sessions.real_uid
    daemon.sessions.real_uid = lambda pid: (0 if pid == 600 and threading.current_thread().name.startswith("cgroups")
                                            else first(pid))
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))  # her session, her shell
    on_loop(daemon, lambda: daemon.sessions.govern_process(600, 1))
    assert daemon.hierarchy.driver.procs["A/session-1"] == [500]
    assert "cannot move" not in caplog.text  # not a failure: not hers


def test_a_process_of_a_governed_user_starts_their_session_once(daemon):
    driver = daemon.hierarchy.driver
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(501, 1))
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))  # already there
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(502, 0))  # root: never
    session = daemon.tasks.get("session-1")
    assert (session.group, session.cgroup, session.user) == ("A", "A/session-1", USER)
    assert session.demand == {"cpu": 0.5, "memory": 3 * GIB, "pids": 4096}
    assert driver.procs["A/session-1"] == [500, 501]
    assert daemon.store.directory.joinpath("session-1.json").exists()
    assert daemon.enforcement.allocation.groups["A"].allocation["cpu"] == pytest.approx(0.5)
    [task] = daemon.observation.status()["groups"]["A"]["tasks"]
    assert (task["id"], task["session"], task["command"]) == ("session-1", True, [])
    assert any(e["message"].startswith(f"session of {USER} started") for e in daemon.journal.events)


def test_processes_in_a_task_stay_and_those_in_another_session_move(daemon):
    driver = daemon.hierarchy.driver
    driver.procs["B/task-9"] = [600]
    driver.procs["B/task-9/sub"] = [601]
    driver.procs["A/session-7"] = [602]
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(600, 1))
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(601, 1))
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(602, 1))
    assert driver.procs["A/session-1"] == [602]


def test_a_session_counts_what_it_uses_against_memory_so_a_launch_may_wait(daemon):
    on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))  # capped at 3G of 4G
    daemon.observation.usage["A/session-1"] = {"memory": 3 * GIB}  # and using it all
    request = LaunchRequest(pid=os.getpid(), group="B", demand={"memory": 2 * GIB}, command=("x",), wait=False)
    with pytest.raises(RequestError) as refused:
        asyncio.run(collect(daemon.requests.stream(request, Peer(pid=os.getpid(), uid=0, gid=0))))
    assert refused.value.code == "would_wait"


def test_a_session_ends_when_its_cgroup_empties(daemon):
    on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    daemon.hierarchy.driver.procs["A/session-1"] = []
    on_loop(daemon, lambda: daemon.exits.check(["session-1"], "exit"))
    assert daemon.tasks.get("session-1") is None
    assert "A/session-1" not in daemon.hierarchy.driver.cgroups
    assert not daemon.store.directory.joinpath("session-1.json").exists()
    assert any(e["message"].startswith(f"session of {USER} ended (exit)") for e in daemon.journal.events)


def test_sessions_off_moves_nothing(tmp_path, daemon):
    daemon.reloads.use(parse_config(CONFIG.replace("[sessions]", "[sessions]\nenabled = false"), "t.toml"))
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    assert on_loop(daemon, lambda: daemon.sessions.rescan("test")) == 0
    assert not daemon.tasks


def test_rescan_moves_a_governed_users_running_process(daemon, monkeypatch):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        real = pwd.getpwuid(os.getuid())
        daemon.sessions.host_pids = lambda: [os.getpid(), sleeper.pid]
        monkeypatch.setattr(daemon.policy.owners, "owner",
                            lambda uid: (real.pw_name, "A") if uid == os.getuid() else None)
        assert on_loop(daemon, lambda: daemon.sessions.rescan("test")) >= 1
        session = daemon.tasks.get(f"session-{os.getuid()}")
        assert sleeper.pid in daemon.hierarchy.driver.procs[session.cgroup]
        assert on_loop(daemon, lambda: daemon.sessions.rescan("again")) == 0
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_in_a_session_launches_a_task_of_its_own(daemon):
    on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    request = LaunchRequest(pid=500, group="B", demand={"memory": GIB}, command=("x",))
    reply = asyncio.run(collect(daemon.requests.stream(request, Peer(pid=500, uid=0, gid=0))))[-1]
    assert reply["task"] == "1" and "nested" not in reply and 500 in daemon.hierarchy.driver.procs["B/task-1"]


def test_without_systemd_a_process_in_a_login_session_is_left_to_logind(daemon):
    daemon.hierarchy.locate.logind[700] = 1
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))
    assert not daemon.tasks


def test_locate_reads_proc(tmp_path):
    hierarchy = Hierarchy(FakeDriver(), "/fake", (), proc_key="cpu", proc_root="/gov")
    for pid, text, expected in [
        (1, "4:cpu,cpuacct:/gov/A/task-3\n1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n",
         Location("A/task-3", 1000)),
        (2, "4:cpu,cpuacct:/gov\n0::/init.scope\n", Location("", None)),
        (3, "4:cpu,cpuacct:/governor-other/x\n1:name=systemd:/user.slice/user-1.slicex/s\n", Location(None, None)),
    ]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
        assert hierarchy.locate(pid, tmp_path)[:2] == expected[:2]
    v2 = Hierarchy(FakeDriver(), "/fake", (), proc_key="", proc_root="/gov")
    (tmp_path / "4").mkdir()
    (tmp_path / "4" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-1.scope\n")
    assert v2.locate(4, tmp_path)[:2] == (None, 1000)


def test_explain_says_what_each_group_runs(daemon):
    from governor.cli.explain_view import runs
    from governor.wire.explain_types import ExplainGroup, decode_explain
    on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    explain = daemon.requests.explain()
    group = explain["groups"]["A"]
    assert (group["tasks"], group["sessions"]) == (0, [USER])
    assert runs(decode_explain(explain).groups["A"]) == f"session of {USER}"
    assert runs(ExplainGroup(tasks=2, sessions=("bob",))) == "2 tasks, session of bob"
    assert runs(ExplainGroup(tasks=1)) == "1 task"


def test_top_and_status_name_a_session():
    from governor.cli.view_common import task_command
    from governor.wire.status_types import TaskEntry
    assert task_command(TaskEntry("1", session=True, user="alice")) == "session of alice"
    assert task_command(TaskEntry("2", command=("make", "-j32"))) == "make -j32"


@pytest.mark.skipif(os.geteuid() != 0, reason="a child of another uid needs root")
def test_an_exec_event_looks_the_real_uid_up(daemon):
    child = subprocess.Popen(["sleep", "30"], preexec_fn=lambda: os.setuid(1))
    try:
        assert not on_loop(daemon, lambda: daemon.sessions.govern_process(os.getpid()))  # root
        assert not on_loop(daemon, lambda: daemon.sessions.govern_process(999_999_999))  # no such process
        assert on_loop(daemon, lambda: daemon.sessions.govern_process(child.pid))
        assert child.pid in daemon.hierarchy.driver.procs["A/session-1"]
    finally:
        child.kill()
        child.wait()


def test_governor_run_inside_a_task_stays_in_it_and_counts_once(daemon):
    def launch(pid):
        request = LaunchRequest(pid=pid, group="B", demand={"cpu": 0.5, "memory": GIB}, command=("x",))
        return asyncio.run(collect(daemon.requests.stream(request, Peer(pid=pid, uid=0, gid=0))))[-1]

    first = launch(os.getpid())
    daemon.hierarchy.driver.procs[f"B/task-{first['task']}"].append(801)  # a child of the task's command
    nested = launch(801)
    assert (nested["task"], nested["nested"]) == (first["task"], True)
    assert len(daemon.tasks) == 1 and daemon.tasks.demands()["B"]["cpu"] == 0.5


@pytest.mark.skipif(os.geteuid() != 0, reason="the process-events connector needs CAP_NET_ADMIN (root)")
def test_sessions_turned_on_by_a_reload_follow_process_events(tmp_path, daemon):
    off = tmp_path / "off.toml"
    off.write_text(CONFIG.replace("[sessions]", "[sessions]\nenabled = false"))
    daemon.reloads.load_config = lambda: parse_config(off.read_text(), str(off))
    daemon.reloads.use(daemon.reloads.load_config())

    async def reload_twice():
        daemon.sessions.follow_processes()
        assert daemon.sessions.process_events is None  # off: not subscribed
        off.write_text(CONFIG)
        daemon.reloads.reload("test")
        subscribed = daemon.sessions.process_events is not None
        if subscribed:
            asyncio.get_running_loop().remove_reader(daemon.sessions.process_events.fileno())
            daemon.sessions.process_events.close()
        return subscribed

    assert asyncio.run(reload_twice())


def test_one_user_holds_at_most_max_tasks_per_user_and_root_is_not_bound(daemon):
    from support.daemons import launch
    daemon.reloads.use(parse_config(CONFIG + "[daemon]\nmax_tasks_per_user = 2\n", "t.toml"))
    on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))  # a session does not count
    for pid in (801, 802):
        launch(daemon, pid, uid=1, group="A", memory=GIB // 8)
    with pytest.raises(RequestError) as refused:
        launch(daemon, 803, uid=1, group="A", memory=GIB // 8)
    assert refused.value.code == "too_many" and "max_tasks_per_user = 2" in refused.value.message
    assert daemon.tasks.get("3") is None and not daemon.queue
    launch(daemon, 804, uid=0, group="B", memory=GIB // 8)
    launch(daemon, 805, uid=0, group="B", memory=GIB // 8)


class FakeEvents:
    """Process events in batches, as ProcessEvents.read gives them; the processes it is told to
    watch (those whose forks the kernel passes)."""

    def __init__(self, *batches):
        self.batches = list(batches)
        self.watched: set[int] = set()
        self.calls: list[tuple[str, int]] = []
        self.uid_changed: set[int] = set()  # those whose uid event the kernel sent, not read yet

    def read(self):
        batch = self.batches.pop(0)
        self.watched.update(pid for _, pid, _ in batch[0])  # as the eBPF program does
        return batch

    def watch(self, pid):
        self.calls.append(("watch", pid))
        self.watched.add(pid)

    def forget(self, pid, *, forked=False):
        if forked and pid in self.uid_changed:
            return  # the kernel watches it for its uid change, not its fork (proc_watch.Watched.forget)
        if pid in self.watched:
            self.calls.append(("forget", pid))
        self.watched.discard(pid)

    def keep_watching(self, pids):
        for pid in self.watched - pids:
            self.forget(pid)


def test_a_forked_child_of_an_unsettled_process_is_governed_and_settled_ones_cost_no_proc_read(daemon):
    # Issue 22, point 4: a job root's runuser starts as alice forks at once and exits; its
    # uid event finds it gone, and only the fork event shows its child (600 → 601).
    driver, locate = daemon.hierarchy.driver, daemon.hierarchy.locate
    looked: list[int] = []
    daemon.hierarchy.locate = lambda pid: looked.append(pid) or locate(pid)
    daemon.sessions.process_events = FakeEvents(([("fork", 601, 600)], False))
    on_loop(daemon, lambda: daemon.sessions.on_process_events())
    assert 601 in driver.procs["A/session-1"] and 600 in driver.procs["A/session-1"]
    # Issue 22, point 11: an exec storm in the session: each exec and fork of a settled
    # process is a dict lookup, never a /proc read.
    looked.clear()
    daemon.sessions._moved = {pid: moved - 2 for pid, moved in daemon.sessions._moved.items()}  # two seconds on
    daemon.sessions.process_events = FakeEvents(([("fork", 603, 600), ("fork", 602, 601)], False))
    on_loop(daemon, lambda: daemon.sessions.on_process_events())
    assert looked == [] and {602, 603} <= daemon.sessions._settled.keys()
    assert not daemon.sessions.process_events.watched  # settled: the kernel stops sending their forks
    daemon.sessions.process_events = FakeEvents(([("uid", 601, 1)], False))  # a uid change: looked at again
    on_loop(daemon, lambda: daemon.sessions.on_process_events())
    assert looked == [601]


def test_a_child_forked_after_its_parent_took_a_users_uid_is_that_users(daemon):
    # The parent 900 (root: settled) forks 601, which takes uid 1, forks 602 and exits before
    # its uid event is handled: the events must be taken in order, or 602 inherits "settled".
    on_loop(daemon, lambda: daemon.sessions.govern_process(900, 0))
    daemon.sessions.process_events = FakeEvents(([("fork", 601, 900), ("uid", 601, 1), ("fork", 602, 601)], False))
    on_loop(daemon, lambda: daemon.sessions.on_process_events())
    assert 602 in daemon.hierarchy.driver.procs["A/session-1"]


def test_a_child_of_a_process_moving_into_a_session_is_judged_by_its_real_uid(daemon):
    # Review of the effective-uid rule: cron's child 700 takes uid 1, and its shell forks 602,
    # which execs sudo before the daemon reads the fork: its /proc, and its own uid event, say
    # root. Its real uid is 1: it was settled outside the session, and its children with it.
    effective = daemon.sessions.effective_uid
    daemon.sessions.effective_uid = lambda pid: 0 if pid == 602 else effective(pid)
    daemon.sessions.process_events = FakeEvents(([("uid", 700, 1), ("fork", 602, 700), ("uid", 602, 0)], False))
    on_loop(daemon, lambda: daemon.sessions.on_process_events())
    assert {700, 602} <= set(daemon.hierarchy.driver.procs["A/session-1"])


def test_a_rescan_walks_again_while_it_finds_processes(daemon):
    # A process that forks a successor and exits every 2 ms is missing from one pid list.
    lists = [[500], [501], [], [700]]
    daemon.sessions.host_pids = lambda: lists.pop(0)
    assert on_loop(daemon, lambda: daemon.sessions.rescan("test")) == 2 and lists == [[700]]


def test_a_full_state_directory_leaves_the_session_governed_and_writes_its_record_later(daemon, monkeypatch):
    # Issue 22, point 9: sessions failed open: the process ran on ungoverned.
    import errno as errnos

    from governor.errors import GovernorError

    save = daemon.store.save

    def full(task):
        raise GovernorError(f"cannot write task record {task.id}: {os.strerror(errnos.ENOSPC)}")

    monkeypatch.setattr(daemon.store, "save", full)
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    assert 500 in daemon.hierarchy.driver.procs["A/session-1"]
    assert any("record is not written" in e["message"] for e in daemon.journal.events)
    on_loop(daemon, lambda: list(daemon.reconcile()))  # still full: tried again later
    assert not daemon.store.directory.joinpath("session-1.json").exists()
    monkeypatch.setattr(daemon.store, "save", save)
    on_loop(daemon, lambda: list(daemon.reconcile()))
    assert daemon.store.directory.joinpath("session-1.json").exists() and not daemon.records.unsaved


def test_a_session_whose_first_process_exited_is_made_and_joined_by_its_children(daemon):
    # The cgroup is made and joined on the cgroup thread. Its first process (runuser's child)
    # exited before the session was made, so watching it failed and its exit was checked at
    # once: the session was taken for ended before its other process moved in, and that one
    # stayed outside (issue 22's fork-away escape, first try after a start).
    def gone(key, path, pid):
        raise ProcessLookupError(pid)

    daemon.exits.watcher.watch = gone

    async def scenario():
        assert daemon.sessions.govern_process(500, 1) and daemon.sessions.govern_process(501, 1)
        await daemon.tree.settled()

    asyncio.run(scenario())
    assert daemon.tasks.get("session-1") is not None and not daemon.exits.ended
    assert 501 in daemon.hierarchy.driver.procs["A/session-1"]


def test_a_child_of_a_settled_parent_whose_uid_changed_since_stays_watched(daemon):
    # CI, under load: runuser (root, settled) forked 500, which took alice's uid and ran a
    # command that forked 501 and exited. The daemon read 500's fork before its uid event;
    # forgetting 500 then made the kernel drop 501's fork, and 501 stayed outside her session.
    daemon.sessions._settled[400] = None
    events = daemon.sessions.process_events = FakeEvents(([("fork", 500, 400)], False))
    events.uid_changed.add(500)
    on_loop(daemon, lambda: daemon.sessions.on_process_events())
    assert 500 in events.watched  # its forks still pass, until its uid event is read


def test_the_kernel_passes_a_processs_forks_from_its_uid_change_until_its_move(daemon):
    # Issue 42: every exec and fork on the host reached the daemon. Now the kernel passes the
    # forks of a process only while the daemon watches it: from its uid change (or from a
    # rescan finding it outside its place) until it is decided or moved.
    events = daemon.sessions.process_events = FakeEvents(([("uid", 700, 1), ("uid", 801, 0), ("fork", 602, 700)], False))
    on_loop(daemon, lambda: daemon.sessions.on_process_events())
    assert {700, 602} <= set(daemon.hierarchy.driver.procs["A/session-1"])
    assert events.calls.index(("forget", 801)) < events.calls.index(("forget", 700))  # root's: at once
    assert events.calls.index(("watch", 700)) < events.calls.index(("forget", 700))  # moved: no longer
    assert not events.watched
    # A rescan forgets a watched process gone without an event of it (its events lost).
    events.watched.add(703)
    daemon.sessions.host_pids = lambda: [700]
    on_loop(daemon, lambda: daemon.sessions.rescan("test"))
    assert not events.watched
