"""The ``governor history`` table (pure: entries in, a rich table out)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.table import Table

from governor.cli import view_common as view
from governor.config.resources import format_amount
from governor.config.units import format_timespan
from governor.wire.history_types import HistoryEntry

__all__ = ["history_table"]


def history_table(entries: Sequence[HistoryEntry]) -> Table:
    """One row per journal entry: local time, kind, task, user, group, demand, then the
    kind's own figures (time in the queue; wall and CPU time, memory peak and reason; a
    refusal's code). Every string as printable text (:func:`~governor.cli.view_common.printable`)."""
    table = Table(box=None, header_style="bold")
    for column in ("time", "kind", "task", "user", "group", "demand", "details"):
        table.add_column(column)
    for entry in view.printable(tuple(entries)):
        demand = ", ".join(f"{name} {format_amount(name, value)}" for name, value in entry.demand.items() if value)
        who = entry.user or ("" if entry.uid is None else str(entry.uid))
        view.row(table, _when(entry.at), entry.kind, _task(entry), who, entry.group or "-", demand, _details(entry))
    return table


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
