"""Launches: ``governor run`` asks over the control socket to govern its own pid (DESIGN.md §5).
The caller and its demand are checked, its task queued, and settle asked to admit it; the
client is told its place while it waits, and the started task once it runs."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import AsyncIterator, Callable, Mapping

from governor.host import access
from governor.cgroups.hierarchy import Hierarchy, Location
from governor.daemon.foreign_poll import refusal
from governor.daemon.history import RefusalBudget, launch_entry, refusal_entry
from governor.daemon.inbox import Inbox, Launch, Left
from governor.daemon.journal import Journal, vector
from governor.daemon.policy import Policy
from governor.daemon.queue_places import QueuePlaces
from governor.daemon.starts import Starts
from governor.daemon.waiting import Queue
from governor.host.daemons import Registry, other_daemon
from governor.errors import CgroupError, GovernorError, RequestError
from governor.core.headroom import check_beside_headroom
from governor.config.kinds import Kind, task_in
from governor.wire.protocol import LaunchRequest, Peer
from governor.core.quotas import check_within_quotas
from governor.core.queue import Entry, queue_view
from governor.core.state import Task, Tasks
from governor.host.task_store import TaskStore
from governor.wire.fields import default_name

__all__ = ["Launches"]


class Launches:
    """The ``launch`` operation.

    Args:
        hierarchy: where the caller is; policy: the config in force; tasks: the running
            tasks; store: gives out task ids; queue: the launches waiting; inbox: told of a
            launch, and of a launch that left the queue (settle admits); starts: the started
            task's reply (:meth:`Starts.started_reply
            <governor.daemon.starts.Starts.started_reply>`); journal: events;
        registry: this host's daemons: a caller in another's cgroups is refused;
        places: keeps the waiting launches' ids and places across a restart.
    """

    def __init__(self, *, hierarchy: Hierarchy, policy: Policy, tasks: Tasks, store: TaskStore, queue: Queue,
                 inbox: Inbox, starts: Starts, journal: Journal, registry: Registry | None, places: QueuePlaces,
                 foreign: Callable[[Mapping[str, str] | None], str | None] = lambda paths: None):
        self.hierarchy = hierarchy
        self.places = places
        self._refusals = RefusalBudget()
        # Launches that never start (wait: false and no room; a client gone from the queue)
        # were each a launch entry, unbounded: one user's loop of them pushed the whole host's
        # history out of max_size in minutes (an attacker's check). Each uid's are journaled as
        # its refusals are; past that its launches are journaled when they start.
        self._unstarted = RefusalBudget(unstarted=True)
        self.foreign = foreign
        self.policy = policy
        self.tasks = tasks
        self.store = store
        self.queue = queue
        self.inbox = inbox
        self.starts = starts
        self.journal = journal
        self.registry = registry

    async def launch(self, request: LaunchRequest, peer: Peer) -> AsyncIterator[dict]:
        """:meth:`_launch`, its refusal recorded in the history (:func:`refusal_entry`; each uid's
        first 60 a minute: :class:`~governor.daemon.history.RefusalBudget`)."""
        try:
            async with contextlib.aclosing(self._launch(request, peer)) as payloads:
                async for payload in payloads:
                    yield payload
        except RequestError as error:
            now = time.time()
            if not self._refusals.take(peer.uid, now):
                raise
            try:
                user = self.policy.identities.identify(peer.uid, peer.gid).user
            except RequestError:  # the lookup itself failed (no file descriptor left): the refusal stands
                user = str(peer.uid)
            self.journal.record(refusal_entry(now, uid=peer.uid, user=user, group=request.group,
                                              demand=request.demand, code=error.code))
            raise

    async def _launch(self, request: LaunchRequest, peer: Peer) -> AsyncIterator[dict]:
        """Govern the caller's own pid as a new task: start it when its memory fits, else queue
        it and yield ``{"queued": {...}}`` (see :func:`governor.core.queue.queue_view`) whenever its
        place changes; the last payload is the started task. Closing the generator (the client
        left, e.g. Ctrl-C) takes the task out of the queue: nothing of it remains.

        Raises:
            RequestError: ``forbidden`` (another pid, a group not the caller's), ``not_found``,
                ``bad_request`` (a demand that cannot be governed, a pid gone), ``exceeds_capacity``
                (a demand that can never fit), ``would_wait`` (``wait: false`` and no room now),
                ``unavailable`` (the cgroup could not be made), ``too_many`` (the caller's uid
                has ``max_tasks_per_user`` tasks running and queued).
        """
        if request.pid != peer.pid:
            raise RequestError("forbidden", f"a client may launch only its own pid ({peer.pid}), not {request.pid}")
        who = self.policy.identities.identify(peer.uid, peer.gid)
        config = self.policy.config
        group = access.launch_group(config, who, request.group, self.policy.allowed_groups(who))
        demand = access.task_demand(config, self.policy.host_capacity, request.demand)
        check_within_quotas(config, group, demand)
        check_beside_headroom(config, self.policy.host_capacity, group, demand)
        # Where the asker is now, never what its pid was before (a pid that wrapped round to an
        # old task's launch pid got that task, another user's, and stayed ungoverned itself).
        outer = self._task_of(self._where_launching(request.pid))
        if outer is not None and outer.pid == request.pid:
            # Its client lost the reply (a daemon restart) and asked again: it already runs.
            yield self.starts.started_reply(outer)
            return
        if outer is not None:
            # `governor run` inside a task (a script that uses it, run with it): the process
            # stays in the task it is in, whose demand already counts; a second task would
            # count it twice.
            yield {**self.starts.started_reply(outer), "nested": True}
            return
        self._check_task_limit(peer.uid, who.user)
        # The same process asking again after a restart, whose launch waited: its id and place back.
        kept = self.queue.take_back(request.pid, peer.uid, self.places.waits(request.pid)) \
            if request.pid in self.queue.remembered else None
        try:
            task_id = kept["id"] if kept is not None else self.store.new_id()
        except GovernorError as error:  # a full or read-only state directory: the user hears why
            raise RequestError("unavailable", f"no task id could be given out: {error}") from None
        task = Task(task_id, group, request.pid, peer.uid, who.user, tuple(request.command), demand,
                    time.time(), request.name or default_name(request.command), request.time_limit,
                    config.place(group))
        entry = Entry(task, time.time() if kept is None else kept["queued_at"], peer.pidfd)
        self.queue.add(entry)
        if kept is None:  # (journaled when it first queued)
            launched = launch_entry(task, entry.queued_at, group_named=request.group is not None)
            if self._unstarted.left(peer.uid, entry.queued_at):
                self.journal.record(launched)
            else:
                entry.held_launch = launched
        try:
            await asyncio.shield(self.inbox.put(Launch(task)))
            if not entry.decided and not request.wait:
                entry.decide(error=RequestError("would_wait", self.waiting_line(task.id)))
            elif not entry.decided:
                entry.born = self.places.waits(task.pid)
                self.places.changed()
                again = "queued again after the restart, in its place" if kept is not None else "queued"
                self.journal.event("queued", f"task {task.id} {again}: user {who.user}, group {group}, "
                                             f"demand {vector(demand)}; {self.waiting_line(task.id)}")
            shown = None
            while not entry.decided:
                entry.wake.clear()  # before the yield: a change while the client reads still wakes us
                place = self.place(task.id)
                if place != shown:
                    shown = place
                    yield {"queued": place}
                await entry.wake.wait()
            if entry.error is not None:
                raise entry.error
            yield entry.reply
        finally:
            self.journal.changed()
            if entry.reply is None and kept is None:
                self._unstarted.take(peer.uid, time.time())
            if entry.born is not None:
                self.places.changed()
            if self.queue.get(task.id) is entry:
                del self.queue[task.id]
                if not entry.decided and not self.inbox.closing:
                    self.journal.event("left_queue", f"task {task.id} left the queue (its client went away)")
                    self.inbox.put(Left(task.id))

    def place(self, task_id: str) -> dict:
        """Where waiting task ``task_id`` stands (:func:`governor.core.queue.queue_view`)."""
        view = queue_view(self.queue, self.queue.admission)
        found = next((item for item in view if item["task"] == task_id), None)
        if found is None and task_id in self.queue and self.queue.held(self.queue[task_id]):
            return {"task": task_id, "position": 0, "reason": "held behind launches of its group that waited before "
                                                              f"the daemon's restart (for {self.queue.hold_left():.0f} s at most)"}
        return found or {"task": task_id, "position": 0}

    def waiting_line(self, task_id: str) -> str:
        """Why ``task_id`` waits and its place, in words."""
        place = self.place(task_id)
        return f"{place.get('reason', 'memory: waits')}; queue position {place['position']}"

    def _where_launching(self, pid: int) -> Location:
        """Where the launching process ``pid`` is. A process in another governor daemon's
        cgroups is refused: taken out, its task would escape its caps, and that daemon's
        ``governor stop`` would kill nothing. So is one in a foreign subtree (a Slurm job's),
        at once rather than when its turn to start comes (the move would refuse it then).

        Raises:
            RequestError: ``forbidden``, naming the other daemon's socket; ``bad_request``,
                naming the foreign subtree.
        """
        try:
            location = self.hierarchy.locate(pid)
        except CgroupError:
            return Location(None, None)  # gone: the move will say so
        subtree = self.foreign(location.paths)
        if subtree is not None:
            raise refusal(pid, subtree)
        other = other_daemon(self.registry, location)
        if other is not None:
            socket = shlex.quote(str(other.socket))
            raise RequestError("forbidden", f"process {pid} is governed by another governor daemon ({other.describe()}); "
                                            f"launch through that one: governor run --socket {socket} …")
        return location

    def _task_of(self, location: Location) -> Task | None:
        """The launched task (not a session) a process at ``location`` runs in, if any."""
        found = task_in(location.rel) if location.rel is not None else None
        return self.tasks.get(found[1]) if found is not None and found[0] is Kind.TASK else None

    def _check_task_limit(self, uid: int, user: str) -> None:
        """Refuse a launch by ``uid`` (not root) that already has ``max_tasks_per_user``
        tasks running and queued: one user must not fill the daemon for everyone."""
        limit = self.policy.config.max_tasks_per_user
        if uid == 0:
            return
        held = self.tasks.launched_by(uid) + sum(1 for e in self.queue.values() if e.task.uid == uid)
        if held >= limit:
            raise RequestError("too_many", f"{user} already has {held} tasks running or queued, the most one user "
                                           f"may ([daemon] max_tasks_per_user = {limit})")
