"""The cgroup calls that take the kernel's ``cgroup_mutex`` (``mkdir``, ``rmdir``, moves), made
on a thread of their own so that the event loop never waits for that lock (DESIGN.md §4).

A move on cgroup v1 may wait for an RCU grace period holding ``cgroup_mutex`` (measured: 6–24
ms), and every ``mkdir`` and ``rmdir`` meanwhile waits too; on the event loop, each such wait
held up every request, exit and sample behind it. One worker thread takes the calls in the
order they were asked for (a cgroup is made before a process joins it, emptied before it is
removed); what they change in the daemon's state (the drivers' records, the tasks) is changed
on the loop, before or after, never on the thread.

The worker is the event loop's default executor, so a loop that ends (the daemon stopping)
first finishes what was asked.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from governor.cgroups.hierarchy import Hierarchy
from governor.daemon.effector import Effector
from governor.daemon.foreign_poll import refusal
from governor.errors import CgroupBusy, CgroupError, GovernorError

__all__ = ["Tree"]

log = logging.getLogger("governor.daemon")
T = TypeVar("T")


class Tree:
    """Governor's cgroups made, joined and removed off the event loop.

    Args:
        hierarchy: governor's cgroups (:class:`~governor.cgroups.hierarchy.Hierarchy`), read.
        effector: what makes, joins and removes them (:class:`~governor.daemon.effector.Effector`).
        read_before_removal: told on the loop ``(rel, CPU counter µs, removed)`` of each group
            cgroup read just before its removal (fair share charges it); None: not read.
        foreign: a process's ``/proc/<pid>/cgroup`` lines → the foreign subtree that holds
            it, or None (:meth:`Foreign.holds <governor.daemon.foreign_poll.Foreign.holds>`):
            every move asks it first (:meth:`foreign_of`), and a process another manager holds
            is never moved.
    """

    def __init__(self, hierarchy: Hierarchy, effector: Effector,
                 read_before_removal: Callable[[str, int, bool], None] | None = None,
                 foreign: Callable[[Mapping[str, str] | None], str | None] | None = None) -> None:
        self.hierarchy = hierarchy
        self.effector = effector
        self._foreign = foreign
        self._loop: asyncio.AbstractEventLoop | None = None
        self._joining: dict[str, int] = {}  # cgroup → moves into it asked for and not yet made
        self._pending = 0  # calls of run() not yet done
        self._later: collections.deque[tuple[str, int, Callable[[GovernorError | None], None],
                                             Callable[[str, int], None] | None]] = collections.deque()
        # The counter keeps what a group's ended tasks used, and goes with the cgroup.
        self._read_before_removal = read_before_removal

    def moving_into(self, rel: str) -> bool:
        """Whether a process is being moved into cgroup ``rel``: until the move is made, the
        cgroup may be empty and must not be taken for ended."""
        return rel in self._joining

    async def join(self, moves: Sequence[tuple[str, int]]) -> list[GovernorError | None]:
        """Move each ``(cgroup, pid)`` on the cgroup thread: None for each moved, else the
        refusal. Meanwhile each cgroup is :meth:`moving_into`."""
        self._count(moves, 1)
        try:
            return await self.call(lambda: [_outcome(self._move, rel, pid) for rel, pid in moves])
        finally:
            self._count(moves, -1)

    def join_soon(self, rel: str, pid: int, then: Callable[[GovernorError | None], None],
                  check: Callable[[str, int], None] | None = None) -> None:
        """Move ``pid`` into ``rel`` on the cgroup thread, then ``then`` on the loop with None or
        the refusal; ``rel`` is :meth:`moving_into` until then. Behind what else is asked of the
        thread meanwhile: such moves are queued there one at a time, so a launch's cgroup, an
        exit's removal or a task's move asked while thousands wait (a session's processes,
        after lost events) goes first. ``check(rel, pid)``, on the thread just before the
        move, may refuse it by raising a GovernorError (a session at its ``pids.max``:
        :mod:`governor.daemon.session_pids`)."""
        self._count([(rel, pid)], 1)
        self._later.append((rel, pid, then, check))
        if len(self._later) == 1:
            self._join_next()

    def _join_next(self) -> None:
        rel, pid, then, check = self._later[0]

        def moved(outcome: GovernorError | None) -> None:
            self._later.popleft()
            self._count([(rel, pid)], -1)
            try:
                then(outcome)
            finally:
                if self._later:
                    self._join_next()

        self.run(lambda: self._move(rel, pid, check), moved)

    def _move(self, rel: str, pid: int, check: Callable[[str, int], None] | None = None) -> None:
        """(On the thread) move ``pid`` into ``rel``, the one way every move goes: never a
        process in a foreign subtree (Slurm's job, a pod, a VM); ``check``, when given, first.

        Raises:
            RequestError: ``bad_request``, the process is in a foreign subtree.
            CgroupWriteError, ProcessGone: as :meth:`Driver.move <governor.cgroups.driver.Driver.move>`.
            GovernorError: what ``check`` raised.
        """
        subtree = self.foreign_of(pid)
        if subtree is not None:
            raise refusal(pid, subtree)
        if check is not None:
            check(rel, pid)
        self.effector.move(rel, pid)

    def foreign_of(self, pid: int) -> str | None:
        """The foreign subtree that holds process ``pid`` in some hierarchy, or None (none, or
        the process is gone: its move says so)."""
        if self._foreign is None:
            return None
        try:
            paths = self.hierarchy.locate(pid).paths
        except CgroupError:
            return None
        return self._foreign(paths)

    async def call(self, work: Callable[[], T]) -> T:
        """Run ``work`` on the cgroup thread and return what it returns (raises what it raises)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker(loop), work)

    def run(self, work: Callable[[], T], then: Callable[[T | GovernorError], None] | None = None) -> None:
        """Run ``work`` on the cgroup thread, then ``then`` on the loop with what it returned, or
        the :class:`GovernorError` it raised.

        Raises:
            RuntimeError: no event loop runs in this thread (the daemon runs on one)."""
        loop = asyncio.get_running_loop()
        self._pending += 1
        future = loop.run_in_executor(self._worker(loop), _outcome, work)

        def done(finished: asyncio.Future) -> None:
            self._pending -= 1
            if then is not None:
                then(finished.result())

        future.add_done_callback(done)

    async def settled(self) -> None:
        """Wait until nothing asked of the thread with :meth:`run` is pending, what those calls'
        ``then`` asked in turn included (the sessions of a start's rescan, made and joined)."""
        while self._pending:
            await asyncio.sleep(0.001)

    def make(self, rels: Sequence[str]) -> list[GovernorError | None]:
        """(On the thread) make each cgroup with the controllers enabled down to it: None for
        each made, else what stopped it. Its caps, device rules included, are applied on the
        loop before any process joins it."""
        return [_outcome(self.effector.make, rel) for rel in rels]

    def remove(self, rels: Sequence[str], *, groups: Sequence[str] = ()) -> None:
        """Forget the records of task cgroups ``rels`` now and remove them on the thread, then
        each of ``groups`` in order (a group, then its ancestors: :meth:`Tasks.emptied
        <governor.core.state.Tasks.emptied>`) until one has something below it (a task that started
        there meanwhile, another group: ``EBUSY`` is not an error). A failure is logged: the
        cgroup stays, empty. Each group's CPU counter is read first, once its tasks' cgroups
        are gone, and handed to ``read_before_removal`` on the loop (fair share charges it)."""
        effector = self.effector
        for rel in (*rels, *groups):
            effector.forget(rel)
        told = self._read_before_removal

        def remove() -> list[tuple[str, int, bool]]:
            for rel in rels:
                try:
                    effector.remove(rel)
                except CgroupError as error:
                    log.warning("cannot remove cgroup %s: %s", rel, error)
            read = []
            for group in groups:
                used = _cpu_used(self.hierarchy, group) if told is not None else None
                try:
                    effector.remove(group)
                except CgroupError as error:
                    if not isinstance(error, CgroupBusy):
                        log.warning("cannot remove cgroup %s: %s", group, error)
                    read += [(group, used, False)] if used is not None else []
                    return read
                read += [(group, used, True)] if used is not None else []
            return read

        def then(read: list[tuple[str, int, bool]] | GovernorError) -> None:
            for rel, used, gone in read if told is not None and isinstance(read, list) else ():
                told(rel, used, gone)

        self.run(remove, then)

    def _count(self, moves: Sequence[tuple[str, int]], step: int) -> None:
        for rel, _ in moves:
            left = self._joining.get(rel, 0) + step
            if left:
                self._joining[rel] = left
            else:
                del self._joining[rel]

    def _worker(self, loop: asyncio.AbstractEventLoop) -> concurrent.futures.Executor:
        if loop is not self._loop:
            self._loop = loop
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cgroups")
            loop.set_default_executor(self._pool)
        return self._pool


def _cpu_used(hierarchy: Hierarchy, rel: str) -> int | None:
    """(On the thread) cgroup ``rel``'s cumulative CPU counter, µs; None when it cannot be read
    (gone already: nothing to charge)."""
    try:
        return hierarchy.cpu_usage_usec(rel)
    except CgroupError:
        return None


def _outcome(work: Callable[..., T], *args) -> T | GovernorError | None:
    """What ``work(*args)`` returned, or the GovernorError it raised."""
    try:
        return work(*args)
    except GovernorError as error:
        return error
