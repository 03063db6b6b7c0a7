"""The entries of the history journal (issue 47; docs/admin.md, "History and replay"), one
builder per kind, and the stage that hands them to the writer thread
(:class:`~governor.host.history_store.HistoryWriter`). Where each kind is built:

========  ===========================================  =====================================
kind      when                                         where
========  ===========================================  =====================================
daemon    the daemon serves or reloads (its capacity)  :meth:`History.start` (root), :meth:`Reloads.reload
                                                       <governor.daemon.reloads.Reloads.reload>`
launch    a launch is queued (every start's arrival)   :meth:`Launches.launch <governor.daemon.launches.Launches.launch>`
start     a launched task starts (``waited_s``)        :class:`~governor.daemon.starts.Starts`
refusal   a launch is refused (its error's code)       :class:`~governor.daemon.launches.Launches`
session   a user's session starts                      :class:`~governor.daemon.sessions.Sessions`
end       a task or session ends (its counters)        :meth:`Exits.check <governor.daemon.exits.Exits.check>`
========  ===========================================  =====================================

An entry never holds what the visibility rule hides from other users (command line, pid,
processes: :data:`governor.wire.visibility.HIDDEN`), so every entry is what anyone may see of
a task. Amounts in base units (cores, bytes, bytes/s); times in unix seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping

from governor.config.history_rules import HistoryRules
from governor.core.state import Task
from governor.errors import RequestError
from governor.host.accounting import Ended
from governor.host.history_store import HistoryWriter, read_history
from governor.wire.fields import MAX_NAME_CHARS
from governor.wire.reply_types import HistoryReply
from governor.wire.request_types import HistoryRequest
from governor.wire.visibility import HIDDEN, Viewer, rows_for

__all__ = ["History", "RefusalBudget", "daemon_entry", "end_entry", "launch_entry", "refusal_entry", "session_entry",
           "start_entry"]

KINDS = ("daemon", "launch", "start", "refusal", "session", "end")
# The most entries one ``history`` reply carries (about 400 bytes each: 40 MB), the newest;
# and the most bytes of them (as the journal's JSON): an attacker's entries of a kilobyte each
# (names of 64 emoji, escaped) made a reply of 102 MB and took the daemon from 60 to 564 MB.
ENTRIES_SENT = 100_000
BYTES_SENT = 40 << 20
# The most of the daemon's time one user's ``history`` reads may take: after a read of t
# seconds, the same uid may read again t × (1/READ_SHARE − 1) later. A read of a small journal
# takes milliseconds, so a user's script never meets it; one asking for a month again and
# again gets ``too_many`` with when to ask again, and the daemon serves everyone else meanwhile.
# Root is not paced (as with max_tasks_per_user): it owns the daemon, and reads the files itself.
READ_SHARE = 0.1

# The most launch refusals of one uid the journal keeps in a minute. A script retrying a
# refused launch in a loop, or a flood of refused requests (4,000 a second from one process in
# an attacker's check), pushed everyone's history out of the journal's max_size in minutes.
REFUSALS_PER_MINUTE = 60

log = logging.getLogger("governor.daemon")


class RefusalBudget:
    """Which launch refusals go in the journal: each uid's first :data:`REFUSALS_PER_MINUTE` of
    each minute; the rest are counted, and the daemon's log says so, at the first left out and
    with their number at the uid's next refusal after that minute. Memory: one entry per uid
    refused (uids are the kernel's word for who connected: no one makes up more).

    ``unstarted=True``: the same budget for launches that never started (``wait: false`` and
    no room, a client gone from the queue), whose ``launch`` entries the journal keeps."""

    def __init__(self, per_minute: int = REFUSALS_PER_MINUTE, *, unstarted: bool = False) -> None:
        self.per_minute = per_minute
        self._what = ("launches that never started", "launched more than {} times this minute without a start: "
                      "the rest of this minute's launches are journaled only if they start") if unstarted else \
            ("launch refusals", "was refused more than {} launches this minute: the rest of this minute's refusals "
                                "are counted, not journaled")
        self._minutes: dict[int, list] = {}  # uid → [the minute's start (unix s), journaled, left out]

    def _minute(self, uid: int, now: float) -> list:
        minute = self._minutes.get(uid)
        if minute is None or now - minute[0] >= 60 or now < minute[0]:
            if minute is not None and minute[2]:
                log.warning("%d %s of uid %d were not journaled in the minute from %s (more than %d)", minute[2],
                            self._what[0], uid, time.strftime("%H:%M:%S", time.localtime(minute[0])), self.per_minute)
            minute = self._minutes[uid] = [now, 0, 0]
        return minute

    def take(self, uid: int, now: float) -> bool:
        """Whether the refusal of ``uid``'s launch at ``now`` (unix seconds) is journaled (with
        ``unstarted``: whether the launch entry of one that never started was)."""
        minute = self._minute(uid, now)
        if minute[1] < self.per_minute:
            minute[1] += 1
            return True
        if not minute[2]:
            log.warning("uid %d " + self._what[1].format(self.per_minute), uid)
        minute[2] += 1
        return False

    def left(self, uid: int, now: float) -> bool:
        """Whether ``uid`` has some of this minute's budget left (takes none of it)."""
        return self._minute(uid, now)[1] < self.per_minute


