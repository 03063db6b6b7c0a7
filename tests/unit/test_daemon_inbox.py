"""The events put in settle's inbox name their refills as the log and status always did, and
carry their data to settle."""

import asyncio
import dataclasses

import pytest

from governor.cgroups.stats import CgroupStats
from governor.core.state import Task
from governor.daemon import inbox


def task(task_id: str, user: str = "alice") -> Task:
    return Task(task_id, "A", 100, 1000, user, ("work",), {"cpu": 1.0}, 0.0)


@pytest.mark.parametrize("event, trigger, refill", [
    (inbox.Launch(task("7")), "launch of task 7", True),
    (inbox.Left("7"), "task 7 left the queue", False),  # only the queue changed
    (inbox.Exit("exit", (task("1"),), (None,)), "exit of task 1", True),
    (inbox.Exit("reconcile", (task("1"), task("session-1000")), (None, None)), "reconcile of 2 tasks", True),
    (inbox.Session(task("session-1000")), "session of alice started", True),
    (inbox.Sample(True), "saturation", True),
    (inbox.Sample(False), "slack", True),
    (inbox.FairShare(), "fair share: effective weights moved", True),
    (inbox.Handover("GPU 0"), "GPU 0 handed over", True),
    (inbox.Reload("weight of A"), "weight of A", True),
])
def test_each_event_names_its_refill_and_says_whether_it_needs_one(event, trigger, refill):
    assert (event.trigger, event.refill) == (trigger, refill)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.trigger = "changed"  # a value: what a stage put in is what settle reads


def test_an_exit_carries_the_ended_ids_labels_and_final_stats():
    stats = CgroupStats(cpu_usage_usec=1_500_000, cpu_nr_throttled=0, cpu_throttled_usec=0, memory_current_bytes=0)
    ended = inbox.Exit("exit", (task("1"), task("session-1000")), (stats, None))
    assert ended.ids == ("1", "session-1000")
    assert ended.labels == ("task 1", "session of alice")
    assert ended.stats == (stats, None)


def test_the_reader_gets_the_events_of_a_batch_with_their_data_in_order():
    # Settle reads what a stage put, not the shared tables: the launched task, the ended ones.
    read = []

    async def run():
        box = inbox.Inbox()

        async def reader(batch):
            read.append(batch)

        box.read_by(reader)
        launched, ended = inbox.Launch(task("7")), inbox.Exit("exit", (task("1"),), (None,))
        box.put(launched)
        box.add("weight of A", True, 0.0)  # a trigger without an event
        await box.put(ended)
        return launched, ended

    launched, ended = asyncio.run(run())
    assert [batch.events for batch in read] == [[launched, ended]]
    assert read[0].events[0].task.id == "7" and read[0].triggers == ["launch of task 7", "weight of A", "exit of task 1"]
