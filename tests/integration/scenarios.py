"""End-to-end scenarios on the real kernel, shared by the v1 (native) and v2 (VM) test modules.

Each starts a real daemon, launches real CPU burners and memory hogs with ``governor run`` and
measures what the kernel lets them use. Figures are printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import os
import select
import sys
import time

from daemon_harness import BUSY, MIB, Governor

# The VM's CPU is emulated: a smaller host keeps the burners within what it can run.
SCALE = 0.4 if os.environ.get("VMLAB_GUEST") else 1.0
# What an idle group lends must reach the borrower's caps: 90 % of them natively; in the
# emulated VM the host's own load shows through (0.380–0.392 of 0.4 usually, 0.354 and 0.335
# in two CI runs: a window short is measured again, up to twice; one that never lends fails each).
LENT_FRACTION = 0.85 if os.environ.get("VMLAB_ACCEL") == "tcg" else 0.90
CPU_TOLERANCE = 0.05
# Under full contention each group is held to its guarantee (cpu.max), which the kernel
# enforces to within about 1 % (weights alone: −1 to −7 % on this host's v1, up to ±20 % in
# the emulated VM). In the emulated VM the host's load can make a group use less for a
# moment, which lifts the hold as designed: A +3.2 %, B −5.2 % in one CI run of four.
CONTENTION_TOLERANCE = 0.08 if os.environ.get("VMLAB_ACCEL") == "tcg" else 0.05
# A group that wakes is held to its guarantee by the second sample natively (1 s apart); the
# emulated VM's Python is ~15x slower.
HOLD_WITHIN_S = 10.0 if os.environ.get("VMLAB_ACCEL") == "tcg" else 3.5
HOG = ("import sys, time\n"
       "chunks = []\n"
       "for _ in range({mib} // 4):\n"
       "    chunks.append(bytearray(4 << 20))\n"  # bytearray zero-fills: every page is touched
       "print('allocated', flush=True)\n"
       "time.sleep(600)\n")
# A task that only has to be there. sh, not Python: in the emulated VM a Python start under a
# small cpu.max takes seconds of the VM's CPU, and the suite's time is the host's CPU.
SLEEPER = ["sh", "-c", "exec sleep 600"]

GROUPS = "".join(f'[groups.{g}]\nusers = ["root"]\n' for g in ("A", "B", "C"))


def config(*, cpu: float, memory: str = "1G", enforcement: str | None = "soft", io: str = "") -> str:
    """A config for the kernel tests; ``enforcement`` None leaves ``[enforcement] memory`` out
    (its default)."""
    chosen = "" if enforcement is None else f'[enforcement]\nmemory = "{enforcement}"\n'
    return f'[capacity]\ncpu = {cpu}\nmemory = "{memory}"\n{io}\n{chosen}{GROUPS}'



def measure(gov: Governor, groups: list[str], seconds: float) -> dict[str, float]:
    """CPU cores used by each group over the same ``seconds`` of wall time."""
    first = {g: gov.driver.read_stats(g).cpu_usage_usec for g in groups}
    t0 = time.monotonic()
    time.sleep(seconds)  # the measurement window, not a wait
    last = {g: gov.driver.read_stats(g).cpu_usage_usec for g in groups}
    elapsed = time.monotonic() - t0
    return {g: (last[g] - first[g]) / 1e6 / elapsed for g in groups}


def measure_held(gov: Governor, expected: dict[str, float], seconds: float) -> dict[str, float]:
    """:func:`measure` for groups each held to ``expected`` cores (cpu.max while the CPU is
    saturated). The host's load shows through as a group using less for a moment, and the
    daemon then lifts the holds, as designed (that group has some to lend): CI measured a
    window with the hold lifted part of the time, in the emulated VM (A 0.218 of 0.240, B
    0.185 of 0.160) and natively on v1 (B 0.422 of 0.400). A window outside the tolerance is measured
    again, up to twice, each time once every group is held again; a hold the kernel did not
    keep fails every window."""
    measured = measure(gov, list(expected), seconds)
    for window in range(2):
        if all(abs(measured[g] - cores) <= CONTENTION_TOLERANCE * cores for g, cores in expected.items()):
            break
        print(f"\nmeasured again: window {window + 1} read " + ", ".join(f"{g} {measured[g]:.3f}" for g in expected))
        gov.wait(lambda: gov.status()["daemon"]["cpu_saturated"], "every group to be held again")
        gov.wait_settled(gov.generation())
        measured = measure(gov, list(expected), seconds)
    return measured


def drf_cpu_shares_and_refill_on_stop(tmp_path, scale: float = SCALE) -> None:
    """Two groups whose DRF answer differs from an equal split, under full contention; then one
    group stops and the other runs up to its caps.

    Capacity 1.5·s cores and 1G. A runs two CPU-heavy tasks <0.75·s cores, 32M>, B two
    memory-heavy ones <0.375·s cores, 450M>: D_A = <1.5·s, 64M> (dominant: cpu, 1),
    D_B = <0.75·s, 900M> (dominant: memory, 900/1024). Filling: λ_A = t, λ_B = t / (900/1024);
    CPU saturates at t = 1 / (1 + 0.5 · 1024/900) = 0.637: A is guaranteed 0.956·s cores, B
    0.544·s, where an equal split would give each 0.75·s. Both want more than that (their caps
    add up to 2.25·s), so the weights decide. When A stops, B runs at its caps: 0.75·s.
    """
    gov = Governor(tmp_path, config(cpu=1.5 * scale))
    try:
        a_tasks = [gov.run("A", BUSY, cpus=0.75 * scale, memory="32M") for _ in range(2)]
        for _ in range(2):
            gov.run("B", BUSY, cpus=0.375 * scale, memory="450M")
        dominant_b = 900 / 1024
        level = 1 / (1 + 0.5 / dominant_b)
        expected = {"A": 1.5 * scale * level, "B": 0.75 * scale * level / dominant_b}
        groups = gov.status()["groups"]
        for group, cores in expected.items():
            assert abs(groups[group]["allocation"]["cpu"] - cores) < 1e-6 * cores
        ratio = gov.cpu_weight("B") / gov.cpu_weight("A")
        assert abs(ratio - expected["B"] / expected["A"]) < 0.002, ratio
        # Both use their guarantee by weight (within a few percent); the next sample holds each
        # to it, which makes the split exact.
        gov.wait(lambda: gov.status()["daemon"]["cpu_saturated"], "both groups to be held to their guarantees")
        gov.wait_settled(gov.generation())  # the hold in force
        measured = measure_held(gov, expected, 6)
        print()
        for group, cores in expected.items():
            print(f"[{gov.status()['daemon']['cgroup_mode']}] group {group}: DRF guarantee {cores:.3f} cores "
                  f"(weight {gov.cpu_weight(group)}), measured {measured[group]:.3f} cores under contention "
                  f"({(measured[group] / cores - 1):+.1%})")
        for group, cores in expected.items():
            assert abs(measured[group] - cores) <= CONTENTION_TOLERANCE * cores, (group, measured, expected)

        gov.stop_tasks(a_tasks)
        gov.wait(lambda: "A" not in gov.busy_groups(), "A's exit to be noticed")
        gov.wait_settled(gov.generation())  # B's caps in force after it
        after = measure(gov, ["B"], 6)["B"]
        print(f"A stopped: B runs at its caps, measured {after:.3f} cores (caps {0.75 * scale:.3f})")
        assert abs(after - 0.75 * scale) <= CPU_TOLERANCE * 0.75 * scale
    finally:
        gov.close()


WAKER = ("import os, sys, time\n"
         "while not os.path.exists(sys.argv[1]):\n"
         "    time.sleep(0.02)\n"
         "while True:\n"
         "    pass\n")


def work_conservation(tmp_path) -> None:
    """Idle guarantees are lent and come back (the scenario of issue 8).

    Capacity 1·s cores. A runs one task declared 0.5·s that sleeps; B runs two burners declared
    0.5·s each. DRF guarantees each group 0.5·s. While A sleeps, B uses A's share up to its
    caps (≥ 0.9·s, 0.85·s in the emulated VM); within 3.5 s of A waking (10 s emulated) both are
    held to their guarantees, and then each measures 0.5·s ± 0.05·s.
    """
    gov = Governor(tmp_path, config(cpu=1.0 * SCALE))
    flag = tmp_path / "wake-A"
    try:
        gov.run("A", [sys.executable, "-c", WAKER, str(flag)], cpus=0.5 * SCALE, memory="32M")
        for _ in range(2):
            gov.run("B", BUSY, cpus=0.5 * SCALE, memory="32M")
        gov.wait_settled(gov.generation())  # the launches' refill in force
        idle = measure(gov, ["A", "B"], 4)
        for window in range(2):  # the host's own load can take a window's worth (0.335 in one CI run)
            if idle["B"] >= LENT_FRACTION * SCALE:
                break
            print(f"\nmeasured again: window {window + 1} read B {idle['B']:.3f}")
            idle = measure(gov, ["A", "B"], 4)
        groups = gov.status()["groups"]
        print(f"\n[{gov.status()['daemon']['cgroup_mode']}] A sleeps: B {idle['B']:.3f} cores "
              f"(guarantee {groups['B']['allocation']['cpu']:.3f}, borrowed {groups['B']['borrowed'].get('cpu', 0):.3f})")
        assert idle["B"] >= LENT_FRACTION * SCALE, idle
        assert groups["B"]["borrowed"].get("cpu", 0) > 0.3 * SCALE  # status says B borrows A's share
        assert not gov.status()["daemon"]["cpu_saturated"]  # A has some to lend: nobody is held
        flag.touch()
        woke = time.monotonic()
        # Weights give A its share at once where the scheduler spreads the burners evenly, and
        # as little as 0.34 where A's task shares a CPU with one of B's; by the second sample
        # (1 s apart) each group is held to its guarantee. The emulated VM's daemon samples
        # slower: one CI run measured A 0.166 of 0.2 two seconds after it woke, not yet held.
        gov.wait(lambda: gov.status()["daemon"]["cpu_saturated"], "A and B to be held to their guarantees",
                 timeout=HOLD_WITHIN_S + 10)
        held = time.monotonic() - woke
        woken = measure(gov, ["A", "B"], 1.5)
        for window in range(2):  # as above: a loaded host took 0.02 of A's 0.2 in one VM window
            if all(abs(woken[group] - 0.5 * SCALE) <= 0.05 * SCALE for group in ("A", "B")):
                break
            print(f"\nmeasured again: window {window + 1} read A {woken['A']:.3f}, B {woken['B']:.3f}")
            woken = measure(gov, ["A", "B"], 1.5)
        print(f"A woke: held after {held:.1f} s, then A {woken['A']:.3f}, B {woken['B']:.3f} cores "
              f"(each guaranteed {0.5 * SCALE:.3f})")
        assert held <= HOLD_WITHIN_S, held
        for group in ("A", "B"):
            assert abs(woken[group] - 0.5 * SCALE) <= 0.05 * SCALE, woken
    finally:
        gov.close()


# The count is renamed into place: a reader never sees the file empty between truncate and write.
PROGRESS = ("import os, sys, time\n"
            "chunks = [bytearray(4 << 20) for _ in range({mib} // 4)]\n"  # every page touched
            "print('allocated', flush=True)\n"
            "n = 0\n"
            "while True:\n"
            "    n += 1\n"
            "    chunks[n % len(chunks)][0] = n % 256\n"
            "    with open(sys.argv[1] + '.tmp', 'w') as f:\n"
            "        f.write(str(n))\n"
            "    os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
            "    time.sleep(0.05)\n")


def memory_is_admitted_never_squeezed(tmp_path, *, enforcement: str) -> None:
    """Capacity M memory. A's task declares 0.8·M and uses 0.7·M (0.6·M in the VM). B's 0.8·M
    launch waits in the queue (it would not fit beside A's): A keeps running, its limit
    untouched. With B and C both waiting, the lower dominant share (C) starts first when A's
    task ends; B when C's ends."""
    # The VM has 2 GiB, and there A touches its 0.7·M at 0.14 of a core: 280M of a 400M M took
    # 41 s of the test's 66, so M is 256M there (A's 176M, with Python's own, under its 204M).
    mib = 1024 if not SCALE < 1 else 256
    gov = Governor(tmp_path, config(cpu=1.0 * SCALE, memory=f"{mib}M", enforcement=enforcement))
    try:
        big = f"{int(0.8 * mib)}M"
        counter = tmp_path / "a-progress"
        # A's task touches 0.7·M under its own cpu.max: at 0.2·s (0.08 of a core in the emulated
        # VM) it said 'allocated' after 71 s there; at 0.35·s, after 19-24 s of a 36-55 s test
        # run alone (the VM suite's CI run, beside two VMs: 93-130 s); so 0.5·s.
        # In the VM A touches 0.6·M: at 0.7·M (179M, with Python's own and its files' pages
        # within 25M of its 204M memory.max) the hard case reclaimed at every step (77 s in CI,
        # the soft case 42 s); what is asserted, its limit untouched while it runs, is the same.
        touched = 0.7 if not SCALE < 1 else 0.6
        a = gov.run("A", [sys.executable, "-c", PROGRESS.format(mib=int(touched * mib)), str(counter)],
                    cpus=0.5 * SCALE, memory=big)
        assert a.stdout.readline() == "allocated\n"
        v2 = gov.status()["daemon"]["cgroup_mode"] == "v2"
        limit_file = {("hard", True): "memory.max", ("soft", True): "memory.high",
                      ("hard", False): "memory.limit_in_bytes",
                      ("soft", False): "memory.soft_limit_in_bytes"}[enforcement, v2]
        task_rel = f"A/task-{gov.status()['groups']['A']['tasks'][0]['id']}"
        before = gov.limit_file(task_rel, limit_file)
        # Small running tasks give B a larger dominant share than C: B <0.2·s>, C <0.05·s, 16M of
        # 256M> of 1·s (A's 0.5·s beside them leaves 0.25·s free: B's and C's 0.8·M, 0.2·s, wait
        # for memory alone).
        gov.run("B", SLEEPER, cpus=0.2 * SCALE, memory="16M")
        gov.run("C", SLEEPER, cpus=0.05 * SCALE, memory="16M")
        # sh, not Python: a Python start at 0.2·s took 12 s of each wait below in the VM.
        b = gov.run_queued("B", ["sh", "-c", "echo B started"], cpus=0.2 * SCALE, memory=big)
        c = gov.run_queued("C", ["sh", "-c", "echo C started; exec sleep 600"], cpus=0.2 * SCALE, memory=big)
        queue = gov.status()["queue"]
        progress_before = int(counter.read_text() or 0)
        # A's task touches its memory again at each step: ten more while B and C wait.
        gov.wait(lambda: a.poll() is not None or int(counter.read_text() or 0) >= progress_before + 10,
                 "A's task to go on while B and C wait")
        progress_after = int(counter.read_text() or 0)
        print(f"\n[{gov.status()['daemon']['cgroup_mode']}, {enforcement}] A uses {touched * mib:.0f}M of {big}: "
              f"alive={a.poll() is None}, progress {progress_before} -> {progress_after}; queue: "
              + ", ".join(f"#{q['position']} {q['group']} waits for {q['waiting_for'] >> 20}M" for q in queue))
        assert a.poll() is None and progress_after > progress_before
        assert gov.limit_file(task_rel, limit_file) == before  # never lowered
        assert [q["group"] for q in queue] == ["C", "B"]  # C's share is lower: it is served first
        assert b.poll() is None and c.poll() is None and "B" in gov.busy_groups()
        assert len(gov.status()["groups"]["B"]["tasks"]) == 1  # only the small one runs

        gov.stop_tasks([a])
        assert c.stdout.readline() == "C started\n"
        assert b.poll() is None and [q["group"] for q in gov.status()["queue"]] == ["B"]
        gov.stop_tasks([c])
        assert b.stdout.readline() == "B started\n"
        b.wait(60)
        print("A ended: C started first (lower dominant share), then B when C ended")
        assert b.returncode == 0
        assert "started after waiting" in b.stderr.read()  # the user is told why it waited, and for how long
    finally:
        gov.close()


def cores_shrink_and_grow_while_tasks_run(tmp_path) -> None:
    """``cpu = "cores"`` on a 2-CPU host: A (declared 2 cores) alone holds both; B's launch (1
    core) shrinks A to one core while A's task runs, B's exit grows it back. No write is
    refused: on v1 the driver orders the task cgroups' cpusets around their group's."""
    gov = Governor(tmp_path, config(cpu=2.0).replace("[enforcement]", '[enforcement]\ncpu = "cores"'))
    try:
        gov.run("A", SLEEPER, cpus=2.0, memory="32M")
        a_wide = gov.limit_file("A", "cpuset.cpus").strip()
        b = gov.run("B", SLEEPER, cpus=1.0, memory="32M")
        a_narrow, b_cpus = gov.limit_file("A", "cpuset.cpus").strip(), gov.limit_file("B", "cpuset.cpus").strip()
        gov.stop_tasks([b])
        gov.wait(lambda: "B" not in gov.busy_groups(), "B's exit")
        # Status drops B's task at its exit; the refill that widens A comes on the next settle
        # (in the emulated VM CI read A's cpuset between the two).
        gov.wait(lambda: gov.limit_file("A", "cpuset.cpus").strip() != a_narrow, "A's cpuset to grow back", 10)
        a_again = gov.limit_file("A", "cpuset.cpus").strip()
        errors = [e["message"] for e in gov.status()["events"] if e["kind"] == "error"]
        print(f"\ncores: A {a_wide} -> {a_narrow} (B {b_cpus}) -> {a_again}; errors: {errors or 'none'}")
        assert (a_wide, a_narrow, b_cpus, a_again) == ("0-1", "0", "1", "0-1")
        assert errors == []
        assert gov.status()["groups"]["A"]["limits"]["cpuset.cpus"] == "0-1"
    finally:
        gov.close()


def memory_soft_limit_throttles_without_killing(tmp_path, *, v2: bool) -> None:
    """A task declaring 64M that touches 160M keeps running: memory.high throttles and reclaims
    it on v2; v1's soft limit (its closest file) only marks it for reclaim under pressure."""
    gov = Governor(tmp_path, config(cpu=1.0 * SCALE, enforcement="soft"))
    try:
        hog = gov.run("C", [sys.executable, "-c", HOG.format(mib=160)], cpus=0.5 * SCALE, memory="64M")
        limit = "memory.high" if v2 else "memory.soft_limit_in_bytes"
        assert int(gov.limit_file(task_rel(gov, "C"), limit)) == 64 * MIB  # the task's cap

        def over_the_limit() -> bool:
            stats = gov.driver.read_stats("C")
            return stats.memory_events.get("high", 0) > 0 if v2 else stats.memory_current_bytes > 64 * MIB

        gov.wait(lambda: over_the_limit() or hog.poll() is not None, "the hog to pass 64M", timeout=120)
        # It goes on past the limit: v2's memory.high throttles it again and again (without swap
        # to reclaim to it stays there), v1's soft limit lets it touch all 160M ('allocated').
        throttled = gov.driver.read_stats("C").memory_events.get("high", 0) + 50
        gov.wait(lambda: hog.poll() is not None or select.select([hog.stdout], [], [], 0)[0]
                 or gov.driver.read_stats("C").memory_events.get("high", 0) >= throttled,
                 "the hog to touch all 160M or be throttled 50 times more", timeout=120)
        stats = gov.driver.read_stats("C")
        print(f"\n{limit} 64M, hog touching 160M: alive={hog.poll() is None}, "
              f"memory.current={stats.memory_current_bytes / MIB:.1f}M, events={stats.memory_events}")
        assert hog.poll() is None, "the hog was killed under a soft limit"
        assert stats.memory_events.get("oom_kill", 0) == 0
    finally:
        gov.close()


def memory_hard_limit_kills_only_the_offender(tmp_path) -> None:
    """With memory = "hard" a task that touches 256M with 64M declared is OOM-killed; a task of
    another group loses nothing."""
    gov = Governor(tmp_path, config(cpu=1.0 * SCALE, enforcement="hard"))
    try:
        other = gov.run("B", SLEEPER, cpus=0.2 * SCALE, memory="64M")
        hog = gov.run("C", [sys.executable, "-c", HOG.format(mib=256)], cpus=0.5 * SCALE, memory="64M",
                      may_end=True)  # it may be OOM-killed before the harness sees it listed
        hog.wait(timeout=120)
        gov.wait_settled(gov.generation())  # the hog's exit handled
        other_events = gov.driver.read_stats("B").memory_events
        print(f"\nhard limit 64M, hog touching 256M: hog exit {hog.returncode}; other group alive="
              f"{other.poll() is None}, its memory events {other_events}")
        assert hog.returncode == 128 + 9  # governor run says so: the command was killed (SIGKILL)
        assert "OOM-killed at its memory cap 64.0M" in hog.stderr.read()
        assert other.poll() is None
        assert other_events.get("oom_kill", 0) == 0
    finally:
        gov.close()


def task_rel(gov: Governor, group: str) -> str:
    """The cgroup of ``group``'s first task, relative to governor's root."""
    return f"{group}/task-{gov.status()['groups'][group]['tasks'][0]['id']}"
