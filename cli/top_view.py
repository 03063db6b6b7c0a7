"""``governor top``'s screen as a pure function: (state, width, height, now) → one renderable.

Top to bottom: a title bar; a banner while the daemon cannot be reached; one line per governed
resource (capacity, guaranteed or, for memory, reserved, used, as a bar; GPUs: reserved only),
then, with GPUs governed, a line naming the task that holds each GPU; the fair level and the
last filling; the groups table (one row per group of the host, idle ones too, selected row
reversed: guarantee/use of cpu and I/O, reserved/use of memory, and what it borrows above its
guarantee); the tasks of each expanded group; the queue with each task's reason (only while a task
waits); recent events; a key bar. Each element is one line per row and never wraps, so the
screen's height is planned here: groups first (scrolled to keep the selection visible), then
tasks, then the queue (its first line is always kept), then events. Columns that do not fit the
width are dropped, least useful first (see ``_KEEP``).

Amounts: cpu in cores, memory in K/M/G/T (powers of 1024), I/O in bytes/s with the same
suffixes. Shares are fractions of the host. The status schema is in ``cli/status_view.py``;
``top`` also reads ``events`` and ``fair_level`` (see ``cli/top_state.py``).
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from governor.core import vocabulary
from governor.cli import stall_view
from governor.cli import view_common as view
from governor.cli.top_state import TopState, depth_of, is_internal, selected_group, visible_groups
from governor.config.resources import compressible, find, measured
from governor.wire.limit_files import memory_cap
from governor.wire.status_types import Gpu, Group as StatusGroup, QueueItem, Status

_EIGHTHS = " ▏▎▍▌▋▊▉█"
_EVENT_STYLES = {"task_started": "green", "task_ended": "blue", "refill": "cyan", "reload": "magenta",
                 "weight": "magenta", "error": "bold red"}
# How long a column holds on as the width shrinks: the lowest goes first. Name, share and the
# cpu/memory split are what top is for; what a group borrows is use minus guarantee, both on the
# row already, so it goes early; the fair target, also drawn by the share bar, goes before it.
# The GPUs a group holds (scarce, whole devices) outlast the task count.
_KEEP = {"group": 100, "share": 95, "cpu": 90, "memory": 85, "stall": 75, "pressure": 70, "gpu": 65, "tasks": 60, "w": 55,
         "dominant": 50, "io": 40, "borrow": 25, "fair": 20}
_SORT_COLUMN = {"share": "share", "cpu": "cpu", "memory": "memory", "tasks": "tasks", "name": "group"}
_MAX_EVENTS = 8
_MAX_QUEUE_LINES = 3
HELP = [("q", "quit"), ("↑ ↓  j k", "move the selection"),
        ("enter", "show or hide the group's tasks (its child groups, in a tree)"),
        ("s", "next sort column (share, cpu, memory, tasks, name)"),
        ("/", "filter groups by name: type, enter applies, esc clears"), ("?", "this help")]
COLUMNS_HELP = [
    ("w", "weight: weighted DRF gives share in proportion to it"),
    ("dom", "dominant resource: what the group needs most of, relative to the host"),
    ("share", "dominant share of the host; the bar is full at the group's fair level × weight"),
    ("fair", "fair level × weight: the share the group's bar is measured against"),
    ("cpu g/u", "guaranteed / used last second (cores; I/O in bytes/s)"),
    ("memory r/u", "reserved (declared by admitted tasks; a session: its use) / used"),
    ("gpu r", "GPUs the group's tasks hold (whole devices); the gpus line names each one's task"),
    ("borrow", "use above the guarantee, from capacity others leave idle (+0.4c)"),
    ("pressure", "thr: periods throttled in the last second; soft: times held at a soft memory cap; "
                 "oom: OOM kills"),
    ("stall", "the resource the group's tasks waited for most: share of the last 10 s some task stalled (PSI)"),
    ("queue", "tasks waiting, in order, for their declared memory to fit"),
]


def top_view(state: TopState, *, width: int, height: int, now: float, keys: bool = True) -> RenderableType:
    """The whole screen for ``state`` at ``width`` × ``height`` cells, times relative to ``now``;
    without ``keys``, no footer of keys (``top -b``'s snapshots)."""
    status = state.status or Status()  # made printable as it came (TopState)
    top: list[RenderableType] = [_title(state, status, width)]
    if state.down is not None:
        stale = f" (data {view.duration(now - state.received)} old)" if state.received else ""
        top.append(_line(f"daemon not reachable — reconnecting…{stale}: {state.down}", "bold white on red"))
    if state.status is None:
        top.append(_line("waiting for the first update from the daemon…", "dim"))
    else:
        top += [_resource_line(status, r, width) for r in status.capacity]
        foreign = view.foreign_line(status.foreign, status.host_capacity)
        if foreign:
            top.append(_line(foreign, "dim"))
        if status.gpus:
            top.append(_gpus_line(status.gpus, width))
        top.append(_line(f"fair level {view.share(status.fair_level)} per unit of weight · "
                         f"{view.filling(status, now)}"))
        missing = stall_view.psi_missing(status.psi)
        if missing:  # said once here, not as a column of zeros
            top.append(_line(missing, "dim"))
    footer = _footer(state)
    room = max(0, height - len(top) - 1)
    body = _help(room, width) if state.help else _body(state, status, width, room, now)
    return Group(*top, *body, *([footer] if keys else []))


def _body(state: TopState, status: Status, width: int, room: int, now: float) -> list[RenderableType]:
    """Groups, expanded tasks, the queue and events in ``room`` lines: groups first, then tasks,
    then the queue (at least its first line), then events."""
    groups = status.groups
    names = visible_groups(state)
    events = status.events[-_MAX_EVENTS:]
    queue = status.queue
    events_min = 1 + min(2, len(events)) if events else 0
    reserved = events_min + (1 if queue else 0)
    if not names:
        why = f"no group matches {state.filter!r}" if groups and state.filter else "no group is configured"
        body: list[RenderableType] = [_line(why, "dim")] if state.status is not None else []
        left = room - len(body)
    else:
        rows = max(1, min(len(names), room - 1 - reserved))
        selected = selected_group(state)
        first = max(0, names.index(selected) - rows + 1)
        body = [_groups_table(state, status, names[first:first + rows], selected, width)]
        left = room - 1 - rows
        for name in names[first:first + rows]:
            if name in state.expanded and left - reserved >= 3:
                shown = min(len(groups[name].tasks), left - reserved - 2)
                body += _tasks(name, groups[name], shown, width, now)
                left -= 2 + shown
    if queue and left >= 1:
        lines = _queue(queue, width, now)[:max(1, min(_MAX_QUEUE_LINES, left - events_min))]
        body += lines
        left -= len(lines)
    if events and left >= 2:
        body.append(_line("recent events", "bold"))
        for event in events[-(left - 1):]:
            text = Text(f"{view.duration(now - (now if event.at is None else event.at)):>4} ago ", style="dim")
            kind = view.said(event.kind)
            text.append(f"{kind:<12} ", style=_EVENT_STYLES.get(kind, ""))
            text.append(event.message)
            body.append(_fit(text))
    return body


def _queue(queue: tuple[QueueItem, ...], width: int, now: float) -> list[Text]:
    """``queue: 2 waiting · #1 task t10 (ops, bob) 40G waits 42s: memory: waits for 4.0G to
    free (held by physics 16.0G)``, then one line per further task, indented under the first:
    the daemon's one reason (:func:`governor.cli.view_common.reason`). A line too wide for
    ``width`` drops the word "task", then is cut."""
    head = f"queue: {len(queue)} waiting · "
    lines = []
    for i, entry in enumerate(queue):
        lead = head if i == 0 else " " * len("queue: ")
        queued_at = entry.queued_at
        waited = f" {view.duration(now - float(queued_at))}" if queued_at is not None else ""
        candidates = [
            f"#{entry.position or i + 1} {task}{entry.task} ({view.said(entry.group)}, {entry.who}) "
            f"{view.short('memory', entry.demand.get('memory'))} waits{waited}: {view.reason(entry.reason)}"
            for task in ("task ", "")]
        words = next((c for c in candidates if cell_len(lead + c) <= width), candidates[-1])
        text = Text(lead, style="bold yellow" if i == 0 else "")
        text.append(words)
        lines.append(_fit(text))
    return lines


def _groups_table(state: TopState, status: Status, names: list[str], selected: str | None, width: int) -> Table:
    """One row per group in ``names``, with the columns that fit ``width``."""
    groups, resources = status.groups, list(status.capacity)
    fair_level = float(status.fair_level)
    bar_width = 10 if width >= 100 else 6
    columns: list[tuple[str, str, str, list]] = [  # (key, header, justify, cells)
        ("group", "group", "left", [(">" if n == selected else " ") + "  " * depth_of(state, n) + _marker(state, n) + n
                                    for n in names]),
        ("w", "w", "right", [view.number(groups[n].weight) for n in names]),
        ("tasks", "tasks", "right", [str(len(groups[n].tasks)) for n in names]),
        ("dominant", "dom", "left",
         [",".join(view.label(r) for r in groups[n].dominant_resources) or "—" for n in names]),
        ("share", "share", "left", [_share_cell(groups[n], fair_level, bar_width) for n in names]),
        ("fair", "fair", "right", [view.share(fair_level * float(groups[n].weight)) for n in names]),
    ]
    for resource in resources:
        if not measured(resource):  # a device: held whole until the task ends, no use measured
            columns.append(("gpu", f"{resource} r", "right", [
                view.short(resource, groups[n].reserved.get(resource)) for n in names]))
            continue
        key = resource if resource in ("cpu", "memory") else "io"
        held, letter = ("guarantee", "g") if compressible(resource) else ("reserved", "r")
        columns.append((key, f"{_short_label(resource)} {letter}/u", "right", [
            f"{view.short(resource, getattr(groups[n], held).get(resource))}/"
            f"{view.short(resource, groups[n].usage.get(resource))}" for n in names]))
    columns.append(("borrow", "borrow", "left", [_borrowed(groups[n].borrowed) for n in names]))
    columns.append(("pressure", "pressure", "left", [_pressure(groups[n].pressure) for n in names]))
    if stall_view.psi_available(status.psi):
        columns.append(("stall", "stall", "left", [stall_view.worst_cell(groups[n].stall) for n in names]))

    sorted_key = _SORT_COLUMN[state.sort]
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, header_style="bold reverse",
                  collapse_padding=True)
    kept = _fit_columns(columns, width, sorted_key)
    for key, header, justify, cells in kept:
        if key == sorted_key:
            header += " ▲" if key == "group" else " ▼"
        table.add_column(header, justify=justify, no_wrap=True, overflow="ellipsis",
                         min_width=cell_len(header) if key != "group" else None)
    for i, name in enumerate(names):
        view.row(table, *(cells[i] for _, _, _, cells in kept), style="reverse" if name == selected else None)
    return table


