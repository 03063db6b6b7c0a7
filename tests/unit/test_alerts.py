"""The ``[notify]`` runner (governor.host.alerts) with real processes: a flood neither blocks the
event loop nor runs more than ``max_running`` at once, and what it cannot keep is counted; a
run past its timeout is killed with its whole process group; the command runs as ``user``,
never as the event's own user; hostile text is data."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from governor.config.notify_rules import NotifyRules
from governor.host import alerts
from governor.host.alerts import Alerts

FLOOD = 10_000


def _document(kind: str = "time_limit", uid: int | None = 1000, **more) -> dict:
    return {"schema": "governor.notify/1", "kind": kind, "uid": uid, "message": "m", **more}


async def _until(condition, timeout: float = 30.0) -> None:
    """Wait (on the loop) until ``condition()``: the runner's own counts, never a set time."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the runner did not get there in time"
        await asyncio.sleep(0.01)


def test_a_flood_runs_at_most_max_running_at_once_blocks_nothing_and_counts_what_it_drops(tmp_path, monkeypatch):
    # Each run appends "+" as it starts and "-" before it exits: O_APPEND keeps the lines in the
    # order the kernel took them, so the running count at every line is a lower bound of the
    # processes alive then; the runner's own count of workers is checked beside it. Each run
    # lasts 0.3 s, so that on a loaded host the third still starts before the first ends.
    monkeypatch.setattr(alerts, "PENDING_KEPT", 15)
    log = tmp_path / "runs"
    script = tmp_path / "record"
    script.write_text(f"#!/bin/sh\necho + >> {log}\ncat > /dev/null\nsleep 0.3\necho - >> {log}\n")
    script.chmod(0o755)
    rules = NotifyRules(command=(str(script),), max_running=3)

    async def flood() -> dict:
        runner = Alerts(lambda: rules)
        busiest = 0.0
        running_seen = 0

        async def ticker() -> None:
            # The loop thread's CPU time between two turns of this ticker is what the runner
            # (and the loop) did meanwhile; unlike wall time, it does not count the time this
            # loaded 2-core host gave to other processes.
            nonlocal busiest, running_seen
            while True:
                before = time.thread_time()
                await asyncio.sleep(0.005)
                busiest = max(busiest, time.thread_time() - before)
                running_seen = max(running_seen, runner.counts()["running"])

        watching = asyncio.get_running_loop().create_task(ticker())
        await asyncio.sleep(0)
        began, began_cpu = time.perf_counter(), time.thread_time()
        for _ in range(FLOOD):
            runner.put(_document())
        flooded, flooded_cpu = time.perf_counter() - began, time.thread_time() - began_cpu
        await _until(lambda: runner.done + runner.failed == alerts.PENDING_KEPT)
        watching.cancel()
        return {**runner.counts(), "flooded_s": flooded, "flooded_cpu_s": flooded_cpu, "busiest_s": busiest,
                "running_seen": running_seen}

    result = asyncio.run(flood())
    level = most = 0
    for line in log.read_text().split():
        level += 1 if line == "+" else -1
        most = max(most, level)
    print(f"\nnotify flood: {FLOOD} events put in {result['flooded_s'] * 1000:.1f} ms "
          f"({result['flooded_cpu_s'] * 1e6 / FLOOD:.1f} us CPU each); {result['done']} run, {result['dropped']} "
          f"dropped; at most {most} runs at once (bound 3); the loop's busiest 5 ms turn took "
          f"{result['busiest_s'] * 1000:.1f} ms CPU")
    assert result["flooded_cpu_s"] < 0.5  # 50 us an event: the flood itself is a loop turn, not a stall
    assert result["done"] == alerts.PENDING_KEPT and result["failed"] == 0
    assert result["dropped"] == FLOOD - alerts.PENDING_KEPT
    assert most == 3 and result["running_seen"] <= 3  # reached, never passed
    # Starting and reaping the runs never held the loop: 5 ms of CPU a turn here, 78 ms in the
    # emulated VM (15x slower); a runner doing its work on the loop would take far more.
    assert result["busiest_s"] < 0.25
    assert result["pending"] == 0 and result["running"] == 0


