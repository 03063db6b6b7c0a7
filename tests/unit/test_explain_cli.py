"""``governor explain`` (cli/explain.py, cli/explain_view.py) against a fake socket that answers
with an explain object built by the daemon's own code (governor/core/explain.py) from a real filling.

Host: 1.75 cores, 4G. A demands <1.5 cores, 64M> (dominant: cpu, 1.5/1.75 = 6/7), B demands
<0.75 cores, 3G> (dominant: memory, 3/4). Both shares rise as t: A holds 1.75·t cores, B
λ_B·0.75 = (t / 0.75)·0.75 = t cores, so cpu saturates at 2.75·t = 1.75, t = 0.636. Both stop at
"cpu saturated": λ_A = t / (6/7) = 74.2%, λ_B = t / 0.75 = 84.8%; memory allocated
0.742·64M + 0.848·3G = 2.59G, 64.8% of 4G.

The memory queue (:data:`QUEUE`, added to the payload by the tests that need it): declared
memory is 64M + 3G of 4G, so 960M is free; task 12 (B) declares 1.5G and waits for 576M more,
held by B and A; task 13 (A, 512M) would fit and waits for its turn behind it.
"""

from __future__ import annotations

import copy
import io
import json
import shlex
import time

import pytest
from click.testing import CliRunner
from support.fake_socket import FakeSocket
from rich.console import Console

from governor.cli.explain_view import explain_renderables
from governor.cli.main import main
from governor.core.drf import progressive_filling
from governor.core.explain import explain as explain_object
from governor.core.model import GroupDemand

G = 1024**3
M = 1024**2
CAPACITY = {"cpu": 1.75, "memory": 4.0 * G}
DEMANDS = {"A": {"cpu": 1.5, "memory": 64.0 * M}, "B": {"cpu": 0.75, "memory": 3.0 * G}}
NOW = 1_700_000_100.0
QUEUE = [
    {"task": "12", "group": "B", "user": "bob", "uid": 1001, "command": ["python", "big.py"],
     "demand": {"cpu": 0.5, "memory": 1536 * M}, "queued_at": NOW - 42, "position": 1, "waiting_for": 576 * M,
     "held_by": [{"group": "B", "memory": 3 * G}, {"group": "A", "memory": 64 * M}],
     "reason": "memory: waits for 576.0M to free (held by B 3.0G, A 64.0M)"},
    {"task": "13", "group": "A", "user": "alice", "uid": 1000, "command": ["make", "-j4"],
     "demand": {"cpu": 1, "memory": 512 * M}, "queued_at": NOW - 3 * 3600 - 5 * 60, "position": 2,
     "waiting_for": 0, "held_by": [{"group": "B", "memory": 3 * G}, {"group": "A", "memory": 64 * M}],
     "reason": "its turn: the tasks ahead of it start first"},
]


def sample() -> dict:
    allocation = progressive_filling(CAPACITY, [GroupDemand(g, d, tasks=1) for g, d in DEMANDS.items()], trace=True)
    return json.loads(json.dumps(explain_object(allocation, CAPACITY, DEMANDS)))


@pytest.fixture
def served(tmp_path):
    """A fake daemon answering one ``explain`` per connection; ``.path`` is its socket."""
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": sample()}])
    yield server
    server.close()


def explain(*args: str, width: int = 120):
    return CliRunner(env={"COLUMNS": str(width)}).invoke(main, ["explain", *args])


def render(answer: dict, group: str | None = None, *, width: int = 120, now: float = NOW) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    for renderable in explain_renderables(answer, group, now=now):
        console.print(renderable)
    return console.export_text()


def with_queue() -> dict:
    return {**sample(), "queue": copy.deepcopy(QUEUE)}


def cells(text: str, first: str) -> list[list[str]]:
    """Rows of the queue table whose first cell is ``first``, as stripped cells."""
    if "Queue: " not in text:
        return []
    table = text[text.index("Queue: "):text.index("DRF filling on this host")]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")]
    return [row for row in rows if row and row[0] == first]


