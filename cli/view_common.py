"""Pieces shared by the ``status``, ``explain`` and ``top`` views: how resources, amounts,
shares, durations, the last filling, the memory queue and I/O sharing read, so the three
commands say things the same way.

Pure: strings and :class:`rich.text.Text` from plain values (amounts in base units: cores,
bytes, bytes/s; times in Unix seconds, with ``now`` passed in).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from governor.config.resources import Resource, admitted, sized
from governor.config.resources import format_amount
from governor.config.units import SUFFIXES, format_number, format_size
from governor.wire.fields import MAX_COMMAND_ITEM_CHARS
from governor.wire.limit_files import MEMORY_CAPS, kernel_file

if TYPE_CHECKING:  # `governor run` reads a queued launch's reason here: no status types on its way
    from governor.wire.status_types import ForeignTenant, Gpu, QueueItem, Status, TaskEntry

# Commands longer than this are cut with an ellipsis; the full line is in `--json`.
COMMAND_CHARS = 40
# How the daemon enforces I/O guarantees on a device (``status["daemon"]["io_sharing"]``).
_IO_SHARING = {"io.weight": "work-conserving", "io.bfq.weight": "work-conserving",
               "io.max": "fallback: hard limit, not work-conserving"}


def label(resource: str) -> str:
    """``io.nvme0n1.read`` → ``nvme0n1 read`` (the /s on the amounts says it is I/O)."""
    if resource.startswith("io.") and resource.count(".") >= 2:
        device, direction = resource[3:].rsplit(".", 1)
        return f"{device} {direction}"
    return resource


def amount(resource: str, value: object, *, unit: bool = False) -> str:
    """:func:`governor.config.resources.format_amount` (``3.5``, ``3.5 cores`` with ``unit``, ``4.0G``,
    ``2.0G/s``), ``—`` for None."""
    return "—" if value is None else format_amount(resource, value, unit=unit)


def vector(values: Mapping[str, object]) -> str:
    """``cpu 1 · memory 512.0M``, or ``—`` when empty."""
    return " · ".join(f"{label(r)} {amount(r, v)}" for r, v in values.items()) or "—"


def limit_name(file: str) -> str:
    """A kernel limit file as people read it: a memory cap as ``memory hard cap`` or ``memory
    soft cap`` (v1 and v2 files alike: :data:`~governor.wire.limit_files.MEMORY_CAPS`; systemd's
    ``MemoryMax``/``MemoryMin``… of a login session as the files they set), other files
    (``cpu.max``) as they are named."""
    file = kernel_file(file)  # a login session's, set through systemd
    kind = MEMORY_CAPS.get(file)
    return f"memory {kind} cap" if kind else file


def limit(file: str, value: object) -> str:
    """A kernel limit file's value for people: byte limits (an int, or digits as the kernel
    files hold them) with K/M/G/T, others as written."""
    # Byte limits are unreadable as raw integers; other files (cpu.max, io.max) are shown as written.
    file = kernel_file(file)  # systemd's MemoryMin= … of a login session: bytes too
    if file.startswith("memory.") and (type(value) is int or isinstance(value, str) and value.isdigit()):
        return format_size(int(value))
    return str(value)


def command(argv: list[str], chars: int = COMMAND_CHARS) -> str:
    """The command line, cut to ``chars`` characters with an ellipsis."""
    line = " ".join(argv)
    return line if len(line) <= chars else line[: chars - 1] + "…"


# What stands for another user's command line (governor.wire.visibility: not sent).
PRIVATE = "(private)"


def task_command(task: TaskEntry, chars: int = COMMAND_CHARS) -> str:
    """What a status task runs: its command line, ``session of <user>`` for a session, or
    :data:`PRIVATE` for another user's task, whose command line the daemon does not send."""
    if task.session:
        return command([f"session of {task.who}"], chars)
    if task.private:
        return command([PRIVATE], chars)
    return command(list(task.command), chars)


def task_pid(task: TaskEntry) -> str:
    """A task's pid, ``—`` where the daemon does not send it (another user's task)."""
    return "—" if task.pid is None else str(task.pid)


