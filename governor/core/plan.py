"""From a DRF allocation to the limits of every cgroup governor owns (DESIGN.md §3). Pure.

Allocations are guarantees, declarations are caps::

    <root>/             cpu.max = capacity + the idle reserve, memory.max = capacity;
                        memory.min, memory.low = its groups' sums; pids.max = the kernel's
                        limit less capacity.reserve.pids
      <group>/          guarantee: cpu.weight ∝ A_g,cpu (+ cpu.max = its share of the root's
                        while every group wants all of its own); io.weight ∝ A_g,io where the
                        device has a proportional controller, else io.max = A_g (not work-conserving);
                        memory.min = guarantee, memory.low = reserved up to the floor
                        (:mod:`governor.core.protection`); pids.max = its limit, else the root's
        task-<id>/      cap, written once when the task starts: cpu.max = declared cpu,
        session-<uid>/  (a user's session: the same, with the [sessions] demand)
                        cpu.weight ∝ declared cpu, memory.max (hard, the default) or
                        memory.high (soft) = declared, memory.min and memory.low = declared
                        (bounded by the group's; a session's 0: it was never admitted, and
                        an idle shell is promised nothing), io.max = declared, pids.max = declared

``[enforcement] memory_protection = false`` writes no ``memory.min``/``memory.low`` anywhere.

Under full contention CFS gives each group ``capacity × w_g / Σ w = A_g`` (the weights are
proportional to the allocation and the allocations add up to the capacity of a saturated
resource); what a group leaves idle the others use up to their caps, and it comes back within
a scheduling period. Weights split a group's share across CPUs by where its tasks run, which
can leave a group well short of its guarantee; when nobody has any to lend
(:func:`governor.core.cpu_saturation.cpu_saturated`), each group is held to its share too.
Only ratios matter, so the scale of the group weights is chosen to keep as many weights in
force as it can (:func:`proportional_weights`): a refill after one launch or exit writes a
few files, not one per group. Resources are named as in the allocator's registry.
"""

from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Literal

from governor.cgroups.limits import (CGROUP_WEIGHT_RANGE, DEFAULT_CPU_WEIGHT, DEFAULT_PERIOD_USEC, MIN_QUOTA_USEC,
                                     CgroupLimits, IoMax, IoWeight)
from governor.cgroups.parse import format_cpu_list
from governor.core.protection import Protection

# A task's cpu.weight is its declared cores × 100 (1 core = the kernel's default weight 100),
# a fixed scale so that a new task never changes its siblings' weights.
TASK_WEIGHT_PER_CORE = DEFAULT_CPU_WEIGHT
IoSharing = Literal["io.weight", "io.bfq.weight", "io.max"]


def task_limits(demand: Mapping[str, float], *, io_devices: Mapping[str, str],
                memory_mode: Literal["soft", "hard"] = "hard", protect: bool = True, session: bool = False,
                period_usec: int = DEFAULT_PERIOD_USEC) -> CgroupLimits:
    """A task's caps: its declaration, set once when it starts and never changed.

    Args:
        demand: declared demand: ``cpu`` cores, ``memory`` bytes, ``io.<name>.read/write`` bytes/s.
        io_devices: governed device name → whole-disk ``MAJ:MIN``.
        memory_mode: ``"hard"`` sets ``memory.max`` (reclaim, then the OOM killer, at the
            declaration), ``"soft"`` ``memory.high`` (throttled and reclaimed past it, never killed).
        protect: protect the declared memory from reclaim (``memory.min``, ``memory.low``);
            the kernel bounds it by the group's protection.
        session: a user's session (a login slice too): never admitted, so promised none of its
            cap: ``memory.min``/``memory.low`` 0, written to undo an earlier daemon's (issue 43).
        period_usec: the CFS period, usec.

    Returns:
        ``cpu.max`` = declared cores × period (at least the kernel's 1 ms), ``cpu.weight`` =
        cores × 100 (1..10000), ``memory.max`` (hard) or ``memory.high`` (soft), and with
        ``protect`` ``memory.min`` and ``memory.low``, = declared bytes (0 for a session), ``io.max`` =
        declared rates (a direction declared 0 is not throttled: the kernel has no "0 bytes/s"),
        ``pids.max`` = declared ``pids`` (processes and threads; none declared: not written).
    """
    cores = demand.get("cpu", 0.0)
    memory = _whole(demand.get("memory", 0))
    protected = 0 if session else memory
    return CgroupLimits(
        cpu_quota_usec=max(MIN_QUOTA_USEC, round(cores * period_usec)),
        cpu_period_usec=period_usec,
        cpu_weight=_clamp(round(cores * TASK_WEIGHT_PER_CORE)),
        memory_min_bytes=protected if protect else None,
        memory_low_bytes=protected if protect else None,
        # Not both: memory.high at memory.max never binds (usage cannot pass the max).
        memory_high_bytes=None if memory_mode == "hard" else memory,
        memory_max_bytes=memory if memory_mode == "hard" else None,
        io_max=_io_max(demand, io_devices),
        pids_max=_count(demand.get("pids")),
    )


