"""``governor ps`` for people: one rich table of tasks (each with its process tree), or of
ended tasks. Pure: renderables from the daemon's rows (docs/user.md: "governor ps"), typed
(:mod:`governor.wire.ps_types`), ``now`` passed in.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from governor.config import resources
from governor.cli import view_common as view
from governor.cli.view_common import amount, duration
from governor.config.units import format_timespan
from governor.wire.ps_types import EndedRecord, ExitStatus, Process, TaskRow

# Process lines shown under a task's name; the rest are counted (`--json` lists 32).
TREE_LINES = 8
REASONS = {"exit": "exited", "stop": "stopped", "time_limit": "time limit", "oom_kill": "OOM kill"}


def tasks_table(rows: Sequence[TaskRow], *, now: float, users: bool) -> view.Fitted:
    """Running then queued tasks: id, name with its process tree, group (and user with
    ``users``), state, age, cpu as guarantee / cap / use, memory as reserved / cap / use
    (:mod:`governor.core.vocabulary`), the GPUs it holds (``0,1``; ``wants 2`` while it waits; the
    column only when a listed task holds or declared GPUs), and why a queued task waits: in a
    column where the width leaves room for one, else a line per queued task under the table.
    No value is wrapped or cut: where the width is short, whole columns are left out (age,
    then user, group, gpus), and a line under the table says which."""
    rows = view.printable(rows)
    return view.Fitted(lambda width: _tasks_table(rows, now=now, users=users, width=width))


# Width a reason column needs to be worth having (else the reasons go under the table).
REASON_WIDTH = 24
# The columns left out, in this order, where the width is short (the amounts and names stay).
DROPPED_FIRST = ("age", "user", "group", "gpus")


def amount_columns() -> list[str]:
    """The resources ``ps`` shows a column of amounts for, in registry order: one per resource
    measured whole (not per device, not a device's: the gpus column lists those)."""
    return [r.name for r in resources.RESOURCES if not r.family and resources.measured(r.name)]


def _tasks_table(rows: Sequence[TaskRow], *, now: float, users: bool, width: int):
    gpus = holds_gpus(rows)
    columns = amount_columns()
    cells_of = []
    for row in rows:
        started = row.started if row.state == "running" else row.queued_at
        state = row.state
        if state == "queued" and row.position is not None:
            state = f"queued {row.position}"
        cells = [row.id, _name_and_tree(row), _or_unknown(row.group)]
        if users:
            cells.append(_or_unknown(row.user))
        cells += [state, "—" if started is None else duration(now - started),
                  *(triple(row, r, "guarantee" if resources.compressible(r) else "reserved") for r in columns)]
        if gpus:
            cells.append(_gpus(row))
        cells_of.append(cells + [row.reason or ""])
    headers = ["id", "name, processes", "group", *(["user"] if users else []), "state", "age", *columns,
               *(["gpus"] if gpus else [])]
    widest = {header: max([len(header)] + [max(map(len, str(cells[index]).splitlines() or [""]))
                                           for cells in cells_of]) for index, header in enumerate(headers)}
    shown = list(headers)
    for header in DROPPED_FIRST:
        if _table_width(widest[h] for h in shown) > width and header in shown:
            shown.remove(header)
    left_out = [header for header in headers if header not in shown]
    caption = "cpu (cores): guarantee/cap/use; memory: reserved/cap/use"
    if left_out:
        caption += f"; left out at this width: {', '.join(left_out)} (governor ps --format picks columns)"
    table = Table(caption=caption, caption_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for header in shown:
        table.add_column(header, no_wrap=True, min_width=widest[header],
                         justify="left" if header in ("id", "name, processes", "group", "user") else "right")
    reasons = [(cells[0], cells[-1]) for cells in cells_of if cells[-1]]
    column = bool(reasons) and _table_width([*(widest[h] for h in shown), REASON_WIDTH]) <= width
    if column:
        table.add_column("reason", overflow="fold", min_width=REASON_WIDTH)
    keep = [index for index, header in enumerate(headers) if header in shown] + ([len(headers)] if column else [])
    for cells in cells_of:
        view.row(table, *(cells[index] for index in keep))
    if column or not reasons:
        return table
    below = Text()
    for task, reason in reasons:
        below.append(f"\n{task} waits: ", style="bold")
        below.append(reason)
    return Group(table, below)


def _table_width(widths) -> int:
    """The width of a table of columns this wide: each but the last padded 1 on its right, a
    1-character separator between columns, and the two edges."""
    widths = list(widths)
    return sum(widths) + 2 * len(widths)


def ended_table(records: Sequence[EndedRecord], *, now: float, users: bool) -> view.Fitted:
    """Ended tasks, latest last: id, name, group (and user), when and why it ended (and whether
    its caps held it back: throttled CPU time, memory over its soft cap), its exit code or the
    signal that ended it, its wall time, CPU time and memory peak. No value is cut or wrapped
    but the why, whose words fold; where the width is short, whole columns are left out (ended,
    then user, group), and the caption says which."""
    records = view.printable(records)
    return view.Fitted(lambda width: _ended_table(records, now=now, users=users, width=width))


# Width the why column keeps at least (its words fold past it).
WHY_WIDTH = 20


def _ended_table(records: Sequence[EndedRecord], *, now: float, users: bool, width: int) -> Table:
    rows = []
    for record in records:
        cells = [record.id, record.name or "—", _or_unknown(record.group)]
        if users:
            cells.append(_or_unknown(record.user))
        cells += [f"{duration(ended_ago(record, now))} ago", exit_words(record.exit_status),
                  _span(record.wall_s), _span(record.cpu_s), amount("memory", record.memory_peak), ended_why(record)]
        rows.append(cells)
    headers = ["id", "name", "group", *(["user"] if users else []), "ended", "exit", "wall", "cpu", "peak", "why"]
    widest = {header: max([len(header)] + [len(str(cells[index])) for cells in rows])
              for index, header in enumerate(headers)}
    widest["why"] = min(widest["why"], WHY_WIDTH)
    shown = list(headers)
    for header in ("ended", "user", "group"):
        if _table_width(widest[h] for h in shown) > width and header in shown:
            shown.remove(header)
    left_out = [header for header in headers if header not in shown]
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, caption_justify="left",
                  caption=f"left out at this width: {', '.join(left_out)} (governor ps --format picks columns)"
                  if left_out else None)
    for header in shown:
        if header == "why":
            table.add_column(header, overflow="fold", min_width=widest[header])
        else:
            table.add_column(header, no_wrap=True, min_width=widest[header],
                             justify="left" if header in ("id", "name", "group", "user") else "right")
    keep = [index for index, header in enumerate(headers) if header in shown]
    for cells in rows:
        view.row(table, *(cells[index] for index in keep))
    return table


def ended_why(record: EndedRecord) -> str:
    """Why a task ended, in words, with what its caps did: ``time limit; CPU throttled 12s;
    memory over its soft cap 3×; 2 forks refused at its pids cap``."""
    words = [REASONS.get(record.reason, str(record.reason))]
    if record.stopped_by:
        words[0] += f" by {record.stopped_by}"
    if record.throttled_s:
        words.append(f"CPU throttled {format_timespan(record.throttled_s)}")
    if record.memory_high_events:
        words.append(f"memory over its soft cap {record.memory_high_events}×")
    if record.forks_refused:  # as `run --summary` and the log say it (docs/user.md)
        words.append(f"{record.forks_refused} fork{'' if record.forks_refused == 1 else 's'} refused at its pids cap")
    return "; ".join(words)


def ended_ago(record: EndedRecord, now: float) -> float:
    """Seconds since ``record``'s task ended (0 where the daemon did not say when)."""
    return 0.0 if record.ended is None else now - record.ended


def holds_gpus(rows: Sequence[TaskRow] | Sequence[EndedRecord]) -> bool:
    """Whether a task of ``rows`` holds GPUs or declared some: ``ps`` then shows a gpus column."""
    return any(row.gpus or row.demand.get("gpu") for row in rows)


def _or_unknown(value: str | None) -> str:
    return "?" if value is None else value


def triple(row: TaskRow, resource: str, held: str) -> str:
    """``row``'s amounts of ``resource`` in one cell, ``held`` (``guarantee`` or ``reserved``)
    / cap / use: ``1.5/2/1.98``, ``4G/4G/812M``."""
    return "/".join(part(row, resource, vector) for vector in (held, "demand", "usage"))


def part(row: TaskRow, resource: str, vector: str) -> str:
    """One amount of ``row``: its ``vector`` (``guarantee``, ``reserved``, ``demand``: the cap,
    ``usage``) of ``resource``, ``—`` for none. "812M", not "812.0M", as three share a cell."""
    return _TRAILING_ZERO.sub("", amount(resource, getattr(row, vector).get(resource)))


_TRAILING_ZERO = re.compile(r"\.0(?=[KMGT]?$)")  # only a whole number's ".0": 1.05 stays 1.05


def _gpus(row: TaskRow) -> str:
    """The GPUs a task holds (``0,1``, ``0-3``), ``wants 2`` for a queued task that declared
    two, ``—`` for none."""
    if row.gpus:
        return view.gpu_list(row.gpus)
    wanted = row.demand.get("gpu")
    if row.state == "queued" and wanted is not None and wanted > 0:
        return f"wants {view.number(wanted)}"
    return "—"


def _span(seconds: float | None) -> str:
    return "—" if seconds is None else format_timespan(seconds)


def _name_and_tree(row: TaskRow) -> Text:
    """The task's name, then its processes as an indented tree (by parent pid)."""
    text = Text(row.name or "—", style="bold")
    lines = process_tree(row.processes)
    for line in lines[:TREE_LINES]:
        text.append("\n" + line)
    if row.processes_total is None:  # past the trees one reply lists (governor.wire.ps.TREES_LISTED)
        text.append("\n(processes not listed: governor ps shows your own)")
        return text
    hidden = max(row.processes_total, len(lines)) - min(len(lines), TREE_LINES)
    if hidden > 0:
        text.append(f"\n… {hidden} more")
    return text


def process_tree(processes: Sequence[Process]) -> list[str]:
    """``1234 make`` lines, a child indented two spaces below its parent; processes whose
    parent is not in the task start at the left."""
    pids = {p.pid for p in processes}
    children: dict[int | None, list[Process]] = {}
    for process in sorted(processes, key=lambda p: p.pid):
        parent = process.ppid if process.ppid in pids else None
        children.setdefault(parent, []).append(process)
    lines: list[str] = []
    stack = [(p, 0) for p in reversed(children.get(None, []))]
    while stack:
        process, depth = stack.pop()
        lines.append(f"{'  ' * depth}{process.pid} {_or_unknown(process.name)}")
        stack += [(child, depth + 1) for child in reversed(children.get(process.pid, []))]
    return lines


def exit_words(status: ExitStatus | None) -> str:
    """An ended task's ``exit_status`` in a cell: its exit code (``127``), or the signal that
    ended it (``SIGKILL``, ``SIGSEGV+core`` where it dumped core); ``-`` where the daemon does
    not know it (Linux before 6.15, sessions, re-adopted tasks)."""
    if status is None:
        return "-"
    if status.code == "exited" and status.status is not None:
        return str(status.status)
    name = status.signal or "?"
    name = name if name.startswith("SIG") else f"SIG{name}"
    if name not in signal.Signals.__members__ and not name[3:].isdigit():
        name = "SIG?"  # from a hostile daemon: only a signal's name reaches the terminal
    return name + ("+core" if status.code == "dumped" else "")
