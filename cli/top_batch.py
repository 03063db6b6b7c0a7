"""``governor top -b``: top's screen as plain-text snapshots on stdout, one per update, for
scripts and logs (as ``top -b`` and ``htop`` have): every group with its tasks, the queue and
the recent events, no colours, no keys; ``-n N`` stops after N.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterable, Iterator


from governor.cli.top_state import TopState
from governor.cli.top_view import top_view
from governor.cli.view_common import console as plain_console
from governor.wire.status_types import Status

__all__ = ["snapshot", "snapshots"]

# Tall enough that no group, task, queued task or event is cut (the view caps the queue and
# the events itself).
_ROWS = 100_000
_WIDTH = 120  # when neither a terminal nor $COLUMNS says


def snapshot(status: Status, *, width: int, now: float) -> str:
    """One snapshot of ``status`` (a ``watch`` update) as plain text ``width`` columns wide,
    every group's tasks shown, times relative to ``now`` (Unix time)."""
    state = TopState(status=status, received=now)  # made printable there: group names key the state
    state.expanded = set(state.status.groups)
    console = plain_console(file=io.StringIO(), width=width, color_system=None, force_terminal=False, record=True)
    console.print(top_view(state, width=width, height=_ROWS, now=now, keys=False))
    return "\n".join(line.rstrip() for line in console.export_text(styles=False).rstrip("\n").splitlines())


def snapshots(statuses: Iterable[Status], iterations: int | None, width: int | None = None) -> Iterator[str]:
    """The snapshots of ``statuses`` as they arrive, ``iterations`` of them (None: until the
    stream ends); ``width``: columns (default: the terminal's, else ``$COLUMNS``, else 120)."""
    if width is None:
        width = _columns()
    for count, status in enumerate(statuses, 1):
        yield snapshot(status, width=width, now=time.time())
        if iterations is not None and count >= iterations:
            return


def _columns() -> int:
    """The terminal's columns, else ``$COLUMNS``, else :data:`_WIDTH`: a terminal that says it
    has none (a pty given no size, as some ``docker exec -t`` and CI runners make) is one whose
    width is not known, not one of 0 columns (top printed a blank line)."""
    try:
        columns = os.get_terminal_size().columns
    except OSError:
        columns = 0
    if columns > 0:
        return columns
    said = os.environ.get("COLUMNS", "")
    return int(said) if said.isdigit() and int(said) > 0 else _WIDTH
