"""From a DRF allocation to the limits of every cgroup governor owns (DESIGN.md §3). Pure.

Allocations are guarantees, declarations are caps::

    <root>/             cpu.max = capacity (the reserve stays free), memory.low = capacity
      <group>/          guarantee: cpu.weight ∝ A_g,cpu; io.weight ∝ A_g,io where the device
                        has a proportional controller, else io.max = A_g (not work-conserving);
                        memory.low = D_g,memory (what was admitted)
        task-<id>/      cap, written once when the task starts: cpu.max = declared cpu,
                        cpu.weight ∝ declared cpu, memory.high (soft) / + memory.max (hard)
                        = declared, memory.low = declared, io.max = declared

Under full contention CFS gives each group ``capacity × w_g / Σ w = A_g`` (the weights are
proportional to the allocation and the allocations add up to the capacity of a saturated
resource); what a group leaves idle the others use up to their caps, and it comes back within
a scheduling period. Only ratios matter, so group weights are normalised to the largest
(10000) and a refill that raises every share alike writes nothing.

Resources are named as in the allocator: ``cpu`` (cores), ``memory`` (bytes),
``io.<device>.read`` / ``io.<device>.write`` (bytes/s).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from cgroups.limits import DEFAULT_PERIOD_USEC, CgroupLimits, IoMax, IoWeight
from cgroups.parse import format_cpu_list

MIN_QUOTA_USEC = 1_000
WEIGHT_RANGE = (1, 10_000)
# A task's cpu.weight is its declared cores × 100 (1 core = the kernel's default weight 100),
# a fixed scale so that a new task never changes its siblings' weights.
TASK_WEIGHT_PER_CORE = 100
IoSharing = Literal["io.weight", "io.bfq.weight", "io.max"]


def task_cgroup(group: str, task_id: str) -> str:
    """Cgroup path of a task, relative to governor's root."""
    return f"{group}/task-{task_id}"


def task_limits(demand: Mapping[str, float], *, io_devices: Mapping[str, str],
                memory_mode: Literal["soft", "hard"] = "soft",
                period_usec: int = DEFAULT_PERIOD_USEC) -> CgroupLimits:
    """A task's caps: its declaration, set once when it starts and never changed.

    Args:
        demand: declared demand: ``cpu`` cores, ``memory`` bytes, ``io.<name>.read/write`` bytes/s.
        io_devices: governed device name → whole-disk ``MAJ:MIN``.
        memory_mode: ``"hard"`` also sets ``memory.max`` (the OOM killer beyond it).
        period_usec: the CFS period, usec.

    Returns:
        ``cpu.max`` = declared cores × period (at least the kernel's 1 ms), ``cpu.weight`` =
        cores × 100 (1..10000), ``memory.high``/``memory.low`` = declared bytes, ``io.max`` =
        declared rates (a direction declared 0 is not throttled: the kernel has no "0 bytes/s").
    """
    cores = demand.get("cpu", 0.0)
    memory = _whole(demand.get("memory", 0))
    return CgroupLimits(
        cpu_quota_usec=max(MIN_QUOTA_USEC, round(cores * period_usec)),
        cpu_period_usec=period_usec,
        cpu_weight=_clamp(round(cores * TASK_WEIGHT_PER_CORE)),
        memory_low_bytes=memory,
        memory_high_bytes=memory,
        memory_max_bytes=memory if memory_mode == "hard" else None,
        io_max=_io_max(demand, io_devices),
    )


def root_limits(capacity: Mapping[str, float], *, period_usec: int = DEFAULT_PERIOD_USEC) -> CgroupLimits:
    """The governed root: the tasks together never use more CPU than the capacity, so the
    reserve stays free for the system.

    Returns:
        ``cpu.max`` = capacity cores and ``memory.low`` = capacity bytes (governed memory is
        protected from reclaim by the rest of the host). No ``io.max``: a throttled parent
        serves its children's I/O in turn, which would undo the ``io.weight`` split (measured:
        2 : 1 instead of 3 : 1 in the VM); I/O is bounded by the tasks' caps and, where the
        disk has no proportional controller, by the groups' ``io.max``.
    """
    return CgroupLimits(
        cpu_quota_usec=max(MIN_QUOTA_USEC, round(capacity.get("cpu", 0.0) * period_usec)),
        cpu_period_usec=period_usec,
        memory_low_bytes=_whole(capacity.get("memory", 0)),
    )


