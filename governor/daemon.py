"""The daemon: the one place that ties events, allocation and enforcement together (DESIGN.md §4).

    launch / exit / reconcile ──► Tasks ──► demands D_g ──► drf.progressive_filling
        ──► limits.plan ──► driver.apply (only what changed) ──► cgroupfs

* ``launch`` (control socket): check the caller, create the task cgroup, refill, write the
  limits, move the caller's pid in, save the task's record, reply. The caller then execs its
  command, so all its memory is charged to the task from the first byte.
* exit: the exit watcher (inotify on ``cgroup.events`` on v2, pidfd on v1) wakes the daemon;
  an empty task cgroup is removed and the host refilled. A reconcile pass every
  ``reconcile_interval`` seconds catches what a watcher missed.
* usage: every ``sample_interval`` seconds each group and task cgroup is sampled for status.

Killing the daemon never kills a task: on start it re-adopts every task whose record and
populated cgroup it finds, and forgets the rest.
"""

from __future__ import annotations

import asyncio
import errno
import grp
import logging
import os
import pwd
import signal
import time
from collections.abc import Mapping

from governor.config import Config, group_name_problem
from governor.drf import progressive_filling
from governor.errors import CgroupError, CgroupWriteError, GovernorError, RequestError
from governor.hierarchy import Hierarchy
from governor.limits import TaskShare, group_cgroup, plan
from governor.model import Allocation, GroupDemand
from governor.protocol import LaunchRequest, Peer, StatusRequest
from governor.server import ControlServer
from governor.state import Task, Tasks, TaskStore
from governor.status import build_status
from governor.units import format_number, format_size
from governor.usage import Sample, usage

log = logging.getLogger("governor.daemon")


