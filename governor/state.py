"""The daemon's state: running tasks by group, and their metadata on disk (DESIGN.md §8).

The cgroup tree is the truth about which tasks live; the metadata kept beside it (owner,
declared demand, command, start time) is what the tree cannot hold. Each task's record is one
JSON file ``<state_dir>/<task id>.json``, written atomically (write a temporary file, fsync,
rename) so a daemon killed mid-write leaves either the old record or the new one, never half.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from governor.errors import GovernorError
from governor.limits import task_cgroup


@dataclass(frozen=True)
class Task:
    """One process tree launched by ``governor run``.

    Attributes:
        id: unique within the daemon's state directory (``"7"``).
        group: the group it runs in.
        pid: the pid that was moved into the task cgroup (the ``governor run`` process, which
            then became the command).
        uid: the launching user's uid; ``user`` their name.
        command: argv, for display.
        demand: declared demand vector: ``cpu`` cores, ``memory`` bytes, ``io.<dev>.read`` /
            ``io.<dev>.write`` bytes/s.
        started: unix time, seconds.
    """

    id: str
    group: str
    pid: int
    uid: int
    user: str
    command: tuple[str, ...]
    demand: dict[str, float]
    started: float

    @property
    def cgroup(self) -> str:
        """The task's cgroup, relative to governor's root."""
        return task_cgroup(self.group, self.id)


class Tasks:
    """Running tasks by id, with per-group views. Insertion order is launch order.

    Each group's summed demand D_g is kept per group and recomputed only for a group whose tasks
    changed, so a refill on a host of thousands of tasks does not sum them all again.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._by_pid: dict[int, str] = {}
        self._groups: dict[str, dict[str, Task]] = {}
        self._sums: dict[str, dict[str, float]] = {}

    def add(self, task: Task) -> None:
        self._tasks[task.id] = task
        self._by_pid[task.pid] = task.id
        self._groups.setdefault(task.group, {})[task.id] = task
        self._sums.pop(task.group, None)

    def remove(self, task_id: str) -> Task | None:
        task = self._tasks.pop(task_id, None)
        if task is None:
            return None
        if self._by_pid.get(task.pid) == task_id:
            del self._by_pid[task.pid]
        members = self._groups[task.group]
        del members[task_id]
        if not members:
            del self._groups[task.group]
        self._sums.pop(task.group, None)
        return task

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    def with_pid(self, pid: int) -> Task | None:
        """The task launched as process ``pid``, if one is running."""
        task_id = self._by_pid.get(pid)
        return None if task_id is None else self._tasks.get(task_id)

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    def groups(self) -> dict[str, list[Task]]:
        """Group → its tasks, for groups with at least one task, in the order the groups got
        their first task."""
        return {group: list(members.values()) for group, members in self._groups.items()}

    def counts(self) -> dict[str, int]:
        """Group → how many tasks it runs."""
        return {group: len(members) for group, members in self._groups.items()}

    def demands(self) -> dict[str, dict[str, float]]:
        """Group → D_g, the sum of its tasks' declared demands (shared: do not modify)."""
        for group in self._groups.keys() - self._sums.keys():
            total: dict[str, float] = {}
            for task in self._groups[group].values():
                for resource, amount in task.demand.items():
                    total[resource] = total.get(resource, 0.0) + amount
            self._sums[group] = total
        return {group: self._sums[group] for group in self._groups}


class TaskStore:
    """Task metadata files under ``directory`` (created 0700 on first use).

    Raises (every method):
        GovernorError: the directory or a file cannot be written or read, naming the path.
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self._next_id = 1

    def prepare(self) -> None:
        """Create the directory and continue numbering after the highest stored id."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            ids = [int(p.stem) for p in self.directory.glob("*.json") if p.stem.isdigit()]
        except OSError as error:
            raise GovernorError(f"state directory {self.directory}: {error.strerror}") from None
        self._next_id = max(ids, default=0) + 1

    def new_id(self) -> str:
        task_id = str(self._next_id)
        self._next_id += 1
        return task_id

    def save(self, task: Task) -> None:
        """Write ``task``'s record atomically."""
        target = self.directory / f"{task.id}.json"
        try:
            fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=f".{task.id}.", suffix=".tmp")
            with os.fdopen(fd, "w") as stream:
                json.dump(asdict(task), stream)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, target)
        except OSError as error:
            raise GovernorError(f"cannot write task record {target}: {error.strerror}") from None

    def delete(self, task_id: str) -> None:
        try:
            (self.directory / f"{task_id}.json").unlink(missing_ok=True)
        except OSError as error:
            raise GovernorError(f"cannot remove task record {task_id}: {error.strerror}") from None

    def load_all(self) -> list[Task]:
        """Every stored record, oldest id first; unreadable records are skipped by the caller's
        choice: they raise GovernorError naming the file."""
        tasks = []
        for path in sorted(self.directory.glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0):
            try:
                data = json.loads(path.read_text())
                data["command"] = tuple(data["command"])
                tasks.append(Task(**data))
            except (OSError, ValueError, TypeError, KeyError) as error:
                raise GovernorError(f"unreadable task record {path}: {error}") from None
        return tasks
