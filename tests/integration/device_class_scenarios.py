"""A device class other than GPUs end to end on the real kernel (issue 45, point 3): the stand-in
second class (:mod:`support.standin_device`, two character nodes on a major no driver holds:
an open the device cgroup lets through gets ``ENXIO``, one it refuses ``EPERM``), registered in
the daemon and in ``governor run`` through the registry and the provider table alone, is placed
device by device, handed over and re-adopted by identity through the code the GPUs use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from daemon_harness import GOVERNOR, Governor
from gpu_scenarios import CPUS, probe_command, what_it_saw
from readopt_scenarios import PLAIN, killed_and_restarted
from support.device_nodes import stand_in_nodes

STANDIN = Path(__file__).parents[1] / "support" / "standin_device.py"


def a_standin_class_is_placed_handed_over_and_readopted_by_identity(tmp_path: Path) -> None:
    """Capacity two stand-in devices [n0, n1]. A task of A asking ``--fpgas 1`` opens n0 and
    may not open n1. The daemon is killed (-9) and started again with the list reordered [n1,
    n0]: a task of B asking one gets n1 (index 0 now; A's task still holds n0, found by its
    identity), and may not open n0. A third launch waits; A's task is stopped, n0 drains (no
    process holds it) and is handed to the third, which opens n0 alone."""
    with stand_in_nodes(tmp_path, 2) as (_, (n0, n1)):
        gov = Governor(tmp_path, PLAIN, wrapper=(sys.executable, str(STANDIN), f"{n0},{n1}"))
        try:
            assert gov.status()["capacity"]["fpga"] == 2
            first, seen = _probe(gov, "A", [n0, n1])
            assert (seen[n0], seen[n1]) == ("ENXIO", "EPERM"), seen
            gov.command[2] = f"{n1},{n0}"  # the wrapper's list: n0 is index 1 now
            killed_and_restarted(gov)
            second, seen = _probe(gov, "B", [n0, n1])
            assert (seen[n0], seen[n1]) == ("EPERM", "ENXIO"), seen
            third = _launch(gov, "B", [n0, n1])
            gov.wait(lambda: len(gov.status()["queue"]) == 1 or third.poll() is not None, "the third launch to queue")
            assert third.poll() is None, third.communicate()
            gov.stop_tasks([first])
            seen = what_it_saw(third)
            assert (seen[n0], seen[n1]) == ("ENXIO", "EPERM"), seen
            handed = [line for line in gov.daemon_log().splitlines()
                      if "FPGA 1 is free: no process holds it since task" in line]
            assert handed, gov.daemon_log()[-3000:]
        finally:
            gov.close()


def _launch(gov: Governor, group: str, nodes: list[str]) -> subprocess.Popen:
    """``governor run --fpgas 1`` of a probe of ``nodes`` in ``group``, the class registered in
    the client too (its flag comes from the registry)."""
    proc = subprocess.Popen([sys.executable, str(STANDIN), ",".join(nodes), GOVERNOR, "run", "--socket", gov.socket,
                             "--group", group, "--fpgas", "1", f"--cpus={CPUS}", "--memory=32M", "--",
                             *probe_command(nodes)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    gov.tasks.append(proc)
    return proc


def _probe(gov: Governor, group: str, nodes: list[str]) -> tuple[subprocess.Popen, dict]:
    proc = _launch(gov, group, nodes)
    return proc, what_it_saw(proc)