def _marker(state: TopState, name: str) -> str:
    """``▾``/``▸``: a group's tasks shown or not; for a group with child groups, ``-``/``+``:
    them shown or folded (Enter toggles either)."""
    if is_internal(state, name):
        return "+ " if name in state.folded else "- "
    return "▾ " if name in state.expanded else "▸ "


def _fit_columns(columns: list, width: int, sorted_key: str) -> list:
    """The columns that fit ``width`` (one space between, two more cells for the sort arrow),
    most useful first (``_KEEP``; all I/O columns go together), in their original order."""
    def needed(key):
        return sum(max(cell_len(h) + 2 * (k == sorted_key), *(cell_len(str(c)) for c in cells)) + 1
                   for k, h, _, cells in columns if k == key)
    kept, used = set(), -1
    for key in sorted({c[0] for c in columns}, key=lambda k: -_KEEP[k]):
        if used + needed(key) <= width or key == "group":
            kept.add(key)
            used += needed(key)
    return [c for c in columns if c[0] in kept]


def _tasks(name: str, group: StatusGroup, shown: int, width: int, now: float) -> list[RenderableType]:
    """A title line and a table of the first ``shown`` tasks: pid, user, age, the GPUs it holds
    (only when one of them holds any), command, cap (its declaration; ``soft`` when its memory
    cap is a soft one), its part of the group's
    guarantee (λ × its cpu and I/O), the memory (and GPUs) it reserves and its measured use
    (:mod:`governor.core.vocabulary`)."""
    tasks = group.tasks
    more = f" (showing {shown})" if shown < len(tasks) else ""
    stalled = f" · stalled {stall_view.stall_words(group.stall)}" if group.stall else ""
    title = _line(f"  ▾ {name}: {len(tasks)} task{'s' if len(tasks) != 1 else ''}{more}{stalled}", "bold")
    granted = float(group.lambda_)
    rows = []
    gpus = any(task.gpus for task in tasks[:shown])
    stalls = any(task.stall for task in tasks[:shown])
    for task in tasks[:shown]:
        demand = {r: float(v) for r, v in task.demand.items()}
        rows.append([f"  {view.task_pid(task)}", str(task.who),
                     view.duration(now - (now if task.started is None else task.started)),
                     *([view.gpu_list(task.gpus)] if gpus else []), task, _cap(demand, task.limits),
                     _compact(vocabulary.task_guarantee(demand, granted)),
                     _compact(task.reserved),  # the daemon's figure: a user's two places once
                     _compact(task.usage), *([stall_view.worst_cell(task.stall).plain] if stalls else [])])
    headers = ("  pid", "user", "age", *(("gpus",) if gpus else ()), "command", "cap", "guarantee", "reserved",
               "use", *(("stall",) if stalls else ()))
    others = sum(max([len(h), *(len(r[i]) for r in rows)]) + 1 for i, h in enumerate(headers) if h != "command")
    # The command is cut to what the other columns leave (the full line is in `status --json`).
    chars = max(len("command"), width - others - 1)
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, header_style="bold",
                  collapse_padding=True)
    for header in headers:
        table.add_column(header, justify="right" if header in ("  pid", "age") else "left", no_wrap=True,
                         overflow="ellipsis")
    at = headers.index("command")
    for cells in rows:
        view.row(table, *cells[:at], view.task_command(cells[at], chars), *cells[at + 1:])
    return [title, table]


