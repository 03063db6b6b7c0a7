"""The CFS quotas of a :class:`~governor.cgroups.v1.CgroupV1Driver`'s cgroups, written so that
cgroup v1 takes them (:mod:`governor.cgroups.nesting` keeps the bookkeeping): a cgroup is
written at least its largest child's quota (a child without one passing up its own
children's), a parent below a new child's quota is raised first, and a cgroup forgotten (to be
removed) gives its quota up, so that its parent may be lowered at once."""

from __future__ import annotations

import math
from collections.abc import Callable, MutableMapping
from dataclasses import replace
from pathlib import Path

from governor.cgroups.errors import CgroupError
from governor.cgroups.files import write_file
from governor.cgroups.limits import DEFAULT_PERIOD_USEC, CgroupLimits, v1_key
from governor.cgroups.nesting import QuotaNesting

__all__ = ["V1Quotas"]

_QUOTA = v1_key("cpu", "cpu.cfs_quota_us", "")
_PERIOD = v1_key("cpu", "cpu.cfs_period_us", "")


class V1Quotas:
    """The quotas in force and what the driver must write for the kernel to take a new one.

    Args:
        directory: a cgroup (relative to the driver's root) → its directory in the cpu hierarchy.
        record: a cgroup → the driver's record of what its files hold (written here when a
            parent is raised).
        rewrite: a cgroup → forget that its limits were applied as asked (the next plan writes
            them again).
    """

    def __init__(self, directory: Callable[[str], Path], record: Callable[[str], MutableMapping],
                 rewrite: Callable[[str], None]):
        self._directory = directory
        self._record = record
        self._rewrite = rewrite
        self._index = QuotaNesting()  # what the kernel's quota rule checks a write against
        self._raised: set[str] = set()  # cgroups whose quota is above what they were asked

    def nested(self, rel: str, limits: CgroupLimits) -> CgroupLimits:
        """``limits`` (with a quota) as ``rel`` may take them: its quota at least its largest
        child's, a parent below that raised first (a refusal there is left to ``rel``'s write
        to report)."""
        quota = self._index.at_least_children(rel, limits.cpu_quota_usec, limits.cpu_period_usec)
        if rel:
            self._raise(rel.rpartition("/")[0], quota / limits.cpu_period_usec)
        if quota == limits.cpu_quota_usec:
            self._raised.discard(rel)
            return limits
        self._raised.add(rel)
        return replace(limits, cpu_quota_usec=quota)

    def as_asked(self, rel: str) -> bool:
        """Whether ``rel``'s quota is what it was last asked (not raised for a child)."""
        return rel not in self._raised

    def written(self, rel: str, record: MutableMapping) -> None:
        """Note the quota ``record`` (``rel``'s, after a write) holds."""
        quota = record.get(_QUOTA)
        period = int(record.get(_PERIOD, DEFAULT_PERIOD_USEC))
        self._index.set(rel, None if quota in (None, "-1") else int(quota), period)

    def forget(self, rel: str) -> None:
        """Forget ``rel``'s quota (``""``: every one), as its cgroup is removed: its quota is
        given up first. The cgroup is removed later (on the cgroup thread), and even once
        removed its quota counts in the kernel's check of its parent's until it is freed, a
        grace period later: its parent lowered meanwhile was refused (``EINVAL``). Unlimited,
        it counts for nothing."""
        if rel and self._index.cores(rel) is not None:
            try:
                write_file(self._directory(rel), "cpu.cfs_quota_us", "-1")
            except CgroupError:
                pass  # removed already
        self._index.drop(rel)
        if rel:
            self._raised.discard(rel)
        else:
            self._raised.clear()

    def _raise(self, rel: str, cores: float) -> None:
        """Raise ``rel``'s quota (and its ancestors') to ``cores`` where it is lower; the next
        plan writes it again from there. ``rel`` with no quota is bounded by its parent's: that
        one is raised. A refusal is left to the child's write to report."""
        held = self._index.cores(rel)
        if held is not None and held >= cores:
            return
        if rel:
            self._raise(rel.rpartition("/")[0], cores)
        if held is None:
            return
        last = self._record(rel)
        period = int(last.get(_PERIOD, DEFAULT_PERIOD_USEC))
        quota = math.ceil(cores * period)
        try:
            write_file(self._directory(rel), "cpu.cfs_quota_us", str(quota))
        except CgroupError:
            return
        last[_QUOTA] = str(quota)
        self._rewrite(rel)
        self._index.set(rel, quota, period)
