"""``governor top``'s screen (cli/top_view.py) and keys (cli/top_state.py), rendered to text at
80×24 and 120×40 from the sample status plus the ``watch`` additions (events, fair level).

Sample shares (status_sample.py): physics 50% (weight 2), ops 25% (weight 1), idle 0%; the fair
level is 25% per unit of weight, so physics's bar is measured against 50% and ops's against 25%.
physics uses 8.4 cores of its guaranteed 8 (borrows 0.4); two tasks wait in the memory queue.
"""

from __future__ import annotations

import copy
import io

import pytest
from rich.console import Console

from governor.cli.top_state import SORTS, TopState, parse_keys, press, visible_groups
from governor.cli.top_view import top_view
from support.status_sample import NOW, STATUS, without_new_keys
from governor.wire.status_json import decode

SIZES = [(80, 24), (120, 40)]


def sample() -> dict:
    status = copy.deepcopy(STATUS)
    status["fair_level"] = 0.25
    status["groups"]["physics"]["pressure"] = {"cpu.nr_throttled": 12, "memory.high": 3, "memory.oom_kill": 0}
    status["groups"]["ops"]["pressure"] = {"cpu.nr_throttled": 0, "memory.high": 0, "memory.oom_kill": 1}
    status["events"] = [
        {"at": NOW - 60, "kind": "task_started", "message": "task t8 (pid 5001) started in ops"},
        {"at": NOW - 3, "kind": "refill", "message": "refill after launch: 2 groups"},
    ]
    return status


def render(state: TopState, width: int = 80, height: int = 24) -> str:
    console = Console(record=True, width=width, height=height, file=io.StringIO())
    console.print(top_view(state, width=width, height=height, now=NOW))
    return console.export_text()


def keys(state: TopState, *pressed: str) -> TopState:
    for key in pressed:
        press(state, key)
    return state


def group_rows(text: str) -> list[str]:
    """The group names of the groups table, top to bottom."""
    return [line[3:].split()[0] for line in text.splitlines() if line[:1] in " >" and line[1:3] in ("▸ ", "▾ ")]


def row(text: str, group: str) -> str:
    return next(line for line in text.splitlines() if line[3:].startswith(group + " "))


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_fits_the_screen_and_shows_groups_shares_and_bars(width, height):
    text = render(TopState(status=decode(sample()), received=NOW), width, height)
    lines = text.splitlines()
    assert len(lines) <= height and max(len(line) for line in lines) <= width
    assert group_rows(text) == ["physics", "ops", "idle"]  # by share, largest first
    # physics at 50% = its fair target 25% × 2: a full bar; idle has none.
    bar = "█" * (6 if width < 100 else 10)
    assert f"{bar} 50.0%" in row(text, "physics")
    assert f"{bar} 25.0%" in row(text, "ops")
    assert "·" * len(bar) + " 0.0%" in row(text, "idle")
    # guarantee/use for cpu, reserved/use for memory (16G declared, not λ × 16G), what physics
    # borrows above its guarantee, the pressure signs.
    assert "8/8.4" in row(text, "physics") and "16G/11G" in row(text, "physics")
    assert "+0.4c" in row(text, "physics") and "+" not in row(text, "ops")
    assert "thr 12 soft 3" in row(text, "physics") and "oom 1" in row(text, "ops")  # soft: held at a soft cap
    header = next(line for line in lines if line.startswith("group"))
    assert "cpu g/u" in header and "memory r/u" in header and "borrow" in header and "a/u" not in header
    assert "guaranteed 12 · used 10.65 of 16 cores" in text
    assert "reserved 28.0G · used 20.0G of 64.0G" in text
    assert "fair level 25.0% per unit of weight · last filling 3s ago (launch, 1.2 ms)" in text
    assert "3s ago refill       refill after launch: 2 groups" in text


