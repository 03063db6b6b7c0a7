"""``governor explain``'s object as its views read it (schema in :mod:`governor.cli.explain_view`):
the live host's progressive filling (:func:`governor.core.explain.explain` writes it), typed as
the status is and decoded by the status's one decoder (:func:`decode_explain`), a malformed
field named rather than met as a traceback in a view. ``explain --json`` prints the object as
it came.

A field's default is what a daemon that left it out means; amounts are base units (cores,
bytes, bytes/s), shares fractions of the host. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from governor.wire.status_json import decode_part
from governor.wire.status_types import ForeignTenant, Psi, QueueItem, Stall, Vector, empty

__all__ = ["Configured", "Explain", "ExplainGroup", "Standing", "TraceStep", "decode_explain"]


@dataclass(frozen=True, slots=True)
class ExplainGroup:
    """A group with a running task, or in ``nodes`` an internal group of a tree (its subtree's
    sum): its DRF allocation (``weight``, ``allocation``, ``dominant_resources`` and
    ``dominant_share``, why it ``stop``\\ped growing), its ``demand`` (cap), ``lambda_`` (how
    much of its demand it got), what it runs (``tasks`` launched, None: a daemon that does not
    say; the users whose ``sessions`` it holds), its ``stall`` (PSI) and each task's
    (``task_stalls``), and its ``floor``."""

    weight: float | None = None
    allocation: Vector = empty()
    dominant_resources: tuple[str, ...] = ()
    dominant_share: float | None = None
    stop: str = ""
    demand: Vector = empty()
    lambda_: float = 0.0
    tasks: int | None = None
    sessions: tuple[str, ...] = ()
    stall: Stall = empty()
    task_stalls: Mapping[str, Stall] = empty()
    floor: float | None = None


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One event of the filling (the paper's Table 1): a group's demand met or a resource
    saturated, the groups ``frozen`` then, every group's dominant share and the total
    ``allocated`` after it (a group or resource left out: 0)."""

    step: int | None = None
    event: str = ""
    group: str | None = None
    resource: str | None = None
    frozen: tuple[str, ...] = ()
    dominant_shares: Vector = empty()
    allocated: Vector = empty()


@dataclass(frozen=True, slots=True)
class Configured:
    """A group of the config, with a task or not: its ``weight`` and ``floor``."""

    weight: float | None = None
    floor: float | None = None


@dataclass(frozen=True, slots=True)
class Standing:
    """A group's fair share over time (``[fairshare]``: :class:`governor.core.fairshare.Standing`):
    its configured ``weight``, decayed ``usage`` (capacity-seconds), ``usage_share`` and
    ``weight_share`` of its siblings', ``factor`` and the ``effective`` weight filling used."""

    weight: float | None = None
    usage: float | None = None
    usage_share: float | None = None
    weight_share: float | None = None
    factor: float | None = None
    effective: float | None = None


@dataclass(frozen=True, slots=True)
class Explain:
    """The explain object: ``capacity``, the ``groups`` with a task, a tree's internal ``nodes``
    and each group's parent (``parents``; None: the root's child), the ``trace``, the admission
    ``queue`` (as in status), every ``configured`` group, ``fairshare`` standings, and what it
    says as status does: ``psi``, ``host_capacity`` and the ``foreign`` tenants."""

    capacity: Vector = empty()
    groups: Mapping[str, ExplainGroup] = empty()
    nodes: Mapping[str, ExplainGroup] = empty()
    parents: Mapping[str, str | None] = empty()
    trace: tuple[TraceStep, ...] = ()
    queue: tuple[QueueItem, ...] = ()
    configured: Mapping[str, Configured] = empty()
    fairshare: Mapping[str, Standing] = empty()
    psi: Psi = Psi()
    host_capacity: Vector = empty()
    foreign: Mapping[str, ForeignTenant] = empty()


def decode_explain(payload: object) -> Explain:
    """The explain object in ``payload`` (a reply's ``explain``). A key whose value is null is
    taken as left out; a ``configured`` entry that is a number is a weight alone (a daemon
    before floors sent that).

    Raises:
        MalformedStatus: a field of the wrong type, named (``has a malformed
            explain.groups.A.weight: must be a number, got a string``).
    """
    if type(payload) is dict:
        payload = {key: value for key, value in payload.items() if value is not None}
        if type(payload.get("configured")) is dict:
            payload["configured"] = {name: about if type(about) is dict else {"weight": about}
                                     for name, about in payload["configured"].items()}
    return decode_part(Explain, payload, "explain")