def _task(kind: str, at: float, task: Task) -> dict:
    entry = {key: value for key, value in task.to_json().items() if key not in HIDDEN}
    return {"at": at, "kind": kind, "task": entry.pop("id"), **entry}


def daemon_entry(at: float, capacity: Mapping[str, float], config_file: str, reason: str) -> dict:
    """The daemon divides ``capacity`` (the host's less the reserve: cores, bytes, bytes/s,
    devices) from ``at`` on, under ``config_file``; ``reason``: ``"start"`` or ``"reload"``
    (a reload may change it: ``governor replay`` divides each moment's)."""
    return {"at": at, "kind": "daemon", "reason": reason, "capacity": dict(capacity), "config": config_file}


def launch_entry(task: Task, at: float, *, group_named: bool) -> dict:
    """A launch queued at ``at``: the task's id, name, group, user, uid, declared demand and
    time limit, and whether the launch named its group (``governor replay`` keeps a named one
    under a proposed config, or refuses it; another goes to the user's default there)."""
    return {**_task("launch", at, task), "group_named": group_named}


def start_entry(task: Task, waited_s: float) -> dict:
    """``task`` started (at ``task.started``) after ``waited_s`` seconds in the queue."""
    return {**_task("start", task.started, task), "waited_s": waited_s}


def session_entry(task: Task) -> dict:
    """A session started (sessions are never queued)."""
    return {**_task("session", task.started, task), "waited_s": 0.0}


def end_entry(record: Ended) -> dict:
    """A task or session ended: ``ps --ended``'s record (reason, wall and CPU seconds, memory
    peak, OOM kills, …) less what the visibility rule hides."""
    entry = {key: value for key, value in record.to_json().items() if key not in HIDDEN}
    return {"at": record.ended, "kind": "end", "task": entry.pop("id"), **entry}


def refusal_entry(at: float, *, uid: int, user: str, group: str | None, demand: Mapping[str, float],
                  code: str) -> dict:
    """A launch refused at ``at``: who asked (uid and user name; ``group``: the one asked for,
    None: their default, cut to a name's length: a refused one may be 60 KB), the demand as asked
    (before defaults) and the error's code. Not its message: that may name the asker's pid or
    command, which others may not see."""
    if group is not None and len(group) > MAX_NAME_CHARS:
        group = group[:MAX_NAME_CHARS] + "…"
    return {"at": at, "kind": "refusal", "task": None, "uid": uid, "user": user, "group": group,
            "demand": dict(demand), "code": code}


