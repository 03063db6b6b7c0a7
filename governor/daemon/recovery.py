"""Recovery: killing the daemon never kills a task. At start it takes back every task whose
record and populated cgroup it finds (caps planned again from the record under the config in
force and applied), forgets the rest, and deals with task cgroups that have no record.

Re-adoption is exact (DESIGN.md §4): a task's GPUs are found again by identity in the inventory
in force, or the daemon does not start; its processes are read from every hierarchy its
cgroup is in, and put into a hierarchy that joined since (v1's ``devices``, a daemon restarted
to govern GPUs), so that what governs them there (device rules) holds them."""

from __future__ import annotations

import logging

from governor.cgroups.hierarchy import Hierarchy
from governor.daemon import gpu_places
from governor.daemon.exits import Exits
from governor.daemon.inbox import Reload
from governor.daemon.journal import Journal
from governor.daemon.policy import Policy
from governor.daemon.settle import Settle
from governor.daemon.tree import Tree
from governor.errors import CgroupError, GovernorError
from governor.config.groups import MAX_DEPTH
from governor.config.kinds import Kind, is_task_name, task_in
from governor.core.state import Task, Tasks
from governor.host.task_store import TaskStore

__all__ = ["Recovery"]

log = logging.getLogger("governor.daemon")


class Recovery:
    """Re-adoption at start.

    Args:
        hierarchy, tree: governor's cgroups, and the thread that removes them.
        store: the task records; tasks: the running tasks (filled here); policy: the config
        in force; exits: follows what is taken back and forgets what ended; journal: events;
        settle: plans and applies every cgroup's limits once the tasks are back.
    """

    def __init__(self, *, hierarchy: Hierarchy, tree: Tree, store: TaskStore, tasks: Tasks, policy: Policy,
                 exits: Exits, journal: Journal, settle: Settle):
        self.hierarchy = hierarchy
        self.tree = tree
        self.store = store
        self.tasks = tasks
        self.policy = policy
        self.exits = exits
        self.journal = journal
        self.settle = settle

    def load(self) -> list[Task]:
        """The tasks whose records survive, holding their GPUs by index in the inventory in
        force, found by identity (:func:`~governor.daemon.gpu_places.readopted`); a record
        whose GPUs' identities changed (or that held indices, written before identities) is
        written again. The record of a
        task whose GPUs cannot be given back is removed when its cgroup holds no process (it
        ended while no daemon ran); to tell, that task's processes are put into every hierarchy
        of its cgroup (:meth:`_rejoin`): no other cgroup is changed.

        Raises:
            GovernorError: the inventory lacks a GPU a live task holds, or two tasks' GPUs are
                found at one index (the message says which and what to do): the daemon must
                not start.
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
                task = gpu_places.readopted(self.policy.config, self.policy.gpus, record)
            except GovernorError:
                if self._lives(record):
                    raise
                self._forget_dead(record, "holding GPUs this config cannot give it back")
                continue
            both = gpu_places.clash([*tasks, task])
            if both is not None:  # one of the two may have ended while no daemon ran
                index, earlier, _ = both
                dead = next((t for t in (task, earlier) if not self._lives(t)), None)
                if dead is None:
                    raise GovernorError(f"{self.policy.config.file}: capacity.gpus: tasks {earlier.id} and {task.id} "
                                        f"would both hold GPU {index}: this config cannot tell their GPUs apart; the "
                                        "daemon does not start. Stop one of them (governor stop), then change the "
                                        "config")
                self._forget_dead(dead, f"holding GPU {index}, which task {(earlier if dead is task else task).id} "
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
            if task.gpu_identities == record.gpu_identities:
                continue
            if not record.gpu_identities:
                held = ", ".join(f"GPU {index} ({identity})" for index, identity in zip(task.gpus, task.gpu_identities))
                self.journal.event("record", f"{task.label}: its record holds GPUs by index (an older governor's): "
                                             f"taken as {held} of capacity.gpus, and written again by identity")
            try:
                self.store.save(task)
            except GovernorError as error:
                self.journal.event("error", f"{task.label}: its GPUs' identities are not written: {error}",
                                   logging.ERROR)
        return tasks

    def readopt(self, tasks: list[Task] | None = None) -> None:
        """Take back every task whose record and populated cgroup survive a restart (``tasks``:
        what :meth:`load` returned, else it is called now); their processes are put into every
        hierarchy of their cgroup (v1: one that joined since), and their caps are planned again
        under the config in force and applied (device rules included: the inventory may have
        changed while the daemon was down).

        Raises:
            GovernorError: from :meth:`load`.
        """
        tasks = self.load() if tasks is None else tasks
        for task in tasks:
            self.tasks.add(task)
        for task in list(self.tasks):
            self._rejoin(task)  # first: v1 tells whether a task lives from one hierarchy alone
            if self.exits.alive(task):
                self.journal.event("task_started", f"{task.label} re-adopted: pid {task.pid}, group {task.group}")
                self.exits.follow(task)
            else:
                self.exits.forget(task)
        # Their caps planned again under the config in force (its inventory's device rules), in
        # the one plan with the root's and the groups', once their processes are in every
        # hierarchy (_rejoin); refusals are error events.
        self.settle.now(Reload("re-adoption", full=True))
        self._clean_unrecorded({t.cgroup for t in tasks})

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
            moved = self.hierarchy.driver.rejoin(task.cgroup, leave=lambda pid: self.tree.foreign_of(pid) is not None)
        except CgroupError as error:
            if not error.vanished:  # gone: the task ended, and is forgotten next
                self.journal.event("error", f"re-adopting {task.label}: {error}", logging.ERROR)
            return
        if moved:
            self.journal.event("rejoin", f"{task.label}: pid(s) {', '.join(map(str, moved[:5]))} put into the "
                                         "hierarchies of its cgroup that lacked them")

    def _clean_unrecorded(self, recorded: set[str]) -> None:
        """Task cgroups with no record: an empty one (a daemon killed between making it and
        saving its record) is removed, and so is a group left with nothing below it; one with
        processes (the state directory was lost) cannot be re-adopted without its declared
        demand, so it is named in the log rather than governed silently wrong, and its id is
        never given to a new task."""
        driver = self.hierarchy.driver
        try:
            cgroups, groups = _walk(driver)
        except CgroupError:
            return
        empty = []
        for rel in sorted(set(cgroups) - recorded):
            try:
                pids = driver.pids(rel)
            except CgroupError as error:
                log.warning("cannot clean up cgroup %s: %s", rel, error)
                continue
            if not pids:
                empty.append(rel)
                self.journal.event("cleanup", f"removed cgroup {rel}: no record and no process (a daemon killed "
                                              "while starting it)", logging.WARNING)
                continue
            self.journal.event("error", f"cgroup {rel} holds pids {pids[:5]} but has no task record in "
                                        f"{self.store.directory}: left ungoverned; its processes keep running",
                               logging.WARNING)
            kind, task_id = task_in(rel)
            if kind is Kind.TASK:
                self.store.skip_past(int(task_id))
        self.tree.remove(empty)
        governed = {t.place or t.group for t in self.tasks if not t.is_login}
        in_use = {"/".join(place.split("/")[:depth]) for place in governed for depth in range(1, place.count("/") + 2)}
        # Deepest first (after the empty task cgroups, on the same thread), so that a department
        # goes once its labs have; one that still holds something stays (EBUSY, not an error).
        for group in sorted(set(groups) - in_use, key=lambda rel: -rel.count("/")):
            self.tree.remove([], groups=[group])


def _walk(driver) -> tuple[list[str], list[str]]:
    """Every task cgroup below governor's root and every group cgroup, at any depth of the
    group tree (no deeper than a tree may be)."""
    tasks, groups = [], []
    level = [""]
    for _ in range(MAX_DEPTH):
        below = []
        for parent in level:
            for name in driver.children(parent):
                rel = f"{parent}/{name}" if parent else name
                if parent and is_task_name(name):
                    tasks.append(rel)
                else:
                    groups.append(rel)
                    below.append(rel)
        level = below
    return tasks, groups
