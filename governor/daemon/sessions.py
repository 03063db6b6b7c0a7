"""Sessions (:mod:`governor.host.session_rules`): a process of a governed user that takes the user's
uid, or is forked by one not moved yet (:mod:`governor.host.procevents`), outside any task is moved
into the user's session, a task made on the spot (never queued). Every process is scanned at start,
after a reload, when events were lost, and every ``RESCAN_INTERVAL_S`` (at least
``reconcile_interval``). On a systemd host (cgroup v2), a process in its user's own logind slice
stays there: the slice is the user's *login session*, whose limits systemd writes, so logind keeps
tracking it. A session's cgroup is made and its processes moved on the cgroup thread; the session
reports to settle, which refills. One started after its session's first is ended rather than
moved into a session at its ``pids.max`` (:mod:`governor.daemon.session_pids`). A reload's
``[sessions]`` is every running session's too (:mod:`governor.daemon.session_caps`)."""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping

import psutil

from governor.cgroups.hierarchy import Hierarchy, Location
from governor.daemon.enforcement import Enforcement
from governor.daemon.exits import Exits
from governor.daemon.history import session_entry
from governor.daemon.inbox import Inbox, Session
from governor.daemon.journal import Journal, vector
from governor.daemon.policy import Policy
from governor.daemon.records import Records
from governor.daemon.rescans import Rescans
from governor.daemon.tree import Tree
from governor.host.daemons import Registry, other_daemon
from governor.daemon.session_caps import SessionCaps
from governor.daemon.session_pids import SessionPids
from governor.errors import CgroupError, EndedAtPidsMax, GovernorError, ProcessGone
from governor.config.kinds import Kind, login_id, session_id, task_in
from governor.host.procevents import UID, ProcessEvents, effective_uid, real_uid
from governor.core.state import Task, Tasks

__all__ = ["RESCAN_INTERVAL_S", "Sessions"]

log = logging.getLogger("governor.daemon")
# The safety net behind the process events (which say when they lost some): a pass over every
# process costs about 5 µs each natively, 15× that in an emulated VM.
RESCAN_INTERVAL_S = 30.0
# A rescan walks every pid again while a walk moved some, at most this many times.
RESCAN_PASSES = 5
# What a rescan's walk found: the pids that need nothing, those to look at again on the loop.
Survey = tuple[list[int], list[int]]
# Processes remembered as settled (a dict lookup per exec and fork instead of /proc reads);
# past this many the memory is cleared and rebuilt from events.
SETTLED_KEPT = 1 << 16
# A process moved into a session this recently does not vouch for children whose fork events come now: they
# may have been forked before the move (events arrive within ms; an older backlog overflows, and a rescan follows).
MOVED_DISTRUST_S = 1.0
# govern_process's uid for a child of a process moving into a session: its real uid alone judges it (sudo's euid)
REAL_UID = -1


class _Look(enum.Enum):
    """What a look at one process found."""

    MOVING = "a move into its session was asked"
    SETTLED = "it needs nothing until its uid changes"
    UNKNOWN = "it could not be told (gone, unreadable, its session not made)"


