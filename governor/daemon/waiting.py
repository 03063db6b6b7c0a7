"""The launches waiting to be admitted: shared by settle, which admits, and the views (status,
``explain``, a waiting client's position), which show them."""

from __future__ import annotations

from governor.core.admission import Admission
from governor.core.queue import Entry

__all__ = ["Queue"]


class Queue(dict[str, Entry]):
    """Task id → the launch waiting for it (:class:`~governor.core.queue.Entry`), in arrival order.

    Attributes:
        admission: settle's last admission (:class:`~governor.core.admission.Admission`), for
            the queue's views (:func:`governor.core.queue.queue_view`); None before the first.
    """

    admission: Admission | None = None