def test_wide_screens_show_weight_dominant_fair_and_io_columns_narrow_ones_drop_io():
    wide, narrow = render(TopState(status=decode(sample())), 120, 40), render(TopState(status=decode(sample())), 80, 24)
    header = next(line for line in wide.splitlines() if line.startswith("group"))
    assert header.split() == ["group", "w", "tasks", "dom", "share", "▼", "fair", "cpu", "g/u", "memory", "r/u",
                              "nvme0n1", "r", "g/u", "nvme0n1", "w", "g/u", "borrow", "pressure"]
    assert "200M/150M" in row(wide, "ops")
    assert "nvme0n1 r g/u" not in narrow and "200M/150M" not in narrow
    narrow_header = next(line for line in narrow.splitlines() if line.startswith("group")).split()
    assert "fair" not in narrow_header and "borrow" in narrow_header  # the fair target goes before the borrowing
    assert row(narrow, "physics").split()[:4] == [">▸", "physics", "2", "2"]  # weight, tasks kept


def test_share_bar_is_measured_against_the_weighted_fair_level():
    status = sample()
    status["fair_level"] = 0.5  # physics's target is now 100%: its 50% fills half the bar
    text = render(TopState(status=decode(status)), 80)
    assert "███···· 50.0%" not in text and "███··· 50.0%" in row(text, "physics")
    assert "███··· 25.0%" in row(text, "ops")  # 25% of a 50% target


def test_enter_expands_the_selected_group_with_its_tasks_and_collapses_it():
    state = TopState(status=decode(sample()))
    text = render(keys(state, "enter"), 80)
    assert row(text, "physics").startswith(">▾")
    assert "▾ physics: 2 tasks" in text
    header = next(line for line in text.splitlines() if line.lstrip().startswith("pid"))
    assert header.split()[-4:] == ["cap", "guarantee", "reserved", "use"]
    task = next(line for line in text.splitlines() if "4242" in line)
    assert task.split()[:4] == ["4242", "alice", "10m", "python"]
    assert "8c 12G" in task and "6.4c" in task and "9.6G" not in task and "7.25c 9.0G" in task  # cap, λ × cpu, use
    assert task.split()[-3] == "12G"  # reserved: all it declared
    text = render(keys(state, "enter"), 80)
    assert "4242" not in text and row(text, "physics").startswith(">▸")


def test_a_task_held_at_a_soft_memory_cap_says_soft_and_one_at_a_hard_cap_does_not():
    # Issue 33, point 1: every view calls a soft cap a soft cap (the sample's tasks: memory.high).
    status = sample()
    soft = next(line for line in render(keys(TopState(status=decode(status)), "enter"), 120, 40).splitlines() if "4242" in line)
    assert "8c 12G soft" in soft
    for task in status["groups"]["physics"]["tasks"]:
        task["limits"] = {"memory.limit_in_bytes": str(12 * 1024**3)}  # v1's hard cap
    hard = next(line for line in render(keys(TopState(status=decode(status)), "enter"), 120, 40).splitlines() if "4242" in line)
    assert "8c 12G" in hard and "soft" not in hard


def test_j_k_and_arrows_move_the_selection():
    state = TopState(status=decode(sample()))
    assert row(render(state), "physics").startswith(">")
    text = render(keys(state, "j", "down", "down"))  # stops at the last group
    assert row(text, "idle").startswith(">") and not row(text, "physics").startswith(">")
    text = render(keys(state, "k", "enter"))
    assert row(text, "ops").startswith(">▾") and "5001" in text and "backup.sh" in text


def test_s_cycles_the_sort_column_and_shows_which():
    state = TopState(status=decode(sample()))
    orders = {}
    for sort in SORTS:
        assert state.sort == sort
        text = render(state, 120, 40)
        orders[sort] = group_rows(text)
        assert f"s sort: {sort}" in text and f"sort: {sort}" in text.splitlines()[0]
        press(state, "s")
    assert state.sort == SORTS[0]  # back to the start
    assert orders["share"] == orders["cpu"] == ["physics", "ops", "idle"]
    assert orders["name"] == ["idle", "ops", "physics"]
    header = lambda sort: next(line for line in render(TopState(status=decode(sample()), sort=sort), 120, 40).splitlines()
                               if line.startswith("group"))
    assert "cpu g/u ▼" in header("cpu") and "share ▼" not in header("cpu")
    assert header("name").startswith("group ▲")


