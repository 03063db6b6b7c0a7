"""What every driver shares: the record of what the kernel accepted, applying a whole plan in
order, killing a cgroup's processes round by round, reading counters with one error type.

**The record.** A driver remembers, per cgroup, the value of every setting the kernel
*accepted*. A refused write leaves the old value in the record, so :meth:`DriverBase.in_force`
(what status shows) is what the kernel holds, never what was planned, and the next apply
retries only what is still different. Equal records are one object (thousands of tasks with
the same caps hold one), copied before a change. The record is kept by the caller's thread
(the daemon's event loop); only :meth:`create`, :meth:`remove` and :meth:`move` of a driver
may run on another (they take the kernel's ``cgroup_mutex``), and :meth:`pids_full` (asked
before a move); they never touch it.
"""

from __future__ import annotations

import abc
import contextlib
import os
import signal
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from governor.cgroups.errors import CgroupError, CgroupReadError
from governor.cgroups.files import read_file
from governor.cgroups.limits import CgroupLimits
from governor.cgroups.parse import parse_int, parse_max
from governor.cgroups.stats import CgroupStats

__all__ = ["ApplyReport", "DriverBase", "KILL_ROUNDS"]

# Rounds of SIGKILL over a cgroup's pids: a process forking as it is killed leaves a child
# the next round finds (a fork cannot complete once SIGKILL is pending, so few are needed).
KILL_ROUNDS = 10


_NOTHING_WRITTEN: dict[str, str] = {}  # one object: callers must not modify what in_force returns


@dataclass
class ApplyReport:
    """What one :meth:`Driver.apply_plan` did.

    Attributes:
        written: files written (each per-device line counts once).
        errors: the writes the kernel refused (and reads a write needed that failed), in
            order, each with path (value) and errno.
    """

    written: int = 0
    errors: list[CgroupError] = field(default_factory=list)


