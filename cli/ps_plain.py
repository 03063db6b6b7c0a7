"""``governor ps`` for scripts: plain text columns, one line per task, never wrapped or cut.

Used when the output is not a terminal, or with ``--format``/``--noheader`` (as squeue's). Pure:
lines from the daemon's rows (docs/user.md: "governor ps"), typed (:mod:`governor.wire.ps_types`),
``now`` passed in.
"""

from __future__ import annotations

from collections.abc import Sequence

from governor.cli import view_common as view
from governor.cli.ps_view import REASONS, amount_columns, ended_ago, ended_why, exit_words, part, triple
from governor.config import resources
from governor.config.units import format_timespan
from governor.wire.ps_types import EndedRecord, TaskRow

# Each field: what it shows. Amounts as ps shows them; "-" where there is none.
BEFORE_AMOUNTS = {
    "id": "task id", "name": "task name", "group": "group", "user": "user", "pid": "the launched command's pid",
    "state": "running or queued", "position": "place in the queue", "age": "time running, or queued",
}
AFTER_AMOUNTS = {"gpus": "GPUs held", "processes": "how many processes", "reason": "why a queued task waits"}
ENDED_FIELDS = {
    "id": "task id", "name": "task name", "group": "group", "user": "user", "ended": "how long ago",
    "exit": "exit code, or the signal that ended it", "wall": "wall time", "cpu": "CPU time",
    "peak": "memory peak", "reason": "exit, stop, time_limit or oom_kill", "why": "why, in words",
}


def task_fields() -> dict[str, str]:
    """The fields of running and queued tasks, name to what it shows: those of the amounts come
    from the resource registry as it is when called, as the ``ps`` table's columns do: each
    resource's packed cell (``cpu``: guarantee/cap/use) and each of its amounts by name
    (``cpu.guarantee``, ``cpu.cap``, ``cpu.used``; ``memory.reserved``...)."""
    amounts = {}
    for name in amount_columns():
        amounts[name] = "/".join(AMOUNTS[vector] if vector in _named(name) else "-" for vector in _vectors(name))
        amounts.update({f"{name}.{AMOUNTS[vector]}": f"{name}: {AMOUNT_WORDS[vector]}" for vector in _named(name)})
    return {**BEFORE_AMOUNTS, **amounts, **AFTER_AMOUNTS}


# A row's vector → its field's suffix (the vocabulary's words), and what it shows.
AMOUNTS = {"guarantee": "guarantee", "reserved": "reserved", "demand": "cap", "usage": "used"}
AMOUNT_WORDS = {"guarantee": "its part of its group's guarantee", "reserved": "what it holds in admission",
                "demand": "its cap (what it declared)", "usage": "what it uses (the last second)"}


def _vectors(resource: str) -> tuple[str, str, str]:
    """The row vectors of ``resource``'s amounts, in a cell's order: guarantee (compressible)
    or reserved (admitted), then cap, then use (:mod:`governor.core.vocabulary`)."""
    return "guarantee" if resources.compressible(resource) else "reserved", "demand", "usage"


def _named(resource: str) -> tuple[str, ...]:
    """The vectors of ``resource`` that have a figure: all three, but a count's (``pids``), which
    is a cap and a use only (never admitted, never a guarantee)."""
    return _vectors(resource)[1:] if resources.count(resource) else _vectors(resource)


def _amount_cell(row: TaskRow, field: str) -> str | None:
    """The cell of an amount field (``cpu``, ``cpu.used``) of ``row``, None for another field."""
    if field in amount_columns():
        return triple(row, field, _vectors(field)[0]).replace("—", "-")
    resource, _, named = field.rpartition(".")
    vectors = _named(resource) if resource in amount_columns() else ()
    vector = next((vector for vector in vectors if AMOUNTS[vector] == named), None)
    return None if vector is None else part(row, resource, vector).replace("—", "-")


def default_fields(*, ended: bool, users: bool, gpus: bool) -> list[str]:
    """The fields plain output shows without ``--format`` (``users``: with ``--all``;
    ``gpus``: a listed task holds or declared GPUs); the one with spaces last."""
    if ended:
        return ["id", "name", "group", *(["user"] if users else []), "ended", "exit", "wall", "cpu", "peak", "why"]
    return ["id", "name", "group", *(["user"] if users else []), "state", "age", *amount_columns(),
            *(["gpus"] if gpus else []), "reason"]


def parse_fields(text: str, *, ended: bool) -> list[str]:
    """``--format``'s comma-separated field names, checked.

    Raises:
        ValueError: naming the unknown field and listing the known ones.
    """
    known = ENDED_FIELDS if ended else task_fields()
    fields = [field.strip() for field in text.split(",") if field.strip()]
    for field in fields:
        if field not in known:
            raise ValueError(f"unknown field {field!r}; {'ps --ended' if ended else 'ps'} fields: {', '.join(known)}")
    if not fields:
        raise ValueError(f"no field given; fields: {', '.join(known)}")
    return fields


def lines(rows: Sequence[TaskRow] | Sequence[EndedRecord], fields: list[str], *, now: float, ended: bool,
          header: bool = True) -> list[str]:
    """``rows`` as aligned columns of ``fields`` (two spaces apart, the last unpadded), with a
    header line of the field names unless ``header`` is False (no line at all for no row and
    no header). A value is never cut: a column is as wide as its widest value."""
    cell = _ended_cell if ended else _task_cell
    table = [[cell(row, field, now) for field in fields] for row in view.printable(rows)]
    if header:
        table.insert(0, list(fields))
    widths = [max((len(cells[index]) for cells in table), default=0) for index in range(len(fields))]
    return ["  ".join(value.ljust(width) for value, width in zip(cells, widths)).rstrip() for cells in table]


def _one_line(value: object) -> str:
    """A cell on one line, ``-`` for nothing (a script splits on whitespace)."""
    text = " ".join(str(value).split()) if value not in (None, "") else ""
    return text or "-"


def _task_cell(row: TaskRow, field: str, now: float) -> str:
    cell = _amount_cell(row, field)
    if cell is not None:
        return cell
    if field == "age":
        started = row.started if row.state == "running" else row.queued_at
        return "-" if started is None else view.duration(now - started).replace(" ", "")
    if field == "gpus":
        return view.gpu_list(row.gpus).replace("—", "-")
    if field == "processes":
        return _one_line(row.processes_total)
    return _one_line(getattr(row, field))  # one of BEFORE_AMOUNTS and AFTER_AMOUNTS: a row's field


def _ended_cell(record: EndedRecord, field: str, now: float) -> str:
    if field == "ended":
        return view.duration(ended_ago(record, now)).replace(" ", "")
    if field == "exit":
        return exit_words(record.exit_status)
    if field in ("wall", "cpu"):
        seconds = record.wall_s if field == "wall" else record.cpu_s
        return "-" if seconds is None else format_timespan(seconds).replace(" ", "")
    if field == "peak":
        return view.amount("memory", record.memory_peak).replace("—", "-")
    if field == "why":
        return ended_why(record)
    if field == "reason":
        return _one_line(record.reason if record.reason in REASONS else None)
    return _one_line(getattr(record, field))  # id, name, group, user: a record's field
