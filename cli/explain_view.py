"""``governor explain`` views: why each group's share stopped growing, then the host's filling
step by step. Pure: the daemon's ``explain`` object in, rich renderables out.

The object (amounts in base units: cores, bytes, bytes/s; shares are fractions of the host)::

    {"capacity": {res: amount},
     "groups": {name: {"weight": float, "demand": {res: amount}, "allocation": {res: amount},
                       "lambda": float, "dominant_resources": [res], "dominant_share": float,
                       "stop": "demand met" | "<res> saturated" | str,
                       "tasks": int, "sessions": [user],   # what it runs: launches, sessions
                       "stall": {res: {"some"|"full": {"avg10": %, "total": s}}},  # PSI, as status
                       "task_stalls": {task id: {…}}}},   # each task's, as the group's
     "psi": {"available": bool, "why": str | null},   # whether stalls are measured, why not
     "trace": [{"step": int, "event": "demand_met" | "saturated", "group": str | null,
                "resource": str | null, "frozen": [name], "dominant_shares": {name: share},
                "allocated": {res: amount}}],
     "queue": [{"task": str, "group": str, "user": str, "uid": int, "command": [str],
                "demand": {res: amount}, "queued_at": float, "position": int,
                "waiting_for": int, "held_by": [{"group": str, "memory": int}], "reason": str}],
     "configured": {name: weight},   # every group of the config, with or without a task
     "nodes": {name: {…}}, "parents": {name: parent},   # a group tree: internal groups, each group's parent
     "fairshare": {name: {"weight", "usage", "usage_share", "weight_share", "factor", "effective"}}}

``demand`` is a group's cap and ``allocation`` its guarantee. ``queue`` (the tasks waiting, in
admission order; ``reason`` is why, the one string every view shows: what it waits for, and
whose limit, reservation or headroom holds it) is as in ``governor status``
(``cli/status_view.py``); an older daemon leaves it out.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from governor.cli import stall_view
from governor.cli import view_common as view
from governor.cli.render import filling_table
from governor.cli.status_view import queue_table
from governor.cli.view_common import tree_order
from governor.core.model import TraceRow
from governor.wire.status_json import decode_part
from governor.wire.status_types import Psi, Status


def explain_renderables(explain: dict, group: str | None = None, *, now: float) -> list[RenderableType]:
    """Renderables in print order: the capacity, one reason per group, then per configured
    group with no task (only ``group`` if given; the caller has checked it is one or the
    other), how much each group with a task stalled (``physics: stalled 23 % on memory over
    the last 10 s``; on a host without PSI one line saying so), the tasks waiting and why (only ``group``'s, if given; nothing when none
    waits), then the trace table (every step, since the level one group stopped at depends on
    the others; with ``group``, only its share column).

    Args:
        now: the current Unix time in seconds, for how long queued tasks have waited (passed in
            so tests own the clock).
    """
    explain = view.printable(explain)
    shared = _shared_parts(explain)
    capacity = explain.get("capacity", {})
    groups = explain.get("groups", {})
    configured = explain.get("configured") or {}
    header = Text("Capacity: ", style="bold")
    header.append(" · ".join(f"{view.label(r)} {view.amount(r, v, unit=True)}" for r, v in capacity.items()) or "—")
    foreign = view.foreign_line(shared.foreign, shared.host_capacity)
    if foreign:
        header.append(f"\n{foreign}")
    nodes = explain.get("nodes") or {}
    parents = explain.get("parents") or {}
    if nodes:  # a group tree: each internal group above its children, the way H-DRF fills
        groups = {name: {**nodes[name], "internal": True} if name in nodes else groups[name]
                  for _, name in tree_order([*nodes, *groups], parents)}
    shown = [group] if group is not None else [*groups, *(g for g in configured if g not in groups)]
    idle = {name: _about(configured[name]) for name in shown if name not in groups and name in configured}
    depth = dict((name, level) for level, name in tree_order(list(shown), parents)) if parents else {}
    renderables: list[RenderableType] = [
        header, reasons({name: groups[name] for name in shown if name in groups}, idle, depth)]
    renderables += stalls_lines(explain, shared.psi, [name for name in shown if name in groups and name not in nodes],
                                tasks=group is not None)
    fair = {name: about for name, about in (explain.get("fairshare") or {}).items()
            if isinstance(about, dict) and (group is None or name == group)}
    if fair:
        renderables.append(fairshare_table(fair))
    queue = [entry for entry in shared.queue if group is None or entry.group == group]
    if queue:
        renderables.append(queue_table(queue, now))
    # With GROUP, its share column only: the steps (and the frozen column) still show when the
    # others stopped, which decides its level, without a column per group of a large host.
    columns = [name for name in shown if name in groups and name not in nodes]
    renderables.append(filling_table(
        title="DRF filling on this host, step by step", groups=columns, capacity=capacity,
        trace=trace_rows(explain, columns, list(capacity)),
        empty="no steps: no group has a running task"))
    return renderables


def _shared_parts(explain: dict) -> Status:
    """What explain says as status does (``queue``, ``psi``, ``foreign``, ``host_capacity``),
    decoded as status's parts.

    Raises:
        MalformedStatus: one of them is malformed (named ``explain.queue[0].task``…).
    """
    return decode_part(Status, {key: explain[key] for key in ("queue", "psi", "foreign", "host_capacity")
                                if explain.get(key) is not None}, "explain")


def stalls_lines(explain: dict, psi: Psi, names: list[str], *, tasks: bool = False) -> list[RenderableType]:
    """The physics of ``names`` (groups with a task): one line each, what they waited for
    (:func:`governor.cli.stall_view.physics`), with ``tasks`` one more per task of theirs
    (``  task 7: stalled 61 % on memory …``); where the host has no PSI, one line saying so;
    nothing from a daemon that does not say."""
    missing = stall_view.psi_missing(psi)
    if missing:
        return [Text(missing, style="dim")]
    if not stall_view.psi_available(psi) or not names:
        return []
    lines = []
    for name in names:
        lines.append(stall_view.physics(name, explain["groups"][name].get("stall") or {}))
        if tasks:
            lines += [stall_view.physics(f"  task {task}", stall)
                      for task, stall in (explain["groups"][name].get("task_stalls") or {}).items()]
    return [Text("\n".join(lines))]


def _about(configured: object) -> dict:
    """A ``configured`` entry: ``{"weight", "floor"}`` (a daemon before floors sent the weight alone)."""
    if isinstance(configured, dict):
        return configured
    return {"weight": configured, "floor": None}


def reasons(groups: dict[str, dict], idle: dict[str, dict] | None = None,
            depth: dict[str, int] | None = None) -> RenderableType:
    """One line per group: ``physics  weight 2  floor 40.0%  cpu 50.0%  stopped: cpu saturated,
    got 80% of its demand``; then one per group with no task (``idle``: name → ``weight`` and
    ``floor``), saying what DRF promises it once it runs one: its floor while every group is
    busy, all of what it asks while the others are idle. ``depth`` indents a group tree's
    groups by their level; an internal group (``"internal": True``) reads ``name/``."""
    idle = idle or {}
    depth = depth or {}

    def named(name: str) -> Text:
        internal = groups.get(name, {}).get("internal")
        return Text("  " * depth.get(name, 0) + name + ("/" if internal else ""))

    if not groups and not idle:
        return Text("No group has a running task: there is nothing to divide.")
    table = Table(title="Why each group's share stopped growing", title_justify="left")
    table.add_column("group", overflow="fold")
    table.add_column("weight", justify="right")
    table.add_column("floor", justify="right")
    table.add_column("dominant")
    table.add_column("share", justify="right")
    table.add_column("why it stopped", overflow="fold")
    for name, group in groups.items():
        what = "its child groups together" if group.get("internal") else runs(group)
        cell = named(name).append(f"\n{what}", style="dim") if what else named(name)
        view.row(table, cell, view.number(group.get("weight")), view.share(group.get("floor")),
                 ", ".join(view.label(r) for r in group.get("dominant_resources", ())) or "—",
                 view.share(group.get("dominant_share")), why(group))
    for name, about in idle.items():
        view.row(table, named(name).append("\nno task", style="dim"), view.number(about.get("weight")),
                 view.share(about.get("floor")), "—", view.share(0), idle_why(about.get("floor")))
    return table


def fairshare_table(fair: dict[str, dict]) -> RenderableType:
    """``[fairshare]``: each group's configured weight, its decayed past use (host-hours: one
    is the whole host for an hour, on its dominant resource) and the weight filling used."""
    table = Table(title="Fair share over time: past use lowers a group's weight", title_justify="left")
    table.add_column("group", overflow="fold")
    table.add_column("weight", justify="right")
    table.add_column("past use", justify="right")
    table.add_column("of its siblings'", justify="right")
    table.add_column("effective weight", justify="right")
    for name, about in fair.items():
        usage = about.get("usage")
        hours = f"{float(usage) / 3600:.2f} host-h" if isinstance(usage, (int, float)) else "—"
        view.row(table, name, view.number(about.get("weight")), hours, view.share(about.get("usage_share")),
                 view.number(about.get("effective")))
    return table


def idle_why(floor: float | None) -> str:
    """What a group with no task would get once it runs one: DRF's sharing incentive, its floor
    of its dominant resource while every group is busy, all it asks while the others are idle."""
    busy = f"at least {view.share(floor)} of its dominant resource while every group is busy, " if floor else ""
    return f"no task running: once it runs one, {busy}all it asks while the others are idle"


def runs(group: dict) -> str:
    """What a group runs: ``2 tasks, session of alice`` (empty from a daemon that does not say)."""
    if "tasks" not in group:
        return ""
    count = int(group.get("tasks", 0))
    parts = [f"{count} task{'s' if count != 1 else ''}"] if count or not group.get("sessions") else []
    parts += [f"session of {user}" for user in group.get("sessions", [])]
    return ", ".join(parts)


def why(group: dict) -> str:
    """The group's stop reason in words, with how much of its demand it got (λ)."""
    stop = str(group.get("stop", ""))
    if group.get("internal"):
        return f"{stop or 'unknown'}: the sum of its child groups'"
    granted = float(group.get("lambda", 0.0))
    if stop == "demand met":
        return "its demand was met: it got all it asked for"
    if stop.endswith(" saturated"):
        return f"{stop[: -len(' saturated')]} ran out (saturated): it got {granted:.0%} of its demand"
    return f"{stop or 'unknown'}: it got {granted:.0%} of its demand"


def trace_rows(explain: dict, groups: list[str], resources: list[str]) -> list[TraceRow]:
    """The JSON trace as :class:`TraceRow` for :func:`governor.cli.render.filling_table`; a share or
    amount a row leaves out is 0 (the group had not started growing, nothing was allocated)."""
    return [
        TraceRow(step=int(row.get("step", i + 1)), event=str(row.get("event", "")), group=row.get("group"),
                 resource=row.get("resource"), frozen=tuple(row.get("frozen", ())),
                 dominant_shares={g: row.get("dominant_shares", {}).get(g, 0.0) for g in groups},
                 allocated={r: row.get("allocated", {}).get(r, 0.0) for r in resources})
        for i, row in enumerate(explain.get("trace", []))
    ]
