"""``governor status`` views: pure functions from a status snapshot to rich renderables.

The daemon's ``status`` reply carries this object (amounts in base units: cores, bytes,
bytes/s; times in Unix seconds)::

    {"daemon": {"pid": int, "started": float, "cgroup_mode": "v2" | "v1", "cgroup_root": str,
                "config": str},
     "capacity": {res: amount}, "allocated": {res: amount}, "used": {res: amount},
     "filling": {"at": float | null, "trigger": str, "duration_ms": float},
     "groups": {name: {"weight": float, "demand": {res: amount}, "allocation": {res: amount},
                       "lambda": float, "dominant_resources": [res], "dominant_share": float,
                       "stop": str, "usage": {res: amount},
                       "tasks": [{"id": str, "pid": int, "uid": int, "user": str,
                                  "command": [str], "started": float,
                                  "demand": {res: amount}, "limits": {file: value},
                                  "usage": {res: amount}}]}}}

Resources are ``cpu`` (cores), ``memory`` (bytes) and ``io.<dev>.read``/``io.<dev>.write``
(bytes/s). Keys not listed here are ignored, so an older CLI can read a newer daemon's status.

Layout: a header (daemon, last filling), a capacity table (one row per resource), a groups
table (scalars), a demand/allocation/use table (one line per group and resource), then a compact
task list per group. Each table fits 80 columns; long task lines wrap.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from governor.units import format_number, format_size

# Commands longer than this are cut with an ellipsis; the full line is in `--json`.
_COMMAND_CHARS = 40


def status_renderables(status: dict, *, now: float) -> list[RenderableType]:
    """Renderables for a status snapshot, in print order.

    Args:
        status: the ``status`` object of the daemon's reply (schema in the module docstring).
        now: the current Unix time in seconds, for "3s ago" and uptime (passed in so tests
            own the clock).
    """
    groups = status.get("groups", {})
    resources = _resources(status)
    renderables: list[RenderableType] = [
        _header(status, now),
        capacity_table(status, resources),
        groups_table(groups),
        resources_table(groups, resources),
    ]
    renderables += [tasks_view(name, group) for name, group in groups.items() if group.get("tasks")]
    return renderables


def capacity_table(status: dict, resources: list[str]) -> Table:
    """One row per resource: capacity, allocated and measured use, with % of capacity."""
    table = Table(title="Capacity", title_justify="left")
    table.add_column("resource")
    for column in ("capacity", "allocated", "used"):
        table.add_column(column, justify="right")
    capacity = status.get("capacity", {})
    for resource in resources:
        total = capacity.get(resource)
        table.add_row(
            _label(resource),
            _amount(resource, total, unit=True),
            _of_capacity(resource, status.get("allocated", {}).get(resource), total),
            _of_capacity(resource, status.get("used", {}).get(resource), total),
        )
    return table


def groups_table(groups: Mapping[str, dict]) -> Table:
    """One row per group: weight, task count, λ (fraction of its demand granted), dominant
    resource(s) and share, and what stopped its filling."""
    table = Table(title="Groups", title_justify="left")
    table.add_column("group", overflow="fold")
    table.add_column("weight", justify="right")
    table.add_column("tasks", justify="right")
    table.add_column("λ", justify="right")
    table.add_column("dominant")
    table.add_column("share", justify="right")
    table.add_column("stopped by")
    for name, group in groups.items():
        table.add_row(
            name,
            _number(group.get("weight")),
            str(len(group.get("tasks", ()))),
            _number(group.get("lambda"), precision=2),
            ", ".join(_label(r) for r in group.get("dominant_resources", ())) or "—",
            _share(group.get("dominant_share")),
            str(group.get("stop", "")),
        )
    return table


def resources_table(groups: Mapping[str, dict], resources: list[str]) -> Table:
    """Per group, one line per resource it demands, is allocated or uses: demand, allocation,
    measured usage. Groups with none of these are left out."""
    table = Table(title="Demand, allocation and use", title_justify="left",
                  caption="cpu in cores")
    table.add_column("group", overflow="fold")
    table.add_column("resource")
    for column in ("demand", "allocation", "used"):
        table.add_column(column, justify="right")
    vectors = ("demand", "allocation", "usage")
    for name, group in groups.items():
        shown = [r for r in resources if any(group.get(v, {}).get(r) for v in vectors)]
        for i, resource in enumerate(shown):
            table.add_row(name if i == 0 else "", _label(resource),
                          *(_amount(resource, group.get(v, {}).get(resource)) for v in vectors),
                          end_section=i == len(shown) - 1)
    return table


def tasks_view(name: str, group: dict) -> RenderableType:
    """A group's tasks as a compact list: id, pid, user and command (cut to 40 characters) on
    one line, then demand, limits and usage on a line each, wrapped to the console width."""
    tasks = group.get("tasks", [])
    title = Text(f"{name}: {len(tasks)} task{'s' if len(tasks) != 1 else ''}", style="bold")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(overflow="fold")
    grid.add_column(style="dim")
    grid.add_column(overflow="fold")
    for task in tasks:
        user = task.get("user", task.get("uid", "?"))
        grid.add_row(str(task.get("id", "?")), "pid", f"{task.get('pid', '?')} · {user} · {_command(task.get('command', []))}")
        limits = task.get("limits", {})
        grid.add_row("", "demand", _vector(task.get("demand", {})))
        grid.add_row("", "limits", " · ".join(f"{f} {_limit(f, v)}" for f, v in limits.items()) or "—")
        grid.add_row("", "used", _vector(task.get("usage", {})))
    return Group(title, grid)


def _header(status: dict, now: float) -> Text:
    daemon = status.get("daemon", {})
    text = Text()
    text.append("governor", style="bold")
    text.append(f" pid {daemon.get('pid', '?')}")
    if daemon.get("started") is not None:
        text.append(f", up {_duration(now - daemon['started'])}")
    text.append(f"\ncgroup {daemon.get('cgroup_mode', '?')} at {daemon.get('cgroup_root', '?')}")
    if daemon.get("config"):
        text.append(f"\nconfig {daemon['config']}")
    filling = status.get("filling", {})
    if filling.get("at") is None:
        text.append("\nlast filling: never")
    else:
        text.append(f"\nlast filling {_duration(now - filling['at'])} ago ({filling.get('trigger', '?')}, "
                    f"{float(filling.get('duration_ms', 0)):.1f} ms)")
    return text


def _resources(status: dict) -> list[str]:
    """Resources in capacity order, then any others the snapshot mentions, first seen first."""
    seen = dict.fromkeys(status.get("capacity", {}))
    for group in status.get("groups", {}).values():
        for vector in ("demand", "allocation", "usage"):
            seen.update(dict.fromkeys(group.get(vector, {})))
    return list(seen)


def _label(resource: str) -> str:
    """``io.nvme0n1.read`` → ``nvme0n1 read`` (the /s on the amounts says it is I/O)."""
    if resource.startswith("io.") and resource.count(".") >= 2:
        device, direction = resource[3:].rsplit(".", 1)
        return f"{device} {direction}"
    return resource


def _amount(resource: str, value: object, *, unit: bool = False) -> str:
    """Cores as a plain number (``3.5 cores`` with ``unit``), bytes as ``4.0G``, I/O as ``2.0G/s``."""
    if value is None:
        return "—"
    if resource.startswith("io."):
        return f"{format_size(value)}/s"
    if resource.startswith("memory"):
        return format_size(value)
    return f"{_number(value, precision=2)} cores" if unit and resource == "cpu" else _number(value, precision=2)


def _of_capacity(resource: str, value: object, capacity: object) -> str:
    text = _amount(resource, value)
    if value is not None and capacity:
        text += f" ({float(value) / float(capacity):.0%})"
    return text


def _vector(vector: Mapping[str, object]) -> str:
    return " · ".join(f"{_label(r)} {_amount(r, v)}" for r, v in vector.items()) or "—"


def _limit(file: str, value: object) -> str:
    # Byte limits are unreadable as raw integers; other files (cpu.max, io.max) are shown as written.
    if file.startswith("memory.") and isinstance(value, int) and not isinstance(value, bool):
        return format_size(value)
    return str(value)


def _command(argv: list[str]) -> str:
    line = " ".join(argv)
    return line if len(line) <= _COMMAND_CHARS else line[: _COMMAND_CHARS - 1] + "…"


def _number(value: object, *, precision: int = 3) -> str:
    return "—" if value is None else format_number(value, precision=precision)


def _share(value: object) -> str:
    return "—" if value is None else f"{float(value):.1%}"


def _duration(seconds: float) -> str:
    """``42s``, ``5m``, ``2h 03m``, ``3d 4h``; a clock running backwards reads as ``0s``."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 3600:
        return f"{minutes}m"
    if seconds < 86400:
        return f"{hours}h {minutes % 60:02d}m"
    return f"{days}d {hours % 24}h"