class Sessions:
    """Users' processes outside ``governor run``, each user's governed as one task.

    Args:
        hierarchy, tree: governor's cgroups, the thread that makes and joins them (its effector
            writes their caps); policy: the config in force (who owns a session, its demand);
            tasks, records: the running tasks, their records; inbox: told when a session starts;
            enforcement: its CPU hold; exits: watches a session's end; journal: events.
        host_pids: every process id on the host (``psutil.pids``).
        registry: this host's daemons: a process in another daemon's cgroups is that one's.
        foreign: a process's ``/proc/<pid>/cgroup`` lines → the foreign subtree that holds it
            in some hierarchy, or None: such a process is another manager's, never a session's.
        moved_in: called on the loop with each pid once its move into a session is done
            (:meth:`Handover.moved <governor.daemon.handover.Handover.moved>`, which ends it
            if it holds a GPU open).
    """

    def __init__(self, *, hierarchy: Hierarchy, tree: Tree, policy: Policy, tasks: Tasks, records: Records,
                 inbox: Inbox, enforcement: Enforcement, exits: Exits, journal: Journal,
                 host_pids: Callable[[], Iterable[int]], registry: Registry | None,
                 moved_in: Callable[[int], None],
                 foreign: Callable[[Mapping[str, str] | None], str | None] = lambda paths: None):
        self.hierarchy = hierarchy
        self.tree = tree
        self.effector = tree.effector
        self.policy = policy
        self.tasks = tasks
        self.records = records
        self.inbox = inbox
        self.enforcement = enforcement
        self.exits = exits
        self.journal = journal
        self.host_pids = host_pids
        self.registry = registry
        self.process_events: ProcessEvents | None = None
        self.moved_in = moved_in
        self.foreign = foreign
        self.rescans: Rescans[Survey] = Rescans(self._survey, self._act, passes=RESCAN_PASSES)
        self.pids = SessionPids(hierarchy, tree, journal, policy.caps, lambda pid: self.real_uid(pid))
        self.caps = SessionCaps(policy, tasks, hierarchy, records, journal)  # what [sessions] asks of each
        self.reset()

    def reset(self) -> None:
        """Forget what was learnt under the config in force (it changed)."""
        self._refused: set[int] = set()  # uids whose login session systemd would not limit
        self._settled: dict[int, None] = {}  # pids that need nothing until their uid changes
        self._moved: dict[int, float] = {}  # pids moved into sessions → when (time.monotonic())
        self._moving: set[int] = set()  # pids whose move is asked and not done yet
        self._starting: dict[int, list[int]] = {}  # uid → pids waiting for its session's cgroup
        self.pids.reset()

    # ── events ──────────────────────────────────────────────────────────────────────────

    def follow_processes(self) -> None:
        """Subscribe to fork and uid events (the kernel's process-events connector);
        without it, only the periodic rescan moves processes into sessions."""
        if not self.policy.owners.enabled or self.process_events is not None:
            return
        try:
            self.process_events = ProcessEvents()
        except OSError as error:
            self.journal.event("error", f"sessions: the kernel's process events are unavailable ({error.strerror}); "
                                        f"processes join sessions only at the rescan every "
                                        f"{max(self.policy.config.reconcile_interval_s, RESCAN_INTERVAL_S):g} s",
                               logging.WARNING)
            return
        self.process_events.follow(self.on_process_events)

    def close(self) -> None:
        self.rescans.close()
        if self.process_events is not None:
            self.process_events.close()

    def on_process_events(self) -> None:
        """One batch of process events. A process already settled (in a task, in its user's session
        or login slice, another daemon's, or not governed) passes that on to the children it forks
        without a /proc read, where the kernel sends its forks at all (:meth:`ProcessEvents.forget`)."""
        try:
            events, lost = self.process_events.read()
            now = time.monotonic()
            for kind, pid, other in events:
                if kind == UID:
                    self.govern_process(pid, other)
                elif other in self._settled and not self._moved_since(other, now - MOVED_DISTRUST_S):
                    self._settle_pid(pid, forked=True)  # the child was forked where its parent is
                    self._forget(other)
                else:  # a process that forks a successor and exits is caught; a mover's child by its real uid
                    self.govern_process(other)
                    self.govern_process(pid, REAL_UID if other in self._moved else None)
            if lost and self.ask_rescan("lost events", limited=True):
                self.journal.event("error", "sessions: process events were lost (the kernel's buffer overflowed); "
                                            "rescanning every process", logging.WARNING)
        except Exception:
            log.exception("handling process events failed")

    async def rescan(self, trigger: str) -> int:
        """Move every process of a governed user that is in no task into its user's session (the
        walk off the loop: :class:`~governor.daemon.rescans.Rescans`), once the rescan under
        way, if any, ends; and wait for it. Returns how many processes a move was asked for."""
        if not self.policy.owners.enabled or self.inbox.closing:
            return 0
        return await self.rescans.now(trigger)

    def ask_rescan(self, trigger: str, *, limited: bool = False) -> bool:
        """:meth:`rescan` for ``trigger`` without waiting for it, folded with the others asked
        meanwhile; ``limited`` (lost events): rate-limited (:data:`~governor.daemon.rescans.RESCAN_GAP_S`).
        Returns whether it was not asked already (a caller says so once)."""
        if not self.policy.owners.enabled or self.inbox.closing:
            return False
        return self.rescans.ask(trigger, limited=limited)

    def _survey(self) -> Survey:
        """(On the rescan thread: reads only) every process on the host: those that need
        nothing, and those that may need a move, looked at again on the loop (:meth:`_act`)."""
        settled, again = [], []
        for pid in self.host_pids():
            found = self._find(pid, None)
            if found is _Look.SETTLED or (not isinstance(found, _Look) and self._in_place(found[0], found[2])):
                settled.append(pid)
            elif found is not _Look.UNKNOWN:
                again.append(pid)
        return settled, again

    def _act(self, survey: Survey, trigger: str) -> int:
        """(On the loop) what a walk found: forget what was settled before (users, groups or
        the config may have changed), and move each process found outside its place, its
        /proc read again now."""
        settled, again = survey
        self._settled.clear()
        if self.process_events is not None:  # a watched process gone without an event of it: forgotten
            self.process_events.keep_watching({*settled, *again, *self._moving})
        for pid in settled:
            self._settle_pid(pid)
        moved = sum(self.govern_process(pid) for pid in again)
        if moved:
            self.journal.event("session", f"{moved} process(es) moved into sessions ({trigger})")
        return moved

    def govern_process(self, pid: int, uid: int | None = None) -> bool:
        """Move process ``pid`` into its user's session (its real uid's), unless that user is not
        governed, or it already is in a task or that session; ``uid``: its effective uid as its
        uid event gave it (the owner of its /proc directory when None), or :data:`REAL_UID`. A
        process in its own user's logind slice stays there: that slice is the user's login
        session (made now if it is the first; left ungoverned without systemd's cgroup v2).
        Whether it is settled now is remembered for the next events (:meth:`on_process_events`).

        Returns:
            Whether a move was asked (it is made on the cgroup thread: at once when no event
            loop runs; a process gone by then is not an error).
        """
        look = self._look(pid, uid)
        if look is _Look.SETTLED:
            self._settle_pid(pid)
        elif look is _Look.UNKNOWN:
            self._settled.pop(pid, None)
            self._forget(pid)
        elif self.process_events is not None:
            self.process_events.watch(pid)  # its children forked before its move are looked at
        return look is _Look.MOVING

    effective_uid = staticmethod(effective_uid)
    real_uid = staticmethod(real_uid)

    # ── one process ─────────────────────────────────────────────────────────────────────

    def _find(self, pid: int, uid: int | None) -> _Look | tuple[int, tuple[str, str], Location]:
        """Process ``pid``'s real uid, its owner (user, group) and where it is, or SETTLED
        (not governed, another daemon's or manager's) or UNKNOWN (gone). Reads only (the rescan
        thread calls it too)."""
        # Every uid change on the host comes here: its effective uid (the event's, else the
        # owner of /proc/<pid>, one stat) rules out most at once. A process whose effective uid
        # is not governed but whose real uid is was forked where it is by its user (a setuid
        # program alice runs), or is root's borrowing her uid for a moment (pam_keyinit in
        # su's and runuser's session: setreuid(alice, 0)): neither is moved.
        owners = self.policy.owners
        try:
            if uid != REAL_UID and owners.owner(self.effective_uid(pid) if uid is None else uid) is None:
                return _Look.SETTLED
            # The uid now, not the event's: a root process that took a user's uid for a moment
            # (runuser's parent does) and took its own back must stay where it is.
            uid = self.real_uid(pid)
        except (OSError, psutil.Error):
            return _Look.UNKNOWN  # gone already
        owner = owners.owner(uid)
        if owner is None:
            return _Look.SETTLED
        try:
            location = self.hierarchy.locate(pid)
        except CgroupError:
            return _Look.UNKNOWN  # gone already
        if other_daemon(self.registry, location) is not None:
            return _Look.SETTLED  # another daemon's task: that daemon governs it
        if self.foreign(location.paths) is not None:
            return _Look.SETTLED  # another manager's (a Slurm job, pam_slurm_adopt's too): never a session's
        return uid, owner, location

    def _in_place(self, uid: int, location: Location) -> bool:
        """Whether a process of ``uid`` at ``location`` is where it belongs: in a task, or in its
        user's session (its login slice is looked at on the loop: it may start a session)."""
        where = location.rel
        session = self.tasks.get(session_id(uid))
        found = task_in(where) if where is not None else None
        return found is not None and (found[0] is Kind.TASK or (session is not None and where == session.cgroup))

    def _look(self, pid: int, uid: int | None) -> _Look:
        if pid in self._moving:
            return _Look.SETTLED
        found = self._find(pid, uid)
        if isinstance(found, _Look):
            return found
        uid, (user, group), location = found
        where = location.rel
        if where is None and location.login_uid == uid:
            # logind tracks it (loginctl, logout): governed where it is, through systemd.
            if self.hierarchy.slices is not None and self.tasks.get(login_id(uid)) is None \
                    and uid not in self._refused and self._start_login(uid, user, group, pid) is None:
                self._refused.add(uid)  # not a systemctl per exec: until the next reload
            return _Look.SETTLED
        if self._in_place(uid, location):
            return _Look.SETTLED
        session = self.tasks.get(session_id(uid))
        self._moving.add(pid)
        if len(self._moved) >= SETTLED_KEPT:
            self._moved.clear()
        self._moved[pid] = time.monotonic()
        if session is not None:
            self._move(session, pid)
        elif uid in self._starting:
            self._starting[uid].append(pid)  # moved once its session's cgroup is made
        else:
            self._start_session(uid, user, group, pid)
        return _Look.MOVING

    def _move(self, session: Task, pid: int) -> None:
        def moved(error: GovernorError | None) -> None:
            self._moving.discard(pid)
            self.pids.moved(session, isinstance(error, EndedAtPidsMax))
            self._forget(pid)  # its children are forked in the session now (or it is gone)
            if error is None:
                self._settle_pid(pid)  # in its session now: its execs and forks need nothing
                self.moved_in(pid)
                return
            self._settled.pop(pid, None)
            self._moved.pop(pid, None)
            if not isinstance(error, ProcessGone):
                log.warning("cannot move pid %d into the session of %s: %s", pid, session.user, error)

        self.tree.join_soon(session.cgroup, pid, moved, self.pids.check(session))  # launches and exits first

    def _settle_pid(self, pid: int, *, forked: bool = False) -> None:
        """Remember that process ``pid`` needs nothing until its uid changes (``forked``: as its parent)."""
        if len(self._settled) >= SETTLED_KEPT:
            self._settled.clear()  # looked at again from /proc: slower, never wrong
        self._settled[pid] = None
        self._forget(pid, forked=forked)

    def _forget(self, pid: int, *, forked: bool = False) -> None:
        if self.process_events is not None and pid not in self._moving:
            self.process_events.forget(pid, forked=forked)

    def _moved_since(self, pid: int, since: float) -> bool:
        """Whether this daemon moved process ``pid`` after ``since`` (``time.monotonic()``): a
        child it forked before the move stayed where it was, and its fork event may come after."""
        moved = self._moved.get(pid)
        if moved is not None and moved < since:
            del self._moved[pid]
            return False
        return moved is not None

    # ── a session starts ────────────────────────────────────────────────────────────────

    def _start_session(self, uid: int, user: str, group: str, pid: int) -> None:
        """Make the session of ``uid``: its cgroup on the cgroup thread, then its caps (device rules
        included), its record and the moves of the processes found meanwhile (:meth:`_made`)."""
        session = Task(session_id(uid), group, pid, uid, user, (), self.caps.asked(), time.time(),
                       place=self.policy.config.place(group))
        self._starting[uid] = [pid]
        self.pids.asked(uid, pid)
        self.tree.run(lambda: self.tree.make([session.cgroup])[0], lambda error: self._made(session, error))

    def _made(self, session: Task, error: GovernorError | None) -> None:
        pids = self._starting.pop(session.uid, [])
        if error is None:
            try:
                self.effector.apply(session.cgroup, self.policy.caps(session))
            except GovernorError as refused:
                error = refused
        if error is not None:
            self.tree.remove([session.cgroup], groups=self.tasks.emptied(session))
            self.pids.failed(session.uid)
            self._moving.difference_update(pids)
            for pid in pids:
                self._settled.pop(pid, None)
                self._forget(pid)
            self.journal.event("error", f"cannot start the session of {session.user}: {error}; its processes stay "
                                        "where they are", logging.ERROR)
            return
        for pid in pids:  # asked first: until they are made, the session is not taken for ended
            self._move(session, pid)
        self._started(session)

    def _start_login(self, uid: int, user: str, group: str, pid: int) -> Task | None:
        """Make the login session of ``uid``: its systemd user slice, caps set through systemd
        (no cgroup made); None if systemd refused them. A record that cannot be written (a
        full state directory) does not stop it: governed unrecorded is better than ungoverned,
        and the reconcile pass writes the record once it can."""
        session = Task(login_id(uid), group, pid, uid, user, (), self.caps.asked(), time.time())
        try:
            self.effector.apply(session.cgroup, self.policy.caps(session))
        except GovernorError as error:
            try:
                self.effector.release_login(session.cgroup)  # only what was set
            except CgroupError as undone:
                log.warning("cannot undo the start of the session of %s: %s", user, undone)
            self.journal.event("error", f"cannot start the session of {user}: {error}; its processes stay where "
                                        "they are (not tried again until a reload)", logging.ERROR)
            return None
        self._started(session)
        return session

    def _started(self, session: Task) -> None:
        self.records.save_or_retry(session)
        self.tasks.add(session)
        self.exits.watch(session)
        self.journal.event("session_started", f"session of {session.user} started: group {session.group}, "
                                              f"demand {vector(session.demand)}"
                                              + (f", in {session.cgroup} (logind's, limits set through systemd)"
                                                 if session.is_login else ""), detail=f"pid {session.pid}")
        self.journal.record(session_entry(session))
        if self.enforcement.cpu_saturated:  # measured without this session: the next sample decides again
            self.enforcement.hold(False, f"the session of {session.user} starts: groups are no longer held to "
                                         "their CPU guarantees")
        self.inbox.put(Session(session))