def _title(state: TopState, status: Status, width: int) -> Text:
    groups = status.groups
    daemon = status.daemon
    parts = ["governor top", f"sort: {state.sort}"]
    if state.filter:
        parts.append(f"filter: {state.filter}")
    if state.status is not None:
        tasks = sum(len(g.tasks) for g in groups.values())
        parts += [f"{len(groups)} group{'s' if len(groups) != 1 else ''}, {tasks} task{'s' if tasks != 1 else ''}",
                  f"daemon {view.said(daemon.pid)} (cgroup {view.said(daemon.cgroup_mode)})"]
    return _line(" · ".join(parts).ljust(width), "bold reverse")


def _resource_line(status: Status, resource: str, width: int) -> Text:
    """``cpu      ███▒▒···  guaranteed 1.75 · used 1.70 of 1.75 cores`` (memory: ``reserved``):
    █ used, ▒ guaranteed (reserved) and not used, · free."""
    capacity = float(status.capacity.get(resource, 0.0))
    word, held = ("guaranteed", status.guaranteed) if compressible(resource) else ("reserved", status.reserved)
    allocated = float(held.get(resource, 0.0))
    used = float(status.used.get(resource, 0.0))
    words = (f" {word} {view.amount(resource, allocated)} · used {view.amount(resource, used)} "
             f"of {view.amount(resource, capacity, unit=True)}")
    if not measured(resource):  # a device: held whole until the task ends, no use measured
        words = f" {word} {view.amount(resource, allocated)} of {find(resource).said(capacity)}"
    bar_width = max(8, min(40, width - 10 - len(words)))
    used_cells = round(view.fraction(used, capacity) * bar_width)
    alloc_cells = max(0, round(view.fraction(allocated, capacity) * bar_width) - used_cells)
    text = Text(f"{view.label(resource)[:9]:<10}")
    text.append("█" * used_cells, style="green")
    text.append("▒" * alloc_cells, style="yellow")
    text.append("·" * (bar_width - used_cells - alloc_cells), style="dim")
    text.append(words)
    return _fit(text)


