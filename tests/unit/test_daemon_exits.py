"""How a task ends in the daemon, on the in-memory driver of test_daemon: its time limit, an
exit looked at again, the ended records (exit accounting and exit statuses) and their keeping
across a restart."""

import asyncio
import errno
import os
import signal
import subprocess

import pytest
from support.daemons import GIB, collect, launch, on_loop
from support.user_requests import NOBODY, ask, launch_as
from support.waits import until

from governor.cgroups.stats import CgroupStats
from governor.host.accounting import ENDED_KEPT, exit_words
from governor.host.exit_status import describe, kernel_keeps_exit_status
from governor.wire.protocol import LaunchRequest, Peer, PsRequest, StopRequest
from governor.core.state import Task
from governor.errors import CgroupReadError


def _state(pid: int) -> str:
    """The state letter /proc gives ``pid`` (``Z``: exited, not reaped yet)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_a_pid_watched_task_whose_last_processes_end_between_two_looks_is_looked_at_again(daemon, monkeypatch):
    # v1: the watcher follows a pid. The watched one exited; the next look finds the cgroup
    # populated, the listing after it none (a killed tree's last children ending in between):
    # nothing would wake the daemon again but the reconcile pass, seconds later.
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    driver = daemon.hierarchy.driver
    monkeypatch.setattr(driver, "events_path", lambda rel: None)
    looks = iter([True])  # populated at the first look, empty from then on
    monkeypatch.setattr(driver, "populated", lambda rel: next(looks, False))
    driver.procs["A/task-1"] = []

    async def scenario():
        daemon.exits.check(["1"], "exit")
        assert [t.id for t in daemon.tasks] == ["1"]
        await until(lambda: not daemon.tasks, "task 1 looked at again and forgotten", timeout=2)

    asyncio.run(scenario())
    assert daemon.exits.ended[-1].task.id == "1" and daemon.exits.ended[-1].reason == "exit"
    assert not daemon.exits._looks


def test_a_look_again_pending_when_the_daemon_stops_never_comes(daemon, monkeypatch):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    driver = daemon.hierarchy.driver
    monkeypatch.setattr(driver, "events_path", lambda rel: None)
    monkeypatch.setattr(driver, "populated", lambda rel: True)  # processes only below it: never watched
    driver.procs["A/task-1"] = []

    async def scenario():
        daemon.exits.check(["1"], "exit")
        timer = daemon.exits._looks["1"]
        daemon.exits.watcher = None  # (the fake one has nothing to close)
        daemon.exits.close()
        return timer

    assert asyncio.run(scenario()).cancelled() and not daemon.exits._looks


def test_a_task_is_ended_at_its_time_limit(daemon):
    async def scenario():
        request = LaunchRequest(pid=100, group="A", demand={"cpu": 1.0, "memory": GIB}, command=("sleep", "60"),
                                time_limit=0.05)
        # No check that the task runs in between: on a loaded host the limit can pass before
        # the launch's reply is read. The kill and the record below say it ran and was ended.
        await collect(daemon.requests.stream(request, Peer(pid=100, uid=0, gid=0)))
        await until(lambda: not daemon.tasks, "the time limit to end task 1")

    asyncio.run(scenario())
    assert daemon.hierarchy.driver.killed == ["A/task-1"] and not daemon.tasks
    record = daemon.exits.ended[-1].to_json()
    assert record["reason"] == "time_limit" and record["time_limit"] == 0.05
    assert any("its time limit of 0.05s was reached" in e["message"] for e in daemon.journal.events)


def test_a_task_that_ends_first_leaves_no_timer(daemon):
    async def scenario():
        request = LaunchRequest(pid=100, group="A", demand={"cpu": 1.0, "memory": GIB}, command=("true",),
                                time_limit=60)
        await collect(daemon.requests.stream(request, Peer(pid=100, uid=0, gid=0)))
        daemon.hierarchy.driver.procs["A/task-1"] = []
        timer = daemon.exits._time_limits["1"]
        daemon.exits.check(["1"], "exit")
        return timer

    assert asyncio.run(scenario()).cancelled()  # it can never fire
    assert daemon.hierarchy.driver.killed == [] and not daemon.exits._time_limits
    assert daemon.exits.ended[-1].reason == "exit"


def test_a_readopted_task_past_its_time_limit_is_ended(daemon):
    store, driver = daemon.store, daemon.hierarchy.driver
    store.save(Task("1", "A", 100, 0, "root", ("work",), {"cpu": 1.0, "memory": GIB}, 0.0, "work", 5.0))
    driver.create("A/task-1")
    driver.procs["A/task-1"] = [100]

    async def scenario():
        daemon.recovery.readopt()
        await until(lambda: driver.killed, "the time limit to end the re-adopted task")

    asyncio.run(scenario())
    assert driver.killed == ["A/task-1"] and daemon.exits.ended[-1].reason == "time_limit"


def test_the_ended_record_holds_the_counters_read_before_removal(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    driver = daemon.hierarchy.driver
    driver.stats["A/task-1"] = CgroupStats(cpu_usage_usec=1_500_000, cpu_nr_throttled=3, cpu_throttled_usec=250_000,
                                           memory_current_bytes=0, memory_events={"oom_kill": 1},
                                           memory_peak_bytes=700 * 1024**2)
    driver.procs["A/task-1"] = []
    on_loop(daemon, lambda: daemon.exits.check(["1"], "exit"))
    record = daemon.exits.ended[-1].to_json()
    assert (record["cpu_s"], record["throttled_s"], record["memory_peak"], record["oom_kills"]) == (
        1.5, 0.25, 700 * 1024**2, 1)
    assert record["reason"] == "oom_kill"  # the kernel killed one of its processes
    line = next(e["message"] for e in daemon.journal.events if e["kind"] == "task_ended")
    assert "OOM-killed at its memory cap 1.0G" in line and "CPU 1.5s" in line and "memory peak 700.0M" in line


def test_without_a_final_read_the_last_sample_is_used(daemon, monkeypatch):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    driver = daemon.hierarchy.driver
    driver.stats["A/task-1"] = CgroupStats(2_000_000, 0, 0, 0, populated=True)
    daemon.observation.sample()

    def unreadable(rel, peak):
        raise CgroupReadError("cannot read cpu.stat", path=rel, errno=errno.EIO)

    monkeypatch.setattr(driver, "_read_stats", unreadable)
    driver.procs["A/task-1"] = []
    on_loop(daemon, lambda: daemon.exits.check(["1"], "exit"))
    assert daemon.exits.ended[-1].to_json()["cpu_s"] == 2.0


def test_ended_records_are_bounded(daemon):
    assert daemon.exits.ended.maxlen == ENDED_KEPT == 1000


def test_the_launched_process_exit_status_is_recorded_once_its_parent_reaped_it(daemon):
    if not kernel_keeps_exit_status():
        pytest.skip("the kernel keeps no exit status for pidfds (PIDFD_INFO_EXIT, Linux ≥ 6.15)")
    child = subprocess.Popen(["sh", "-c", "read line; exit 3"], stdin=subprocess.PIPE)
    pidfd = os.pidfd_open(child.pid)

    async def scenario():
        request = LaunchRequest(pid=child.pid, group="A", demand={"cpu": 1.0, "memory": GIB}, command=("sh",))
        await collect(daemon.requests.stream(request, Peer(pid=child.pid, uid=0, gid=0, pidfd=pidfd)))
        child.stdin.close()  # read gets end of input: the shell exits 3
        await until(lambda: _state(child.pid) == "Z", "the shell to exit (a zombie: not reaped yet)")
        daemon.hierarchy.driver.procs["A/task-1"] = []
        daemon.exits.check(["1"], "exit")
        pending = daemon.exits.ended[-1].exit_status
        child.wait()
        await until(lambda: not daemon.exits._pidfds and daemon.exits.ended[-1].exit_status is not None,
                    "the daemon to read the exit status from the pidfd")
        return pending

    try:
        assert asyncio.run(scenario()) is None
    finally:
        os.close(pidfd)
    record = daemon.exits.ended[-1]
    assert record.to_json()["exit_status"] == {"code": "exited", "status": 3}
    assert not daemon.exits._pidfds


@pytest.mark.parametrize(("release", "keeps"), [("6.18.44-fc-v657", True), ("6.15.0", True), ("6.14.9-arch1", False),
                                               ("5.10.0-28-amd64", False), ("7.0", True), ("weird", False)])
def test_exit_statuses_are_kept_from_linux_6_15(release, keeps):
    assert kernel_keeps_exit_status(release) is keeps


@pytest.mark.parametrize(("status", "shown", "words"), [
    (3 << 8, {"code": "exited", "status": 3}, "code=exited/status=3"),
    (signal.SIGKILL, {"code": "killed", "signal": "KILL"}, "code=killed/status=KILL"),
    (signal.SIGSEGV | 0x80, {"code": "dumped", "signal": "SEGV"}, "code=dumped/status=SEGV"),
])
def test_a_wait_status_reads_as_systemd_says_it(status, shown, words):
    assert describe(status) == shown and exit_words(status) == words


def test_no_exit_status_pidfd_is_held_past_the_daemons_share_of_descriptors(daemon):
    daemon.exits._exit_statuses, daemon.exits._pidfds_kept = True, 0  # as if a quarter of the limit were held
    pidfd = os.pidfd_open(os.getpid())

    async def scenario():
        request = LaunchRequest(pid=os.getpid(), group="A", demand={"cpu": 1.0, "memory": GIB}, command=("x",))
        await collect(daemon.requests.stream(request, Peer(pid=os.getpid(), uid=0, gid=0, pidfd=pidfd)))

    try:
        asyncio.run(scenario())
    finally:
        os.close(pidfd)
    assert "1" in [t.id for t in daemon.tasks] and not daemon.exits._pidfds


def test_a_restart_keeps_the_ended_records_and_numbers_on_where_the_last_daemon_stopped(daemon, tmp_path):
    # Issue 33, point 4: once every task had ended, a restarted daemon numbered from 1 again
    # (14 was `passwd`, later `g1`) and `ps --ended` had forgotten what ended before.
    from support.daemons import make_daemon

    launch_as(daemon, 200, NOBODY, name="passwd")
    launch_as(daemon, 300, NOBODY, name="sim")
    ask(daemon, StopRequest(("1", "2")))
    assert not daemon.tasks
    daemon.exits.save_ended()  # a reconcile pass, or the stop
    again = make_daemon(tmp_path, driver=daemon.hierarchy.driver)
    again.exits.restore_ended()
    ended = ask(again, PsRequest(ended=True), uid=NOBODY)["ended"]
    assert [(r["id"], r["name"], r["reason"], r["stopped_by"]) for r in ended] == [
        ("1", "passwd", "stop", "root"), ("2", "sim", "stop", "root")]
    assert ended == ask(daemon, PsRequest(ended=True), uid=NOBODY)["ended"]  # as the old daemon said
    assert launch_as(again, 400, NOBODY)["task"] == "3"


def test_ended_records_that_cannot_be_used_are_set_aside_and_the_daemon_runs_on(daemon, tmp_path):
    (daemon.store.directory / "ended.state").write_text("[{\"id\": \"1\"}, 7]")
    daemon.exits.restore_ended()
    assert not daemon.exits.ended and (daemon.store.directory / "ended.state.bad").exists()
    assert any("ended.state set aside as ended.state.bad: not a list of records" in e["message"]
               for e in daemon.journal.events)
