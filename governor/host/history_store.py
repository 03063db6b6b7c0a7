"""The history journal on disk (issue 47; docs/admin.md, "History and replay"): JSON lines
appended to ``<[history] directory>/history-<unix ms>.jsonl`` by a thread of its own, so the
event loop never waits on the disk, and read back by ``governor history`` and ``governor replay``.

Kept by size and age (:class:`~governor.config.history_rules.HistoryRules`): a file is closed and
the next begun at a tenth of ``max_size``; the oldest files go while all of them hold more than
``max_size``, and a file whose newest entry (its mtime) is older than ``keep`` goes too. Each
file the writer begins opens with the last ``daemon`` entry it wrote (``"reason": "carried"``,
at the moment the file begins), so that the capacity in force outlives the file that held the
daemon's start.

What a crash loses: the writer takes the entries of :data:`GATHER_S` after the first one it
waits for and writes them (one ``write(2)``) at once, so a ``kill -9`` of the daemon loses only
entries not yet written, well under a second's; the file is synced (``fsync``) at most
:data:`SYNC_EVERY_S` apart, so a crash of the host loses at most that many seconds. A line cut
short by either is skipped on reading.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from governor.config.history_rules import HistoryRules

__all__ = ["SYNC_EVERY_S", "HistoryWriter", "read_history"]

SYNC_EVERY_S = 5.0
# How long the writer gathers entries after the first before writing them: one write and one
# wake-up of its thread per batch, not per entry (at 200 launches a second, three entries per
# task each woke the thread, which then took the interpreter's lock from the event loop: about
# a tenth of the daemon's CPU in scripts/bench's profile).
GATHER_S = 0.1
_PREFIX, _SUFFIX = "history-", ".jsonl"
# The most a file may hold is a tenth of max_size: the oldest tenth goes at once, not the whole.
_FILES_IN_MAX = 10
log = logging.getLogger("governor.daemon")


class HistoryWriter:
    """Appends history entries from a thread of its own.

    Args:
        directory: the journal's directory (made 0700 if missing, its parents too: by default
            ``/var/lib/governor/history``, which systemd's ``StateDirectory=`` makes under the
            unit, a daemon started by hand does not).
        rules: the ``[history]`` in force, asked at each write (a reload changes it).
        clock: unix seconds (tests pass their own).
    """

    def __init__(self, directory: Path, rules: Callable[[], HistoryRules], clock: Callable[[], float] = time.time):
        self.directory = directory
        self.rules = rules
        self.clock = clock
        self._entries: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._file = None
        self._synced_at = 0.0
        self._failing = False
        self._capacity: dict | None = None  # the last daemon entry written (its capacity, config)

    def start(self) -> None:
        """Start the writer thread."""
        self._thread = threading.Thread(target=self._run, name="governor-history", daemon=True)
        self._thread.start()

    def put(self, entry: dict) -> None:
        """Append ``entry`` (JSON-serialisable) soon; returns at once, never raises."""
        self._entries.put(entry)

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued, sync and stop the thread (waits at most ``timeout_s``)."""
        if self._thread is not None:
            self._entries.put(None)
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while True:
            batch = [self._entries.get()]
            if batch[0] is not None:
                time.sleep(GATHER_S)
            with contextlib.suppress(queue.Empty):
                while batch[-1] is not None:
                    batch.append(self._entries.get_nowait())
            closing = batch[-1] is None
            self.write([entry for entry in batch if entry is not None], sync=closing)
            if closing:
                if self._file is not None:
                    self._file.close()
                return

    def write(self, entries: list[dict], *, sync: bool = False) -> None:
        """Append ``entries`` now (the thread's work; tests call it directly). A failure is
        logged once until a write succeeds again: the daemon governs on without its history."""
        if not entries:
            return
        data = b"".join(json.dumps(entry, separators=(",", ":")).encode() + b"\n" for entry in entries)
        try:
            if self._prepare(self.rules(), len(data)) and self._capacity is not None and entries[0].get("kind") != "daemon":
                # Each file begins with the capacity in force: pruning the oldest files took the
                # daemon's start entry with them, and replay knew no capacity for any period.
                self._file.write(json.dumps({**self._capacity, "at": self.clock(), "reason": "carried"},
                                            separators=(",", ":")).encode() + b"\n")
            self._file.write(data)
            self._capacity = next((entry for entry in reversed(entries) if entry.get("kind") == "daemon"), self._capacity)
            self._file.flush()
            now = time.monotonic()
            if sync or now - self._synced_at >= SYNC_EVERY_S:
                os.fsync(self._file.fileno())
                self._synced_at = now
            self._failing = False
        except OSError as error:
            if not self._failing:
                log.error("history: cannot write %s: %s; entries are lost until it can",
                          self.directory, error.strerror or error)
            self._failing = True
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
                self._file = None

    def _prepare(self, rules: HistoryRules, adding: int) -> bool:
        """Open the file to append to: a new one past a tenth of ``max_size``; remove what
        the rules no longer keep. Whether a new file was begun."""
        if self._file is not None and self._file.tell() + adding <= rules.max_size_bytes // _FILES_IN_MAX:
            return False
        if self._file is not None:
            self._file.close()
            self._file = None
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        files = journal_files(self.directory)
        current = files[-1] if files else None
        begun = current is None or current.stat().st_size + adding > rules.max_size_bytes // _FILES_IN_MAX
        if begun:
            current = self.directory / f"{_PREFIX}{int(self.clock() * 1000):015d}{_SUFFIX}"
        fd = os.open(current, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._file = os.fdopen(fd, "ab")
        self._prune(rules, current)
        return begun

    def _prune(self, rules: HistoryRules, current: Path) -> None:
        oldest_kept = self.clock() - rules.keep_s
        files = [path for path in journal_files(self.directory) if path != current]
        sizes = {path: path.stat() for path in files}
        total = sum(stat.st_size for stat in sizes.values()) + self._file.tell()
        for path in files:  # oldest first
            if total > rules.max_size_bytes or sizes[path].st_mtime < oldest_kept:
                total -= sizes[path].st_size
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


def journal_files(directory: Path) -> list[Path]:
    """The journal's files in ``directory``, oldest first ([] when there is none)."""
    try:
        names = sorted(name for name in os.listdir(directory) if name.startswith(_PREFIX) and name.endswith(_SUFFIX))
    except FileNotFoundError:
        return []
    return [directory / name for name in names]


def read_history(directory: Path, since: float | None = None, until: float | None = None,
                 skipped: Callable[[Path, int, str], None] | None = None) -> Iterator[dict]:
    """The entries of the journal in ``directory`` with ``since <= at < until`` (unix
    seconds; None: no bound), oldest first. A line cut short by a crash, or not an entry a
    reader can use (:func:`governor.host.history_check.entry_problem`), is skipped; where
    ``skipped`` is given it is told of each such line of the period, (file, line number, why).

    Raises:
        OSError: the directory or a file cannot be read (PermissionError: not the daemon's user).
    """
    from governor.host.history_check import entry_problem

    if not directory.is_dir():
        raise FileNotFoundError(2, "no history journal here", str(directory))
    for path in journal_files(directory):
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            continue  # the writer makes files only (a link to /dev/zero was read to the memory's end)
        if since is not None and info.st_mtime < since:
            continue  # its newest entry is older
        with open(path, "rb") as stream:
            for number, line in enumerate(stream, 1):
                try:
                    entry = json.loads(line)
                except (ValueError, RecursionError):  # RecursionError: [[[…]]] past the decoder's depth
                    entry = None
                at = entry.get("at") if isinstance(entry, dict) else None
                # Only a time a journal can hold places a line outside the period: one with another
                # (Infinity, -5) is named as every bad line is, by history and replay alike.
                if (isinstance(at, (int, float)) and 0 <= at < 2.0 ** 33
                        and not ((since is None or at >= since) and (until is None or at < until))):
                    continue
                problem = "not a JSON object (cut short by a crash?)" if entry is None else entry_problem(entry)
                if problem is None:
                    yield entry
                elif skipped is not None:
                    skipped(path, number, problem)