def test_the_sample_is_what_the_docstring_says():
    groups = sample()["groups"]
    assert groups["A"]["stop"] == groups["B"]["stop"] == "cpu saturated"
    assert round(groups["A"]["lambda"], 3) == 0.742 and round(groups["B"]["lambda"], 3) == 0.848
    assert groups["B"]["dominant_resources"] == ["memory"]


def test_json_prints_the_explain_object(served):
    result = explain("--json", "--socket", served.path)
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1 and json.loads(result.output) == sample()
    assert served.requests == [{"op": "explain"}]


def test_json_for_one_group_keeps_only_its_entry(served):
    out = json.loads(explain("B", "--json", "--socket", served.path).output)
    assert list(out["groups"]) == ["B"] and out["trace"] == sample()["trace"]


@pytest.mark.parametrize("width", [80, 120])
def test_text_gives_each_groups_reason_then_the_trace(served, width):
    result = explain("--socket", served.path, width=width)
    assert result.exit_code == 0, result.output
    text = result.output
    assert max(len(line) for line in text.splitlines()) <= width
    assert "Capacity: cpu 1.75 cores · memory 4.0G" in text
    assert "Why each group's share stopped growing" in text
    lines = text.splitlines()
    # Each group's row and the lines its wrapped cells continue on, joined.
    reasons = {}
    for i, line in enumerate(lines):
        if line.startswith(("│ A ", "│ B ")):
            rows = [row for row in lines[i:i + 3] if row.startswith("│")]
            reasons[line.split("│")[1].strip()] = " ".join(row.split("│")[-2].strip() for row in rows)
    assert "it got 74% of" in reasons["A"] and "it got 85% of" in reasons["B"]
    assert "cpu" in next(l for l in lines if l.startswith("│ A ")) and "63.6%" in next(l for l in lines if l.startswith("│ A "))
    # The trace: one event, cpu saturates and freezes both groups at the same share.
    assert "DRF filling on this host, step by step" in text
    step = next(line for line in text.splitlines() if line.startswith("│    1 "))
    cells = [c.strip() for c in step.split("│")[1:-1]]
    assert cells == ["1", "cpu saturated", "", "A, B", "63.6%", "63.6%", "100.0%", "64.8%"]


def test_one_group_shows_only_its_reason(served):
    text = explain("A", "--socket", served.path).output
    assert "│ A " in text and "│ B " not in text
    assert "B\nshare" not in text and "A, B" in text  # the trace still covers every group


def test_demand_met_reads_as_such():
    answer = sample()
    answer["groups"]["B"].update(stop="demand met", **{"lambda": 1.0})
    assert "its demand was met: it got all it asked for" in render(answer, "B")


def test_unknown_group_is_one_line_and_exit_2_with_the_known_ones(tmp_path):
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": {**sample(), "configured": {"physics": 2}}}])
    result = explain("nope", "--socket", server.path)
    server.close()
    assert result.exit_code == 2
    assert result.output == "governor: error: no group 'nope' on this host (groups: A, B, physics)\n"


def test_a_group_whose_only_task_waits_is_explained_by_its_place_in_the_queue(tmp_path):
    # A user's own group of "*" exists from her first launch; while that task waited, `explain
    # nobody` said "no group 'nobody' on this host".
    queued = copy.deepcopy(QUEUE[0])
    queued.update(group="nobody", user="nobody", uid=65534)
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": {**sample(), "queue": [queued]}}])
    result = explain("nobody", "--socket", server.path)
    server.close()
    assert result.exit_code == 0, result.output
    assert "nobody runs no task yet: its tasks wait in the queue below." in result.output
    assert "│ nobody │ nobody │" in result.output and "waits for 576.0M to free" in result.output


@pytest.fixture
def configured(tmp_path):
    """A daemon whose config also has ``physics`` (weight 2), a group with no task running."""
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": {
        **with_queue(), "configured": {"A": {"weight": 1.0, "floor": 0.25}, "B": {"weight": 1.0, "floor": 0.25},
                                       "physics": {"weight": 2.0, "floor": 0.5}}}}])
    yield server
    server.close()


