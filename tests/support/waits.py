"""Waiting on facts, never on a sleep: poll a condition until it holds or a timeout says which
fact never came (the polling interval is no synchronisation: the fact is)."""

import asyncio
import time
from collections.abc import Callable


async def until(fact: Callable[[], object], what: str, *, timeout: float = 5.0) -> None:
    """Wait on the running event loop, giving it turns, until ``fact()`` is true.

    Raises:
        AssertionError: ``fact()`` still false after ``timeout`` seconds, naming ``what``.
    """
    deadline = time.monotonic() + timeout
    while not fact():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


def wait_until(fact: Callable[[], object], what: str, *, timeout: float = 5.0, every: float = 0.005,
               detail: Callable[[], str] | None = None) -> None:
    """:func:`until` for code without an event loop (a thread, a subprocess's state), asking
    ``fact()`` every ``every`` seconds (longer where asking costs: a daemon's status).

    Raises:
        AssertionError: ``fact()`` still false after ``timeout`` seconds, naming ``what``, then
            ``detail()`` (a log's end, the screen) where given.
    """
    deadline = time.monotonic() + timeout
    while not fact():
        if time.monotonic() > deadline:
            shown = f":\n{detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{shown}")
        time.sleep(every)


def within(fact: Callable[[], object], seconds: float, *, every: float = 0.005) -> bool:
    """Whether ``fact()`` came true within ``seconds``, polled as :func:`wait_until` polls it: for
    a test that counts the late ones (a bound is the fact under test) rather than failing at the
    first."""
    deadline = time.monotonic() + seconds
    while not fact():
        if time.monotonic() > deadline:
            return bool(fact())
        time.sleep(every)
    return True