def test_sort_by_memory_and_tasks_changes_the_order():
    status = sample()
    status["groups"]["ops"]["usage"]["memory"] = 20 * 1024**3  # now above physics's 11G
    assert visible_groups(TopState(status=decode(status), sort="memory")) == ["ops", "physics", "idle"]
    status["groups"]["ops"]["tasks"] *= 2
    assert visible_groups(TopState(status=decode(status), sort="tasks")) == ["ops", "physics", "idle"]


def test_slash_filters_groups_by_name():
    state = keys(TopState(status=decode(sample())), "/", "o", "p", "x")
    text = render(state)
    assert "filter: opx▏" in text.splitlines()[-1]  # typing shows in the key bar
    assert group_rows(text) == ["physics", "ops", "idle"]  # not applied until enter
    text = render(keys(state, "backspace", "s", "enter"))  # 's' while typing is text, not sort
    assert state.sort == "share" and group_rows(text) == ["ops"]
    assert "filter: ops" in text.splitlines()[0]
    text = render(keys(state, "/", "z", "enter"))
    assert "no group matches 'opsz'" in text and group_rows(text) == []
    assert group_rows(render(keys(state, "esc"))) == ["physics", "ops", "idle"]


def test_question_mark_toggles_the_help():
    state = keys(TopState(status=decode(sample())), "?")
    text = render(state, height=30)
    assert "next sort column (share, cpu, memory, tasks, name)" in text
    assert "thr: periods throttled in the last second" in text and group_rows(text) == []
    lines = text.splitlines()
    assert any(line.split()[:3] == ["cpu", "g/u", "guaranteed"] for line in lines)
    assert any(line.split()[:3] == ["memory", "r/u", "reserved"] for line in lines)
    assert any(line.split()[:4] == ["borrow", "use", "above", "the"] for line in lines)
    assert any(line.split()[:4] == ["queue", "tasks", "waiting,", "in"] for line in lines)
    assert group_rows(render(keys(state, "?"))) == ["physics", "ops", "idle"]


def test_q_quits_but_not_while_typing_a_filter():
    state = keys(TopState(status=decode(sample())), "/", "q")
    assert not state.quit and state.editing == "q"
    assert keys(state, "esc", "q").quit


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_disconnected_banner_keeps_the_last_data(width, height):
    state = TopState(status=decode(sample()), received=NOW - 5,
                     down="governor daemon is not running (no socket at /run/governor/governor.sock)")
    lines = render(state, width, height).splitlines()
    assert lines[1].startswith("daemon not reachable — reconnecting… (data 5s old): governor daemon is not")
    assert len(lines[1]) <= width
    assert group_rows("\n".join(lines)) == ["physics", "ops", "idle"]


def test_before_the_first_update():
    text = render(TopState(down="governor daemon is not running (no socket at /x)"))
    assert "daemon not reachable — reconnecting…" in text and "waiting for the first update" in text
    assert "no group has a running task" not in text


def test_many_groups_scroll_to_keep_the_selection_on_an_80x24_screen():
    status = sample()
    for i in range(40):
        status["groups"][f"user{i:02d}"] = {**copy.deepcopy(status["groups"]["idle"]), "dominant_share": i / 1000}
    state = keys(TopState(status=decode(status), sort="name", expanded={"idle"}), *["j"] * 30)
    lines = render(state, 80, 24).splitlines()
    assert len(lines) <= 24
    selected = [line for line in lines if line.startswith(">")]
    assert len(selected) == 1 and "user27" in selected[0]  # idle, ops, physics, user00… : the 31st
    assert "recent events" in lines[-4]  # events keep at least two lines


