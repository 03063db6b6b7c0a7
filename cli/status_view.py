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

from cli import view_common as view


def status_renderables(status: dict, *, now: float) -> list[RenderableType]:
    """Renderables for a status snapshot, in print order.

    Args:
        status: the ``status`` object of the daemon's reply (schema in the module docstring).
        now: the current Unix time in seconds, for "3s ago" and uptime (passed in so tests
            own the clock).
    """
    groups = status.get("groups", {})
    resources = view.resources(status)
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
            view.label(resource),
            view.amount(resource, total, unit=True),
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
            view.number(group.get("weight")),
            str(len(group.get("tasks", ()))),
            view.number(group.get("lambda"), precision=2),
            ", ".join(view.label(r) for r in group.get("dominant_resources", ())) or "—",
            view.share(group.get("dominant_share")),
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
            table.add_row(name if i == 0 else "", view.label(resource),
                          *(view.amount(resource, group.get(v, {}).get(resource)) for v in vectors),
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
        grid.add_row(str(task.get("id", "?")), "pid", f"{task.get('pid', '?')} · {user} · {view.command(task.get('command', []))}")
        limits = task.get("limits", {})
        grid.add_row("", "demand", view.vector(task.get("demand", {})))
        grid.add_row("", "limits", " · ".join(f"{f} {view.limit(f, v)}" for f, v in limits.items()) or "—")
        grid.add_row("", "used", view.vector(task.get("usage", {})))
    return Group(title, grid)


def _header(status: dict, now: float) -> Text:
    daemon = status.get("daemon", {})
    text = Text()
    text.append("governor", style="bold")
    text.append(f" pid {daemon.get('pid', '?')}")
    if daemon.get("started") is not None:
        text.append(f", up {view.duration(now - daemon['started'])}")
    text.append(f"\ncgroup {daemon.get('cgroup_mode', '?')} at {daemon.get('cgroup_root', '?')}")
    if daemon.get("config"):
        text.append(f"\nconfig {daemon['config']}")
    text.append(f"\n{view.filling(status, now)}")
    return text


def _of_capacity(resource: str, value: object, capacity: object) -> str:
    text = view.amount(resource, value)
    if value is not None and capacity:
        text += f" ({float(value) / float(capacity):.0%})"
    return text