def number(value: object, *, precision: int = 3) -> str:
    """A number without trailing zeros, ``—`` for None."""
    return "—" if value is None else format_number(value, precision=precision)


def share(value: object, *, digits: int = 1) -> str:
    """A fraction (of the host, of a demand) as a percentage with ``digits`` decimals, ``—`` for
    None or NaN; past a million times the whole (a hostile daemon's 1e308, whose percentage reads
    ``inf%``) as that many times: ``1e+308×``, and an infinite one (JSON's ``Infinity``) as ``∞×``."""
    if value is None:
        return "—"
    fraction = float(value)
    if fraction != fraction:
        return "—"
    if abs(fraction) < 1e6:
        return f"{fraction:.{digits}%}"
    return f"{'-' if fraction < 0 else ''}∞×" if abs(fraction) == float("inf") else f"{fraction:.3g}×"


# Past this (a thousand years), a span is shown as a number of seconds, not in days.
_LONG_S = 1000 * 365 * 86400


def duration(seconds: float) -> str:
    """``42s``, ``5m``, ``2h 03m``, ``3d 4h``; a clock running backwards reads as ``0s``; a
    span past :data:`_LONG_S` (a hostile daemon's ``1e308``) as ``1e+308s``, not 300 digits."""
    if not seconds < _LONG_S:
        return f"{seconds:.3g}s"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 3600:
        return f"{minutes}m"
    if seconds < 86400:
        return f"{hours}h {minutes % 60:02d}m"
    return f"{days}d {hours % 24}h"


def filling(status: Status, now: float) -> str:
    """``last filling 3s ago (launch, 1.2 ms)``, or ``last filling: never``; then, while the
    last filling diverged, a line saying so (its trigger and message) and that the last good
    plan stays in force."""
    last = status.filling
    text = "last filling: never" if last.at is None else (
        f"last filling {duration(now - last.at)} ago ({said(last.trigger)}, {float(last.duration_ms):.1f} ms)")
    error = last.error
    if error is not None:
        ago = duration(now - (now if error.at is None else error.at))
        text += (f"\nALLOCATION FAILED {ago} ago ({said(error.trigger)}): {said(error.message)}; "
                 "the last good plan stays in force")
    return text


def said(value: object) -> str:
    """A field the daemon may leave out, as text: ``?`` when it did."""
    return "?" if value is None else str(value)


def short_of(entry: QueueItem) -> Resource | None:
    """The admitted resource a queued task waits for: the first in registry order of which
    something must free (``waiting_for`` memory, ``gpus_waiting_for`` GPUs, above 0), or None."""
    for resource in admitted():
        value = entry.waiting_for(resource.queue)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return resource
    return None


def reason(said: object) -> str:
    """Why a queued task waits: the daemon's one string (a queue item's ``reason``,
    :func:`governor.core.queue.reason`), the same in ``ps``, ``status``, ``explain``, ``top``
    and ``run --no-wait``; ``—`` when the item does not say."""
    return said if isinstance(said, str) and said else "—"


def queue_title(queue: Sequence[QueueItem]) -> str:
    """``Queue: 2 tasks waiting for memory, gpu``: the admitted resources the queued tasks are
    actually short of (registry order); none named when they only wait for their turn or a quota."""
    short = {resource.name for entry in queue if (resource := short_of(entry)) is not None}
    names = [resource.name for resource in admitted() if resource.name in short]
    return (f"Queue: {len(queue)} task{'s' if len(queue) != 1 else ''} waiting"
            + (f" for {', '.join(names)}" if names else ""))


def io_sharing(status: Status) -> dict[str, str]:
    """Governed block device → how its I/O guarantee is enforced, for people:
    ``io.weight (work-conserving)`` or ``io.max (fallback: hard limit, not work-conserving)``
    when the device has no proportional I/O controller. Empty for an older daemon or no device."""
    return {device: f"{mode} ({_IO_SHARING[mode]})" if mode in _IO_SHARING else str(mode)
            for device, mode in status.daemon.io_sharing.items()}


