"""One sample of a cgroup's counters, as every driver reads it (cgroup v2, v1, systemd units)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["CgroupStats", "MEMORY_EVENT_KEYS", "Stall"]

MEMORY_EVENT_KEYS = ("high", "max", "oom", "oom_kill")


class Stall(NamedTuple):
    """One line of a pressure file (:mod:`governor.cgroups.pressure`): ``avg10``, the share of
    the last 10 s stalled, percent (0..100); ``total_usec``, the stall since the cgroup was
    made, µs."""

    avg10: float
    total_usec: int


@dataclass(frozen=True, slots=True)
class CgroupStats:
    """One sample of a cgroup's counters (cumulative since the cgroup was created).

    Attributes:
        cpu_usage_usec: CPU time used, usec.
        cpu_nr_throttled: periods in which the quota ran out.
        cpu_throttled_usec: time spent throttled, usec.
        memory_current_bytes: memory charged now, bytes; None when the memory controller is
            not enabled for the cgroup.
        memory_events: counts of ``high``, ``max``, ``oom``, ``oom_kill`` events (v1 has only
            ``max`` (failcnt) and, on recent kernels, ``oom_kill``).
        io_stat: per ``MAJ:MIN``: ``rbytes``, ``wbytes`` (bytes) and, on v2, ``rios``,
            ``wios``, ``dbytes``, ``dios``.
        populated: some process lives in the cgroup or below it.
        memory_peak_bytes: the most memory charged since the cgroup was made, bytes (v2
            ``memory.peak``, Linux ≥ 5.19; v1 ``memory.max_usage_in_bytes``); None unless
            asked for (``read_stats(peak=True)``), where the kernel has no such file, or the
            memory controller is not enabled.
        psi: pressure stall information: ``cpu``, ``memory``, ``io`` → ``some``, ``full`` →
            :class:`Stall`; empty where the host has none (v1, ``psi=0``).
        pids_current: processes and threads in the cgroup and below it now (``pids.current``);
            None where the pids controller is not there.
        pids_refused: forks and clones refused at its ``pids.max`` (``pids.events``' ``max``);
            None where the pids controller is not there.
    """

    cpu_usage_usec: int
    cpu_nr_throttled: int
    cpu_throttled_usec: int
    memory_current_bytes: int | None
    memory_events: dict[str, int] = field(default_factory=dict)
    io_stat: dict[str, dict[str, int]] = field(default_factory=dict)
    populated: bool = False
    memory_peak_bytes: int | None = None
    psi: dict[str, dict[str, Stall]] = field(default_factory=dict)
    pids_current: int | None = None
    pids_refused: int | None = None
