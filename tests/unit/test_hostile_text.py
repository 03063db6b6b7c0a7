"""Text one user gives reaches every viewer (issue 22, point 5): a command line item ``[/oops]``
made ``governor status`` fail with rich's MarkupError for everyone, and escape sequences reached
viewers' terminals raw. Here a real daemon (on the in-memory driver) holds hostile tasks, and
status, top (group expanded), ps (running, queued, ended), explain and an error line render them."""

from __future__ import annotations

import asyncio
import io
import json
import re

import pytest
from rich.console import Console

from governor.cli.explain_view import explain_renderables
from governor.cli.failures import line
from governor.cli.ps_view import ended_table, tasks_table
from governor.cli.status_view import status_renderables
from governor.cli.top_state import TopState, press
from governor.cli.top_view import top_view
from governor.wire.protocol import ExplainRequest, Peer, PsRequest, StatusRequest
from support.daemons import GIB, launch, on_loop
from governor.wire.status_json import decode
from governor.wire.ps_types import EndedRecord, TaskRow, decode_rows

HOSTILE = ["[/oops]", "[bold red]x[/]", "\x1b]0;PWNED\x1b\\", "\x1b[8m", "\x9b31m", "\u202eevil", ":smile:",
           "tab\there", "bell\x07"]
ROOT = Peer(pid=1, uid=0, gid=0)


def rendered(*renderables, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    for renderable in renderables:
        console.print(renderable)
    return console.file.getvalue()


def over_the_wire(reply: dict) -> dict:
    return json.loads(json.dumps(reply))


@pytest.mark.parametrize("width", [80, 200])
def test_every_view_shows_hostile_text_as_text(daemon, width):  # noqa: F811
    launch(daemon, 100, group="A", cpu=0.5, memory=GIB)
    daemon.tasks.add(daemon.tasks.get("1").__class__(
        "2", "A", 200, 0, "root", tuple(HOSTILE), {"cpu": 0.5, "memory": GIB}, 0.0, name="[/oops]\x1b[8m"))
    on_loop(daemon, lambda: daemon.exits.check(["1"], "exit"))  # task 1 ended: an ended record
    handle = lambda request: over_the_wire(asyncio.run(daemon.requests.handle(request, ROOT)))  # noqa: E731
    status, explain = handle(StatusRequest())["status"], handle(ExplainRequest())["explain"]
    running, ended = handle(PsRequest(all=True))["tasks"], handle(PsRequest(all=True, ended=True))["ended"]
    state = TopState()
    state.receive(decode(status), at=0.0)  # as the watch stream hands it to top
    press(state, "enter")  # the group expanded: its tasks' command lines shown
    text = rendered(*status_renderables(decode(status), now=0.0), top_view(state, width=width, height=60, now=0.0),
                    tasks_table(decode_rows(TaskRow, running, "tasks"), now=0.0, users=True),
                    ended_table(decode_rows(EndedRecord, ended, "ended"), now=0.0, users=True),
                    *explain_renderables(explain, now=0.0), width=width)
    text += line(" ".join(HOSTILE))  # an error line (click.echo: no rich) quoting another user's input
    assert "\x1b" not in text and "\x9b" not in text and "\u202e" not in text and "\x07" not in text
    assert "[/oops]" in text  # as typed, not read as markup
    assert "PWNED" in text  # its words are still there, made harmless


def test_printable_keeps_plain_text_as_it_is():
    from governor.cli.view_common import printable

    assert printable({"a b": ["x", 1, None, "é ü 中"]}) == {"a b": ["x", 1, None, "é ü 中"]}
    assert printable("\x1b[8m\ttab") == "?[8m?tab"
    assert printable(["x" * 4096, "y" * 100_000]) == ["x" * 4096, "y" * 4096 + "…"]  # no 100 KB cell


def test_a_hostile_daemons_text_and_figures_are_shown_not_obeyed():
    # What a buggy or hostile daemon could send (issue 42's "hostile numbers and text"): markup in
    # keys and paths, escapes in group names, negative and huge amounts. Each was a traceback, a
    # hyperlink, or top drawing a bar of 10**20 cells.
    from governor.cli import view_common as view
    from governor.cli.top_batch import snapshot

    status = decode({"capacity": {"cpu": 2.0, "memory": -1, "io.sda.read": -1}, "used": {"cpu": -1e20},
                     "guaranteed": {"cpu": -1e308}, "host_capacity": {"[/oops]": 1, "[link=http://x]LINK[/link]": 2},
                     "groups": {"\x1b[2Jx": {"weight": 1, "dominant_share": -1e308}, "a\nb": {"weight": 1}},
                     "daemon": {"gpu_guard": {"kind": "sessions", "guarded": ["[/oops]"]}}, "fair_level": 1e308})
    console = view.console(file=io.StringIO(), width=100, force_terminal=True)  # as governor status prints
    for renderable in (*status_renderables(status, now=0.0),
                       *explain_renderables({"trace": [{"step": 1, "event": "[/oops]"},
                                                       {"step": 2, "event": "demand_met", "group": "g",
                                                        "dominant_shares": {"g": 1e308}, "allocated": {"cpu": 1e308}}],
                                             "groups": {"g": {"lambda": 1e308, "stop": "cpu saturated", "weight": 1,
                                                              "dominant_share": float("inf"), "allocation": {"cpu": 2.5}}},
                                             "capacity": {"cpu": 1.5, "[link=http://x]L[/link]": 1}}, None, now=0.0)):
        console.print(renderable)
    text = console.file.getvalue()
    assert "[/oops]" in text and "[link=http://x]" in text and "\x1b]8" not in text  # shown, not a hyperlink
    assert not re.search(r"\b(inf|nan)", text)  # -1e308 of 2 cores was "(-inf%)", as were explain's λ and trace
    top = snapshot(status, width=100, now=0.0)
    assert "?[2Jx" in top and "a?b" in top and "\x1b" not in top
    assert "inf" not in top  # the fair level 1e308 was "inf%"
    assert max(map(len, top.splitlines())) <= 100
