"""The composition root: builds the stages, wires them, and runs them until SIGTERM.

Tasks outlive the daemon: killing it never kills one, and the next daemon re-adopts them
(:mod:`governor.daemon.recovery`). Under systemd it reports READY, STATUS, RELOADING and
WATCHDOG through :class:`~governor.host.sd_notify.Notifier`.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import os
import signal
from pathlib import Path
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Sequence

import psutil

from governor.cgroups.foreign_subtrees import ForeignPlaces
from governor.cgroups.hierarchy import Hierarchy
from governor.config.load import Config
from governor.core.gpus import GpuInventory
from governor.daemon.enforcement import Enforcement
from governor.daemon.exits import Exits
from governor.daemon.fairshare_history import FairShareStage
from governor.daemon.effector import Effector
from governor.daemon.gpu_guard import GpuGuard
from governor.daemon.handover import Handover
from governor.daemon.history import History
from governor.daemon.inbox import Inbox, Reconcile, Reload
from governor.daemon.journal import Journal, vector
from governor.daemon.launches import Launches
from governor.daemon.queue_places import QueuePlaces
from governor.daemon.notices import Notices
from governor.daemon.foreign_poll import FOREIGN_POLL_S, Foreign
from governor.daemon.observation import Observation
from governor.daemon.policy import Policy
from governor.daemon.records import Records
from governor.daemon.recovery import Recovery
from governor.daemon.reloads import Reloads
from governor.daemon.requests import Requests
from governor.daemon.sessions import RESCAN_INTERVAL_S, Sessions
from governor.daemon.settle import Settle
from governor.daemon.starts import Starts
from governor.daemon.tree import Tree
from governor.daemon.unit_protection import UnitProtection
from governor.daemon.waiting import Queue
from governor.host.alerts import Alerts
from governor.host.nvml import PROVIDER as NVIDIA
from governor.host.daemons import DaemonEntry, Registry
from governor.errors import CgroupError, RequestError
from governor.host.sd_notify import Notifier
from governor.host.kernel_limits import process_limit as kernel_process_limit
from governor.wire.server import ControlServer
from governor.host.session_rules import login_uid_min
from governor.core.state import Tasks
from governor.host.task_store import TaskStore

__all__ = ["Daemon"]

log = logging.getLogger("governor.daemon")
# Tasks checked per reconcile pass, in turn (their exits are watched; this catches a miss).
RECONCILED_TASKS = 1000
# Tasks a reconcile pass checks before the event loop serves others (~3 ms natively; 300
# cgroups read at once held it for 50 ms, a launch meanwhile waiting as long).
STEP = 25
# Where the kernel cannot keep session processes from GPUs, they are looked at this often
# (a pass over /proc on the hand-over thread).
GPU_SWEEP_S = 5.0
# Young objects collected every 50,000 allocations instead of 700 (see serve()).
GC_THRESHOLDS = (50_000, 20, 20)


class Daemon:
    """Serve requests, follow exits, admit waiting tasks, keep every group at its guarantee.

    Args:
        config: the config in force; ``config_source`` is its file (or ``"<embedded default>"``).
        hierarchy: governor's cgroups (:func:`governor.cgroups.hierarchy.open_hierarchy`).
        store: task records under the state directory.
        host_cpus: CPU numbers this host offers (``os.sched_getaffinity``).
        host_memory: bytes of memory on the host.
        resolve_device: block device path → whole-disk ``MAJ:MIN`` (raises GovernorError).
        load_config: reads ``config_source`` again, for reload (raises ConfigError).
        metrics: optional sink with ``refill(seconds)``, ``event(kind)``, ``write_error()``,
            ``allocation_failure()``, ``admitted(waited_seconds)``, and ``serve()``/``close()``,
            which serve scrapes on the event loop (:class:`governor.wire.metrics.Metrics`; its gauges
            read :meth:`status`).
        notifier: systemd's notifications (default: none).
        uid_min: the first login uid (:func:`~governor.host.session_rules.login_uid_min`); lower uids
            never have a session.
        host_pids: every process id on the host, for the sessions' rescan (``psutil.pids``).
        registry: this host's governor daemons (:mod:`governor.host.daemons`): this daemon claims the
            sessions there and never moves a process out of another's root; None (tests on a
            fake hierarchy): no other daemon is known.
        members: a config → its groups' users on this host (:func:`governor.host.access.members`).
        find_gpus: ``capacity.gpus`` and ``capacity.gpu_control`` → the GPUs here, in place of
            the NVIDIA provider's :func:`governor.host.nvml.discover` (tests pass a fake); None: its own.
        foreign_places: where foreign subtrees are looked for (:mod:`governor.daemon.foreign_poll`);
            None (a fake hierarchy): none is.
        systemd_units: the names of governor's own systemd units (``governor.host.systemd_files``):
            those above the root get its memory protection (:mod:`governor.daemon.unit_protection`).
        process_limit: the most processes and threads the host holds, whose reserve the root's
            ``pids.max`` leaves (None: the kernel's, :func:`governor.host.kernel_limits.process_limit`).
        history_dir: the history journal's directory (None: the config's ``[history] directory``).

    Raises:
        GovernorError: the config cannot be put in force here (:class:`~governor.daemon.policy.Policy`).

    The stages, one module each (docs/design.md, "Code map"): ``requests`` → ``launches`` → ``settle``
    (admit → create → plan → apply → move → reply) → ``enforcement``; ``exits``, ``sessions``
    and ``observation`` report to settle through the inbox (:class:`~governor.daemon.inbox.Inbox`,
    built before them, read by settle: every stage gets what it needs when built, nothing is
    wired back); ``recovery`` at start; ``journal`` for every one.
    """

    def __init__(self, config: Config, config_source: str, hierarchy: Hierarchy, store: TaskStore, *,
                 host_cpus: list[int], host_memory: int, resolve_device: Callable[[str], str],
                 load_config: Callable[[], Config] | None = None, metrics=None, notifier: Notifier | None = None,
                 uid_min: int | None = None, host_pids: Callable[[], Iterable[int]] = psutil.pids,
                 registry: Registry | None = None, members: Callable[[Config], dict[str, list[str]]] | None = None,
                 find_gpus: Callable[..., GpuInventory] | None = None, foreign_places: ForeignPlaces | None = None,
                 systemd_units: Collection[str] = (), process_limit: int | None = None,
                 history_dir: Path | None = None):
        self.hierarchy = hierarchy
        self.store = store
        self.registry = registry
        self.metrics = metrics
        self.notifier = notifier or Notifier({})
        self.config_source = config_source
        self.socket_path = ""
        self.served = False  # once it served: a start refused before leaves nothing (cli/daemon_cmd.py)
        self._signal_reloads: set[asyncio.Task] = set()  # SIGHUP's reloads under way (the loop keeps weak refs)
        self.tasks = Tasks()
        self.queue = Queue()
        self.policy = Policy(config, config_source, hierarchy=hierarchy, host_cpus=host_cpus,
                             host_memory=host_memory, resolve_device=resolve_device,
                             uid_min=login_uid_min() if uid_min is None else uid_min, members=members,
                             registry=registry, entry=self._entry,
                             discover={} if find_gpus is None else {NVIDIA.entry: find_gpus},
                             process_limit=kernel_process_limit() if process_limit is None else process_limit)
        # [notify]'s runner reads the config in force at each event (a reload changes it).
        self.alerts = Alerts(lambda: self.policy.config.notify)
        self.history = History(history_dir or Path(config.history.directory), lambda: self.policy.config.history)
        self.journal = Journal(metrics, alerts=self.alerts, history=self.history)
        self.records = Records(store, self.tasks, self.journal)
        # The stages put their events in the inbox, built first; settle, built after them, reads it.
        self.inbox = Inbox()
        self.fair_share = FairShareStage(directory=store.directory, policy=self.policy, tasks=self.tasks,
                                         inbox=self.inbox, journal=self.journal)
        self.foreign = Foreign(places=foreign_places, own_root=hierarchy.proc_root, policy=self.policy, inbox=self.inbox,
                               journal=self.journal)
        self.effector = Effector(hierarchy)  # the one writer of cgroups
        self.tree = Tree(hierarchy, self.effector, read_before_removal=self.fair_share.removed, foreign=self.foreign.holds)
        self.enforcement = Enforcement(effector=self.effector, policy=self.policy, tasks=self.tasks,
                                       journal=self.journal,
                                       units=UnitProtection.of(hierarchy, systemd_units, self.tree.run, self.journal))
        self.handover = Handover(hierarchy=hierarchy, policy=self.policy, tasks=self.tasks, inbox=self.inbox,
                                 journal=self.journal)
        self.gpu_guard = GpuGuard(hierarchy=hierarchy, policy=self.policy, journal=self.journal, registry=registry)
        self.observation = Observation(hierarchy=hierarchy, tasks=self.tasks, policy=self.policy,
                                       enforcement=self.enforcement, queue=self.queue, inbox=self.inbox,
                                       journal=self.journal, gpu_guard=self.gpu_guard.describe, usage={},
                                       fair_share=self.fair_share,
                                       notices=Notices(tasks=self.tasks, queue=self.queue, policy=self.policy,
                                                       journal=self.journal),
                                       foreign=self.foreign)
        self.exits = Exits(hierarchy=hierarchy, tree=self.tree, policy=self.policy, tasks=self.tasks,
                           records=self.records, inbox=self.inbox, observation=self.observation,
                           journal=self.journal)
        self.starts = Starts(hierarchy=hierarchy, tree=self.tree, policy=self.policy, tasks=self.tasks,
                             queue=self.queue, records=self.records, journal=self.journal, follow=self.exits.follow,
                             end=self.exits.end)
        self.settle = Settle(policy=self.policy, tasks=self.tasks, queue=self.queue, starts=self.starts,
                             enforcement=self.enforcement, journal=self.journal, notifier=self.notifier,
                             usage=self.observation.usage,  # measured by observation, counted by admission
                             inbox=self.inbox, drain_devices=self.handover.drain)
        self.sessions = Sessions(hierarchy=hierarchy, tree=self.tree, policy=self.policy, tasks=self.tasks,
                                 records=self.records, inbox=self.inbox, enforcement=self.enforcement,
                                 exits=self.exits, journal=self.journal, host_pids=host_pids, registry=registry,
                                 moved_in=self.handover.moved, foreign=self.foreign.holds)
        self.recovery = Recovery(hierarchy=hierarchy, tree=self.tree, store=store, tasks=self.tasks,
                                 policy=self.policy, exits=self.exits, journal=self.journal, settle=self.settle,
                                 queue=self.queue, session_caps=self.sessions.caps.follow)
        self.queue_places = QueuePlaces(queue=self.queue, store=store, inbox=self.inbox, journal=self.journal)
        self.launches = Launches(hierarchy=hierarchy, policy=self.policy, tasks=self.tasks, store=store,
                                 queue=self.queue, inbox=self.inbox, starts=self.starts, journal=self.journal,
                                 registry=registry, places=self.queue_places, foreign=self.foreign.holds)
        self.reloads = Reloads(policy=self.policy, tasks=self.tasks, records=self.records, settle=self.settle,
                               exits=self.exits, sessions=self.sessions, journal=self.journal,
                               notifier=self.notifier, gpu_guard=self.gpu_guard, load_config=load_config)
        self.requests = Requests(hierarchy=hierarchy, policy=self.policy, tasks=self.tasks, launches=self.launches,
                                 settle=self.settle, inbox=self.inbox, exits=self.exits,
                                 observation=self.observation, journal=self.journal, reloads=self.reloads)

    def _entry(self) -> DaemonEntry:
        """This daemon as the others see it (:mod:`governor.host.daemons`)."""
        return DaemonEntry(os.getpid(), self.hierarchy.root, self.config_source, self.socket_path,
                           self.hierarchy.proc_key, self.hierarchy.proc_root)

    async def serve(self, socket_path: str, asked: Sequence[int] = ()) -> None:
        """Run until SIGTERM or SIGINT; tasks keep running after the daemon stops. ``asked``:
        the signals taken while it started (``cli/daemon_cmd.py``), acted on once it serves.

        Raises:
            ControlSocketError: the socket is another daemon's (nothing served, nothing changed).
            GovernorError: a task's record holds a GPU the config's inventory lacks (nothing
                served, no cgroup changed: :meth:`Recovery.load
                <governor.daemon.recovery.Recovery.load>`).

        Connections wait in the socket's backlog until the tasks are re-adopted and the
        processes found at start are in their sessions: the first client sees them governed.
        """
        self.socket_path = socket_path
        # Before any process is put anywhere (re-adoption too): another manager's processes stay its own.
        self.foreign.poll_now()
        records = self.recovery.load()  # first to change anything: a start it refuses leaves nothing behind
        self.exits.restore_ended()
        handlers = {**self.requests.handlers(), "history": self._history}
        server = ControlServer(handlers, socket_path,
                               connections_per_uid=lambda: self.policy.config.max_connections_per_user,
                               account=self.requests.paced_as)
        await server.start(serving=False)
        self.served = True
        if self.registry is not None:
            self.registry.register(self._entry())
            if self.registry.holds_sessions:
                self.registry.claim_sessions(self._entry())  # again: now with its root and socket
        self.exits.start()
        self.gpu_guard.start()  # before the first session is made: none opens a GPU meanwhile
        self.recovery.readopt(records)
        self.handover.start()
        self.settle.now(Reload("start"))
        self.sessions.follow_processes()
        await self.sessions.rescan("start")
        await self.tree.settled()  # the first clients find the sessions made and joined
        await server.start_serving()
        self.queue_places.start()  # before the first launch is read (no await between), its hold from now
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
        for signum in asked:
            if signum == signal.SIGHUP:
                self._reload_on_signal()
            else:
                stop.set()
        interval = self.policy.config.reconcile_interval_s
        workers = [
            asyncio.create_task(self.exits.follow_exits()),
            asyncio.create_task(_every(interval, self.reconcile)),
            asyncio.create_task(_every(max(interval, RESCAN_INTERVAL_S), self._rescan_all)),
            asyncio.create_task(_every(self.policy.config.sample_interval_s, self.observation.sample_off_loop)),
        ]
        workers.append(asyncio.create_task(_every(GPU_SWEEP_S, self.sweep)))
        workers.append(asyncio.create_task(_every(FOREIGN_POLL_S, self.foreign.poll)))
        if self.notifier.watchdog_interval_s:
            workers.append(asyncio.create_task(
                _every(self.notifier.watchdog_interval_s, lambda: self.notifier.send("WATCHDOG=1"))))
        log.info("serving on %s; cgroup %s root %s; capacity %s", socket_path, self.hierarchy.mode,
                 self.hierarchy.root, vector(self.policy.capacity))
        # What was loaded to start (modules, config, re-adopted tasks) lives as long as the
        # daemon: keep the collector from scanning it again and again. And collect less often:
        # with the default thresholds a collection ran inside one refill of ten at 1,000 tasks,
        # a full one costing 3–70 ms (scripts/bench-refill).
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        self.history.start(self.policy.host_capacity, self.config_source)
        self.notifier.send("READY=1", f"STATUS={self.settle.summary()}")
        try:
            await stop.wait()
        finally:
            await self._close(server, workers)

    async def _close(self, server: ControlServer, workers: list[asyncio.Task]) -> None:
        self.inbox.closing = True
        self.queue_places.save()  # the waiting clients ask the next daemon, which gives them their places
        self.notifier.send("STOPPING=1")
        for worker in (*workers, *self._signal_reloads):
            worker.cancel()
        await server.close()
        await self.inbox.drain()
        await self.alerts.close()
        if self.metrics:
            await self.metrics.close()
        self.exits.close()
        self.exits.save_ended()
        self.sessions.close()
        self.observation.close()
        self.handover.close()
        self.gpu_guard.stop()
        self.fair_share.close()
        self.foreign.close()
        self.history.close()
        await asyncio.get_running_loop().shutdown_default_executor()  # the cgroup thread's last calls
        if not self.tasks:
            try:
                self.recovery.clear()
                self.effector.remove("")
                if self.registry is not None:
                    self.registry.unregister()
            except CgroupError as error:
                log.warning("cannot remove cgroup root %s: %s", self.hierarchy.root, error)
        if self.registry is not None:
            self.registry.release_sessions()
            self.registry.release_state()
        self.hierarchy.release_lock()  # its file goes too: a stopped daemon leaves no lock behind
        log.info("stopped; %d task(s) keep running", len(self.tasks))

    async def _history(self, request, peer):
        return await self.history.reply(request, self.requests.viewer(peer))

    async def settled(self) -> None:
        """Wait until what the events so far asked for is done: every settle asked for, and
        the cgroup thread's calls (and what those asked in turn). Tools and tests wait on this
        fact, never on time."""
        while True:
            await self.sessions.rescans.idle()
            await self.inbox.drain()
            await self.tree.settled()
            if not self.inbox.pending:
                return

    def sweep(self) -> None:
        """The periodic sweep (:meth:`Handover.sweep <governor.daemon.handover.Handover.sweep>`),
        where the GPU guard in force asks for one (:attr:`GpuGuard.sweeps
        <governor.daemon.gpu_guard.GpuGuard.sweeps>`): asked again each time, as a reload may
        have changed the guard."""
        if self.gpu_guard.sweeps:
            self.handover.sweep()

    def reconcile(self) -> Iterator[None]:
        """One reconcile pass, in steps (a generator the loop drives, yielding between steps):
        unsaved records saved, then every task's cgroup looked at in turn for exits the watcher
        missed, the empty task cgroups no task has removed (:meth:`Recovery.remove_strays
        <governor.daemon.recovery.Recovery.remove_strays>`); it ends in a settle
        (:class:`~governor.daemon.inbox.Reconcile`)."""
        # A safety net behind the exit watcher, in turn: checking all of 10,000 tasks at once
        # held the event loop for 1.5 s (scripts/bench); 1,000 in one go, 30 ms.
        self.records.save_unsaved()
        self.exits.save_ended()
        due = [task.id for task in self.observation.in_turn("reconcile", list(self.tasks), RECONCILED_TASKS)]
        for start in range(0, len(due), STEP):
            self.exits.check(due[start:start + STEP], "reconcile")
            yield
        self.recovery.remove_strays()
        # Every pass ends in a settle, found something or not: status's settle_generation then
        # tells a client (a test) that a pass it waited for is over.
        self.inbox.put(Reconcile())

    async def _rescan_all(self) -> None:
        # Users and groups change while the daemon runs. Looking them up took 2 s at 10,000
        # groups: on a thread, as a reload's; one that reload meanwhile did for its own config.
        config = self.policy.config
        members = await asyncio.to_thread(self.policy.find_members, config)
        if config is self.policy.config:
            self.policy.refresh_members(members)
        self.journal.changed()
        await self.sessions.rescan("periodic rescan")

    def _reload_on_signal(self) -> None:
        # The handler only starts it: the file is parsed on a thread (Reloads.reload_off_loop).
        reload = asyncio.get_running_loop().create_task(self._reload_quietly("SIGHUP"))
        self._signal_reloads.add(reload)
        reload.add_done_callback(self._signal_reloads.discard)

    async def _reload_quietly(self, trigger: str) -> None:
        try:
            await self.reloads.reload_off_loop(trigger)
        except RequestError:
            pass  # logged as an event; the old config stays in force


async def _every(seconds: float, work: Callable[[], Iterable[None] | Awaitable[None] | None]) -> None:
    """Run ``work`` every ``seconds``; when it returns steps (a generator), let the event loop
    serve others between two; when it returns an awaitable, await it."""
    while True:
        await asyncio.sleep(seconds)
        try:
            done = work()
            if inspect.isawaitable(done):
                await done
                continue
            for _ in done or ():
                await asyncio.sleep(0)
        except Exception:
            log.exception("periodic %s failed", getattr(work, "__name__", work))
