"""GPUs on the real kernel (issue 26), without a GPU: two stand-in char nodes
(:func:`device_nodes.stand_in_nodes`: minors 0 and 1 on a major no driver holds, so on a host
with a real NVIDIA driver too) stand in for ``/dev/nvidia0`` and ``/dev/nvidia1``. An open the
device cgroup lets through reaches no driver: ``ENXIO``; one it refuses: ``EPERM``. NVML knows
no GPU at them, so CUDA is told each by its minor number, with or without a real GPU here.
Shared by the v1 (native, ``devices.deny``) and v2 (VM, a BPF device program) test modules
through ``kernel_cases``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from daemon_harness import Governor
from device_nodes import stand_in_nodes

# Prints what it was handed and what each node gives it, then holds its GPUs until killed.
PROBE = ("import errno, json, os, sys, time\n"
         "seen = {'CUDA_VISIBLE_DEVICES': os.environ.get('CUDA_VISIBLE_DEVICES')}\n"
         "for path in sys.argv[1:]:\n"
         "    try:\n"
         "        os.close(os.open(path, os.O_RDONLY))\n"
         "        seen[path] = 'ok'\n"
         "    except OSError as e:\n"
         "        seen[path] = errno.errorcode[e.errno]\n"
         "print(json.dumps(seen), flush=True)\n"
         "time.sleep(3600)\n")


def probe(gov: Governor, group: str, nodes: list[str], **demand) -> tuple[subprocess.Popen, dict]:
    """Launch :data:`PROBE` in ``group`` and read what it saw."""
    proc = gov.run(group, [sys.executable, "-c", PROBE, *nodes], **demand)
    return proc, json.loads(proc.stdout.readline())


def gpus_are_admitted_guarded_and_handed(tmp_path: Path) -> None:
    """Capacity 2 GPUs. A task of A holding GPU 0 opens it; a second, given GPU 1, opens GPU 1
    and gets EPERM on GPU 0, and CUDA is told its GPU; a task without --gpus opens neither.
    With both held by A, a third task of A queues first and a task of B after it: B's comes
    first in the queue (its dominant share is 0, A's is 1: DRF order, not arrival order),
    saying which group holds the GPUs; stopping A's task on GPU 0 hands GPU 0 to B's task."""
    with stand_in_nodes(tmp_path) as (_, nodes):
        config = ('[capacity]\ncpu = 1\nmemory = "1G"\n'
                  f'gpus = {json.dumps(nodes)}\ngpu_control = []\n'
                  '[groups.A]\nusers = ["root"]\n[groups.B]\nusers = ["root"]\n')
        gov = Governor(tmp_path, config)
        try:
            assert gov.status()["capacity"]["gpu"] == 2
            first, seen = probe(gov, "A", nodes, gpus=1, cpus=0.1, memory="32M")
            assert seen == {"CUDA_VISIBLE_DEVICES": "0", nodes[0]: "ENXIO", nodes[1]: "EPERM"}, seen
            second, seen = probe(gov, "A", nodes, gpus=1, cpus=0.1, memory="32M")
            assert seen == {"CUDA_VISIBLE_DEVICES": "1", nodes[0]: "EPERM", nodes[1]: "ENXIO"}, seen
            plain, seen = probe(gov, "B", nodes, cpus=0.1, memory="32M")
            assert seen[nodes[0]] == seen[nodes[1]] == "EPERM", seen
            gov.stop_tasks([plain])
            holders = {g["index"]: (g["group"], g["task"]) for g in gov.status()["gpus"]}
            assert [group for group, _ in holders.values()] == ["A", "A"], holders

            a_third = gov.run_queued("A", [sys.executable, "-c", PROBE, *nodes], gpus=1, cpus=0.1, memory="32M")
            b_first = gov.run_queued("B", [sys.executable, "-c", PROBE, *nodes], gpus=1, cpus=0.1, memory="32M")
            queue = gov.status()["queue"]
            print(f"\n[{gov.status()['daemon']['cgroup_mode']}] GPU queue: "
                  + "; ".join(f"#{q['position']} {q['group']}: {q['reason']}" for q in queue))
            assert [q["group"] for q in queue] == ["B", "A"], queue
            assert queue[0]["reason"].startswith("gpu: waits for 1 GPU to free (held by A 2)"), queue[0]
            gov.stop_tasks([first])
            seen = json.loads(b_first.stdout.readline())
            assert seen == {"CUDA_VISIBLE_DEVICES": "0", nodes[0]: "ENXIO", nodes[1]: "EPERM"}, seen
            assert [q["group"] for q in gov.status()["queue"]] == ["A"]
            gov.stop_tasks([second])
            assert json.loads(a_third.stdout.readline())[nodes[1]] == "ENXIO"
        finally:
            gov.close()
