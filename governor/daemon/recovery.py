"""Recovery: killing the daemon never kills a task. At start it takes back every task whose
record and populated cgroup it finds (caps planned again from the record under the config in
force and applied), forgets the rest, and deals with task cgroups that have no record: a
populated one is governed as an unrecorded task (its record unreadable), an empty one removed,
and no new task gets the id of either. Each reconcile pass removes the empty task cgroups no
task has (:meth:`Recovery.remove_strays`), and a daemon that stops with no task left clears its
tree (:meth:`Recovery.clear`).

Re-adoption is exact (DESIGN.md §4): a task's devices, of every class, are found again by
identity in the inventories in force, or the daemon does not start; its processes are read from every hierarchy its
cgroup is in, and put into a hierarchy that joined since (v1's ``devices``, a daemon restarted
to govern GPUs), so that what governs them there (device rules) holds them."""

from __future__ import annotations

import logging
import pwd
import time
from collections.abc import Callable, Iterable

from governor.cgroups.hierarchy import Hierarchy
from governor.daemon import device_places
from governor.daemon.exits import Exits
from governor.daemon.inbox import Reload
from governor.daemon.journal import Journal, vector
from governor.daemon.policy import Policy
from governor.daemon.settle import Settle
from governor.daemon.tree import Tree
from governor.daemon.waiting import Queue
from governor.errors import CgroupError, GovernorError
from governor.config.groups import MAX_DEPTH
from governor.config.kinds import Kind, is_task_name, task_in
from governor.core.state import Task, Tasks
from governor.host.openfiles import owner_uid
from governor.host.task_store import TaskStore

__all__ = ["Recovery"]

log = logging.getLogger("governor.daemon")
# How ps names a task found without its record, and its user where no process tells it.
UNRECORDED_NAME = "(unrecorded)"
UNKNOWN_USER = "unknown"


