"""``governor ps``'s GPUs (issue 26, point 3): the rows carry the GPUs each task holds, and the
table shows them in a column only when a listed task holds or declared GPUs."""

from __future__ import annotations

import copy
import io

import pytest
from rich.console import Console
from support.task_rows import ROWS

from governor.cli.ps_view import tasks_table
from governor.wire.ps import task_rows
from governor.core.queue import Entry
from governor.core.state import Task
from governor.wire.ps_types import TaskRow, decode_rows

G = 1024**3


def render(rows: list[dict], width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(tasks_table(decode_rows(TaskRow, rows, "tasks"), now=1100.0, users=True))
    return console.file.getvalue()


def gpu_rows() -> list[dict]:
    rows = copy.deepcopy(ROWS)
    rows[0].update(gpus=[0, 1, 2, 3, 6])
    rows[0]["demand"]["gpu"] = rows[0]["reserved"]["gpu"] = 5
    rows[1].update(gpus=[])
    rows[1]["demand"]["gpu"] = 2  # queued: it holds none yet
    return rows


def cells(text: str, first: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.split()[:1] == [first])


@pytest.mark.parametrize("width", [120, 200])  # at 80 the long name leaves no room: left out
def test_a_gpus_column_shows_the_gpus_each_task_holds(width):
    text = render(gpu_rows(), width)
    assert max(len(line) for line in text.splitlines()) <= width
    header = next(line.split() for line in text.splitlines() if line.split()[:1] == ["id"])
    assert "gpus" in header
    assert cells(text, "7")[-1] == "0-3,6"  # runs shown as a range
    assert "wants 2" in text  # the queued one: what it declared
    assert "1.5/2/1.98" in text and "4G/4G/812M" in text  # the amounts still whole


def test_no_gpu_held_or_declared_no_gpus_column():
    rows = copy.deepcopy(ROWS)
    for row in rows:
        row["gpus"] = []  # what a daemon governing GPUs sends for tasks without any
    assert "gpus" not in render(rows, 200)
    assert render(rows, 80) == render(ROWS, 80)  # the same table as before GPUs


def test_a_running_task_without_gpus_beside_one_with_shows_a_dash():
    rows = gpu_rows()
    rows[1].update(state="running", started=1000.0, position=None, reason=None)
    rows[1]["demand"].pop("gpu")
    text = render(rows, 200)
    assert cells(text, "8")[-1] == "—"


def test_the_daemons_rows_carry_each_tasks_gpus():
    running = Task("7", "A", 100, 0, "root", ("train",), {"cpu": 1.0, "memory": G, "gpu": 2}, 1000.0,
                   devices={"gpu": (0, 1)})
    waiting = Task("8", "A", 101, 0, "root", ("train",), {"cpu": 1.0, "memory": G, "gpu": 1}, 1000.0)
    rows = task_rows([running], [Entry(waiting, 1050.0)], allocation=None, usage={}, positions={},
                     processes=lambda task: ([], 0), asker=0)
    assert [(row["id"], row["gpus"], row["demand"].get("gpu")) for row in rows] == [("7", [0, 1], 2), ("8", [], 1)]
    assert rows[0]["reserved"] == {"memory": G, "gpu": 2}  # GPUs are held like memory, never guaranteed
    assert "gpu" not in rows[0]["guarantee"]
