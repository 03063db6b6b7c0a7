"""The daemon: the one place that ties events, allocation and enforcement together (DESIGN.md §4).

    launch / exit / reconcile / reload ──► queue ──► admission.admit (memory, discrete DRF)
        ──► Tasks ──► demands D_g ──► drf.progressive_filling ──► limits.group_limits
        ──► driver.apply_plan (only what changed) ──► cgroupfs

* ``launch`` (control socket): check the caller and its demand, queue it, and admit what fits
  (:meth:`Daemon._settle`). An admitted task gets its cgroup with its caps (written once),
  the groups their new guarantees, then the caller's pid is moved in and its record saved.
  The caller then execs its command, so all its memory is charged to the task from the first
  byte. A task that does not fit waits, and its client is told its place as it changes.
* exit: the exit watcher (inotify on ``cgroup.events`` on v2, pidfd on v1) wakes the daemon;
  an empty task cgroup is removed, waiting tasks are admitted if memory freed, and the groups
  refilled. A reconcile pass every ``reconcile_interval`` seconds catches what a watcher missed.
* reload (SIGHUP or the admin ``reload`` operation): a valid config replaces the one in force,
  the queue is served again and the host refilled; an invalid one is refused and changes
  nothing. The queue lives in memory: a restart closes the waiting clients' connections and
  ``governor run`` queues again (nothing had started, so nothing starts twice).
* usage: every ``sample_interval`` seconds each group and task cgroup is sampled.
* sessions (:mod:`governor.sessions`): a process of a governed user that runs ``exec`` or takes
  the user's uid (:mod:`governor.procevents`) outside any task is moved into the user's session,
  a task made on the spot (never queued). Every process is scanned at start, after a reload,
  when events were lost, and every :data:`RESCAN_INTERVAL_S` (at least ``reconcile_interval``).
  On a systemd host (cgroup v2), a process in its user's own logind slice stays there: the
  slice is the user's *login session*, a task whose limits systemd writes
  (:class:`~governor.cgroups.systemd.SliceDriver`), so logind keeps tracking it.

Killing the daemon never kills a task: on start it re-adopts every task whose record and
populated cgroup it finds, and forgets the rest. Under systemd it reports READY, STATUS,
RELOADING and WATCHDOG through :class:`~governor.notify.Notifier`.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import gc
import logging
import os
import resource
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

import psutil

from governor.cgroups.driver import Driver
from governor.cgroups.hierarchy import Hierarchy, Location
from governor.cgroups.limits import CgroupLimits
from governor.cgroups.systemd import SliceDriver
from governor import access
from governor.accounting import ENDED_KEPT, STOP, TIME_LIMIT, Ended, exit_words, reason_of
from governor.admission import Waiting, admit
from governor.config import Config
from governor.daemons import DaemonEntry, Registry
from governor.drf import progressive_filling
from governor.errors import CgroupError, CgroupWriteError, GovernorError, RequestError
from governor.events import ExitWatcher
from governor.exits import exit_status, kernel_keeps_exit_status
from governor.explain import explain
from governor.limits import (SATURATION, SESSION_PREFIX, cpu_saturated, group_limits, held_login_limits,
                             inside_root, is_login_cgroup, root_limits, task_limits)
from governor.model import DEMAND_MET, Allocation, GroupDemand
from governor.notify import Notifier
from governor.protocol import (ExplainRequest, LaunchRequest, Peer, PsRequest, ReloadRequest, SetWeightRequest,
                               StatusRequest, StopRequest, WatchRequest, default_name)
from governor.ps import PROCESSES_SHOWN, processes, task_rows
from governor.queue import Entry, queue_view
from governor.procevents import FORK, UID, ProcessEvents
from governor.server import ControlServer
from governor.sessions import NOBODY_UID, SessionOwners, login_uid_min
from governor.state import SHOWN_COMMAND_CHARS, Task, Tasks, TaskStore, login_id, session_id
from governor.status import StatusReply, build_status
from governor import vocabulary
from governor.units import format_amount
from governor.usage import Sample, usage

log = logging.getLogger("governor.daemon")
EVENTS_KEPT = 50
# The safety net behind the process events (which say when they lost some): a pass over every
# process costs about 5 µs each natively, 15× that in an emulated VM.
RESCAN_INTERVAL_S = 30.0
# A rescan walks every pid again while a walk moved some, at most this many times.
RESCAN_PASSES = 5
# Processes remembered as settled (a dict lookup per exec and fork instead of /proc reads);
# past this many the memory is cleared and rebuilt from events.
SETTLED_KEPT = 1 << 16
# A process moved into a session this recently does not vouch for children whose fork events
# come now: they may have been forked before the move (events arrive within milliseconds; a
# backlog older than this overflows the buffer, and a rescan follows).
MOVED_DISTRUST_S = 1.0
# Task cgroups sampled per tick: groups and login sessions (the hold needs them) every tick,
# tasks in turn. Reading all of 1,000 tasks every second took 20 % of a core (scripts/bench).
SAMPLED_TASKS = 200
# Cgroups read in one go by a periodic pass (sample, reconcile) before the event loop serves
# others: ~3 ms natively. Sampling 300 cgroups at once held it for 50 ms (scripts/bench), a
# launch meanwhile waiting as long.
STEP = 25
# Tasks checked per reconcile pass, in turn (their exits are watched; this catches a miss).
RECONCILED_TASKS = 1000
# How often, and how many times, to ask how an ended task's launched process exited (its
# parent reaps it a moment after the task's cgroup empties).
EXIT_STATUS_RETRY_S = 0.25
EXIT_STATUS_TRIES = 8
# Pidfds held for exit statuses, at most this share of the open-file limit: every cgroupfs
# read needs a descriptor too, and a daemon out of them cannot tell an ended task from a live
# one (a benchmark of 10,000 tasks under a limit of 20,000 stalled so: a v1 exit watch and an
# exit-status pidfd per task). Past it a task's exit status is unknown.
EXIT_STATUS_FD_SHARE = 4
# Least time between two settles: under a storm the events of these milliseconds fold into one
# settle (one refill, not one per turn of the event loop); a sparse event settles at once.
SETTLE_GAP_S = 0.005
# Sessions that ended sooner than this after they started are logged, not kept for ps --ended.
SHORT_SESSION_S = 10.0
# Distinct task demands whose caps are kept (tasks that declare the same share one object).
TASK_CAPS_KEPT = 1024
# Young objects collected every 50,000 allocations instead of 700 (see serve()).
GC_THRESHOLDS = (50_000, 20, 20)


class Daemon:
    """Serve requests, follow exits, admit waiting tasks, keep every group at its guarantee.

    Args:
        config: the config in force; ``config_source`` is its file (or ``"<embedded default>"``).
        load_config: reads ``config_source`` again, for reload (raises ConfigError).
        hierarchy: governor's cgroup root and driver.
        store: task records under the state directory.
        host_cpus: CPU numbers this host offers (``os.sched_getaffinity``).
        host_memory: bytes of memory on the host.
        resolve_device: block device path → whole-disk ``MAJ:MIN`` (raises GovernorError).
        metrics: optional sink with ``refill(seconds)``, ``event(kind)``, ``write_error()``,
            ``admitted(waited_seconds)``, and ``serve()``/``close()``, which serve scrapes on the
            event loop (:class:`governor.metrics.Metrics`; its gauges read :meth:`status`).
        uid_min: the first login uid (:func:`~governor.sessions.login_uid_min`); lower uids
            never have a session.
        slices: writes limits on logind's user slices through systemd, on a systemd host with
            cgroup v2; None elsewhere (processes in login sessions are then left alone).
        host_pids: every process id on the host, for the sessions' rescan (``psutil.pids``).
        members: a config → its groups' users on this host (:func:`governor.access.members`).
        registry: this host's governor daemons (:mod:`governor.daemons`): this daemon claims the
            sessions there and never moves a process out of another's root; None (tests on a
            fake hierarchy): no other daemon is known.
    """

    def __init__(self, config: Config, config_source: str, hierarchy: Hierarchy, store: TaskStore, *,
                 host_cpus: list[int], host_memory: int, resolve_device: Callable[[str], str],
                 load_config: Callable[[], Config] | None = None, metrics=None, notifier: Notifier | None = None,
                 uid_min: int | None = None, slices: SliceDriver | None = None,
                 host_pids: Callable[[], Iterable[int]] = psutil.pids, registry: Registry | None = None,
                 members: Callable[[Config], dict[str, list[str]]] | None = None):
        self.host_pids = host_pids
        self.find_members = members or (lambda config: access.members(config, self.uid_min, NOBODY_UID))
        self.registry = registry
        self.socket_path = ""
        self.served = False  # once it served: a start refused before leaves nothing (cli/daemon_cmd.py)
        self.config_source = config_source
        self.slices = slices
        self.uid_min = login_uid_min() if uid_min is None else uid_min
        self.hierarchy = hierarchy
        self.store = store
        self.cpus = host_cpus
        self.host_memory = host_memory
        self.resolve_device = resolve_device
        self.load_config = load_config
        self.metrics = metrics
        self.notifier = notifier or Notifier({})
        self._use(config)
        self.tasks = Tasks()
        self.queue: dict[str, Entry] = {}
        self.admission = None
        self.allocation: Allocation | None = None
        self._guarantees: dict[str, CgroupLimits] = {}  # the last plan, whose weights a refill keeps where it can
        self.cpu_saturated = False  # every group wants all of its CPU guarantee: each is held to it
        self._satisfied: dict[str, float] = {}  # groups that used less while held: their use then
        self.filling: dict = {"at": None, "trigger": "start", "duration_ms": 0.0, "files_written": 0}
        self.usage: dict[str, dict[str, float]] = {}
        self.events: deque[dict] = deque(maxlen=EVENTS_KEPT)
        self.started = time.time()
        self._samples: dict[str, Sample] = {}
        self._turns: dict[str, int] = {}  # periodic work done in turn → where it starts next
        self._watcher: ExitWatcher | None = None
        self._process_events: ProcessEvents | None = None
        self._closing = False
        self._batch: _Batch | None = None  # events waiting for the next settle
        self._refilled_at = 0.0  # time.perf_counter() when the last refill began
        self._settled_at = 0.0  # time.perf_counter() when the last batch was settled
        self._changes = 0  # counts what changes the status: an event, a sample
        self._status: tuple[int, dict] | None = None  # the status reply built at that count
        self._status_tasks: dict[str, tuple] = {}  # its task entries, kept while unchanged
        self._status_json: dict[int, tuple[dict, str]] = {}  # and their JSON, once encoded
        self.ended: deque[Ended] = deque(maxlen=ENDED_KEPT)  # ended tasks, oldest first
        self._ending: dict[str, tuple[str, str | None]] = {}  # tasks the daemon killed → why, by whom
        self._time_limits: dict[str, asyncio.TimerHandle] = {}  # task → the timer that ends it
        self._pidfds: dict[str, int] = {}  # task → a pidfd of its launched process, for its exit status
        self._unsaved: set[str] = set()  # sessions governed whose records could not be written yet
        self._exit_statuses = kernel_keeps_exit_status()
        self._pidfds_kept = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // EXIT_STATUS_FD_SHARE

    def _use(self, config: Config) -> None:
        """Put ``config`` in force (capacity, devices, weights); raises before changing anything.
        Sessions turned on claim them for this daemon (refused while another holds them)."""
        capacity = config.capacity(float(len(self.cpus)), self.host_memory)
        io_devices = {device.name: self.resolve_device(device.device) for device in config.io_devices}
        io_sharing = {name: self.hierarchy.io_sharing(disk) for name, disk in io_devices.items()}
        if self.registry is not None:
            if config.sessions.enabled:
                self.registry.claim_sessions(self._entry())
            else:
                self.registry.release_sessions()
        self.config, self.capacity, self.io_devices, self.io_sharing = config, capacity, io_devices, io_sharing
        self.weights: dict[str, float] = {}
        self.owners = SessionOwners(config, self.uid_min)
        self._members = self.find_members(config)  # group → its users today (status, floors)
        self._explicit = {rule.name for rule in config.groups}
        # Caps follow from the demand alone: tasks that declare the same share one object.
        self._task_caps = functools.lru_cache(maxsize=TASK_CAPS_KEPT)(
            lambda demand: task_limits(dict(demand), io_devices=io_devices,
                                       memory_mode=config.memory_mode(self.hierarchy.mode)))
        warning = config.soft_memory_warning(self.hierarchy.mode)
        if warning:
            log.warning("%s: %s", config.file, warning)
        self._refused: set[int] = set()  # uids whose login session systemd would not limit
        self._settled: dict[int, None] = {}  # pids that need nothing until their uid changes
        self._moved: dict[int, float] = {}  # pids moved into sessions → when (time.monotonic())

    def _entry(self) -> DaemonEntry:
        """This daemon as the others see it (:mod:`governor.daemons`)."""
        return DaemonEntry(os.getpid(), self.hierarchy.root, self.config_source, self.socket_path,
                           self.hierarchy.proc_key, self.hierarchy.proc_root)

    def _foreign(self, location: Location) -> DaemonEntry | None:
        """The other governor daemon whose cgroup root holds a process at ``location``, if any."""
        if location.rel is not None or self.registry is None or location.paths is None:
            return None
        return self.registry.owner(location.paths)

    # ── requests ──────────────────────────────────────────────────────────────────────────

    async def handle(self, request, peer: Peer) -> dict:
        """The control server's handler for one-reply operations (:mod:`governor.protocol`)."""
        if isinstance(request, StatusRequest):
            return self._status_reply()
        if isinstance(request, ExplainRequest):
            return {"explain": self.explain()}
        who = access.identify(peer.uid, peer.gid)
        if isinstance(request, PsRequest):
            return self.ps(request, who)
        if isinstance(request, StopRequest):
            return self.stop(request.tasks, who)
        if isinstance(request, ReloadRequest):
            access.require_admin(self.config, who, "reload")
            return {"reloaded": {"config": self.reload(f"reload by {who.user}")}}
        if isinstance(request, SetWeightRequest):
            access.require_admin(self.config, who, "set-weight")
            return self.set_weight(request.group, request.weight, who.user)
        raise RequestError("unknown_op", f"operation {type(request).__name__} is not served")

    def stream(self, request, peer: Peer) -> AsyncIterator[dict]:
        """The control server's handler for streamed operations: ``watch`` and ``launch``."""
        if isinstance(request, LaunchRequest):
            return self.launch(request, peer)
        return self.watch(request, peer)

    async def watch(self, request: WatchRequest, peer: Peer) -> AsyncIterator[dict]:
        """A status snapshot now and every ``request.interval`` seconds (``watch``)."""
        while True:
            yield self._status_reply()
            await asyncio.sleep(request.interval)

    async def launch(self, request: LaunchRequest, peer: Peer) -> AsyncIterator[dict]:
        """Govern the caller's own pid as a new task: start it when its memory fits, else queue
        it and yield ``{"queued": {...}}`` (see :func:`governor.queue.queue_view`) whenever its
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
        who = access.identify(peer.uid, peer.gid)
        group = access.launch_group(self.config, who, request.group)
        demand = access.task_demand(self.config, self.capacity, request.demand)
        # Where the asker is now, never what its pid was before (a pid that wrapped round to an
        # old task's launch pid got that task, another user's, and stayed ungoverned itself).
        outer = self._task_of(self._where_launching(request.pid))
        if outer is not None and outer.pid == request.pid:
            # Its client lost the reply (a daemon restart) and asked again: it already runs.
            yield self._started_reply(outer)
            return
        if outer is not None:
            # `governor run` inside a task (a script that uses it, run with it): the process
            # stays in the task it is in, whose demand already counts; a second task would
            # count it twice.
            yield {**self._started_reply(outer), "nested": True}
            return
        self._check_task_limit(peer.uid, who.user)
        task = Task(self.store.new_id(), group, request.pid, peer.uid, who.user, tuple(request.command), demand,
                    time.time(), request.name or default_name(request.command), request.time_limit)
        entry = Entry(task, time.time(), peer.pidfd)
        self.queue[task.id] = entry
        try:
            await asyncio.shield(self._settle_soon(f"launch of task {task.id}"))
            if not entry.decided and not request.wait:
                entry.decide(error=RequestError("would_wait", self._waiting_line(task.id)))
            elif not entry.decided:
                self._event("queued", f"task {task.id} queued: user {who.user}, group {group}, "
                                      f"demand {_vector(demand)}; {self._waiting_line(task.id)}")
            shown = None
            while not entry.decided:
                entry.wake.clear()  # before the yield: a change while the client reads still wakes us
                place = self._place(task.id)
                if place != shown:
                    shown = place
                    yield {"queued": place}
                await entry.wake.wait()
            if entry.error is not None:
                raise entry.error
            yield entry.reply
        finally:
            self._changes += 1
            if self.queue.pop(task.id, None) is not None and not entry.decided and not self._closing:
                self._event("left_queue", f"task {task.id} left the queue (its client went away)")
                self._settle_soon(f"task {task.id} left the queue", refill=False)

    def _where_launching(self, pid: int) -> Location:
        """Where the launching process ``pid`` is. A process in another governor daemon's
        cgroups is refused: taken out, its task would escape its caps, and that daemon's
        ``governor stop`` would kill nothing.

        Raises:
            RequestError: ``forbidden``, naming the other daemon's socket.
        """
        try:
            location = self.hierarchy.locate(pid)
        except CgroupError:
            return Location(None, None)  # gone: the move will say so
        other = self._foreign(location)
        if other is not None:
            raise RequestError("forbidden", f"process {pid} is governed by another governor daemon ({other.describe()}); "
                                            f"launch through that one: governor run --socket {other.socket} …")
        return location

    def _check_task_limit(self, uid: int, user: str) -> None:
        """Refuse a launch by ``uid`` (not root) that already has ``max_tasks_per_user``
        tasks running and queued: one user must not fill the daemon for everyone."""
        limit = self.config.max_tasks_per_user
        if uid == 0:
            return
        held = self.tasks.launched_by(uid) + sum(1 for e in self.queue.values() if e.task.uid == uid)
        if held >= limit:
            raise RequestError("too_many", f"{user} already has {held} tasks running or queued, the most one user "
                                           f"may ([daemon] max_tasks_per_user = {limit})")

    def ps(self, request: PsRequest, who: access.Identity) -> dict:
        """``governor ps``: the caller's tasks, running and queued (``{"tasks": [...]}``, see
        :func:`governor.ps.task_rows`), or its ended records (``{"ended": [...]}``, see
        :meth:`governor.accounting.Ended.to_json`); everyone's with ``all``.

        Raises:
            RequestError: ``forbidden``, ``all`` asked by someone not root nor an admin.
        """
        if request.all and not access.is_admin(self.config, who):
            raise RequestError("forbidden", f"everyone's tasks (--all) are for root and admins; user {who.user} "
                                            "sees their own")

        def shown(uid: int, task_id: str) -> bool:
            return (request.all or uid == who.uid) and request.task in (None, task_id)

        if request.ended:
            return {"ended": [record.to_json(command_chars=None if record.task.uid == who.uid else SHOWN_COMMAND_CHARS)
                              for record in self.ended if shown(record.task.uid, record.task.id)]}
        positions = {item["task"]: item for item in queue_view(self.queue, self.admission)}
        return {"tasks": task_rows([t for t in self.tasks if shown(t.uid, t.id)],
                                   [e for e in self.queue.values() if not e.decided and shown(e.task.uid, e.task.id)],
                                   allocation=self.allocation, usage=self.usage, positions=positions,
                                   processes=self._processes, asker=who.uid)}

    def _processes(self, task: Task) -> tuple[list[dict], int]:
        """The first :data:`~governor.ps.PROCESSES_SHOWN` processes in ``task``'s cgroup, and
        how many it holds (a login session's live in logind's scopes below its slice: none
        listed). A name costs a /proc read: only those listed are looked up."""
        if task.is_login:
            return [], 0
        try:
            pids = self.hierarchy.driver.pids(task.cgroup)
        except CgroupError:
            return [], 0
        return processes(pids[:PROCESSES_SHOWN]), len(pids)

    def stop(self, task_ids: Iterable[str], who: access.Identity) -> dict:
        """End each task's whole process tree (``governor stop``), or take a queued one out
        of the queue (its client is answered ``stopped``). Every id is checked before any is
        stopped.

        Returns:
            ``{"stopped": [id, ...]}``.

        Raises:
            RequestError: ``not_found`` (no such task running or queued), ``forbidden`` (the
                task is another user's and ``who`` is not root nor an admin, or it is a
                user's session), ``unavailable`` (the kernel refused the kill).
        """
        admin = access.is_admin(self.config, who)
        chosen = []
        for task_id in task_ids:
            entry = self.queue.get(task_id)
            task = self.tasks.get(task_id) or (entry.task if entry is not None else None)
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
        failed = []
        for task, entry in chosen:
            if self.tasks.get(task.id) is None and entry is not None:
                del self.queue[task.id]
                entry.decide(error=RequestError("stopped", f"task {task.id} was stopped by {who.user} before "
                                                           "it started"))
                self._event("task_stopped", f"task {task.id} ({task.name}) stopped by {who.user} while queued")
                self._settle_soon(f"task {task.id} left the queue", refill=False)
            elif not self._end(task, STOP, who.user):
                failed.append(task.id)
        if failed:
            done = [task.id for task, _ in chosen if task.id not in failed]
            raise RequestError("unavailable", f"the kernel refused to end task(s) {', '.join(failed)} (the daemon "
                                              f"tries again at its next check; stopped: {', '.join(done) or 'none'}); "
                                              "see the daemon's log")
        return {"stopped": [task.id for task, _ in chosen]}

    def _end(self, task: Task, reason: str, by: str | None) -> bool:
        """Kill ``task``'s whole process tree (v2 ``cgroup.kill``; v1 SIGKILL round by round)
        and remember why, for its ended record. Returns False if the kernel refused."""
        if not self._alive(task):  # it ended on its own first: its record must say so
            self.check([task.id], "exit")
            return True
        first = task.id not in self._ending
        self._ending.setdefault(task.id, (reason, by))
        if first:
            why = f"stopped by {by}" if reason == STOP else "its time limit is reached"
            self._event("task_stopping", f"{task.label} ({task.name}) ends: {why}")
        try:
            self.hierarchy.driver.kill(task.cgroup)
        except CgroupError as error:
            if not error.vanished:
                self._event("error", f"cannot end {task.label}: {error}", logging.ERROR)
                return False
        self.check([task.id], reason.replace("_", " "))
        return True

    def _arm_time_limit(self, task: Task) -> None:
        """End ``task`` when its time limit is reached (a re-adopted task: counted from its start)."""
        if task.time_limit is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # the daemon's methods called directly: no loop to keep the time
        delay = max(0.0, task.started + task.time_limit - time.time())
        self._time_limits[task.id] = loop.call_later(delay, self._time_limit_reached, task.id)

    def _time_limit_reached(self, task_id: str) -> None:
        self._time_limits.pop(task_id, None)
        task = self.tasks.get(task_id)
        if task is not None:
            self._end(task, TIME_LIMIT, None)

    def explain(self) -> dict:
        """The live filling with its trace (``governor explain``), and the queue."""
        demands = self.tasks.demands()
        groups = [GroupDemand(g, d, weight=self._weight(g), tasks=1) for g, d in demands.items()]
        traced = progressive_filling(self.capacity, groups, trace=True) if groups else None
        runs = {group: (sum(not t.is_session for t in tasks),
                        list(dict.fromkeys(t.user for t in tasks if t.is_session)))  # login + session: once
                for group, tasks in self.tasks.groups().items()}
        return explain(traced, self.capacity, demands, queue_view(self.queue, self.admission), runs,
                       configured=self._configured())

    def reload(self, trigger: str) -> str:
        """Re-read the config file and put it in force; the old one stays if the new one is bad.
        Waiting tasks that can never fit the new capacity are refused.

        Raises:
            RequestError: ``invalid_config`` with the file, key and reason.
        """
        self.notifier.reloading()
        try:
            if self.load_config is None:
                raise RequestError("invalid_config", "the daemon runs on the embedded default: no file to reload")
            try:
                self._use(self.load_config())
            except GovernorError as error:
                self._event("error", f"reload refused, the old config stays in force: {error}", logging.ERROR)
                raise RequestError("invalid_config", str(error)) from error
            self._event("reload", f"config {self.config_source} reloaded ({trigger})")
            for entry in list(self.queue.values()):
                try:
                    access.check_fits(entry.task.demand, self.capacity)
                except RequestError as refused:
                    del self.queue[entry.task.id]
                    entry.decide(error=refused)
            self._settle("reload")
            if self._process_events is None and self._watcher is not None:  # sessions turned on while serving
                self._follow_processes()
            self.rescan("reload")
            return self.config_source
        finally:
            self.notifier.send("READY=1", f"STATUS={self._summary()}")

    def set_weight(self, group: str, weight: float, user: str) -> dict:
        if not access.known_group(self.config, group):
            raise RequestError("not_found", f"no group {group!r} in the config")
        self.weights[group] = weight
        self._event("weight", f"{user} set the weight of {group} to {weight:g} (until the next reload)")
        self._settle(f"weight of {group}")
        return {"group": group, "weight": weight}

    # ── admission, progressive filling and enforcement ────────────────────────────────────

    def _settle_soon(self, trigger: str, *, refill: bool = True, since: float | None = None) -> asyncio.Future | None:
        """Settle once for every event of this turn of the event loop, or of the
        :data:`SETTLE_GAP_S` since the last settle: a storm of launches, or exits reported at
        once, is one admission and one refill, not one each; the delay is bounded by one turn
        plus that gap (a busy loop batches more). Without a running loop (the daemon's methods
        called directly), settle now.

        Args:
            trigger: what happened, for the log and status (``launch of task 7``).
            refill: False when nothing but the queue changed (a client left it).
            since: ``time.perf_counter()`` when the event was seen (default: now), from which
                the refill's delay is measured.

        Returns:
            A future done once settled, which raises what settling raised (also logged); None
            when settled now.
        """
        since = time.perf_counter() if since is None else since
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._settle(trigger, refill=refill, since=since)
            return None
        batch = self._batch
        if batch is None or batch.done.get_loop() is not loop:
            # (A batch of a loop that stopped before its turn, as when the daemon's methods
            # are driven by one asyncio.run each, never ran: its events settle with these.)
            batch = self._batch = _Batch(loop.create_future(), batch.triggers if batch else [],
                                         bool(batch and batch.refill), since, since)
            wait = self._settled_at + SETTLE_GAP_S - time.perf_counter()
            if wait > 0:
                loop.call_later(wait, self._settle_batch)
            else:
                loop.call_soon(self._settle_batch)
        batch.triggers.append(trigger)
        batch.refill |= refill
        batch.since = min(batch.since, since)
        batch.latest = time.perf_counter()
        return batch.done

    def _settle_batch(self) -> None:
        batch, self._batch = self._batch, None
        # A refill since the last of these events (a reload's, a hold's) already counted them.
        refill = batch.refill and self._refilled_at < batch.latest
        try:
            self._settle(_combined(batch.triggers), refill=refill, since=batch.since)
        except Exception as error:
            log.exception("settling after %s failed", _combined(batch.triggers))
            batch.done.set_exception(error)
            batch.done.exception()  # logged above: only a launch that awaits it raises it again
        else:
            batch.done.set_result(None)
        finally:
            self._settled_at = time.perf_counter()

    def _settle(self, trigger: str, *, refill: bool = True, since: float | None = None) -> None:
        """Admit the waiting tasks that fit (discrete DRF on memory), start them, refill the
        groups once, and tell the clients still waiting where they stand. Nothing starts while
        the daemon stops: its waiting clients will ask the next one."""
        if self._closing:
            return
        self._changes += 1  # the queue changes, even when nothing is logged
        waiting = [Waiting(e.task.id, e.task.group, e.task.demand) for e in self.queue.values() if not e.decided]
        counts = self.tasks.counts()
        weights = {w.group: self._weight(w.group) for w in waiting}
        held = self._reserved()
        running = {g: {**d, **held.get(g, {})} for g, d in self.tasks.demands().items()}
        self.admission = admit(self.capacity, running, counts, weights, waiting)
        starting = [self.queue[task_id] for task_id in self.admission.admitted]
        if starting and self.cpu_saturated:
            # A new task's cap may exceed its group's held quota, which cgroup v1 refuses; the
            # next sample decides again.
            self._hold(False, "a task starts: groups are no longer held to their CPU guarantees")
        for entry in starting:
            self._create(entry)
        started = [e for e in starting if not e.decided]
        if refill or started:
            self.refill(trigger, since=since)
        moved = [entry for entry in started if self._move_in(entry)]
        if len(moved) < len(started):
            self.refill(f"failed start after {trigger}")
        for entry in starting:  # decided: the queue holds only what waits
            self.queue.pop(entry.task.id, None)
        for entry in self.queue.values():
            entry.wake.set()

    def _create(self, entry: Entry) -> None:
        """Make an admitted task's cgroup with its caps; on failure refuse its launch. A task
        that waited starts now (its time limit counts from here)."""
        task = entry.task = replace(entry.task, started=time.time())
        try:
            self.hierarchy.prepare(task.cgroup)
            self.hierarchy.driver.apply(task.cgroup, self._caps(task))
        except GovernorError as error:
            self._remove_cgroup(task)
            entry.decide(error=RequestError("unavailable", str(error)))
            return
        self.tasks.add(task)

    def _move_in(self, entry: Entry) -> bool:
        """Move an admitted task's pid into its cgroup and answer its client.

        The pid is the client's only while the client's process lives: it is checked before the
        move, and after it (had the process ended meanwhile, the pid moved may be another's)."""
        task = entry.task
        try:
            _still_running(entry)
            # The record first: a daemon killed after the move must find it, or the process
            # would run on in a cgroup nobody governs (killed before the move, the record of
            # an empty cgroup is dropped at the restart).
            self.store.save(task)
            self.hierarchy.driver.move(task.cgroup, task.pid)
            _still_running(entry)
        except GovernorError as error:
            self._forget(task)
            if not isinstance(error, RequestError):
                code = "bad_request" if isinstance(error, CgroupWriteError) and error.errno == errno.ESRCH else "unavailable"
                error = RequestError(code, str(error))
            entry.decide(error=error)
            return False
        self._watch(task)
        self._arm_time_limit(task)
        if entry.pidfd is not None and self._exit_statuses and len(self._pidfds) < self._pidfds_kept:
            try:
                self._pidfds[task.id] = os.dup(entry.pidfd)
            except OSError as error:
                log.warning("task %s: no exit status will be known: %s", task.id, error)
        waited = time.time() - entry.queued_at
        if self.metrics:
            self.metrics.admitted(waited)
        self._event("task_started", f"task {task.id} started: pid {task.pid}, user {task.user}, group {task.group}, "
                                    f"demand {_vector(task.demand)}" + (f", after {waited:.1f} s in the queue"
                                                                        if waited >= 0.1 else ""))
        entry.decide(reply=self._started_reply(task))
        return True

    def _task_of(self, location: Location) -> Task | None:
        """The launched task (not a session) a process at ``location`` runs in, if any."""
        where = location.rel
        if where is None or not _in_a_task(where):
            return None
        return self.tasks.get(where.split("/")[1].removeprefix("task-"))

    def _started_reply(self, task: Task) -> dict:
        return {"task": task.id, "group": task.group, "cgroup": str(self.hierarchy.path(task.cgroup)),
                "limits": self.hierarchy.driver.in_force(task.cgroup)}

    def _caps(self, task: Task) -> CgroupLimits:
        return self._task_caps(tuple(task.demand.items()))

    def refill(self, trigger: str, *, since: float | None = None) -> None:
        """Re-run progressive filling over the running tasks and write the guarantees that
        changed (the root and group files; task caps never change, but a login session's CPU
        quota follows the hold, its group's quota not covering it). ``since``
        (``time.perf_counter()``) is when the event it answers was seen: the delay from then to
        the last write is logged and kept in ``filling["delay_ms"]``."""
        start = self._refilled_at = time.perf_counter()
        demands = self.tasks.demands()
        groups = [GroupDemand(g, d, weight=self._weight(g), tasks=1) for g, d in demands.items()]
        self.allocation = progressive_filling(self.capacity, groups) if groups else None
        got = self.allocation.groups if self.allocation else {}
        logins = self.tasks.logins()
        outside: dict[str, dict[str, float]] = {}
        for login in logins:
            total = outside.setdefault(login.group, {})
            for resource, amount in login.demand.items():
                total[resource] = total.get(resource, 0.0) + amount
        fractions = {g: float(a.tasks) for g, a in got.items()}
        allocations, inside = inside_root({g: a.allocation for g, a in got.items()}, demands, fractions, outside)
        # cgroup v1 refuses a parent quota below a child's; v2 takes it, and must: a group whose
        # login session runs outside the root would otherwise keep its task's whole cap.
        largest = ({g: max(t.demand.get("cpu", 0.0) for t in tasks if not t.is_login)
                    for g, tasks in self.tasks.groups().items() if g in inside}
                   if self.cpu_saturated and self.hierarchy.mode == "v1" else None)
        guarantees = group_limits(
            self.capacity, allocations, inside,
            io_devices=self.io_devices, io_sharing=self.io_sharing, cpu_mode=self.config.cpu_enforcement,
            cpus=self.cpus, previous=self._guarantees, met={g for g, a in got.items() if a.stop == DEMAND_MET},
            saturated=self.cpu_saturated, largest_task_cpu=largest,
        )
        self._guarantees = guarantees
        planned = {"": root_limits(self.capacity), **guarantees}
        report = self.hierarchy.driver.apply_plan(planned)
        if logins and self.slices is not None:
            held = {login.cgroup: held_login_limits(self._caps(login), login.demand.get("cpu", 0.0),
                                                    fractions.get(login.group, 0.0)) if self.cpu_saturated
                    else self._caps(login) for login in logins}
            more = self.slices.apply_plan(held)
            report.written += more.written
            report.errors += more.errors
        for error in report.errors:
            if self.metrics:
                self.metrics.write_error()
            self._event("error", f"{error}; the value in force stays", logging.ERROR)
        end = time.perf_counter()
        seconds = end - start
        delay_ms = (end - (start if since is None else since)) * 1000
        self.filling = {"at": time.time(), "trigger": trigger, "duration_ms": seconds * 1000,
                        "files_written": report.written, "delay_ms": delay_ms}
        if self.metrics:
            self.metrics.refill(seconds)
        shares = ", ".join(f"{g} {a.dominant_share:.1%}" for g, a in got.items()) or "no tasks"
        self._event("refill", f"refill after {trigger}: {shares} ({seconds * 1000:.2f} ms, "
                              f"{report.written} files written, {delay_ms:.2f} ms after the event)")
        self.notifier.send(f"STATUS={self._summary()}")

    def _hold(self, saturated: bool, why: str) -> None:
        """Hold every group to its CPU guarantee, or let it borrow again, and refill."""
        self.cpu_saturated = saturated
        self._event("saturation", why)
        self.refill("saturation" if saturated else "slack")

    def _driver(self, rel: str) -> Driver:
        """The driver of cgroup ``rel``: systemd's for a login session's slice, else governor's."""
        return self.slices if self.slices is not None and is_login_cgroup(rel) else self.hierarchy.driver

    def _configured(self) -> dict[str, dict]:
        """Every group of this host (the config's, one per ``"*"`` user, and any running a
        task) → its ``weight`` (set-weight's where given), ``floor`` over all of them
        (:func:`governor.vocabulary.floors`) and ``members`` as this host resolves them."""
        weights = {g: self._weight(g) for g in access.configured_weights(self.config, self._members)}
        for group in self.tasks.groups():
            weights.setdefault(group, self._weight(group))
        floor = vocabulary.floors(weights)
        return {g: {"weight": w, "floor": floor[g], "members": self._members.get(g, [g] if g not in self._explicit
                                                                                 else [])}
                for g, w in weights.items()}

    def _reserved(self) -> dict[str, dict[str, float]]:
        """Group → what its running tasks hold in the admission count
        (:func:`governor.vocabulary.reserved`): declared memory, and a session's use."""
        held = {g: vocabulary.reserved(d) for g, d in self.tasks.demands().items()}
        for session in self.tasks.sessions():
            declared = vocabulary.reserved(session.demand)
            using = vocabulary.reserved(session.demand, session=True, used=self.usage.get(session.cgroup))
            group = held.setdefault(session.group, {})
            for resource, amount in declared.items():
                group[resource] = group.get(resource, 0.0) - amount + using.get(resource, 0.0)
        return held

    def _weight(self, group: str) -> float:
        weight = self.weights.get(group, self.config.weight_of(group))
        return 1.0 if weight is None else float(weight)

    def _place(self, task_id: str) -> dict:
        view = queue_view(self.queue, self.admission)
        return next((item for item in view if item["task"] == task_id), {"task": task_id, "position": 0})

    def _waiting_line(self, task_id: str) -> str:
        place = self._place(task_id)
        return f"{place.get('reason', 'memory: waits')}; queue position {place['position']}"

    # ── sessions ──────────────────────────────────────────────────────────────────────────

    def _follow_processes(self) -> None:
        """Subscribe to fork, exec and uid events (the kernel's process-events connector);
        without it, only the periodic rescan moves processes into sessions."""
        if not self.owners.enabled:
            return
        try:
            self._process_events = ProcessEvents()
        except OSError as error:
            self._event("error", f"sessions: the kernel's process events are unavailable ({error.strerror}); "
                                 f"processes join sessions only at the rescan every "
                                 f"{max(self.config.reconcile_interval_s, RESCAN_INTERVAL_S):g} s", logging.WARNING)
            return
        asyncio.get_running_loop().add_reader(self._process_events.fileno(), self._on_process_events)

    def _on_process_events(self) -> None:
        """One batch of process events. A process already settled (in a task, in its user's
        session or login slice, another daemon's, or not governed) stays so through an
        ``exec`` and passes it on to the children it forks: neither costs a /proc read. Only
        a uid change, or a fork of a process not known settled, is looked at again. (An exec
        storm of 5,000 commands in a session cost the daemon 1.33 s of CPU, twice the user's.)"""
        try:
            events, lost = self._process_events.read()
            now = time.monotonic()
            for kind, pid, other in events:
                if kind == FORK:
                    if other in self._settled and not self._moved_since(other, now - MOVED_DISTRUST_S):
                        self._settle_pid(pid)  # the child was forked where its parent is
                        continue
                    self.govern_process(other)  # a process that forks a successor and exits is caught
                    self.govern_process(pid)
                elif kind == UID or pid not in self._settled:
                    self.govern_process(pid, other)
            if lost:
                self._event("error", "sessions: process events were lost (the kernel's buffer overflowed); "
                                     "rescanning every process", logging.WARNING)
                self.rescan("lost events")
        except Exception:
            log.exception("handling process events failed")

    def rescan(self, trigger: str) -> int:
        """Move every process of a governed user that is in no task into its user's session.

        Returns:
            How many processes were moved.
        """
        if not self.owners.enabled or self._closing:
            return 0
        self._settled.clear()  # users, groups or the config may have changed
        moved, passes = 0, 0
        # Again while a pass moves any: a process that forks a successor and exits every few
        # milliseconds is missing from the pid list a pass walks.
        while passes < RESCAN_PASSES:
            found = sum(self.govern_process(pid) for pid in self.host_pids())
            moved, passes = moved + found, passes + 1
            if not found:
                break
        if moved:
            self._event("session", f"{moved} process(es) moved into sessions ({trigger})")
        return moved

    def _settle_pid(self, pid: int) -> None:
        """Remember that process ``pid`` needs nothing until its uid changes."""
        if len(self._settled) >= SETTLED_KEPT:
            self._settled.clear()  # looked at again from /proc: slower, never wrong
        self._settled[pid] = None

    def _moved_since(self, pid: int, since: float) -> bool:
        """Whether this daemon moved process ``pid`` after ``since`` (``time.monotonic()``): a
        child it forked before the move stayed where it was, and its fork event may come after."""
        moved = self._moved.get(pid)
        if moved is not None and moved < since:
            del self._moved[pid]
            return False
        return moved is not None

    def govern_process(self, pid: int, uid: int | None = None) -> bool:
        """Move process ``pid`` (real uid ``uid``, looked up when None) into its user's session,
        unless its user is not governed, or it already is in a task or that session. A process
        in its own user's logind slice stays there: that slice is the user's login session
        (made now if it is the first; left ungoverned without systemd's cgroup v2). Whether it
        is settled now is remembered for the next events (:meth:`_on_process_events`).

        Returns:
            Whether it was moved.
        """
        moved, settled = self._govern(pid, uid)
        if settled:
            self._settle_pid(pid)
        else:
            self._settled.pop(pid, None)
        if moved:
            if len(self._moved) >= SETTLED_KEPT:
                self._moved.clear()
            self._moved[pid] = time.monotonic()
        return moved

    def _govern(self, pid: int, uid: int | None) -> tuple[bool, bool]:
        """:meth:`govern_process`: whether ``pid`` was moved, and whether it is settled."""
        # Every exec on the host comes here: the uid an event gave, else the owner of
        # /proc/<pid> (its effective uid, one stat), rules out most at once. A process whose
        # effective uid is not governed but whose real uid is (a setuid program alice runs) was
        # forked in her session already.
        try:
            if self.owners.owner(self._effective_uid(pid) if uid is None else uid) is None:
                return False, True
            # The uid now, not the event's: a root process that took a user's uid for a moment
            # (runuser's parent does) and took its own back must stay where it is.
            uid = self._real_uid(pid)
        except (OSError, psutil.Error):
            return False, False  # gone already
        owner = self.owners.owner(uid)
        if owner is None:
            return False, True
        try:
            location = self.hierarchy.locate(pid)
        except CgroupError:
            return False, False  # gone already
        where, login_uid = location.rel, location.login_uid
        if self._foreign(location) is not None:
            return False, True  # another daemon's task: that daemon governs it
        user, group = owner
        if where is None and login_uid == uid:
            # logind tracks it (loginctl, logout): governed where it is, through systemd.
            if self.slices is not None and self.tasks.get(login_id(uid)) is None and uid not in self._refused:
                if self._session(uid, user, group, pid, login=True) is None:
                    self._refused.add(uid)  # not a systemctl per exec: until the next reload
            return False, True
        session = self.tasks.get(session_id(uid))
        if where is not None and (_in_a_task(where) or (session is not None and where == session.cgroup)):
            return False, True
        session = session or self._session(uid, user, group, pid)
        if session is None:
            return False, False
        try:
            self.hierarchy.driver.move(session.cgroup, pid)
        except CgroupError as error:
            if not (isinstance(error, CgroupWriteError) and error.errno == errno.ESRCH):
                log.warning("cannot move pid %d into the session of %s: %s", pid, user, error)
            return False, False
        return True, True

    @staticmethod
    def _effective_uid(pid: int) -> int:
        """The owner of ``/proc/<pid>``: the process's effective uid, in one stat (raises
        OSError when it is gone)."""
        return os.stat(f"/proc/{pid}").st_uid

    @staticmethod
    def _real_uid(pid: int) -> int:
        """Process ``pid``'s real uid now (raises psutil.Error when it is gone)."""
        return psutil.Process(pid).uids().real

    def _session(self, uid: int, user: str, group: str, pid: int, *, login: bool = False) -> Task | None:
        """Make the session of ``uid`` (cgroup, caps, record, refill), or with ``login`` its
        login session (its systemd user slice: caps through systemd, no cgroup made); None if
        it cannot be made. A record that cannot be written (a full state directory) does not
        stop it: governed unrecorded is better than ungoverned (the process would run past
        every cap), and the reconcile pass writes the record once it can."""
        demand = {resource: min(amount, self.capacity.get(resource, amount))
                  for resource, amount in self.config.session_demand().items()}
        session = Task(login_id(uid) if login else session_id(uid), group, pid, uid, user, (), demand, time.time())
        try:
            if not login:
                self.hierarchy.prepare(session.cgroup)
            self._driver(session.cgroup).apply(session.cgroup, self._caps(session))
        except GovernorError as error:
            try:
                if login:  # only what was set (e.g. before a record could not be saved)
                    self.slices.remove(session.cgroup)
                else:
                    self._remove_cgroup(session)
            except CgroupError as undone:
                log.warning("cannot undo the start of the session of %s: %s", user, undone)
            self._event("error", f"cannot start the session of {user}: {error}; its processes stay where they are"
                                 + (" (not tried again until a reload)" if login else ""), logging.ERROR)
            return None
        self._save_or_retry(session)
        self.tasks.add(session)
        self._watch(session)
        self._event("session_started", f"session of {user} started: group {group}, pid {pid}, "
                                       f"demand {_vector(demand)}"
                                       + (f", in {session.cgroup} (logind's, limits set through systemd)"
                                          if login else ""))
        if self.cpu_saturated:  # its cap may exceed its group's held quota, which v1 refuses
            self._hold(False, f"the session of {user} starts: groups are no longer held to their CPU guarantees")
        self.refill(f"session of {user} started")
        return session

    def _save_or_retry(self, task: Task) -> None:
        """Write ``task``'s record, or note it for the reconcile pass to write (logged)."""
        try:
            self.store.save(task)
        except GovernorError as error:
            self._unsaved.add(task.id)
            self._event("error", f"{task.label} is governed but its record is not written ({error}): a daemon "
                                 "restarted before it is would not re-adopt it; written again at each reconcile",
                        logging.ERROR)

    def _save_unsaved(self) -> None:
        for task_id in list(self._unsaved):
            task = self.tasks.get(task_id)
            try:
                if task is not None:
                    self.store.save(task)
            except GovernorError:
                return  # still full: the next pass tries again
            self._unsaved.discard(task_id)
            if task is not None:
                self._event("record", f"{task.label}: its record is written now")

    # ── exits ─────────────────────────────────────────────────────────────────────────────

    def _watch(self, task: Task) -> None:
        if self._watcher is None:
            return
        try:
            self._watcher.watch(task.id, self._driver(task.cgroup).events_path(task.cgroup), task.pid)
        except OSError:
            self.check([task.id], "exit")  # gone already: the reconcile pass would find it too

    def check(self, task_ids: Iterable[str], trigger: str, *, since: float | None = None) -> None:
        """Forget each of ``task_ids`` whose cgroup holds no process any more, then admit what
        now fits and refill once for all of them, and for whatever else this turn brought
        (``since``: when the exits were seen, ``time.perf_counter()``)."""
        ended = []
        for task_id in task_ids:
            task = self.tasks.get(task_id)
            if task is None:
                continue
            if self._alive(task):
                if trigger == "exit":
                    self._rewatch(task)
                if task.id in self._ending and trigger in ("exit", "reconcile"):
                    self._kill_again(task)
                continue
            stats = self._final_stats(task)
            reason, by = reason_of(task, self._ending.get(task.id), stats)
            pidfd = self._pidfds.pop(task.id, None)
            self._forget(task)
            record = Ended(task, time.time(), reason, by, stats)
            if not (task.is_session and record.ended - task.started < SHORT_SESSION_S):
                self.ended.append(record)  # (every `runuser …` is a session: short ones clutter ps --ended)
            self._learn_exit_status(record, pidfd)
            self._event("task_ended", record.line(trigger))
            ended.append(task.label)
        if len(ended) == 1:
            self._settle_soon(f"{trigger} of {ended[0]}", since=since)
        elif ended:
            self._settle_soon(f"{trigger} of {len(ended)} tasks", since=since)

    def _learn_exit_status(self, record: Ended, pidfd: int | None, tries: int = EXIT_STATUS_TRIES) -> None:
        """Fill in how the task's launched process exited, from its pidfd: known once its
        parent (the user's shell) reaped it, which may be a moment after the task's cgroup
        emptied, so it is asked again every :data:`EXIT_STATUS_RETRY_S` a few times; then the
        pidfd is closed."""
        if pidfd is None:
            return
        record.exit_status = exit_status(pidfd)
        if record.exit_status is None and tries > 1:
            try:
                asyncio.get_running_loop().call_later(EXIT_STATUS_RETRY_S, self._learn_exit_status, record, pidfd,
                                                      tries - 1)
                return
            except RuntimeError:
                pass  # the daemon's methods called directly: no loop to wait with
        os.close(pidfd)
        if tries < EXIT_STATUS_TRIES and record.exit_status is not None:
            log.info("%s: exit status %s", record.task.label, exit_words(record.exit_status))

    def _kill_again(self, task: Task) -> None:
        """A task the daemon ended still has processes (v1: one forked past every round):
        kill what is left."""
        try:
            self.hierarchy.driver.kill(task.cgroup)
        except CgroupError as error:
            if not error.vanished:
                log.warning("cannot end what is left of %s: %s", task.label, error)

    def _final_stats(self, task: Task):
        """The counters of ``task``'s cgroup as it ends (it still exists, empty), else those
        of its last sample, else None."""
        try:
            return self._driver(task.cgroup).read_stats(task.cgroup, peak=True)
        except CgroupError:
            sample = self._samples.get(task.cgroup)
            return sample.stats if sample is not None else None

    def _rewatch(self, task: Task) -> None:
        """Watch a process still in ``task`` once the one watched exited (v1, where the watcher
        follows a pid: a session outlives its first process, a task may outlive its command)."""
        driver = self.hierarchy.driver
        if self._watcher is None or driver.events_path(task.cgroup) is not None:
            return
        try:
            pids = driver.pids(task.cgroup)
        except CgroupError:
            return
        for pid in pids:
            self._watcher.unwatch(task.id)
            try:
                self._watcher.watch(task.id, None, pid)
                return
            except OSError:
                continue  # exited meanwhile: the next one

    def _alive(self, task: Task) -> bool:
        """Whether the task's cgroup holds a process. A cgroup that is gone is not; a read that
        failed otherwise (EMFILE, EIO) proves nothing, so the task is kept for the next look."""
        try:
            return self._driver(task.cgroup).populated(task.cgroup)
        except CgroupError as error:
            if error.vanished:
                return False
            log.warning("task %s kept: cannot tell whether it still runs: %s", task.id, error)
            return True

    def _forget(self, task: Task) -> None:
        if self._watcher is not None:
            self._watcher.unwatch(task.id)
        self._ending.pop(task.id, None)
        pidfd = self._pidfds.pop(task.id, None)
        if pidfd is not None:
            os.close(pidfd)
        timer = self._time_limits.pop(task.id, None)
        if timer is not None:
            timer.cancel()
        self.tasks.remove(task.id)
        self._unsaved.discard(task.id)
        self.store.delete(task.id)
        self._remove_cgroup(task)

    def _remove_cgroup(self, task: Task) -> None:
        """Remove the task's cgroup, and its group's once nothing of it is below the root (a
        login session's slice is systemd's: only its limits are reset)."""
        rels = [task.cgroup]
        if task.group not in self.tasks.inside():
            rels.append(task.group)
        for rel in rels:
            self.usage.pop(rel, None)
            self._samples.pop(rel, None)
            try:
                if rel == task.cgroup and task.is_login and self.slices is not None:
                    self.slices.reset(rel, self._caps(task))
                else:
                    self._driver(rel).remove(rel)
            except CgroupError as error:
                log.warning("cannot remove cgroup %s: %s", rel, error)

    def readopt(self) -> None:
        """Take back every task whose record and populated cgroup survive a restart; their
        caps are written again from their records (the same values)."""
        self.store.prepare()
        records, problems = self.store.load_all()
        for problem in problems:
            self._event("error", problem, logging.WARNING)
        for task in records:
            if task.is_login and self.slices is None:
                self.store.delete(task.id)  # not a systemd host (any more): nothing to take back
                continue
            self.tasks.add(task)
        for task in list(self.tasks):
            if self._alive(task):
                self._event("task_started", f"{task.label} re-adopted: pid {task.pid}, group {task.group}")
                self._arm_time_limit(task)
            else:
                self._forget(task)
        report = self.hierarchy.driver.apply_plan({t.cgroup: self._caps(t) for t in self.tasks if not t.is_login})
        for error in report.errors:
            self._event("error", f"re-adopting: {error}", logging.ERROR)
        self._clean_unrecorded({t.cgroup for t in records})

    def _clean_unrecorded(self, recorded: set[str]) -> None:
        """Task cgroups with no record: an empty one (a daemon killed between making it and
        saving its record) is removed, and so is a group left with nothing below it; one with
        processes (the state directory was lost) cannot be re-adopted without its declared
        demand, so it is named in the log rather than governed silently wrong, and its id is
        never given to a new task."""
        driver = self.hierarchy.driver
        try:
            cgroups = [f"{g}/{t}" for g in driver.children("") for t in driver.children(g)
                       if t.startswith(("task-", SESSION_PREFIX))]
        except CgroupError:
            return
        for rel in sorted(set(cgroups) - recorded):
            try:
                pids = driver.pids(rel)
                if not pids:
                    driver.remove(rel)
                    self._event("cleanup", f"removed cgroup {rel}: no record and no process (a daemon killed "
                                           "while starting it)", logging.WARNING)
            except CgroupError as error:
                log.warning("cannot clean up cgroup %s: %s", rel, error)
                continue
            if pids:
                self._event("error", f"cgroup {rel} holds pids {pids[:5]} but has no task record in "
                                     f"{self.store.directory}: left ungoverned; its processes keep running",
                            logging.WARNING)
                task_id = rel.rpartition("/task-")[2]
                if task_id.isdigit():
                    self.store.skip_past(int(task_id))
        for group in set(driver.children("")) - set(self.tasks.counts()):
            try:
                if not driver.children(group):
                    driver.remove(group)
            except CgroupError as error:
                log.warning("cannot clean up cgroup %s: %s", group, error)

    # ── observation ───────────────────────────────────────────────────────────────────────

    def sample(self) -> None:
        """Sample every group cgroup and login session, and tasks in turn (at most
        :data:`SAMPLED_TASKS` a tick) and update measured usage (a status is built only when
        asked for: status, watch, a scrape)."""
        for _ in self._sample_steps():
            pass

    def _sample_steps(self) -> Iterator[None]:
        """:meth:`sample`, pausing after every :data:`STEP` cgroups read (the event loop
        serves others meanwhile)."""
        devices = {number: name for name, number in self.io_devices.items()}
        fresh = {}
        rels = list(self.tasks.inside()) + [t.cgroup for t in self.tasks.logins()] + self._tasks_to_sample()
        for start in range(0, len(rels), STEP):
            now = time.monotonic()
            for rel in rels[start:start + STEP]:
                try:
                    current = Sample(now, self._driver(rel).read_stats(rel))
                except CgroupError:
                    continue  # vanished between exit and refill
                fresh[rel] = usage(self._samples.get(rel), current, devices)
                self._samples[rel] = current
            yield
        # A cgroup removed during a pause was forgotten: its usage must not come back.
        fresh = {rel: used for rel, used in fresh.items() if rel in self._samples}
        self._changes += 1
        self.usage.update(fresh)
        # A group's use includes its login sessions', which run outside its cgroup.
        for group, tasks in self.tasks.groups().items():
            logins = [self.usage.get(t.cgroup, {}) for t in tasks if t.is_login]
            if logins:
                own = [fresh[group]] if group in fresh else []
                self.usage[group] = {key: sum(u.get(key, 0.0) for u in own + logins)
                                     for key in {k for u in own + logins for k in u}}
        self._check_saturation()

    def _tasks_to_sample(self) -> list[str]:
        """The next :data:`SAMPLED_TASKS` task cgroups (a task's use is a rate over the time
        between its own samples, so sampling it less often keeps it right)."""
        return [t.cgroup for t in self._in_turn("sample", [t for t in self.tasks if not t.is_login], SAMPLED_TASKS)]

    def _in_turn(self, work: str, tasks: list[Task], most: int) -> list[Task]:
        """The next ``most`` of ``tasks``, round robin, for periodic ``work``."""
        if len(tasks) <= most:
            return tasks
        start = self._turns.get(work, 0) % len(tasks)
        self._turns[work] = start + most
        return (tasks[start:] + tasks)[:most]

    def _check_saturation(self) -> None:
        """Hold the groups to their CPU guarantees while every one wants all of its own (exact
        shares, nothing idle to lend); let them borrow again once one uses less."""
        got = self.allocation.groups if self.allocation else {}
        guarantees = {group: a.allocation.get("cpu", 0.0) for group, a in got.items()}
        use = {group: self.usage.get(group, {}).get("cpu", 0.0) for group in guarantees}
        saturated, self._satisfied = cpu_saturated(guarantees, use, capacity=self.capacity.get("cpu", 0.0),
                                                   held=self.cpu_saturated, satisfied=self._satisfied)
        if saturated == self.cpu_saturated:
            return
        if saturated:
            self._hold(True, "every group wants all of its CPU guarantee: each is held to it (cpu.max) until "
                             "one uses less")
        else:
            idle = [group for group, cores in guarantees.items() if use[group] < SATURATION * cores]
            self._hold(False, f"{', '.join(idle) or 'a group'} uses less than its CPU guarantee: the others may "
                              "borrow it again")

    def status(self) -> dict:
        """The status object of ``governor status --json`` (schema in the README), built once
        per change (an event, a sample) and shared by every caller until the next: a storm of
        ``status`` requests or many ``watch`` streams cost one build, not one each. Callers must
        not modify it."""
        return self._status_reply()["status"]

    def _status_reply(self) -> dict:
        """``{"status": <status>}``, the same object until the status changes: the server
        encodes a reply it just sent once, for every watcher."""
        if self._status is not None and self._status[0] == self._changes:
            return self._status[1]
        status = build_status(
            daemon={"pid": os.getpid(), "started": self.started, "cgroup_mode": self.hierarchy.mode,
                    "cgroup_root": self.hierarchy.root, "config": self.config_source,
                    "io_sharing": dict(self.io_sharing), "cpu_saturated": self.cpu_saturated},
            capacity=self.capacity, allocation=self.allocation, tasks=self.tasks,
            in_force=lambda rel: self._driver(rel).in_force(rel), usage=self.usage, filling=self.filling,
            queue=queue_view(self.queue, self.admission), events=list(self.events), kept=self._status_tasks,
            configured=self._configured(), reserved=self._reserved(),
        )
        self._status = (self._changes, StatusReply(status, self._status_json))
        return self._status[1]

    def _event(self, kind: str, message: str, level: int = logging.INFO) -> None:
        self._changes += 1
        log.log(level, "%s", message)
        self.events.append({"at": time.time(), "kind": kind, "message": message})
        if self.metrics:
            self.metrics.event(kind)

    def _summary(self) -> str:
        waiting = f", {len(self.queue)} waiting" if self.queue else ""
        return (f"{len(self.tasks)} task(s) in {len(self.tasks.counts())} group(s){waiting}; "
                f"last filling: {self.filling['trigger']}")

    # ── the event loop ────────────────────────────────────────────────────────────────────

    async def _every(self, seconds: float, work: Callable[[], Iterable[None] | None]) -> None:
        """Run ``work`` every ``seconds``; when it returns steps (a generator), let the event
        loop serve others between two."""
        while True:
            await asyncio.sleep(seconds)
            try:
                for _ in work() or ():
                    await asyncio.sleep(0)
            except Exception:
                log.exception("periodic %s failed", getattr(work, "__name__", work))

    def _reconcile(self) -> Iterator[None]:
        # A safety net behind the exit watcher, in turn: checking all of 10,000 tasks at once
        # held the event loop for 1.5 s (scripts/bench); 1,000 in one go, 30 ms.
        self._save_unsaved()
        due = [task.id for task in self._in_turn("reconcile", list(self.tasks), RECONCILED_TASKS)]
        for start in range(0, len(due), STEP):
            self.check(due[start:start + STEP], "reconcile")
            yield

    def _rescan_all(self) -> None:
        self.owners.forget()  # users and groups change while the daemon runs
        self._members = self.find_members(self.config)
        self._changes += 1
        self.rescan("periodic rescan")

    async def _follow_exits(self) -> None:
        # Exits reported together (a killed process tree, a job array ending) are one refill.
        while True:
            first = await self._watcher.next()
            self.check([first, *self._watcher.pending()], "exit", since=time.perf_counter())

    def _reload_on_signal(self) -> None:
        try:
            self.reload("SIGHUP")
        except RequestError:
            pass  # logged as an event; the old config stays in force

    async def serve(self, socket_path: str) -> None:
        """Run until SIGTERM or SIGINT; tasks keep running after the daemon stops.

        Raises:
            ControlSocketError: the socket is another daemon's (nothing served, nothing changed;
                no connection is served before the tasks are re-adopted: the start below never
                yields to the event loop).
        """
        self.socket_path = socket_path
        server = ControlServer(self, socket_path, connections_per_uid=lambda: self.config.max_connections_per_user)
        await server.start()
        self.served = True
        if self.registry is not None:
            self.registry.register(self._entry())
            if self.registry.holds_sessions:
                self.registry.claim_sessions(self._entry())  # again: now with its root and socket
        self._watcher = ExitWatcher()
        self.readopt()
        for task in list(self.tasks):
            self._watch(task)
        self.refill("start")
        self._follow_processes()
        self.rescan("start")
        if self.metrics:
            await self.metrics.serve()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_on_signal)
        # A parent may hand them blocked (a shell job, a program's child): the daemon would then
        # ignore SIGTERM and SIGHUP, and neither stop nor reload.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
        workers = [
            asyncio.create_task(self._follow_exits()),
            asyncio.create_task(self._every(self.config.reconcile_interval_s, self._reconcile)),
            asyncio.create_task(self._every(max(self.config.reconcile_interval_s, RESCAN_INTERVAL_S), self._rescan_all)),
            asyncio.create_task(self._every(self.config.sample_interval_s, self._sample_steps)),
        ]
        if self.notifier.watchdog_interval_s:
            workers.append(asyncio.create_task(
                self._every(self.notifier.watchdog_interval_s, lambda: self.notifier.send("WATCHDOG=1"))))
        log.info("serving on %s; cgroup %s root %s; capacity %s", socket_path, self.hierarchy.mode,
                 self.hierarchy.root, _vector(self.capacity))
        # What was loaded to start (modules, config, re-adopted tasks) lives as long as the
        # daemon: keep the collector from scanning it again and again. And collect less often:
        # with the default thresholds a collection ran inside one refill of ten at 1,000 tasks,
        # a full one costing 3–70 ms (scripts/bench-refill).
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        self.notifier.send("READY=1", f"STATUS={self._summary()}")
        try:
            await stop.wait()
        finally:
            self._closing = True
            self.notifier.send("STOPPING=1")
            for worker in workers:
                worker.cancel()
            await server.close()
            if self.metrics:
                await self.metrics.close()
            self._watcher.close()
            if self._process_events is not None:
                asyncio.get_running_loop().remove_reader(self._process_events.fileno())
                self._process_events.close()
            if not self.tasks:
                try:
                    self.hierarchy.driver.remove("")
                    if self.registry is not None:
                        self.registry.unregister()
                except CgroupError as error:
                    log.warning("cannot remove cgroup root %s: %s", self.hierarchy.root, error)
            if self.registry is not None:
                self.registry.release_sessions()
            log.info("stopped; %d task(s) keep running", len(self.tasks))


@dataclass
class _Batch:
    """Events to settle together: when they are settled (``done``), what they were, whether
    any needs a refill, when the first was seen and when the last was added
    (``time.perf_counter()``)."""

    done: asyncio.Future
    triggers: list[str]
    refill: bool
    since: float
    latest: float


def _combined(triggers: list[str]) -> str:
    """One trigger for events settled together: ``launch of 3 tasks, reload``."""
    if len(triggers) == 1:
        return triggers[0]
    tasks: dict[str, list[str]] = {}
    for trigger in triggers:
        kind, of_task, _ = trigger.partition(" of task ")
        tasks.setdefault(kind if of_task else trigger, []).append(trigger)
    return ", ".join(same[0] if len(same) == 1 else f"{kind} of {len(same)} tasks" if " of task " in same[0]
                     else kind for kind, same in tasks.items())


def _still_running(entry: Entry) -> None:
    """Raise unless the process that asked for ``entry`` (its pidfd) is still running.

    Raises:
        RequestError: ``bad_request``, the process has exited.
    """
    if entry.pidfd is None:
        return
    try:
        signal.pidfd_send_signal(entry.pidfd, 0)
    except ProcessLookupError:
        raise RequestError("bad_request", f"process {entry.task.pid}, which asked to be governed, has exited; "
                                          "its pid is not governed") from None
    except PermissionError:
        pass  # alive, and not ours to signal (a daemon not run as root)


def _in_a_task(where: str) -> bool:
    """Whether cgroup ``where`` (relative to governor's root) is a task's or below one."""
    parts = where.split("/")
    return len(parts) > 1 and parts[1].startswith("task-")


def _vector(vector: Mapping[str, float]) -> str:
    return ", ".join(f"{r} {format_amount(r, v, unit=True)}" for r, v in vector.items())
