"""Re-adoption is exact (issue 31), end to end on the real kernel: a daemon killed with -9 and
started again with GPUs governed re-adopts a running task with its processes, and ``governor
stop`` ends them before it says ``stopped``; a restart that lists the GPUs in another order
leaves each held GPU with its task. The GPUs are stand-in character nodes whose major no
driver holds (an open the device cgroup lets through gets ``ENXIO``, one it refuses ``EPERM``).
Shared by the v1 (native: the ``devices`` hierarchy joins at the restart) and v2 (VM) modules."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psutil
from daemon_harness import GOVERNOR, Governor
from support.device_nodes import stand_in_nodes
from gpu_scenarios import CPUS, probe_command, what_it_saw
from task_scenarios import _row

# sh, not Python: at 0.1 of a core a Python start took ~11 s of the emulated VM's time.
SLEEPER = ["sh", "-c", "echo running; exec sleep 600"]
PLAIN = '[capacity]\ncpu = 1\nmemory = "1G"\n[groups.A]\nusers = ["root"]\n[groups.B]\nusers = ["root"]\n'


def with_gpus(gov: Governor, nodes: list[str]) -> None:
    """Rewrite the daemon's config to govern ``nodes`` as its GPUs (capacity.gpus, in order)."""
    path = gov.dir / "governor.toml"
    text = path.read_text()
    if "gpus = " in text:
        text = "\n".join(line for line in text.splitlines() if not line.startswith(("gpus = ", "gpu_control = ")))
    path.write_text(text.replace("[capacity]\n", f"[capacity]\ngpus = {json.dumps(nodes)}\ngpu_control = []\n", 1))


def killed_and_restarted(gov: Governor) -> None:
    """``kill -9`` the daemon (its tasks run on) and start it again on the config now in its file."""
    gov.daemon.kill()
    gov.daemon.wait()
    gov.restart()
    gov.driver = gov._reading_driver()  # v1: the devices hierarchy's root too, removed at close


def restart_with_gpus_readopts_the_processes_and_stop_ends_them(tmp_path) -> None:
    """A task runs under a daemon that governs no GPU; the daemon is killed (-9) and started
    again with capacity.gpus (v1: the devices hierarchy joins). The re-adopted task lists its
    processes (v1: they are in its cgroup in the devices hierarchy too), and ``governor stop``
    says ``stopped`` once they are gone."""
    with stand_in_nodes(tmp_path, 2) as (_, nodes):
        gov = Governor(tmp_path, PLAIN)
        try:
            proc = gov.run("A", SLEEPER, cpus=0.1, memory="32M", name="sleeper")
            assert proc.stdout.readline() == "running\n"
            row = _row(gov, "sleeper")
            task, pids = row["id"], [process["pid"] for process in row["processes"]]
            assert pids, row
            with_gpus(gov, nodes)
            killed_and_restarted(gov)
            row = _row(gov, "sleeper")
            assert row["id"] == task and [process["pid"] for process in row["processes"]] == pids, row
            if gov.status()["daemon"]["cgroup_mode"] == "v1":
                for pid in pids:
                    devices = next(line for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                                   if line.split(":")[1] == "devices")
                    assert devices.endswith(f"/{gov.root_name}/A/task-{task}"), devices
            stopped = subprocess.run([GOVERNOR, "stop", "--socket", gov.socket, task], capture_output=True, text=True,
                                     timeout=60)
            assert (stopped.returncode, stopped.stdout) == (0, f"stopped task {task}\n"), stopped.stderr
            running = [pid for pid in pids if psutil.pid_exists(pid)
                       and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
            assert not running, f"stopped task {task}, but {running} run on"
            assert proc.wait(timeout=10) == 128 + 9
        finally:
            gov.close()


def restart_with_the_gpus_reordered_keeps_each_held_gpu(tmp_path) -> None:
    """Bob's task holds the first of three GPUs (g0). The daemon is killed (-9) and started
    again with capacity.gpus reordered [g1, g0, g2]: bob's task still holds g0, and alice's
    ``--gpus 1`` gets g1 (index 0 now): she opens g1 and may not open g0. A restart whose list
    drops g0 does not start, saying which task holds it."""
    with stand_in_nodes(tmp_path, 3) as (_, (g0, g1, g2)):
        gov = Governor(tmp_path, PLAIN.replace("[capacity]\n", f"[capacity]\ngpus = {json.dumps([g0, g1, g2])}\n"
                                                                "gpu_control = []\n"))
        try:
            bob, seen = _probe(gov, "A", [g0, g1])
            assert (seen[g0], seen[g1]) == ("ENXIO", "EPERM"), seen
            with_gpus(gov, [g1, g0, g2])
            killed_and_restarted(gov)
            held = {gpu["node"]: gpu["task"] for gpu in gov.status()["gpus"] if gpu.get("task")}
            assert list(held) == [g0], held
            alice, seen = _probe(gov, "B", [g0, g1])
            assert (seen[g0], seen[g1]) == ("EPERM", "ENXIO"), seen
            held = {gpu["node"]: gpu["task"] for gpu in gov.status()["gpus"] if gpu.get("task")}
            assert sorted(held) == sorted([g0, g1]) and len(set(held.values())) == 2, held
            with_gpus(gov, [g1, g2])  # drops bob's GPU: the daemon must not start and hand it out
            gov.daemon.kill()
            gov.daemon.wait()
            refused = subprocess.run(gov.command, capture_output=True, text=True, timeout=60)
            assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
            assert (f"task {held[g0]} (group A) holds GPU {os.major(os.stat(g0).st_rdev)}:0 and this config drops "
                    f"it") in refused.stderr, refused.stderr
            assert psutil.Process(bob.pid).status() != psutil.STATUS_ZOMBIE  # its task runs on, ungoverned meanwhile
        finally:
            gov.close()


def _probe(gov: Governor, group: str, nodes: list[str]) -> tuple[subprocess.Popen, dict]:
    proc = gov.run(group, probe_command(nodes), gpus=1, cpus=CPUS, memory="32M")
    return proc, what_it_saw(proc)
