"""Task metadata on disk (DESIGN.md §8): what the cgroup tree cannot hold of a running task
(:class:`governor.core.state.Task`: owner, declared demand, command, start time).

Each task's record is one JSON file ``<state_dir>/<task id>.json``, written atomically
(:func:`governor.host.state_files.write_atomically`) so a daemon killed mid-write leaves either the
old record or the new one, never half. ``<state_dir>/next-id`` holds the next task id (decimal), written
before an id is handed out: ids never repeat on a host, even after every task has ended and
the daemon restarted (a log's "task 14" is one task), nor after that file was lost: a restarted
daemon numbers on after the highest id on record anywhere (:data:`NEXT_ID`, the records, those
set aside as ``<id>.json.bad``; :class:`~governor.daemon.recovery.Recovery` adds the ended
records and the task cgroups in the tree, :meth:`TaskStore.skip_past`).
``<state_dir>/ended.state`` keeps the last ended tasks' records (``governor ps --ended``) across
restarts; ``<state_dir>/queued.state`` the launches waiting in the queue (their ids and places,
:mod:`governor.daemon.waiting`), which their clients send again to a restarted daemon.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from governor.errors import GovernorError, StateFileError
from governor.core.state import Task
from governor.host.state_files import load, read_trusted, write_atomically
from governor.core.task_record import record_of, task_fields
from governor.host.trust import untrusted

__all__ = ["ENDED", "MAX_ENDED_BYTES", "MAX_RECORD_BYTES", "NEXT_ID", "QUEUED", "TaskStore"]

# The file of the next task id, and that of the ended tasks' records, in the state directory
# (not ``*.json``: neither is a task's record).
NEXT_ID = "next-id"
ENDED = "ended.state"
QUEUED = "queued.state"
# A task's record, or one set aside (its id was given out all the same).
_RECORD_NAME = re.compile(r"[0-9]+\.json(\.bad)?")


class TaskStore:
    """Task metadata files under ``directory`` (created 0700 on first use).

    A record decides which cgroup the daemon writes and which process it governs, so the
    directory is trusted only when it is what the daemon made: a real directory (not a
    symlink), owned by the daemon's user, writable by nobody else. Its files are read as
    :func:`governor.host.state_files.read_trusted` reads them (records: of at most
    :data:`MAX_RECORD_BYTES`), and a bad one is set aside as ``<name>.bad``.

    Raises (every method):
        GovernorError: the directory is not trustworthy, or it or a file cannot be written or
            read, naming the path.
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self._next_id = 1
        self._written = False  # whether this daemon wrote NEXT_ID whole (then it overwrites it in place)

    def prepare(self) -> None:
        """Create the directory (or check the one there), remove temporary files a killed
        daemon left, and continue numbering where the last daemon stopped (:data:`NEXT_ID`), or
        after the highest id of a record (one set aside as bad included) where that is higher.

        Raises:
            GovernorError: as the class says; also a :data:`NEXT_ID` file that cannot be trusted
                or is not a number (naming it, and what to do).
        """
        self._written = False
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            raise GovernorError(f"state directory {self.directory}: {error.strerror}") from None
        self.check()
        try:
            for stale in self.directory.glob(".*.tmp"):
                stale.unlink(missing_ok=True)
            ids = [int(name.split(".", 1)[0]) for name in os.listdir(self.directory) if _RECORD_NAME.fullmatch(name)]
        except OSError as error:
            raise GovernorError(f"state directory {self.directory}: {error.strerror}") from None
        self._next_id = max(max(ids, default=0) + 1, self._stored_next_id())

    def _stored_next_id(self) -> int:
        """The id :data:`NEXT_ID` says comes next, 1 where there is no such file yet."""
        path = self.directory / NEXT_ID
        try:
            text = read_trusted(path, MAX_RECORD_BYTES).decode("ascii").strip()
            if not text.isdigit():
                raise ValueError(f"not a task id: {text[:40]!r}")
            return int(text)
        except FileNotFoundError:
            return 1
        except (StateFileError, ValueError) as error:
            reason = error.reason if isinstance(error, StateFileError) else str(error)
            raise GovernorError(f"task id file {path}: {reason}; the daemon writes it alone: remove it to "
                                "number on after the highest task id on record") from None

    def check(self, owner: int | None = None) -> None:
        """Refuse a directory the daemon could not trust; one not made yet is fine (it will be
        made 0700). Creates nothing (``check-config`` asks too, for the daemon's ``owner``: by
        default this process's user).

        Raises:
            GovernorError: it is a link, not a directory, another user's, or writable by others.
        """
        try:
            info = os.lstat(self.directory)
        except FileNotFoundError:
            return
        except OSError as error:
            raise GovernorError(f"state directory {self.directory}: {error.strerror}") from None
        problem = untrusted(info, directory=True, owner=owner)
        if problem:
            raise GovernorError(f"state directory {self.directory} is {problem}; task records there could be "
                                f"forged: make it a directory of the daemon's user, mode 0700")

    def skip_past(self, task_id: int) -> None:
        """Never give out ``task_id`` or a lower id: one on record elsewhere (an ended task's,
        a task cgroup's in the tree)."""
        self._next_id = max(self._next_id, task_id + 1)

    def new_id(self) -> str:
        """A task id never given out on this host before, stored as given before it is returned.

        The first id of this daemon replaces :data:`NEXT_ID` atomically; each later one
        overwrites it in place (open, ``pwrite``, close: 7 µs of CPU against 143 µs for the
        atomic replacement, a rename over the old file): ids only grow, so each number is at
        least as long as the one it overwrites and covers it whole, and a write this small is
        never left half done by a killed daemon.

        Raises:
            GovernorError: :data:`NEXT_ID` cannot be written (the id is not handed out).
        """
        task_id = self._next_id
        path = self.directory / NEXT_ID
        data = b"%d\n" % (task_id + 1)
        if not self._written or not self._overwrite(path, data):
            write_atomically(path, data, "task id file")
            self._written = True
        self._next_id = task_id + 1
        return str(task_id)

    @staticmethod
    def _overwrite(path: Path, data: bytes) -> bool:
        """Overwrite :data:`NEXT_ID` in place with ``data``; False where it is gone (removed
        while the daemon ran: written whole again). The file is not kept open between ids: a
        daemon's descriptors are back to their count once its tasks have ended.

        Raises:
            GovernorError: it cannot be opened or written, naming it.
        """
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError as error:
            raise GovernorError(f"cannot open task id file {path}: {error.strerror}") from None
        try:
            os.pwrite(fd, data, 0)
        except OSError as error:
            raise GovernorError(f"cannot write task id file {path}: {error.strerror}") from None
        finally:
            os.close(fd)
        return True

    def save(self, task: Task) -> None:
        """Write ``task``'s record atomically (a reader sees the old record or the new one).

        Not synced to disk: a record must outlive the daemon, not the host, whose reboot ends
        every task it describes (and an fsync per launch cost more than the launch's writes).
        """
        # UTF-8 as UTF-8: escaped, an accented command line took three times its size.
        # (A lone surrogate, from a user name the database gave undecoded, stays a JSON escape.)
        write_atomically(self.directory / f"{task.id}.json",
                         json.dumps(record_of(task), ensure_ascii=False).encode("utf-8", "backslashreplace"),
                         "task record")

    def save_ended(self, saved: list[dict]) -> None:
        """Write the ended tasks' records (:meth:`governor.host.accounting.Ended.to_saved`, oldest
        first) atomically, as one JSON list (raises GovernorError naming the file)."""
        data = json.dumps(saved, ensure_ascii=False).encode("utf-8", "backslashreplace")
        write_atomically(self.directory / ENDED, data, "ended tasks' records")

    def load_ended(self) -> tuple[list[dict], list[str]]:
        """The ended tasks' records :meth:`save_ended` wrote (none where there is no file yet),
        and what was wrong: a file that cannot be trusted or read is set aside as
        ``ended.state.bad`` (the history starts afresh; the daemon runs on)."""
        saved, problem = load(self.directory / ENDED, "ended tasks' records", _ended_records, MAX_ENDED_BYTES)
        return saved or [], [problem] if problem else []

    def save_queued(self, waiting: list[dict]) -> None:
        """Write the waiting launches' places (``{"id", "pid", "born", "uid", "group",
        "queued_at"}``, in arrival order) atomically, as one JSON list (raises GovernorError
        naming the file)."""
        write_atomically(self.directory / QUEUED, json.dumps(waiting).encode(), "queue's places")

    def load_queued(self) -> tuple[list[dict], list[str]]:
        """The places :meth:`save_queued` wrote (none where there is no file), and what was
        wrong: a file that cannot be trusted or read is set aside as ``queued.state.bad`` (the
        launches sent again queue afresh; the daemon runs on)."""
        saved, problem = load(self.directory / QUEUED, "queue's places", _queued_places, MAX_RECORD_BYTES * 16)
        return saved or [], [problem] if problem else []

    def delete(self, task_id: str) -> None:
        try:
            (self.directory / f"{task_id}.json").unlink(missing_ok=True)
        except OSError as error:
            raise GovernorError(f"cannot remove task record {task_id}: {error.strerror}") from None

    def load_all(self) -> tuple[list[Task], list[str]]:
        """Every stored record, oldest id first, and what was wrong with the others.

        A record that cannot be trusted or read (a link, not a regular file, another owner,
        too large, not JSON, a field out of bounds) is set aside as ``<name>.bad`` so that it
        neither stops the daemon nor comes back, and described in the second list.
        """
        tasks, problems = [], []
        for path in sorted(self.directory.glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0):
            task, problem = load(path, "task record", lambda data, stem=path.stem: Task(**task_fields(stem, data)),
                                 MAX_RECORD_BYTES)
            tasks += [task] if task is not None else []
            problems += [problem] if problem else []
        return tasks, problems