def _gpus_line(gpus: tuple[Gpu, ...], width: int) -> Text:
    """``gpus      0,1 physics/t7 alice · 3 ops/t8 bob · 2 free``: each holder's GPUs (in the
    order of its first), then the free ones. Too wide for ``width``, the users go, then the
    line is cut."""
    held: dict[str, list[int]] = {}
    for gpu in gpus:
        held.setdefault("" if gpu.task is None else gpu.task, []).append(gpu.index)
    by_task = {g.task: g for g in gpus if g.task is not None}
    candidates = []
    for users in (True, False):
        parts = [f"{view.gpu_list(indices)} {view.gpu_holder(by_task[task], user=users)}"
                 for task, indices in held.items() if task]
        if "" in held:
            parts.append(f"{view.gpu_list(held[''])} free")
        candidates.append(" · ".join(parts))
    words = next((c for c in candidates if 10 + cell_len(c) <= width), candidates[-1])
    text = Text(f"{'gpus':<10}")
    text.append(words)
    return _fit(text)


def _short_label(resource: str) -> str:
    """``io.nvme0n1.read`` → ``nvme0n1 r``: I/O column headers are the widest, and r/w is clear."""
    name = view.label(resource)
    return name[:-len(" read")] + " r" if name.endswith(" read") else (
        name[:-len(" write")] + " w" if name.endswith(" write") else name)


