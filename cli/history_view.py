"""The ``governor history`` listing (pure: entries in, lines of aligned columns out).

Plain lines, not a rich table: a table costs about a millisecond a row (30,000 entries took
29 s, a busy host's week of 300,000 five minutes), and a journal is read a week at a time."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from governor.cli import view_common as view
from governor.config.resources import format_amount
from governor.host.history_check import resource_asked
from governor.config.units import format_timespan
from governor.wire.fields import MAX_NAME_CHARS
from governor.wire.history_types import HistoryEntry

__all__ = ["COLUMNS", "history_lines"]

COLUMNS = ("time", "kind", "task", "user", "group", "demand", "details")
_GAP = "  "


def history_lines(entries: Sequence[HistoryEntry]) -> Iterator[str]:
    """The header, then one line per journal entry: local time, kind, task, user, group,
    demand, then the kind's own figures (time in the queue; wall and CPU time, memory peak
    and reason; a refusal's code), each column as wide as its widest cell (in terminal cells).
    Every string as printable text (:func:`~governor.cli.view_common.printable`)."""
    rows = [tuple(map(view.printable, _cells(entry))) for entry in entries]
    widths = [max(view.cells(name), *(view.cells(row[i]) for row in rows)) for i, name in enumerate(COLUMNS)]
    for row in (COLUMNS, *rows):
        yield _GAP.join(cell + " " * (width - view.cells(cell)) for cell, width in zip(row, widths)).rstrip()


def _cells(entry: HistoryEntry) -> tuple[str, ...]:
    demand = ", ".join(f"{name} {_amount(name, value)}" for name, value in entry.demand.items() if value)
    who = entry.user or ("" if entry.uid is None else str(entry.uid))
    return _when(entry.at), entry.kind, _task(entry), _short(who), _short(entry.group or "-"), demand, \
        _details(entry)


def _amount(name: str, value: float) -> str:
    """An amount as :func:`~governor.config.resources.format_amount` shows it; a refusal's
    ``io_read`` (as asked, where no device is governed) as its family's (``1.0M/s``)."""
    entry = resource_asked(name)
    return entry.format(value, False) if entry is not None else format_amount(name, value)


def _short(name: str) -> str:
    """A name cut to :data:`MAX_NAME_CHARS` (and …): a journal written before refusals were cut
    holds 4,096-character group names, which made every line that wide."""
    return name if len(name) <= MAX_NAME_CHARS + 1 else name[:MAX_NAME_CHARS] + "…"


def _when(at: float) -> str:
    """``at`` as local time; a moment no calendar holds (a hostile 1e308) as its number."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    except (OverflowError, OSError, ValueError):
        return f"{at:.3g}"


def _task(entry: HistoryEntry) -> str:
    if entry.task is None:
        return "-"
    return f"{entry.task} {entry.name or ''}".strip()


def _details(entry: HistoryEntry) -> str:
    if entry.kind in ("start", "session"):
        return f"waited {format_timespan(entry.waited_s or 0)}"
    if entry.kind == "end":
        parts = [entry.reason or "?", f"wall {format_timespan(entry.wall_s or 0)}"]
        if entry.cpu_s is not None:
            parts.append(f"cpu {format_timespan(entry.cpu_s)}")
        if entry.memory_peak is not None:
            parts.append(f"peak {format_amount('memory', entry.memory_peak)}")
        return ", ".join(parts)
    if entry.kind == "refusal":
        return entry.code or "?"
    return ""