def root_limits(capacity: Mapping[str, float], *, protection: Protection = (0.0, 0.0),
                period_usec: int = DEFAULT_PERIOD_USEC, caps: Mapping[str, int] | None = None,
                lent_cpu: float = 0.0) -> CgroupLimits:
    """The governed root: the tasks together never use more memory than the capacity (the
    reserve stays the system's), nor more CPU than it and ``lent_cpu``, the reserved cores the
    system leaves idle (:func:`governor.config.resources.lent_cpu`).

    Returns:
        ``cpu.max`` = capacity + ``lent_cpu`` cores; ``memory.max`` = capacity bytes (where a
        task's own cap is soft, as on cgroup v1 where ``memory = "soft"`` sets no throttling
        limit at all, this bounds governed memory: beyond it the kernel reclaims, then
        OOM-kills inside the governed tree, never outside it); ``memory.min``, ``memory.low``
        = ``protection`` (bytes: its groups' sums, :mod:`governor.core.protection`), so that
        the host's other pressure reclaims elsewhere first. No ``io.max``: a throttled parent
        serves its children's I/O in turn, undoing the ``io.weight`` split (measured: 2 : 1,
        not 3 : 1, in the VM); the tasks' caps bound I/O and, where the disk has no
        proportional controller, the groups' ``io.max``. ``pids.max`` = ``caps["pids"]``
        (:func:`governor.config.resources.caps`: the kernel's limit less the reserve).
    """
    return CgroupLimits(
        cpu_quota_usec=max(MIN_QUOTA_USEC, round((capacity.get("cpu", 0.0) + lent_cpu) * period_usec)),
        cpu_period_usec=period_usec,
        memory_min_bytes=_whole(protection[0]),
        memory_low_bytes=_whole(protection[1]),
        memory_max_bytes=_whole(capacity.get("memory", 0)),
        pids_max=_count((caps or {}).get("pids")),
    )