def test_a_configured_group_with_no_task_shows_its_weight_and_what_it_would_get(configured):
    result = explain("physics", "--socket", configured.path, width=80)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    row = " ".join(line for line in result.output.splitlines() if line.startswith("│ "))
    # Weight 2 beside A and B (1 each): its floor, DRF's sharing incentive, 2 / (1 + 1 + 2).
    assert "│ physics │      2 │ 50.0% │ —" in row and "no task running" in row and "at least 50.0%" in row
    assert "all it asks while the others are idle" in row.replace("│", "").replace("  ", " ") or "idle" in row
    assert "│ A " not in result.output and "waiting for memory" not in result.output  # only physics
    assert "cpu saturated" in result.output  # the host's filling, without a share column per group
    assert "A\nshare" not in result.output and "│ 63.6%" not in result.output


def test_json_for_a_configured_group_with_no_task(configured):
    out = json.loads(explain("physics", "--json", "--socket", configured.path).output)
    assert out["groups"] == {} and out["configured"] == {"physics": {"weight": 2.0, "floor": 0.5}} and out["queue"] == []


def test_the_whole_explain_lists_configured_groups_with_no_task_too(configured):
    text = explain("--socket", configured.path, width=80).output
    assert "│ A " in text and "│ physics │" in text and max(map(len, text.splitlines())) <= 80


def test_no_groups_says_so(tmp_path):
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": {"capacity": CAPACITY, "groups": {},
                                                                            "trace": []}}])
    text = explain("--socket", server.path).output
    server.close()
    assert "No group has a running task: there is nothing to divide." in text
    assert "no steps: no group has a running task" in text


def test_without_a_daemon(tmp_path):
    result = explain("--socket", str(tmp_path / "absent.sock"))
    assert result.exit_code == 69
    assert result.output == (f"governor: error: governor daemon is not running (no socket at {tmp_path}/absent.sock) "
                             f"(start the daemon that serves it: sudo governor daemon --socket {shlex.quote(str(tmp_path / 'absent.sock'))} …)\n")


def test_a_reply_without_explain_object(tmp_path):
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "status": {}}])
    result = explain("--socket", server.path)
    server.close()
    assert result.exit_code == 1 and "the daemon's explain reply has no explain object" in result.output


@pytest.mark.parametrize("change, said", [
    ({"groups": {"A": [1]}}, "explain.groups.A: must be an object, got an array"),
    ({"capacity": []}, "explain.capacity: must be an object, got an array"),
    ({"trace": [5]}, "explain.trace[0]: must be an object, got an integer"),
    ({"fairshare": {"A": 3}}, "explain.fairshare.A: must be an object, got an integer"),
    ({"groups": {"A": {"sessions": 5}}}, "explain.groups.A.sessions: must be an array, got an integer"),
    ({"nodes": {"top": {"weight": "heavy"}}}, "explain.nodes.top.weight: must be a number, got a string")])
def test_a_malformed_explain_field_is_one_line_naming_it(tmp_path, change, said):
    # Each was a traceback in the views (AttributeError: 'list' object has no attribute 'get'):
    # the object is read typed now (governor.wire.explain_types).
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": {**sample(), **change}}])
    result = explain("--socket", server.path)
    server.close()
    assert (result.exit_code, result.output.count("\n")) == (1, 1), result.output
    assert f"the daemon's explain reply has a malformed {said}" in result.output


def test_a_configured_weight_alone_and_a_null_part_read_as_an_older_daemon_sent_them(tmp_path):
    answer = {**sample(), "configured": {"D": 2, "C": {"weight": 1, "floor": 0.25}}, "psi": None, "nodes": None}
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": answer}])
    result = explain("--socket", server.path, width=200)
    server.close()
    assert result.exit_code == 0, result.output
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in result.output.splitlines() if line.startswith("│")]
    assert ["D", "2", "—"] in [row[:3] for row in rows] and ["C", "1", "25.0%"] in [row[:3] for row in rows], result.output


def test_simulate_trace_and_explain_share_one_table(monkeypatch, served, tmp_path):
    import governor.cli.render

    titles = []
    real = governor.cli.render.filling_table
    monkeypatch.setattr(governor.cli.render, "filling_table", lambda **kw: titles.append(kw["title"]) or real(**kw))
    monkeypatch.setattr("governor.cli.explain_view.filling_table", governor.cli.render.filling_table)
    scenario = tmp_path / "s.toml"
    scenario.write_text('[capacity]\ncpu = 9\nmemory = "18G"\n[groups.A]\ntask = { cpu = 1, memory = "4G" }\n')
    assert CliRunner().invoke(main, ["simulate", str(scenario), "--trace"]).exit_code == 0
    assert explain("--socket", served.path).exit_code == 0
    assert titles == ["DRF filling, step by step (continuous)", "DRF filling on this host, step by step"]