class DriverBase(abc.ABC):
    """The shared bookkeeping of :class:`~governor.cgroups.v2.CgroupV2Driver`,
    :class:`~governor.cgroups.v1.CgroupV1Driver` and :class:`~governor.cgroups.systemd.SliceDriver`
    (the :class:`~governor.cgroups.driver.Driver` protocol says what each offers). Subclasses
    set :attr:`mode` and implement :meth:`_apply_one`, :meth:`_read_stats` and :meth:`pids`."""

    mode: str = ""

    def __init__(self) -> None:
        # rel → diff key → value the kernel accepted.
        self._written: dict[str, _Record] = {}
        # A record's items → the one record with those items that cgroups share.
        self._shared: weakref.WeakValueDictionary[tuple, _Record] = weakref.WeakValueDictionary()
        # rel → the limits last applied there in full: the same limits again write nothing and
        # need no diff (most groups, on most refills).
        self._applied: dict[str, CgroupLimits] = {}
        # The cgroups whose device rules were reconciled with the kernel's since this driver
        # began: until then an earlier daemon's rules may be there, which the record lacks.
        self._devices_known: set[str] = set()

    def apply(self, rel: str, limits: CgroupLimits) -> list[str]:
        """Bring cgroup ``rel`` to ``limits``, writing only the files whose value differs from
        the record, in the mode's fixed order; every write is tried even when one fails.

        Returns:
            The files written, in write order (per-device files once per line).

        Raises:
            CgroupWriteError: the first write the kernel refused (path, value, errno); the
                record keeps the old value for every refused file.
            CgroupReadError: a value needed for a write could not be read (v1 cpusets).
        """
        written, errors = self._apply_changed(rel, limits)
        if errors:
            raise errors[0]
        return written

    def apply_plan(self, planned: Mapping[str, CgroupLimits]) -> ApplyReport:
        """Apply limits to many cgroups, parents before children (the order of ``planned``
        must list them so: the root ``""``, then groups, then tasks).

        A refused write does not stop the others; each is in the report. A cgroup that
        vanished (``ENOENT``: its task just exited) is not an error. A mode whose parents are
        bounded by their children's values (v1's quotas) applies some cgroups once more after
        the rest (:meth:`_again`): the report holds their second refusals, not their first.
        """
        refused: dict[str, list[CgroupError]] = {}
        report = ApplyReport()
        for rel, limits in planned.items():
            report.written += self._apply_planned(rel, limits, refused)
        for rel in self._again(planned, refused):  # a cgroup retried says only its retry's refusals
            report.written += self._apply_planned(rel, planned[rel], refused)
        report.errors = [error for errors in refused.values() for error in errors]
        return report

    def _apply_planned(self, rel: str, limits: CgroupLimits, refused: dict[str, list[CgroupError]]) -> int:
        """Apply one cgroup's limits of a plan: the files written; ``refused[rel]`` its refusals."""
        written, errors = self._apply_changed(rel, limits)
        errors = [e for e in errors if not e.vanished]
        if errors:
            refused[rel] = errors
        else:
            refused.pop(rel, None)
        return len(written)

    def _again(self, planned: Mapping[str, CgroupLimits], refused: Mapping[str, list[CgroupError]]) -> list[str]:
        """The cgroups of ``planned`` to apply once more once every one was (``refused``: each
        cgroup's refusals), in order: none here; v1 writes a parent before its children, so one
        the kernel bounded by its children's old quotas is written again after them."""
        return []

    def in_force(self, rel: str) -> dict[str, str]:
        """The settings of cgroup ``rel`` the kernel accepted from this driver: file → value
        (per-device files: their lines joined by ``", "``). One object for every cgroup with
        an equal record (a status of 10,000 tasks builds it once): callers must not modify it."""
        # A task's cgroup name is normal already (the records are keyed by normal names): a
        # status of 10,000 tasks asks for each, and normalising each again cost 3 ms.
        record = self._written.get(rel) or self._written.get(_normal(rel))
        if record is None:
            return _NOTHING_WRITTEN
        if record.shown is None:
            shown: dict[str, str] = {}
            for key, value in record.items():
                file = key[-2] if isinstance(key, tuple) and len(key) == 3 else key[0]
                shown[file] = f"{shown[file]}, {value}" if file in shown else value
            record.shown = shown
        return record.shown

    def forget(self, rel: str) -> None:
        """Drop the record of the leaf cgroup ``rel`` after removing it (``""``, the root:
        every record). Only a leaf can be removed, so nothing below it has a record left."""
        gone = _normal(rel)
        for record in (self._written, self._applied):
            if gone:
                record.pop(gone, None)
            else:
                record.clear()
        if gone:
            self._devices_known.discard(gone)
        else:
            self._devices_known.clear()

    def populated(self, rel: str) -> bool:
        """Whether cgroup ``rel`` or a cgroup below it holds a process.

        Raises:
            CgroupReadError: it cannot be read (``vanished``: it is gone).
        """
        return bool(self.pids(rel))

    def kill(self, rel: str) -> int:
        """Send SIGKILL to every process in cgroup ``rel``, round after round (at most
        :data:`KILL_ROUNDS`), until a round finds none it has not signalled: children forked
        meanwhile are found by the next. The way without ``cgroup.kill`` (cgroup v1; governor
        uses no v1 freezer hierarchy to stop the tree first). Each process is pinned by a pidfd
        and signalled through it only if a second read still lists its pid: a pid that exited
        and was reused by a process elsewhere is never signalled.

        Returns:
            How many processes were signalled.

        Raises:
            CgroupReadError: ``cgroup.procs`` cannot be read (``vanished``: the cgroup is gone).
        """
        signalled: set[int] = set()
        for _ in range(KILL_ROUNDS):
            fresh = [pid for pid in self.pids(rel) if pid not in signalled]
            if not fresh:
                break
            pinned = {}
            for pid in fresh:
                try:
                    pinned[pid] = os.pidfd_open(pid)
                except ProcessLookupError:
                    pass  # exited meanwhile
            try:
                still = set(self.pids(rel))
                for pid, pidfd in pinned.items():
                    if pid in still:
                        with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            finally:
                for pidfd in pinned.values():
                    os.close(pidfd)
            signalled.update(fresh)
        return len(signalled)

    def read_stats(self, rel: str, *, peak: bool = False) -> CgroupStats:
        """Sample the counters of cgroup ``rel`` (:class:`~governor.cgroups.stats.CgroupStats`; which files,
        per mode, in ``_read_stats``); with ``peak``, its memory peak too (one more file: read
        when a task ends, not at every sample).

        Raises:
            CgroupReadError: a stat file cannot be read (e.g. the cgroup vanished), or its text
                is not what the kernel writes (a missing key, a bad number).
        """
        try:
            return self._read_stats(rel, peak)
        except (ValueError, KeyError) as error:
            raise CgroupReadError(f"cannot parse the counters of cgroup {rel!r}: {error!r}",
                                  path=str(self.directory(rel))) from None

    def cpu_usage_usec(self, rel: str) -> int:
        """Cgroup ``rel``'s cumulative CPU counter, µs, alone: the drivers read its one file,
        not every counter :meth:`read_stats` reads (a group's, read as it is removed).

        Raises:
            CgroupReadError: as :meth:`read_stats`.
        """
        return self.read_stats(rel).cpu_usage_usec

    @abc.abstractmethod
    def _read_stats(self, rel: str, peak: bool) -> CgroupStats:
        """:meth:`read_stats` for this mode (the files it reads)."""

    @abc.abstractmethod
    def pids(self, rel: str) -> list[int]:
        """The pids (processes) in cgroup ``rel`` itself.

        Raises:
            CgroupReadError: it cannot be read (``vanished``: it is gone).
        """

    def rejoin(self, rel: str, leave: Callable[[int], bool] | None = None) -> list[int]:
        """Put every process of cgroup ``rel`` into it in each hierarchy that lacks it (a
        re-adopted task's), but one ``leave(pid)`` tells to leave where it is. One hierarchy
        (v2): none can. v1 overrides it.

        Returns:
            The pids moved, sorted: none here.
        """
        return []

    @abc.abstractmethod
    def directory(self, rel: str) -> Path:
        """The directory of cgroup ``rel``, for people (v1: in the cpu hierarchy)."""

    def memory_directory(self, rel: str) -> Path:
        """The directory of cgroup ``rel`` where its memory files are: :meth:`directory` in
        one hierarchy (v2); v1 overrides it."""
        return self.directory(rel)

    def pids_directory(self, rel: str) -> Path | None:
        """The directory of cgroup ``rel`` where its pids files are (one hierarchy, v2:
        :meth:`directory`), or None where there is none; v1 overrides it."""
        return self.directory(rel)

    def pids_full(self, rel: str) -> bool:
        """Whether cgroup ``rel`` holds as many processes and threads as its ``pids.max``
        allows: a fork in it fails now, while a move into it is never refused (a move is no
        fork: pids.current may pass pids.max). Reads two files and touches no record: the
        cgroup thread asks it before a move.

        Returns:
            False too where ``rel`` has no cap (``max``, no pids controller) or is gone.
        """
        directory = self.pids_directory(rel)
        try:
            cap = parse_max(read_file(directory, "pids.max")) if directory is not None else None
            return cap is not None and parse_int(read_file(directory, "pids.current")) >= cap
        except (CgroupReadError, ValueError):
            return False

    def events_path(self, rel: str) -> Path | None:
        """The file whose changes tell that ``rel`` emptied (v2 ``cgroup.events``), or None
        where the kernel has none (v1: watch the pid instead)."""
        return None

    def _apply_changed(self, rel: str, limits: CgroupLimits) -> tuple[list[str], list[CgroupError]]:
        if self._applied.get(rel) is limits:  # the planner reuses an unchanged group's limits
            return [], []
        key = _normal(rel)
        if self._applied.get(key) == limits:
            return [], []
        written, errors = self._apply_one(rel, limits)
        if errors or not self._as_asked(key):
            self._applied.pop(key, None)
        else:
            self._applied[key] = limits
        record = self._written.get(key)
        if record:
            self._written[key] = self._shared.setdefault(tuple(record.items()), record)
        return written, errors

    def _as_asked(self, rel: str) -> bool:
        """Whether what :meth:`_apply_one` last wrote to ``rel`` is what it was asked: a driver
        that had to write otherwise (v1's nested quotas) says no, so that the same limits asked
        again are written again, once the kernel takes them."""
        return True

    @abc.abstractmethod
    def _apply_one(self, rel: str, limits: CgroupLimits) -> tuple[list[str], list[CgroupError]]:
        """Write what differs from the record of ``rel`` in this mode's order: the files
        written, and every refusal (the record keeps the old value of each)."""

    def _devices_unknown(self, rel: str, known: bool = False) -> bool:
        """Whether ``rel``'s device rules are yet to be reconciled with the kernel's (an earlier
        daemon's may be there, which the record lacks); with ``known``, they now are."""
        if known:
            self._devices_known.add(_normal(rel))
        return _normal(rel) not in self._devices_known

    def _record(self, rel: str) -> dict[Hashable, str]:
        """The record of ``rel``, its own to change (a shared one is copied first)."""
        key = _normal(rel)
        record = self._written[key] = _Record(self._written.get(key, ()))
        return record


class _Record(dict):
    """A cgroup's record: diff key → value the kernel accepted (a dict that weak references
    can point at, for :attr:`Driver._shared`), and its :meth:`Driver.in_force` view once
    built (``shown``): a record is not changed once applied (:meth:`Driver._record` copies)."""

    __slots__ = ("__weakref__", "shown")

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.shown: dict[str, str] | None = None


def _normal(rel: str) -> str:
    parts = rel.split("/")
    if all(parts) and "." not in parts:
        return rel  # the caller's string itself: a task's records share its cgroup's name
    return "/".join(p for p in parts if p and p != ".")
