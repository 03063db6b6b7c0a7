"""Sessions: who is governed, and the daemon's session flow on the in-memory driver (a governed
user's process starts their session, which ends when its cgroup empties). The process events
they follow are in test_session_events.py; the kernel side (moves within 100 ms, escapes, DRF
split) is proven in tests/integration (scenarios.sessions_*)."""

import asyncio
import os
import pwd
import subprocess

import pytest

from governor.config.load import parse_config
from governor.errors import RequestError
from governor.host.session_rules import NOBODY_UID, SessionOwners, login_uid_min
from governor.cgroups.hierarchy import Hierarchy, Location
from support.daemons import GIB, FakeDriver, collect, on_loop
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
