"""What foreign tenants (subtrees another manager owns: DESIGN.md §8) hold, and the capacity
left to divide once it is subtracted. Pure: readings and the time between them come in.

A Slurm scope holds what its jobs were allocated (``basis`` ``allocated``), any other subtree
what it uses (``used``): CPU as the rate of its counter between two reads, memory as charged
now. The capacity governor divides is the host's (less the reserve) less what every tenant
holds, each resource never below a sliver of it (:data:`LEAST_LEFT`), never zero. What governor already admitted is never taken back:
memory is incompressible, so when a foreign job arrives and the capacity drops below what
governor's tasks reserved, nothing is killed or squeezed (the root's ``memory.max`` stays the
host's, :func:`governor.core.plan.root_limits`); new admissions wait until enough ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["LEAST_LEFT", "NOISE", "Tenant", "held", "moved", "remaining", "total"]

# Changes of what the tenants hold smaller than these are noise, not worth a refill: a used
# CPU rate wobbles by a few hundredths of a core between two reads, charged memory by pages.
NOISE = {"cpu": 0.1, "memory": 32 * 1024**2}
# What is left to divide never falls below this fraction of the capacity, not to zero: a
# filling cannot divide nothing among groups that demand it (AllocationInputError), and the
# groups' weights must still say how they share what foreign tenants leave idle.
LEAST_LEFT = 0.01


@dataclass(frozen=True)
class Tenant:
    """A foreign subtree as status shows it.

    Attributes:
        name: its last path component (its whole path where two share one).
        path: as ``/proc/<pid>/cgroup`` spells it (``/kubepods.slice``).
        manager: ``slurm``, ``kubernetes``, ``nomad``, ``machines`` or ``config``.
        held: resource → what it holds (``cpu`` cores, ``memory`` bytes).
        basis: ``allocated`` (every amount in ``held`` is what its jobs were allocated) or
            ``used`` (what it uses, for at least one resource).
    """

    name: str
    path: str
    manager: str
    held: dict[str, float]
    basis: str

    def to_json(self) -> dict:
        """Status's entry: ``path``, ``manager``, ``held``, ``basis``."""
        return {"path": self.path, "manager": self.manager, "held": dict(self.held), "basis": self.basis}


def held(allocated: Mapping[str, float], cpu_usec: tuple[int, int] | None, memory_bytes: int | None,
         elapsed_s: float) -> tuple[dict[str, float], str]:
    """What one tenant holds, and on what basis.

    Args:
        allocated: resource → what its jobs were allocated (cores, bytes); a resource left out
            counts its use.
        cpu_usec: its CPU counter at the last read and now (µs), or None (one read so far, or
            unreadable: no CPU counted from use).
        memory_bytes: memory charged to it now, or None (unreadable).
        elapsed_s: seconds between the two reads of the counter.

    Returns:
        (resource → amount, ``allocated`` or ``used``).

    >>> held({"cpu": 2.0, "memory": 1024.0}, (0, 5_000_000), 10, 1.0)
    ({'cpu': 2.0, 'memory': 1024.0}, 'allocated')
    >>> held({}, (1_000_000, 1_500_000), 4096, 2.0)
    ({'cpu': 0.25, 'memory': 4096.0}, 'used')
    """
    amounts = dict(allocated)
    if "cpu" not in amounts and cpu_usec is not None and elapsed_s > 0:
        amounts["cpu"] = max(0.0, (cpu_usec[1] - cpu_usec[0]) / 1e6 / elapsed_s)
    if "memory" not in amounts and memory_bytes is not None:
        amounts["memory"] = float(memory_bytes)
    basis = "allocated" if allocated and set(allocated) >= {"cpu", "memory"} else "used"
    return {r: amounts[r] for r in ("cpu", "memory") if r in amounts}, basis


def total(tenants: Iterable[Tenant]) -> dict[str, float]:
    """Resource → what all ``tenants`` hold together."""
    sums: dict[str, float] = {}
    for tenant in tenants:
        for resource, amount in tenant.held.items():
            sums[resource] = sums.get(resource, 0.0) + amount
    return sums


def remaining(capacity: Mapping[str, float], held_total: Mapping[str, float]) -> dict[str, float]:
    """``capacity`` (resource → amount, as :func:`governor.config.resources.capacity` gives it)
    less ``held_total``, each resource never below :data:`LEAST_LEFT` of it; the order kept.

    >>> remaining({"cpu": 4.0, "memory": 100.0, "gpu": 1.0}, {"cpu": 1.5, "memory": 300.0})
    {'cpu': 2.5, 'memory': 1.0, 'gpu': 1.0}
    """
    return {resource: max(amount * LEAST_LEFT, amount - held_total.get(resource, 0.0))
            for resource, amount in capacity.items()}


def moved(before: Mapping[str, float], now: Mapping[str, float], noise: Mapping[str, float] = NOISE) -> bool:
    """Whether what the tenants hold changed by more than ``noise`` in some resource (worth
    a refill).

    >>> moved({"cpu": 1.0}, {"cpu": 1.05})
    False
    >>> moved({"cpu": 1.0}, {"cpu": 1.0, "memory": 64 * 1024**2})
    True
    """
    return any(abs(now.get(r, 0.0) - before.get(r, 0.0)) > noise.get(r, 0.0) for r in {*before, *now})