def foreign_line(tenants: Mapping[str, ForeignTenant], host: Mapping[str, float]) -> str | None:
    """One line for the foreign tenants (``status.foreign`` or explain's), what they hold
    subtracted from the host's capacity (``host``): ``foreign: slurmstepd.scope (slurm,
    allocated) cpu 2 · memory 1.0G; of the host's cpu 8 · memory 16.0G``; None when there is
    none. Plain text: the caller makes it a Text."""
    if not tenants:
        return None
    held = "; ".join(f"{name} ({said(tenant.manager)}, {said(tenant.basis)}) {vector(tenant.held)}"
                     for name, tenant in tenants.items())
    return f"foreign: {held}; subtracted from the host's {vector(host)}"


def console(**options) -> Console:
    """A rich console that shows every string as the text it is: the daemon's (a group's name,
    a trace's event, a cgroup path) are not read as markup (``[/oops]`` failed, ``[link=…]``
    made a hyperlink) nor as emoji codes; governor's own views use no markup."""
    return Console(markup=False, emoji=False, **options)


def fraction(part: float, whole: float) -> float:
    """``part / whole`` within [0, 1] (a bar's filled part): 0 where either is not a positive
    number (a daemon's -1 capacity made ``top`` draw a bar of 10**20 cells)."""
    share = part / whole if whole > 0 else 0.0
    return min(1.0, share) if share > 0 else 0.0


def printable(value: object) -> object:
    """``value`` (a daemon reply: dicts, lists, strings, numbers) with every character a
    terminal would act on in its strings (control characters, escape sequences, bidirectional
    overrides: whatever ``str.isprintable`` refuses but a space) shown as ``?``, as ``ps``
    does. Other users' command lines, task names and user names reach every viewer: none may
    reach a terminal raw. Every view takes the daemon's data through this first. A string
    longer than any the daemon takes in (:data:`~governor.wire.fields.MAX_COMMAND_ITEM_CHARS`:
    a 100 KB name made a 100 KB line) is cut, ending with ``…``."""
    if isinstance(value, str):
        if len(value) > MAX_COMMAND_ITEM_CHARS:
            value = value[:MAX_COMMAND_ITEM_CHARS] + "…"
        return value if value.isprintable() else "".join(c if c.isprintable() or c == " " else "?" for c in value)
    if isinstance(value, dict):
        return {printable(key): printable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [printable(item) for item in value]
    if isinstance(value, tuple):
        return tuple(printable(item) for item in value)
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None and not isinstance(value, type):  # a typed status's part
        return type(value)(**{name: printable(getattr(value, name)) for name in fields})
    return value


class Fitted:
    """A renderable built for the width rich gives it: ``build(width)`` drops what does not fit
    (a column) rather than let rich cut an amount or squeeze a name into pieces."""

    def __init__(self, build: Callable[[int], object]):
        self.build = build

    def __rich_console__(self, console, options):
        yield self.build(options.max_width)


def grid(rows: Sequence[tuple[str, str, str]], width: int) -> Text | Table:
    """Rows of (label, key, value) as ``Table.grid(padding=(0, 1))`` draws them, the key dim and
    each value wrapped at spaces to what ``width`` leaves it (a longer word cut), as one Text:
    a rich grid costs about half a millisecond a row, and status at 300 busy groups took a second
    in its tasks' grids alone. Where the labels and keys take half the width or more (a session's
    label is its user's name), rich's own grid, which narrows them too. Cells are printable text
    (:func:`printable`), shown as typed."""
    labels = max((cells(label) for label, _, _ in rows), default=0)
    keys = max((cells(key) for _, key, _ in rows), default=0)
    room = width - labels - keys - 2
    if room < width // 2:
        table = Table.grid(padding=(0, 1))
        table.add_column(overflow="fold")
        table.add_column(style="dim")
        table.add_column(overflow="fold")
        for label, key, value in rows:
            row(table, label, key, value)
        return table
    text = Text(no_wrap=True, overflow="fold", end="")
    for label, key, value in rows:
        lines = _wrapped(value, room)
        text.append(f"{label}{' ' * (labels - cells(label))} ")
        text.append(f"{key}{' ' * (keys - cells(key))}", style="dim")
        text.append(f" {lines[0]}\n")
        for line in lines[1:]:
            text.append(f"{' ' * (labels + keys + 2)}{line}\n")
    return text


def cells(text: str) -> int:
    """Terminal cells ``text`` takes (a wide character two), without rich's lookup for ASCII."""
    return len(text) if text.isascii() else cell_len(text)


def _wrapped(value: str, room: int) -> list[str]:
    """``value`` in lines of at most ``room`` terminal cells, as rich wraps a grid's cell (at
    spaces; a longer word cut): one that fits, the common case, without asking rich."""
    if cells(value) <= room:
        return [value]
    return [line.plain for line in Text(value).wrap(_WRAPPING, room, overflow="fold")]


_WRAPPING = Console(file=io.StringIO(), width=80)  # Text.wrap's defaults (tab size); it draws nothing


def row(table: Table, *cells: object, **options) -> None:
    """``table.add_row`` with every string cell as plain text: rich would read ``[/oops]`` in a
    command line as markup (and fail on it) and ``:smile:`` as an emoji."""
    table.add_row(*(Text(cell) if isinstance(cell, str) else cell for cell in cells), **options)


def tree_order(names: list[str], parents: Mapping[str, object]) -> list[tuple[int, str]]:
    """``names`` with their depth in the group tree, each parent before its children, siblings
    in the order given; a name whose parent is not among them is at the top. Cycles (from a
    hostile daemon) are cut: every name appears once."""
    known = set(names)
    children: dict[object, list[str]] = {}
    for name in names:
        parent = parents.get(name)
        children.setdefault(parent if parent in known and parent != name else None, []).append(name)
    order: list[tuple[int, str]] = []
    seen: set[str] = set()

    def visit(name: str, depth: int) -> None:
        if name in seen:
            return
        seen.add(name)
        order.append((depth, name))
        for child in children.get(name, []):
            visit(child, depth + 1)

    for top in children.get(None, []):
        visit(top, 0)
    order += [(0, name) for name in names if name not in seen]  # a cycle: shown flat
    return order


def gpu_list(indices: object) -> str:
    """GPU indices in a short cell: ``0-3,6`` (runs of three or more as a range), ``—`` for
    none (or something that is not a list of numbers, from a hostile daemon)."""
    if not isinstance(indices, (list, tuple)) or not indices:
        return "—"
    numbers = sorted({i for i in indices if isinstance(i, int) and not isinstance(i, bool)})
    if not numbers:
        return "—"
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) >= 3 else ",".join(map(str, run)) for run in runs)


