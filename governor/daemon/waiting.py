"""The launches waiting to be admitted, and what admission counts as held: shared by settle,
which admits, and the views (status, ``explain``, a waiting client's position), which show it."""

from __future__ import annotations

from collections.abc import Mapping

from governor.core import vocabulary
from governor.core.admission import Admission
from governor.core.queue import Entry
from governor.core.state import Tasks

__all__ = ["Queue", "reserved"]


class Queue(dict[str, Entry]):
    """Task id → the launch waiting for it (:class:`~governor.core.queue.Entry`), in arrival order.

    Attributes:
        admission: settle's last admission (:class:`~governor.core.admission.Admission`), for
            the queue's views (:func:`governor.core.queue.queue_view`); None before the first.
    """

    admission: Admission | None = None


def reserved(tasks: Tasks, usage: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Group → what its running ``tasks`` hold in the admission count
    (:func:`governor.core.vocabulary.reserved`): declared memory, and a session's use, as
    ``usage`` (cgroup → its measured use) has it."""
    held = {g: vocabulary.reserved(d) for g, d in tasks.demands().items()}
    for session in tasks.sessions():
        declared = vocabulary.reserved(session.demand)
        using = vocabulary.reserved(session.demand, session=True, used=usage.get(session.cgroup))
        group = held.setdefault(session.group, {})
        for resource, amount in declared.items():
            group[resource] = group.get(resource, 0.0) - amount + using.get(resource, 0.0)
    return held
