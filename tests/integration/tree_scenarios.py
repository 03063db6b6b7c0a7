"""The group tree on the real kernel (issue 25): H-DRF at every level, a group's limit, a
guarantee against a heavier weight, a user limit inside a group. Shared by the v1 (native) and
v2 (VM) test modules through ``kernel_cases``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from daemon_harness import BUSY, Governor
from hostile import request
from scenarios import CONTENTION_TOLERANCE, SCALE, SLEEPER, measure, measure_held

HEAD = '[capacity]\ncpu = {cpu}\nmemory = "1G"\n[enforcement]\nmemory = "soft"\n'


def two_level_tree_under_contention(tmp_path) -> None:
    """Two departments, weights 1:1; D2 has two labs, 1:1. Capacity C = 1.5·s cores; every leaf
    runs burners that want more than its share: on v2 two capped at 0.5·s, on v1 three capped at
    0.3·s. H-DRF: D1 gets C/2, each lab C/4 (D2's half, halved); a flat DRF over the three leaves
    would give each C/3.

    On v1 the caps stay below a lab's C/4 = 0.375·s because v1 refuses a parent quota below a
    child's: with 0.5·s caps the lab's hold could not go below 0.5·s, the split inside D2 fell to
    the weights alone, and CI measured the labs at +5.4 % and −6 %. The emulated VM runs fewer
    burners better (nine measured a lab at −7.2 %, four within 1 %)."""
    capacity = 1.5 * SCALE
    tree = ('[groups.D1]\nusers = ["root"]\n[groups.D2]\n'
            '[groups.L1]\nparent = "D2"\nusers = ["root"]\n[groups.L2]\nparent = "D2"\nusers = ["root"]\n')
    gov = Governor(tmp_path, HEAD.format(cpu=capacity) + tree)
    try:
        count, cap = (3, 0.3) if gov.status()["daemon"]["cgroup_mode"] == "v1" else (2, 0.5)
        for group in ("D1", "L1", "L2"):
            for _ in range(count):
                gov.run(group, BUSY, cpus=cap * SCALE, memory="32M")
        expected = {"D1": capacity / 2, "D2": capacity / 2, "D2/L1": capacity / 4, "D2/L2": capacity / 4}
        groups = gov.status()["groups"]
        for leaf, place in (("D1", "D1"), ("L1", "D2/L1"), ("L2", "D2/L2")):
            assert abs(groups[leaf]["allocation"]["cpu"] - expected[place]) < 1e-6, groups[leaf]
        gov.wait(lambda: gov.status()["daemon"]["cpu_saturated"], "every group to be held to its guarantee")
        gov.wait_settled(gov.generation())  # the hold in force
        measured = measure_held(gov, expected, 6)
        print(f"\n[{gov.status()['daemon']['cgroup_mode']}] H-DRF, capacity {capacity:.2f} cores: " + ", ".join(
            f"{place} {measured[place]:.3f} (H-DRF {cores:.3f}, {measured[place] / cores - 1:+.1%})"
            for place, cores in expected.items()))
        for place, cores in expected.items():
            assert abs(measured[place] - cores) <= CONTENTION_TOLERANCE * cores, (place, measured, expected)
    finally:
        gov.close()


def group_limit_holds(tmp_path) -> None:
    """A's limit is 0.3·s cores and 96M. Its two burners capped at 0.25·s each want 0.5·s, and B
    is idle, so without the limit A would borrow up to 0.5·s: it measures 0.3·s. Its second 64M
    task waits (the limit, not the host, is full) and starts when the first ends."""
    limit = 0.3 * SCALE
    config = HEAD.format(cpu=1.0 * SCALE) + (
        f'[groups.A]\nusers = ["root"]\nlimit = {{ cpu = {limit}, memory = "96M" }}\n[groups.B]\nusers = ["root"]\n')
    gov = Governor(tmp_path, config)
    try:
        burners = [gov.run("A", BUSY, cpus=0.25 * SCALE, memory="8M") for _ in range(2)]
        gov.wait_settled(gov.generation())  # the launches' refill in force
        used = measure(gov, ["A"], 5)["A"]
        # The host's load shows through in the emulated VM (beside two others in CI): a window
        # outside the tolerance is measured again, up to twice; a limit not held (A's caps
        # want 0.5·s) fails each.
        for window in range(2):
            if abs(used - limit) <= limit * CONTENTION_TOLERANCE:
                break
            print(f"\nmeasured again: window {window + 1} read A {used:.3f}")
            used = measure(gov, ["A"], 5)["A"]
        v2 = gov.status()["daemon"]["cgroup_mode"] == "v2"
        memory_max = gov.limit_file("A", "memory.max" if v2 else "memory.limit_in_bytes")
        first = gov.run("A", SLEEPER, cpus=0.01, memory="64M")
        # Enough CPU of its own to start soon once admitted (a Python start at 0.01 cores beside
        # two burners took minutes in the emulated VM): the queue here is about memory, not CPU.
        second = gov.run_queued("A", ["sh", "-c", "echo second started"], cpus=0.2 * SCALE, memory="64M")
        reason = gov.status()["queue"][0]["reason"]
        print(f"\n[{gov.status()['daemon']['cgroup_mode']}] group limit {limit:.3f} cores: A measured {used:.3f} "
              f"cores with 0.5x{SCALE:g} cores of caps and B idle; memory limit {memory_max}; queued: {reason}")
        assert used <= limit * (1 + CONTENTION_TOLERANCE), used
        assert used >= limit * (1 - CONTENTION_TOLERANCE), used  # it does use what the limit leaves it
        assert int(memory_max) == 96 << 20
        assert reason.startswith("group A's limit: memory 80.0M of 96.0M declared"), reason
        gov.stop_tasks(burners)  # A's CPU limit is the second task's, once it starts
        gov.stop_tasks([first])
        assert second.stdout.readline() == "second started\n"
    finally:
        gov.close()


def guarantee_beats_a_heavier_weight(tmp_path) -> None:
    """A (weight 1) is guaranteed 0.6·C, B weighs 4; both want all of C. Weights alone give A
    C/5; the guarantee comes first, so A measures 0.6·C and B the rest."""
    capacity = 1.0 * SCALE
    config = HEAD.format(cpu=capacity) + (
        f'[groups.A]\nusers = ["root"]\nguarantee = {{ cpu = {0.6 * capacity} }}\n'
        '[groups.B]\nusers = ["root"]\nweight = 4\n')
    gov = Governor(tmp_path, config)
    try:
        for group in ("A", "B"):
            for _ in range(2):
                gov.run(group, BUSY, cpus=0.5 * capacity, memory="16M")
        expected = {"A": 0.6 * capacity, "B": 0.4 * capacity}
        groups = gov.status()["groups"]
        for group, cores in expected.items():
            assert abs(groups[group]["allocation"]["cpu"] - cores) < 1e-6, groups[group]
        gov.wait(lambda: gov.status()["daemon"]["cpu_saturated"], "both groups to be held to their guarantees")
        gov.wait_settled(gov.generation())  # the hold in force
        measured = measure_held(gov, expected, 5)
        print(f"\n[{gov.status()['daemon']['cgroup_mode']}] guarantee 0.6 of {capacity:.2f} cores against weight 4: "
              + ", ".join(f"{g} {measured[g]:.3f} (expected {c:.3f})" for g, c in expected.items()))
        for group, cores in expected.items():
            assert abs(measured[group] - cores) <= CONTENTION_TOLERANCE * cores, (group, measured, expected)
    finally:
        gov.close()


def user_limit_holds_per_member() -> None:
    """Group L lets each member declare 0.3·s cores in all. root launches two 0.2·s burners:
    the second waits (0.4·s would pass root's limit); nobody, in the same group, still starts
    one: the limit is per user. root's running task measures within its cap."""
    shared = Path(tempfile.mkdtemp(prefix="gov-user-limit-"))
    shared.chmod(0o755)  # nobody must reach the socket
    limit = 0.3 * SCALE
    gov = Governor(shared, HEAD.format(cpu=1.0 * SCALE) + (
        f'[groups.L]\nusers = ["root", "nobody"]\nuser_limit = {{ cpu = {limit}, memory = "256M" }}\n'))
    nobody = None
    try:
        gov.run("L", BUSY, cpus=0.2 * SCALE, memory="16M")
        waiting = gov.run_queued("L", BUSY, cpus=0.2 * SCALE, memory="16M")
        reason = gov.status()["queue"][0]["reason"]
        nobody = _launch_as(65534, gov.socket, "L", 0.2 * SCALE)
        gov.wait(lambda: len(gov.status()["groups"]["L"]["tasks"]) == 2, "nobody's task to start")
        used = measure(gov, ["L"], 3)["L"]
        print(f"\n[{gov.status()['daemon']['cgroup_mode']}] user_limit {limit:.2f} cores: root's second task waits "
              f"({reason}); nobody's started; L uses {used:.3f} cores")
        assert reason.startswith("root's user_limit in group L: cpu"), reason
        assert waiting.poll() is None and len(gov.status()["queue"]) == 1
        assert used <= 0.4 * SCALE * (1 + CONTENTION_TOLERANCE)  # one task of each user, within caps
    finally:
        if nobody is not None:
            os.kill(nobody, 9)
            os.waitpid(nobody, 0)
        gov.close()
        shutil.rmtree(shared, ignore_errors=True)


def _launch_as(uid: int, path: str, group: str, cpus: float) -> int:
    """A child that becomes ``uid``, launches itself into ``group`` and burns CPU; its pid once
    the daemon answered (the caller kills it)."""
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_read)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(path)
            line = (f'{{"op": "launch", "pid": {os.getpid()}, "group": "{group}", "command": ["burn"], '
                    f'"demand": {{"cpu": {cpus}, "memory": {16 << 20}}}}}\n')
            answer = request(sock, line.encode())
            os.write(ready_write, b"1" if answer and answer.get("ok") else b"0")
            sock.close()
            while True:
                pass
        finally:
            os._exit(0)
    os.close(ready_write)
    ok = os.read(ready_read, 1)
    os.close(ready_read)
    assert ok == b"1", "nobody's launch was refused"
    return pid


def fair_share_falls_for_a_group_that_ran_alone(tmp_path) -> None:
    """With a 20 s half-life, A runs a burner alone for a few seconds: its effective weight falls
    below its configured 1; when B launches, B (charged only for its first moments) weighs more
    and is guaranteed more CPU than A."""
    capacity = 1.0 * SCALE
    gov = Governor(tmp_path, HEAD.format(cpu=capacity) + '[groups.A]\nusers = ["root"]\n[groups.B]\nusers = ["root"]\n'
                                                          '[fairshare]\nhalf_life = "20s"\n')
    try:
        gov.run("A", BUSY, cpus=capacity, memory="16M")
        gov.wait(lambda: gov.status()["groups"]["A"].get("effective_weight", 1.0) < 0.8, "A's weight to fall")
        gov.run("B", BUSY, cpus=capacity, memory="16M")
        groups = gov.status()["groups"]
        print(f"\n[{gov.status()['daemon']['cgroup_mode']}] fair share (half-life 20 s): A ran alone, effective weight "
              f"{groups['A']['effective_weight']:.2f} (past use {groups['A']['past_use']:.1f} host-s), B "
              f"{groups['B']['effective_weight']:.2f}; guarantees A {groups['A']['allocation']['cpu']:.3f}, "
              f"B {groups['B']['allocation']['cpu']:.3f} cores")
        # B is charged from its counters from its first sample on (issue 32), so by the time of
        # this status its weight may have left 1.0: what matters is that it is above A's.
        assert groups["B"]["effective_weight"] > groups["A"]["effective_weight"]
        assert groups["B"]["allocation"]["cpu"] > groups["A"]["allocation"]["cpu"]
    finally:
        gov.close()
    assert (tmp_path / "state" / "fairshare.state").exists()  # saved at shutdown for the next daemon


# Short tasks launched one after another (issue 32, break 3): each burns this much CPU and ends,
# its group's cgroup removed with it, well between two samples. In the emulated VM a Python
# start alone cost 2-3 s of CPU, which A then had to match at 0.3 of a core (the test's 77 s in
# CI); there a shell burns one second, the least its CPU limit (RLIMIT_CPU, SIGXCPU) measures.
VM = bool(os.environ.get("VMLAB_GUEST"))
SHORT_TASKS, SHORT_TASK_CPU_S = (4, 1) if VM else (24, 0.3)
SHORT_BURNER = (["sh", "-c", "ulimit -c 0; ulimit -t 1; while :; do :; done"] if VM else
                [sys.executable, "-c", f"import time\nwhile time.process_time() < {SHORT_TASK_CPU_S}: pass"])


def fair_share_charges_short_tasks_as_a_steady_tasks_equal_use(tmp_path) -> None:
    """B runs short burners one after another, each ending (and its group's cgroup removed)
    between two samples; then A runs one steady burner until it used as much CPU as B did, by
    the kernel's counters (B's from governor's root cgroup, which keeps what removed cgroups
    used). Each group's fair-share past use is its kernel CPU-seconds over the capacity within
    5 %, and so the two within 5 % of each other; sampling B missed almost all of it."""
    capacity = 1.0 * SCALE
    gov = Governor(tmp_path, HEAD.format(cpu=capacity) + '[groups.A]\nusers = ["root"]\n[groups.B]\nusers = ["root"]\n'
                                                          '[fairshare]\nhalf_life = "1d"\n')
    try:
        # Once fair share has sampled, a group's new cgroup is charged from its first microsecond.
        gov.wait(lambda: "past_use" in gov.status()["groups"]["A"], "the first sample")
        before = gov.driver.read_stats("").cpu_usage_usec
        for _ in range(SHORT_TASKS):
            gov.run("B", SHORT_BURNER, may_end=True, cpus=capacity, memory="16M").wait()
        short = (gov.driver.read_stats("").cpu_usage_usec - before) / 1e6
        gov.run("A", BUSY, cpus=capacity * 0.75, memory="16M")  # not the whole host: a share above 1 is cut
        # A needs short / 0.75·capacity seconds: in the emulated VM on a loaded host Python's start
        # alone cost B's tasks 2-3 s each (21 s in all, 70 s for A), past a fixed 60 s bound.
        gov.wait(lambda: gov.driver.read_stats("A").cpu_usage_usec / 1e6 >= short, "A to use as much CPU as B",
                 timeout=max(60.0, 2 * short / (capacity * 0.75)))
        for pid in (pid for task in gov.driver.children("A") for pid in gov.driver.pids(f"A/{task}")):
            os.kill(pid, signal.SIGSTOP)  # A's use is final, and its group stays
        stopped = time.time()
        used = {"A": gov.driver.read_stats("A").cpu_usage_usec / 1e6, "B": short}
        # A sample read after the stop, saved (at most 5 s later): the history has all of it.
        saved = tmp_path / "state" / "fairshare.state"
        gov.wait(lambda: json.loads(saved.read_bytes())["at"] > stopped + 1, "a sample after A stopped, saved")
        groups = gov.status()["groups"]
        charged = {group: groups[group]["past_use"] * capacity for group in used}  # host-seconds → CPU-seconds
        print(f"\n[{gov.status()['daemon']['cgroup_mode']}] fair share from the counters: B's {SHORT_TASKS} short "
              f"tasks used {used['B']:.2f} CPU-s and were charged {charged['B']:.2f}; A's steady task "
              f"{used['A']:.2f} and {charged['A']:.2f}")
        assert all(abs(charged[group] / used[group] - 1) <= 0.05 for group in used)
        assert abs(charged["B"] / charged["A"] - 1) <= 0.05
    finally:
        gov.close()
