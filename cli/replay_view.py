"""``governor replay``'s tables (pure: the report of
:func:`governor.daemon.replay_report.compare` in, rich renderables out)."""

from __future__ import annotations

import time

from rich.table import Table

from governor.cli.view_common import printable
from governor.config.units import format_timespan

__all__ = ["replay_tables"]

_COLUMNS = (("tasks", "tasks"), ("refused", "refused"), ("still_queued", "queued at end"),
            ("wait_p50_s", "wait p50"), ("wait_p95_s", "wait p95"), ("cpu_share", "cpu share"),
            ("memory_share", "memory share"))


def replay_tables(report: dict) -> list:
    """A heading, the groups' table, the users' table and what cannot be known; every name as
    printable text (:func:`~governor.cli.view_common.printable`): the journal's group and user
    names reach a terminal here."""
    report = printable(report)
    span = f"{_when(report['since'])} to {_when(report['until'])}"
    refusals = report.get("refusals") or 0
    refused = f" and {refusals} refused launch{'es' if refusals != 1 else ''}" if refusals else ""
    jobs = report["jobs"]
    found = [f"replay of {jobs} task{'' if jobs == 1 else 's'}{refused}, {span}: recorded beside proposed"]
    for key in ("groups", "users"):
        found.append(_table(key, report[key]))
    found.append("cannot be known, so not guessed:\n" + "\n".join(f"  - {line}" for line in report["unknown"]))
    return found


def _table(key: str, rows: dict) -> Table:
    table = Table(title=key, box=None, header_style="bold", title_justify="left")
    table.add_column(key[:-1])
    table.add_column("")
    for _, title in _COLUMNS:
        table.add_column(title, justify="right")
    if key == "groups":
        table.add_column("fair share", justify="right")
    for name, sides in rows.items():
        for side in ("recorded", "proposed"):
            figures = sides[side]
            cells = [_cell(field, figures.get(field)) for field, _ in _COLUMNS]
            if key == "groups":
                standing = figures.get("fair_share")
                cells.append("-" if standing is None else
                             f"U {standing['usage_share']:.2f}, w {standing['effective_weight']:.2f}")
            table.add_row(name if side == "recorded" else "", side, *cells)
    return table


def _cell(field: str, value) -> str:
    if value is None:
        return "-"
    if field.endswith("_s"):
        return format_timespan(value)
    if field.endswith("share"):
        return f"{100 * value:.1f}%"
    return str(value)


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
