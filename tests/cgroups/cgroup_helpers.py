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
