"""One word, one number, on every screen (issue 23): a daemon (on the in-memory driver) runs two
groups' tasks beside an idle configured group, and status (JSON and view), top, ps, explain and
the metrics are read from that one state. "Guarantee" was λ × declared memory in three views and
all admitted memory in two others; idle groups were invisible, and explain gave them 100 %."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from governor.core import vocabulary
from governor.cli.explain_view import explain_renderables
from governor.cli.ps_view import tasks_table
from governor.cli.status_view import status_renderables
from governor.cli.top_state import TopState, press
from governor.cli.top_view import top_view
from governor.config.load import parse_config
from governor.wire.metrics import Metrics
from governor.wire.protocol import ExplainRequest, Peer, PsRequest, StatusRequest
from governor.config.resources import format_amount
from support.daemons import GIB, launch, make_daemon, on_loop
from governor.wire.status_json import decode
from governor.wire.ps_types import TaskRow, decode_rows

CONFIG = """
[capacity]
cpu = 2
memory = "4G"
[groups.A]
weight = 2
users = ["root"]
[groups.B]
weight = 3
users = ["root"]
[groups.C]
weight = 5
users = ["root"]
[sessions]
enabled = false
"""
ROOT = Peer(pid=1, uid=0, gid=0)


pytestmark = pytest.mark.daemon(  # the `daemon` fixture: members in each group
    make=lambda tmp_path: make_daemon(tmp_path, CONFIG,
                                      members=lambda config: {"A": ["alice"], "B": ["bob"], "C": ["carol"]}))


def rendered(*renderables, width: int = 200) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    for renderable in renderables:
        console.print(renderable)
    return console.file.getvalue()


def test_every_view_shows_the_same_floor_guarantee_reserved_and_cap(daemon):
    # cpu 2, memory 4G. A (weight 2): <2 cores, 1G>; B (weight 3): <2 cores, 512M>; C (weight 5)
    # runs nothing. Both A and B are cpu-dominant: weighted DRF gives them 2:3 of the 2 cores,
    # A 0.8 and B 1.2 (λ 0.4 and 0.6). Memory is reserved, not guaranteed: A 1G, B 512M.
    launch(daemon, 100, group="A", cpu=2.0, memory=GIB)
    launch(daemon, 200, group="B", cpu=2.0, memory=GIB // 2)
    handle = lambda request: json.loads(json.dumps(asyncio.run(daemon.requests.handle(request, ROOT))))  # noqa: E731
    status = handle(StatusRequest())["status"]
    explain = handle(ExplainRequest())["explain"]
    rows = {row["id"]: row for row in handle(PsRequest(all=True))["tasks"]}
    scraped = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(generate_latest(Metrics(lambda: decode(status)).registry).decode())
               for s in family.samples}
    groups = status["groups"]

    # floor: w / Σw over the host's groups, idle C included: 0.2, 0.3, 0.5.
    for name, floor in (("A", 0.2), ("B", 0.3), ("C", 0.5)):
        assert groups[name]["floor"] == pytest.approx(floor)
        assert scraped[("governor_group_floor", (("group", name), ("leaf", "true"), ("parent", "")))] == pytest.approx(floor)
    assert explain["configured"]["C"]["floor"] == pytest.approx(0.5)
    assert explain["groups"]["A"]["floor"] == pytest.approx(0.2)

    # guarantee: cpu only, the allocation; a task's part is λ × its declaration.
    assert groups["A"]["guarantee"] == pytest.approx({"cpu": 0.8}) and "memory" not in groups["A"]["guarantee"]
    assert status["guaranteed"] == pytest.approx({"cpu": 2.0})
    assert scraped[("governor_group_guarantee", (("group", "A"), ("leaf", "true"), ("parent", ""), ("resource", "cpu")))] == pytest.approx(0.8)
    assert rows["1"]["guarantee"] == pytest.approx(vocabulary.task_guarantee({"cpu": 2.0}, 0.4))

    # reserved: the declared memory of admitted tasks; the same in status, ps and the metrics.
    assert groups["A"]["reserved"] == {"memory": GIB} and groups["B"]["reserved"] == {"memory": GIB // 2}
    assert status["reserved"] == {"memory": 1.5 * GIB}
    assert rows["1"]["reserved"] == {"memory": GIB}
    assert scraped[("governor_group_reserved", (("group", "B"), ("leaf", "true"), ("parent", ""), ("resource", "memory")))] == GIB // 2

    # The views print those numbers, in the same words.
    state = TopState(status=decode(status), received=0.0)
    press(state, "enter")  # A expanded
    status_text = rendered(*status_renderables(decode(status), now=0.0))
    top_text = rendered(top_view(state, width=200, height=60, now=0.0))
    ps_text = rendered(tasks_table(decode_rows(TaskRow, list(rows.values()), "tasks"), now=0.0, users=True))
    explain_text = rendered(*explain_renderables(explain, now=0.0))
    assert "guaranteed" in status_text and "reserved" in status_text
    assert "20.0%" in status_text and "50.0%" in status_text  # floors
    assert "idle" in status_text  # C, with no task
    assert "0.8/" in top_text and f"{format_amount('memory', 1.5 * GIB)}" in top_text  # A's g/u; reserved total
    assert "0.8/2/" in ps_text and "1G/1G/" in ps_text  # guarantee/cap/use, reserved/cap/use
    assert "C" in explain_text and "50.0%" in explain_text  # the idle group, its true floor
    assert "at least 100.0%" not in explain_text  # what explain told every idle group


def test_configured_groups_are_listed_while_idle_and_keep_their_metrics(daemon):
    status = asyncio.run(daemon.requests.handle(StatusRequest(), ROOT))["status"]
    assert sorted(status["groups"]) == ["A", "B", "C"]
    assert all(g["idle"] and g["tasks"] == [] for g in status["groups"].values())
    assert status["groups"]["C"]["members"] == ["carol"]
    text = generate_latest(Metrics(lambda: decode(status)).registry).decode()
    assert 'governor_group_tasks{group="C",leaf="true",parent=""} 0.0' in text
    assert 'governor_group_guarantee{group="C",leaf="true",parent="",resource="cpu"} 0.0' in text


def test_an_idle_sessions_reservation_is_what_it_uses_not_its_cap(daemon):
    # Issue 23, point 5: bob's launch queued behind his own idle shell's 2G reservation.
    daemon.reloads.use(parse_config(CONFIG.replace("enabled = false", 'memory = "3G"\ncpu = 0.5'), "t.toml"))
    daemon.sessions.real_uid = daemon.sessions.effective_uid = lambda pid: 0
    daemon.policy.owners.owner = lambda uid: ("root", "A")
    on_loop(daemon, lambda: daemon.sessions.govern_process(500, 0))  # root's session, cap 3G of 4G
    session = daemon.tasks.get("session-0")
    daemon.observation.usage[session.cgroup] = {"memory": 20 * 1024**2}
    reply = launch(daemon, 600, group="B", cpu=0.5, memory=2 * GIB, wait=False)  # 2G fits beside 20M
    assert reply["task"]
    assert daemon.observation.status()["groups"]["A"]["reserved"] == {"memory": 20 * 1024**2}
