"""GPUs on the real kernel (issue 26), without a GPU: two char nodes with NVIDIA's numbers
(195:0 and 195:1, made with mknod in a scratch directory the config lists) stand in for
``/dev/nvidia0`` and ``/dev/nvidia1``. An open the device cgroup lets through reaches no driver
(no nvidia module here): ``ENXIO``; one it refuses: ``EPERM``. Shared by the v1 (native,
``devices.deny``) and v2 (VM, a BPF device program) test modules through ``kernel_cases``."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from daemon_harness import Governor

NVIDIA_MAJOR = 195
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


@contextlib.contextmanager
def gpu_nodes(tmp_path: Path, major: int = NVIDIA_MAJOR, minors: tuple[int, ...] = (0, 1)) -> Iterator[list[str]]:
    """Nodes ``major:minor`` (195:0 and 195:1 unless told) in a scratch directory, on a tmpfs
    mounted ``dev`` when the temporary directory's filesystem is ``nodev`` (whose nodes open
    nothing)."""
    scratch = tmp_path / "dev"
    scratch.mkdir()
    mounted = False
    if os.statvfs(scratch).f_flag & os.ST_NODEV:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "dev,mode=0755,size=64k", "governor-test", str(scratch)],
                       check=True)
        mounted = True
    try:
        nodes = []
        for minor in minors:
            node = scratch / f"nvidia{minor}"
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            nodes.append(str(node))
        yield nodes
    finally:
        if mounted:
            subprocess.run(["umount", str(scratch)], check=True)


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
    with gpu_nodes(tmp_path) as nodes:
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
