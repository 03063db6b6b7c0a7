"""Measured usage from two samples of a cgroup's counters. Pure: time is passed in.

Like below's ``CgroupModel::new(sample, last, elapsed)``: rates need two samples, so the first
sample of a cgroup yields CPU and I/O rates of 0 and only its memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from governor.cgroups.stats import CgroupStats


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
        ``cpu`` in cores, ``memory`` in bytes (now), ``io.<name>.read`` / ``.write`` in bytes/s;
        plus the pressure signs ``cpu.nr_throttled`` (periods throttled between the samples),
        ``memory.high`` and ``memory.oom_kill`` (events so far).
    """
    stats = current.stats
    result = {
        "cpu": 0.0,
        "memory": float(stats.memory_current_bytes or 0),
        "cpu.nr_throttled": 0.0,
        "memory.high": float(stats.memory_events.get("high", 0)),
        "memory.oom_kill": float(stats.memory_events.get("oom_kill", 0)),
    }
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