def group_limits(
    capacity: Mapping[str, float],
    allocations: Mapping[str, Mapping[str, float]],
    demands: Mapping[str, Mapping[str, float]],
    *,
    io_devices: Mapping[str, str],
    io_sharing: Mapping[str, IoSharing],
    cpu_mode: Literal["quota", "cores"] = "quota",
    cpus: Sequence[int] = (),
) -> dict[str, CgroupLimits]:
    """Each group's guarantee.

    Args:
        capacity: resource → what governor divides.
        allocations: group → its allocation A_g (resource → cores, bytes, bytes/s).
        demands: group → D_g, the sum of its running tasks' declarations.
        io_devices: governed device name → whole-disk ``MAJ:MIN``.
        io_sharing: device name → how its guarantee is enforced: ``"io.weight"`` (io.cost),
            ``"io.bfq.weight"`` (BFQ), or ``"io.max"`` (no proportional controller: the
            allocation becomes a hard limit, not work-conserving).
        cpu_mode: ``"cores"`` also pins groups to disjoint whole cores taken from ``cpus``
            (largest remainder of A_g,cpu); not work-conserving by nature.
        cpus: the CPU numbers governor may hand out in ``"cores"`` mode.

    Returns:
        group → limits, in the order of ``allocations``: ``cpu.weight`` ∝ A_g,cpu (the largest
        10000, a zero allocation 1), ``memory.low`` = D_g,memory, and per device either an
        ``io.weight`` ∝ the group's share of the device (read share + write share) or
        ``io.max`` = A_g.
    """
    cpu_weights = proportional_weights({g: a.get("cpu", 0.0) for g, a in allocations.items()})
    cores = assign_cores({g: a.get("cpu", 0.0) for g, a in allocations.items()}, cpus) if cpu_mode == "cores" else {}
    io_weights = {
        name: proportional_weights({g: _device_share(a, name, capacity) for g, a in allocations.items()})
        for name in io_devices if io_sharing.get(name, "io.max") != "io.max"
    }
    fallback = {name: device for name, device in io_devices.items() if name not in io_weights}
    result = {}
    for group, allocation in allocations.items():
        weighted = tuple(IoWeight(io_devices[name], weights[group], io_sharing[name])
                         for name, weights in io_weights.items())
        result[group] = CgroupLimits(
            cpu_weight=cpu_weights[group],
            cpuset_cpus=cores.get(group),
            memory_low_bytes=_whole(demands.get(group, {}).get("memory", 0)),
            io_weight=weighted,
            io_max=_io_max(allocation, fallback),
        )
    return result


def proportional_weights(amounts: Mapping[str, float]) -> dict[str, int]:
    """Kernel weights (1..10000) in the ratios of ``amounts``: the largest gets 10000, a zero
    amount the minimum 1. Ratios below 1:10000 are rounded up to 1."""
    top = max(amounts.values(), default=0.0)
    low, high = WEIGHT_RANGE
    if not top > 0:
        return {key: low for key in amounts}
    return {key: _clamp(round(amount / top * high)) for key, amount in amounts.items()}


def assign_cores(cpu: Mapping[str, float], cpus: Sequence[int]) -> dict[str, str | None]:
    """Disjoint whole cores per group by largest-remainder rounding of their CPU allocation.

    Args:
        cpu: group → cores allocated (their sum at most ``len(cpus)``).
        cpus: the CPU numbers to hand out, in order.

    Returns:
        group → kernel CPU list (``"0-1"``, ``"2,5"``), or None for a group rounded down to no
        whole core: it shares the CPUs no group holds exclusively.
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
        result[group] = format_cpu_list(cpus[start:start + count]) if count else None
        start += count
    return result


def _device_share(allocation: Mapping[str, float], name: str, capacity: Mapping[str, float]) -> float:
    share = 0.0
    for side in ("read", "write"):
        resource = f"io.{name}.{side}"
        if capacity.get(resource):
            share += allocation.get(resource, 0.0) / capacity[resource]
    return share


def _io_max(vector: Mapping[str, float], io_devices: Mapping[str, str]) -> tuple[IoMax, ...]:
    caps = []
    for name, device in io_devices.items():
        read = _whole(vector.get(f"io.{name}.read", 0))
        write = _whole(vector.get(f"io.{name}.write", 0))
        if read or write:
            caps.append(IoMax(device, read, write))
    return tuple(caps)


def _whole(amount: float) -> int | None:
    """Bytes (or bytes/s) as a whole number for the kernel; a positive amount is at least 1,
    so it never becomes 0 = "no limit"; 0 stays unset."""
    if not amount > 0:
        return None
    return max(1, math.floor(amount))


def _clamp(weight: int) -> int:
    low, high = WEIGHT_RANGE
    return min(high, max(low, weight))
