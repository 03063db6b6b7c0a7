"""Rescans of every process (:mod:`governor.daemon.sessions`): off the event loop, one at a time,
those asked meanwhile folded into one, and those that lost events ask for rate-limited.

A rescan walks ``/proc`` (about 5 µs a process natively, 15× that in an emulated VM): on the
event loop, each held every launch, exit and ``status`` behind it. Any user can make the kernel
drop process events (a fork storm overflows the socket's buffer), and each loss asked for a
rescan: ~53 a minute from one user in no group (issue 42). Now the walk runs on a thread of its
own (:attr:`Rescans.survey`) and only what it found to act on comes back to the loop
(:attr:`Rescans.act`); a rescan asked while one runs waits for it and folds with every other
asked meanwhile; after lost events, at most one starts per :data:`RESCAN_GAP_S`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["RESCAN_GAP_S", "Rescans"]

log = logging.getLogger("governor.daemon")
# After lost events, the least time from the start of one rescan to the start of the next: a
# process whose events were lost is in its session within this (and a walk) at the latest.
RESCAN_GAP_S = 5.0
T = TypeVar("T")


class Rescans(Generic[T]):
    """Rescans run one at a time, their walks on a thread.

    Args:
        survey: (on the rescan thread) walk every process; what to act on (``T``).
        act: (on the loop) the survey and the triggers it is for (``lost events, reload``) →
            how many processes a move was asked for. While it asks for any, the walk runs
            again, at most ``passes`` times in all (a process that forks a successor and exits
            every few milliseconds is missing from the pid list one walk reads).
        gap_s: the least time between the starts of two rescans asked with ``limited``.
        clock: seconds, monotonic (tests pass a fake).
    """

    def __init__(self, survey: Callable[[], T], act: Callable[[T, str], int], *, passes: int,
                 gap_s: float = RESCAN_GAP_S, clock: Callable[[], float] = time.monotonic):
        self.survey = survey
        self.act = act
        self.passes = passes
        self.gap_s = gap_s
        self.clock = clock
        self.started_at: float | None = None  # clock() when the last rescan started
        self._asked: list[str] = []  # triggers waiting for the next rescan
        self._limited = True  # whether every trigger waiting asked for a rate-limited one
        self._running: asyncio.Task | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None

    def ask(self, trigger: str, *, limited: bool = False) -> bool:
        """Rescan for ``trigger`` once the one running ends (now if none runs), with every other
        trigger asked meanwhile; ``limited`` (lost events): not before :attr:`gap_s` after the
        last started.

        Returns:
            Whether ``trigger`` was not waiting already (a caller logs it once per rescan).

        Raises:
            RuntimeError: no event loop runs in this thread.
        """
        new = trigger not in self._asked
        if new:
            self._asked.append(trigger)
        self._limited &= limited
        if self._running is None:
            self._schedule()
        return new

    async def now(self, trigger: str) -> int:
        """Rescan for ``trigger`` once the one running ends, never rate-limited (the daemon's
        start, the periodic rescan), and wait for it.

        Returns:
            How many processes a move was asked for.
        """
        while self._running is not None:
            await asyncio.shield(self._running)
        self._cancel_timer()
        asked, self._asked, self._limited = [*self._asked, trigger], [], True
        self._running = asyncio.get_running_loop().create_task(self._rescan(", ".join(dict.fromkeys(asked))))
        return await asyncio.shield(self._running)

    def wait(self) -> float:
        """Seconds until a rate-limited rescan may start (0: now)."""
        if self.started_at is None:
            return 0.0
        return max(0.0, self.started_at + self.gap_s - self.clock())

    async def idle(self) -> None:
        """Wait until no rescan runs or is due now (one a rate limit holds back is not waited
        for)."""
        while self._running is not None:
            await asyncio.shield(self._running)

    def close(self) -> None:
        """Drop what was asked; the walk under way, if any, ends on its own."""
        self._cancel_timer()
        self._asked.clear()
        if self._running is not None:
            self._running.cancel()
        if self._thread is not None:
            self._thread.shutdown(wait=False)

    # ── one rescan ──────────────────────────────────────────────────────────────────────

    def _schedule(self) -> None:
        if self._timer is not None and not self._limited:
            self._cancel_timer()  # one that is not rate-limited was asked: now
        if not self._asked or self._timer is not None:
            return
        wait = self.wait() if self._limited else 0.0
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(wait, self._start) if wait > 0 else None
        if self._timer is None:
            self._start()

    def _start(self) -> None:
        self._timer = None
        if self._running is not None or not self._asked:
            return
        asked, self._asked, self._limited = self._asked, [], True
        self._running = asyncio.get_running_loop().create_task(self._rescan(", ".join(asked)))

    async def _rescan(self, trigger: str) -> int:
        self.started_at = self.clock()
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rescan")
        moved = 0
        try:
            for _ in range(self.passes):
                found = self.act(await loop.run_in_executor(self._thread, self.survey), trigger)
                moved += found
                if not found:
                    break
        except Exception:
            log.exception("rescanning every process (%s) failed", trigger)
        finally:
            self._running = None
            if self._asked:
                self._schedule()
        return moved

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
