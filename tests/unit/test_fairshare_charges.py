"""Fair share from the kernel's counters (issue 32, point 3): a group's past use is charged from
its cgroup's cumulative CPU counter, which keeps what its ended tasks used, and memory and GPUs as
reserved × time, so short tasks between two ticks and an idle reservation count as a steady
task's equal use; the history a kill -9 leaves is at most 5 s old. A fake clock throughout."""

import json

import pytest
from support.daemons import GIB, launch, make_daemon, on_loop

from governor.cgroups.stats import CgroupStats
from governor.daemon.fairshare_history import FILE_NAME, SAVE_EVERY_S, save_due
from governor.core.fairshare import FairShare
from governor.core.usage import Charges

T0 = 1_700_000_000.0
HOUR = 3600.0
CAPACITY = {"cpu": 2.0, "memory": 8 * GIB, "gpu": 4.0}


def held(resource):
    return resource != "cpu"


def charged(ticks, half_life=HOUR):
    """Run ``ticks`` (one callable per second, each telling a :class:`Charges` what happened)
    and return the decayed usage of each group, capacity-seconds."""
    charges, history = Charges(), FairShare(half_life)
    history.add(T0, charges.take(CAPACITY, 0.0), 0.0)
    for second, tick in enumerate(ticks, start=1):
        tick(charges)
        history.add(T0 + second, charges.take(CAPACITY, 1.0), 1.0)
    return history.decayed(T0 + len(ticks))


def test_64_short_tasks_between_ticks_are_charged_as_a_steady_tasks_equal_use():
    # carol's group runs one steady task at 0.6 cores; bob's starts a 0.6 s task each second
    # that ends before the tick, its group's cgroup removed (and made again) each time.
    def tick(second):
        def run(charges):
            charges.counted("lab-a", "lab-a", 600_000 * second)
            charges.counted("lab-b", "lab-b", 600_000, removed=True)  # read just before its removal
        return run

    usage = charged([tick(second) for second in range(1, 65)])
    assert usage["lab-b"] == pytest.approx(usage["lab-a"], rel=0.05)
    assert usage["lab-a"] == pytest.approx(64 * 0.6 / 2, rel=0.01)  # 38.4 core-seconds of 2 cores


def test_an_idle_reservation_is_charged_as_a_steady_tasks_equal_use():
    # 7G of 8G reserved and never touched, against 1.75 of 2 cores used: 7/8 of the host each.
    def tick(charges):
        charges.reserved("idle", {"cpu": 0.0, "memory": 7 * GIB}, 1.0, held)
        charges.reserved("busy", {"cpu": 1.75, "memory": 0}, 1.0, held)  # cpu is charged as counted, not reserved
        tick.counter += 1_750_000
        charges.counted("busy", "busy", tick.counter)

    tick.counter = 0
    usage = charged([tick] * 60)
    assert usage["idle"] == pytest.approx(usage["busy"], rel=0.05)
    assert usage["idle"] == pytest.approx(60 * 7 / 8, rel=0.01)


def test_the_dominant_share_is_charged_not_the_sum():
    charges = Charges()
    charges.reserved("g", {"memory": 4 * GIB, "gpu": 1}, 10.0, held)
    assert charges.take(CAPACITY, 10.0) == {"g": pytest.approx(0.5)}  # memory's half, not ½ + ¼


def test_a_counter_that_went_back_is_a_cgroup_made_again_and_is_charged_from_zero():
    charges = Charges(primed=True)
    charges.counted("g", "g", 5_000_000)  # made after priming: counted from 0
    charges.counted("g", "g", 7_000_000)
    charges.counted("g", "g", 1_000_000)  # made again meanwhile: its counter restarted
    assert charges.pending == {"g": {"cpu": pytest.approx(5 + 2 + 1)}}


def test_a_first_reading_before_priming_or_of_a_login_session_only_sets_where_counting_starts():
    charges = Charges()
    charges.counted("old", "g", 9_000_000)  # a cgroup found at start: its past is not news
    charges.take(CAPACITY, 1.0)
    charges.counted("user.slice/user-1000.slice", "g", 4_000_000, made_here=False)
    charges.counted("old", "g", 10_000_000)
    charges.counted("user.slice/user-1000.slice", "g", 4_500_000, made_here=False)
    assert charges.pending == {"g": {"cpu": pytest.approx(1.5)}}


def test_a_group_removed_and_made_again_counts_its_new_cgroup_from_zero_even_when_it_ran_longer():
    charges = Charges(primed=True)
    charges.counted("g", "g", 2_000_000)
    charges.counted("g", "g", 3_000_000, removed=True)
    charges.counted("g", "g", 4_000_000)  # above the old reading, yet a new cgroup's
    assert charges.pending["g"]["cpu"] == pytest.approx(3 + 4)


