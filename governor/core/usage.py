"""Measured usage from two samples of a cgroup's counters, and what fair share charges each
group (:class:`Charges`). Pure: time is passed in.

Like below's ``CgroupModel::new(sample, last, elapsed)``: rates need two samples, so the first
sample of a cgroup yields CPU and I/O rates of 0 and only its memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from governor.cgroups.stats import CgroupStats

# The prefix of a usage vector's stall keys: ``stall.<resource>.<kind>.avg10`` (percent of the
# last 10 s) and ``.total`` (seconds so far), from the cgroup's pressure files.
STALL = "stall."


@dataclass(frozen=True, slots=True)
class Sample:
    """A cgroup's counters at a moment: ``at`` in seconds from a monotonic clock."""

    at: float
    stats: CgroupStats


def usage(previous: Sample | None, current: Sample, devices: Mapping[str, str]) -> dict[str, float]:
    """Resource use between two samples, named like the allocator's resources.

    Args:
        previous: the earlier sample of the same cgroup, or None.
        current: the new sample.
        devices: ``MAJ:MIN`` → governed device name, for ``io.<name>.read/write``.

    Returns:
        ``cpu`` in cores, ``memory`` in bytes (now), ``io.<name>.read`` / ``.write`` in bytes/s,
        ``pids`` (processes and threads now, where the pids controller is);
        plus the pressure signs ``cpu.nr_throttled`` (periods throttled between the samples),
        ``memory.high`` and ``memory.oom_kill`` (events so far), ``pids.refused`` (forks refused
        at the cap so far, where the pids controller is); and where the host has PSI,
        the stalls ``stall.<resource>.<kind>.avg10`` (percent of the last 10 s) and
        ``.total`` (seconds so far) of ``cpu``, ``memory``, ``io`` × ``some``, ``full``
        (:func:`stalls` nests them).
    """
    stats = current.stats
    result = {
        "cpu": 0.0,
        "memory": float(stats.memory_current_bytes or 0),
        "cpu.nr_throttled": 0.0,
        "memory.high": float(stats.memory_events.get("high", 0)),
        "memory.oom_kill": float(stats.memory_events.get("oom_kill", 0)),
    }
    if stats.pids_current is not None:
        result["pids"] = float(stats.pids_current)
        result["pids.refused"] = float(stats.pids_refused or 0)
    for resource, kinds in stats.psi.items():
        for kind, stall in kinds.items():
            result[f"{STALL}{resource}.{kind}.avg10"] = stall.avg10
            result[f"{STALL}{resource}.{kind}.total"] = stall.total_usec / 1e6
    for name in devices.values():
        result[f"io.{name}.read"] = 0.0
        result[f"io.{name}.write"] = 0.0
    elapsed = current.at - previous.at if previous else 0.0
    if previous is None or elapsed <= 0:
        return result
    before = previous.stats
    result["cpu"] = max(0, stats.cpu_usage_usec - before.cpu_usage_usec) / 1e6 / elapsed
    result["cpu.nr_throttled"] = float(max(0, stats.cpu_nr_throttled - before.cpu_nr_throttled))
    for device, name in devices.items():
        now, then = stats.io_stat.get(device, {}), before.io_stat.get(device, {})
        for key, direction in (("rbytes", "read"), ("wbytes", "write")):
            result[f"io.{name}.{direction}"] = max(0, now.get(key, 0) - then.get(key, 0)) / elapsed
    return result


def stalls(vector: Mapping[str, float]) -> dict[str, dict[str, dict[str, float]]]:
    """The stall keys of a usage vector (:func:`usage`), nested: resource → kind → ``avg10``
    (percent of the last 10 s) and ``total`` (seconds). Empty where the host has no PSI.

    >>> stalls({"cpu": 1.0, "stall.cpu.some.avg10": 23.0, "stall.cpu.some.total": 4.5})
    {'cpu': {'some': {'avg10': 23.0, 'total': 4.5}}}
    """
    nested: dict[str, dict[str, dict[str, float]]] = {}
    for key, value in vector.items():
        if key.startswith(STALL):
            resource, kind, field_name = key[len(STALL):].split(".")
            nested.setdefault(resource, {}).setdefault(kind, {})[field_name] = value
    return nested