class History:
    """The daemon's journal writer, off while ``[history] enabled = false``.

    Args:
        directory: the journal's directory (``[history] directory``, read at start); rules: the
            ``[history]`` in force (a reload changes it); clock: unix seconds; monotonic: seconds,
            for the readers' pace (:data:`READ_SHARE`).
    """

    def __init__(self, directory, rules: Callable[[], HistoryRules], clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic):
        self.rules = rules
        self.clock = clock
        self.monotonic = monotonic
        self.writer = HistoryWriter(directory, rules, clock)
        # One read of the journal at a time: any user may ask, and a month is up to max_size of
        # JSON; asked many times at once, the reads would share out the daemon's CPU and memory.
        self._reading = asyncio.Lock()
        # uid → when (monotonic) it may read again; inf while its read is under way. Only uids
        # still waiting are kept.
        self._next_read: dict[int | None, float] = {}

    def start(self, capacity: Mapping[str, float], config_file: str) -> None:
        """Start the writer and record that the daemon serves with ``capacity``."""
        self.writer.start()
        self.put(daemon_entry(self.clock(), capacity, config_file, "start"))

    def put(self, entry: dict) -> None:
        """Append ``entry`` (one of the builders') unless the history is off; never blocks."""
        if self.rules().enabled:
            self.writer.put(entry)

    def close(self) -> None:
        """Write what is left and stop the writer."""
        self.writer.close()

    async def reply(self, request: HistoryRequest, viewer: Viewer) -> HistoryReply:
        """The ``history`` operation: the period's entries (read in a thread: the loop goes on
        serving; one read at a time, the others wait), the newest, at most :data:`ENTRIES_SENT` of
        them and :data:`BYTES_SENT` of their JSON, as ``viewer`` may see them; one read per uid at a time, at the pace :data:`READ_SHARE`
        allows (root's are not paced).

        Raises:
            RequestError: ``too_many``, this uid's last read is under way or too recent (the
                message says when to ask again); ``unavailable``, the journal cannot be read.
        """
        skipped = 0  # lines of the period that are no entry: the client says how many
        truncated = False  # older entries of the period left out

        def read() -> list[dict]:
            def skip(*_: object) -> None:
                nonlocal skipped
                skipped += 1

            nonlocal truncated
            kept: deque[tuple[dict, int]] = deque()
            size = 0
            for entry in read_history(self.writer.directory, request.since, request.until, skip):
                if entry.get("kind") == "daemon":
                    continue
                kept.append((entry, length := len(json.dumps(entry, separators=(",", ":")))))
                size += length
                while len(kept) > ENTRIES_SENT or size > BYTES_SENT:
                    size -= kept.popleft()[1]
                    truncated = True
            return [entry for entry, _ in kept]

        if viewer.uid != 0:
            self._pace(viewer.uid)
        began = None
        try:
            async with self._reading:
                began = self.monotonic()
                try:
                    entries = await asyncio.to_thread(read)
                except FileNotFoundError:
                    entries = []  # nothing journaled yet
                return HistoryReply(rows_for(entries, viewer), truncated, skipped)
        except OSError as error:
            raise RequestError("unavailable", f"cannot read the history journal: {error.strerror or error}") from None
        finally:
            if viewer.uid != 0:
                spent = 0.0 if began is None else self.monotonic() - began
                self._next_read[viewer.uid] = self.monotonic() + spent * (1 / READ_SHARE - 1)

    def _pace(self, uid: int | None) -> None:
        """Let ``uid`` read now (marking its read under way), or refuse it with when to ask again."""
        now = self.monotonic()
        self._next_read = {who: when for who, when in self._next_read.items() if when > now}
        ready = self._next_read.get(uid)
        if ready == math.inf:
            raise RequestError("too_many", "your last history request is still being answered: one at a time")
        if ready is not None:
            raise RequestError("too_many", f"your history requests held the daemon over {READ_SHARE:.0%} of the "
                                           f"time: ask again in {math.ceil(ready - now)} s")
        self._next_read[uid] = math.inf
