"""Stalls (PSI) from a sample to every screen: the usage vector's stall keys, status --json's
``stall`` and ``psi``, ``top``, ``status``, ``explain`` and the metrics; a host without PSI
said once, never as zeros."""

from __future__ import annotations

import copy
import io

from rich.console import Console
from support.rendered import render as render_status
from support.rendered import samples
from support.status_sample import NOW, STATUS

from governor.cgroups.stats import CgroupStats, Stall
from governor.cli.explain_view import explain_renderables
from governor.cli.top_state import TopState
from governor.cli.top_view import top_view
from governor.core.state import Task, Tasks
from governor.core.usage import Sample, stalls, usage
from governor.wire.metrics import Metrics
from governor.wire.status import groups_status, psi_entry, sections, status_of
from governor.wire.status_json import encode
from governor.wire.status_json import decode

NO_PSI = "this host's cgroups are v1, which keep no pressure stall information (PSI needs cgroup v2)"
# physics waits for memory a quarter of the time, and a little for CPU; t7 is the one that waits.
PHYSICS = {"cpu": {"some": {"avg10": 4.0, "total": 12.5}, "full": {"avg10": 0.0, "total": 0.0}},
           "memory": {"some": {"avg10": 23.0, "total": 310.25}, "full": {"avg10": 9.0, "total": 120.0}},
           "io": {"some": {"avg10": 0.0, "total": 1.0}, "full": {"avg10": 0.0, "total": 0.5}}}
OPS = {"cpu": {"some": {"avg10": 0.2, "total": 3.0}}, "memory": {"some": {"avg10": 0.0, "total": 0.0}},
       "io": {"some": {"avg10": 0.5, "total": 2.0}}}


def with_psi() -> dict:
    status = copy.deepcopy(STATUS)
    status["psi"] = {"available": True, "why": None}
    status["groups"]["physics"]["stall"] = PHYSICS
    status["groups"]["physics"]["tasks"][0]["stall"] = {"memory": {"some": {"avg10": 61.0, "total": 300.0}}}
    status["groups"]["ops"]["stall"] = OPS
    status["groups"]["idle"]["stall"] = {}
    return status


def without_psi() -> dict:
    status = copy.deepcopy(STATUS)
    status["psi"] = {"available": False, "why": NO_PSI}
    for group in status["groups"].values():
        group["stall"] = {}
    return status


def top(status: dict, width: int = 120, height: int = 40, expanded=("physics",)) -> str:
    console = Console(record=True, width=width, height=height, file=io.StringIO())
    console.print(top_view(TopState(status=decode(status), received=NOW, expanded=set(expanded)), width=width,
                           height=height, now=NOW))
    return console.export_text()


def explained(status: dict, group: str | None = None) -> str:
    answer = {"capacity": status["capacity"], "psi": status["psi"], "trace": [], "queue": [],
              "groups": {name: {**g, "tasks": len(g["tasks"]),
                                "task_stalls": {t["id"]: t.get("stall", {}) for t in g["tasks"]}}
                         for name, g in status["groups"].items() if not g["idle"]}}
    console = Console(record=True, width=120, file=io.StringIO())
    for renderable in explain_renderables(answer, group, now=NOW):
        console.print(renderable)
    return console.export_text()


