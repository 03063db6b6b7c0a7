"""The cores the system reserves are lent while it leaves them idle (issue 42), and it takes
them back by weight. Before, the root's ``cpu.max`` held the governed tasks to the host less
the reserve even on an idle host: two busy users of this 2-core host had a core each with no
governor and 0.875 each governed.

Natively (cgroup v1) from test_daemon_v1; a reserve of a whole core makes the lent part
plain against the host's own noise."""

from __future__ import annotations

import math
import subprocess
import time

import psutil
import pytest
from daemon_harness import BUSY, Governor
from scenarios import GROUPS, measure

RESERVE = 1.0  # cores
WINDOWS = 3


def _cores_used(pid: int, seconds: float) -> float:
    """The CPU ``pid`` used over ``seconds`` of wall time, in cores."""
    process = psutil.Process(pid)
    before, began = sum(process.cpu_times()[:2]), time.monotonic()
    time.sleep(seconds)  # the measurement window, not a wait
    return (sum(process.cpu_times()[:2]) - before) / (time.monotonic() - began)


def reserve_is_lent_while_idle_and_taken_back(tmp_path) -> None:
    """Capacity: the host's N cores less a reserve of 1. A and B each run ⌈N/2⌉ burners of a
    core: both want all of their guarantee, (N − 1)/2, so both are held; held, they share the
    whole host, N cores, and use more than the capacity by more than half the reserve (the
    root's old bound kept them to N − 1). A plain process of the system's then gets its CPU
    by weight beside them (at least 0.4 of a core)."""
    if len(psutil.Process().cpu_affinity()) < 2:
        pytest.skip("a reserve of a whole core leaves nothing to divide on one CPU")
    gov = Governor(tmp_path, f'[capacity]\nmemory = "1G"\nreserve = {{ cpu = {RESERVE} }}\n{GROUPS}')
    system = None
    try:
        capacity = gov.status()["capacity"]["cpu"]
        cores = capacity + RESERVE
        for group in ("A", "B"):
            for _ in range(math.ceil(cores / 2)):
                gov.run(group, BUSY, cpus=1.0, memory="32M")
        gov.wait(lambda: gov.status()["daemon"]["cpu_saturated"], "A and B to be held to their guarantees")
        gov.wait_settled(gov.generation())  # the hold in force
        windows = []
        for _ in range(WINDOWS):  # the host's own load can take a window's worth
            used = measure(gov, ["A", "B"], 4)
            windows.append(used["A"] + used["B"])
            if windows[-1] > capacity + RESERVE / 2:
                break
        print(f"\n[{gov.status()['daemon']['cgroup_mode']}] capacity {capacity:g} of {cores:g} cores, both held: "
              f"A and B used " + ", ".join(f"{w:.3f}" for w in windows) + " cores")
        assert windows[-1] > capacity + RESERVE / 2, windows

        system = subprocess.Popen(BUSY)  # root's, outside governor's root: the system's
        got = _cores_used(system.pid, 4)
        print(f"a busy process of the system's beside them: {got:.3f} cores")
        assert got >= 0.4, got
    finally:
        if system is not None:
            system.kill()
            system.wait()
        gov.close()
