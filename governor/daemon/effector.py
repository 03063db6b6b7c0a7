"""The effector: the one module above ``cgroups/`` that changes a cgroup (DESIGN.md §4).

Every write the daemon makes goes through it, to :class:`~governor.cgroups.hierarchy.Hierarchy`:
the limits the plan asks for (a refill's whole plan, or one new task's or session's caps,
device rules included, before any process joins), cgroups made, removed and forgotten,
processes moved, re-joined and killed, a login slice's properties reset, the GPU guard put on
and taken off outside governor's root, and the memory protection of governor's own systemd
units. The kernel's order within a plan (parents first; v1's parent/child rules) is the
driver's, and what the kernel accepted is what the driver records (``Hierarchy.in_force``).

The stages decide; this module carries it out. Which calls run on the cgroup thread
(``mkdir``, ``rmdir``, moves: :class:`~governor.daemon.tree.Tree`) is the caller's choice, as
it is now: nothing here schedules or waits. ``tests/unit/test_one_effector.py`` checks that no
other module above ``cgroups/`` calls a cgroup write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from governor.cgroups.base import ApplyReport
from governor.cgroups.device_guard import GuardPlan, put_guard, take_guard
from governor.cgroups.device_rules import Device
from governor.cgroups.hierarchy import Hierarchy
from governor.cgroups.limits import CgroupLimits
from governor.cgroups.systemd import SliceDriver
from governor.errors import CgroupError

__all__ = ["Effector"]


class Effector:
    """Carries out what the stages decided, through ``hierarchy``.

    Args:
        hierarchy: governor's cgroups (:class:`~governor.cgroups.hierarchy.Hierarchy`).

    Errors: each method raises what the :class:`~governor.cgroups.driver.Driver` method it
    names raises (:class:`~governor.errors.CgroupError`, naming path, value and errno).
    """

    def __init__(self, hierarchy: Hierarchy) -> None:
        self.hierarchy = hierarchy

    # ── limits ──────────────────────────────────────────────────────────────────────────

    def apply_plan(self, planned: Mapping[str, CgroupLimits]) -> ApplyReport:
        """Bring every cgroup of ``planned`` (cgroup → its limits, login slices included) to
        its limits, parents first, only what changed; every refusal is in the report, the
        value in force staying (:meth:`Hierarchy.apply_plan
        <governor.cgroups.hierarchy.Hierarchy.apply_plan>`)."""
        return self.hierarchy.apply_plan(planned)

    def apply(self, rel: str, limits: CgroupLimits) -> list[str]:
        """Bring cgroup ``rel`` (a new task's or session's, or a login slice) to ``limits``,
        device rules included; the files written. Raises the first refusal."""
        return self.hierarchy.apply(rel, limits)

    def release_login(self, rel: str, limits: CgroupLimits | None = None) -> None:
        """Reset what governor set on login slice ``rel`` (and what ``limits`` set: an earlier
        daemon's caps); the slice stays, systemd's. Raises CgroupWriteError."""
        self.hierarchy.release_login(rel, limits)

    # ── cgroups and processes (the cgroup_mutex calls: on the cgroup thread) ─────────────

    def make(self, rel: str) -> None:
        """Make cgroup ``rel`` and its groups with the controllers enabled down to it (its
        limits are :meth:`apply`'s, before any process joins it)."""
        self.hierarchy.prepare(rel)

    def remove(self, rel: str) -> None:
        """Remove cgroup ``rel`` (``""``: governor's root). Raises CgroupBusy while it holds a
        process or a cgroup."""
        self.hierarchy.remove(rel)

    def remove_empty_root(self) -> None:
        """Remove governor's root where nothing is below it (a refused start's); one that holds
        an earlier daemon's tasks is theirs, and stays."""
        try:
            if not self.hierarchy.children(""):
                self.hierarchy.remove("")
        except CgroupError:
            pass

    def forget(self, rel: str) -> None:
        """Drop the record of what was written to ``rel`` (it is being removed)."""
        self.hierarchy.forget(rel)

    def move(self, rel: str, pid: int) -> None:
        """Move process ``pid`` and its threads into cgroup ``rel``. Raises ProcessGone."""
        self.hierarchy.move(rel, pid)

    def rejoin(self, rel: str, leave: Callable[[int], bool] | None = None) -> list[int]:
        """Put ``rel``'s processes into each hierarchy of it lacking them, but those ``leave``
        tells to leave; the pids moved."""
        return self.hierarchy.rejoin(rel, leave)

    def kill(self, rel: str) -> int:
        """SIGKILL every process in cgroup ``rel`` and below; how many (0: unknown)."""
        return self.hierarchy.kill(rel)

    # ── outside governor's root ─────────────────────────────────────────────────────────

    @staticmethod
    def put_guard(plan: GuardPlan, denied: Sequence[Device]) -> list[str]:
        """Deny the device nodes ``denied`` on each of ``plan``'s places (the GPU guard);
        one sentence per place that failed (:func:`~governor.cgroups.device_guard.put_guard`)."""
        return put_guard(plan, denied)

    @staticmethod
    def take_guard(plan: GuardPlan, denied: Sequence[Device]) -> list[str]:
        """Take the guard off ``plan``'s places; one sentence per place that failed
        (:func:`~governor.cgroups.device_guard.take_guard`)."""
        return take_guard(plan, denied)

    @staticmethod
    def protect_units(driver: SliceDriver, units: Sequence[str],
                      wanted: tuple[int, int] | None) -> tuple[dict[str, dict[str, str]], list[CgroupError]]:
        """Set ``MemoryMin=``/``MemoryLow=`` (bytes, ``wanted``) on each of governor's systemd
        ``units`` through ``driver``, or reset what governor set there (``wanted`` None),
        every one tried: unit name → property → value systemd holds, and the refusals."""
        errors: list[CgroupError] = []
        for rel in units:
            try:
                if wanted is None:
                    driver.reset(rel)
                else:
                    driver.apply(rel, CgroupLimits(memory_min_bytes=wanted[0], memory_low_bytes=wanted[1]))
            except CgroupError as error:
                errors.append(error)
        return {rel.rsplit("/", 1)[-1]: dict(driver.in_force(rel)) for rel in units}, errors
