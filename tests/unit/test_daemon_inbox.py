"""The events put in settle's inbox name their refills as the log and status always did."""

import dataclasses

import pytest

from governor.daemon import inbox


@pytest.mark.parametrize("event, trigger, refill", [
    (inbox.Launch("7"), "launch of task 7", True),
    (inbox.Left("7"), "task 7 left the queue", False),  # only the queue changed
    (inbox.Exit("exit", ("task 1",)), "exit of task 1", True),
    (inbox.Exit("reconcile", ("task 1", "session of alice")), "reconcile of 2 tasks", True),
    (inbox.Session("alice"), "session of alice started", True),
    (inbox.Sample(True), "saturation", True),
    (inbox.Sample(False), "slack", True),
    (inbox.FairShare(), "fair share: effective weights moved", True),
    (inbox.Handover(0), "GPU 0 handed over", True),
    (inbox.Reload("weight of A"), "weight of A", True),
])
def test_each_event_names_its_refill_and_says_whether_it_needs_one(event, trigger, refill):
    assert (event.trigger, event.refill) == (trigger, refill)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.trigger = "changed"  # a value: what a stage put in is what settle reads
