"""Hostile users and faults against a real daemon on this host's cgroup v1 (issue 12, point 6):
a fuzzer, an attacker's requests as ``nobody`` (pid reuse tried for real), a kill -9 in the
middle of a launch storm, a churn of 10,000 short tasks, and clients that leave mid-launch.
Each prints its figures."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from daemon_harness import GOVERNOR, Governor
from hostile import (NOBODY, as_nobody, as_user, churn, connections_as_nobody, cpu_seconds, end_attack, fd_count,
                     fresh_as_nobody, fuzz, held_until_ended, hostile_lines, lingering_tasks, reply, request,
                     rss_bytes, silent_status, wait_ready, watchers)
from support.waits import within

from governor.errors import CgroupError

pytestmark = pytest.mark.kernel_v1

CONFIG = """[capacity]
cpu = 1.0
memory = "2G"
[groups.A]
users = ["root"]
[groups.F]
users = ["nobody"]
[sessions]
enabled = false
"""


# The most a churn's first half may take (seconds); 5,000 tasks take ~55 s here.
HALF_S = 150


@pytest.fixture
def gov():
    shared = Path(tempfile.mkdtemp(prefix="gov-hostile-"))
    shared.chmod(0o755)  # nobody must reach the socket
    daemon = Governor(shared, CONFIG)
    try:
        yield daemon
    finally:
        daemon.close()
        shutil.rmtree(shared, ignore_errors=True)


def task_cgroups(gov: Governor) -> dict[str, list[int]]:
    """Every task cgroup below the root and the pids in it (cpu hierarchy)."""
    found = {}
    for group in gov.driver.children(""):
        for task in gov.driver.children(group):
            try:
                found[f"{group}/{task}"] = gov.driver.pids(f"{group}/{task}")
            except CgroupError as error:
                if not error.vanished:  # a task that ended while we looked is gone, not found
                    raise
    return found


def settle(gov: Governor, what: str, condition, timeout: float = 60) -> None:
    gov.wait(condition, what, timeout)


def test_ten_thousand_hostile_requests_leave_the_daemon_serving_and_nothing_behind(gov):
    pid = gov.daemon.pid
    gov.status()
    fds, rss = fd_count(pid), rss_bytes(pid)
    rounds = []  # 10,000 requests each, a new seed each; the first two warm the allocator up
    for seed in (12, 13, 14, 15):
        result = as_nobody(lambda: fuzz(gov.socket, hostile_lines(10_000, seed=seed, own_pid=os.getpid())))
        rounds.append((result, rss_bytes(pid)))
    settle(gov, "no task left", lambda: not any(g["tasks"] for g in gov.status()["groups"].values()))
    # A task leaves status at once; its cgroup goes on the cgroup thread after, or at the next
    # reconcile pass where its rmdir met a process not yet released (CI caught one in between).
    settle(gov, "no task cgroup left", lambda: not task_cgroups(gov), 30)
    settle(gov, "fds back", lambda: fd_count(pid) <= fds, 20)
    log = gov.daemon_log()
    codes = rounds[0][0]["codes"]
    seconds = ", ".join(f"{result['seconds']:.1f}" for result, _ in rounds)
    print(f"\nfuzzer: 4 × 10,000 requests in {seconds} s; replies of "
          f"the first {dict(sorted(codes.items()))}; daemon fds {fds} -> {fd_count(pid)}, RSS {rss / 2**20:.1f} -> "
          f"{' -> '.join(f'{after / 2**20:.1f}' for _, after in rounds)} MiB")
    for result, _ in rounds:
        assert sum(result["codes"].values()) == 10_000 and "internal" not in result["codes"]
    assert "Traceback" not in log and "internal error" not in log
    assert gov.status()["daemon"]["pid"] == pid
    # The allocator keeps what the first rounds needed; after them, RSS stays where it is.
    assert rounds[-1][1] <= rounds[1][1] + 2**20


def test_an_ordinary_user_cannot_capture_steal_or_crowd_out(gov):
    # Pid reuse for real: nobody's process connects and exits; its pid is given to root's
    # next process (ns_last_pid); the connection, kept open, asks to launch that pid.
    [sock], [gone] = connections_as_nobody(gov.socket, 1)
    victim = None
    for _ in range(20):
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(gone - 1))
        except OSError as error:
            pytest.skip(f"cannot choose the next pid: {error}")
        victim = subprocess.Popen(["sleep", "60"])
        if victim.pid == gone:
            break
        victim.kill()
        victim.wait()
    try:
        assert victim.pid == gone, "the kernel did not hand the pid over"
        answer = request(sock, json.dumps({"op": "launch", "pid": gone, "group": "F", "wait": False}).encode() + b"\n")
        where = Path(f"/proc/{gone}/cgroup").read_text()
        print(f"\npid reuse: root's sleep got pid {gone} of nobody's exited client; launch -> {answer['error']}")
        assert not answer["ok"] and answer["error"]["code"] in ("forbidden", "bad_request"), answer
        assert gov.root_name not in where, where
    finally:
        sock.close()
        victim.kill()
        victim.wait()

    def attacks() -> dict:
        tried = {
            "launch root's pid 1": {"op": "launch", "pid": 1, "group": "F", "wait": False},
            "launch into root's group": {"op": "launch", "pid": os.getpid(), "group": "A", "wait": False},
            "set-weight": {"op": "set-weight", "group": "F", "weight": 1000},
            "reload": {"op": "reload"},
        }
        codes = {}
        for name, line in tried.items():
            with socket.socket(socket.AF_UNIX) as conn:
                conn.connect(gov.socket)
                codes[name] = request(conn, json.dumps(line).encode() + b"\n")["error"]["code"]
        held = []
        for _ in range(40):
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(gov.socket)
            held.append(conn)
        held[-1].settimeout(5)
        over = reply(held[-1])  # refused at once, before any request
        codes["40 connections"] = over["error"]["code"] if over and not over["ok"] else "served"
        for conn in held:
            conn.close()
        return codes

    codes = as_nobody(attacks)
    print(f"attacks as nobody: {codes}")
    assert codes == {"launch root's pid 1": "forbidden", "launch into root's group": "forbidden",
                     "set-weight": "forbidden", "reload": "forbidden", "40 connections": "too_many"}
    assert gov.status()["daemon"]["pid"] == gov.daemon.pid  # and everyone else is served


def test_a_daemon_killed_mid_storm_readopts_each_live_task_once_and_leaves_no_orphan(gov):
    storm = os.fork()
    if storm == 0:  # nobody's clients: 120 launches of 16M, 8 at a time, each staying 60 s once started
        code = 1
        try:
            os.setpgid(0, 0)  # the storm, its clients and their sleepers: one group to kill
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            churn(gov.socket, 120, 8, "F", linger=60, memory=16 << 20)
            code = 0
        finally:
            os._exit(code)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.setpgid(storm, storm)  # as the child does: whichever runs first
    try:
        settle(gov, "a storm under way", lambda: len(task_cgroups(gov)) >= 20)
        gov.daemon.send_signal(signal.SIGKILL)
        gov.daemon.wait()
        gov.restart()
        os.waitpid(storm, 0)  # every client launched (or was refused by the dead daemon)
        gov.wait_settled(gov.generation(), passes=2)  # a reconcile pass since (each ends in a settle)
        listed = {t["id"]: t for g in gov.status()["groups"].values() for t in g["tasks"]}
        cgroups = task_cgroups(gov)
        live = {rel: pids for rel, pids in cgroups.items() if pids}
        orphans = [rel for rel in live if rel.split("/task-")[-1] not in listed]
        print(f"\nkill -9 mid-storm: {len(listed)} tasks listed after the restart, {len(live)} task cgroups with "
              f"processes, {len(cgroups) - len(live)} empty, orphans {orphans}")
        assert not orphans and len(live) == len(listed)
        assert len({t["pid"] for t in listed.values()}) == len(listed)  # each adopted once
    finally:
        # The storm (if the test failed while it ran) and the clients' sleeping children, ours
        # alone, in every hierarchy: a move the kill -9 cut short left its process in some
        # hierarchies' task cgroup and not in others'.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(storm, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(storm, 0)
        for root in set(gov.driver.roots.values()):
            for procs in root.glob("*/*/cgroup.procs"):
                try:
                    pids = procs.read_text().split()
                except OSError:  # the daemon removed that task's cgroup meanwhile (CI: ENODEV)
                    continue
                _kill([int(pid) for pid in pids])


def test_a_churn_of_ten_thousand_short_tasks_leaks_nothing(gov):
    # Memory is compared between the two halves: the first grows what is kept at its high
    # water (allocator arenas, dict tables), 2-4 MiB of ~37 whatever the
    # code; a leak grows the second half as much as the first. The 10,000 are issue 12's
    # figure; the warm-up only opens what the daemon opens once (its fds' baseline): 200 do
    # that (1,000 did, at ~25 ms a task in CI). Each half is bounded in time too (CI once
    # took 30 min over what takes 110 s here, past its whole budget): the first stops starting
    # tasks after HALF_S, the second runs as many as the first did, so the halves compare. The
    # clients are forked from a new interpreter, not from this process, which grows.
    pid = gov.daemon.pid
    warm = fresh_as_nobody("churn", path=gov.socket, tasks=200, parallel=16, group="F")
    settle(gov, "the warm-up tasks to end", lambda: not task_cgroups(gov))
    fds, rss = fd_count(pid), rss_bytes(pid)
    start, cpu = time.monotonic(), cpu_seconds(pid)
    first = fresh_as_nobody("churn", path=gov.socket, tasks=5_000, parallel=16, group="F", within_s=HALF_S)
    settle(gov, "the first half to end", lambda: not task_cgroups(gov))
    half = rss_bytes(pid)
    second = fresh_as_nobody("churn", path=gov.socket, tasks=first["tasks"], parallel=16, group="F")
    seconds, cpu = time.monotonic() - start, cpu_seconds(pid) - cpu
    settle(gov, "every task to end", lambda: not task_cgroups(gov) and not gov.busy_groups())
    settle(gov, "fds back", lambda: fd_count(pid) <= fds, 20)
    trips = sorted(first["trips"] + second["trips"])
    tasks = first["tasks"] + second["tasks"]
    print(f"\nchurn: {tasks:,} tasks (16 clients at a time) in {seconds:.0f} s, {tasks / seconds:.0f}/s, the daemon's "
          f"CPU {cpu:.0f} s ({cpu / seconds:.0%} of one core); round trip "
          f"p50 {trips[len(trips) // 2] * 1000:.1f} ms, p99 {trips[int(len(trips) * 0.99)] * 1000:.1f} ms; "
          f"failed {first['failed'] + second['failed']} (warm-up {warm['failed']}); RSS {rss / 2**20:.1f} -> "
          f"{half / 2**20:.1f} -> {rss_bytes(pid) / 2**20:.1f} MiB, fds {fds} -> {fd_count(pid)}")
    assert first["failed"] == 0 and second["failed"] == 0 and warm["failed"] == 0
    assert not list(Path(gov.status()["daemon"]["config"]).parent.joinpath("state").glob("*.json"))
    # Half the first half's growth (6 MiB of 12 here): with nothing kept past its bound (ended
    # records fill theirs in the first half) the second half grew -1.0 to 3.05 MiB in five runs,
    # the allocator's noise (3.05 failed a bound of a quarter in CI); a leak of a task's worth of
    # objects (a few KiB each, 5,000 tasks) grows it as much as the first.
    assert rss_bytes(pid) - half <= (half - rss) / 2


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _in_background(work) -> int:
    """Run ``work`` in a forked child; its pid (the caller waits for it)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    return pid


