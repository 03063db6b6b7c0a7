"""Memory protection carried through the systemd units above governor's root (issue 35).

The kernel bounds a cgroup's effective ``memory.min``/``memory.low`` by its parent's
(``mm/memcontrol.c``, ``effective_protection``). Under systemd governor's root is
``governor.slice/governor-tasks.service/governed``: with the two units at systemd's default
(no protection), what the plan writes below them protects nothing under host-wide pressure.
So the daemon sets ``MemoryMin=`` and ``MemoryLow=`` on those units (only governor's own, named
by the caller) to its root's planned ``memory.min``/``memory.low``, through systemd
(:class:`~governor.cgroups.systemd.SliceDriver`: systemd is the only writer of a unit's
cgroup), on the cgroup thread: ``systemctl`` never holds up the event loop.

The root's ``memory.low`` moves with every reservation; each value is rounded up to
:data:`STEP_BYTES` and systemd is called only when a rounded value changes. A little more
above than below is harmless: a child's protection is ``min(its usage, its own setting)``, so
the units' surplus protects nothing the root's own files do not, except through
``memory_recursiveprot`` (systemd mounts cgroup v2 with it): there a parent's protection that
its children do not claim is handed to their unprotected usage, in proportion. The surplus is
less than one step, shared by every task's use beyond its group's protection (and the tasks
unit's ``holder``): at most 64 MiB more is kept from reclaim, no group's promise smaller.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Sequence

from governor.cgroups.hierarchy import Hierarchy
from governor.cgroups.systemd import MEMORY_PROPERTIES, SliceDriver
from governor.config.units import format_size
from governor.core.protection import Protection
from governor.daemon.effector import Effector
from governor.daemon.journal import Journal
from governor.errors import CgroupError, GovernorError

__all__ = ["STEP_BYTES", "UnitProtection", "protection_line"]

log = logging.getLogger("governor.daemon")

# What the units' values are rounded up to: a reservation of a few MiB more or less calls no
# systemctl (~10 ms each), and the surplus the kernel may hand out stays small (see the module).
STEP_BYTES = 64 << 20

# Runs work on the cgroup thread, then its result (or the GovernorError it raised) on the loop.
Runner = Callable[[Callable[[], object], Callable[[object], None]], None]


class UnitProtection:
    """``MemoryMin=``/``MemoryLow=`` of the units above governor's root (see the module).

    Args:
        driver: sets the units' properties (its record is kept on the cgroup thread only).
        units: the units' cgroups relative to the v2 mount, outermost first
            (:func:`~governor.cgroups.systemd.units_above`).
        run: runs work on the cgroup thread (:meth:`Tree.run <governor.daemon.tree.Tree.run>`).
        journal: where a failure is told (once, until a call succeeds again).

    Attributes:
        asked: the rounded ``(MemoryMin, MemoryLow)`` in bytes last asked of systemd; None
            while governor has set nothing (or reset what it set).
        in_force: unit → property → value systemd accepted from this daemon (for status).
    """

    def __init__(self, driver: SliceDriver, units: Sequence[str], run: Runner, journal: Journal):
        self.driver = driver
        self.units = tuple(units)
        self._run = run
        self.journal = journal
        self.asked: tuple[int, int] | None = None
        self.in_force: dict[str, dict[str, str]] = {}
        self._failing = False

    @classmethod
    def of(cls, hierarchy: Hierarchy, own: Collection[str], run: Runner, journal: Journal) -> UnitProtection | None:
        """The units of ``own`` above ``hierarchy``'s root, when systemd manages a v2 host
        (:func:`~governor.cgroups.systemd.systemd_slices`: PID 1, ``systemctl`` on PATH); None
        when there are none, the host is v1, or systemd is not there."""
        units, driver = hierarchy.systemd_units(own)
        return cls(driver, units, run, journal) if driver is not None else None

    def follow(self, root: Protection, protect: bool) -> None:
        """(On the loop) bring the units to the root's ``(memory.min, memory.low)`` in bytes,
        each rounded up to :data:`STEP_BYTES`, when that changed; without ``protect``
        (``memory_protection = false``), reset what governor set (systemd's default: none).
        The call is made on the cgroup thread; a failure is told once and stops nothing, and is
        retried only when the value next changes: a systemctl that hangs (5 s each) must not
        hold up every later mkdir and move on that thread."""
        wanted = (_rounded(root[0]), _rounded(root[1])) if protect else None
        if wanted == self.asked:
            return
        self.asked = wanted
        self._run(lambda: self._set(wanted), self._done)

    def _set(self, wanted: tuple[int, int] | None) -> tuple[dict[str, dict[str, str]], list[CgroupError]]:
        """(On the cgroup thread) each unit set (or reset), every one tried: what systemd holds
        from this driver, unit → property → value, and the refusals."""
        return Effector.protect_units(self.driver, self.units, wanted)

    def _done(self, outcome: object) -> None:
        """(On the loop) keep what systemd accepted; tell the first failure of a run of them."""
        before = self.in_force
        if isinstance(outcome, GovernorError):
            errors: list = [outcome]
        else:
            self.in_force, errors = outcome  # type: ignore[misc]
        if errors and not self._failing:
            self.journal.event("error", f"cannot set the memory protection of governor's systemd units: {errors[0]}; "
                                        "the groups' protection is bounded by the units' until it is set", logging.ERROR)
        for unit, properties in self.in_force.items():
            if properties != before.get(unit, {}):
                log.info("%s", protection_line(unit, properties))
        self._failing = bool(errors)
        self.journal.changed()  # status shows what systemd holds now


def protection_line(unit: str, properties: dict[str, str]) -> str:
    """One journal line for a unit's memory protection as systemd holds it, in status's words
    and units (:func:`~governor.config.units.format_size`); ``none`` once reset.

    >>> protection_line("governor.slice", {"MemoryMin": "0", "MemoryLow": "939524096"})
    "governor.slice's memory protection (through systemd): memory.min 0, memory.low 896.0M"
    """
    values = [f"{MEMORY_PROPERTIES.get(name, name)} {_size(value)}" for name, value in properties.items()]
    return f"{unit}'s memory protection (through systemd): {', '.join(values) or 'none'}"


def _size(value: str) -> str:
    return format_size(int(value)) if value.isdigit() else value


def _rounded(value: float) -> int:
    """``value`` bytes rounded up to a multiple of :data:`STEP_BYTES` (0 stays 0)."""
    return math.ceil(value / STEP_BYTES) * STEP_BYTES
