"""The daemon's state: running tasks by group (DESIGN.md §8); :mod:`governor.host.task_store`
keeps their metadata on disk.

The cgroup tree is the truth about which tasks live; the metadata kept beside it (owner,
declared demand, command, start time) is what the tree cannot hold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, KeysView, Mapping
from dataclasses import dataclass, field

from governor.core.device_identity import DeviceIdentity
from governor.config.kinds import Kind, cgroup_of, kind_of

Slot = tuple[str, int]  # one device: its class's registry entry and its index in that class's inventory
GPU = "gpu"  # the registry's entry of NVIDIA's GPUs: what a view's "gpus" shows


@dataclass(frozen=True, slots=True)
class Task:
    """One process tree launched by ``governor run``, or a user's session: every process of a
    governed user started outside ``governor run`` (:mod:`governor.host.session_rules`).

    Attributes:
        id: unique within the daemon's state directory (``"7"``); a session's is
            ``session-<uid>``, a login session's ``login-<uid>`` (the user's systemd slice, on
            a systemd host): its :attr:`kind` (:mod:`governor.config.kinds`).
        group: the group it runs in.
        pid: the pid that was moved into the task cgroup (the ``governor run`` process, which
            then became the command; a session's first process).
        uid: the launching user's uid; ``user`` their name.
        command: argv, for display (empty for a session).
        demand: declared demand vector: ``cpu`` cores, ``memory`` bytes, ``io.<dev>.read`` /
            ``io.<dev>.write`` bytes/s.
        started: unix time, seconds.
        name: the name it was given (``governor run --name``; by default its command's
            basename); empty for a session.
        time_limit: seconds after ``started`` at which the daemon ends the whole task
            (``governor run --time-limit``), or None for no limit.
        place: its group's cgroup when it started (``science/physics-lab``,
            :meth:`~governor.config.settings.Config.place`), kept so that the task is found
            where it is whatever a later config says; empty for the group's own name.
        devices: each device class it holds some of (its registry entry: ``gpu`` for
            ``governor run --gpus N``) → the devices it holds by index in that class's inventory
            in force (:attr:`governor.core.devices.Device.index`), re-mapped by identity when it
            changes; a class it holds none of is left out.
        device_identities: the same devices by identity, class by class, in order (its record
            keeps these: :mod:`governor.core.task_record`; read back, a task has no ``devices``
            until re-mapped).
        unrecorded: a task found at a restart without a readable record (set aside as
            ``<id>.json.bad``): governed as the kernel holds it (its declared memory is its
            cgroup's memory cap; nothing of its cgroup is written), named ``(unrecorded)``,
            never given a record.
        kind: task, session or login session, from ``id``.
        cgroup: the task's cgroup, relative to governor's root (a login session's: to the cgroup
            v2 mount), from ``place`` (or ``group``) and ``id``; one string its records share.
    """

    id: str
    group: str
    pid: int
    uid: int
    user: str
    command: tuple[str, ...]
    demand: dict[str, float]
    started: float
    name: str = ""
    time_limit: float | None = None
    place: str = ""
    devices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    device_identities: Mapping[str, tuple[DeviceIdentity, ...]] = field(default_factory=dict)
    unrecorded: bool = False
    kind: Kind = field(init=False, repr=False, compare=False)
    cgroup: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", kind_of(self.id))
        object.__setattr__(self, "cgroup", cgroup_of(self.place or self.group, self.id))

    @property
    def is_session(self) -> bool:
        """Whether this is a user's session (a login session too) rather than a launch."""
        return self.kind.is_session

    @property
    def is_login(self) -> bool:
        """Whether this is a login session: the user's systemd slice, outside governor's root."""
        return self.kind is Kind.LOGIN

    def held(self) -> list[Slot]:
        """The devices it holds, every class's, as ``(entry, index)``."""
        return [(entry, index) for entry, indices in self.devices.items() for index in indices]

    @property
    def label(self) -> str:
        """How people see it in the log: ``task 7`` or ``session of alice``."""
        return f"session of {self.user}" if self.is_session else f"task {self.id}"

    def to_json(self, *, command_chars: int | None = None) -> dict:
        """What every view of a task shares (``status``, ``ps``, ended records): ids, owner,
        command, declared demand (cores, bytes, bytes/s), start (unix seconds), time limit
        (seconds or None). With ``command_chars``, the command is cut to that many characters
        (:func:`bounded_command`) and ``command_cut`` says how many were left out (else 0)."""
        command, cut = bounded_command(self.command, command_chars)
        return {"id": self.id, "name": self.name, "group": self.group, "user": self.user, "uid": self.uid,
                "session": self.is_session, "pid": self.pid, "command": command, "command_cut": cut,
                "started": self.started, "time_limit": self.time_limit, "demand": dict(self.demand),
                "gpus": list(self.devices.get(GPU, ()))}


# What a command line may cost a view of everyone's tasks (status, watch, ps --all, the queue):
# 250 tasks of 60 KiB command lines made one status 15.6 MB, sent to every viewer. Its owner
# still gets it whole from `governor ps`.
SHOWN_COMMAND_CHARS = 256


def bounded_command(command: tuple[str, ...], chars: int | None) -> tuple[list[str], int]:
    """``command`` cut to at most ``chars`` characters in all (the item cut short ends with
    ``…``, later items are left out), and how many characters were left out; whole for None."""
    total = sum(map(len, command))
    if chars is None or total <= chars:
        return list(command), 0
    shown, left = [], chars
    for item in command:
        if len(item) > left:
            shown.append(item[:left] + "…")
            left = 0
            break
        shown.append(item)
        left -= len(item)
    return shown, total - (chars - left)


class Tasks:
    """Running tasks by id, with per-group views. Insertion order is launch order.

    Each group's summed demand D_g is kept per group and recomputed only for a group whose tasks
    changed, so a refill on a host of thousands of tasks does not sum them all again; so is the
    sum of its launched tasks' declarations, which settle counts them holding; so are the
    counts a launch, a refill and an exit ask for (launches per uid, login sessions, tasks below
    governor's root per group).
    """

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._groups: dict[str, dict[str, Task]] = {}
        self._sums: dict[str, dict[str, float]] = {}
        self._launched_sums: dict[str, dict[str, float]] = {}  # as _sums, of the launched tasks alone
        self._launched: Counter[int] = Counter()  # uid → tasks it launched (not sessions)
        self._logins: dict[str, Task] = {}
        self._sessions: dict[str, Task] = {}  # sessions and login sessions
        self._inside: Counter[str] = Counter()  # group → its tasks below governor's root
        self._holders: dict[Slot, str] = {}  # a device → the task holding it
        # A device → the ended task that held it, until no other process holds its node open
        self._draining: dict[Slot, str] = {}

    def add(self, task: Task) -> None:
        self._tasks[task.id] = task
        if not task.is_session:
            self._launched[task.uid] += 1
        if task.is_session:
            self._sessions[task.id] = task
        if task.is_login:
            self._logins[task.id] = task
        else:
            self._inside[task.group] += 1
        self._groups.setdefault(task.group, {})[task.id] = task
        self._forget_sums(task.group)
        self._holders.update(dict.fromkeys(task.held(), task.id))

    def remove(self, task_id: str) -> Task | None:
        task = self._tasks.pop(task_id, None)
        if task is None:
            return None
        _drop(self._launched, task.uid, not task.is_session)
        self._sessions.pop(task_id, None)
        if self._logins.pop(task_id, None) is None:
            _drop(self._inside, task.group, True)
        members = self._groups[task.group]
        del members[task_id]
        if not members:
            del self._groups[task.group]
        self._forget_sums(task.group)
        for slot in task.held():
            self._holders.pop(slot, None)
            self._draining[slot] = task.id
        return task

    def update(self, task: Task) -> None:
        """Put ``task`` in place of the running task of its id (KeyError: none), in launch order
        (its devices re-mapped)."""
        for slot in self._tasks[task.id].held():
            if self._holders.get(slot) == task.id:  # not one another task, updated first, holds now
                del self._holders[slot]
        for table in (self._tasks, self._groups[task.group], self._sessions, self._logins):
            if task.id in table:
                table[task.id] = task
        self._forget_sums(task.group)  # its demand may have changed (a session's caps)
        self._holders.update(dict.fromkeys(task.held(), task.id))

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    def launched_by(self, uid: int) -> int:
        """How many running tasks ``uid`` launched (sessions not counted)."""
        return self._launched[uid]

    def holders(self) -> dict[Slot, str]:
        """A device ``(entry, index)`` → the id of the running task holding it (shared: do not modify)."""
        return self._holders

    def free(self, entry: str, count: int) -> list[int]:
        """The indices among ``range(count)`` of class ``entry`` no running task holds and none
        drains, lowest first."""
        return [index for index in range(count)
                if (entry, index) not in self._holders and (entry, index) not in self._draining]

    def draining(self) -> dict[Slot, str]:
        """A device ``(entry, index)`` → the id of the ended task that held it, for each device not
        free yet: some process may still hold its node open (shared: do not modify)."""
        return self._draining

    def drain(self, slot: Slot) -> None:
        """Hold device ``slot`` back until a look finds no process holding its node: a daemon that
        starts does not know which of the free devices a task left while none ran (ended task "")."""
        if slot not in self._holders:
            self._draining.setdefault(slot, "")

    def redrain(self, draining: Mapping[Slot, str]) -> None:
        """Put ``draining`` (a device → the ended task that held it) in place of the draining
        devices: a reload renumbered them. A device a running task holds is left out."""
        renumbered = {slot: ended for slot, ended in draining.items() if slot not in self._holders}
        self._draining.clear()  # in place: draining() hands out this very table
        self._draining.update(renumbered)

    def drained(self, slot: Slot) -> None:
        """Device ``slot`` is free: no process but those of its new holder may hold its node."""
        self._draining.pop(slot, None)

    def sessions(self) -> list[Task]:
        """The sessions (login sessions too), in the order they started."""
        return list(self._sessions.values())

    def logins(self) -> list[Task]:
        """The login sessions, in the order they started."""
        return list(self._logins.values())

    def emptied(self, task: Task) -> list[str]:
        """The group cgroups to remove after ``task`` (removed already): none while its group
        has a task below governor's root, else its group's and each ancestor's, innermost
        first (removing one that holds another group's cgroups fails harmlessly: ``EBUSY``)."""
        if task.group in self._inside:
            return []
        parts = (task.place or task.group).split("/")
        return ["/".join(parts[:depth]) for depth in range(len(parts), 0, -1)]

    def places(self) -> dict[str, str]:
        """Group → its cgroup (:attr:`Task.place`), for the groups with a task below governor's root."""
        return {group: next(t.place or group for t in self._groups[group].values() if not t.is_login)
                for group in self._inside}

    def inside(self) -> KeysView[str]:
        """The groups with a task below governor's root (a group of login sessions alone has
        no cgroup there)."""
        return self._inside.keys()

    def groups(self) -> dict[str, list[Task]]:
        """Group → its tasks, for groups with at least one task, in the order the groups got
        their first task."""
        return {group: list(members.values()) for group, members in self._groups.items()}

    def in_group(self, group: str) -> list[Task]:
        """``group``'s running tasks, sessions included, in the order they were added."""
        return list(self._groups.get(group, {}).values())

    def counts(self) -> dict[str, int]:
        """Group → how many tasks it runs."""
        return {group: len(members) for group, members in self._groups.items()}

    def demands(self) -> dict[str, dict[str, float]]:
        """Group → D_g, the sum of its tasks' declared demands, one session per user
        (:func:`one_session_each`) (shared: do not modify)."""
        for group in self._groups.keys() - self._sums.keys():
            total: dict[str, float] = {}
            for task in one_session_each(self._groups[group].values()):
                for resource, amount in task.demand.items():
                    total[resource] = total.get(resource, 0.0) + amount
            self._sums[group] = total
        return {group: self._sums[group] for group in self._groups}

    def launched_demands(self) -> dict[str, dict[str, float]]:
        """Group → the sum of its launched tasks' declared demands (cores, bytes, bytes/s,
        devices), sessions left out, for the groups whose launched tasks declare something
        (shared: do not modify). What they hold in the admission count is their declaration,
        whatever they use, so settle sums it only for a group whose tasks changed; a session
        holds what it uses (:func:`governor.core.vocabulary.reserved_by_group`)."""
        for group in self._groups.keys() - self._launched_sums.keys():
            total: dict[str, float] = {}
            for task in self._groups[group].values():
                if not task.is_session:
                    for resource, amount in task.demand.items():
                        total[resource] = total.get(resource, 0.0) + float(amount)
            self._launched_sums[group] = total
        return {group: total for group, total in self._launched_sums.items() if total}

    def _forget_sums(self, group: str) -> None:
        self._sums.pop(group, None)
        self._launched_sums.pop(group, None)


def one_session_each(tasks: Iterable[Task]) -> list[Task]:
    """``tasks`` less each login session whose user also has a session cgroup in its group: a
    user's session is one demand per group wherever its processes live (logind's slice or
    governor's session cgroup), counted once, where governor's root holds it."""
    tasks = list(tasks)
    inside = {(task.uid, task.group) for task in tasks if task.kind is Kind.SESSION}
    return [task for task in tasks if not (task.is_login and (task.uid, task.group) in inside)]


def _drop(counter: Counter, key, counted: bool) -> None:
    if counted:
        counter[key] -= 1
        if not counter[key]:
            del counter[key]
