"""80 columns (issue 23, point 6): ps, status, top and explain drop or wrap columns, never cut a
number (``ps --all`` showed ``0.5/0.…`` and ``alic…``), at 80 and 200 columns, on a terminal
and piped."""

from __future__ import annotations

import copy
import io
import re

import pytest
from rich.console import Console

from governor.cli.explain_view import explain_renderables
from governor.cli.ps_view import ended_table, tasks_table
from governor.cli.status_view import status_renderables
from governor.cli.top_state import TopState, press
from governor.cli.top_view import top_view
from support.status_sample import NOW, STATUS
from support.task_rows import ENDED, ROWS
from governor.wire.status_json import decode
from governor.wire.ps_types import EndedRecord, TaskRow, decode_rows

LONG_USER = "alexandrina-montgomery"  # a long user name: shown whole (wrapped), never "alex…"
EXPLAIN = {"capacity": {"cpu": 16, "memory": 64 * 1024**3},
           "groups": {"physics": {"weight": 2.0, "floor": 0.5, "dominant_resources": ["cpu"], "dominant_share": 0.5,
                                  "stop": "cpu saturated", "lambda": 0.8, "demand": {"cpu": 10},
                                  "allocation": {"cpu": 8}, "tasks": 2, "sessions": []}},
           "trace": [{"step": 1, "event": "cpu saturated", "group": None, "resource": "cpu", "frozen": ["physics"],
                      "dominant_shares": {"physics": 0.5}, "allocated": {"cpu": 8}}],
           "queue": [], "configured": {"idle": {"weight": 1.0, "floor": 0.25}}}


def rendered(renderables, width: int, terminal: bool) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=terminal, color_system=None)
    for renderable in renderables:
        console.print(renderable)
    return console.file.getvalue()


def views(width: int):
    rows = copy.deepcopy(ROWS)
    rows[0]["user"] = LONG_USER
    state = TopState(status=decode(copy.deepcopy(STATUS)), received=NOW)
    press(state, "enter")
    return {
        "ps": [tasks_table(decode_rows(TaskRow, rows, "tasks"), now=1100.0, users=True)],
        "ps --ended": [ended_table(decode_rows(EndedRecord, ENDED, "ended"), now=1000.0, users=True)],
        "status": status_renderables(decode(STATUS), now=NOW),
        "top": [top_view(state, width=width, height=50, now=NOW)],
        "explain": explain_renderables(EXPLAIN, now=NOW),
    }


@pytest.mark.parametrize("terminal", [True, False], ids=["tty", "piped"])
@pytest.mark.parametrize("width", [80, 200])
def test_no_view_cuts_a_number_or_a_name(width, terminal):
    for name, renderables in views(width).items():
        text = rendered(renderables, width, terminal)
        assert max(len(line) for line in text.splitlines()) <= width, name
        cut = re.findall(r"[\d.]+…|[\d.]+/…", text)
        assert not cut, f"{name} at {width} columns cut {cut}:\n{text}"
        if name == "ps":
            # guarantee/cap/use and reserved/cap/use, whole; the long user name, whole though wrapped.
            assert "1.5/2/1.98" in text and "4G/4G/812M" in text, text
            assert not re.search(r"\w…", text), f"a name cut short:\n{text}"  # wrapped instead
            assert "12.0G" in text  # a queued task's reason


@pytest.mark.parametrize("terminal", [True, False], ids=["tty", "piped"])
@pytest.mark.parametrize("width", [80, 200])
def test_no_view_cuts_a_number_with_gpus_governed(width, terminal):
    from support.status_sample import with_gpus

    status = with_gpus(STATUS)
    rows = copy.deepcopy(ROWS)
    rows[0]["gpus"], rows[0]["demand"]["gpu"] = [0, 1, 2, 3, 6], 5
    rows[1]["gpus"], rows[1]["demand"]["gpu"] = [], 2
    state = TopState(status=decode(copy.deepcopy(status)), received=NOW)
    press(state, "enter")
    for name, renderables in {"ps": [tasks_table(decode_rows(TaskRow, rows, "tasks"), now=1100.0, users=True)],
                              "status": status_renderables(decode(status), now=NOW),
                              "top": [top_view(state, width=width, height=50, now=NOW)]}.items():
        text = rendered(renderables, width, terminal)
        assert max(len(line) for line in text.splitlines()) <= width, name
        cut = re.findall(r"[\d.]+…|[\d.]+/…|[\d,-]+…", text)
        assert not cut, f"{name} at {width} columns cut {cut}:\n{text}"
        if name == "ps" and width == 80:  # beside a 34-character name: left out whole, and said so
            assert "0-3,6" not in text and re.search(r"left\s+out\s+at\s+this\s+width:?\s+[^()]*gpus", text), text
            continue
        assert ("0-3,6" if name == "ps" else "0,1") in text, name
