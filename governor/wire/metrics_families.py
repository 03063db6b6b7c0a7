"""The metric families read from the daemon's status at each scrape (per group, the queue,
foreign tenants, pressure, ``[notify]``, GPUs): :class:`StatusFamilies`, which
:class:`~governor.wire.metrics.Metrics` registers beside its own counters."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from governor.config.resources import compressible, measured
from governor.core.gpus import GpuUse
from governor.wire.status import EVERYONE
from governor.wire.status_types import Status

__all__ = ["TREE_LABELS", "StatusFamilies"]

# The labels of every per-group series: the group, the group it nests under ("" at the top),
# and whether it is a leaf ("true") or an internal group whose series sum its subtree
# ("false"): sum(governor_group_usage{leaf="true"}) counts each task once.
TREE_LABELS = ["group", "parent", "leaf"]


class StatusFamilies:
    """Gauges built from a status snapshot (and the last GPU sample) on each scrape: a
    prometheus-client collector (``collect()`` yields the metric families).

    Args:
        snapshot: returns the latest status; gpu: returns NVML's last sample and pid →
            ``(group, task id)`` of the processes it names, or None (no NVML series).
    """

    def __init__(self, snapshot: Callable[[], Status],
                 gpu: Callable[[], tuple[GpuUse, Mapping[int, tuple[str, str]]] | None] = lambda: None):
        self.snapshot = snapshot
        self.gpu = gpu

    def collect(self):
        status = self.snapshot()
        yield from self._groups(status)
        yield from _stalls(status)
        yield from _foreign(status)
        yield from _gpus(status, self.gpu())
        yield from _notify(status)

    def _groups(self, status: Status):
        capacity = GaugeMetricFamily("governor_capacity", "What governor divides (cores, bytes, bytes/s, GPUs): the "
                                     "host's less the reserve and what foreign tenants hold", labels=["resource"])
        for resource, amount in status.capacity.items():
            capacity.add_metric([resource], amount)
        root_cap = GaugeMetricFamily("governor_root_cap", "The root's cap on a count, never divided (pids: processes "
                                     "and threads, pids.max: the kernel's limit less the reserve)", labels=["resource"])
        for resource, amount in status.caps.items():
            root_cap.add_metric([resource], amount)
        share = GaugeMetricFamily("governor_group_dominant_share", "Dominant share of the host (0..1)",
                                  labels=TREE_LABELS)
        weight = GaugeMetricFamily("governor_group_weight", "Group weight", labels=TREE_LABELS)
        tasks = GaugeMetricFamily("governor_group_tasks", "Running tasks", labels=TREE_LABELS)
        allocation = GaugeMetricFamily("governor_group_allocation", "DRF allocation A_g (cores, bytes, bytes/s)",
                                       labels=[*TREE_LABELS, "resource"])
        floor = GaugeMetricFamily("governor_group_floor", "Share of every resource DRF promises the group while "
                                  "every group is busy (weight / sum of weights)", labels=TREE_LABELS)
        guarantee = GaugeMetricFamily("governor_group_guarantee", "Guarantee: the DRF allocation of cpu and I/O, "
                                      "enforced by weights (cores, bytes/s)", labels=[*TREE_LABELS, "resource"])
        reserved = GaugeMetricFamily("governor_group_reserved", "Memory and GPUs the group's admitted tasks hold "
                                     "(bytes, devices; a session: its use)", labels=[*TREE_LABELS, "resource"])
        used = GaugeMetricFamily("governor_group_usage", "Measured use (cores, bytes, bytes/s; GPUs: see "
                                 "governor_gpu_utilization_ratio; pids: processes and threads)",
                                 labels=[*TREE_LABELS, "resource"])
        effective = GaugeMetricFamily("governor_group_effective_weight", "The weight filling uses: the configured "
                                      "one lowered by past use ([fairshare])", labels=TREE_LABELS)
        past = GaugeMetricFamily("governor_group_past_use", "Decayed past use ([fairshare]): dominant share of "
                                 "the host times seconds", labels=TREE_LABELS)
        queue = status.queue
        waiting = GaugeMetricFamily("governor_queue_length", "Tasks waiting for their memory to fit",
                                    value=len(queue))
        oldest = GaugeMetricFamily("governor_queue_oldest_wait_seconds", "How long the longest-waiting "
                                   "task has waited (0 with an empty queue)",
                                   value=max((time.time() - q.queued_at for q in queue if q.queued_at is not None), default=0))
        why = GaugeMetricFamily("governor_queue_task_info", "A waiting task (always 1): its group and why it "
                                "waits, the reason ps, status, explain and top show", labels=["task", "group", "reason"])
        for entry in queue:
            why.add_metric([entry.task, str(entry.group), entry.reason or ""], 1)
        # The idle groups of [groups."*"] (one per account) are one group, "*": one series set.
        accounts = GaugeMetricFamily("governor_idle_accounts", 'Idle groups of [groups."*"] (one per account) '
                                     'the group "*" stands for', value=_accounts(status))
        resources = list(status.capacity)
        counts = list(status.caps)
        groups = status.groups
        parents = {group.parent for group in groups.values()}
        for name, group in groups.items():  # idle groups too: their series at zero
            # An internal group's series are its subtree's sums: leaf="false" keeps them out of a sum.
            leaf = not group.internal and name not in parents
            tree = [name, group.parent or "", "true" if leaf else "false"]
            share.add_metric(tree, group.dominant_share)
            weight.add_metric(tree, group.weight)
            floor.add_metric(tree, group.floor or 0.0)
            tasks.add_metric(tree, len(group.tasks))
            if group.effective_weight is not None:
                effective.add_metric(tree, group.effective_weight)
                past.add_metric(tree, group.past_use or 0.0)
            for resource in counts:  # caps only: no allocation, guarantee or reservation
                used.add_metric([*tree, resource], group.usage.get(resource, 0.0))
            for resource in resources:
                allocation.add_metric([*tree, resource], group.allocation.get(resource, 0.0))
                if measured(resource):  # of a GPU, none: no series, rather than 0
                    used.add_metric([*tree, resource], group.usage.get(resource, 0.0))
                if compressible(resource):
                    guarantee.add_metric([*tree, resource], group.guarantee.get(resource, 0.0))
                else:
                    reserved.add_metric([*tree, resource], group.reserved.get(resource, 0.0))
        yield from (capacity, root_cap, share, weight, floor, tasks, allocation, guarantee, reserved, used, waiting, oldest,
                    why, effective, past, accounts)


def _accounts(status: Status) -> int:
    """How many idle accounts the row ``"*"`` stands for (0 without it)."""
    row = status.groups.get(EVERYONE)
    return row.accounts or 0 if row is not None else 0


def _stalls(status: Status):
    """``governor_group_pressure_seconds_total{group,resource,kind}``: how long each group's
    tasks stalled on cpu, memory or I/O (PSI ``total``; ``some``: one of them waited, ``full``:
    all did). No series at all on a host without PSI (status's ``psi``), rather than zeros."""
    if not status.psi.available:
        return
    stalled = CounterMetricFamily("governor_group_pressure_seconds", "Time the group's tasks stalled waiting "
                                  "for the resource (PSI total; kind some: at least one task waited, full: all "
                                  "did), seconds", labels=["group", "resource", "kind"])
    for name, group in status.groups.items():
        for resource, kinds in group.stall.items():
            for kind, stall in kinds.items():
                stalled.add_metric([name, resource, kind], stall.get("total", 0.0))
    yield stalled


def _notify(status: Status):
    """The ``[notify]`` runs by outcome (status's ``daemon.notify``), where a command is given."""
    counts = status.daemon.notify
    if counts is None:
        return
    outcomes = CounterMetricFamily("governor_notify_events", "[notify] events by outcome: done, failed (exit, "
                                   "timeout), dropped (1,000 waited), refused (notify.user owns the task)",
                                   labels=["outcome"])
    for outcome in ("done", "failed", "dropped", "refused"):
        outcomes.add_metric([outcome], counts.get(outcome, 0))
    yield outcomes
def _foreign(status: Status):
    """What the foreign tenants hold, summed per manager (a Slurm scope's jobs, the pods…), and
    the host's capacity before it is subtracted."""
    host = GaugeMetricFamily("governor_host_capacity", "The host's capacity less the reserve, before foreign "
                             "tenants' holdings are subtracted (cores, bytes, bytes/s, GPUs)", labels=["resource"])
    for resource, amount in status.host_capacity.items():
        host.add_metric([resource], amount)
    held = GaugeMetricFamily("governor_foreign_held", "What subtrees other managers own hold: allocated (Slurm's "
                             "jobs) or used (cores, bytes)", labels=["manager", "resource"])
    sums: dict[tuple[str, str], float] = {}
    for tenant in status.foreign.values():
        manager = str(tenant.manager)
        for resource, amount in tenant.held.items():
            sums[manager, resource] = sums.get((manager, resource), 0.0) + amount
    for labels, amount in sorted(sums.items()):
        held.add_metric(list(labels), amount)
    yield from (host, held)


def _gpus(status: Status, sample: tuple[GpuUse, Mapping[int, tuple[str, str]]] | None):
    """The GPU gauges: how many, who holds each (from the status), and NVML's last sample."""
    if "gpu" in status.capacity:
        yield GaugeMetricFamily("governor_gpus", "GPUs governor hands out (whole devices; a MIG instance "
                                "counts as one)", value=status.capacity["gpu"])
    entries = status.gpus
    if entries is None:
        return  # no GPU governed: no GPU series at all
    held = GaugeMetricFamily("governor_gpu_held", "1 while a task holds the GPU (labels: its group and task), "
                             "0 while it is free (group and task empty); one series per governed GPU",
                             labels=["gpu", "uuid", "group", "task"])
    for gpu in entries:
        free = gpu.task is None
        held.add_metric([str(gpu.index), gpu.uuid or "", "" if free else gpu.group or "",
                         "" if free else gpu.task], 0 if free else 1)
    yield held
    if sample is None:
        return
    use, owners = sample
    utilization = GaugeMetricFamily("governor_gpu_utilization_ratio", "Fraction of NVML's last sample period a "
                                    "kernel ran on the GPU (0..1; absent where NVML does not say, e.g. a MIG "
                                    "instance)", labels=["gpu"])
    for index, fraction in sorted(use.utilization.items()):
        utilization.add_metric([str(index)], fraction)
    memory = GaugeMetricFamily("governor_gpu_memory_used_bytes", "Device memory in use on the GPU (bytes, as "
                               "NVML reports it)", labels=["gpu"])
    for index, used in sorted(use.memory_used.items()):
        memory.add_metric([str(index)], used)
    # Only tasks that still run: one that ended since the sample has no series.
    running = {(name, task.id) for name, group in status.groups.items() for task in group.tasks}
    by_task: dict[tuple[str, str], int] = {}
    for pid, used in use.process_memory.items():
        if owners.get(pid) in running:
            by_task[owners[pid]] = by_task.get(owners[pid], 0) + used
    task_memory = GaugeMetricFamily("governor_task_gpu_memory_bytes", "GPU memory the task's processes hold, "
                                    "summed over its GPUs (bytes; tasks NVML names a process of)",
                                    labels=["group", "task"])
    for (group, task), used in sorted(by_task.items()):
        task_memory.add_metric([group, task], used)
    yield from (utilization, memory, task_memory)
