"""A ``governor history`` entry as its table reads it (schema in docs/admin.md, "History and
replay"; :mod:`governor.daemon.history` writes them), typed as the status is and decoded by
its one decoder, so that a malformed entry (a daemon's bug, a hostile one, a journal file
edited by hand) is named rather than met as a traceback in the table. Times are Unix
seconds, durations seconds, amounts base units. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from governor.wire.status_json import decode_part
from governor.wire.status_types import Vector, empty

__all__ = ["HistoryEntry", "decode_entries"]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One journaled event: when (``at``), what (``kind``: launch, start, session, end,
    refusal), of which task (``task``, its ``name``; None: a refusal's), whose (``user``,
    ``uid``, ``group``), its declared ``demand``; a start's ``waited_s`` in the queue; an
    end's ``reason``, ``wall_s``, ``cpu_s`` and ``memory_peak`` (bytes); a refusal's ``code``."""

    at: float
    kind: str = "?"
    task: str | None = None
    name: str | None = None
    user: str | None = None
    uid: int | None = None
    group: str | None = None
    demand: Vector = empty()
    waited_s: float | None = None
    reason: str | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    memory_peak: float | None = None
    code: str | None = None


def decode_entries(entries: object, where: str) -> Sequence[HistoryEntry]:
    """``entries`` (the journal's objects, or a history reply's) as a tuple of
    :class:`HistoryEntry`; ``where`` names the list in errors.

    Raises:
        MalformedStatus: an entry, or a field of one, that is not of its type (``has a
            malformed history[3].at: must be a number, got a string``).
    """
    return decode_part(tuple[HistoryEntry, ...], entries, where)