def test_the_history_is_saved_so_that_a_kill_loses_at_most_5_s():
    for interval in (0.25, 1.0, 2.0, 3.0, 5.0, 7.0):
        saved, now, worst = 0.0, 0.0, 0.0
        for _ in range(200):
            now += interval
            # killed just before this tick: the file is as of the last save
            worst = max(worst, now - saved if interval <= SAVE_EVERY_S else 0.0)
            if save_due(saved, now, interval):
                saved = now
        assert worst <= SAVE_EVERY_S
        assert now - saved < max(SAVE_EVERY_S, interval) + 1e-9
    assert not save_due(0.0, 1.0, 1.0)  # not every tick: a write each second is not needed


class Clock:
    """The daemon's clocks, moved by the test."""

    def __init__(self):
        self.now = T0

    def time(self):
        return self.now

    def monotonic(self):
        return self.now - T0


FAIR = """
[capacity]
cpu = 2
memory = "8G"
[groups.lab-a]
users = ["root"]
[groups.lab-b]
users = ["root"]
[groups.lab-c]
users = ["root"]
[fairshare]
half_life = "1h"
[sessions]
enabled = false
"""


def test_the_daemon_charges_short_tasks_from_their_groups_counter_read_before_removal(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr("governor.daemon.observation.time", clock)
    daemon = make_daemon(tmp_path, FAIR)
    driver = daemon.hierarchy.driver
    launch(daemon, 100, group="lab-a", cpu=0.6, memory=1 << 20)  # steady
    launch(daemon, 101, group="lab-c", cpu=0.01, memory=7 * GIB)  # reserves 7G, uses none of it
    clock.now = daemon.tasks.get("2").started + 1  # after both started
    on_loop(daemon, lambda: daemon.observation.sample())  # the first tick: where counting starts
    for second in range(1, 61):
        pid = 1000 + second
        reply = launch(daemon, pid, group="lab-b", cpu=0.6, memory=1 << 20)
        driver.stats["lab-b"] = CgroupStats(600_000, 0, 0, 0)  # its new cgroup's counter: 0.6 s
        driver.procs[f"lab-b/task-{reply['task']}"] = []
        on_loop(daemon, lambda: daemon.exits.check([reply["task"]], "exit"))  # ended before the tick: its group's cgroup goes
        assert "lab-b" not in driver.cgroups
        del driver.stats["lab-b"]
        driver.stats["lab-a"] = CgroupStats(600_000 * second, 0, 0, 0)
        clock.now += 1
        on_loop(daemon, lambda: daemon.observation.sample())
    past = {group: entry["past_use"] for group, entry in daemon.observation.status()["groups"].items()}
    assert past["lab-b"] == pytest.approx(past["lab-a"], rel=0.05)
    assert past["lab-a"] == pytest.approx(60 * 0.6 / 2, rel=0.01)
    assert past["lab-c"] == pytest.approx(60 * 7 / 8, rel=0.02)  # the idle reservation
    saved = json.loads((tmp_path / "state" / FILE_NAME).read_text())
    assert saved["at"] >= clock.now - SAVE_EVERY_S  # what a kill -9 now would leave


def test_a_task_that_ended_between_ticks_is_charged_its_reservation_up_to_its_end(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr("governor.daemon.observation.time", clock)
    daemon = make_daemon(tmp_path, FAIR)
    reply = launch(daemon, 100, group="lab-c", cpu=0.01, memory=7 * GIB)
    clock.now = daemon.tasks.get(reply["task"]).started + 1
    on_loop(daemon, lambda: daemon.observation.sample())
    clock.now += 10
    daemon.hierarchy.driver.procs[f"lab-c/task-{reply['task']}"] = []
    on_loop(daemon, lambda: daemon.exits.check([reply["task"]], "exit"))  # 10 s after the tick
    clock.now += 10
    on_loop(daemon, lambda: daemon.observation.sample())
    assert daemon.observation.status()["groups"]["lab-c"]["past_use"] == pytest.approx(10 * 7 / 8, rel=0.01)


def test_an_exit_reads_its_tasks_counters_once_and_its_groups_cpu_counter_alone(tmp_path, monkeypatch):
    # Issue 37, point 2: every counter of the task's cgroup, once (its ended record), and of its
    # group's only the CPU counter fair share charges (read_stats read all of them again).
    daemon = make_daemon(tmp_path, FAIR)
    driver = daemon.hierarchy.driver
    reply = launch(daemon, 100, group="lab-b", cpu=0.6, memory=1 << 20)
    reads, counters = [], []
    every = driver.read_stats
    monkeypatch.setattr(driver, "read_stats", lambda rel, **kw: reads.append(rel) or every(rel, **kw))
    monkeypatch.setattr(driver, "cpu_usage_usec", lambda rel: counters.append(rel) or 600_000)
    driver.procs[f"lab-b/task-{reply['task']}"] = []
    on_loop(daemon, lambda: daemon.exits.check([reply["task"]], "exit"))
    assert "lab-b" not in driver.cgroups
    assert (reads, counters) == ([f"lab-b/task-{reply['task']}"], ["lab-b"])