def _p99(trips: list[float]) -> float:
    return trips[int(len(trips) * 0.99)]


def test_status_amplification_costs_the_daemon_bounded_memory_and_no_launch_time(gov):
    # Issue 22, point 1: 250 tasks with ~60 KiB command lines made a status of 15.6 MB; 32
    # connections of nobody that asked for it and never read took the daemon from 148 to 599 MB,
    # and 32 watchers at 0.2 s raised others' launches from 53-71 to 620 ms.
    pid = gov.daemon.pid
    long = ["x" * 4000] * 15  # 60,000 characters (a request line holds at most 64 KiB)
    lingering = as_nobody(lambda: {"pids": lingering_tasks(gov.socket, 250, "F", long)})["pids"]
    try:
        size = len(json.dumps(gov.status()))
        before = churn(gov.socket, 300, 4, "A")
        rss_before = rss_bytes(pid)
        read_end, ready = os.pipe()
        held, release = os.pipe()  # the attack lasts until the churn under it ended (300 s at most)
        attackers = [_in_background(lambda: as_nobody(lambda: silent_status(gov.socket, 32, 300, ready, held))),
                     _in_background(lambda: as_user(2, lambda: watchers(gov.socket, 32, 300, 0.5, ready, held)))]
        os.close(ready)
        wait_ready(read_end, len(attackers))
        peak, churned = [rss_bytes(pid)], threading.Event()

        def sample() -> None:  # the daemon's RSS every 0.25 s while the churn runs under attack
            while not churned.wait(0.25):
                peak.append(rss_bytes(pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        during = churn(gov.socket, 300, 4, "A")
        churned.set()
        sampler.join()
        end_attack(release, len(attackers))
        for attacker in attackers:
            os.waitpid(attacker, 0)
        os.close(held)
        os.close(release)
        p50, p90, p99 = (lambda t: t[len(t) // 2]), (lambda t: t[int(len(t) * 0.9)]), _p99
        print(f"\nstatus amplification: status {size / 1e6:.2f} MB with 250 long command lines; daemon RSS "
              f"{rss_before / 2**20:.0f} -> peak {max(peak) / 2**20:.0f} MiB under 32 silent connections and 32 "
              f"watchers; launch p50 {p50(before['trips']) * 1000:.1f} -> {p50(during['trips']) * 1000:.1f} ms, "
              f"p90 {p90(before['trips']) * 1000:.1f} -> {p90(during['trips']) * 1000:.1f} ms, "
              f"p99 {p99(before['trips']) * 1000:.1f} -> {p99(during['trips']) * 1000:.1f} ms")
        assert size < 1_000_000  # command lines are cut in views of everyone's tasks
        assert max(peak) < 150 * 2**20
        assert before["failed"] == during["failed"] == 0
        # The attack made launches ten times slower (53-71 -> 620 ms). Two cores are shared with
        # 64 attacking clients and the daemon must read their requests, so some cost is honest:
        # CI measured the median 1.0x to 1.3x (25.1 -> 32.6 ms) and the p99, the third slowest of
        # 300, 1.07x to 1.84x (62.5 -> 115 ms). The median is held to 1.5x, the p90 to 2x and the
        # p99 to 3x: a regression to what the attack did (10x) fails all three.
        assert p50(during["trips"]) <= 1.5 * p50(before["trips"]) + 0.005
        assert p90(during["trips"]) <= 2 * p90(before["trips"]) + 0.010
        assert p99(during["trips"]) <= 3 * p99(before["trips"])
    finally:
        _kill(lingering)


def test_the_memory_queue_serves_a_large_task_of_an_idle_group_within_a_task_lifetime(gov):
    # Issue 22, point 2: A launches a 100M, 2 s task every 80 ms; F (no task) asks for 1G. F
    # stayed at position 1 for 85 s while 840 of A's tasks started: every 100M that freed went
    # to A. Capacity 2G: A fills it, then F's reservation keeps what frees.
    stop = threading.Event()
    launched: list[subprocess.Popen] = []

    def busy_a():
        while not stop.is_set():
            launched.append(subprocess.Popen([GOVERNOR, "run", "--socket", gov.socket, "--group", "A", "--cpus",
                                              "0.01", "--memory", "100M", "--", "sleep", "2"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            stop.wait(0.08)  # the launch rate (the workload): ends at once when the test does

    launcher = threading.Thread(target=busy_a)
    launcher.start()
    try:
        gov.wait(lambda: len(gov.status()["queue"]) >= 3, "A's tasks to fill memory and queue")

        def ask() -> dict:
            start = time.monotonic()
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(gov.socket)
                sock.sendall(json.dumps({"op": "launch", "pid": os.getpid(), "group": "F",
                                         "demand": {"cpu": 0.01, "memory": 1 << 30}}).encode() + b"\n")
                sock.settimeout(60)
                while True:
                    answer = reply(sock)
                    if answer is None or "queued" not in answer:
                        return {"waited": time.monotonic() - start, "ok": bool(answer and answer.get("ok"))}

        got = as_nobody(ask)
        print(f"\nqueue: F's 1G task started {got['waited']:.2f} s after it asked, A launching 100M every 80 ms")
        assert got["ok"] and got["waited"] <= 2.5
    finally:
        stop.set()
        launcher.join()
        for proc in launched:
            proc.kill()
            proc.wait()


def test_idle_metrics_connections_leave_launches_and_status_working(tmp_path):
    # Issue 22, point 3: nobody's ~1,010 idle TCP connections to --metrics took a thread and a
    # descriptor each for ever: 1024/1024 fds, and run and status (root's too) failed.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    shared = Path(tempfile.mkdtemp(prefix="gov-metrics-"))
    shared.chmod(0o755)
    gov = Governor(shared, CONFIG, "--metrics", f"127.0.0.1:{port}")
    try:
        def hold() -> dict:
            held = []
            for _ in range(1010):
                with contextlib.suppress(OSError):
                    held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            os.write(ready, b"!")
            held_until_ended(until_measured, 60)  # the attack lasts until the test measured
            for sock in held:
                sock.close()
            return {"held": len(held)}

        idle_fds = fd_count(gov.daemon.pid)
        read_end, ready = os.pipe()
        until_measured, measured = os.pipe()
        attacker = _in_background(lambda: as_nobody(hold))
        os.close(ready)
        wait_ready(read_end, 1)
        started = time.monotonic()
        proc = gov.run("A", ["sleep", "30"], cpus=0.1, memory="32M")
        status = gov.status()
        seconds = time.monotonic() - started
        # Bounded by the scrapes served at once, not by the attack's 1,010, once the daemon has
        # closed the excess ones it accepted (a count taken mid-burst read 206 in one CI run).
        bounded = within(lambda: fd_count(gov.daemon.pid) - idle_fds < 50, 10)
        fds = fd_count(gov.daemon.pid)
        end_attack(measured, 1)
        os.waitpid(attacker, 0)
        os.close(until_measured)
        os.close(measured)
        print(f"\nmetrics attack: 1,010 idle connections; daemon fds {fds} ({idle_fds} before); "
              f"a launch and a status took {seconds:.2f} s")
        assert bounded and seconds < 5 and status["groups"]["A"]["tasks"]
        proc.kill()
    finally:
        gov.close()
        shutil.rmtree(shared, ignore_errors=True)


def test_a_pid_that_wraps_round_to_a_running_tasks_launch_pid_gets_its_own_task(gov):
    # Issue 22, point 6: nobody's task outlives its launched process; a later launch from a
    # process with that pid got nobody's task (and group) and stayed ungoverned itself.
    def outlived() -> dict:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(gov.socket)
            answer = request(sock, json.dumps({"op": "launch", "pid": os.getpid(), "group": "F",
                                               "demand": {"cpu": 0.1, "memory": 32 << 20}}).encode() + b"\n")
        child = os.fork()
        if child == 0:  # the task lives on in this child; the launched process exits
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as_nobody's pipe must see its end
            time.sleep(120)  # the task's life until the test kills it, not a wait
            os._exit(0)
        return {"task": answer["task"], "pid": os.getpid(), "child": child}

    first = as_nobody(outlived)
    taken = None
    try:
        for _ in range(20):
            try:
                Path("/proc/sys/kernel/ns_last_pid").write_text(str(first["pid"] - 1))
            except OSError as error:
                pytest.skip(f"cannot choose the next pid: {error}")
            taken = subprocess.Popen([GOVERNOR, "run", "--exec", "--socket", gov.socket, "--group", "A", "--cpus",
                                      "0.1", "--memory", "32M", "--", "sleep", "60"])  # (--exec: this pid asks)
            if taken.pid == first["pid"]:
                break
            taken.kill()
            taken.wait()
        assert taken.pid == first["pid"], "the kernel did not hand the pid over"
        gov.wait(lambda: any(t["pid"] == taken.pid for t in gov.status()["groups"].get("A", {}).get("tasks", [])),
                 "root's task with the reused pid")
        [mine] = [t for t in gov.status()["groups"]["A"]["tasks"] if t["pid"] == taken.pid]
        print(f"\npid reuse: nobody's task {first['task']} outlived pid {taken.pid}; root's launch with it got task "
              f"{mine['id']} in group A")
        assert mine["id"] != first["task"] and gov.root_name in Path(f"/proc/{taken.pid}/cgroup").read_text()
        assert gov.task_count("F") == 1
    finally:
        _kill([first["child"]])
        if taken is not None:
            taken.kill()
            taken.wait()


# Clients that close their connection mid-launch, and how soon after it at most (a move on
# this host's v1 waits up to ~25 ms for an RCU grace period).
CLIENTS = 40
CLOSE_WITHIN_S = 0.03


def _client(path: str, close_after: float, told, held) -> None:
    """(In a forked child) become nobody, launch this pid, close mid-launch, say so, and stay
    alive until the test has looked."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    sock.sendall(json.dumps({"op": "launch", "pid": os.getpid(), "group": "F", "command": ["x"],
                             "demand": {"cpu": 0.1, "memory": 64 << 20}}).encode() + b"\n")
    time.sleep(close_after)  # the attack's timing, not a wait
    sock.close()
    os.write(told, b".")
    os.read(held, 1)


def test_a_client_that_leaves_mid_launch_is_never_left_running_outside_admission(gov):
    """Clients of nobody launch their own pid and close their connection mid-launch: none may be
    left in a task cgroup the daemon does not count (before the fix, all 40 were: work run
    outside admission)."""
    rng = random.Random(7)
    seen = {"stray": 0, "governed": 0, "never moved": 0}
    for _ in range(CLIENTS):
        told_r, told_w = os.pipe()
        held_r, held_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(told_r), os.close(held_w)
                _client(gov.socket, rng.uniform(0, CLOSE_WITHIN_S), told_w, held_r)
                code = 0
            finally:
                os._exit(code)
        os.close(told_w), os.close(held_r)
        try:
            assert os.read(told_r, 1) == b"."
            # Two settle passes after it left: the one under way (its move) and one that saw it leave.
            gov.wait_settled(gov.generation(), passes=2)
            cpu = next(line.split(":", 2)[2] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                       if "cpu" in line.split(":")[1].split(","))
            running = {t["id"] for g in gov.status()["groups"].values() for t in g["tasks"]}
            task = cpu.rsplit("/task-", 1)[1] if "/task-" in cpu else None
            seen["never moved" if task is None else "governed" if task in running else "stray"] += 1
        finally:
            os.close(told_r), os.close(held_w)
            os.waitpid(pid, 0)
    withdrawn = gov.daemon_log().count("withdrawn while its process was moved in")
    print(f"\n{CLIENTS} clients closed within {CLOSE_WITHIN_S * 1000:.0f} ms of their launch: {seen}; "
          f"withdrawn mid-move and governed as started: {withdrawn}")
    assert seen["stray"] == 0, seen
