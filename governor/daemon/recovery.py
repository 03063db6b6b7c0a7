"""Recovery: killing the daemon never kills a task. At start it takes back every task whose
record and populated cgroup it finds (caps planned again from the record and applied),
forgets the rest, and deals with task cgroups that have no record."""

from __future__ import annotations

import logging

from governor.cgroups.hierarchy import Hierarchy
from governor.daemon.exits import Exits
from governor.daemon.journal import Journal
from governor.daemon.policy import Policy
from governor.daemon.settle import Settle
from governor.daemon.tree import Tree
from governor.errors import CgroupError
from governor.config_groups import MAX_DEPTH
from governor.kinds import Kind, is_task_name, task_in
from governor.state import Tasks, TaskStore

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

    def readopt(self) -> None:
        """Take back every task whose record and populated cgroup survive a restart; their
        caps are planned again from their records under the config in force and applied
        (device rules included: the inventory may have changed while the daemon was down)."""
        self.store.prepare()
        records, problems = self.store.load_all()
        for problem in problems:
            self.journal.event("error", problem, logging.WARNING)
        for task in records:
            if task.is_login and self.hierarchy.slices is None:
                self.store.delete(task.id)  # not a systemd host (any more): nothing to take back
                continue
            self.tasks.add(task)
        for task in list(self.tasks):
            if self.exits.alive(task):
                self.journal.event("task_started", f"{task.label} re-adopted: pid {task.pid}, group {task.group}")
                self.exits.follow(task)
            else:
                self.exits.forget(task)
        # Their caps planned again under the config in force (its inventory's device rules), in
        # the one plan with the root's and the groups'; refusals are error events.
        self.settle.now("re-adoption", full=True)
        self._clean_unrecorded({t.cgroup for t in records})

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
