"""What the daemon tells, on the in-memory driver: status (built once per change, each task's
entry rebuilt only when it changes), explain, watch, and the samples behind them (read off the
event loop, in turn beyond the bound); borrowed use."""

import asyncio
import threading

import pytest

from governor.wire.protocol import ExplainRequest, Peer, SetWeightRequest, StatusRequest, WatchRequest
from support.daemons import GIB, launch


def test_status_reports_groups_tasks_and_the_last_filling(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    status = asyncio.run(daemon.requests.handle(StatusRequest(), Peer(pid=1, uid=0, gid=0)))["status"]
    group = status["groups"]["A"]
    assert group["lambda"] == 1.0 and group["stop"] == "demand met"
    assert group["guarantee"] == {"cpu": 1.0} and group["reserved"] == {"memory": float(GIB)}
    assert group["tasks"][0]["pid"] == 100 and group["tasks"][0]["limits"]["cpu.max"] == "100000 100000"
    assert status["guaranteed"]["cpu"] == 1.0 and status["capacity"] == {"cpu": 2.0, "memory": 4.0 * GIB}
    assert status["groups"]["B"]["idle"] and status["groups"]["B"]["tasks"] == []  # configured, no task
    assert status["filling"]["trigger"] == "launch of task 1"


def test_explain_gives_the_live_trace_and_each_groups_reason(daemon):
    launch(daemon, 100, group="A", cpu=2.0, memory=GIB)
    launch(daemon, 200, group="B", cpu=2.0, memory=GIB)
    result = asyncio.run(daemon.requests.handle(ExplainRequest(), Peer(pid=1, uid=1000, gid=1000)))["explain"]
    assert result["groups"]["A"]["stop"] == "cpu saturated" and result["groups"]["A"]["lambda"] == 0.5
    assert [(row["event"], row["resource"], row["frozen"]) for row in result["trace"]] == [
        ("saturated", "cpu", ["A", "B"])]


def test_explain_lists_every_configured_group_with_its_weight_even_without_a_task(daemon):
    launch(daemon, 100, group="A", cpu=2.0, memory=GIB)
    asyncio.run(daemon.requests.handle(SetWeightRequest("B", 3.0), Peer(pid=1, uid=0, gid=0)))
    result = daemon.requests.explain()
    assert list(result["groups"]) == ["A"]
    # B runs nothing; its weight as set now, its floor 3 / (1 + 3).
    assert result["configured"] == {"A": {"weight": 1.0, "floor": 0.25}, "B": {"weight": 3.0, "floor": 0.75}}


def test_watch_streams_status_with_events_and_fair_level(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)

    async def first_two():
        stream = daemon.requests.watch(WatchRequest(0.2), Peer(pid=1, uid=1000, gid=1000))
        return [await anext(stream), await anext(stream)]

    snapshots = asyncio.run(first_two())
    status = snapshots[1].status
    assert status["fair_level"] == pytest.approx(0.5)
    assert [e["kind"] for e in status["events"]] == ["refill", "task_started"]
    assert status["queue"] == []


def test_borrowed_is_use_above_the_guarantee_beyond_sampling_noise():
    from governor.core.vocabulary import borrowed as _borrowed

    guarantee = {"cpu": 0.5, "memory": GIB, "io.sda.write": 100.0}
    used = {"cpu": 0.9, "memory": 2 * GIB, "io.sda.write": 100.5}
    assert _borrowed(used, guarantee) == pytest.approx({"cpu": 0.4})  # memory is never lent
    assert _borrowed({"cpu": 0.505}, guarantee) == {}  # 1 % above: the sample's noise
    assert _borrowed({"cpu": 0.1}, {}) == {"cpu": 0.1}


def test_status_is_built_once_per_change_and_shared(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    first = daemon.observation.status()
    assert daemon.observation.status() is first  # many watchers, one build
    daemon.reloads.set_weight("A", 2.0, "root")
    assert daemon.observation.status() is not first and daemon.observation.status()["groups"]["A"]["weight"] == 2.0


def test_a_task_entry_of_status_is_rebuilt_only_when_its_task_limits_or_usage_change(daemon):
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    launch(daemon, 200, group="B", cpu=1.0, memory=GIB)

    def entries():
        return {t["id"]: t for group in daemon.observation.status()["groups"].values() for t in group["tasks"]}

    first = entries()
    daemon.reloads.set_weight("A", 2.0, "root")  # group limits change, the tasks' caps do not
    assert all(entry is first[task_id] for task_id, entry in entries().items())
    daemon.observation.usage["A/task-1"] = {"cpu": 0.5}
    daemon.journal.changed()
    second = entries()
    assert second["1"] is not first["1"] and second["1"]["usage"] == {"cpu": 0.5}
    assert second["2"] is first["2"]
    daemon.hierarchy.driver.apply("B/task-2", daemon.policy._task_caps((("cpu", 2.0), ("memory", GIB)), ()))
    daemon.journal.changed()
    third = entries()
    assert third["2"] is not second["2"] and third["2"]["limits"]["cpu.max"] == "200000 100000"
    assert third["1"] is second["1"]


def test_samples_are_read_off_the_event_loop_and_a_task_ended_meanwhile_keeps_no_usage(daemon, monkeypatch):
    for pid in (100, 200):
        launch(daemon, pid, group="A", cpu=0.1, memory=GIB)
    read, threads = daemon.hierarchy.read_stats, set()
    reading, ended = threading.Event(), threading.Event()

    def slow_read(rel, **options):
        if not options.get("peak"):  # (an ended task's last counters are read where it ends)
            threads.add(threading.current_thread().name)
        if rel == "A/task-2":  # the last one: task 1 has been read, and ends now
            reading.set()
            assert ended.wait(5)
        return read(rel, **options)

    monkeypatch.setattr(daemon.hierarchy, "read_stats", slow_read)

    async def scenario():
        sampling = asyncio.create_task(daemon.observation.sample_off_loop())
        await asyncio.to_thread(reading.wait, 5)  # the loop serves others while the sampler reads
        daemon.hierarchy.driver.procs["A/task-1"] = []
        daemon.exits.check(["1"], "exit")
        ended.set()
        await sampling

    asyncio.run(scenario())
    daemon.observation.close()
    assert threads and all(name.startswith("sampler") for name in threads)
    assert set(daemon.observation.usage) == {"A", "A/task-2"}


def test_tasks_are_sampled_in_turn_beyond_the_bound(daemon, monkeypatch):
    monkeypatch.setattr("governor.daemon.observation.SAMPLED_TASKS", 2)
    for pid in (100, 200, 300):
        launch(daemon, pid, group="A", cpu=0.1, memory=GIB)
    turns = [daemon.observation.tasks_to_sample() for _ in range(3)]
    assert turns == [["A/task-1", "A/task-2"], ["A/task-3", "A/task-1"], ["A/task-2", "A/task-3"]]


def test_a_task_whose_sample_is_equal_keeps_its_status_entry_and_one_that_changed_gets_a_new_one():
    # An idle task's sample is equal from one to the next: its entry (and so its JSON) is kept,
    # as for an unchanged one; at 10,000 tasks rebuilding them all after each sample made a
    # status 350 ms in process.
    from governor.core.state import Task, Tasks
    from governor.wire.status import groups_status

    tasks, limits, kept = Tasks(), {"cpu.max": "10000 100000"}, {}
    idle, busy = (Task(i, "A", 100 + int(i), 0, "root", ("sleep",), {"cpu": 0.1}, 0.0, place="A") for i in "12")
    tasks.add(idle)
    tasks.add(busy)

    def entries(cpu: float) -> dict:
        usage = {t.cgroup: {"cpu": cpu if t is busy else 0.0, "memory": 4096.0} for t in (idle, busy)}
        groups = groups_status(tasks=tasks, allocation=None, usage=usage, in_force=lambda rel: limits, kept=kept)
        return {entry.id: entry for entry in groups["A"].tasks}

    first, second = entries(0.05), entries(0.07)
    assert second["1"] is first["1"]
    assert second["2"] is not first["2"] and second["2"].usage["cpu"] == 0.07


def test_a_group_whose_inputs_and_task_entries_are_unchanged_keeps_its_status_entry():
    # After a sample of 10,000 idle tasks in 1,000 groups, rebuilding every group's entry made
    # a status 180 ms in process: an unchanged group keeps its entry (and so its JSON).
    from governor.core.state import Task, Tasks
    from governor.wire.status import groups_status

    tasks, limits, kept, kept_groups = Tasks(), {"cpu.max": "10000 100000"}, {}, {}
    for i, group in (("1", "A"), ("2", "B")):
        tasks.add(Task(i, group, 100 + int(i), 0, "root", ("sleep",), {"cpu": 0.1, "memory": GIB}, 0.0, place=group))

    def groups(used_by_b: float) -> dict:
        usage = {"A": {"cpu": 0.0}, "B": {"cpu": used_by_b}, **{t.cgroup: {"cpu": 0.0} for t in tasks}}
        return groups_status(tasks=tasks, allocation=None, usage=usage, in_force=lambda rel: limits, kept=kept,
                             kept_groups=kept_groups)

    first, second = groups(0.05), groups(0.07)
    assert second["A"] is first["A"] and first["A"].reserved == {"memory": GIB}
    assert second["B"] is not first["B"] and second["B"].usage["cpu"] == 0.07
    assert second["B"].tasks[0] is first["B"].tasks[0]  # its task's entry is kept all the same
    tasks.add(Task("3", "A", 103, 0, "root", ("sleep",), {"cpu": 0.1}, 0.0, place="A"))
    third = groups(0.07)
    assert third["A"] is not second["A"] and len(third["A"].tasks) == 2 and third["B"] is second["B"]
