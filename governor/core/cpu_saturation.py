"""Whether every group wants all of its CPU guarantee, so that each may be held to it
(``cpu.max`` = A_g,cpu, see :func:`governor.core.plan.group_limits`): decided from the groups'
CPU use at each usage sample. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["BUSY", "RISE", "SATURATION", "STARVED", "cpu_saturated", "hold_scale"]

# When a group counts as wanting all of its CPU guarantee (fractions of it): when it uses this
# much; or, while the governed CPU is busy (this much of the capacity in use), when it uses
# this much, weights alone having left it short (measured on cgroup v1: 0.34 of a 0.5-core
# guarantee, when its one task shared a CPU with one of the other group's two).
SATURATION = 0.9
STARVED = 0.5
BUSY = 0.95
# A group that used less than its guarantee while it was held to it did not want more; it is
# believed until its use rises by this much of its guarantee.
RISE = 0.1


def cpu_saturated(guarantees: Mapping[str, float], use: Mapping[str, float], *, capacity: float, held: bool,
                  satisfied: Mapping[str, float]) -> tuple[bool, dict[str, float]]:
    """Whether every group wants all of its CPU guarantee, so that none leaves any to lend and
    each may be held to its own without taking anything from anyone.

    Args:
        guarantees: group → A_g,cpu, cores.
        use: group → cores used over the last sample; a group not sampled yet counts as idle.
        capacity: the governed CPU, cores.
        held: whether the groups are held to their guarantees now.
        satisfied: group → its use when a hold showed that it did not want all of its guarantee.

    Returns:
        (hold, satisfied): hold when there is a group with a guarantee and each wants all of it
        (see :data:`SATURATION`, :data:`STARVED`); the groups known to want less, updated.
    """
    wanted = {group: cores for group, cores in guarantees.items() if cores > 0}
    used = {group: use.get(group, 0.0) for group in wanted}
    known = {group: at for group, at in satisfied.items()
             if group in wanted and used[group] < at + RISE * wanted[group]}
    if held:
        known.update((group, u) for group, u in used.items() if u < SATURATION * wanted[group])
    busy = sum(used.values()) >= BUSY * capacity

    def wants(group: str) -> bool:
        share = used[group] / wanted[group]
        return share >= SATURATION or (busy and group not in known and share >= STARVED)

    return bool(wanted) and all(map(wants, wanted)), known


def hold_scale(capacity: float, lent_cpu: float) -> float:
    """How far a held group's ``cpu.max`` is above its guarantee, so that the held groups
    together use the reserve the system leaves idle too (``lent_cpu`` cores; ``capacity``: the
    cores DRF divides): (capacity + lent) / capacity, 1 with nothing lent. Each keeps its
    guarantee's share of the whole; the system takes its reserve back by weight."""
    return (capacity + lent_cpu) / capacity if capacity > 0 else 1.0
