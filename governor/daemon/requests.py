"""Requests: the control socket's operations (DESIGN.md §6), each checked against its caller
(SO_PEERCRED) and handed to the stage that owns it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable

from governor.host import access
from governor.host.accounting import STOP
from governor.cgroups.hierarchy import Hierarchy
from governor.daemon.exits import Exits
from governor.daemon.filling import fill
from governor.daemon.inbox import Inbox, Left
from governor.daemon.journal import Journal
from governor.daemon.launches import Launches
from governor.daemon.observation import Observation
from governor.daemon.pacing import Pacer
from governor.daemon.policy import Policy
from governor.daemon.reloads import Reloads
from governor.daemon.settle import Settle
from governor.errors import CgroupError, FillingDiverged, RequestError
from governor.core.explain import explain
from governor.wire.protocol import (ExplainRequest, LaunchRequest, Peer, PsRequest, ReloadRequest, Request,
                               SetWeightRequest, StatusRequest, StopRequest, WatchRequest, ok)
from governor.wire.ps import PROCESSES_SHOWN, processes, ps_filter, task_rows
from governor.wire.visibility import Viewer, queue_for, rows_for
from governor.wire.status import psi_entry
from governor.core.queue import queue_view
from governor.core.state import SHOWN_COMMAND_CHARS, Task, Tasks
from governor.core.usage import stalls
from governor.core.vocabulary import reserved_by_task
from governor.wire.reply_types import (ExplainReply, LaunchReply, PsReply, Queued, ReloadReply, SetWeightReply, Started,
                                   StatusReply, StopReply)

__all__ = ["Requests"]

# The pacing key of every uid the user database does not know, together (no uid is negative).
UNKNOWN_UIDS = -1


class Encoded:
    """A reply with its success line encoded where it is built: a paced read is charged its
    encoding too (of a 1.2 MB ``ps``, as long as its build). The server sends :meth:`encoded`."""

    def __init__(self, reply: ExplainReply | PsReply):
        self.reply = reply
        self.line = ok(reply.to_json())

    def to_json(self) -> dict:
        return self.reply.to_json()

    def encoded(self) -> bytes:
        return self.line


class Requests:
    """The control server's handlers (:class:`governor.wire.server.ControlServer`), one per
    operation (:meth:`handlers`).

    Args:
        hierarchy: where a task's processes are listed; policy: the config in force; tasks:
            the running tasks; launches, settle, exits, observation, reloads: the stages the
            operations go to; inbox: told of a task stopped in the queue; journal: events.

    Attributes:
        pacer: one user's ``ps`` and ``explain``, built afresh at each request, take at most a
            tenth of the daemon's time (:mod:`governor.daemon.pacing`).
    """

    def __init__(self, *, hierarchy: Hierarchy, policy: Policy, tasks: Tasks, launches: Launches, settle: Settle,
                 inbox: Inbox, exits: Exits, observation: Observation, journal: Journal, reloads: Reloads):
        self.hierarchy, self.policy, self.tasks = hierarchy, policy, tasks
        self.launches, self.settle, self.inbox, self.queue = launches, settle, inbox, settle.queue
        self.exits, self.observation, self.journal, self.reloads = exits, observation, journal, reloads
        self.pacer = Pacer()

    def handlers(self) -> dict[str, Callable]:
        """The control server's handler of each operation (:data:`governor.wire.protocol.OPERATIONS`):
        ``(request, peer)`` → its typed reply (awaited), or for ``launch`` and ``watch`` an
        async iterator of replies."""
        return {"launch": self._launch, "status": self._status, "watch": self.watch, "explain": self._explain,
                "ps": self._ps, "stop": self._stop, "reload": self._reload, "set-weight": self._set_weight}

    async def handle(self, request: Request, peer: Peer) -> dict:
        """A one-reply operation carried out through its handler, as the reply's JSON payload
        (what a client reads; tools and tests ask a daemon this way).

        Raises:
            RequestError: the handler refused the request.
        """
        return (await self.handlers()[request.op](request, peer)).to_json()

    async def stream(self, request: Request, peer: Peer) -> AsyncIterator[dict]:
        """A streamed operation (``launch``, ``watch``) through its handler, each line's JSON payload."""
        async with contextlib.aclosing(self.handlers()[request.op](request, peer)) as replies:
            async for reply in replies:
                yield reply.to_json()

    async def _launch(self, request: LaunchRequest, peer: Peer) -> AsyncIterator[Queued | Started]:
        # The launch stage (and settle, which answers a queued launch) speak the payloads.
        async with contextlib.aclosing(self.launches.launch(request, peer)) as payloads:
            async for payload in payloads:
                yield LaunchReply.from_json(payload)

    def viewer(self, peer: Peer) -> Viewer:
        """Who a reply to ``peer`` is for (:mod:`governor.wire.visibility`).

        Raises:
            RequestError: ``unavailable``, the user database cannot be read.
        """
        who = self.policy.identities.identify(peer.uid, peer.gid)
        return Viewer(who.uid, access.is_admin(self.policy.config, who))

    async def _status(self, request: StatusRequest, peer: Peer) -> StatusReply:
        return self.observation.status_reply(self.viewer(peer))

    async def _explain(self, request: ExplainRequest, peer: Peer) -> Encoded:
        def reply() -> Encoded:  # (who may see what, as the config is when its turn comes)
            explained = self.explain()
            return Encoded(ExplainReply({**explained, "queue": queue_for(explained["queue"], self.viewer(peer))}))

        return await self.pacer.read(self.paced_as(peer.uid), reply)

    async def _ps(self, request: PsRequest, peer: Peer) -> Encoded:
        def reply() -> Encoded:
            return Encoded(PsReply(**self.ps(request, self.policy.identities.identify(peer.uid, peer.gid))))

        return await self.pacer.read(self.paced_as(peer.uid), reply)

    def paced_as(self, uid: int) -> int:
        """Whose bounds ``uid``'s requests count against (its paced reads' share of the daemon's
        time, its connections): its own, or, for a uid the user database does not know (a user
        namespace's subordinate uid), one for all such uids together (:data:`UNKNOWN_UIDS`): a
        user's 65,536 would take 65,536 tenths and connection bounds.

        Raises:
            RequestError: ``unavailable``, the user database cannot be read.
        """
        if uid == 0:
            return 0
        return UNKNOWN_UIDS if self.policy.identities.identify(uid, uid).user.isdigit() else uid

    async def _stop(self, request: StopRequest, peer: Peer) -> StopReply:
        who = self.policy.identities.identify(peer.uid, peer.gid)
        return StopReply(tuple((await self.stop(request.tasks, who))["stopped"]))

    async def _reload(self, request: ReloadRequest, peer: Peer) -> ReloadReply:
        who = self.policy.identities.identify(peer.uid, peer.gid)
        access.require_admin(self.policy.config, who, "reload")
        return ReloadReply(await self.reloads.reload_off_loop(f"reload by {who.user}"))

    async def _set_weight(self, request: SetWeightRequest, peer: Peer) -> SetWeightReply:
        who = self.policy.identities.identify(peer.uid, peer.gid)
        access.require_admin(self.policy.config, who, "set-weight")
        return SetWeightReply(**self.reloads.set_weight(request.group, request.weight, who.user))

    async def watch(self, request: WatchRequest, peer: Peer) -> AsyncIterator[StatusReply]:
        """A status snapshot now and every ``request.interval`` seconds (``watch``)."""
        while True:
            yield self.observation.status_reply(self.viewer(peer))
            await asyncio.sleep(request.interval)

    def ps(self, request: PsRequest, who: access.Identity) -> dict:
        """``governor ps``: the caller's tasks, running and queued (``{"tasks": [...]}``, see
        :func:`governor.wire.ps.task_rows`), or its ended records (``{"ended": [...]}``, see
        :meth:`governor.host.accounting.Ended.to_json`); everyone's with ``all``, those of
        ``users`` or in ``groups`` with those; another user's as
        :mod:`governor.wire.visibility` shows them to ``who`` (no process listed).
        """
        viewer = Viewer(who.uid, access.is_admin(self.policy.config, who))
        chosen = ps_filter(who.uid, everyone=request.all, users=request.users, groups=request.groups,
                           task=request.task)
        if request.ended:
            found = {"ended": rows_for([record.to_json(command_chars=None if record.task.uid == who.uid
                                                       else SHOWN_COMMAND_CHARS)
                                        for record in self.exits.ended if chosen(record.task)], viewer)}
            return self._in_known_groups(request, found)
        positions = {item["task"]: item for item in queue_view(self.queue, self.queue.admission)}
        rows = task_rows([t for t in self.tasks if chosen(t)],
                         [e for e in self.queue.values() if not e.decided and chosen(e.task)],
                         allocation=self.settle.enforcement.allocation, usage=self.observation.usage,
                         positions=positions, asker=who.uid,
                         reserved=reserved_by_task(self.tasks, self.observation.usage),
                         processes=lambda task: self._processes(task) if viewer.sees(task.uid) else ([], None))
        return self._in_known_groups(request, {"tasks": rows_for(rows, viewer)})

    def _in_known_groups(self, request: PsRequest, found: dict) -> dict:
        """``found``, unless it is empty and a group asked for is none this config knows: an
        empty table said nothing of a mistyped name, where ``ps -u`` names a user it does not
        know (a group of an earlier config still lists its tasks and records).

        Raises:
            RequestError: ``not_found``, naming the group.
        """
        unknown = next((g for g in request.groups if not access.known_group(self.policy.config, g)), None)
        if unknown is not None and not next(iter(found.values())):
            raise RequestError("not_found", f"no group {unknown!r} in the config, and no task of one")
        return found

    def _processes(self, task: Task) -> tuple[list[dict], int]:
        """The first :data:`~governor.wire.ps.PROCESSES_SHOWN` processes in ``task``'s cgroup, and
        how many it holds (a login session's live in logind's scopes below its slice: none
        listed). A name costs a /proc read: only those listed are looked up."""
        if task.is_login:
            return [], 0
        try:
            pids = self.hierarchy.pids(task.cgroup)
        except CgroupError:
            return [], 0
        return processes(pids[:PROCESSES_SHOWN]), len(pids)

    async def stop(self, task_ids: Iterable[str], who: access.Identity) -> dict:
        """End each task's whole process tree (``governor stop``), or take a queued one out
        of the queue (its client is answered ``stopped``). Every id is checked before any is
        stopped; the answer comes once the killed processes are gone
        (:meth:`Exits.survivors <governor.daemon.exits.Exits.survivors>`, a few seconds at most).

        Returns:
            ``{"stopped": [id, ...]}``: every task asked, its processes gone.

        Raises:
            RequestError: ``not_found`` (no such task running or queued), ``forbidden`` (the
                task is another user's and ``who`` is not root nor an admin, or it is a
                user's session), ``unavailable`` (the kernel refused the kill, or processes
                outlived it: the message names each such task and its pids, and those stopped).
        """
        admin = access.is_admin(self.policy.config, who)
        chosen = []
        for task_id in task_ids:
            entry = self.queue.get(task_id)
            task = entry.task if entry is not None else self.tasks.get(task_id)
            if task is None:
                raise RequestError("not_found", f"no task {task_id} is running or queued")
            if task.is_session:
                raise RequestError("forbidden", f"task {task_id} is the session of {task.user} (their processes "
                                                "outside governor run): not stopped; end those processes with "
                                                "kill, or log out")
            if task.uid != who.uid and not admin:
                raise RequestError("forbidden", f"task {task_id} belongs to {task.user}: only its owner, root and "
                                                "admins may stop it")
            chosen.append((task, entry))
        failed: dict[str, str] = {}  # task id → why it is not stopped
        killed = []
        for task, entry in chosen:
            if entry is not None:  # queued, or starting: it never runs
                del self.queue[task.id]
                entry.stopped_by = who.user  # one caught mid-move is ended as stopped by them (Starts)
                entry.decide(error=RequestError("stopped", f"task {task.id} was stopped by {who.user} before "
                                                           "it started"))
                self.journal.event("task_stopped", f"task {task.id} ({task.name}) stopped by {who.user} while queued")
                self.inbox.put(Left(task.id))
            elif self.exits.end(task, STOP, who.user):
                killed.append(task)
            else:
                failed[task.id] = "the kernel refused the kill (see the daemon's log)"
        for task, left in zip(killed, await asyncio.gather(*map(self._survivors, killed))):
            if left:
                failed[task.id] = left
        if failed:
            done = [task.id for task, _ in chosen if task.id not in failed]
            why = "; ".join(f"task {task_id}: {reason}" for task_id, reason in failed.items())
            raise RequestError("unavailable", f"not stopped: {why}; the daemon kills them again at its next check "
                                              f"(stopped: {', '.join(done) or 'none'})")
        return {"stopped": [task.id for task, _ in chosen]}

    async def _survivors(self, task: Task) -> str:
        """What is left of ``task`` once the wait for its killed processes is over, in words
        (empty: nothing)."""
        try:
            left = await self.exits.survivors(task)
        except CgroupError as error:
            return f"cannot tell whether its processes are gone ({error})"
        if not left:
            return ""
        shown = ", ".join(map(str, left[:PROCESSES_SHOWN]))
        more = f" and {len(left) - PROCESSES_SHOWN} more" if len(left) > PROCESSES_SHOWN else ""
        plural = "s" if len(left) > 1 else ""
        return f"pid{plural} {shown}{more} still running {self.exits.stop_wait_s:g} s after SIGKILL"

    def explain(self) -> dict:
        """The live filling with its trace (``governor explain``), and the queue.

        Raises:
            RequestError: ``unavailable``, the filling diverged (the plan in force is the last
                good one; status's ``filling.error`` says so too).
        """
        demands = self.tasks.demands()
        try:
            traced = fill(self.policy.config, self.policy.capacity, self.policy.fair_weight, demands, trace=True)
        except FillingDiverged as error:
            raise RequestError("unavailable", f"the allocation failed ({error}); the last good plan stays "
                                              "in force") from error
        runs = {group: (sum(not t.is_session for t in tasks),
                        list(dict.fromkeys(t.user for t in tasks if t.is_session)))  # login + session: once
                for group, tasks in self.tasks.groups().items()}
        return explain(traced, self.policy.capacity, demands, queue_view(self.queue, self.queue.admission), runs,
                       configured=self.policy.configured(self.tasks.counts()),
                       fairshare=self.observation.fair_share.standings(time.time())
                       if self.observation.fair_share else None,
                       stalls={group: stalls(self.observation.usage.get(group, {})) for group in demands},
                       task_stalls={group: {t.id: stalls(self.observation.usage.get(t.cgroup, {})) for t in tasks}
                                    for group, tasks in self.tasks.groups().items()},
                       psi=psi_entry(self.observation.hierarchy.no_psi),
                       host_capacity=self.policy.host_capacity, foreign=self.observation.tenants())