def worst_stall(stalled: Mapping[str, Mapping[str, Mapping[str, float]]]) -> tuple[str, float] | None:
    """The resource whose ``some`` stall over the last 10 s is the largest, with it (percent);
    None with no stall measured (no PSI, not sampled yet). Ties go to the first of ``stalled``.

    >>> worst_stall({"cpu": {"some": {"avg10": 2.0}}, "memory": {"some": {"avg10": 23.0}}})
    ('memory', 23.0)
    """
    found = [(resource, float(kinds.get("some", {}).get("avg10", 0.0))) for resource, kinds in stalled.items()]
    return max(found, key=lambda item: item[1], default=None)


@dataclass
class Charges:
    """What each group used since fair share last took it, for its past use (DESIGN.md §2):
    CPU from the kernel's cumulative counters, memory and GPUs as what was reserved × time. As
    Slurm's fair share, which charges a job's allocated TRES over its run, not samples of it.

    A counter is read per cgroup: a group's, which keeps what its ended tasks used (``cpu.stat
    usage_usec`` on v2, ``cpuacct.usage`` on v1), at each tick and just before the cgroup is
    removed; a login session's, outside governor's root. What ran between two readings is
    charged, however short its tasks were. Pure: amounts and times are passed in.

    Attributes:
        counters: cgroup → its counter at the last reading, µs.
        pending: group → resource → amount × seconds not yet taken (core-seconds, byte-seconds,
            GPU-seconds).
        primed: whether a cgroup read for the first time was made since the first
            :meth:`take` (then its counter started at 0 and all of it is charged); before, a
            first reading is only where the next one counts from (cgroups a daemon finds at
            start, or when fair share is turned on, already hold use that is not news).
    """

    counters: dict[str, int] = field(default_factory=dict)
    pending: dict[str, dict[str, float]] = field(default_factory=dict)
    primed: bool = False

    def counted(self, cgroup: str, group: str, usage_usec: int, *, made_here: bool = True,
                removed: bool = False) -> None:
        """Charge ``group`` the CPU that cgroup ``cgroup``'s cumulative counter (``usage_usec``,
        µs) rose by since its last reading. A counter below its last reading belongs to a cgroup
        made again since: all of it is charged (from 0). A cgroup with no earlier reading is
        charged all of it once :attr:`primed` and when ``made_here`` (governor made it, so it
        started at 0; a login session's was not); ``removed``: the cgroup is gone after this
        reading, and the next one of that name starts at 0."""
        last = self.counters.get(cgroup)
        if last is None:
            used = usage_usec if self.primed and made_here else 0
        else:
            used = usage_usec if usage_usec < last else usage_usec - last
        if removed:
            self.counters.pop(cgroup, None)
        else:
            self.counters[cgroup] = usage_usec
        if used > 0:
            self._add(group, "cpu", used / 1e6)

    def reserved(self, group: str, demand: Mapping[str, float], seconds: float,
                 charged: Callable[[str], bool]) -> None:
        """Charge ``group`` a task's reservation held for ``seconds``: ``demand`` (resource →
        cores, bytes, GPUs) × seconds, for each resource ``charged`` names (the admitted ones
        and devices: what a task holds whether it uses it or not). Nothing for seconds ≤ 0."""
        if seconds > 0:
            for resource, amount in demand.items():
                if amount > 0 and charged(resource):
                    self._add(group, resource, amount * seconds)

    def take(self, capacity: Mapping[str, float], seconds: float) -> dict[str, float]:
        """Each group's dominant share over the last ``seconds`` (> 0), and forget it: the
        largest, over resources, of amount × seconds / (capacity × seconds), a fraction of
        capacity (the capacity-seconds :meth:`governor.core.fairshare.FairShare.add` adds, over
        ``seconds``). Dominant, not summed: DRF weighs a group by its dominant share, and a task
        that holds cores and memory in proportion takes one share of the host, not two. A
        resource without capacity is left out. Marks :attr:`primed`."""
        self.primed = True
        pending, self.pending = self.pending, {}
        if not seconds > 0:
            return {}
        return {group: max((amount / (capacity[r] * seconds) for r, amount in used.items() if capacity.get(r)),
                           default=0.0)
                for group, used in pending.items()}

    def _add(self, group: str, resource: str, amount: float) -> None:
        into = self.pending.setdefault(group, {})
        into[resource] = into.get(resource, 0.0) + amount
