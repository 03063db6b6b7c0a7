"""Views of an :class:`~governor.core.model.Allocation` for people: rich tables (its JSON form is
:meth:`~governor.core.model.Allocation.to_json`).

Pure: every function returns a value and prints nothing, so tests render to a string.

Amounts read as everywhere else (:func:`governor.config.resources.format_amount`): ``memory…`` in bytes
and ``io.…`` in bytes/s with K/M/G/T suffixes, the rest (``cpu``, ``gpu``…) plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table

from governor.cli.view_common import label, share, tree_order
from governor.core.model import Allocation, Number, Stop, TraceRow
from governor.config.resources import sized
from governor.config.resources import format_amount
from governor.config.units import SUFFIXES, format_number

_POLICY_NAMES = {"drf": "DRF", "asset": "Asset fairness", "ceei": "CEEI"}

# Exact shares are shown as fractions (2/3) only while they stay readable.
_MAX_DENOMINATOR = 1000


def allocation_table(allocation: Allocation) -> RenderableType:
    """One row per group: weight, tasks, allocation per resource, dominant resource(s) and share,
    why it stopped. A column per resource where the console is wide enough; else (many
    resources) the allocation is one cell, a resource a line. Short headers and reasons (the
    caption says what they mean) keep the paper's two resources on one line at 80 columns."""
    capacity = ", ".join(f"{r} {format_amount(r, v)}" for r, v in allocation.capacity.items())
    stops = {group.stop.kind for group in allocation.groups.values()}
    policy = "H-DRF" if allocation.nodes else _POLICY_NAMES[allocation.policy]
    title = f"{policy} allocation ({allocation.mode}) — capacity: {capacity}"
    caption = "share: dominant share of the host" + ("; full: its next task does not fit" if "no_fit" in stops else "")
    wide, narrow = Table(title=title, caption=caption), Table(title=title, caption=caption)
    wide.add_column("group")
    wide.add_column("weight", justify="right")
    wide.add_column("tasks", justify="right")
    for resource in allocation.capacity:
        wide.add_column(resource, justify="right")
    wide.add_column("dominant")
    wide.add_column("share", justify="right")
    wide.add_column("stopped by")
    # Narrow: names and amounts whole (no_wrap), one resource a line; the rest may wrap.
    narrow.add_column("group", no_wrap=True)
    narrow.add_column("weight", justify="right")
    narrow.add_column("tasks", justify="right")
    narrow.add_column("allocation", no_wrap=True)
    narrow.add_column("dominant share", overflow="fold")
    narrow.add_column("stopped by", overflow="fold")
    everyone = {**allocation.nodes, **allocation.groups}
    for depth, name in tree_order(list(everyone), allocation.parents):
        group, internal = everyone[name], name in allocation.nodes
        tasks = "" if internal else format_number(group.tasks, precision=2)
        if group.demanded_tasks is not None:
            tasks += f" of {group.demanded_tasks}"
        amounts = [format_amount(r, group.allocation.get(r, 0)) for r in allocation.capacity]
        dominant, its_share = ", ".join(group.dominant_resources), format_share(group.dominant_share)
        name = "  " * depth + group.name + ("/" if internal else "")
        wide.add_row(name, format_number(group.weight), tasks, *amounts, dominant, its_share, _stop(group.stop))
        narrow.add_row(name, format_number(group.weight), tasks,
                       "\n".join(f"{label(r)} {a}" for r, a in zip(allocation.capacity, amounts)),
                       f"{', '.join(map(label, group.dominant_resources))} {its_share}", _stop(group.stop))
    return Fitted(wide, narrow)


def _stop(stop: Stop) -> str:
    """``demand met``, ``cpu saturated``, ``cpu full`` (its next task does not fit: as the trace's
    ``skipped: cpu full``)."""
    return f"{', '.join(stop.resources)} full" if stop.kind == "no_fit" else stop.describe()


def trace_table(allocation: Allocation) -> RenderableType:
    """``governor simulate --trace``: :func:`filling_table` for a simulated allocation; a policy
    without steps (CEEI) gives an empty table with a caption saying so."""
    return filling_table(
        title=f"{_POLICY_NAMES[allocation.policy]} filling, step by step ({allocation.mode})",
        groups=list(allocation.groups), capacity=allocation.capacity, trace=allocation.trace,
        empty="no steps: this policy is solved in one go, not by filling")