def test_a_sample_with_psi_gives_each_stall_in_percent_and_seconds_and_status_nests_them():
    stats = CgroupStats(1_000_000, 0, 0, 1024, psi={"cpu": {"some": Stall(12.5, 3_000_000), "full": Stall(0.0, 0)}})
    vector = usage(None, Sample(0.0, stats), {})
    assert vector["stall.cpu.some.avg10"] == 12.5 and vector["stall.cpu.some.total"] == 3.0
    assert stalls(vector) == {"cpu": {"some": {"avg10": 12.5, "total": 3.0}, "full": {"avg10": 0.0, "total": 0.0}}}
    tasks = Tasks()
    tasks.add(Task("1", "A", 100, 1000, "alice", ("sleep", "9"), {"cpu": 0.5}, 1.5))
    cgroup = tasks.get("1").cgroup
    groups = groups_status(allocation=None, tasks=tasks, in_force=lambda rel: {}, usage={"A": vector, cgroup: vector})
    status = encode(status_of(groups, capacity={"cpu": 2.0}, **sections(psi=psi_entry(None))))
    group = status["groups"]["A"]
    assert group["stall"] == group["tasks"][0]["stall"] == stalls(vector)
    # The throttling signs stay what they were: no stall key among them, nor among the resources.
    assert not any(key.startswith("stall") for key in (*group["pressure"], *group["usage"], *status["used"]))
    assert status["psi"] == {"available": True, "why": None}
    assert encode(status_of({}, **sections(psi=psi_entry(NO_PSI))))["psi"] == {"available": False, "why": NO_PSI}


def test_top_shows_the_worst_stall_of_each_group_and_its_detail_line():
    text = top(with_psi())
    lines = text.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("group"))
    assert "pressure" in header and "stall" in header
    assert "mem 23%" in next(line for line in lines if line[3:].startswith("physics "))
    assert "·" in next(line for line in lines if line[3:].startswith("ops ")).split()[-1]  # under 1 %: noise
    assert "stalled cpu some 4% full 0% · mem some 23% full 9% · io some 0% full 0%" in text
    assert "mem 61%" in text  # t7's column in the expanded group
    assert "not measured" not in text


def test_top_without_psi_says_so_once_and_has_no_stall_column():
    text = top(without_psi())
    assert text.count("stalls: not measured: " + NO_PSI[:60]) == 1
    header = next(line for line in text.splitlines() if line.lstrip().startswith("group"))
    assert "pressure" in header and "stall" not in header and "some 0%" not in text


def test_an_older_daemon_without_psi_keys_shows_neither():
    text = top(copy.deepcopy(STATUS))
    assert "stall" not in text


def test_status_shows_the_stalls_of_groups_and_tasks_and_a_missing_psi_once():
    text = " ".join(render_status(with_psi(), 120).split())
    assert "physics: 2 tasks · stalled cpu some 4% full 0% · mem some 23% full 9%" in text
    assert "stall mem some 61%" in text
    text = " ".join(render_status(without_psi(), 120).split())
    assert text.count("stalls: not measured") == 1 and "stalled" not in text


def test_explain_says_what_each_group_stalled_on():
    text = explained(with_psi())
    assert "physics: stalled 23 % on memory, 4 % on cpu over the last 10 s" in text
    assert "ops: not stalled (under 1 % on io, cpu, memory over the last 10 s)" in text
    assert "task t7" not in text  # each task's only for one group
    alone = explained(with_psi(), "physics")
    assert "physics: stalled" in alone and "ops:" not in alone
    assert "task t7: stalled 61 % on memory over the last 10 s" in alone
    assert "task t9: no stall measured yet" in alone


def test_explain_on_a_host_without_psi_says_so_in_one_line():
    text = explained(without_psi())
    assert text.count("stalls: not measured: ") == 1 and "stalled" not in text


def test_each_groups_stall_is_a_counter_of_seconds_by_resource_and_kind():
    got = samples(Metrics(lambda: decode(with_psi())))
    key = ("governor_group_pressure_seconds_total",
           (("group", "physics"), ("kind", "some"), ("resource", "memory")))
    assert got[key] == 310.25
    assert got[("governor_group_pressure_seconds_total",
                (("group", "ops"), ("kind", "some"), ("resource", "io")))] == 2.0
    series = [labels for name, labels in got if name == "governor_group_pressure_seconds_total"]
    assert len(series) == 6 + 3  # physics: 3 resources × 2 kinds; ops: 3 × some


def test_without_psi_there_is_no_pressure_series_at_all():
    assert not any(name.startswith("governor_group_pressure") for name, _ in samples(Metrics(lambda: decode(without_psi()))))
    assert not any(name.startswith("governor_group_pressure") for name, _ in samples(Metrics(lambda: decode(STATUS))))
