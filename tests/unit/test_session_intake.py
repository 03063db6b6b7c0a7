"""The daemon's side of the process-events intake (issue 42, part 2): rescans of every process
walk /proc off the event loop, one at a time, those asked meanwhile folded into one, and after
lost events at most one per gap; sessions' moves wait behind a launch's cgroup work."""

import asyncio
import threading

import pytest

from governor.daemon.rescans import Rescans
from support.daemons import on_loop
from support.sessions import session_daemon

pytestmark = pytest.mark.daemon(make=session_daemon)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Walks:
    """A survey that records the thread it ran on and may be held until released."""

    def __init__(self, moved=()):
        self.threads: list[str] = []
        self.acted: list[str] = []
        self.moved = list(moved)
        self.hold = threading.Event()
        self.hold.set()

    def survey(self):
        self.threads.append(threading.current_thread().name)
        self.hold.wait(10)
        return len(self.threads)

    def act(self, found, trigger):
        self.acted.append(trigger)
        return self.moved.pop(0) if self.moved else 0


def test_a_rate_limited_rescan_waits_out_the_gap_since_the_last_start():
    clock, walks = Clock(), Walks()
    rescans = Rescans(walks.survey, walks.act, passes=5, gap_s=5.0, clock=clock)
    assert rescans.wait() == 0  # none yet: at once

    async def scenario():
        assert await rescans.now("start") == 0
        clock.now += 1
        assert rescans.wait() == 4.0
        loop = asyncio.get_running_loop()
        assert rescans.ask("lost events", limited=True)
        assert not rescans.ask("lost events", limited=True)  # folded: said once
        assert walks.acted == ["start"] and rescans._timer.when() - loop.time() == pytest.approx(4.0, abs=0.1)
        rescans.ask("reload")  # not rate-limited: now, with the loss folded in
        assert rescans._timer is None
        await rescans.idle()
        rescans.close()

    asyncio.run(scenario())
    assert walks.acted == ["start", "lost events, reload"]
    assert all(name.startswith("rescan") for name in walks.threads)  # never the event loop's thread


def test_rescans_run_one_at_a_time_and_those_asked_meanwhile_fold_into_one():
    walks = Walks()
    walks.hold.clear()
    rescans = Rescans(walks.survey, walks.act, passes=5, gap_s=0.0)

    async def scenario():
        first = asyncio.create_task(rescans.now("start"))
        while not walks.threads:
            await asyncio.sleep(0.001)
        for trigger in ("lost events", "reload", "lost events"):
            rescans.ask(trigger, limited=trigger == "lost events")
        assert len(walks.threads) == 1  # the walk under way is alone
        walks.hold.set()
        await first
        await rescans.idle()
        rescans.close()

    asyncio.run(scenario())
    assert walks.acted == ["start", "lost events, reload"]


def test_a_walk_runs_again_while_it_finds_moves_at_most_passes_times():
    walks = Walks(moved=[3, 1, 2, 2])
    rescans = Rescans(walks.survey, walks.act, passes=3, gap_s=0.0)

    async def scenario():
        moved = await rescans.now("start")
        rescans.close()
        return moved

    assert asyncio.run(scenario()) == 6 and len(walks.threads) == 3


def test_a_failed_walk_is_logged_and_the_next_runs(caplog):
    walks = Walks()
    failures = [OSError("boom")]

    def survey():
        if failures:
            raise failures.pop()
        return walks.survey()

    rescans = Rescans(survey, walks.act, passes=2, gap_s=0.0)

    async def scenario():
        assert await rescans.now("start") == 0
        assert await rescans.now("again") == 0
        rescans.close()

    asyncio.run(scenario())
    assert walks.acted == ["again"] and "rescanning every process (start) failed" in caplog.text


class Lost:
    """Process events that lost some at each read."""

    def read(self):
        return [], True


def test_lost_events_ask_for_one_rate_limited_rescan_and_say_so_once(daemon):
    daemon.sessions.process_events = Lost()

    async def scenario():
        await daemon.sessions.rescan("start")
        for _ in range(50):  # a storm that overflows the buffer again and again
            daemon.sessions.on_process_events()
        await asyncio.sleep(0)
        pending = daemon.sessions.rescans._timer is not None
        daemon.sessions.rescans.close()
        return pending

    assert on_loop(daemon, scenario)
    lost = [e for e in daemon.journal.events if "process events were lost" in e["message"]]
    assert len(lost) == 1


def test_the_walk_reads_proc_on_its_thread_and_the_loop_moves_only_what_it_found(daemon):
    looked: list[tuple[int, str]] = []
    find = daemon.sessions._find

    def recorded(pid, uid):
        looked.append((pid, threading.current_thread().name))
        return find(pid, uid)

    daemon.sessions._find = recorded
    assert on_loop(daemon, lambda: daemon.sessions.rescan("test")) >= 1
    walked = {pid for pid, thread in looked if thread.startswith("rescan")}
    again = [pid for pid, thread in looked if not thread.startswith("rescan")]
    assert {500, 501, 600, 900} <= walked
    assert 900 not in again and set(again) <= {500, 501, 600, 601, 602, 700}  # root's: settled on the walk
    assert 500 in daemon.hierarchy.driver.procs["A/session-1"] and 900 in daemon.sessions._settled


def test_a_launchs_cgroup_work_goes_before_a_backlog_of_session_moves(daemon):
    order = []
    daemon.hierarchy.driver.move = lambda rel, pid: order.append(pid)

    async def scenario():
        moved = []
        for pid in range(1000, 1010):
            daemon.tree.join_soon("A/session-1", pid, moved.append)
        assert daemon.tree.moving_into("A/session-1")
        daemon.tree.run(lambda: order.append("launch"))
        await daemon.tree.settled()
        return moved

    assert asyncio.run(scenario()) == [None] * 10
    assert order.index("launch") <= 1 and order[-1] == 1009  # behind one move at most, not ten
    assert not daemon.tree.moving_into("A/session-1")