def test_a_run_past_its_timeout_is_killed_with_its_whole_process_group(tmp_path):
    pids = tmp_path / "pids"
    script = tmp_path / "hang"
    script.write_text(f"#!/bin/sh\nsleep 600 &\necho $$ $! > {pids}\nwait\n")
    script.chmod(0o755)
    rules = NotifyRules(command=(str(script),), timeout_s=0.5)

    async def run() -> tuple[Alerts, float]:
        runner = Alerts(lambda: rules)
        began = time.monotonic()
        assert runner.put(_document())
        await _until(lambda: runner.failed == 1)
        return runner, time.monotonic() - began

    runner, seconds = asyncio.run(run())
    shell, child = map(int, pids.read_text().split())
    print(f"\nnotify timeout 0.5 s: killed after {seconds:.2f} s")
    assert 0.5 <= seconds < 5.0 and runner.done == 0
    # The group was sent SIGKILL; the shell's child, reparented, may take a moment to die
    # (seconds in the emulated VM): wait for that fact, not a set time.
    deadline = time.monotonic() + 30
    while not all(_ended(pid) for pid in (shell, child)):
        assert time.monotonic() < deadline, f"the command's processes {shell} {child} outlived its SIGKILL"
        time.sleep(0.01)


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.skipif(os.geteuid() != 0, reason="running the command as another user needs root")
def test_the_command_runs_as_user_and_never_for_that_users_own_task():
    nobody = pwd.getpwnam("nobody")
    with tempfile.TemporaryDirectory() as where:  # pytest's tmp_path is root's alone (0700)
        _as_nobody(Path(where), nobody)


def _as_nobody(where: Path, nobody: pwd.struct_passwd) -> None:
    where.chmod(0o755)
    out = where / "out"
    out.mkdir()
    out.chmod(0o777)
    script = where / "who"
    script.write_text(f"#!/bin/sh\nid -u > {out}/uid\nid -G > {out}/groups\ncat > {out}/document\n")
    script.chmod(0o755)
    rules = NotifyRules(command=(str(script),), user="nobody")
    hostile = _document(uid=1000, message="$(touch /tmp/pwned) `id`\n\x1b[2J", task={"command": ["; rm -rf /"]})

    async def run() -> Alerts:
        runner = Alerts(lambda: rules)
        assert runner.put(_document(uid=nobody.pw_uid))  # nobody's own task: refused
        await _until(lambda: runner.refused == 1)
        assert runner.put(hostile)
        await _until(lambda: runner.done + runner.failed == 1)
        return runner

    runner = asyncio.run(run())
    assert runner.counts()["refused"] == 1 and runner.failed == 0
    assert int((out / "uid").read_text()) == nobody.pw_uid
    assert (out / "groups").read_text().split() == [str(nobody.pw_gid)]  # not root's groups
    assert json.loads((out / "document").read_text()) == hostile  # the text came as data
    assert not Path("/tmp/pwned").exists()


def test_events_not_asked_for_and_an_unset_command_run_nothing():
    off = Alerts(lambda: NotifyRules())
    some = Alerts(lambda: NotifyRules(command=("/bin/true",), events=("oom_kill",)))
    assert not off.wants("oom_kill") and not off.put(_document("oom_kill"))
    assert some.wants("oom_kill") and not some.wants("queued") and not some.put(_document("queued"))
    assert off.counts() == some.counts() == {"pending": 0, "running": 0, "dropped": 0, "refused": 0, "failed": 0,
                                             "done": 0}


def test_a_missing_program_is_a_failed_run_not_a_crash(tmp_path):
    rules = NotifyRules(command=(str(tmp_path / "absent"),))

    async def run() -> Alerts:
        runner = Alerts(lambda: rules)
        runner.put(_document())
        await _until(lambda: runner.failed == 1)
        return runner

    assert asyncio.run(run()).counts()["running"] == 0
