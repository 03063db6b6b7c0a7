"""``governor explain`` views: why each group's share stopped growing, then the host's filling
step by step. Pure: the daemon's ``explain`` object in (read typed:
:mod:`governor.wire.explain_types`), rich renderables out.

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
from governor.wire.explain_types import Configured, Explain, ExplainGroup, Standing, decode_explain
from governor.wire.status_types import Psi


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

    Raises:
        MalformedStatus: a field of ``explain`` is not of its type (named ``explain.groups.A.weight``…).
    """
    explain = view.printable(decode_explain(explain))
    capacity, groups, configured = explain.capacity, dict(explain.groups), explain.configured
    header = Text("Capacity: ", style="bold")
    header.append(" · ".join(f"{view.label(r)} {view.amount(r, v, unit=True)}" for r, v in capacity.items()) or "—")
    foreign = view.foreign_line(explain.foreign, explain.host_capacity)
    if foreign:
        header.append(f"\n{foreign}")
    nodes, parents = explain.nodes, explain.parents
    if nodes:  # a group tree: each internal group above its children, the way H-DRF fills
        groups = {name: nodes[name] if name in nodes else groups[name] for _, name in tree_order([*nodes, *groups], parents)}
    shown = [group] if group is not None else [*groups, *(g for g in configured if g not in groups)]
    idle = {name: configured[name] for name in shown if name not in groups and name in configured}
    depth = dict((name, level) for level, name in tree_order(list(shown), parents)) if parents else {}
    if group is not None and group not in groups and group not in idle:  # known by its queued tasks alone
        why: RenderableType = Text(f"{group} runs no task yet: its tasks wait in the queue below.")
    else:
        why = reasons({name: groups[name] for name in shown if name in groups}, idle, depth, internal=frozenset(nodes))
    renderables: list[RenderableType] = [header, why]
    renderables += stalls_lines(explain, explain.psi, [name for name in shown if name in groups and name not in nodes],
                                tasks=group is not None)
    fair = {name: about for name, about in explain.fairshare.items() if group is None or name == group}
    if fair:
        renderables.append(fairshare_table(fair))
    queue = [entry for entry in explain.queue if group is None or entry.group == group]
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


def stalls_lines(explain: Explain, psi: Psi, names: list[str], *, tasks: bool = False) -> list[RenderableType]:
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
        lines.append(stall_view.physics(name, explain.groups[name].stall))
        if tasks:
            lines += [stall_view.physics(f"  task {task}", stall) for task, stall in explain.groups[name].task_stalls.items()]
    return [Text("\n".join(lines))]


def reasons(groups: dict[str, ExplainGroup], idle: dict[str, Configured] | None = None,
            depth: dict[str, int] | None = None, *, internal: frozenset[str] = frozenset()) -> RenderableType:
    """One line per group: ``physics  weight 2  floor 40.0%  cpu 50.0%  stopped: cpu saturated,
    got 80% of its demand``; then one per group with no task (``idle``: name → its ``weight``
    and ``floor``), saying what DRF promises it once it runs one: its floor while every group is
    busy, all of what it asks while the others are idle. ``depth`` indents a group tree's
    groups by their level; an ``internal`` group (a tree's node) reads ``name/``."""
    idle = idle or {}
    depth = depth or {}

    def named(name: str) -> Text:
        return Text("  " * depth.get(name, 0) + name + ("/" if name in internal else ""))

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
        what = "its child groups together" if name in internal else runs(group)
        cell = named(name).append(f"\n{what}", style="dim") if what else named(name)
        view.row(table, cell, view.number(group.weight), view.share(group.floor),
                 ", ".join(view.label(r) for r in group.dominant_resources) or "—",
                 view.share(group.dominant_share), why(group, internal=name in internal))
    for name, about in idle.items():
        view.row(table, named(name).append("\nno task", style="dim"), view.number(about.weight),
                 view.share(about.floor), "—", view.share(0), idle_why(about.floor))
    return table


def fairshare_table(fair: dict[str, Standing]) -> RenderableType:
    """``[fairshare]``: each group's configured weight, its decayed past use (host-hours: one
    is the whole host for an hour, on its dominant resource) and the weight filling used."""
    table = Table(title="Fair share over time: past use lowers a group's weight", title_justify="left")
    table.add_column("group", overflow="fold")
    table.add_column("weight", justify="right")
    table.add_column("past use", justify="right")
    table.add_column("of its siblings'", justify="right")
    table.add_column("effective weight", justify="right")
    for name, about in fair.items():
        hours = "—" if about.usage is None else f"{about.usage / 3600:.2f} host-h"
        view.row(table, name, view.number(about.weight), hours, view.share(about.usage_share), view.number(about.effective))
    return table


def idle_why(floor: float | None) -> str:
    """What a group with no task would get once it runs one: DRF's sharing incentive, its floor
    of its dominant resource while every group is busy, all it asks while the others are idle."""
    busy = f"at least {view.share(floor)} of its dominant resource while every group is busy, " if floor else ""
    return f"no task running: once it runs one, {busy}all it asks while the others are idle"


def runs(group: ExplainGroup) -> str:
    """What a group runs: ``2 tasks, session of alice`` (empty from a daemon that does not say)."""
    if group.tasks is None:
        return ""
    count = group.tasks
    parts = [f"{count} task{'s' if count != 1 else ''}"] if count or not group.sessions else []
    parts += [f"session of {user}" for user in group.sessions]
    return ", ".join(parts)


def why(group: ExplainGroup, *, internal: bool = False) -> str:
    """The group's stop reason in words, with how much of its demand it got (λ); an
    ``internal`` group's (a tree's node) is its child groups' sum."""
    stop = group.stop
    if internal:
        return f"{stop or 'unknown'}: the sum of its child groups'"
    if stop == "demand met":
        return "its demand was met: it got all it asked for"
    got = view.share(group.lambda_, digits=0)
    if stop.endswith(" saturated"):
        return f"{stop[: -len(' saturated')]} ran out (saturated): it got {got} of its demand"
    return f"{stop or 'unknown'}: it got {got} of its demand"


def trace_rows(explain: Explain, groups: list[str], resources: list[str]) -> list[TraceRow]:
    """The trace as :class:`TraceRow` for :func:`governor.cli.render.filling_table`; a share or
    amount a row leaves out is 0 (the group had not started growing, nothing was allocated)."""
    return [
        TraceRow(step=i + 1 if row.step is None else row.step, event=row.event, group=row.group,
                 resource=row.resource, frozen=row.frozen,
                 dominant_shares={g: row.dominant_shares.get(g, 0.0) for g in groups},
                 allocated={r: row.allocated.get(r, 0.0) for r in resources})
        for i, row in enumerate(explain.trace)
    ]
