"""How the daemon learns that a task's processes are gone (DESIGN.md §4).

* Where the driver offers a ``cgroup.events`` file (cgroup v2), the kernel modifies it when
  ``populated`` changes, so an inotify watch on it wakes the daemon the moment the last process
  of a task exits, children included (asyncinotify).
* Elsewhere (cgroup v1 has no such file) a pidfd on the launched pid wakes the daemon when it
  exits; if children outlive it, the periodic reconcile pass notices when the cgroup empties.
  The pidfds sit in one epoll of the watcher's own, which the event loop watches as one
  reader: 10,000 tasks cost 10,000 descriptors and a dict entry each, not an asyncio handle
  and a selector key each (~300 bytes).

Either way the watcher only says "look at this task"; the daemon checks the cgroup itself, so a
spurious wake-up is harmless.
"""

from __future__ import annotations

import asyncio
import os
import select
from pathlib import Path

from asyncinotify import Inotify, Mask


class ExitWatcher:
    """Wakes :meth:`next` with a task's key when its cgroup may have emptied."""

    def __init__(self) -> None:
        self._inotify = Inotify()
        self._watches: dict[str, object] = {}
        self._keys: dict[int, str] = {}
        self._fds: dict[str, int] = {}
        self._pidfd_keys: dict[int, str] = {}
        self._pidfds = select.epoll()  # made now: the daemon's descriptors stay as many after a task
        self._reading_pidfds = False
        self._exited: asyncio.Queue[str] = asyncio.Queue()
        self._reader: asyncio.Task | None = None

    def watch(self, key: str, events_path: Path | None, pid: int) -> None:
        """Watch ``events_path`` (inotify) when given, else process ``pid`` (pidfd).

        Raises:
            OSError: the file does not exist (the cgroup is already gone), or
                ProcessLookupError: ``pid`` is already gone.
        """
        if events_path is not None:
            watch = self._inotify.add_watch(events_path, Mask.MODIFY)
            self._watches[key] = watch
            self._keys[watch.wd] = key
            if self._reader is None:
                self._reader = asyncio.get_running_loop().create_task(self._read_inotify())
            return
        fd = os.pidfd_open(pid)
        if not self._reading_pidfds:
            asyncio.get_running_loop().add_reader(self._pidfds.fileno(), self._pids_exited)
            self._reading_pidfds = True
        self._pidfds.register(fd, select.EPOLLIN)
        self._fds[key] = fd
        self._pidfd_keys[fd] = key

    def unwatch(self, key: str) -> None:
        watch = self._watches.pop(key, None)
        if watch is not None:
            self._keys.pop(watch.wd, None)
            try:
                self._inotify.rm_watch(watch)
            except OSError:
                pass  # removing the cgroup already dropped the watch
        self._release(key)

    async def next(self) -> str:
        """The key of the next watched task whose cgroup may have emptied."""
        return await self._exited.get()

    def pending(self) -> list[str]:
        """Keys already reported and not yet taken by :meth:`next` (taken now)."""
        keys = []
        while not self._exited.empty():
            keys.append(self._exited.get_nowait())
        return keys

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        for key in list(self._fds):
            self._release(key)
        if self._reading_pidfds:
            asyncio.get_running_loop().remove_reader(self._pidfds.fileno())
        self._pidfds.close()
        self._inotify.close()

    async def _read_inotify(self) -> None:
        while True:
            event = await self._inotify.get()
            key = self._keys.get(event.watch.wd) if event.watch is not None else None
            if key is not None:
                self._exited.put_nowait(key)

    def _pids_exited(self) -> None:
        for fd, _ in self._pidfds.poll(0):
            key = self._pidfd_keys.get(fd)
            if key is not None:
                self._release(key)
                self._exited.put_nowait(key)

    def _release(self, key: str) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            del self._pidfd_keys[fd]
            self._pidfds.unregister(fd)
            os.close(fd)