def short_uuid(uuid: object) -> str:
    """A GPU's UUID cut to what tells GPUs apart on one host: ``GPU-8a3bbf48`` (its prefixes
    and first eight hex digits; MIG's ``MIG-…`` alike), ``—`` when NVML gave none."""
    if not isinstance(uuid, str) or not uuid:
        return "—"
    parts = uuid.split("-")
    head = 0
    while head < min(2, len(parts) - 1) and not all(c in "0123456789abcdefABCDEF" for c in parts[head]):
        head += 1  # "GPU", "MIG", "MIG-GPU": the prefixes
    return "-".join(parts[:head] + [parts[head][:8]]) if head else uuid[:12]


def gpu_holder(entry: Gpu, *, user: bool = True) -> str:
    """Who holds a GPU of the status's ``gpus``: ``physics/7 alice`` (group/task, and user with
    ``user``), or ``free``."""
    if entry.task is None:
        return "free"
    held = f"{said(entry.group)}/{entry.task}"
    return f"{held} {entry.user}" if user and entry.user else held


def short(resource: str, value: object) -> str:
    """An amount in at most 5 characters (``top``): cores ``0.88``, sizes ``256M``, ``3.5G``; ``—`` for none."""
    if value is None:
        return "—"
    if not sized(resource):
        return number(value, precision=2)
    size = float(value)
    for suffix in ("T", "G", "M", "K"):
        if abs(size) >= SUFFIXES[suffix]:
            scaled = size / SUFFIXES[suffix]
            return f"{scaled:.1f}{suffix}" if scaled < 10 else f"{scaled:.0f}{suffix}"
    return f"{size:.0f}"
