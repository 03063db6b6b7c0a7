"""``governor run``'s memory warning (cli/memory_warning.py): said once, when its task passes 90%
of its memory cap or is held at its soft cap, on cgroup v1 as on v2; a v1 task's memory read
from the memory cgroup the launch reply names."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from support.client import GOVERNOR, REPO

M = 1024**2


@pytest.mark.parametrize("limits, said", [
    ({"memory.max": str(50 * M)}, "governor: task t1 is at 46.0M of its 50.0M memory cap\n"),
    ({"memory.high": str(50 * M)}, "governor: task t1 is at 46.0M of its 50.0M soft memory cap\n"),
])
def test_run_warns_once_when_its_task_passes_90_percent_of_its_memory_cap(fake_daemon, tmp_path, limits, said):
    # Issue 33, point 1: users heard of their memory cap only after the kill. The task's
    # cgroup here is a directory whose memory.current says 46M of a 50M cap.
    (tmp_path / "memory.current").write_text(f"{46 * M}\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    fake_daemon.started = {"cgroup": str(tmp_path), "limits": limits}
    env = {**os.environ, "GOVERNOR_SOCKET": fake_daemon.path}
    with subprocess.Popen([*GOVERNOR, "run", "--", "sleep", "60"], cwd=REPO, env=env, text=True,
                          stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stderr.readline() == said
        finally:
            proc.terminate()  # forwarded to sleep: governor run exits as it did
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert proc.stderr.read() == ""  # once


def test_a_task_held_at_its_soft_cap_is_warned_of_and_one_far_from_its_cap_is_not():
    from governor.cli.memory_warning import MemoryWatch

    held = MemoryWatch({"task": "7", "cgroup": "/g/t7", "limits": {"memory.high": str(100 * M)}},
                       lambda directory, memory: (60 * M, 3))
    assert held.look() == "governor: task 7 is held at its 100.0M soft memory cap (60.0M in use): it is throttled there"
    assert held.look() is None  # once
    far = MemoryWatch({"task": "8", "cgroup": "/g/t8", "limits": {"memory.max": str(100 * M)}},
                      lambda directory, memory: (89 * M, 3))  # a hard cap: no memory.high events matter
    assert far.look() is None and not far.warned
    unread = MemoryWatch({"task": "9", "cgroup": "/g/t9", "limits": {"memory.max": str(100 * M)}}, lambda d, m: None)
    assert unread.look() is None


def test_v1_caps_are_watched_as_v2_ones():
    from governor.cli.memory_warning import MemoryWatch

    # memory.limit_in_bytes is v1's hard cap, memory.soft_limit_in_bytes its soft one (issue 33).
    hard = MemoryWatch({"task": "7", "cgroup": "/g/t7", "limits": {"memory.soft_limit_in_bytes": str(10 * M),
                                                                    "memory.limit_in_bytes": str(100 * M)}},
                       lambda directory, memory: (91 * M, 0))
    assert hard.look() == "governor: task 7 is at 91.0M of its 100.0M memory cap"
    soft = MemoryWatch({"task": "8", "cgroup": "/g/t8", "limits": {"memory.soft_limit_in_bytes": str(100 * M)}},
                       lambda directory, memory: (95 * M, 0))
    assert soft.look() == "governor: task 8 is at 95.0M of its 100.0M soft memory cap"


def test_a_v1_task_s_memory_is_read_from_its_own_memory_cgroup_never_through_a_process(tmp_path):
    # Issue 43, point 3: a zombie's /proc/<pid>/cgroup names the root memory cgroup, and the
    # warning said "task 1 is at 1.4G of its 512.0M memory cap" for a loop using 5M: the
    # whole host's usage. The figure now comes from the directory the launch reply names.
    from governor.cgroups.memory_now import memory_now
    from governor.cli.memory_warning import MemoryWatch

    memory_root, cpu = tmp_path / "memory", tmp_path / "cpu,cpuacct" / "gov" / "A" / "task-1"
    task = memory_root / "gov" / "A" / "task-1"
    for directory in (task, cpu):
        directory.mkdir(parents=True)
    (memory_root / "memory.usage_in_bytes").write_text(f"{1434 * M}\n")  # the root: the whole host
    (task / "memory.usage_in_bytes").write_text(f"{5 * M}\n")
    proc = tmp_path / "proc" / "4242"  # the zombie: it names the root memory cgroup
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("5:memory:/\n4:cpu,cpuacct:/gov/A/task-1\n")
    started = {"task": "1", "cgroup": str(cpu), "memory_cgroup": str(task),
               "limits": {"memory.limit_in_bytes": str(512 * M)}}
    assert memory_now(str(cpu), str(task)) == (5 * M, 0)
    watch = MemoryWatch(started, memory_now)
    assert watch.look() is None and not watch.warned  # 5M of 512M: nothing to say
    (task / "memory.usage_in_bytes").write_text(f"{470 * M}\n")
    assert watch.look() == "governor: task 1 is at 470.0M of its 512.0M memory cap"
    # A reply without the memory hierarchy's directory (an older daemon on v1): no figure
    # rather than one read elsewhere.
    assert memory_now(str(cpu)) is None


def test_the_launch_reply_names_a_v1_task_s_memory_directory(tmp_path):
    # Issue 43, point 3: governor run reads a v1 task's memory where the daemon says its
    # memory cgroup is, not through /proc/<pid>/cgroup.
    from governor.cgroups.v1 import CgroupV1Driver
    from governor.wire.launch_types import LaunchReply, Started

    roots = {"cpu": tmp_path / "cpu,cpuacct" / "gov", "cpuacct": tmp_path / "cpu,cpuacct" / "gov",
             "cpuset": tmp_path / "cpuset" / "gov", "memory": tmp_path / "memory" / "gov"}
    driver = CgroupV1Driver(roots)
    assert driver.memory_directory("A/task-1") == tmp_path / "memory" / "gov" / "A" / "task-1"
    assert driver.directory("A/task-1") == tmp_path / "cpu,cpuacct" / "gov" / "A" / "task-1"
    started = Started("1", "A", "/cpu/gov/A/task-1", {}, memory_cgroup="/memory/gov/A/task-1")
    assert LaunchReply.from_json(started.to_json()) == started
    assert "memory_cgroup" not in Started("1", "A", "/gov/A/task-1", {}).to_json()  # v2: the one directory
