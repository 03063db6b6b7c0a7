"""Observation: what the tasks use (sampled every ``sample_interval``), whether the groups are
held to their CPU guarantees, and the status snapshot every viewer shares (``status``,
``watch``, ``top``, the metrics).

The daemon's samples are read on a thread of their own (the sampler), not on the event loop:
at 1,000 tasks a tick reads 300 cgroups, eight files each, and read on the loop in steps of
25 it held the loop 10-20 ms a step (asyncio's slow-callback log); a launch waited behind a
step at each of its hops (`scripts/bench --rate 50`: launch p99 210 ms, 59 ms with the
sampler). The sampler reads, the loop turns counters into use; the cgroup thread
(:mod:`governor.daemon.tree`) is kept for the calls that take ``cgroup_mutex``, so a launch's
``mkdir`` never queues behind a tick's reads. With the metrics served and GPUs governed, the
sampler also asks NVML what the GPUs do (at most every :data:`GPU_SAMPLE_S`) and finds the task
of each process NVML names, for the metrics' per-GPU and per-task gauges: neither a scrape nor a
status build ever calls NVML.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from collections.abc import Callable, Mapping, Sequence

from governor.cgroups.hierarchy import Hierarchy
from governor.cgroups.stats import CgroupStats
from governor.daemon import inbox
from governor.daemon.enforcement import Enforcement
from governor.daemon.fairshare_history import FairShareStage
from governor.daemon.foreign_poll import Foreign
from governor.daemon.journal import Journal
from governor.daemon.notices import Notices
from governor.daemon.policy import Policy
from governor.daemon.waiting import Queue
from governor.errors import CgroupError
from governor.core.gpus import GpuInventory, GpuUse
from governor.config.kinds import task_in
from governor.core.cpu_saturation import SATURATION, cpu_saturated
from governor.core.foreign_capacity import Tenant
from governor.host.nvml import sample_use
from governor.core.queue import queue_view
from governor.core.steady import Steady
from governor.core.state import Task, Tasks
from governor.wire.status import (StatusReply, device_entries, gpu_entries, groups_status, psi_entry, sections,
                                  status_of)
from governor.wire.status_json import encode
from governor.wire.status_types import Status
from governor.wire.visibility import ADMIN, StatusViews, Viewer
from governor.core.usage import Sample, usage

__all__ = ["GPU_SAMPLE_S", "Observation", "SAMPLED_TASKS"]

# Task cgroups sampled per tick: groups and login sessions (the hold needs them) every tick,
# tasks in turn. Reading all of 1,000 tasks every second took 20 % of a core (scripts/bench).
SAMPLED_TASKS = 200
# NVML is asked at most this often: each sample is an nvmlInit (up to seconds per GPU without
# persistence mode) and a shutdown, on the sampler thread; Prometheus scrapes every 15 s or so.
GPU_SAMPLE_S = 5.0


# How long, seconds, the CPU saturation (held or not) must last before the journal tells it.
SATURATION_TOLD_AFTER_S = 10.0


class Observation:
    """Measured use, the CPU hold, the status snapshot.

    Args:
        hierarchy: where counters are read; tasks, policy, enforcement, queue (the launches waiting), journal: the
            other stages (the snapshot shows them all); inbox: told when the groups are
            held to their CPU guarantees, or released; fair_share: told each sample's
            cumulative CPU counters of the groups and login sessions, and each task that ended
            (``[fairshare]``), if any.
        notices: told each task's counters with its previous ones, and of each sample, for the
            ``[notify]`` events found there (:class:`~governor.daemon.notices.Notices`), if any.
        foreign: the foreign tenants, whose :attr:`~governor.daemon.foreign_poll.Foreign.tenants`
            as last read status shows, if any.
        gpu_guard: the GPU guard outside governor's tasks, for status
            (:meth:`GpuGuard.describe <governor.daemon.gpu_guard.GpuGuard.describe>`).
        usage: kept up to date here, read by settle too: cgroup → its use over the last two
            samples (:func:`governor.core.usage.usage`: cores, bytes, bytes/s); a group's includes
            its login sessions'.

    Attributes:
        started: when the daemon started (unix s).
    """

    def __init__(self, *, hierarchy: Hierarchy, tasks: Tasks, policy: Policy, enforcement: Enforcement,
                 queue: Queue, inbox: inbox.Inbox, journal: Journal, gpu_guard: Callable[[], dict],
                 usage: dict[str, dict[str, float]], fair_share: FairShareStage | None = None,
                 notices: Notices | None = None, foreign: Foreign | None = None):
        self.hierarchy = hierarchy
        self.notices = notices
        self.fair_share = fair_share
        self.tasks = tasks
        self.policy = policy
        self.enforcement = enforcement
        self.queue = queue
        self.inbox = inbox
        self.journal = journal
        self.started = time.time()
        self.usage = usage
        self._samples: dict[str, Sample] = {}
        self._satisfied: dict[str, float] = {}  # groups that used less while held: their use then
        self._saturation = Steady(SATURATION_TOLD_AFTER_S, told=False)  # what the journal said last
        self._turns: dict[str, int] = {}  # periodic work done in turn → where it starts next
        self._status: tuple[int, dict] | None = None  # the status reply built at that version
        self._status_tasks: dict[str, tuple] = {}  # its task entries, kept while unchanged
        self._status_groups: dict[str, tuple] = {}  # and its busy groups' entries
        self._status_json: dict[int, tuple] = {}  # and their JSON
        self._snapshot = Status()  # the status last built, typed
        self._status_checked: dict[int, tuple] = {}  # and those its encoding checked
        self._views = StatusViews(StatusReply)  # its form for each viewer who may not see all
        self._sampler = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sampler")
        self._forgotten: set[str] | None = None  # cgroups forgotten while the sampler reads
        self._group_at: dict[str, str] = {}  # a group's cgroup → the group, as last sampled
        self._gpus_sampled = float("-inf")  # when NVML was last asked (monotonic s)
        self.gpu_guard = gpu_guard
        self.foreign = foreign

    # ── sampling ────────────────────────────────────────────────────────────────────────

    def sample(self) -> None:
        """Sample every group cgroup and login session, and tasks in turn (at most
        :data:`SAMPLED_TASKS` a tick), reading on this thread, and update the measured use (a
        status is built only when asked for). The daemon samples with :meth:`sample_off_loop`."""
        self._take(self._by_group(_read(self.hierarchy, self._due())))
        gpus = self._gpus_due()
        if gpus is not None:
            self._take_gpus(*_read_gpus(self.hierarchy, gpus))

    async def sample_off_loop(self) -> None:
        """:meth:`sample`, the cgroup files read on the sampler thread while the event loop
        serves others."""
        due = self._due()
        self._forgotten = set()
        try:
            read = await asyncio.get_running_loop().run_in_executor(self._sampler, _read, self.hierarchy, due)
        finally:
            forgotten, self._forgotten = self._forgotten, None
        # A cgroup removed meanwhile was forgotten: its use must not come back.
        self._take({rel: sample for rel, sample in self._by_group(read).items() if rel not in forgotten})
        gpus = self._gpus_due()
        if gpus is not None:
            self._take_gpus(*await asyncio.get_running_loop().run_in_executor(self._sampler, _read_gpus,
                                                                              self.hierarchy, gpus))

    def close(self) -> None:
        """Let the sampler thread finish what it reads, and end it."""
        self._sampler.shutdown(wait=True, cancel_futures=True)

    def _due(self) -> list[str]:
        self._group_at = {place: group for group, place in self.tasks.places().items()}
        return list(self._group_at) + [t.cgroup for t in self.tasks.logins()] + self.tasks_to_sample()

    def _by_group(self, read: Mapping[str, Sample]) -> dict[str, Sample]:
        # A group's use is kept under its name, wherever its cgroup is in the tree.
        return {self._group_at.get(rel, rel): sample for rel, sample in read.items()}

    def _take(self, read: Mapping[str, Sample]) -> None:
        """Turn fresh samples into use (against each cgroup's previous one)."""
        devices = {number: name for name, number in self.policy.io_devices.items()}
        fresh = {}
        for rel, current in read.items():
            previous = self._samples.get(rel)
            fresh[rel] = usage(previous, current, devices)
            self._samples[rel] = current
            found = task_in(rel) if self.notices is not None else None
            if found is not None:
                self.notices.sampled(found[1], previous and previous.stats, current.stats)
        if self.notices is not None:
            self.notices.waiting()
        self.journal.changed()
        self.usage.update(fresh)
        # A group's use includes its login sessions', which run outside its cgroup.
        for group, tasks in self.tasks.groups().items():
            logins = [self.usage.get(t.cgroup, {}) for t in tasks if t.is_login]
            if logins:
                own = [fresh[group]] if group in fresh else []
                # Stalled shares of the last 10 s (percent) do not add up: the worst is the group's.
                self.usage[group] = {key: (max if key.endswith(".avg10") else sum)(u.get(key, 0.0)
                                                                                   for u in own + logins)
                                     for key in {k for u in own + logins for k in u}}
        self.check_saturation()
        if self.fair_share is not None:
            self._count(read)
            self.fair_share.tick(time.time(), time.monotonic())

    def _count(self, read: Mapping[str, Sample]) -> None:
        """Hand fair share the cumulative CPU counter of each group cgroup and login session
        read (a group's keeps what its ended tasks used, so no task is missed between ticks)."""
        for group in self._group_at.values():
            if group in read:
                self.fair_share.counted(group, group, read[group].stats.cpu_usage_usec)
        for login in self.tasks.logins():
            if login.cgroup in read:  # systemd's, made before: its first reading is where counting starts
                self.fair_share.counted(login.cgroup, login.group, read[login.cgroup].stats.cpu_usage_usec,
                                        made_here=False)

    def _gpus_due(self) -> GpuInventory | None:
        """The GPUs to ask NVML about now: only while the metrics are served (a sink that takes
        ``gpu_sample``), GPUs are governed and one has a UUID (NVML finds them by it), and
        :data:`GPU_SAMPLE_S` after the last time."""
        inventory = self.policy.gpus
        if (getattr(self.journal.metrics, "gpu_sample", None) is None or inventory is None
                or getattr(self.journal.metrics, "address", True) is None  # a sink that serves nowhere
                or not any(gpu.uuid for gpu in inventory.gpus)):
            return None
        now = time.monotonic()
        if now - self._gpus_sampled < GPU_SAMPLE_S:
            return None
        self._gpus_sampled = now
        return inventory

    def _take_gpus(self, use: GpuUse | None, where: Mapping[int, str]) -> None:
        """Hand NVML's sample to the metrics, each process it names that runs in a task (``where``:
        pid → task id) as that task's ``(group, id)``."""
        owners = {}
        for pid, task_id in where.items():
            task = self.tasks.get(task_id)
            if task is not None:
                owners[pid] = (task.group, task.id)
        self.journal.metrics.gpu_sample(use, owners)

    def tasks_to_sample(self) -> list[str]:
        """The next :data:`SAMPLED_TASKS` task cgroups (a task's use is a rate over the time
        between its own samples, so sampling it less often keeps it right)."""
        return [t.cgroup for t in self.in_turn("sample", [t for t in self.tasks if not t.is_login], SAMPLED_TASKS)]

    def in_turn(self, work: str, tasks: list[Task], most: int) -> list[Task]:
        """The next ``most`` of ``tasks``, round robin, for periodic ``work``."""
        if len(tasks) <= most:
            return tasks
        start = self._turns.get(work, 0) % len(tasks)
        self._turns[work] = start + most
        return (tasks[start:] + tasks)[:most]

    def last_stats(self, rel: str) -> CgroupStats | None:
        """The counters of ``rel``'s last sample, if any."""
        sample = self._samples.get(rel)
        return sample.stats if sample is not None else None

    def ended(self, task: Task) -> None:
        """``task`` ended (its record is gone): fair share charges what it reserved up to now."""
        if self.fair_share is not None:
            self.fair_share.ended(task, time.time())

    def forget(self, rel: str) -> None:
        """Drop what was measured of ``rel``, a task's cgroup or a group's name (its cgroup is gone)."""
        self.usage.pop(rel, None)
        self._samples.pop(rel, None)
        if self._forgotten is not None:
            self._forgotten.add(rel)

    def check_saturation(self, now: float | None = None) -> None:
        """Hold the groups to their CPU guarantees while every one wants all of its own (exact
        shares, nothing idle to lend); let them borrow again once one uses less. The journal
        tells a change once it has held :data:`SATURATION_TOLD_AFTER_S` (``now``: seconds,
        ``time.monotonic()`` unless given): a use that hovers at the guarantee flips the hold
        every few seconds, and each flip told filled the journal and ``top``'s events."""
        enforcement = self.enforcement
        got = enforcement.allocation.groups if enforcement.allocation else {}
        guarantees = {group: a.allocation.get("cpu", 0.0) for group, a in got.items()}
        use = {group: self.usage.get(group, {}).get("cpu", 0.0) for group in guarantees}
        saturated, self._satisfied = cpu_saturated(guarantees, use, capacity=self.policy.capacity.get("cpu", 0.0),
                                                   held=enforcement.cpu_saturated, satisfied=self._satisfied)
        idle = [group for group, cores in guarantees.items() if use[group] < SATURATION * cores]
        if saturated:
            why = "every group wants all of its CPU guarantee: each is held to it (cpu.max) until one uses less"
        elif len(idle) == 1:
            why = f"{idle[0]} uses less than its CPU guarantee: the others may borrow it again"
        elif idle:
            why = f"{', '.join(idle)} use less than their CPU guarantees: the others may borrow again"
        else:  # none idle, yet something to lend (a group's task ended, the capacity grew)
            why = "not every CPU guarantee is wanted in full: the groups may borrow again"
        if self._saturation.see(saturated, time.monotonic() if now is None else now):
            self.journal.event("saturation", why)
        if saturated == enforcement.cpu_saturated:
            return
        enforcement.hold(saturated, why)
        self.inbox.put(inbox.Sample(saturated))

    # ── the snapshot ────────────────────────────────────────────────────────────────────

    def tenants(self) -> Mapping[str, Tenant]:
        """The foreign tenants as last read, name → tenant ({} with none governed)."""
        return self.foreign.tenants if self.foreign is not None else {}

    def status(self, viewer: Viewer = ADMIN) -> dict:
        """The status object of ``governor status --json`` (schema in docs/operator.md) as
        ``viewer`` sees it (:mod:`governor.wire.visibility`; by default in full), built once
        per change (an event, a sample) and shared by every caller until the next: a storm of
        ``status`` requests or many ``watch`` streams cost one build, not one each. Callers must
        not modify it."""
        return self.status_reply(viewer).status

    def snapshot(self) -> Status:
        """The status in full, typed (:class:`~governor.wire.status_types.Status`), built as
        :meth:`status` is: what the metrics read (they show no command line or pid, so the
        full form shows no one more than the public one would)."""
        self._full_reply()
        return self._snapshot

    def status_reply(self, viewer: Viewer = ADMIN) -> StatusReply:
        """The status reply (``{"status": <status>}``) as ``viewer`` sees it, the same object
        for each viewer's form until the status changes: the server encodes a reply once, for
        every watcher who sees that form (:class:`~governor.wire.visibility.StatusViews`)."""
        return self._views.reply(self._full_reply(), viewer)

    def _full_reply(self) -> StatusReply:
        """The status reply in full (an admin's), built once per change."""
        if self._status is not None and self._status[0] == self.journal.version:
            return self._status[1]
        policy = self.policy
        groups = groups_status(tasks=self.tasks, allocation=self.enforcement.allocation, usage=self.usage,
                               in_force=self.hierarchy.in_force, configured=policy.configured(self.tasks.counts()),
                               parents=policy.config.parents, place=policy.config.place,
                               fairshare=self.fair_share.standings(time.time()) if self.fair_share else None,
                               kept=self._status_tasks, kept_groups=self._status_groups)
        gpus = gpu_entries(policy.gpus, self.tasks.holders(), self.tasks)
        devices = device_entries(policy.devices, self.tasks)
        host = policy.capacity if policy.host_capacity is None else policy.host_capacity
        self._snapshot = status_of(groups, **sections(
            daemon=self._daemon(), capacity=dict(policy.capacity), caps=dict(policy.root_caps or {}),
            host_capacity=dict(host), foreign={name: tenant.to_json() for name, tenant in self.tenants().items()},
            filling=self.enforcement.filling, events=list(self.journal.events),
            queue=queue_view(self.queue, self.queue.admission), psi=psi_entry(self.hierarchy.no_psi),
            **({"gpus": gpus} if gpus is not None else {}), **({"devices": devices} if devices is not None else {})))
        self._status = (self.journal.version,
                        StatusReply(encode(self._snapshot, self._status_json), self._status_checked))
        return self._status[1]

    def _daemon(self) -> dict:
        """The status's ``daemon``: this process, its hierarchy and config, and what is on
        (the GPU guard, the units' protection, ``[notify]``'s runs) where it is."""
        enforcement, policy = self.enforcement, self.policy
        return {"pid": os.getpid(), "started": self.started, "cgroup_mode": self.hierarchy.mode,
                "cgroup_root": self.hierarchy.root, "config": policy.source,
                "io_sharing": dict(policy.io_sharing), "cpu_saturated": enforcement.cpu_saturated,
                "settle_generation": self.inbox.generation,
                **({"gpu_guard": self.gpu_guard()} if policy.devices else {}),
                **({"unit_protection": enforcement.units.in_force} if enforcement.units is not None else {}),
                **({"notify": self.journal.alerts.counts()}
                   if policy.config.notify.command and self.journal.alerts is not None else {})}


def _read_gpus(hierarchy: Hierarchy, inventory: GpuInventory) -> tuple[GpuUse | None, dict[int, str]]:
    """(On the sampler thread) what NVML says of ``inventory``'s GPUs, and pid → the id of the
    task (or session) each process it names runs in; a process outside governor's tasks, or
    gone meanwhile, is left out."""
    use = sample_use(inventory)
    where = {}
    for pid in use.process_memory if use is not None else ():
        try:
            rel = hierarchy.locate(pid).rel
        except CgroupError:
            continue
        found = task_in(rel) if rel else None
        if found is not None:
            where[pid] = found[1]
    return use, where


def _read(hierarchy: Hierarchy, rels: Sequence[str]) -> dict[str, Sample]:
    """(On the sampler thread) a sample of each of ``rels`` that can be read; a cgroup that
    vanished between its task's exit and the refill is left out."""
    read = {}
    for rel in rels:
        try:
            read[rel] = Sample(time.monotonic(), hierarchy.read_stats(rel))
        except CgroupError:
            continue
    return read
