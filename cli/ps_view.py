"""``governor ps`` for people: one rich table of tasks (each with its process tree), or of
ended tasks. Pure: renderables from the daemon's rows (README: "governor ps"), ``now`` passed in.
"""

from __future__ import annotations

import re

from rich import box
from rich.table import Table
from rich.text import Text

from governor.cli import view_common as view
from governor.cli.view_common import amount, duration
from governor.units import format_timespan

# Process lines shown under a task's name; the rest are counted (`--json` lists 32).
TREE_LINES = 8
REASONS = {"exit": "exited", "stop": "stopped", "time_limit": "time limit", "oom_kill": "OOM kill"}


def tasks_table(rows: list[dict], *, now: float, users: bool) -> Table:
    """Running then queued tasks: id, name with its process tree, group (and user with
    ``users``), state, age, and CPU and memory as guarantee / cap / use."""
    rows = view.printable(rows)
    table = Table(caption="cpu (cores) and memory: guarantee/cap/use", caption_justify="left",
                  box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    table.add_column("id", no_wrap=True)
    table.add_column("name, processes", no_wrap=True, overflow="ellipsis", min_width=10, max_width=18)
    table.add_column("group", no_wrap=True, overflow="ellipsis", min_width=5, max_width=10)
    if users:
        table.add_column("user", no_wrap=True, overflow="ellipsis", min_width=4, max_width=8)
    table.add_column("state", no_wrap=True)
    table.add_column("age", no_wrap=True, justify="right")
    table.add_column("cpu", no_wrap=True, justify="right")
    table.add_column("memory", no_wrap=True, justify="right")
    for row in rows:
        started = row.get("started") if row.get("state") == "running" else row.get("queued_at")
        state = row.get("state", "?")
        if state == "queued" and row.get("position") is not None:
            state = f"queued {row['position']}"
        cells = [row.get("id", "?"), _name_and_tree(row), row.get("group", "?")]
        if users:
            cells.append(row.get("user", "?"))
        cells += [state, "—" if started is None else duration(now - started),
                  _triple(row, "cpu"), _triple(row, "memory")]
        view.row(table, *cells)
    return table


def ended_table(records: list[dict], *, now: float, users: bool) -> Table:
    """Ended tasks, latest last: id, name, group (and user), why and when it ended, its wall
    time, CPU time and memory peak."""
    records = view.printable(records)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for header, justify in (("id", "left"), ("name", "left"), ("group", "left"), ("user", "left"),
                            ("ended", "right"), ("why", "left"), ("wall", "right"), ("cpu", "right"),
                            ("peak", "right")):
        if header == "user" and not users:
            continue
        table.add_column(header, justify=justify, overflow="ellipsis", max_width=16 if header == "name" else None)
    for record in records:
        why = REASONS.get(record.get("reason"), str(record.get("reason")))
        cells = [record.get("id", "?"), record.get("name") or "—", record.get("group", "?")]
        if users:
            cells.append(record.get("user", "?"))
        cells += [f"{duration(now - record.get('ended', now))} ago", why, _span(record.get("wall_s")),
                  _span(record.get("cpu_s")), amount("memory", record.get("memory_peak"))]
        view.row(table, *cells)
    return table


def _triple(row: dict, resource: str) -> str:
    # "812M", not "812.0M": three amounts share the cell.
    return "/".join(_TRAILING_ZERO.sub("", amount(resource, row.get(vector, {}).get(resource)))
                    for vector in ("guarantee", "demand", "usage"))


_TRAILING_ZERO = re.compile(r"\.0(?=[KMGT]?$)")  # only a whole number's ".0": 1.05 stays 1.05


def _span(seconds: float | None) -> str:
    return "—" if seconds is None else format_timespan(seconds)


def _name_and_tree(row: dict) -> Text:
    """The task's name, then its processes as an indented tree (by parent pid)."""
    text = Text(row.get("name") or "—", style="bold")
    lines = process_tree(row.get("processes") or [])
    for line in lines[:TREE_LINES]:
        text.append("\n" + line)
    total = row.get("processes_total", len(lines))
    if total is None:  # past the trees one reply lists (governor.ps.TREES_LISTED)
        text.append("\n(processes not listed: governor ps shows your own)")
        return text
    hidden = int(total) - min(len(lines), TREE_LINES)
    if hidden > 0:
        text.append(f"\n… {hidden} more")
    return text


def process_tree(processes: list[dict]) -> list[str]:
    """``1234 make`` lines, a child indented two spaces below its parent; processes whose
    parent is not in the task start at the left."""
    pids = {p.get("pid") for p in processes}
    children: dict[object, list[dict]] = {}
    for process in sorted(processes, key=lambda p: p.get("pid", 0)):
        parent = process.get("ppid") if process.get("ppid") in pids else None
        children.setdefault(parent, []).append(process)
    lines: list[str] = []
    stack = [(p, 0) for p in reversed(children.get(None, []))]
    while stack:
        process, depth = stack.pop()
        lines.append(f"{'  ' * depth}{process.get('pid')} {process.get('name', '?')}")
        stack += [(child, depth + 1) for child in reversed(children.get(process.get("pid"), []))]
    return lines