# A record is a few hundred bytes; a command line may make it a few hundred KiB at most.
MAX_RECORD_BYTES = 1 << 20
# The ended tasks' records: about 1 KiB each (ENDED_KEPT of them), long command lines allowed for.
MAX_ENDED_BYTES = 64 << 20


def _ended_records(data: bytes) -> list[dict]:
    """The ended tasks' records in ``data`` (raises ValueError: not a JSON list of objects)."""
    saved = json.loads(data)
    if not isinstance(saved, list) or not all(isinstance(item, dict) for item in saved):
        raise ValueError("not a list of records")
    return saved


# A waiting launch's place: each field and its type (ints are not bools; floats may be ints).
_PLACE = {"id": str, "pid": int, "born": (int, float), "uid": int, "group": str, "queued_at": (int, float)}


def _queued_places(data: bytes) -> list[dict]:
    """The places in ``data`` (raises ValueError: not a JSON list of places as
    :meth:`TaskStore.save_queued` writes them)."""
    saved = json.loads(data)
    if not isinstance(saved, list) or not all(
            isinstance(item, dict) and all(isinstance(item.get(key), kind) and not isinstance(item.get(key), bool)
                                           for key, kind in _PLACE.items()) and item["id"].isdigit()
            for item in saved):
        raise ValueError("not a list of the queue's places")
    return saved
