"""Exits: how tasks end. The exit watcher (inotify on ``cgroup.events``, or a pidfd where the
kernel has no such file) says which task to look at; a task whose cgroup holds no process is
forgotten (its cgroup removed on the cgroup thread, its record deleted, its end kept for ``ps
--ended``), and settle is asked to refill. ``governor stop`` and time limits end a task here."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import time
from collections.abc import Iterable

from governor.host.accounting import (ENDED_KEPT, OOM_KILL, STOP, TIME_LIMIT, Ended, ended_from_saved, exit_words,
                                      reason_of, why_ended)
from governor.cgroups.hierarchy import Hierarchy
from governor.cgroups.stats import CgroupStats
from governor.daemon.inbox import Exit, Inbox
from governor.daemon.history import end_entry
from governor.daemon.journal import Journal
from governor.daemon.notices import described
from governor.daemon.observation import Observation
from governor.daemon.policy import Policy
from governor.daemon.records import Records
from governor.daemon.tree import Tree
from governor.errors import CgroupError, GovernorError
from governor.host.events import ExitWatcher
from governor.host.exit_status import exit_status, kernel_keeps_exit_status
from governor.core.kept_records import KeptRecords
from governor.core.queue import Entry
from governor.core.state import Task, Tasks

__all__ = ["Exits"]

log = logging.getLogger("governor.daemon")
# How often, and how many times, to ask how an ended task's launched process exited (its
# parent reaps it a moment after the task's cgroup empties).
EXIT_STATUS_RETRY_S = 0.25
EXIT_STATUS_TRIES = 8
# Pidfds held for exit statuses, at most this share of the open-file limit: every cgroupfs
# read needs a descriptor too, and a daemon out of them cannot tell an ended task from a live
# one (a benchmark of 10,000 tasks under a limit of 20,000 stalled so: a v1 exit watch and an
# exit-status pidfd per task). Past it a task's exit status is unknown.
EXIT_STATUS_FD_SHARE = 4
# Sessions that ended sooner than this after they started are logged, not kept for ps --ended.
SHORT_SESSION_S = 10.0
# How long `governor stop` waits for a killed task's processes to be gone before it answers
# with those left: SIGKILL takes effect when a process next runs in the kernel, at once for
# most; one freeing gigabytes, or asleep uninterruptibly on a dead NFS server, takes longer.
STOP_WAIT_S = 5.0
# Between two looks: doubling from the first to the last (most tasks are gone at the first).
STOP_LOOKS_S = (0.005, 0.2)
# A task whose watched pid exited and none of whose processes could be watched next (each ended
# between the look that found its cgroup populated and the listing: a killed tree's last
# children) is looked at again after the first delay, then after twice that while the delay is
# at most the second (7 looks, the last ~1.3 s after the first); nothing else would wake the
# daemon for it before the reconcile pass, seconds later (CI once recorded a 2 s time limit's
# end so, past 3 s). Processes only in cgroups below the task's (made by a root task) are never
# watched either: the looks end, and the reconcile pass finds their end.
REWATCH_LOOKS_S = (0.01, 1.0)


class Exits:
    """Watching, ending and forgetting tasks.

    Args:
        hierarchy, tree: governor's cgroups, and the thread that removes them (its effector
            kills and resets).
        policy, tasks, records: the config in force, the running tasks, their records.
        inbox: told when tasks end (settle refills); observation: what was measured of them.
        journal: events.

    Attributes:
        watcher: the exit watcher (:class:`~governor.host.events.ExitWatcher`), from
            :meth:`start`; None before (nothing is watched).
        ended: the last :data:`~governor.host.accounting.ENDED_KEPT` ended tasks, oldest first, a user's
            churn pushing out her own (kept across restarts: :meth:`restore_ended`, :meth:`save_ended`).
        stop_wait_s: how long :meth:`survivors` waits, seconds (:data:`STOP_WAIT_S`).
    """

    def __init__(self, *, hierarchy: Hierarchy, tree: Tree, policy: Policy, tasks: Tasks, records: Records,
                 inbox: Inbox, observation: Observation, journal: Journal):
        self.hierarchy = hierarchy
        self.tree = tree
        self.effector = tree.effector
        self.policy = policy
        self.tasks = tasks
        self.records = records
        self.inbox = inbox
        self.observation = observation
        self.journal = journal
        self.watcher: ExitWatcher | None = None
        self.ended: KeptRecords[Ended] = KeptRecords(ENDED_KEPT, lambda record: record.task.uid)
        self._ended_changed = False  # since the last save_ended
        self.stop_wait_s = STOP_WAIT_S
        self._ending: dict[str, tuple[str, str | None]] = {}  # tasks the daemon killed → why, by whom
        self._time_limits: dict[str, asyncio.TimerHandle] = {}  # task → the timer that ends it
        self._looks: dict[str, asyncio.TimerHandle] = {}  # task → the timer of its next look (_rewatch)
        self._pidfds: dict[str, int] = {}  # task → a pidfd of its launched process, for its exit status
        self._exit_statuses = kernel_keeps_exit_status()
        self._pidfds_kept = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // EXIT_STATUS_FD_SHARE

    def start(self) -> None:
        """Watch exits from now on (the event loop runs)."""
        self.watcher = ExitWatcher()

    async def follow_exits(self) -> None:
        """Look at each task the watcher names; exits reported together (a killed process
        tree, a job array ending) are one settle."""
        while True:
            first = await self.watcher.next()
            self.check([first, *self.watcher.pending()], "exit", since=time.perf_counter())

    def close(self) -> None:
        for timer in self._looks.values():  # none may look at a task once the watcher is closed
            timer.cancel()
        self._looks.clear()
        if self.watcher is not None:
            self.watcher.close()

    def follow(self, task: Task, entry: Entry | None = None) -> None:
        """Follow a task that started (or was re-adopted): watch its exit, arm its time limit
        and, from its launch's pidfd, learn how its launched process exits."""
        self.watch(task)
        self._arm_time_limit(task)
        if entry is not None and entry.pidfd is not None and self._exit_statuses \
                and len(self._pidfds) < self._pidfds_kept:
            try:
                self._pidfds[task.id] = os.dup(entry.pidfd)
            except OSError as error:
                log.warning("task %s: no exit status will be known: %s", task.id, error)

    def watch(self, task: Task) -> None:
        """Have the watcher wake the daemon when ``task``'s cgroup may have emptied."""
        if self.watcher is None:
            return
        try:
            self.watcher.watch(task.id, self.hierarchy.events_path(task.cgroup), task.pid)
        except OSError:
            self.check([task.id], "exit")  # gone already: the reconcile pass would find it too

    def check(self, task_ids: Iterable[str], trigger: str, *, since: float | None = None) -> None:
        """Forget each of ``task_ids`` whose cgroup holds no process any more, and ask settle
        to admit what now fits and refill once for all of them (``since``: when the exits were
        seen, ``time.perf_counter()``)."""
        ended = []
        for task_id in task_ids:
            task = self.tasks.get(task_id)
            if task is None:
                continue
            if self.alive(task):
                if trigger == "exit":
                    self._rewatch(task)
                if task.id in self._ending and trigger in ("exit", "reconcile"):
                    self._kill_again(task)
                continue
            stats = self._final_stats(task)
            ending = self._ending.get(task.id)
            reason, by = reason_of(task, ending, stats)
            pidfd = self._pidfds.pop(task.id, None)
            self.forget(task)
            record = Ended(task, time.time(), reason, by, stats)
            if not (task.is_session and record.ended - task.started < SHORT_SESSION_S):
                self.ended.append(record)  # (every `runuser …` is a session: short ones clutter ps --ended)
                self._ended_changed = True
            self._learn_exit_status(record, pidfd)
            # The daemon's own end is named so, however seen (a stop of two read (stop) and (exit)).
            self.journal.event("task_ended", record.line(trigger if ending is None else reason.replace("_", " ")))
            self.journal.record(end_entry(record))
            self._alert(record)
            ended.append(record)
        if ended:
            self.inbox.put(Exit(trigger, tuple(r.task for r in ended), tuple(r.stats for r in ended), since))

    def restore_ended(self) -> None:
        """Take back the ended records the last daemon saved (``ps --ended`` outlives a
        restart); a file or record that cannot be used is logged and left out. No new task
        gets the id of one (a lost ``next-id`` numbered from 1 again beside them)."""
        saved, problems = self.records.store.load_ended()
        for item in saved:  # (kept as they came: a longer file is trimmed as ended records are)
            try:
                self.ended.append(ended_from_saved(item))
            except ValueError as error:
                problems.append(f"an ended task's record left out: {error}")
        for record in self.ended:
            if record.task.id.isdigit():  # (a session's id is its user's)
                self.records.store.skip_past(int(record.task.id))
        for problem in problems:
            self.journal.event("error", problem, logging.WARNING)

    def save_ended(self) -> None:
        """Save the ended records if they changed since the last save (a reconcile pass, and
        when the daemon stops): a daemon killed meanwhile loses at most that much. A failure
        is logged and tried again at the next pass."""
        if not self._ended_changed:
            return
        try:
            self.records.store.save_ended([record.to_saved() for record in self.ended])
            self._ended_changed = False
        except GovernorError as error:
            self.journal.event("error", f"{error}; kept in memory and written again at the next reconcile",
                               logging.WARNING)

    def end(self, task: Task, reason: str, by: str | None) -> bool:
        """Kill ``task``'s whole process tree (v2 ``cgroup.kill``; v1 SIGKILL round by round)
        and remember why, for its ended record. Returns False if the kernel refused."""
        if not self.alive(task):  # it ended on its own first: its record must say so
            self.check([task.id], "exit")
            return True
        first = task.id not in self._ending
        self._ending.setdefault(task.id, (reason, by))
        if first:
            why = f"stopped by {by}" if reason == STOP else "its time limit is reached"
            self.journal.event("task_stopping", f"{task.label} ({task.name}) ends: {why}")
        try:
            self.effector.kill(task.cgroup)
        except CgroupError as error:
            if not error.vanished:
                self.journal.event("error", f"cannot end {task.label}: {error}", logging.ERROR)
                return False
        self.check([task.id], reason.replace("_", " "))
        return True

    async def survivors(self, task: Task) -> list[int]:
        """Wait for the processes of ``task`` (killed by :meth:`end`) to be gone, without
        holding the event loop, killing again what a kill round missed (v1: a child forked
        past it); then it is forgotten and its end recorded.

        Returns:
            The pids still in its cgroup after :attr:`stop_wait_s` seconds; empty once none is.

        Raises:
            CgroupError: its cgroup cannot be read, so whether they are gone is not known.
        """
        deadline = time.monotonic() + self.stop_wait_s
        pause = STOP_LOOKS_S[0]
        while self.alive(task) and time.monotonic() < deadline:
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(2 * pause, STOP_LOOKS_S[1])
            self._kill_again(task)
        try:
            left = self.hierarchy.pids(task.cgroup) if self.alive(task) else []
        except CgroupError as error:
            if not error.vanished:
                raise
            left = []
        if not left:
            self.check([task.id], STOP)
        return left

    def alive(self, task: Task) -> bool:
        """Whether the task's cgroup holds a process, or one is being moved in (a task starting,
        a session's process joining). A cgroup that is gone is not; a read that failed otherwise
        (EMFILE, EIO) proves nothing, so the task is kept for the next look."""
        if self.tree.moving_into(task.cgroup):
            return True
        try:
            return self.hierarchy.populated(task.cgroup)
        except CgroupError as error:
            if error.vanished:
                return False
            log.warning("task %s kept: cannot tell whether it still runs: %s", task.id, error)
            return True

    def forget(self, task: Task) -> None:
        """Drop ``task``: its watch, timer, pidfd, record and cgroup (a login session's slice
        is systemd's: only the limits governor set are reset), and its group's cgroup once
        nothing of the group is below governor's root."""
        if self.watcher is not None:
            self.watcher.unwatch(task.id)
        self._ending.pop(task.id, None)
        pidfd = self._pidfds.pop(task.id, None)
        if pidfd is not None:
            os.close(pidfd)
        for timers in (self._time_limits, self._looks):
            timer = timers.pop(task.id, None)
            if timer is not None:
                timer.cancel()
        self.tasks.remove(task.id)
        try:
            self.records.delete(task.id)
        except GovernorError as error:
            log.warning("%s", error)
        groups = self.tasks.emptied(task)
        self.observation.ended(task)
        self.observation.forget(task.cgroup)
        if groups:
            self.observation.forget(task.group)
        if task.is_login:
            try:
                self.effector.release_login(task.cgroup, self.policy.caps(task))
            except CgroupError as error:
                log.warning("cannot reset the limits of %s: %s", task.cgroup, error)
            self.tree.remove([], groups=groups)
        else:
            self.tree.remove([task.cgroup], groups=groups)

    def _arm_time_limit(self, task: Task) -> None:
        """End ``task`` when its time limit is reached (a re-adopted task: counted from its start)."""
        if task.time_limit is None:
            return
        delay = max(0.0, task.started + task.time_limit - time.time())
        self._time_limits[task.id] = asyncio.get_running_loop().call_later(delay, self._time_limit_reached, task.id)

    def _time_limit_reached(self, task_id: str) -> None:
        self._time_limits.pop(task_id, None)
        task = self.tasks.get(task_id)
        if task is not None:
            self.end(task, TIME_LIMIT, None)

    def _alert(self, record: Ended) -> None:
        """Tell ``[notify]`` of a task OOM-killed or ended at its time limit."""
        if record.reason not in (OOM_KILL, TIME_LIMIT):
            return
        shown = record.to_json()
        task = record.task
        figures = ({"memory_cap_bytes": task.demand.get("memory"), "memory_peak_bytes": shown["memory_peak"],
                    "oom_kills": shown["oom_kills"]} if record.reason == OOM_KILL else
                   {"time_limit_s": task.time_limit, "wall_s": shown["wall_s"]})
        self.journal.alert(record.reason, f"{described(task)} ended: {why_ended(record)}", task=task,
                           details=figures)

    def _learn_exit_status(self, record: Ended, pidfd: int | None, tries: int = EXIT_STATUS_TRIES) -> None:
        """Fill in how the task's launched process exited, from its pidfd: known once its
        parent (the user's shell) reaped it, which may be a moment after the task's cgroup
        emptied, so it is asked again every :data:`EXIT_STATUS_RETRY_S` a few times; then the
        pidfd is closed. Where the kernel does not say (before Linux 6.15, or no pidfd: the
        cgroup v2 VM's 6.1 showed ``-`` where the v1 host's 6.18 showed ``SIGKILL``, issue 44
        point 6), a task the daemon ended (stop, time limit) is known to have been killed by the
        SIGKILL it sent every process of it (``cgroup.kill``, or each pid on v1)."""
        if pidfd is None:
            self._signal_sent(record)
            return
        record.exit_status = exit_status(pidfd)
        self._ended_changed = self._ended_changed or record.exit_status is not None
        if record.exit_status is None and tries > 1:
            asyncio.get_running_loop().call_later(EXIT_STATUS_RETRY_S, self._learn_exit_status, record, pidfd,
                                                  tries - 1)
            return
        os.close(pidfd)
        self._signal_sent(record)
        if tries < EXIT_STATUS_TRIES and record.exit_status is not None:
            log.info("%s: exit status %s", record.task.label, exit_words(record.exit_status))

    def _signal_sent(self, record: Ended) -> None:
        """A task the daemon ended, whose exit status the kernel did not give: SIGKILL's."""
        if record.exit_status is None and record.reason in (STOP, TIME_LIMIT):
            record.exit_status = signal.SIGKILL.value  # the wait status of a process SIGKILL ended
            self._ended_changed = True

    def _kill_again(self, task: Task) -> None:
        """A task the daemon ended still has processes (v1: one forked past every round):
        kill what is left."""
        try:
            self.effector.kill(task.cgroup)
        except CgroupError as error:
            if not error.vanished:
                log.warning("cannot end what is left of %s: %s", task.label, error)

    def _final_stats(self, task: Task) -> CgroupStats | None:
        """The counters of ``task``'s cgroup as it ends (it still exists, empty), else those
        of its last sample, else None."""
        try:
            return self.hierarchy.read_stats(task.cgroup, peak=True)
        except CgroupError:
            return self.observation.last_stats(task.cgroup)

    def _rewatch(self, task: Task, after: float = REWATCH_LOOKS_S[0]) -> None:
        """Watch a process still in ``task`` once the one watched exited (where the watcher
        follows a pid: a session outlives its first process, a task may outlive its command);
        where none could be, look at the task again in ``after`` seconds (:data:`REWATCH_LOOKS_S`)."""
        if self.watcher is None or self.hierarchy.events_path(task.cgroup) is not None:
            return
        try:
            pids = self.hierarchy.pids(task.cgroup)
        except CgroupError:
            return
        for pid in pids:
            self.watcher.unwatch(task.id)
            try:
                self.watcher.watch(task.id, None, pid)
                return
            except OSError:
                continue  # exited meanwhile: the next one
        if after <= REWATCH_LOOKS_S[1] and task.id not in self._looks:
            self._looks[task.id] = asyncio.get_running_loop().call_later(after, self._look_again, task.id, 2 * after)

    def _look_again(self, task_id: str, after: float) -> None:
        """:meth:`_rewatch`'s next look at task ``task_id``: forgotten if its cgroup emptied;
        what is left of one the daemon ended is killed again, as at an exit event."""
        del self._looks[task_id]  # (forget cancels the timer: the task still runs)
        task = self.tasks.get(task_id)
        if not self.alive(task):
            self.check([task_id], "exit")
            return
        if task_id in self._ending:
            self._kill_again(task)
        self._rewatch(task, after)