class Daemon:
    """Serve launches, follow exits, keep every cgroup at its DRF limits.

    Args:
        config: the config in force; ``config_source`` says where it came from.
        hierarchy: governor's cgroup root and driver.
        store: task records under the state directory.
        host_cpus: CPU numbers this host offers (``os.sched_getaffinity``).
        host_memory: bytes of memory on the host.
        io_devices: governed device name → whole-disk ``MAJ:MIN``.
    """

    def __init__(self, config: Config, config_source: str, hierarchy: Hierarchy, store: TaskStore, *,
                 host_cpus: list[int], host_memory: int, io_devices: Mapping[str, str]):
        self.config = config
        self.config_source = config_source
        self.hierarchy = hierarchy
        self.store = store
        self.cpus = host_cpus
        self.capacity = config.capacity(float(len(host_cpus)), host_memory)
        self.io_devices = dict(io_devices)
        self.tasks = Tasks()
        self.allocation: Allocation | None = None
        self.limits: dict = {}
        self.filling: dict = {"at": None, "trigger": "start", "duration_ms": 0.0}
        self.usage: dict[str, dict[str, float]] = {}
        self.write_errors = 0
        self.started = time.time()
        self._samples: dict[str, Sample] = {}
        self._watcher = None

    # ── requests ──────────────────────────────────────────────────────────────────────────

    async def handle(self, request, peer: Peer) -> dict:
        """The control server's handler (see :mod:`governor.protocol`)."""
        if isinstance(request, LaunchRequest):
            return self.launch(request, peer)
        if isinstance(request, StatusRequest):
            return {"status": self.status()}
        raise RequestError("unknown_op", f"operation {type(request).__name__} is not served")

    def launch(self, request: LaunchRequest, peer: Peer) -> dict:
        """Place the caller's own pid in a new task of its group and refill.

        Raises:
            RequestError: ``forbidden`` (another pid, a group not the caller's), ``bad_request``
                (a demand that cannot be governed), ``exceeds_capacity``, ``unavailable``.
        """
        if request.pid != peer.pid:
            raise RequestError("forbidden", f"a client may launch only its own pid ({peer.pid}), not {request.pid}")
        user, unix_groups = _identity(peer.uid, peer.gid)
        group = self._group_for(request.group, peer.uid, user, unix_groups)
        demand = self._demand(request.demand)
        task = Task(self.store.new_id(), group, request.pid, peer.uid, user, tuple(request.command), demand, time.time())
        self.tasks.add(task)
        try:
            self.hierarchy.prepare(task.cgroup)
            self.refill(f"launch task {task.id}")
            self.hierarchy.driver.move(task.cgroup, task.pid)
            self.store.save(task)
        except GovernorError as error:
            self._forget(task)
            self.refill(f"failed launch of task {task.id}")
            code = "bad_request" if isinstance(error, CgroupWriteError) and error.errno == errno.ESRCH else "unavailable"
            raise RequestError(code, str(error)) from error
        self._watch(task)
        log.info("task %s started: pid %d, user %s, group %s, demand %s", task.id, task.pid, user, group,
                 _vector(demand))
        return {"task": task.id, "group": group, "cgroup": str(self.hierarchy.path(task.cgroup)),
                "limits": self.hierarchy.files(self.limits[task.cgroup])}

    def _group_for(self, requested: str | None, uid: int, user: str, unix_groups: list[str]) -> str:
        allowed = self.config.allowed_groups(user, unix_groups)
        if requested is None:
            group = self.config.group_for(user, unix_groups)
            if group is None:
                raise RequestError("forbidden", f"user {user} belongs to no governed group")
            return group
        if requested in allowed or (uid == 0 and self._known_group(requested)):
            return requested
        if uid == 0:
            raise RequestError("not_found", f"no group {requested!r} in the config")
        raise RequestError("forbidden", f"user {user} may not launch into group {requested!r} "
                                        f"(allowed: {', '.join(allowed) or 'none'})")

    def _known_group(self, name: str) -> bool:
        """An explicit group, or the per-user group of a user this host knows."""
        if any(rule.name == name for rule in self.config.groups):
            return True
        if self.config.everyone_weight is None or group_name_problem(name) is not None:
            return False
        try:
            pwd.getpwnam(name)
        except KeyError:
            return False
        return True

    def _demand(self, flags: Mapping[str, float]) -> dict[str, float]:
        if ("io_read" in flags or "io_write" in flags) and not self.io_devices:
            raise RequestError("bad_request", "demand.io_read/io_write: no I/O device is governed "
                                              "(add a [[capacity.io]] entry to the config)")
        demand = self.config.task_demand(**flags)
        for resource in ("cpu", "memory"):
            if demand.get(resource, 0) <= 0:
                raise RequestError("bad_request", f"demand.{resource} must be > 0: governor limits every task")
        for resource, amount in demand.items():
            if amount > self.capacity.get(resource, 0):
                raise RequestError("exceeds_capacity", f"demand {resource} = {_amount(resource, amount)} exceeds "
                                                       f"the capacity of {_amount(resource, self.capacity[resource])}")
        return demand

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
        duration_ms = (time.perf_counter() - start) * 1000
        self.filling = {"at": time.time(), "trigger": trigger, "duration_ms": duration_ms}
        shares = ", ".join(f"{g} {a.dominant_share:.1%}" for g, a in got.items()) or "no tasks"
        log.info("refill after %s: %s (%.1f ms)", trigger, shares, duration_ms)

    def _weight(self, group: str) -> float:
        weight = self.config.weight_of(group)
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
            self.write_errors += 1
            log.error("%s", error)

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
        log.info("task %s ended (%s)", task.id, trigger)
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
                log.info("re-adopted task %s (group %s, pid %d)", task.id, task.group, task.pid)
            else:
                self._forget(task)

    # ── periodic work ─────────────────────────────────────────────────────────────────────

    def sample(self) -> None:
        """Sample every group and task cgroup and update measured usage."""
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

    def status(self) -> dict:
        """The status object of ``governor status --json`` (schema in the README)."""
        return build_status(
            daemon={"pid": os.getpid(), "started": self.started, "cgroup_mode": self.hierarchy.mode,
                    "cgroup_root": self.hierarchy.root, "config": self.config_source},
            capacity=self.capacity, allocation=self.allocation, tasks=self.tasks, limits=self.limits,
            usage=self.usage, filling=self.filling, files=self.hierarchy.files,
        )

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

    async def serve(self, socket_path: str) -> None:
        """Run until SIGTERM or SIGINT; tasks keep running after the daemon stops."""
        self._watcher = self.hierarchy.watcher()
        self.readopt()
        for task in list(self.tasks):
            self._watch(task)
        self.refill("start")
        server = ControlServer(self, socket_path)
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        workers = [
            asyncio.create_task(self._follow_exits()),
            asyncio.create_task(self._every(self.config.reconcile_interval_s, self._reconcile)),
            asyncio.create_task(self._every(self.config.sample_interval_s, self.sample)),
        ]
        log.info("serving on %s; cgroup %s root %s; capacity %s", socket_path, self.hierarchy.mode,
                 self.hierarchy.root, _vector(self.capacity))
        try:
            await stop.wait()
        finally:
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


def _identity(uid: int, gid: int) -> tuple[str, list[str]]:
    """User name and Unix group names of a peer (numbers where the host has no name)."""
    try:
        user = pwd.getpwuid(uid).pw_name
        gids = os.getgrouplist(user, gid)
    except KeyError:
        return str(uid), [str(gid)]
    names = []
    for number in gids:
        try:
            names.append(grp.getgrgid(number).gr_name)
        except KeyError:
            names.append(str(number))
    return user, names


def _amount(resource: str, value: float) -> str:
    if resource == "cpu":
        return f"{format_number(value)} core" + ("" if value == 1 else "s")
    return format_size(value) + ("/s" if resource.startswith("io.") else "")


def _vector(vector: Mapping[str, float]) -> str:
    return ", ".join(f"{r} {_amount(r, v)}" for r, v in vector.items())