def filling_table(*, title: str, groups: list[str], capacity: Mapping[str, Number],
                  trace: Sequence[TraceRow], empty: str) -> RenderableType:
    """The filling step by step, like the paper's Table 1 (``simulate --trace`` and ``explain``).

    Columns: step, event (with the resource that saturated or that a skipped task did not fit
    in), group, groups frozen at the step, each group's dominant share, and the total allocated
    of each resource as a fraction of its capacity (``3/9`` for 3 of 9 CPUs, ``4/18`` for 4G of
    18G with exact numbers; percentages with floats, as the daemon sends).

    Args:
        title: the table's title.
        groups: group names, one share column each, in this order.
        capacity: resource → capacity in base units, one alloc. column each.
        trace: the rows; every row's ``dominant_shares`` and ``allocated`` cover ``groups`` and
            ``capacity``.
        empty: the caption when ``trace`` is empty.
    """
    # Two-line headers keep the many share/alloc. columns narrow, so the event text is not cut.
    caption = "share: dominant share; alloc.: total allocated / capacity" if trace else empty
    wide, narrow = Table(title=title, caption=caption), Table(title=title, caption=caption)
    wide.add_column("step", justify="right")
    wide.add_column("event")
    wide.add_column("group")
    wide.add_column("frozen")
    for group in groups:
        wide.add_column(f"{group}\nshare", justify="right")
    for resource in capacity:
        wide.add_column(f"{resource}\nalloc.", justify="right")
    narrow.add_column("step", justify="right")
    for header in ("event", "group", "frozen"):
        narrow.add_column(header, overflow="fold")
    narrow.add_column("shares", no_wrap=True)
    narrow.add_column("alloc.", no_wrap=True)
    fractions = [_fractions_of_capacity(r, [row.allocated[r] for row in trace], cap) for r, cap in capacity.items()]
    for i, row in enumerate(trace):
        first = (str(row.step), _event(row), row.group or "", ", ".join(row.frozen))
        shares = [format_share(row.dominant_shares[g], percent=False) for g in groups]
        allocated = [column[i] for column in fractions]
        wide.add_row(*first, *shares, *allocated)
        narrow.add_row(*first, "\n".join(f"{g} {v}" for g, v in zip(groups, shares)),
                       "\n".join(f"{label(r)} {v}" for r, v in zip(capacity, allocated)))
    return Fitted(wide, narrow)


class Fitted:
    """A renderable that shows ``wide`` where the console is wide enough for every column at
    its natural width, else ``narrow`` (the same content, fewer columns, more lines)."""

    def __init__(self, wide: Table, narrow: Table):
        self.wide = wide
        self.narrow = narrow

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        fits = Measurement.get(console, options.update(width=10**6), self.wide).maximum <= options.max_width
        yield self.wide if fits else self.narrow


def format_share(value: Number, *, percent: bool = True) -> str:
    """A share of the host: ``2/3 (66.7%)`` when exact with a small denominator, else as
    :func:`~governor.cli.view_common.share` reads it (``66.7%``; a hostile ``1e+308×``, ``∞×``, ``—``).

    With ``percent=False`` an exact share is just ``2/3``; whole shares are ``0`` and ``1``.
    """
    if isinstance(value, (int, Fraction)):
        exact = Fraction(value)
        if exact.denominator == 1:
            return str(exact.numerator)
        if exact.denominator <= _MAX_DENOMINATOR:
            return f"{exact} ({float(exact):.1%})" if percent else str(exact)
    return share(value)


def _event(row: TraceRow) -> str:
    if row.event == "saturated":
        return f"{row.resource} saturated"
    if row.event == "skipped":
        return f"skipped: {row.resource} full"
    return row.event.replace("_", " ")


def _fractions_of_capacity(resource: str, amounts: list[Number], capacity: Number) -> list[str]:
    """One trace column: each amount as a fraction of ``capacity``.

    Over the capacity in its own unit when that is a small whole number and every amount of the
    column is whole in it, as the paper writes ``4/18`` (GB) and ``9/9`` (CPUs); otherwise
    reduced (``5/9``), or a percentage for float or awkward values. Zero is ``0``.
    """
    if capacity == 0:
        return ["—"] * len(amounts)
    if not all(isinstance(v, (int, Fraction)) for v in (*amounts, capacity)):
        return [share(float(amount) / float(capacity)) for amount in amounts]
    fractions = [Fraction(amount) / Fraction(capacity) for amount in amounts]
    units = _whole_units(resource, Fraction(capacity))
    if units is not None and all((fraction * units).denominator == 1 for fraction in fractions):
        return [f"{fraction * units}/{units}" if fraction else "0" for fraction in fractions]
    return [format_share(fraction, percent=False) for fraction in fractions]


def _whole_units(resource: str, capacity: Fraction) -> int | None:
    """The capacity as a small whole count of its display unit (18G → 18, 9 CPUs → 9), or None."""
    scale = 1
    if sized(resource):
        # The largest suffix the capacity is a whole number of, as format_size would show it.
        scale = next((SUFFIXES[s] for s in ("T", "G", "M", "K") if (capacity / SUFFIXES[s]).denominator == 1), 1)
    units = capacity / scale
    return int(units) if units.denominator == 1 and 1 <= units <= _MAX_DENOMINATOR else None
