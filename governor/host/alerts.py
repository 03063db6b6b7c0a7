"""Runs the ``[notify]`` command, one run per event, off the daemon's path (issue 35, point 3).

:meth:`Alerts.put` is all the event loop does for an event: a check and an append, microseconds.
Runs happen on the loop's subprocess support, at most ``max_running`` at once, each fed one
document (:mod:`governor.wire.notice`) on stdin and killed, its whole process group, at
``timeout``. Events beyond :data:`PENDING_KEPT` waiting are dropped and counted (status shows
the count; the log says so once per burst): a flood of events never grows memory or the number
of processes. What a run writes is logged, cut to :data:`OUTPUT_KEPT` bytes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import signal
from collections import deque
from collections.abc import Callable, Mapping

from governor.config.notify_rules import NotifyRules

__all__ = ["Alerts", "OUTPUT_KEPT", "PENDING_KEPT", "encode"]

log = logging.getLogger("governor.daemon")
# Events waiting for a run, at most; more are dropped (at 4 runs at once of a 50 ms command,
# 1,000 take 12 s to send: an admin learns more from the count than from the 10,001st mail).
PENDING_KEPT = 1000
# A run's stdout and stderr, together, kept for the log; the rest is read and discarded.
OUTPUT_KEPT = 4096
# The environment a run gets: no variable of the daemon's (its socket, its credentials' paths).
_ENVIRONMENT = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class Alerts:
    """The runner of the ``[notify]`` command.

    Args:
        rules: → the ``[notify]`` rules in force (read at every event: a reload takes effect
            at the next one; runs under way finish under the rules they started with).

    Attributes:
        dropped: events dropped since the daemon started, the queue being full.
        refused: events not sent because ``user`` is the user of the event's task.
        failed: runs that exited non-zero, could not start, or were killed at the timeout.
        done: runs that exited 0.
        version: counts the changes of :meth:`counts` that status shows (the journal adds it
            to its own, so a change is seen without a call back into the daemon).
    """

    def __init__(self, rules: Callable[[], NotifyRules]) -> None:
        self.rules = rules
        self.version = 0
        self.dropped = self.refused = self.failed = self.done = 0
        self._pending: deque[Mapping[str, object]] = deque()
        self._workers: set[asyncio.Task] = set()
        self._burst = 0  # dropped since the queue was last empty
        self._accounts: dict[str, tuple[int, int]] = {}  # user name → (uid, gid), looked up once

    def wants(self, kind: str) -> bool:
        """Whether an event of ``kind`` is sent (a caller builds no document otherwise)."""
        rules = self.rules()
        return bool(rules.command) and kind in rules.events

    def put(self, document: Mapping[str, object]) -> bool:
        """Send ``document`` (:func:`governor.wire.notice.notice`) to the command, later: returns
        at once, on the event loop. False when it is not sent: its kind is not asked for, or
        the queue is full (counted in :attr:`dropped`)."""
        rules = self.rules()
        if not rules.command or document.get("kind") not in rules.events:
            return False
        if len(self._pending) >= PENDING_KEPT:
            self.dropped += 1
            self._burst += 1
            self.version += 1
            if self._burst == 1:
                log.warning("notify: %d events wait for the command; events are dropped until it catches up",
                            PENDING_KEPT)
            return False
        self._pending.append(document)
        if len(self._workers) < rules.max_running:
            self._workers.add(asyncio.get_running_loop().create_task(self._work()))
        return True

    def counts(self) -> dict[str, int]:
        """For status: ``pending`` (waiting), ``running``, ``dropped``, ``refused``, ``failed``, ``done``."""
        return {"pending": len(self._pending), "running": len(self._workers), "dropped": self.dropped,
                "refused": self.refused, "failed": self.failed, "done": self.done}

    async def close(self) -> None:
        """Stop: what waits is dropped, runs under way are killed (the daemon stops)."""
        self._pending.clear()
        for worker in list(self._workers):
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    async def _work(self) -> None:
        # One worker runs one command at a time: the workers alive are the runs' bound. One
        # leaves the set as it ends (not a callback later), so a lowered bound is met at once.
        try:
            while self._pending and len(self._workers) <= self.rules().max_running:
                await self._run(self.rules(), self._pending.popleft())
                self.version += 1
        finally:
            self._workers.discard(asyncio.current_task())
        if self._burst and not self._pending:
            log.warning("notify: %d events were dropped (the command could not keep up)", self._burst)
            self._burst = 0

    async def _run(self, rules: NotifyRules, document: Mapping[str, object]) -> None:
        try:
            account = await self._account(rules.user)
        except KeyError:
            self.failed += 1
            log.warning("notify: notify.user %s is no user on this host: the command is not run", rules.user)
            return
        if account is not None and account[0] == document.get("uid"):
            self.refused += 1
            log.warning("notify: the %s event of user %s is not sent: notify.user is that user, whose own task "
                        "would then run the command", document.get("kind"), rules.user)
            return
        kind = document.get("kind")
        try:
            process = await asyncio.create_subprocess_exec(
                *rules.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True, cwd="/", env=_ENVIRONMENT,
                **_as(account))
        except OSError as error:
            self.failed += 1
            log.warning("notify: cannot run %s: %s", rules.command[0], error)
            return
        try:
            output = await asyncio.wait_for(_talk(process, encode(document)), rules.timeout_s)
        except asyncio.TimeoutError:
            self.failed += 1
            log.warning("notify: %s ran past its timeout of %gs on a %s event: its process group is killed",
                        rules.command[0], rules.timeout_s, kind)
            _kill_group(process.pid)
            await process.wait()
            return
        except BaseException:
            _kill_group(process.pid)  # cancelled (the daemon stops): no run outlives it
            raise
        if output:
            log.info("notify: %s said on a %s event: %s", rules.command[0], kind,
                     output.decode(errors="replace").rstrip())
        if process.returncode == 0:
            self.done += 1
        else:
            self.failed += 1
            log.warning("notify: %s exited with status %s on a %s event", rules.command[0], process.returncode, kind)

    async def _account(self, user: str | None) -> tuple[int, int] | None:
        """``user``'s uid and gid (looked up once, on a thread: NSS may ask the network), or None
        for the daemon's own account."""
        if user is None:
            return None
        if user not in self._accounts:
            entry = await asyncio.to_thread(pwd.getpwnam, user)
            self._accounts[user] = (entry.pw_uid, entry.pw_gid)
        return self._accounts[user]


def encode(document: Mapping[str, object]) -> bytes:
    """The document as the command reads it (docs/notify.md): one line of ASCII JSON, no NaN,
    ending in a newline. Bytes of a command line that are not UTF-8 stay escaped (``\\udcff``).

    Raises:
        ValueError: a NaN or infinite figure (a caller's bug: every figure is finite).
    """
    return (json.dumps(document, ensure_ascii=True, allow_nan=False, separators=(",", ":")) + "\n").encode()


def _as(account: tuple[int, int] | None) -> dict:
    """The subprocess arguments that drop to ``account``: its uid, its gid, no other group."""
    if account is None:
        return {}
    return {"user": account[0], "group": account[1], "extra_groups": []}


async def _talk(process: asyncio.subprocess.Process, data: bytes) -> bytes:
    """Write ``data`` to the process's stdin and close it, read its output to the end (keeping
    :data:`OUTPUT_KEPT` bytes), and wait for it to exit."""
    try:
        process.stdin.write(data)
        await process.stdin.drain()
        process.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # a command that reads nothing of it is its business
    kept = b""
    while chunk := await process.stdout.read(65536):
        kept += chunk[:OUTPUT_KEPT - len(kept)]
    await process.wait()
    return kept


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it and its group ended meanwhile