def group_limits(
    capacity: Mapping[str, float],
    allocations: Mapping[str, Mapping[str, float]],
    *,
    protection: Mapping[str, Protection],
    io_devices: Mapping[str, str],
    io_sharing: Mapping[str, IoSharing],
    cpu_mode: Literal["quota", "cores"] = "quota",
    cpus: Sequence[int] = (),
    previous: Mapping[str, CgroupLimits] | None = None,
    met: Collection[str] = (),
    saturated: bool = False,
    hold_scale: float = 1.0,
    period_usec: int = DEFAULT_PERIOD_USEC,
    pids: int | None = None,
) -> dict[str, CgroupLimits]:
    """Each group's guarantee.

    Args:
        capacity: resource → what governor divides.
        allocations: group → its allocation A_g (resource → cores, bytes, bytes/s).
        protection: group → its ``(memory.min, memory.low)``, bytes
            (:func:`governor.core.protection.memory_protection`); left out: none.
        io_devices: governed device name → whole-disk ``MAJ:MIN``.
        io_sharing: device name → how its guarantee is enforced: ``"io.weight"`` (io.cost),
            ``"io.bfq.weight"`` (BFQ), or ``"io.max"`` (no proportional controller: the
            allocation becomes a hard limit, not work-conserving).
        cpu_mode: ``"cores"`` also pins groups to disjoint whole cores taken from ``cpus``
            (largest remainder of A_g,cpu); not work-conserving by nature.
        cpus: the CPU numbers governor may hand out in ``"cores"`` mode.
        previous: group → the limits in force, so that weights are rewritten only where the
            ratios need it (see :func:`proportional_weights`).
        met: the groups whose allocation is their whole demand.
        saturated: every group wants all of its CPU guarantee
            (:func:`governor.core.cpu_saturation.cpu_saturated`).
            Weights alone then split the CPU only to within a few percent (measured: −1 to
            −7 % on cgroup v1, ±20 % under emulation); nobody leaves anything idle to lend, so
            each group is also held to its guarantee: ``cpu.max`` = A_g,cpu × ``hold_scale``
            (:func:`~governor.core.cpu_saturation.hold_scale`; the driver keeps a parent's
            quota no lower than its children's where the kernel wants it).
        period_usec: the CFS period of those quotas, usec.
        pids: every group's ``pids.max`` (the root's cap: a group's ``limit`` lowers its own,
            :func:`governor.core.group_tree.with_limit`), so that every cgroup has one.

    Returns:
        group → limits, in the order of ``allocations``: ``cpu.weight`` ∝ A_g,cpu (the largest
        2500..10000, a zero allocation 1), ``memory.min``/``memory.low`` = its protection, and per device either an
        ``io.weight`` ∝ the group's share of the device (read share + write share) or
        ``io.max`` = A_g; ``pids.max`` = ``pids``.
    """
    previous = previous or {}
    cpu = {g: a.get("cpu", 0.0) for g, a in allocations.items()}
    cpu_weights = proportional_weights(
        cpu, previous={g: p.cpu_weight for g, p in previous.items() if p.cpu_weight is not None}, met=met)
    cores = assign_cores(cpu, cpus) if cpu_mode == "cores" else {}
    io_weights = {
        name: proportional_weights(
            {g: _device_share(a, name, capacity) for g, a in allocations.items()},
            previous={g: w.weight for g, p in previous.items() for w in p.io_weight if w.device == device},
            met=met)
        for name, device in io_devices.items() if io_sharing.get(name, "io.max") != "io.max"
    }
    fallback = {name: device for name, device in io_devices.items() if name not in io_weights}
    result = {}
    for group, allocation in allocations.items():
        weighted = tuple(IoWeight(io_devices[name], weights[group], io_sharing[name])
                         for name, weights in io_weights.items()) if io_weights else ()
        quota = max(MIN_QUOTA_USEC, round(cpu[group] * hold_scale * period_usec)) if saturated else None
        least, low = protection.get(group, (0.0, 0.0))
        fields = (cpu_weights[group], quota, cores.get(group), _whole(least), _whole(low),
                  weighted, _io_max(allocation, fallback) if fallback else ())
        old = previous.get(group)
        if old is not None and fields == (old.cpu_weight, old.cpu_quota_usec, old.cpuset_cpus, old.memory_min_bytes,
                                          old.memory_low_bytes, old.io_weight, old.io_max) and old.pids_max == pids:
            result[group] = old  # the same object, so that applying the plan skips it at once
        else:
            result[group] = CgroupLimits(cpu_weight=fields[0], cpu_quota_usec=quota, cpu_period_usec=period_usec,
                                         cpuset_cpus=fields[2], memory_min_bytes=fields[3], memory_low_bytes=fields[4],
                                         io_weight=fields[5], io_max=fields[6], pids_max=pids)
    return result



