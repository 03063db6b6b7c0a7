"""The one interface code above ``cgroups/`` uses to make, limit, join and read cgroups, whatever
the host's mode: cgroup v2 (:class:`~governor.cgroups.v2.CgroupV2Driver`) or v1
(:class:`~governor.cgroups.v1.CgroupV1Driver`), chosen once by
:func:`~governor.cgroups.hierarchy.open_hierarchy`. The kernel's rules of each mode (which
files, in which order, v1's parent/child constraints) are the driver's, never its caller's.

Cgroups are named by paths relative to governor's root (``"physics/task-7"``; ``""`` is the
root itself). :meth:`Driver.create`, :meth:`Driver.remove` and :meth:`Driver.move` take the
kernel's ``cgroup_mutex`` (a move may wait for an RCU grace period holding it): they may run on
a thread of their own, and touch nothing else of the driver's, as may :meth:`Driver.pids_full`
(asked before a move); every other method belongs to one thread (the daemon's event loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

from governor.cgroups.base import ApplyReport
from governor.cgroups.limits import CgroupLimits
from governor.cgroups.stats import CgroupStats

__all__ = ["Driver"]


class Driver(Protocol):
    """What every cgroup driver offers (see the module for threads and names).

    Errors: every method raises :class:`~governor.errors.CgroupError` (``CgroupReadError``,
    ``CgroupWriteError``) naming the path, the value and the errno; ``vanished`` on the error
    says the cgroup is gone.
    """

    mode: str  # "v2" or "v1", for people and status

    def create(self, rel: str) -> None:
        """Make cgroup ``rel`` and its missing ancestors (idempotent)."""

    def enable_controllers(self, rel: str, controllers: Iterable[str]) -> None:
        """Make ``controllers`` (v2 names) available in ``rel``; raises CgroupUnsupported."""

    def remove(self, rel: str) -> None:
        """Remove the leaf cgroup ``rel`` (gone already is fine); its record stays until
        :meth:`forget`. Raises CgroupBusy: it holds processes or child cgroups."""

    def children(self, rel: str = "") -> list[str]:
        """The names of ``rel``'s child cgroups, sorted."""

    def move(self, rel: str, pid: int) -> None:
        """Move process ``pid`` with all its threads into ``rel``. Raises ProcessGone: there
        is no such process."""

    def pids(self, rel: str) -> list[int]:
        """The processes in ``rel`` itself."""

    def pids_full(self, rel: str) -> bool:
        """Whether ``rel`` holds as many processes and threads as its ``pids.max`` allows (a
        move into it is not refused: a move is no fork); False with no cap. Reads only: it may
        run on the thread that moves."""

    def rejoin(self, rel: str, leave: Callable[[int], bool] | None = None) -> list[int]:
        """Put ``rel``'s processes into ``rel`` in each hierarchy lacking them (v1: one that
        joined since they started), but one ``leave`` tells to leave where it is; the pids moved."""

    def memory_cap_bytes(self, rel: str) -> int | None:
        """The hard memory cap the kernel holds for ``rel``, bytes (None: none), as read back
        from the kernel, not from this driver's record (a task found without its record)."""

    def populated(self, rel: str) -> bool:
        """Whether ``rel`` or a cgroup below it holds a process."""

    def kill(self, rel: str) -> int:
        """SIGKILL every process in ``rel`` and below; how many were signalled (0: unknown)."""

    def apply(self, rel: str, limits: CgroupLimits) -> list[str]:
        """Bring ``rel`` to ``limits`` (only what changed), its device rules included; raises
        the first refusal."""

    def apply_plan(self, planned: Mapping[str, CgroupLimits]) -> ApplyReport:
        """Apply many cgroups' limits, parents first; every refusal is in the report."""

    def in_force(self, rel: str) -> dict[str, str]:
        """What the kernel accepted in ``rel``: file → value (shared: do not modify)."""

    def forget(self, rel: str) -> None:
        """Drop the record of ``rel`` (``""``: every record)."""

    def read_stats(self, rel: str, *, peak: bool = False) -> CgroupStats:
        """One sample of ``rel``'s counters (with ``peak``, its memory peak too)."""

    def cpu_usage_usec(self, rel: str) -> int:
        """``rel``'s cumulative CPU counter, µs (one file, not every counter)."""

    def events_path(self, rel: str) -> Path | None:
        """The file whose change says ``rel`` emptied, or None (then watch a pid)."""

    def directory(self, rel: str) -> Path:
        """``rel``'s directory, for people."""

    def memory_directory(self, rel: str) -> Path:
        """``rel``'s directory where its memory files are (v1: in the memory hierarchy)."""

    def device_guard_problem(self) -> str | None:
        """Why limits that deny devices (``CgroupLimits.devices_denied``) cannot be applied
        here, or None."""