def _share_cell(group: StatusGroup, fair_level: float, bar_width: int) -> Text:
    """The dominant share as a bar that is full at the group's fair level × weight, then the share."""
    share = float(group.dominant_share)
    target = fair_level * float(group.weight)
    eighths = round(view.fraction(share, target) * bar_width * 8)
    bar = "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")
    text = Text(bar.ljust(bar_width, "·"), style="cyan")
    text.append(f" {share:.1%}" if abs(share) < 1e6 else f" {share:.3g}", style="")  # a hostile 1e308: no 300 digits
    return text


def _pressure(pressure: dict) -> Text:
    """``thr 12 soft 3 oom 1`` for the signs that are non-zero, ``·`` when none is (soft: the
    kernel's memory.high events, times held at a soft memory cap)."""
    text = Text()
    for key, short, style in (("cpu.nr_throttled", "thr", "yellow"), ("memory.high", "soft", "yellow"),
                              ("memory.oom_kill", "oom", "bold red")):
        if pressure.get(key):
            text.append(f"{' ' if text else ''}{short} {int(pressure[key])}", style=style)
    return text if text else Text("·", style="dim")


def _cap(demand: dict, limits: dict) -> str:
    """A task's declaration, ``1c 512M``, and ``1c 512M soft`` where its memory is held only at
    a soft cap (it may run past it: ``[enforcement] memory = "soft"``)."""
    cap = memory_cap(limits)
    return _compact(demand) + (" soft" if cap is not None and cap[0] == "soft" else "")


def _compact(vector: dict) -> str:
    """A task's vector in one short cell: ``1c 512M r8.0M w2.0M 2gpu`` (cores, bytes, bytes/s,
    GPUs)."""
    return " ".join(_compact_parts(vector)) or "—"


def _compact_parts(vector: dict) -> list[str]:
    parts = []
    for resource, value in vector.items():
        if resource == "cpu" or not measured(resource):  # 1.5c; a device: 2gpu
            parts.append(f"{view.number(value, precision=2)}{'c' if resource == 'cpu' else resource}")
        elif resource.startswith("io."):
            parts.append(f"{resource.rsplit('.', 1)[-1][0]}{view.short(resource, value)}")
        else:
            parts.append(view.short(resource, value))
    return parts


def _borrowed(borrowed: dict) -> Text:
    """What a group uses above its guarantee: ``+0.4c``, ``+0.4c +r15M`` (cores, bytes/s), ``·``
    when it borrows nothing."""
    parts = _compact_parts({r: v for r, v in borrowed.items() if v})
    return Text(" ".join(f"+{part}" for part in parts), style="green") if parts else Text("·", style="dim")


def _footer(state: TopState) -> Text:
    if state.editing is not None:
        return _line(f" filter: {state.editing}▏  enter apply · esc clear", "bold reverse")
    return _line(f" q quit  ↑↓/jk select  enter expand  s sort: {state.sort}  / filter  ? help", "reverse")


def _help(room: int, width: int) -> list[RenderableType]:
    rows = [("keys", ""), *HELP, ("", ""), ("columns", ""), *COLUMNS_HELP][:room]
    keys = max((cell_len(key) for key, _ in rows), default=0)
    grid = Table.grid(padding=(0, 2))
    # The keys are never cut; the explanations are, with an ellipsis at the screen's edge.
    grid.add_column(style="bold", no_wrap=True, min_width=keys)
    grid.add_column(overflow="ellipsis", no_wrap=True, max_width=max(1, width - keys - 2))
    for key, what in rows:
        view.row(grid, key, what)
    return [grid]


def _line(text: str, style: str = "") -> Text:
    return _fit(Text(text, style=style))


def _fit(text: Text) -> Text:
    text.no_wrap, text.overflow = True, "ellipsis"
    return text