def inside_root(
    allocations: Mapping[str, Mapping[str, float]],
    demands: Mapping[str, Mapping[str, float]],
    fractions: Mapping[str, float],
    outside: Mapping[str, Mapping[str, float]],
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """The part of each group's allocation and demand that runs below governor's root, when
    part of it (login sessions) runs in systemd's user slices: ``A_g − λ_g·O_g`` and
    ``D_g − O_g`` (DRF gives every resource of a group the same fraction λ_g of its demand,
    paper §4.1). Groups with nothing left below the root are left out.

    Args:
        allocations: group → A_g; demands: group → D_g (resource → cores, bytes, bytes/s).
        fractions: group → λ_g, the fraction of its demand it is allocated (0..1).
        outside: group → O_g, the summed demand of its login sessions.

    Returns:
        (allocations, demands) below the root, amounts clamped at 0 against rounding.
    """
    inside_allocations, inside_demands = {}, {}
    for group, allocation in allocations.items():
        away = outside.get(group, {})
        demand = {r: max(0.0, amount - away.get(r, 0.0)) for r, amount in demands.get(group, {}).items()}
        if away and not any(demand.values()):
            continue
        share = fractions.get(group, 0.0)
        inside_allocations[group] = {r: max(0.0, amount - share * away.get(r, 0.0)) for r, amount in allocation.items()}
        inside_demands[group] = demand
    return inside_allocations, inside_demands


def held_login_limits(caps: CgroupLimits, cpu: float, fraction: float) -> CgroupLimits:
    """A login session's limits while the groups are held to their CPU guarantees: its caps,
    with ``cpu.max`` = ``fraction`` (its group's λ_g × the hold's scale) × its declared
    ``cpu`` cores, its part of the group's hold (it runs outside its group's cgroup)."""
    quota = max(MIN_QUOTA_USEC, round(fraction * cpu * caps.cpu_period_usec))
    return replace(caps, cpu_quota_usec=min(quota, caps.cpu_quota_usec or quota))


def proportional_weights(
    amounts: Mapping[str, float],
    *,
    previous: Mapping[str, int] | None = None,
    met: Collection[str] = (),
) -> dict[str, int]:
    """Kernel weights (1..10000) in the ratios of ``amounts``, rewriting as few as it can.

    Only ratios matter to the kernel, so any common scale will do as long as the largest
    weight stays between 2500 and 10000 (rounding then costs at most 0.02 % there). Among
    them this picks one that keeps the most ``previous`` weights in force (each within 0.2 %
    or half a unit of its exact value), nearest to the scale that gives the largest 5000
    (room to move both ways). So a refill after one launch writes a few
    files, not one per group, whether the launch moved the largest group (the scale follows)
    or the water level (the groups at the level keep theirs). A group in ``met`` got its whole
    demand and its tasks' caps bound it, so a weight above its exact value gives it nothing
    more: it is written at twice that, and stays until it is too low.

    Args:
        amounts: key → allocation (cores, or a share of a device), ≥ 0.
        previous: key → the weight in force, if any.
        met: keys whose allocation equals their demand (paper §4.1, "demand met").

    Returns:
        key → weight, in the order of ``amounts``; a zero amount gets the minimum 1.
    """
    low, high = CGROUP_WEIGHT_RANGE
    top = max(amounts.values(), default=0.0)
    if not top > 0:
        return {key: low for key in amounts}
    previous = previous or {}
    # Work in fractions of the largest amount, so that no amount is too small or too large to
    # scale; the scale is then the largest group's weight.
    fractions = {key: amount / top for key, amount in amounts.items()}
    kept = _keepers(fractions, previous, met)
    preferred = high / 2
    scale = _best_scale(kept.values(), preferred / 2, high, preferred)
    weights = {}
    for key, fraction in fractions.items():
        bounds = kept.get(key)
        if bounds is not None and bounds[0] <= scale <= bounds[1]:
            weights[key] = previous[key]
        else:
            weights[key] = _clamp(round(fraction * scale * (_MET_HEADROOM if key in met else 1)))
    return weights


# A weight within this fraction (or half a unit) of its exact value is not rewritten.
_WEIGHT_TOLERANCE = 0.002
# A group whose demand is met gets this much more weight than it needs when its weight is
# written, so that the water level can fall to half before it must be rewritten.
_MET_HEADROOM = 2.0


def _keepers(fractions: Mapping[str, float], previous: Mapping[str, int],
             met: Collection[str]) -> dict[str, tuple[float, float]]:
    """key → the scales (the largest group's weight) at which its previous weight may stay."""
    bounds = {}
    for key, fraction in fractions.items():
        weight = previous.get(key)
        if weight is None or not fraction > 0:
            continue
        slack = max(0.5, weight * _WEIGHT_TOLERANCE)
        # The minimum weight is what any smaller exact value rounds and clamps to: it may stay
        # at every scale below its upper end (else a refill moved the largest weight to keep
        # the smallest ones, and the next one moved it back).
        lowest = key in met or weight <= CGROUP_WEIGHT_RANGE[0]
        bounds[key] = (0.0 if lowest else (weight - slack) / fraction, (weight + slack) / fraction)
    return bounds


def _best_scale(intervals: Iterable[tuple[float, float]], lowest: float, highest: float, preferred: float) -> float:
    """The scale in [lowest, highest] inside the most intervals (a sweep over their ends), the
    nearest to ``preferred`` among equals."""
    clamped = [(max(lo, lowest), min(hi, highest)) for lo, hi in intervals]
    start = max((lo for lo, _ in clamped), default=lowest)
    end = min((hi for _, hi in clamped), default=highest)
    if start <= end:  # one scale keeps every weight (most refills): no sweep
        return min(max(preferred, start), end)
    ends = []
    for lo, hi in clamped:
        if lo <= hi:
            ends += ((lo, 0), (hi, 1))  # a start sorts before an end at the same scale
    ends.sort()
    best, best_count, count, start = preferred, 0, 0, 0.0
    for at, is_end in ends:
        if not is_end:
            count += 1
            start = at
            continue
        if count > best_count or count == best_count and _nearer(preferred, start, at, best):
            best, best_count = min(max(preferred, start), at), count
        count -= 1
        start = at
    return best


def _nearer(preferred: float, start: float, end: float, best: float) -> bool:
    return abs(min(max(preferred, start), end) - preferred) < abs(best - preferred)


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
    sides = [f"io.{name}.{side}" for side in ("read", "write")]
    return sum((allocation.get(side, 0.0) / capacity[side] for side in sides if capacity.get(side)), 0.0)


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


def _count(amount: float | None) -> int | None:
    """A count (processes) as a whole number for the kernel; None stays unset."""
    return None if amount is None else math.floor(amount)


def _clamp(weight: int) -> int:
    return min(CGROUP_WEIGHT_RANGE[1], max(CGROUP_WEIGHT_RANGE[0], weight))