@pytest.mark.parametrize("width", [80, 120])
def test_tasks_waiting_for_memory_follow_the_reasons(width):
    text = render(with_queue(), width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert (text.index("Why each group's share stopped growing") < text.index("Queue: 2 tasks waiting for memory")
            < text.index("DRF filling on this host"))
    header = next(line for line in text.splitlines() if line.startswith("┃ # "))
    assert [c.strip() for c in header.split("┃")[1:-1]] == ["#", "task", "group", "user", "memory", "waiting",
                                                            "reason"]
    # position, task, group, user, declared memory, wait so far (now - queued_at), the daemon's reason
    assert cells(text, "1")[0][:6] == ["1", "12", "B", "bob", "1.5G", "42s"]
    folded = [cells(text, "1")[0][6], *(row[6] for row in cells(text, "")[:5] if row[6])]
    assert " ".join(folded).split()[:6] == QUEUE[0]["reason"].split()[:6]
    assert cells(text, "2")[0][:6] == ["2", "13", "A", "alice", "512.0M", "3h 05m"]


def test_the_wait_so_far_is_counted_from_now():
    assert cells(render(with_queue(), now=NOW + 60), "1")[0][5] == "1m"


def test_one_group_shows_only_its_waiting_tasks():
    text = render(with_queue(), "A")
    assert cells(text, "2")[0][:3] == ["2", "13", "A"] and cells(text, "1") == []
    answer = with_queue()
    answer["queue"] = answer["queue"][:1]  # only B waits
    assert "Queue:" not in render(answer, "A")


def test_an_empty_queue_and_a_payload_from_an_older_daemon_without_one_render():
    answer = sample()
    answer["queue"] = []
    assert "waiting for memory" not in render(answer)
    answer.pop("queue")
    text = render(answer, width=80)
    assert "waiting for memory" not in text and "Why each group's share stopped growing" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_command_line_counts_the_wait_from_the_clock(tmp_path):
    queue = copy.deepcopy(QUEUE)
    queue[0]["queued_at"] = time.time() - 90
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": {**sample(), "queue": queue}}])
    result = explain("--socket", server.path, width=80)
    server.close()
    assert result.exit_code == 0, result.output
    assert "waiting for memory" in result.output
    assert cells(result.output, "1")[0][:6] == ["1", "12", "B", "bob", "1.5G", "1m"]


def test_a_group_tree_is_explained_level_by_level_with_fair_share():
    from governor.core.fairshare import Standing
    from governor.core.hdrf import TreeNode, hierarchical_filling

    capacity = {"cpu": 8.0, "memory": 16.0 * 1024**3}
    demands = {"lab1": {"cpu": 8.0}, "lab2": {"cpu": 8.0}, "ops": {"cpu": 8.0}}
    tree = [TreeNode("dept"), TreeNode("lab1", "dept"), TreeNode("lab2", "dept")]
    allocation = hierarchical_filling(capacity, [GroupDemand(g, d, tasks=1) for g, d in demands.items()], tree,
                                      trace=True)
    standing = Standing(weight=1.0, usage=7200.0, usage_share=0.8, weight_share=0.5, factor=0.33, effective=0.33)
    answer = json.loads(json.dumps(explain_object(allocation, capacity, demands, fairshare={"ops": standing})))
    text = render(answer)
    lines = text.splitlines()
    dept = next(i for i, line in enumerate(lines) if "dept/" in line)
    assert any("│   lab1" in line for line in lines[dept:dept + 4])  # under its department
    assert "its child groups together" in text and "the sum of its child groups'" in text
    assert "Fair share over time" in text and "2.00 host-h" in text and "0.33" in text
    assert answer["nodes"]["dept"]["allocation"]["cpu"] == pytest.approx(4.0)
