"""From a DRF allocation to the limits of every cgroup governor owns (DESIGN.md §3). Pure.

The tree below governor's root::

    <group>/            group limits = the group's allocation A_g = λ_g · D_g
      task-<id>/        task limits  = λ_g · (the task's declared demand)

so a task never runs above what it declared, and a group's tasks together never above its
share. Resources are named as in the allocator: ``cpu`` (cores), ``memory`` (bytes),
``io.<device>.read`` / ``io.<device>.write`` (bytes/s).

* CPU: ``cpu_quota_usec = cores × period`` (at least the kernel's 1 ms); a group's
  ``cpu_weight`` is ``100 × weight`` so idle CPU beyond the quotas is never handed out, but
  within them contention follows the weights. With ``cpu = "cores"`` groups also get disjoint
  whole cores (largest-remainder rounding of their CPU allocation).
* Memory: ``memory_high_bytes`` = the allocation (throttle and reclaim); with
  ``memory = "hard"`` also ``memory_max_bytes`` (OOM kill beyond it).
* I/O: ``io_max`` per governed device, ``rbps``/``wbps`` = the allocation; a zero allocation
  (nothing declared) leaves that direction unthrottled, as the kernel has no "0 bytes/s".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from cgroups.limits import DEFAULT_PERIOD_USEC, CgroupLimits, IoMax

MIN_QUOTA_USEC = 1_000
_WEIGHT_RANGE = (1, 10_000)


@dataclass(frozen=True)
class TaskShare:
    """A running task as the planner sees it: its cgroup, group and declared demand."""

    cgroup: str
    group: str
    demand: Mapping[str, float]


def group_cgroup(group: str) -> str:
    """Cgroup path of a group, relative to governor's root."""
    return group


def task_cgroup(group: str, task_id: str) -> str:
    """Cgroup path of a task, relative to governor's root."""
    return f"{group}/task-{task_id}"


def plan(
    allocations: Mapping[str, Mapping[str, float]],
    fractions: Mapping[str, float],
    weights: Mapping[str, float],
    tasks: Sequence[TaskShare],
    *,
    io_devices: Mapping[str, str],
    cpu_mode: Literal["quota", "cores"] = "quota",
    memory_mode: Literal["soft", "hard"] = "soft",
    cpus: Sequence[int] = (),
    period_usec: int = DEFAULT_PERIOD_USEC,
) -> dict[str, CgroupLimits]:
    """Limits for every group and task cgroup.

    Args:
        allocations: group → its allocation vector A_g (resource → cores, bytes, bytes/s).
        fractions: group → λ_g, the fraction of its demand it was given (0..1).
        weights: group → weight (> 0).
        tasks: every running task.
        io_devices: governed device name (as in ``io.<name>.read``) → whole-disk ``MAJ:MIN``.
        cpu_mode: ``"cores"`` also pins groups to disjoint whole cores taken from ``cpus``.
        memory_mode: ``"hard"`` also sets ``memory.max``.
        cpus: the CPU numbers governor may hand out in ``"cores"`` mode.
        period_usec: the CFS period, usec.

    Returns:
        cgroup path relative to governor's root → limits, groups before their tasks.
    """
    cores = assign_cores({g: a.get("cpu", 0.0) for g, a in allocations.items()}, cpus) if cpu_mode == "cores" else {}
    result: dict[str, CgroupLimits] = {}
    for group, allocation in allocations.items():
        result[group_cgroup(group)] = _limits(
            allocation, io_devices, memory_mode, period_usec,
            cpu_weight=_cpu_weight(weights[group]), cpuset_cpus=cores.get(group),
        )
    for task in tasks:
        fraction = fractions[task.group]
        scaled = {r: fraction * amount for r, amount in task.demand.items()}
        result[task.cgroup] = _limits(scaled, io_devices, memory_mode, period_usec)
    return result


def _limits(vector: Mapping[str, float], io_devices: Mapping[str, str], memory_mode: str, period_usec: int,
            *, cpu_weight: int | None = None, cpuset_cpus: str | None = None) -> CgroupLimits:
    memory = int(vector.get("memory", 0)) or None
    io_max = []
    for name, device in io_devices.items():
        read = int(vector.get(f"io.{name}.read", 0)) or None
        write = int(vector.get(f"io.{name}.write", 0)) or None
        if read or write:
            io_max.append(IoMax(device, read, write))
    return CgroupLimits(
        cpu_quota_usec=max(MIN_QUOTA_USEC, round(vector.get("cpu", 0.0) * period_usec)),
        cpu_period_usec=period_usec,
        cpu_weight=cpu_weight,
        cpuset_cpus=cpuset_cpus,
        memory_high_bytes=memory,
        memory_max_bytes=memory if memory_mode == "hard" else None,
        io_max=tuple(io_max),
    )


def _cpu_weight(weight: float) -> int:
    low, high = _WEIGHT_RANGE
    return min(high, max(low, round(100 * weight)))


def assign_cores(cpu: Mapping[str, float], cpus: Sequence[int]) -> dict[str, str | None]:
    """Disjoint whole cores per group by largest-remainder rounding of their CPU allocation.

    Args:
        cpu: group → cores allocated (their sum at most ``len(cpus)``).
        cpus: the CPU numbers to hand out, in order.

    Returns:
        group → kernel CPU list (``"0-1"``, ``"2,5"``), or None for a group rounded down to no
        whole core: it keeps its quota but shares the CPUs no group holds exclusively.
    """
    total = min(len(cpus), round(sum(cpu.values())))
    whole = {g: math.floor(c) for g, c in cpu.items()}
    spare = total - sum(whole.values())
    # Largest remainders first; ties by group name so the answer is deterministic.
    for group in sorted(cpu, key=lambda g: (-(cpu[g] - whole[g]), g))[:max(0, spare)]:
        whole[group] += 1
    result: dict[str, str | None] = {}
    start = 0
    for group in cpu:
        count = whole[group]
        result[group] = _cpu_list(cpus[start:start + count]) if count else None
        start += count
    return result


def _cpu_list(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``."""
    ranges: list[list[int]] = []
    for cpu in cpus:
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in ranges)
