"""The ``governor history`` table (pure: entries in, a rich table out)."""

from __future__ import annotations

import time

from rich.table import Table

from governor.config.resources import format_amount
from governor.config.units import format_timespan

__all__ = ["history_table"]


def history_table(entries: list[dict]) -> Table:
    """One row per journal entry: local time, kind, task, user, group, demand, then the
    kind's own figures (time in the queue; wall and CPU time, memory peak and reason; a
    refusal's code)."""
    table = Table(box=None, header_style="bold")
    for column in ("time", "kind", "task", "user", "group", "demand", "details"):
        table.add_column(column)
    for entry in entries:
        demand = ", ".join(f"{name} {format_amount(name, value)}" for name, value in (entry.get("demand") or {}).items()
                           if value)
        table.add_row(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["at"])), entry.get("kind", "?"),
                      _task(entry), str(entry.get("user") or entry.get("uid", "")), str(entry.get("group") or "-"),
                      demand, _details(entry))
    return table


def _task(entry: dict) -> str:
    if entry.get("task") is None:
        return "-"
    return f"{entry['task']} {entry.get('name', '')}".strip()


def _details(entry: dict) -> str:
    kind = entry.get("kind")
    if kind in ("start", "session"):
        return f"waited {format_timespan(entry.get('waited_s') or 0)}"
    if kind == "end":
        parts = [entry.get("reason") or "?", f"wall {format_timespan(entry.get('wall_s') or 0)}"]
        if entry.get("cpu_s") is not None:
            parts.append(f"cpu {format_timespan(entry['cpu_s'])}")
        if entry.get("memory_peak") is not None:
            parts.append(f"peak {format_amount('memory', entry['memory_peak'])}")
        return ", ".join(parts)
    if kind == "refusal":
        return entry.get("code") or "?"
    return ""