def test_parse_keys_decodes_arrows_enter_escape_and_text():
    assert parse_keys(b"\x1b[A\x1b[Bjk\r\n/\x7fq?") == ["up", "down", "j", "k", "enter", "enter", "/", "backspace",
                                                        "q", "?"]
    assert parse_keys(b"\x1bOA\x1bOB") == ["up", "down"]  # application cursor mode
    assert parse_keys(b"\x1b") == ["esc"]
    assert parse_keys(b"\x1b[5~x\x1b[1;5C" + "é".encode() + b"\t") == ["x", "é"]  # unknown sequences and tabs dropped


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_the_memory_queue_shows_below_the_groups(width, height):
    lines = render(TopState(status=decode(sample())), width, height).splitlines()
    assert len(lines) <= height and max(len(line) for line in lines) <= width
    first = next(i for i, line in enumerate(lines) if line.startswith("queue: "))
    assert lines[first - 1].startswith(" ▸ idle") and lines[first + 2] == "recent events"  # groups, queue, events
    # The head of the queue: what it declared, how long it has waited, for how much, held by whom.
    assert lines[first].startswith("queue: 2 waiting · #1 ")
    assert "t10 (ops, bob) 40G waits 42s: memory: waits for 4.0G" in lines[first]
    # Behind it, a task that would fit waits for its turn.
    assert "t11 (physics, carol) 8.0G waits 5s: its turn" in lines[first + 1]


def test_a_narrow_screen_drops_the_word_task_then_cuts_the_queue_line():
    status = sample()
    line = next(line for line in render(TopState(status=decode(status)), 60, 24).splitlines() if line.startswith("queue:"))
    assert len(line) == 60 and line.endswith("…") and "task t10" not in line
def test_the_queue_keeps_a_line_when_the_groups_fill_the_screen():
    status = sample()
    for i in range(40):
        status["groups"][f"user{i:02d}"] = copy.deepcopy(status["groups"]["idle"])
    lines = render(TopState(status=decode(status)), 80, 24).splitlines()
    assert len(lines) <= 24
    assert sum(line.startswith("queue: 2 waiting") for line in lines) == 1
    assert not any("#2 task t11" in line for line in lines)  # no room for more than the head


def test_an_empty_queue_shows_no_queue_line():
    status = sample()
    status["queue"] = []
    text = render(TopState(status=decode(status)))
    assert "queue:" not in text and "waiting ·" not in text


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_a_status_from_an_older_daemon_without_the_new_keys_renders(width, height):
    status = without_new_keys(sample())
    lines = render(TopState(status=decode(status)), width, height).splitlines()
    assert len(lines) <= height and max(len(line) for line in lines) <= width
    assert group_rows("\n".join(lines)) == ["physics", "ops", "idle"]
    assert not any(line.startswith("queue:") for line in lines)
    assert "+0.4c" not in row("\n".join(lines), "physics")  # no borrowed key: nothing borrowed shown


def test_a_group_tree_shows_children_under_their_parent_and_enter_folds_them():
    status = sample()
    science = copy.deepcopy(status["groups"]["ops"])
    science.update(internal=True, tasks=[], parent=None)
    status["groups"]["science"] = science
    status["groups"]["physics"]["parent"] = "science"
    status["groups"]["ops"]["parent"] = None
    state = TopState(status=decode(status), sort="name")
    assert visible_groups(state) == ["idle", "ops", "science", "physics"]  # a child right below its parent
    text = render(state, 100)
    assert "   ▸ physics" in text and " - science" in text  # indented one level; science unfolded
    keys(state, "j", "j", "enter")  # select science: Enter folds its child groups
    assert visible_groups(state) == ["idle", "ops", "science"] and ">+ science" in render(state, 100)
    keys(state, "enter")
    assert visible_groups(state) == ["idle", "ops", "science", "physics"]
    state.filter = "phys"  # a filter shows the matches, flat
    assert visible_groups(state) == ["physics"]


# ── GPUs (issue 26, point 3) ─────────────────────────────────────────────────────────────

