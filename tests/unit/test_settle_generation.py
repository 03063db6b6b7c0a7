"""The settle generation (status's ``daemon.settle_generation``): the fact tests and scripts
wait on instead of sleeping. Each finished settle pass moves it on, a reconcile pass ends in
one, and the status shows it."""

import asyncio

import pytest
from governor.daemon.inbox import Left
from support.daemons import GIB, launch, wait_settled


def generation(daemon) -> int:
    return daemon.observation.status()["daemon"]["settle_generation"]


def test_a_launch_moves_the_generation_on_and_status_shows_it(daemon):
    before = generation(daemon)
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    assert generation(daemon) > before
    assert generation(daemon) == daemon.inbox.generation  # the status is not a stale one


def test_a_waiter_returns_once_the_event_it_caused_is_settled(daemon):
    async def scenario():
        seen = daemon.inbox.generation
        daemon.inbox.put(Left("x"))
        assert daemon.inbox.generation == seen  # not settled yet: the pass runs on the loop
        return seen, await wait_settled(daemon, seen)

    seen, reached = asyncio.run(scenario())
    assert reached == seen + 1


def test_a_reconcile_pass_ends_in_a_settle(daemon):
    async def scenario():
        seen = daemon.inbox.generation
        for _ in daemon.reconcile():
            pass
        return seen, await wait_settled(daemon, seen)

    seen, reached = asyncio.run(scenario())
    assert reached > seen


def test_a_waiter_names_the_generation_it_waited_past(daemon):
    async def scenario():
        await wait_settled(daemon, daemon.inbox.generation, timeout=0.05)

    with pytest.raises(AssertionError, match=r"a settle pass after generation \d+"):
        asyncio.run(scenario())
