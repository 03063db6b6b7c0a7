"""The CFS quotas of a :class:`~governor.cgroups.v1.CgroupV1Driver`'s cgroups, written so that
cgroup v1 takes them (:mod:`governor.cgroups.nesting` keeps the bookkeeping): a cgroup is
written at least its largest child's quota (a child without one passing up its own
children's), a parent below a new child's quota is raised first, a cgroup raised so is written
again once its children come down (:meth:`V1Quotas.again`), a quota an earlier daemon left is
read at a cgroup's first plan that asks for none, and a cgroup forgotten (to be removed) gives
its quota up, so that its parent may be lowered at once."""

from __future__ import annotations

import errno
import math
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import replace
from pathlib import Path

from governor.cgroups.errors import CgroupError
from governor.cgroups.files import read_file, write_file
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
        self._known: set[str] = set()  # cgroups whose quota in the kernel this driver wrote or read

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

    def adopt(self, rel: str, record: MutableMapping) -> None:
        """At ``rel``'s first plan that asks for no quota, put the quota the kernel holds (an
        earlier daemon's: a group it held) in ``record``, so that the plan's diff gives it up:
        left, it would bound the group and refuse its tasks' caps above it. A cgroup raised
        before and asking none now is not raised any more (the diff gives its quota up)."""
        self._raised.discard(rel)
        if rel in self._known or _QUOTA in record:
            return
        try:
            quota = read_file(self._directory(rel), "cpu.cfs_quota_us").strip()
            period = read_file(self._directory(rel), "cpu.cfs_period_us").strip()
        except CgroupError:
            return  # not made yet: the plan's write reports it
        self._known.add(rel)
        if quota != "-1":
            record[_QUOTA], record[_PERIOD] = quota, period
            self._index.set(rel, int(quota), int(period))

    def made(self, rel: str) -> None:
        """Note that ``rel`` was just made here: its quota is the kernel's default (-1, none),
        and its first plan need not read it (a group is made again at each launch after its
        last task ended)."""
        self._known.add(rel)

    def again(self, planned: Mapping[str, object], refused: Mapping[str, Iterable[CgroupError]]) -> list[str]:
        """The cgroups of ``planned`` to write once more after the others, children first: each
        written above what it was asked (its children's quotas, read before they came down), and
        each whose quota the kernel refused (``EINVAL``: a child's, which an earlier daemon set
        and this one had not read yet, was higher)."""
        again = {rel for rel in self._raised if rel in planned}
        again.update(rel for rel, errors in refused.items()
                     if any(e.errno == errno.EINVAL and e.path.endswith("cpu.cfs_quota_us") for e in errors))
        return sorted(again, key=lambda rel: rel.count("/") + 1 if rel else 0, reverse=True)

    def as_asked(self, rel: str) -> bool:
        """Whether ``rel``'s quota is what it was last asked (not raised for a child)."""
        return rel not in self._raised

    def written(self, rel: str, record: MutableMapping) -> None:
        """Note the quota ``record`` (``rel``'s, after a write) holds."""
        quota = record.get(_QUOTA)
        period = int(record.get(_PERIOD, DEFAULT_PERIOD_USEC))
        if quota is not None:
            self._known.add(rel)
        self._index.set(rel, None if quota in (None, "-1") else int(quota), period)

    def forget(self, rel: str) -> None:
        """Forget ``rel``'s quota (``""``: every one), as its cgroup is removed: its quota is
        given up first. The cgroup is removed later (on the cgroup thread), and even once
        removed its quota counts in the kernel's check of its parent's until it is freed, a
        grace period later: its parent lowered meanwhile was refused (``EINVAL``). Unlimited,
        it counts for nothing. A group with a child quota left (another group's, below a
        department) is not removed (``EBUSY``): it keeps its quota, which still bounds them."""
        if rel and self._index.has_children(rel):
            self._known.discard(rel)  # its record goes: its quota is read again at its next plan
            return
        if rel and self._index.cores(rel) is not None:
            try:
                write_file(self._directory(rel), "cpu.cfs_quota_us", "-1")
            except CgroupError:
                pass  # removed already
        self._index.drop(rel)
        for kept in (self._raised, self._known):
            if rel:
                kept.discard(rel)
            else:
                kept.clear()

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
        self._raised.add(rel)  # lowered again once its children are (again)
