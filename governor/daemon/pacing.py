"""Pacing: one user's costly reads (``ps``, ``explain``: built afresh at each request, on the
event loop) take at most :data:`READ_SHARE` of the daemon's time; past it, that user's next one
waits, and everyone else is served meanwhile. An attacker's check: 30 connections of one user
asking ``ps --all`` in a loop (250 tasks, a 2 MB reply of 137 ms each) kept the daemon at a
full core, and other users' launches took 0.8–3.1 s instead of 60 ms (0.5–2.1 s in
docs/benchmarks.md's run; 0.1–0.4 s paced). A read is charged its encoding too.

``status`` and ``watch`` are not paced: their reply is built once per change and shared by
every reader (:mod:`governor.wire.visibility`). ``history`` has its own pace, which refuses
rather than waits (:mod:`governor.daemon.history`). Root is never paced, as there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["READ_SHARE", "Pacer"]

T = TypeVar("T")
# The most of the daemon's time one user's paced reads may take: after a read of t seconds,
# the same uid's next starts t × (1/READ_SHARE − 1) later at the soonest. A `ps` of a few
# tasks takes a millisecond: a user's `watch governor ps` never meets it.
READ_SHARE = 0.1
# Past this many uids' due times kept, those due already are dropped (each is dropped at its
# uid's next read too).
_KEPT = 256


class Pacer:
    """Each uid's paced reads, one at a time, at most ``share`` of the time.

    Args:
        share: the most of the daemon's time one uid's reads take (0 < share ≤ 1).
        clock: seconds, monotonic; sleep: waits that many seconds (the tests' fake clock).
    """

    def __init__(self, share: float = READ_SHARE, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.share = share
        self.clock = clock
        self.sleep = sleep
        self._next: dict[int, float] = {}  # uid → when its next read may start
        self._turns: dict[int, asyncio.Lock] = {}  # uid → its reads, one at a time
        self._waiting: dict[int, int] = {}  # uid → its reads waiting or under way

    async def read(self, uid: int | None, work: Callable[[], T]) -> T:
        """``work()`` (synchronous, on the loop), once ``uid``'s earlier reads allow: at once for
        root (uid 0), for no uid in particular (None), and for a uid whose last read ended long
        enough ago. ``uid`` is the key of a share: several uids may share one (a negative key).
        Raises what ``work`` raises (a failed read is paced too)."""
        if not uid:
            return work()
        if len(self._next) > _KEPT:
            now = self.clock()
            self._next = {who: when for who, when in self._next.items() if when > now}
        self._waiting[uid] = self._waiting.get(uid, 0) + 1
        turn = self._turns.setdefault(uid, asyncio.Lock())
        try:
            async with turn:
                wait = self._next.get(uid, 0.0) - self.clock()
                if wait > 0:
                    await self.sleep(wait)
                began = self.clock()
                try:
                    return work()
                finally:
                    ended = self.clock()
                    self._next[uid] = ended + (ended - began) * (1 / self.share - 1)
        finally:
            self._waiting[uid] -= 1
            if not self._waiting[uid]:  # (nothing kept of a uid once its reads are done and due)
                del self._waiting[uid], self._turns[uid]
                if self._next.get(uid, 0.0) <= self.clock():
                    self._next.pop(uid, None)

    def due(self, uid: int) -> float:
        """When ``uid``'s next read may start (its clock's seconds); 0 where it may now."""
        return self._next.get(uid, 0.0)