def _user_name(uid: int) -> str:
    """``uid``'s name in the user database, else its number."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class Recovery:
    """Re-adoption at start.

    Args:
        hierarchy, tree: governor's cgroups, and the thread that removes them (its effector
            re-joins and clears).
        store: the task records; tasks: the running tasks (filled here); policy: the config
        in force; exits: follows what is taken back and forgets what ended; journal: events;
        settle: plans and applies every cgroup's limits once the tasks are back.
        queue: the launches in flight (their cgroups are not strays);
        owner: a pid → the uid it runs as, None when it is gone (:func:`~governor.host.openfiles.owner_uid`).
        session_caps: gives the sessions taken back the ``[sessions]`` in force, named for the
            log (:meth:`SessionCaps.follow <governor.daemon.session_caps.SessionCaps.follow>`).
    """

    def __init__(self, *, hierarchy: Hierarchy, tree: Tree, store: TaskStore, tasks: Tasks, policy: Policy,
                 exits: Exits, journal: Journal, settle: Settle, queue: Queue,
                 owner: Callable[[int], int | None] = owner_uid,
                 session_caps: Callable[[str], bool] = lambda trigger: False):
        self.owner = owner
        self.session_caps = session_caps
        self.queue = queue
        self.hierarchy = hierarchy
        self.tree = tree
        self.effector = tree.effector
        self.store = store
        self.tasks = tasks
        self.policy = policy
        self.exits = exits
        self.journal = journal
        self.settle = settle

    def load(self) -> list[Task]:
        """The tasks whose records survive, holding their devices by index in the inventories
        in force, found by identity (:func:`~governor.daemon.device_places.readopted`); a record
        whose devices' identities changed (or that held a GPU's indices, written before
        identities) is written again. The record of a task whose devices cannot be given back
        is removed when its cgroup holds no process (it ended while no daemon ran); to tell,
        that task's processes are put into every hierarchy of its cgroup (:meth:`_rejoin`): no
        other cgroup is changed.

        Raises:
            GovernorError: an inventory lacks a device a live task holds, or two tasks' devices
                are found at one index (the message says which and what to do): the daemon
                must not start.
        """
        self.store.prepare()
        records, problems = self.store.load_all()
        for problem in problems:
            self.journal.event("error", problem, logging.WARNING)
        kept, tasks = [], []
        for record in records:
            if record.is_login and self.hierarchy.slices is None:
                continue
            try:
                task = device_places.readopted(self.policy.config, self.policy.devices, record)
            except GovernorError:
                if self._lives(record):
                    raise
                self._forget_dead(record, f"holding {_nouns(record)} this config cannot give it back")
                continue
            both = device_places.clash([*tasks, task])
            if both is not None:  # one of the two may have ended while no daemon ran
                (entry, index), earlier, _ = both
                key, noun = device_places.named(entry)
                dead = next((t for t in (task, earlier) if not self._lives(t)), None)
                if dead is None:
                    raise GovernorError(f"{self.policy.config.file}: {key}: tasks {earlier.id} and {task.id} would "
                                        f"both hold {noun} {index}: this config cannot tell their {noun}s apart; the "
                                        "daemon does not start. Stop one of them (governor stop), then change the "
                                        "config")
                self._forget_dead(dead, f"holding {noun} {index}, which task {(earlier if dead is task else task).id} "
                                        "holds too under this config")
                if dead is task:
                    continue
                at = tasks.index(earlier)
                del kept[at], tasks[at]
            kept.append(record)
            tasks.append(task)
        for task in records:
            if task.is_login and self.hierarchy.slices is None:
                self.store.delete(task.id)  # not a systemd host (any more): nothing to take back
        for task, record in zip(tasks, kept):
            if task.device_identities == record.device_identities:
                continue
            for entry in record.devices.keys() - record.device_identities.keys():
                key, noun = device_places.named(entry)
                held = ", ".join(f"{noun} {index} ({identity})"
                                 for index, identity in zip(task.devices[entry], task.device_identities[entry]))
                self.journal.event("record", f"{task.label}: its record holds {noun}s by index (an older governor's): "
                                             f"taken as {held} of {key}, and written again by identity")
            try:
                self.store.save(task)
            except GovernorError as error:
                self.journal.event("error", f"{task.label}: its {_nouns(task)}' identities are not written: {error}",
                                   logging.ERROR)
        return tasks

    def readopt(self, tasks: list[Task] | None = None) -> None:
        """Take back every task whose record and populated cgroup survive a restart (``tasks``:
        what :meth:`load` returned, else it is called now), and every populated task cgroup
        whose record cannot be read, as an unrecorded task (:meth:`_unrecorded`); their
        processes are put into every hierarchy of their cgroup (v1: one that joined since),
        and their caps are planned again under the config in force and applied (device rules
        included: the inventory may have changed while the daemon was down). No new task gets
        the id of a task cgroup in the tree.

        Raises:
            GovernorError: from :meth:`load`.
        """
        tasks = self.load() if tasks is None else tasks
        for task in tasks:
            self.tasks.add(task)
        try:
            cgroups, groups = _walk(self.hierarchy)
        except CgroupError:
            cgroups, groups = [], []
        for rel in cgroups:
            kind, task_id = task_in(rel)
            if kind is Kind.TASK:
                self.store.skip_past(int(task_id))
        empty = self._unrecorded(sorted(set(cgroups) - {t.cgroup for t in tasks}))
        for task in list(self.tasks):
            self._rejoin(task)  # first: v1 tells whether a task lives from one hierarchy alone
            if self.exits.alive(task):
                how = " (unrecorded: governed at its cgroup's memory cap)" if task.unrecorded else ""
                self.journal.event("task_started", f"{task.label} re-adopted{how}: group {task.group}",
                                   detail=f"pid {task.pid}")
                self.exits.follow(task)
            else:  # it ended while no daemon ran: recorded as any end (ps --ended, history), found now
                self.exits.check([task.id], "exit, found at the restart")
        # Their caps planned again under the config in force (its inventory's device rules, its
        # [sessions]), in the one plan with the root's and the groups', once their processes are
        # in every hierarchy (_rejoin); refusals are error events.
        self.session_caps("restart")
        self.settle.now(Reload("re-adoption", full=True))
        self.tree.remove(empty)
        self._remove_unused(groups)

    def remove_strays(self) -> None:
        """Remove the empty task cgroups that no running task and no launch in flight has (a
        reconcile pass): a start undone while its process was still in its cgroup (its client
        killed during the move) left one that nothing would remove, and the daemon's root with
        it at its stop (``EBUSY``). The tree is read on the cgroup thread; what it found is
        checked on the loop against the running tasks and the launches in flight, as they are
        then, and removed with the groups it leaves unused."""
        hierarchy = self.hierarchy
        known = {*(task.id for task in self.tasks), *self.queue}  # cheaper reads; checked again after

        def find() -> list[str]:
            empty = []
            for rel in _walk(hierarchy)[0]:
                kind, task_id = task_in(rel)
                try:
                    if kind is Kind.TASK and task_id not in known and not hierarchy.pids(rel):
                        empty.append(rel)
                except CgroupError:
                    pass  # gone meanwhile, or unreadable: the next pass looks again
            return empty

        def then(found: list[str] | GovernorError) -> None:
            if isinstance(found, GovernorError):
                log.warning("cannot look for stray task cgroups: %s", found)
                return
            known = {*(task.id for task in self.tasks), *self.queue}
            strays = [rel for rel in found if task_in(rel)[1] not in known and not self.tree.moving_into(rel)]
            if not strays:
                return
            self.journal.event("cleanup", f"removed {len(strays)} empty task cgroup(s) no task has: "
                                          f"{', '.join(strays[:5])}", logging.WARNING)
            self.tree.remove(strays)
            self._remove_unused({rel.rsplit("/", 1)[0] for rel in strays})

        self.tree.run(find, then)

    def clear(self) -> None:
        """Remove every empty cgroup below governor's root, deepest first, on this thread: the
        daemon stops with no task left (its cgroup thread is done), and its root goes next,
        whether a reconcile pass removed the strays yet or not. One that holds a process
        stays (it is logged when the root then cannot go)."""
        try:
            cgroups, groups = _walk(self.hierarchy)
        except CgroupError:
            return
        for rel in sorted([*cgroups, *groups], key=lambda rel: -rel.count("/")):
            try:
                self.effector.remove(rel)
                self.effector.forget(rel)
            except CgroupError as error:
                log.debug("cgroup %s stays: %s", rel, error)

    def _remove_unused(self, groups: Iterable[str]) -> None:
        """Remove each of the group cgroups ``groups`` (and their ancestors) that no running
        task and no launch in flight is in."""
        governed = {t.place or t.group for t in (*self.tasks, *(e.task for e in self.queue.values()))
                    if not t.is_login}
        in_use = {"/".join(place.split("/")[:depth]) for place in governed for depth in range(1, place.count("/") + 2)}
        below = {"/".join(rel.split("/")[:depth]) for rel in groups for depth in range(1, rel.count("/") + 2)}
        # Deepest first (after the empty task cgroups, on the same thread), so that a department
        # goes once its labs have; one that still holds something stays (EBUSY, not an error).
        for group in sorted(below - in_use, key=lambda rel: -rel.count("/")):
            self.tree.remove([], groups=[group])

    def _forget_dead(self, task: Task, holding: str) -> None:
        """Remove the record of ``task``, which ended while no daemon ran (its cgroup, empty, is
        removed with the others that have no record), and log it."""
        self.store.delete(task.id)
        self.journal.event("cleanup", f"{task.label} ended while no daemon ran: its record, {holding}, is removed",
                           logging.WARNING)

    def _lives(self, task: Task) -> bool:
        """Whether ``task``'s cgroup holds a process, once its processes are in every hierarchy
        of it (:meth:`_rejoin`, as :meth:`readopt` asks)."""
        self._rejoin(task)
        return self.exits.alive(task)

    def _rejoin(self, task: Task) -> None:
        """Put ``task``'s processes into each hierarchy of its cgroup that lacks them: one that
        joined since (v1's devices), or one a move cut short by a ``kill -9`` of the daemon
        did not reach. On the event loop, though it takes the kernel's ``cgroup_mutex``: at
        start, before any request is served, and before its device rules are written there.
        One in a foreign subtree in some hierarchy (Slurm adopted it since) is left there."""
        if task.is_login:
            return  # systemd's slice: one hierarchy, not governor's to join
        try:
            moved = self.effector.rejoin(task.cgroup, leave=lambda pid: self.tree.foreign_of(pid) is not None)
        except CgroupError as error:
            if not error.vanished:  # gone: the task ended, and is forgotten next
                self.journal.event("error", f"re-adopting {task.label}: {error}", logging.ERROR)
            return
        if moved:
            self.journal.event("rejoin", f"{task.label}: {len(moved)} process(es) put into the hierarchies of its "
                                         "cgroup that lacked them", detail=f"pids {', '.join(map(str, moved[:5]))}")

    def _unrecorded(self, cgroups: list[str]) -> list[str]:
        """Task cgroups with no record: a populated task's is taken as an unrecorded task (its
        record was set aside as bad, or lost), added to the running tasks: it counts in
        admission at its cgroup's memory cap, read from the kernel, and shows in ``ps`` until
        it ends. The empty ones (a daemon killed between making one and saving its record) are
        returned, to be removed; a session's with processes is named in the log and left
        ungoverned (the sessions' rescan governs its user's processes again)."""
        hierarchy = self.hierarchy
        empty = []
        for rel in cgroups:
            try:
                pids = hierarchy.pids(rel)
                kind, task_id = task_in(rel)
                if pids and kind is Kind.TASK:
                    self.tasks.add(self._as_unrecorded(rel, task_id, pids))
                    continue
            except CgroupError as error:
                log.warning("cannot clean up cgroup %s: %s", rel, error)
                continue
            if not pids:
                empty.append(rel)
                self.journal.event("cleanup", f"removed cgroup {rel}: no record and no process (a daemon killed "
                                              "while starting it)", logging.WARNING)
                continue
            self.journal.event("error", f"cgroup {rel} holds {len(pids)} process(es) but has no record in "
                                        f"{self.store.directory}: left ungoverned; its processes keep running",
                               logging.WARNING, detail=f"pids {', '.join(map(str, pids[:5]))}")
        return empty

    def _as_unrecorded(self, rel: str, task_id: str, pids: list[int]) -> Task:
        """The unrecorded task of populated task cgroup ``rel``: its group from the path, its
        first process as its pid, the owner of its processes as its user (``unknown`` where
        none can be read), its cgroup's memory cap as its declared memory (``[defaults.task]``
        where the cap is ``max``, and for the rest of its demand: what admission and the
        filling count it as); named ``(unrecorded)``, with no command.

        Raises:
            CgroupError: its memory cap cannot be read (``vanished``: it is gone).
        """
        place = rel.rsplit("/", 1)[0]
        cap = self.hierarchy.memory_cap_bytes(rel)
        uid = next((owner for owner in map(self.owner, pids) if owner is not None), None)
        user = UNKNOWN_USER if uid is None else _user_name(uid)
        task = Task(task_id, place.rsplit("/", 1)[-1], pids[0], -1 if uid is None else uid, user, (),
                    {**self.policy.config.task_demand(), **({} if cap is None else {"memory": float(cap)})},
                    time.time(), UNRECORDED_NAME, place=place,
                    unrecorded=True)
        self.journal.event("error", f"{task.label} has no readable record in {self.store.directory}: governed "
                                    f"unrecorded until it ends, user {user}, counted as {vector(task.demand)} "
                                    f"(memory: {'none set, the default' if cap is None else 'its cgroup'}'s cap)",
                           logging.WARNING)
        return task


def _walk(hierarchy) -> tuple[list[str], list[str]]:
    """Every task cgroup below governor's root and every group cgroup, at any depth of the
    group tree (no deeper than a tree may be)."""
    tasks, groups = [], []
    level = [""]
    for _ in range(MAX_DEPTH):
        below = []
        for parent in level:
            for name in hierarchy.children(parent):
                rel = f"{parent}/{name}" if parent else name
                if parent and is_task_name(name):
                    tasks.append(rel)
                else:
                    groups.append(rel)
                    below.append(rel)
        level = below
    return tasks, groups


def _nouns(task: Task) -> str:
    """The classes of devices ``task`` holds, as messages name them: ``GPUs``, ``GPUs and FPGAs``."""
    held = {**task.devices, **task.device_identities}
    return " and ".join(f"{device_places.named(entry)[1]}s" for entry in held) or "devices"
