"""The ``governor status`` renderables (cli/status_view.py), rendered to strings at 80 and 120 columns."""

from __future__ import annotations

import copy

import pytest

from governor.cli.status_view import BORROWED_WIDTH
from support.rendered import render
from support.status_sample import NOW, STATUS, without_new_keys


def headers(text: str) -> list[list[str]]:
    """Every table's header row, as stripped cells."""
    return [[c.strip() for c in line.split("┃")[1:-1]] for line in text.splitlines() if line.startswith("┃")]


def rows(text: str, first: str) -> list[list[str]]:
    """Table body rows whose first cell is ``first``, as stripped cells."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]
    return [row for row in cells if row and row[0] == first]


@pytest.mark.parametrize("width", [80, 120])
def test_fits_the_width_and_shows_every_group(width):
    text = render(STATUS, width)
    assert max(len(line) for line in text.splitlines()) <= width
    for group in ("physics", "ops", "idle"):
        assert group in text


@pytest.mark.parametrize("width", [80, 120])
def test_groups_table_rows(width):
    text = render(STATUS, width)
    # group, weight, floor, tasks, λ, dominant, share, stopped by (an idle group: listed, "idle")
    assert rows(text, "physics")[0] == ["physics", "2", "50.0%", "2", "0.8", "cpu", "50.0%", "cpu saturated"]
    assert rows(text, "ops")[0] == ["ops", "1", "25.0%", "1", "1", "cpu", "25.0%", "demand met"]
    assert rows(text, "idle") == [["idle", "1", "25.0%", "0", "—", "—", "0.0%", "idle"]]


@pytest.mark.parametrize("width", [80, 120])
def test_capacity_and_per_resource_usage(width):
    text = render(STATUS, width)
    assert ["resource", "capacity", "guaranteed", "reserved", "used"] in headers(text)
    assert rows(text, "cpu")[0] == ["cpu", "16 cores", "12 (75%)", "—", "10.65 (67%)"]
    assert rows(text, "memory")[0] == ["memory", "64.0G", "—", "28.0G (44%)", "20.0G (31%)"]
    assert rows(text, "nvme0n1 read")[0] == ["nvme0n1 read", "2.0G/s", "200.0M/s (10%)", "—", "150.0M/s (7%)"]
    # Cap, guarantee, reserved, use and borrowed: physics's first line is its cpu (it uses 8.4
    # of its guaranteed 8, borrowing 0.4); memory is reserved, never guaranteed nor borrowed.
    # At 80 columns the borrowed column (use − guarantee) goes rather than an amount being cut.
    cut = None if width >= BORROWED_WIDTH else -1
    assert "Cap, guarantee, reserved and use" in text
    assert ["group", "resource", "cap", "guarantee", "reserved", "use", "borrowed"][:cut] in headers(text)
    assert rows(text, "physics")[1] == ["physics", "cpu", "10", "8", "—", "8.4", "0.4"][:cut]
    assert ["", "memory", "16.0G", "—", "16.0G", "11.0G", "—"][:cut] in rows(text, "")
    assert rows(text, "ops")[1] == ["ops", "cpu", "4", "4", "—", "2.25", "—"][:cut]
    assert ["", "nvme0n1 read", "200.0M/s", "200.0M/s", "—", "150.0M/s", "—"][:cut] in rows(text, "")


def test_header_times_are_relative_to_now():
    text = render(STATUS, 80)
    assert "governor pid 812, up 2h 03m" in text
    assert "cgroup v2 at /sys/fs/cgroup/governor.slice" in text
    assert "io nvme0n1: guarantees by io.max (fallback: hard limit, not work-conserving)" in text
    assert "last filling 3s ago (launch, 1.2 ms)" in text
    later = render(STATUS, 80, now=NOW + 2 * 86400)
    assert "up 2d 2h" in later and "last filling 2d 0h ago" in later


def test_task_list_truncates_the_command_and_humanises_byte_limits():
    text = render(STATUS, 80)
    assert "t7 pid    4242 · alice · python train.py --epochs 100 --data /sc…" in text
    assert "/scratch/alice/imagenet" not in text
    assert "cpu.max 800000 100000 · memory soft cap 12.0G" in text  # memory.high: a soft cap, so called
    assert "cap    cpu 8 · memory 12.0G" in text  # what the task declared
    assert "use    cpu 7.25 · memory 9.0G" in text


def test_a_hard_memory_cap_is_called_so_on_v2_and_v1():
    # Issue 33, point 1: status named the kernel file (memory.max), not the kind of cap.
    for file in ("memory.max", "memory.limit_in_bytes"):
        status = copy.deepcopy(STATUS)
        status["groups"]["physics"]["tasks"][0]["limits"] = {file: str(12 * 1024**3)}
        text = render(status, 120)
        assert "limits memory hard cap 12.0G" in text and file not in text


def test_a_groups_memory_protection_heads_its_task_list():
    status = copy.deepcopy(STATUS)
    status["groups"]["physics"]["limits"] = {"cpu.weight": "5000", "memory.min": str(4 * 1024**3),
                                             "memory.low": str(12 * 1024**3)}
    text = render(status, 120)
    assert "protected memory.min 4.0G · memory.low 12.0G" in text
    assert "protected" not in render(STATUS, 120)  # none written (cgroup v1, or turned off)


def test_groups_without_tasks_get_no_task_list():
    text = render(STATUS, 120)
    assert "physics: 2 tasks" in text and "ops: 1 task" in text
    assert "idle:" not in text


def test_never_filled_and_sparse_snapshots_render():
    text = render({}, 80)
    assert "last filling: never" in text
    sparse = copy.deepcopy(STATUS)
    del sparse["groups"]["ops"]["usage"], sparse["groups"]["physics"]["tasks"][0]["limits"]
    sparse["groups"]["physics"]["extra"] = {"unknown": "key"}
    text = render(sparse, 80)
    assert ["", "nvme0n1 read", "200.0M/s", "200.0M/s", "—", "—"] in rows(text, "")  # (80: no borrowed)
    assert "limits —" in text


@pytest.mark.parametrize("width", [80, 120])
def test_queue_table_in_admission_order(width):
    text = render(STATUS, width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "Queue: 2 tasks waiting for memory" in text
    assert text.index("Cap, guarantee, reserved and use") < text.index("Queue:") < text.index("physics: 2 tasks")
    assert ["#", "task", "group", "user", "memory", "waiting", "reason"] in headers(text)
    # #1 needs 4G more to free; #2 would fit and waits its turn: the daemon's one reason each.
    first = rows(text, "1")[0]
    assert first[:6] == ["1", "t10", "ops", "bob", "40.0G", "42s"]
    folded = " ".join([first[6], *(row[6] for row in rows(text, "") if len(row) == 7)])
    assert folded.split()[:8] == STATUS["queue"][0]["reason"].split()[:8]
    assert rows(text, "2")[0][:6] == ["2", "t11", "physics", "carol", "8.0G", "5s"]
    later = render(STATUS, width, now=NOW + 3600)
    assert rows(later, "1")[0][5] == "1h 00m"


def test_no_queue_no_queue_table_and_proportional_io_says_so():
    status = copy.deepcopy(STATUS)
    status["queue"] = []
    status["daemon"]["io_sharing"] = {"nvme0n1": "io.weight", "sda": "io.bfq.weight"}
    text = render(status, 80)
    assert "Queue" not in text and "waiting for memory" not in text
    assert "io nvme0n1: guarantees by io.weight (work-conserving)" in text
    assert "io sda: guarantees by io.bfq.weight (work-conserving)" in text
    assert "fallback" not in text


@pytest.mark.parametrize("width", [80, 120])
def test_a_status_from_an_older_daemon_without_the_new_keys_renders(width):
    text = render(without_new_keys(STATUS), width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "Queue" not in text and "io nvme0n1" not in text and "fallback" not in text
    assert rows(text, "physics")[1] == ["physics", "cpu", "10", "8", "—", "8.4", "—"][:None if width > 80 else -1]
    assert "physics: 2 tasks" in text


def test_memory_is_shown_reserved_not_guaranteed():
    # Issue 23: "guarantee" meant λ × declared memory in some views and all admitted memory in
    # others; memory has one word, reserved (all its admitted tasks declared), never λ · 16G.
    text = render(STATUS, 120)
    assert ["", "memory", "16.0G", "—", "16.0G", "11.0G", "—"] in rows(text, "")
    assert "12.8G" not in text


# ── GPUs (issue 26, point 3) ─────────────────────────────────────────────────────────────

@pytest.mark.parametrize("width", [80, 120])
def test_the_gpus_table_says_who_holds_each_gpu(width):
    from support.status_sample import with_gpus

    text = render(with_gpus(STATUS), width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "GPUs: 3 of 4 held" in text
    assert text.index("Cap, guarantee, reserved and use") < text.index("GPUs: 3 of 4") < text.index("Queue:")
    assert ["gpu", "node", "uuid", "name", "task", "group", "user"] in headers(text)
    assert rows(text, "0")[0][:3] + rows(text, "0")[0][4:] == ["0", "/dev/nvidia0", "GPU-8a3bbf48", "t7", "physics",
                                                               "alice"]
    assert rows(text, "2")[0] == ["2", "/dev/nvidia2", "—", "—", "free", "", ""]  # no UUID from NVML; free
    assert rows(text, "3")[0][2:3] + rows(text, "3")[0][4:] == ["MIG-4f0c1234", "t8", "ops", "bob"]
    # gpu is a resource like memory: capacity, reserved (never guaranteed), a plain number.
    assert rows(text, "gpu")[0] == ["gpu", "4", "—", "3 (75%)", "—"]
    assert ["", "gpu", "2", "—", "2", "—", "—"][:None if width >= BORROWED_WIDTH else -1] in rows(text, "")
    # Each task says which GPUs it holds.
    assert "cap    cpu 8 · memory 12.0G · gpu 2" in text and "gpus   0,1" in text and "gpus   3" in text
    assert text.count("gpus   ") == 2  # t9 holds none: no line


def test_a_draining_gpu_is_shown_draining_not_free():
    from support.status_sample import with_gpus

    status = with_gpus(STATUS)
    status["gpus"][2]["draining"] = True  # its task ended; a process may still hold its node
    text = render(status, 120)
    assert rows(text, "2")[0] == ["2", "/dev/nvidia2", "—", "—", "draining", "", ""]
    assert "GPUs: 3 of 4 held" in text


def test_the_gpus_table_says_what_keeps_others_from_the_gpus():
    from support.status_sample import with_gpus

    status = with_gpus(STATUS)
    status["daemon"]["gpu_guard"] = {"kind": "tasks", "guarded": [], "notes": []}
    assert "outside governor's tasks: processes are NOT kept from GPUs" in render(status, 120)
    status["daemon"]["gpu_guard"] = {"kind": "sessions", "guarded": ["/sys/fs/cgroup/user.slice"], "notes": []}
    assert "outside governor's tasks: GPU nodes denied on /sys/fs/cgroup/user.slice" in render(status, 120)


def test_no_gpus_governed_no_gpus_table():
    text = render(STATUS, 120)
    assert "GPUs" not in text and "gpus " not in text


def test_gpu_names_and_uuids_are_shown_as_text():
    from support.status_sample import with_gpus

    status = with_gpus(STATUS)
    status["gpus"][0]["name"] = "[bold red]evil[/] \x1b]0;PWNED\x07"
    status["gpus"][1]["uuid"] = "GPU-[/oops]\x1b[8m"
    status["gpus"][2]["node"] = "/dev/[/x]"
    text = render(status, 120)
    assert "\x1b" not in text and "\x07" not in text
    assert "[bold red]evil[/]" in text and "GPU-[/oops]?[8m"[:12] in text and "/dev/[/x]" in text


def test_gpu_lists_and_short_uuids():
    from governor.cli.view_common import gpu_holder, gpu_list, short_uuid
    from governor.wire.status_types import Gpu

    assert [gpu_list(x) for x in ([0, 1], [0, 1, 2, 3, 6], [5], [], None, [2, "x", True, 1, 3])] == [
        "0,1", "0-3,6", "5", "—", "—", "1-3"]
    assert short_uuid("GPU-8a3bbf48-4b8c-4d2e-9f10-0123456789ab") == "GPU-8a3bbf48"
    assert short_uuid("MIG-GPU-8a3bbf48-4b8c-4d2e-9f10-0123456789ab/1/0") == "MIG-GPU-8a3bbf48"
    assert short_uuid("MIG-4f0c1234-aaaa-4bbb-8ccc-dddddddddddd") == "MIG-4f0c1234"
    assert [short_uuid(x) for x in (None, "", 7)] == ["—", "—", "—"]
    assert gpu_holder(Gpu(0, task="7", group="A", user="alice")) == "A/7 alice"
    assert gpu_holder(Gpu(0, task="7", group="A", user="alice"), user=False) == "A/7"
    assert gpu_holder(Gpu(0)) == "free"


def test_the_queue_title_names_the_resource_waited_for():
    # Issue 32, point 5: a GPU wait was titled "waiting for memory".
    status = copy.deepcopy(STATUS)
    status["queue"] = status["queue"][1:]
    status["queue"][0].update(waiting_for=0, gpus_waiting_for=1, reason="gpu: waits for 1 GPU to free (held by ops 2)")
    text = render(status, 120)
    assert "Queue: 1 task waiting for gpu" in text and "waiting for memory" not in text
    status["queue"][0].update(gpus_waiting_for=0, reason="its turn: the tasks ahead of it start first")
    assert [line.rstrip() for line in render(status, 120).splitlines() if line.startswith("Queue:")] == [
        "Queue: 1 task waiting"]


def test_a_login_sessions_systemd_limits_read_as_the_tasks_do():
    # Issue 44.3: status printed a session's limits as systemd holds them, `MemoryMin 2147483648`.
    status = copy.deepcopy(STATUS)
    status["groups"]["physics"]["tasks"][0]["limits"] = {"CPUQuota": "50%", "MemoryMin": str(2 * 1024**3),
                                                         "MemoryMax": str(3 * 1024**3), "MemoryHigh": "infinity"}
    text = render(status, 160)
    assert "limits CPUQuota 50% · memory.min 2.0G · memory hard cap 3.0G · memory soft cap infinity" in text
    assert "2147483648" not in text
