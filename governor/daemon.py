"""The daemon: the one place that ties events, allocation and enforcement together (DESIGN.md §4).

    launch / exit / reconcile / reload ──► Tasks ──► demands D_g ──► drf.progressive_filling
        ──► limits.plan ──► driver.apply (only what changed) ──► cgroupfs

* ``launch`` (control socket): check the caller, create the task cgroup, refill, write the
  limits, move the caller's pid in, save the task's record, reply. The caller then execs its
  command, so all its memory is charged to the task from the first byte.
* exit: the exit watcher (inotify on ``cgroup.events`` on v2, pidfd on v1) wakes the daemon;
  an empty task cgroup is removed and the host refilled. A reconcile pass every
  ``reconcile_interval`` seconds catches what a watcher missed.
* reload (SIGHUP or the admin ``reload`` operation): a valid config replaces the one in force
  and the host is refilled; an invalid one is refused and changes nothing.
* usage: every ``sample_interval`` seconds each group and task cgroup is sampled.

Killing the daemon never kills a task: on start it re-adopts every task whose record and
populated cgroup it finds, and forgets the rest. Under systemd it reports READY, STATUS,
RELOADING and WATCHDOG through :class:`~governor.notify.Notifier`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping

from governor import access
from governor.config import Config
from governor.drf import progressive_filling
from governor.errors import CgroupError, CgroupWriteError, GovernorError, RequestError
from governor.explain import explain
from governor.hierarchy import Hierarchy
from governor.limits import TaskShare, group_cgroup, plan
from governor.model import Allocation, GroupDemand
from governor.notify import Notifier
from governor.protocol import (ExplainRequest, LaunchRequest, Peer, ReloadRequest, SetWeightRequest,
                               StatusRequest, WatchRequest)
from governor.server import ControlServer
from governor.state import Task, Tasks, TaskStore
from governor.status import build_status
from governor.usage import Sample, usage

log = logging.getLogger("governor.daemon")
EVENTS_KEPT = 50


class Daemon:
    """Serve requests, follow exits, keep every cgroup at its DRF limits.

    Args:
        config: the config in force; ``config_source`` is its file (or ``"<embedded default>"``).
        load_config: reads ``config_source`` again, for reload (raises ConfigError).
        hierarchy: governor's cgroup root and driver.
        store: task records under the state directory.
        host_cpus: CPU numbers this host offers (``os.sched_getaffinity``).
        host_memory: bytes of memory on the host.
        resolve_device: block device path → whole-disk ``MAJ:MIN`` (raises GovernorError).
        metrics: optional sink with ``refill(seconds)``, ``event(kind)``, ``write_error()``.
    """

    def __init__(self, config: Config, config_source: str, hierarchy: Hierarchy, store: TaskStore, *,
                 host_cpus: list[int], host_memory: int, resolve_device: Callable[[str], str],
                 load_config: Callable[[], Config] | None = None, metrics=None, notifier: Notifier | None = None):
        self.config_source = config_source
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
        self.allocation: Allocation | None = None
        self.limits: dict = {}
        self.filling: dict = {"at": None, "trigger": "start", "duration_ms": 0.0}
        self.usage: dict[str, dict[str, float]] = {}
        self.events: deque[dict] = deque(maxlen=EVENTS_KEPT)
        self.snapshot: dict = {}
        self.started = time.time()
        self._samples: dict[str, Sample] = {}
        self._watcher = None

    def _use(self, config: Config) -> None:
        """Put ``config`` in force (capacity, devices, weights); raises before changing anything."""
        capacity = config.capacity(float(len(self.cpus)), self.host_memory)
        io_devices = {device.name: self.resolve_device(device.device) for device in config.io_devices}
        self.config, self.capacity, self.io_devices = config, capacity, io_devices
        self.weights: dict[str, float] = {}

    # ── requests ──────────────────────────────────────────────────────────────────────────

    async def handle(self, request, peer: Peer) -> dict:
        """The control server's handler (operations in :mod:`governor.protocol`)."""
        if isinstance(request, LaunchRequest):
            return self.launch(request, peer)
        if isinstance(request, StatusRequest):
            return {"status": self.status()}
        if isinstance(request, ExplainRequest):
            return {"explain": self.explain()}
        who = access.identify(peer.uid, peer.gid)
        if isinstance(request, ReloadRequest):
            access.require_admin(self.config, who, "reload")
            return {"reloaded": {"config": self.reload(f"reload by {who.user}")}}
        if isinstance(request, SetWeightRequest):
            access.require_admin(self.config, who, "set-weight")
            return self.set_weight(request.group, request.weight, who.user)
        raise RequestError("unknown_op", f"operation {type(request).__name__} is not served")

    async def watch(self, request: WatchRequest, peer: Peer) -> AsyncIterator[dict]:
        """A status snapshot now and every ``request.interval`` seconds (``watch``)."""
        while True:
            yield {"status": self.status()}
            await asyncio.sleep(request.interval)

    def launch(self, request: LaunchRequest, peer: Peer) -> dict:
        """Place the caller's own pid in a new task of its group and refill.

        Raises:
            RequestError: ``forbidden`` (another pid, a group not the caller's), ``not_found``,
                ``bad_request`` (a demand that cannot be governed, a pid gone), ``exceeds_capacity``,
                ``unavailable`` (the cgroup could not be made).
        """
        if request.pid != peer.pid:
            raise RequestError("forbidden", f"a client may launch only its own pid ({peer.pid}), not {request.pid}")
        who = access.identify(peer.uid, peer.gid)
        group = access.launch_group(self.config, who, request.group)
        demand = access.task_demand(self.config, self.capacity, request.demand)
        task = Task(self.store.new_id(), group, request.pid, peer.uid, who.user, tuple(request.command), demand,
                    time.time())
        self.tasks.add(task)
        try:
            self.hierarchy.prepare(task.cgroup)
            self.refill(f"launch of task {task.id}")
            self.hierarchy.driver.move(task.cgroup, task.pid)
            self.store.save(task)
        except GovernorError as error:
            self._forget(task)
            self.refill(f"failed launch of task {task.id}")
            code = "bad_request" if isinstance(error, CgroupWriteError) and error.errno == errno.ESRCH else "unavailable"
            raise RequestError(code, str(error)) from error
        self._watch(task)
        self._event("task_started", f"task {task.id} started: pid {task.pid}, user {who.user}, group {group}, "
                                    f"demand {_vector(demand)}")
        return {"task": task.id, "group": group, "cgroup": str(self.hierarchy.path(task.cgroup)),
                "limits": self.hierarchy.files(self.limits[task.cgroup])}

    def explain(self) -> dict:
        """The live filling with its trace (``governor explain``)."""
        demands = self.tasks.demands()
        groups = [GroupDemand(g, d, weight=self._weight(g), tasks=1) for g, d in demands.items()]
        traced = progressive_filling(self.capacity, groups, trace=True) if groups else None
        return explain(traced, self.capacity, demands)

    def reload(self, trigger: str) -> str:
        """Re-read the config file and put it in force; the old one stays if the new one is bad.

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
            self.refill("reload")
            return self.config_source
        finally:
            self.notifier.send("READY=1", f"STATUS={self._summary()}")

    def set_weight(self, group: str, weight: float, user: str) -> dict:
        if not access.known_group(self.config, group):
            raise RequestError("not_found", f"no group {group!r} in the config")
        self.weights[group] = weight
        self._event("weight", f"{user} set the weight of {group} to {weight:g} (until the next reload)")
        self.refill(f"weight of {group}")
        return {"group": group, "weight": weight}

    # ── progressive filling and enforcement ───────────────────────────────────────────────

    def refill(self, trigger: str) -> None:
        """Re-run progressive filling over the running tasks and write what changed."""
        start = time.perf_counter()
        demands = self.tasks.demands()
        weights = {g: self._weight(g) for g in demands}
        groups = [GroupDemand(g, d, weight=weights[g], tasks=1) for g, d in demands.items()]
        self.allocation = progressive_filling(self.capacity, groups) if groups else None
        got = self.allocation.groups if self.allocation else {}
        planned = plan(
            {g: a.allocation for g, a in got.items()}, {g: a.tasks for g, a in got.items()}, weights,
            [TaskShare(t.cgroup, t.group, t.demand) for t in self.tasks],
            io_devices=self.io_devices, cpu_mode=self.config.cpu_enforcement,
            memory_mode=self.config.memory_enforcement, cpus=self.cpus,
        )
        self._apply(planned)
        self.limits = planned
        seconds = time.perf_counter() - start
        self.filling = {"at": time.time(), "trigger": trigger, "duration_ms": seconds * 1000}
        if self.metrics:
            self.metrics.refill(seconds)
        shares = ", ".join(f"{g} {a.dominant_share:.1%}" for g, a in got.items()) or "no tasks"
        self._event("refill", f"refill after {trigger}: {shares} ({seconds * 1000:.1f} ms)")
        self.notifier.send(f"STATUS={self._summary()}")

    def _weight(self, group: str) -> float:
        weight = self.weights.get(group, self.config.weight_of(group))
        return 1.0 if weight is None else float(weight)

    def _apply(self, planned: dict) -> None:
        # v1 refuses a child CPU quota above its parent's: a shrinking group's tasks shrink
        # first, a growing group grows before its tasks.
        for group, tasks in self.tasks.groups().items():
            rel = group_cgroup(group)
            old = self.limits.get(rel)
            shrinking = old is not None and planned[rel].cpu_quota_usec < old.cpu_quota_usec
            cgroups = [t.cgroup for t in tasks]
            for cgroup in (cgroups + [rel]) if shrinking else ([rel] + cgroups):
                self._write(cgroup, planned[cgroup])

    def _write(self, rel: str, limits) -> None:
        try:
            self.hierarchy.driver.apply(rel, limits)
        except CgroupWriteError as error:
            if error.errno == errno.ENOENT:
                return  # the task exited and its cgroup is gone; the exit path refills
            if self.metrics:
                self.metrics.write_error()
            self._event("error", str(error), logging.ERROR)

    # ── exits ─────────────────────────────────────────────────────────────────────────────

    def _watch(self, task: Task) -> None:
        try:
            self._watcher.watch(task.id, self.hierarchy.events_path(task.cgroup), task.pid)
        except OSError:
            self.check(task.id, "exit")  # gone already: the reconcile pass would find it too

    def check(self, task_id: str, trigger: str) -> None:
        """Forget task ``task_id`` and refill if its cgroup holds no process any more."""
        task = self.tasks.get(task_id)
        if task is None or self._alive(task):
            return
        self._forget(task)
        self._event("task_ended", f"task {task.id} ended ({trigger}): group {task.group}, pid {task.pid}")
        self.refill(f"{trigger} of task {task.id}")

    def _alive(self, task: Task) -> bool:
        try:
            return bool(self.hierarchy.driver.pids(task.cgroup))
        except CgroupError:
            return False

    def _forget(self, task: Task) -> None:
        if self._watcher is not None:
            self._watcher.unwatch(task.id)
        self.tasks.remove(task.id)
        self.store.delete(task.id)
        rels = [task.cgroup]
        if task.group not in self.tasks.groups():
            rels.append(group_cgroup(task.group))
        for rel in rels:
            self.limits.pop(rel, None)
            self.usage.pop(rel, None)
            self._samples.pop(rel, None)
            try:
                self.hierarchy.driver.remove(rel)
            except CgroupError as error:
                log.warning("cannot remove cgroup %s: %s", rel, error)

    def readopt(self) -> None:
        """Take back every task whose record and populated cgroup survive a restart."""
        self.store.prepare()
        records = self.store.load_all()
        for task in records:
            self.tasks.add(task)
        for task in records:
            if self._alive(task):
                self._event("task_started", f"task {task.id} re-adopted: pid {task.pid}, group {task.group}")
            else:
                self._forget(task)
        self._warn_unrecorded({t.cgroup for t in records})

    def _warn_unrecorded(self, recorded: set[str]) -> None:
        """Task cgroups with processes but no record (the state directory was lost) cannot be
        re-adopted without their declared demand: say so rather than govern them silently wrong."""
        driver = self.hierarchy.driver
        try:
            cgroups = [f"{g}/{t}" for g in driver.children("") for t in driver.children(g) if t.startswith("task-")]
        except CgroupError:
            return
        for rel in sorted(set(cgroups) - recorded):
            try:
                pids = driver.pids(rel)
            except CgroupError:
                continue
            if pids:
                self._event("error", f"cgroup {rel} holds pids {pids[:5]} but has no task record in "
                                     f"{self.store.directory}: left ungoverned; its processes keep running",
                            logging.WARNING)

    # ── observation ───────────────────────────────────────────────────────────────────────

    def sample(self) -> None:
        """Sample every group and task cgroup, update measured usage and the published snapshot."""
        devices = {number: name for name, number in self.io_devices.items()}
        now = time.monotonic()
        rels = [group_cgroup(g) for g in self.tasks.groups()] + [t.cgroup for t in self.tasks]
        for rel in rels:
            try:
                current = Sample(now, self.hierarchy.driver.read_stats(rel))
            except CgroupError:
                continue  # vanished between exit and refill
            self.usage[rel] = usage(self._samples.get(rel), current, devices)
            self._samples[rel] = current
        self.snapshot = self.status()

    def status(self) -> dict:
        """The status object of ``governor status --json`` (schema in the README)."""
        return build_status(
            daemon={"pid": os.getpid(), "started": self.started, "cgroup_mode": self.hierarchy.mode,
                    "cgroup_root": self.hierarchy.root, "config": self.config_source},
            capacity=self.capacity, allocation=self.allocation, tasks=self.tasks, limits=self.limits,
            usage=self.usage, filling=self.filling, files=self.hierarchy.files, events=list(self.events),
        )

    def _event(self, kind: str, message: str, level: int = logging.INFO) -> None:
        log.log(level, "%s", message)
        self.events.append({"at": time.time(), "kind": kind, "message": message})
        if self.metrics:
            self.metrics.event(kind)

    def _summary(self) -> str:
        return f"{len(self.tasks)} task(s) in {len(self.tasks.groups())} group(s); last filling: {self.filling['trigger']}"

    # ── the event loop ────────────────────────────────────────────────────────────────────

    async def _every(self, seconds: float, work) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                work()
            except Exception:
                log.exception("periodic %s failed", getattr(work, "__name__", work))

    def _reconcile(self) -> None:
        for task in list(self.tasks):
            self.check(task.id, "reconcile")

    async def _follow_exits(self) -> None:
        while True:
            task_id = await self._watcher.next()
            self.check(task_id, "exit")

    def _reload_on_signal(self) -> None:
        try:
            self.reload("SIGHUP")
        except RequestError:
            pass  # logged as an event; the old config stays in force

    async def serve(self, socket_path: str) -> None:
        """Run until SIGTERM or SIGINT; tasks keep running after the daemon stops."""
        self._watcher = self.hierarchy.watcher()
        self.readopt()
        for task in list(self.tasks):
            self._watch(task)
        self.refill("start")
        self.snapshot = self.status()
        server = ControlServer(self, socket_path)
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_on_signal)
        workers = [
            asyncio.create_task(self._follow_exits()),
            asyncio.create_task(self._every(self.config.reconcile_interval_s, self._reconcile)),
            asyncio.create_task(self._every(self.config.sample_interval_s, self.sample)),
        ]
        if self.notifier.watchdog_interval_s:
            workers.append(asyncio.create_task(
                self._every(self.notifier.watchdog_interval_s, lambda: self.notifier.send("WATCHDOG=1"))))
        log.info("serving on %s; cgroup %s root %s; capacity %s", socket_path, self.hierarchy.mode,
                 self.hierarchy.root, _vector(self.capacity))
        self.notifier.send("READY=1", f"STATUS={self._summary()}")
        try:
            await stop.wait()
        finally:
            self.notifier.send("STOPPING=1")
            for worker in workers:
                worker.cancel()
            await server.close()
            self._watcher.close()
            if not self.tasks:
                try:
                    self.hierarchy.driver.remove("")
                except CgroupError as error:
                    log.warning("cannot remove cgroup root %s: %s", self.hierarchy.root, error)
            log.info("stopped; %d task(s) keep running", len(self.tasks))


def _vector(vector: Mapping[str, float]) -> str:
    return ", ".join(f"{r} {access.describe(r, v)}" for r, v in vector.items())
