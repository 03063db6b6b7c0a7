"""How many of one user's refused launches the history journal keeps: a flood of refused
requests must not push everyone's history out of the journal (attacker check, 2026-12-02)."""

import logging

import pytest
from support.daemons import GIB, launch

from governor.daemon.history import REFUSALS_PER_MINUTE, RefusalBudget
from governor.errors import RequestError
from governor.host.history_store import read_history


def test_each_uid_has_its_own_minute_of_refusals_and_what_is_left_out_is_logged(caplog):
    budget = RefusalBudget(per_minute=3)
    caplog.set_level(logging.WARNING, "governor.daemon")
    assert [budget.take(1000, 100.0 + i) for i in range(5)] == [True, True, True, False, False]
    assert budget.take(1001, 104.0)  # another user's are not counted with them
    assert "uid 1000 was refused more than 3 launches this minute" in caplog.text
    assert budget.take(1000, 160.0)  # the next minute
    assert "2 launch refusals of uid 1000 were not journaled" in caplog.text
    assert budget.take(1000, 50.0)  # a clock set back starts a minute too


def test_a_flood_of_refused_launches_keeps_a_minutes_worth_in_the_journal(daemon):
    # 4,000 refused requests a second from one process made the journal grow by 1 MB a second:
    # with max_size's default of 200M, a month of everyone's history gone in minutes.
    daemon.history.writer.start()
    launch(daemon, 100, group="A", cpu=0.5, memory=GIB)
    for pid in range(200, 200 + REFUSALS_PER_MINUTE + 20):
        with pytest.raises(RequestError):
            launch(daemon, pid, group="A", cpu=1.0, memory=100 * GIB, wait=False)
    daemon.history.close()
    kinds = [entry["kind"] for entry in read_history(daemon.store.directory / "history")]
    assert kinds.count("refusal") == REFUSALS_PER_MINUTE and kinds[:2] == ["launch", "start"]


def test_launches_that_never_start_keep_a_minutes_worth_and_one_that_starts_is_journaled(daemon):
    # An attacker's check: each launch with wait: false and no room (or a client gone from the
    # queue) was a launch entry, unbounded: 450 KB a second of one user's never-started
    # launches pushed every other entry, and the daemon's capacity, out of max_size in minutes.
    daemon.history.writer.start()
    launch(daemon, 100, group="A", cpu=0.5, memory=3 * GIB)  # leaves no room for 2G
    for pid in range(200, 200 + REFUSALS_PER_MINUTE + 20):
        with pytest.raises(RequestError, match="would_wait|waits"):
            launch(daemon, pid, group="A", cpu=0.5, memory=2 * GIB, wait=False)
    launch(daemon, 999, group="A", cpu=0.5, memory=GIB)  # over the budget, and it starts
    daemon.history.close()
    entries = list(read_history(daemon.store.directory / "history"))
    launched = [entry["task"] for entry in entries if entry["kind"] == "launch"]
    assert len(launched) == 1 + REFUSALS_PER_MINUTE + 1, len(launched)
    last = [(entry["kind"], entry["task"]) for entry in entries][-2:]
    assert last == [("launch", launched[-1]), ("start", launched[-1])]
