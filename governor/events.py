"""How the daemon learns that a task's processes are gone (DESIGN.md §4).

* cgroup v2: the kernel modifies a cgroup's ``cgroup.events`` when ``populated`` changes, so an
  inotify watch on it wakes the daemon the moment the last process of a task exits, children
  included (asyncinotify).
* cgroup v1 has no such file: a pidfd on the launched pid wakes the daemon when it exits; if
  children outlive it, the periodic reconcile pass notices when the cgroup empties.

Either way the watcher only says "look at this task"; the daemon checks the cgroup itself, so a
spurious wake-up is harmless.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from asyncinotify import Inotify, Mask


class CgroupEventsWatcher:
    """Inotify watches on ``cgroup.events`` files (cgroup v2)."""

    def __init__(self) -> None:
        self._inotify = Inotify()
        self._watches: dict[str, object] = {}
        self._keys: dict[int, str] = {}

    def watch(self, key: str, events_path: Path, pid: int) -> None:
        """Wake :meth:`next` with ``key`` whenever ``events_path`` changes.

        Raises:
            OSError: the file does not exist (the cgroup is already gone).
        """
        watch = self._inotify.add_watch(events_path, Mask.MODIFY)
        self._watches[key] = watch
        self._keys[watch.wd] = key

    def unwatch(self, key: str) -> None:
        watch = self._watches.pop(key, None)
        if watch is not None:
            self._keys.pop(watch.wd, None)
            try:
                self._inotify.rm_watch(watch)
            except OSError:
                pass  # removing the cgroup already dropped the watch

    async def next(self) -> str:
        """The key of the next watched task whose cgroup may have emptied."""
        while True:
            event = await self._inotify.get()
            key = self._keys.get(event.watch.wd) if event.watch is not None else None
            if key is not None:
                return key

    def close(self) -> None:
        self._inotify.close()


class PidfdWatcher:
    """pidfds of launched processes (cgroup v1, or any host): wakes when the pid exits."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._fds: dict[str, int] = {}

    def watch(self, key: str, events_path: Path | None, pid: int) -> None:
        """Wake :meth:`next` with ``key`` when process ``pid`` exits.

        Raises:
            ProcessLookupError: ``pid`` is already gone.
        """
        fd = os.pidfd_open(pid)
        self._fds[key] = fd
        asyncio.get_running_loop().add_reader(fd, self._exited, key)

    def _exited(self, key: str) -> None:
        self._release(key)
        self._queue.put_nowait(key)

    def unwatch(self, key: str) -> None:
        self._release(key)

    def _release(self, key: str) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    async def next(self) -> str:
        return await self._queue.get()

    def close(self) -> None:
        for key in list(self._fds):
            self._release(key)