def gpu_sample() -> dict:
    from support.status_sample import with_gpus

    return with_gpus(sample())


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_a_gpus_line_says_who_holds_each_gpu_under_the_resource_bars(width, height):
    text = render(TopState(status=decode(gpu_sample()), received=NOW), width, height)
    lines = text.splitlines()
    assert len(lines) <= height and max(len(line) for line in lines) <= width
    gpu = next(i for i, line in enumerate(lines) if line.startswith("gpu "))
    assert lines[gpu].rstrip().endswith("reserved 3 of 4 GPUs") and "used" not in lines[gpu]  # use unmeasured
    assert lines[gpu + 1].rstrip() == "gpus      0,1 physics/t7 alice · 3 ops/t8 bob · 2 free"
    assert lines[gpu + 2].startswith("fair level")
    header = next(line for line in lines if line.startswith("group"))
    assert "gpu r" in header and "gpu r/u" not in header
    at = header.index("gpu r")
    for group, gpus in (("physics", "2"), ("ops", "1"), ("idle", "—")):
        assert row(text, group)[at:at + len("gpu r")].strip() == gpus  # the GPUs its tasks hold


def test_a_narrow_screen_drops_the_users_from_the_gpus_line_then_cuts_it():
    status = gpu_sample()
    narrow = render(TopState(status=decode(status)), 50, 24)
    assert "gpus      0,1 physics/t7 · 3 ops/t8 · 2 free" in narrow
    assert max(len(line) for line in narrow.splitlines()) <= 50
    tiny = render(TopState(status=decode(status)), 30, 24)
    assert max(len(line) for line in tiny.splitlines()) <= 30
    assert any(line.startswith("gpus      0,1 physics") and line.rstrip().endswith("…") for line in tiny.splitlines())


def test_expanded_tasks_show_the_gpus_each_holds():
    state = keys(TopState(status=decode(gpu_sample())), "enter")
    text = render(state, 100, 30)
    header = next(line for line in text.splitlines() if line.lstrip().startswith("pid"))
    assert header.split()[:5] == ["pid", "user", "age", "gpus", "command"]
    t7 = next(line for line in text.splitlines() if "4242" in line)
    t9 = next(line for line in text.splitlines() if "4300" in line)
    assert t7.split()[3] == "0,1" and t9.split()[3] == "—"
    assert "8c 12G 2gpu" in t7 and "12G 2gpu" in t7  # cap and reserved count the GPUs
    # A group whose tasks hold no GPU gets no gpus column.
    plain = render(keys(TopState(status=decode(sample())), "enter"), 100, 30)
    assert "gpus" not in next(line for line in plain.splitlines() if line.lstrip().startswith("pid"))


def test_no_gpus_no_gpus_line():
    text = render(TopState(status=decode(sample())), 120, 40)
    assert not any(line.startswith(("gpus", "gpu ")) for line in text.splitlines())


def test_gpu_holders_are_shown_as_text():
    status = gpu_sample()
    status["gpus"][0].update(group="[bold]x[/]\x1b[8m", task="[/oops]")
    text = render(TopState(status=decode(status)), 120, 40)
    assert "\x1b" not in text and "[bold]x[/]?[8m/[/oops]" in text


def test_top_batch_prints_n_plain_snapshots_with_every_groups_tasks(monkeypatch):
    """Issue 44.5: `top -b -n N`, as top and htop have: plain text a script or a log can keep."""
    from click.testing import CliRunner

    import governor.cli.client as client
    from governor.cli.main import main
    from governor.wire.reply_types import StatusReply

    asked = []

    def stream(path, request, timeout):
        asked.append(request.interval)
        while True:
            yield StatusReply.from_json({"status": sample()})

    monkeypatch.setattr(client, "stream", stream)
    monkeypatch.setenv("COLUMNS", "100")
    result = CliRunner().invoke(main, ["top", "-b", "-n", "2", "-d", "5", "--socket", "/nonexistent"])
    assert result.exit_code == 0, result.output
    assert asked == [5.0]
    snapshots = result.output.split("\n\n")
    assert len(snapshots) == 2
    text = snapshots[0]
    assert "\x1b[" not in result.output and "q quit" not in result.output
    assert all(group in text for group in sample()["groups"])
    assert "4242 alice" in text  # an expanded group's task
    assert all(line == line.rstrip() for line in text.splitlines())
    assert "refill after launch" in text
    assert max(map(len, text.splitlines())) <= 100
    refused = CliRunner().invoke(main, ["top", "-n", "1"])
    assert refused.exit_code == 2 and "goes with -b" in refused.output
