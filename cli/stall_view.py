"""Pressure stall information (PSI) in words, for ``status``, ``top`` and ``explain``. Pure.

A group's or task's ``stall`` (status and explain objects) is resource (``cpu``, ``memory``,
``io``) → kind (``some``: at least one of its tasks waited for the resource; ``full``: all of
them did) → ``avg10`` (percent of the last 10 s) and ``total`` (seconds). The status's ``psi``
says whether the host has PSI (``available``) and, where not, ``why``: views say that once
rather than show zeros. An older daemon sends neither: nothing is said.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from governor.core.usage import worst_stall
from governor.wire.status_types import Psi

# Below this share of the last 10 s (percent) a stall is noise: not named, shown as "·".
STALLED_PERCENT = 1.0
# From this share on, a stall is drawn in red: the tasks wait more than they run.
SEVERE_PERCENT = 40.0
_SHORT = {"cpu": "cpu", "memory": "mem", "io": "io"}


def psi_available(psi: Psi) -> bool:
    """Whether the daemon measured stalls on this host (status's or explain's ``psi``; False
    from an older daemon too)."""
    return psi.available is True


def psi_missing(psi: Psi) -> str | None:
    """The one line a view shows where the host has no PSI: ``stalls: not measured: <why>``;
    None where it has, or the daemon does not say."""
    if psi.available is not False:
        return None
    return f"stalls: not measured: {psi.why or 'this host has no pressure stall information'}"


def worst_cell(stall: Mapping) -> Text:
    """``mem 23%``: the resource a group or task stalled on most (``some``, last 10 s); ``·``
    under :data:`STALLED_PERCENT`."""
    worst = worst_stall(stall)
    if worst is None or worst[1] < STALLED_PERCENT:
        return Text("·", style="dim")
    resource, percent = worst
    return Text(f"{_SHORT.get(resource, resource)} {percent:.0f}%",
                style="bold red" if percent >= SEVERE_PERCENT else "yellow")


def stall_words(stall: Mapping) -> str:
    """``cpu some 23% full 0% · mem some 2% full 1% · io some 0% full 0%`` (last 10 s); ``—``
    with nothing measured."""
    parts = []
    for resource, kinds in stall.items():
        shares = " ".join(f"{kind} {float(about.get('avg10', 0.0)):.0f}%" for kind, about in kinds.items())
        parts.append(f"{_SHORT.get(resource, resource)} {shares}")
    return " · ".join(parts) or "—"


def physics(name: str, stall: Mapping) -> str:
    """``physics: stalled 23 % on memory over the last 10 s`` (each resource at
    :data:`STALLED_PERCENT` or more, the largest first: ``…, 4 % on cpu …``), or ``physics: not
    stalled`` with what was measured; ``physics: no stall measured yet`` before a sample."""
    if not stall:
        return f"{name}: no stall measured yet"
    shares = sorted(((float(kinds.get("some", {}).get("avg10", 0.0)), resource) for resource, kinds in stall.items()),
                    key=lambda item: -item[0])
    stalled = [f"{percent:.0f} % on {resource}" for percent, resource in shares if percent >= STALLED_PERCENT]
    if not stalled:
        return f"{name}: not stalled (under {STALLED_PERCENT:.0f} % on {', '.join(r for _, r in shares)} over the last 10 s)"
    return f"{name}: stalled {', '.join(stalled)} over the last 10 s"
