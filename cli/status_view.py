"""``governor status`` views: pure functions from a status snapshot to rich renderables.

The words are DESIGN.md §1's, one number each (:mod:`governor.core.vocabulary`): a group's
**floor** is ``w / Σ w``, what DRF promises it while every group is busy; its **guarantee** is
its DRF allocation of cpu and I/O (work-conserving weights); it **reserves** the declared
memory of its admitted tasks (a session: what it uses); its **cap** is the sum of its tasks'
declarations; **use** is measured; what it uses above its guarantee is **borrowed**. Memory is
admitted through a queue: a task whose declared memory does not fit yet waits, in order.

The daemon's ``status`` reply carries this object (amounts in base units: cores, bytes,
bytes/s; times in Unix seconds)::

    {"daemon": {"pid": int, "started": float, "cgroup_mode": "v2" | "v1", "cgroup_root": str,
                "config": str,
                "io_sharing": {device: "io.weight" | "io.bfq.weight" | "io.max"},
                "cpu_saturated": bool},          # every group uses its CPU guarantee
     "capacity": {res: amount}, "guaranteed": {res: amount}, "reserved": {res: amount},
     "host_capacity": {res: amount},             # before the foreign tenants' holdings
     "foreign": {name: {"path": str, "manager": "slurm" | "kubernetes" | "nomad" | "machines" | "config",
                        "held": {res: amount}, "basis": "allocated" | "used"}},
     "used": {res: amount},
     "filling": {"at": float | null, "trigger": str, "duration_ms": float},
     "groups": {name: {"weight": float, "floor": float, "members": [str], "idle": bool,
                       "demand": {res: amount},       # cap: sum of its running tasks' declarations
                       "allocation": {res: amount},   # DRF's answer
                       "guarantee": {res: amount},    # cpu and I/O: its allocation, by weights
                       "reserved": {res: amount},     # memory: what its admitted tasks hold
                       "usage": {res: amount},        # use, measured
                       "borrowed": {res: amount},     # use above the guarantee (never memory)
                       "lambda": float, "dominant_resources": [res], "dominant_share": float,
                       "stop": str,
                       "tasks": [{"id": str, "session": bool,  # a user's session
                                  "pid": int, "uid": int, "user": str,
                                  "command": [str], "started": float,
                                  "demand": {res: amount}, "limits": {file: value},
                                  "reserved": {res: amount},  # its part of the group's
                                  "usage": {res: amount},
                                  "stall": {…},       # as the group's
                                  "gpus": [int]}]}},    # the GPUs it holds, by index
                       # "stall": {"cpu"|"memory"|"io": {"some"|"full": {"avg10": %, "total": s}}}
                       # (PSI: the share of the last 10 s its tasks waited; empty without PSI)
     "queue": [{"task": str, "group": str, "user": str, "uid": int, "command": [str],
                "demand": {res: amount}, "queued_at": float, "position": int,
                "waiting_for": int,                   # bytes of memory that must free first
                "held_by": [{"group": str, "memory": int}],     # largest first, at most 3
                "reason": str}],                      # why it waits: the one string every view shows
     # daemon.gpu_guard (GPUs governed only): {"kind": "sessions" | "host" | "tasks",
     #     "guarded": [cgroup dir], "notes": [str]}: where GPU nodes are denied outside tasks
     "gpus": [{"index": int, "node": str, "uuid": str | null, "name": str,
               "task": str | null, "group": str | null, "user": str | null,
               "draining": bool}],  # GPUs governed only; draining: its task ended, a process
                                    # may still hold its node, it goes to no one until none does
     "devices": {entry: [{"index": int, "node": str, "task": str | null, "group": str | null,
                          "user": str | null, "draining": bool}]},  # another device class governed only
     "psi": {"available": bool, "why": str | null}}  # whether stalls are measured, and why not

``guaranteed`` and ``reserved`` are the sums of the groups'. Every group of the host is listed,
``idle`` (no task) or not. ``io_sharing`` says how each governed block
device's guarantee is enforced: ``io.weight``/``io.bfq.weight`` are proportional (work-
conserving); ``io.max`` is the fallback for a device without a proportional controller, where
guarantees are hard limits. ``cpu_saturated``: every group uses (nearly) all of its CPU
guarantee, so nobody has any to lend and each group is held to its own (``cpu.max``) until one
uses less. ``queue`` is in admission order (``position`` 1 is next).

Resources are ``cpu`` (cores), ``memory`` (bytes), ``io.<dev>.read``/``io.<dev>.write``
(bytes/s) and ``gpu`` (whole devices, reserved like memory). Keys not listed here are ignored,
so an older CLI can read a newer daemon's status; ``borrowed``, ``queue``, ``io_sharing`` and
``gpus`` may be missing (an older daemon, or no GPU governed) and read as empty.

Layout: a header (daemon, I/O sharing per device, last filling), a capacity table (one row per
resource), a groups table (scalars), a cap/guarantee/use/borrowed table (one line per group and
resource), the GPUs and who holds each (only when GPUs are governed), the memory queue (only
when a task waits), then a compact task list per group. Each table fits 80 columns; long task
lines wrap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from governor.cli import stall_view
from governor.cli import view_common as view
from governor.config import resources
from governor.wire.status_types import (Device, ForeignTenant, Gpu, GpuGuard, Group as StatusGroup, QueueItem,
                                         Status)


def status_renderables(status: Status, *, now: float) -> list[RenderableType]:
    """Renderables for a status snapshot, in print order.

    Args:
        status: the daemon's status (schema in the module docstring), decoded
            (:func:`governor.wire.status_json.decode`).
        now: the current Unix time in seconds, for "3s ago" and uptime (passed in so tests
            own the clock).
    """
    status = view.printable(status)
    groups = status.groups
    resources = status.resources()
    renderables: list[RenderableType] = [
        _header(status, now),
        capacity_table(status, resources),
        *([foreign_table(status.foreign, status.host_capacity)] if status.foreign else []),
        groups_table(groups),
        resources_table(groups, resources),
    ]
    if status.gpus:
        renderables.append(gpus_table(status.gpus, status.daemon.gpu_guard))
    renderables += [devices_table(entry, devices) for entry, devices in (status.devices or {}).items()]
    if status.queue:
        renderables.append(queue_table(status.queue, now))
    renderables += [tasks_view(name, group) for name, group in groups.items() if group.tasks]
    return renderables


def capacity_table(status: Status, resources: list[str]) -> Table:
    """One row per resource: capacity, guaranteed (the groups' guarantees of cpu and I/O),
    reserved (the memory admitted tasks hold) and measured use, with % of capacity; a count
    (pids) its root's cap as capacity, neither guaranteed nor reserved."""
    table = Table(title="Capacity", title_justify="left")
    table.add_column("resource")
    for column in ("capacity", "guaranteed", "reserved", "used"):
        table.add_column(column, justify="right", no_wrap=True)
    capacity = {**status.capacity, **status.caps}  # a count's: the root's cap
    for resource in resources:
        total = capacity.get(resource)
        view.row(table,
                 view.label(resource),
                 view.amount(resource, total, unit=True),
                 _of_capacity(resource, status.guaranteed.get(resource), total),
                 _of_capacity(resource, status.reserved.get(resource), total),
                 _of_capacity(resource, status.used.get(resource), total))
    return table


def foreign_table(tenants: Mapping[str, ForeignTenant], host: Mapping[str, float]) -> Table:
    """One row per foreign tenant (a subtree another manager owns): its manager, what it holds
    and whether that is what its jobs were allocated or what it uses; the caption says the
    capacity above is the host's less these."""
    table = Table(title="Foreign", title_justify="left", caption_justify="left",
                  caption=f"capacity = the host's {view.vector(host)} less what these hold")
    table.add_column("foreign", overflow="fold")
    table.add_column("manager")
    table.add_column("holds", overflow="fold")
    table.add_column("basis")
    for name, tenant in tenants.items():
        view.row(table, name, view.said(tenant.manager), view.vector(tenant.held), view.said(tenant.basis))
    return table


def groups_table(groups: Mapping[str, StatusGroup]) -> Table:
    """One row per group of the host, idle ones too: weight, floor, task count, λ (fraction of
    its cap guaranteed), dominant resource(s) and share, and what stopped its filling (``idle``
    for a group with no task)."""
    table = Table(title="Groups", title_justify="left", caption="floor: the share DRF promises while every "
                  "group is busy", caption_justify="left")
    table.add_column("group", overflow="fold")
    table.add_column("weight", justify="right")
    table.add_column("floor", justify="right")
    table.add_column("tasks", justify="right")
    table.add_column("λ", justify="right")
    table.add_column("dominant")
    table.add_column("share", justify="right")
    table.add_column("stopped by", overflow="fold")
    for name, group in groups.items():
        idle = group.idle
        view.row(table,
                 _group_name(name, group),
                 view.number(group.weight),
                 view.share(group.floor),
                 str(len(group.tasks)),
                 "—" if idle else view.number(group.lambda_, precision=2),
                 ", ".join(view.label(r) for r in group.dominant_resources) or "—",
                 view.share(group.dominant_share),
                 "idle" if idle else group.stop)
    return table


def _group_name(name: str, group: StatusGroup) -> str:
    """A group's name; the row of the idle groups of ``[groups."*"]``, ``"*"``, says how many
    accounts it stands for (its weight and floor are each one's)."""
    accounts = group.accounts
    if name == "*" and accounts is not None:
        return f"* ({accounts:,} idle account{'s' if accounts != 1 else ''}, each)"
    return name


def resources_table(groups: Mapping[str, StatusGroup], resources: list[str]) -> view.Fitted:
    """Per group, one line per resource it has a cap, guarantee, reservation or use of: cap (its
    tasks' declarations), guarantee (its DRF allocation of cpu and I/O), reserved (the memory
    its tasks hold), measured use, and what it borrows (use above the guarantee). ``—``: none.
    Groups with none of these (idle ones) are left out. Amounts are never cut: narrower than
    :data:`BORROWED_WIDTH` the borrowed column goes (it is use minus guarantee)."""
    return view.Fitted(lambda width: _resources_table(groups, resources, borrowed=width >= BORROWED_WIDTH))


# Columns needed by the cap/guarantee/reserved/use/borrowed table with group names of 8 characters.
BORROWED_WIDTH = 90


def _resources_table(groups: Mapping[str, StatusGroup], resources: list[str], *, borrowed: bool) -> Table:
    table = Table(title="Cap, guarantee, reserved and use", title_justify="left",
                  caption="cpu in cores; borrowed: use above the guarantee, from idle capacity" if borrowed
                  else "cpu in cores")
    table.add_column("group", overflow="fold", min_width=min(8, max((len(n) for n in groups), default=5)))
    table.add_column("resource", no_wrap=True)
    columns = ("cap", "guarantee", "reserved", "use", "borrowed")[:5 if borrowed else 4]
    for column in columns:  # amounts: never cut
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    for name, group in groups.items():
        vectors = [group.demand, group.guarantee, group.reserved, group.usage, group.borrowed][:len(columns)]
        shown = [r for r in resources if any(v.get(r) for v in vectors)]
        for i, resource in enumerate(shown):
            view.row(table, name if i == 0 else "", view.label(resource),
                          *(view.amount(resource, v.get(resource)) for v in vectors),
                          end_section=i == len(shown) - 1)
    return table


def gpus_table(gpus: Sequence[Gpu], guard: GpuGuard | None = None) -> Table:
    """One row per governed GPU: governor's index, its device node, its UUID (cut to its first
    eight hex digits), its name, and the task, group and user holding it, or ``free``, or
    ``draining`` while a process may still hold a free GPU's node (its task ended). Below it,
    what keeps processes outside governor's tasks from the GPUs (``guard``: the status's
    ``daemon.gpu_guard``), said plainly when nothing does."""
    held = sum(1 for gpu in gpus if gpu.task is not None)
    guarded = guard.guarded if guard is not None else ()
    caption = (f"outside governor's tasks: GPU nodes denied on {', '.join(map(str, guarded))}" if guarded else
               "outside governor's tasks: processes are NOT kept from GPUs" if guard else None)
    table = Table(title=f"GPUs: {held} of {len(gpus)} held", title_justify="left", caption=caption,
                  caption_justify="left")
    _device_columns(table, "gpu", ("uuid", {"no_wrap": True}), ("name", {"overflow": "fold"}))
    for gpu in gpus:
        view.row(table, str(gpu.index), gpu.node or "—", view.short_uuid(gpu.uuid), gpu.name or "—", *_held_by(gpu))
    return table


def devices_table(entry: str, devices: Sequence[Device]) -> Table:
    """One row per governed device of the class ``entry`` (its registry entry; the GPUs have
    :func:`gpus_table`): governor's index, its device node, and the task, group and user
    holding it, or ``free``, or ``draining`` while a process may still hold a free device's node
    (its task ended). Titled by the registry's word for one (the entry's name where this
    client does not know the class)."""
    found = resources.find(entry)
    noun = found.noun if found is not None and found.noun else entry
    held = sum(1 for device in devices if device.task is not None)
    table = Table(title=f"{noun}s: {held} of {len(devices)} held", title_justify="left")
    _device_columns(table, entry)
    for device in devices:
        view.row(table, str(device.index), device.node or "—", *_held_by(device))
    return table


def _device_columns(table: Table, index: str, *own: tuple[str, dict]) -> None:
    """A device table's columns: governor's index (headed ``index``), the node, the class's
    ``own`` (each a header and how its column lays out), then who holds it."""
    table.add_column(index, justify="right", no_wrap=True)
    table.add_column("node", overflow="fold")
    for name, layout in own:
        table.add_column(name, **layout)
    for name in ("task", "group", "user"):
        table.add_column(name, overflow="fold")


def _held_by(device: Gpu | Device) -> tuple[str, str, str]:
    """A device's task, group and user cells: ``free`` (or ``draining`` while a process may
    still hold its node) and blanks where no task holds it."""
    if device.task is None:
        return ("draining" if device.draining else "free"), "", ""
    return device.task, view.said(device.group), device.user or "?"


def queue_table(queue: Sequence[QueueItem], now: float) -> Table:
    """The queue, in admission order: position, task, group, user, declared memory, how long it
    has waited, and why (the daemon's one reason, :func:`governor.cli.view_common.reason`)."""
    table = Table(title=view.queue_title(queue), title_justify="left", caption="memory: declared")
    table.add_column("#", justify="right")
    table.add_column("task", overflow="fold")
    table.add_column("group", overflow="fold")
    table.add_column("user", overflow="fold")
    table.add_column("memory", justify="right")
    table.add_column("waiting", justify="right")
    table.add_column("reason", overflow="fold")
    for entry in queue:
        queued_at = entry.queued_at
        view.row(table,
                 view.said(entry.position), entry.task, view.said(entry.group), str(entry.who),
                 view.amount("memory", entry.demand.get("memory")),
                 "—" if queued_at is None else view.duration(now - float(queued_at)),
                 view.reason(entry.reason))
    return table


def tasks_view(name: str, group: StatusGroup) -> RenderableType:
    """A group's tasks as a compact list: id, pid, user and command (cut to 40 characters) on
    one line, then its cap (what it declared), the GPUs it holds (if any), limits, use and stalls
    (PSI, where measured) on a line each, wrapped to the console width; the group's stalls in
    the title; first the group's own memory protection, if any."""
    tasks = group.tasks
    title = Text(f"{name}: {len(tasks)} task{'s' if len(tasks) != 1 else ''}", style="bold")
    if group.stall:
        title.append(f" · stalled {stall_view.stall_words(group.stall)} (last 10 s)", style="")
    rows: list[tuple[str, str, str]] = []
    protected = {f: v for f, v in group.limits.items() if f in ("memory.min", "memory.low")}
    if protected:
        rows.append(("", "protected", " · ".join(f"{f} {view.limit(f, v)}" for f, v in protected.items())))
    for task in tasks:
        rows.append((task.id, "pid", f"{view.task_pid(task)} · {task.who} · {view.task_command(task)}"))
        rows.append(("", "cap", view.vector(task.demand)))
        if task.gpus:
            rows.append(("", "gpus", view.gpu_list(task.gpus)))
        rows.append(("", "limits",
                     " · ".join(f"{view.limit_name(f)} {view.limit(f, v)}" for f, v in task.limits.items()) or "—"))
        rows.append(("", "use", view.vector(task.usage)))
        if task.stall:
            rows.append(("", "stall", stall_view.stall_words(task.stall)))
    return Group(title, view.Fitted(lambda width: view.grid(rows, width)))


def _header(status: Status, now: float) -> Text:
    daemon = status.daemon
    text = Text()
    text.append("governor", style="bold")
    text.append(f" pid {view.said(daemon.pid)}")
    if daemon.started is not None:
        text.append(f", up {view.duration(now - daemon.started)}")
    text.append(f"\ncgroup {view.said(daemon.cgroup_mode)} at {view.said(daemon.cgroup_root)}")
    if daemon.config:
        text.append(f"\nconfig {daemon.config}")
    for device, sharing in view.io_sharing(status).items():
        text.append(f"\nio {device}: guarantees by {sharing}")
    if daemon.cpu_saturated:
        text.append("\ncpu: every group uses its guarantee; each is held to it until one uses less")
    text.append(f"\n{view.filling(status, now)}")
    missing = stall_view.psi_missing(status.psi)
    if missing:
        text.append(f"\n{missing}")
    return text



def _of_capacity(resource: str, value: object, capacity: object) -> str:
    text = view.amount(resource, value)
    if value is not None and capacity:
        fraction = float(value) / float(capacity)
        text += f" ({fraction:.0%})" if abs(fraction) < 1e6 else f" ({view.share(fraction)})"
    return text
