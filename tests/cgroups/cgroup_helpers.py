"""Helpers shared by the real-kernel driver tests: child processes the test starts itself,
and CPU measurement from the cgroup's own counter against time.monotonic()."""

import os
import subprocess
import sys
import time

import pytest

BUSY = "while True: pass"
SLEEPER = "import time; time.sleep(600)"
# Waits for a line on stdin (sent once it has been moved into its cgroup), then touches
# 256 MiB so that every page is charged to that cgroup.
HOG = "import sys; sys.stdin.readline(); b = b'x' * (256 << 20); print('survived')"

# Waits for a line on stdin (sent once it is in its cgroup), then makes a tree: five children
# with a child each, and goes on forking a sleeper every 10 ms until killed.
FORKER = ("import os, sys, time\n"
          "sys.stdin.readline()\n"
          "def sleeper():\n"
          "    if os.fork() == 0:\n"
          "        time.sleep(600)\n"
          "        os._exit(0)\n"
          "for _ in range(5):\n"
          "    if os.fork() == 0:\n"
          "        sleeper()\n"
          "        time.sleep(600)\n"
          "        os._exit(0)\n"
          "print('forked', flush=True)\n"
          "while True:\n"
          "    sleeper()\n"
          "    time.sleep(0.01)\n")


def kill_forking_tree(driver, children: "Children", mode: str, timeout: float = 10.0) -> float:
    """Start :data:`FORKER` in a new cgroup ``k``, kill the cgroup with ``driver.kill`` while
    the tree grows, and check that it empties and its counters stay readable; returns the
    seconds until it was empty."""
    driver.create("k")
    driver.enable_controllers("k", ("cpu", "memory"))
    forker = children.python(FORKER, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    driver.move("k", forker.pid)
    forker.stdin.write(b"\n")
    forker.stdin.flush()
    assert forker.stdout.readline() == b"forked\n"
    deadline = time.monotonic() + timeout
    while len(driver.pids("k")) < 11:  # the forker, its five children and theirs (still forking)
        assert time.monotonic() < deadline, f"k holds only {driver.pids('k')}"
        time.sleep(0.01)
    before = len(driver.pids("k"))
    start = time.monotonic()
    driver.kill("k")
    assert forker.wait(timeout=timeout) == -9
    while driver.pids("k"):
        assert time.monotonic() - start < timeout, f"k still holds {driver.pids('k')}"
        time.sleep(0.01)
    seconds = time.monotonic() - start
    print(f"{mode} kill: {before} processes in the tree, empty after {seconds * 1000:.0f} ms")
    assert before >= 11
    stats = driver.read_stats("k", peak=True)  # an emptied cgroup still has its counters
    assert not stats.populated and stats.cpu_usage_usec > 0 and stats.memory_peak_bytes > 0
    return seconds


class Children:
    """Processes started by a test; all killed and reaped by :meth:`kill_all`."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(argv, **kwargs)
        self.procs.append(proc)
        return proc

    def python(self, code: str, **kwargs) -> subprocess.Popen:
        return self.start([sys.executable, "-c", code], **kwargs)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream:
                    stream.close()


def cpu_tolerance() -> float:
    """±cores allowed around a CPU quota; emulated (TCG) VMs jitter more."""
    return 0.08 if os.environ.get("VMLAB_ACCEL") == "tcg" else 0.05


def measure_cores(driver, rel: str, seconds: float) -> float:
    """CPU used by cgroup ``rel`` over ``seconds`` of wall time, in cores."""
    usage0, t0 = driver.read_stats(rel).cpu_usage_usec, time.monotonic()
    time.sleep(seconds)
    usage1, t1 = driver.read_stats(rel).cpu_usage_usec, time.monotonic()
    return (usage1 - usage0) / 1e6 / (t1 - t0)


def removal_order(driver, rel: str = "") -> list[str]:
    """Every cgroup below ``rel`` (and ``rel``), deepest first."""
    order = []
    for child in driver.children(rel):
        order += removal_order(driver, f"{rel}/{child}" if rel else child)
    return order + [rel]


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
