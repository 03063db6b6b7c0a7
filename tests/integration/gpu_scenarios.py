"""GPUs on the real kernel (issue 26), without a GPU: two char nodes with NVIDIA's numbers
(195:0 and 195:1, made with mknod in a scratch directory the config lists) stand in for
``/dev/nvidia0`` and ``/dev/nvidia1``. An open the device cgroup lets through reaches no driver
(no nvidia module here): ``ENXIO``; one it refuses: ``EPERM``. Shared by the v1 (native,
``devices.deny``) and v2 (VM, a BPF device program) test modules through ``kernel_cases``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
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
def gpu_nodes(tmp_path: Path, numbers: tuple[tuple[int, int], ...] = ((NVIDIA_MAJOR, 0), (NVIDIA_MAJOR, 1))
              ) -> Iterator[list[str]]:
    """Nodes ``numbers`` (default 195:0 and 195:1), ``nvidia0``… in a scratch directory, on a
    tmpfs mounted ``dev`` when the temporary directory's filesystem is ``nodev`` (whose nodes
    open nothing)."""
    scratch = tmp_path / "dev"
    scratch.mkdir()
    mounted = False
    if os.statvfs(scratch).f_flag & os.ST_NODEV:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "dev,mode=0755,size=64k", "governor-test", str(scratch)],
                       check=True)
        mounted = True
    try:
        nodes = []
        for index, (major, minor) in enumerate(numbers):
            node = scratch / f"nvidia{index}"
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


# Break 4 of issue 31: a task's GPU fd, passed over a Unix socket (SCM_RIGHTS) to a task
# without GPUs, outlives the task. The sender holds the node open, sends it, and exits once
# told to (a file appears); the receiver keeps reading it.
SENDER = ("import os, socket, sys, time\n"
          "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
          "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[2])\n"
          "socket.send_fds(s, [b'gpu'], [fd])\n"
          "while not os.path.exists(sys.argv[3]): time.sleep(0.02)\n")
RECEIVER = ("import json, os, socket, sys, time\n"
            "server = socket.socket(socket.AF_UNIX); server.bind(sys.argv[1]); server.listen(1)\n"
            "print(os.getpid(), flush=True)\n"
            "conn, _ = server.accept()\n"
            "_, fds, _, _ = socket.recv_fds(conn, 16, 1)\n"
            "print(json.dumps({'fds': len(fds)}), flush=True)\n"
            "while True: os.read(fds[0], 1); time.sleep(0.02)\n")
# Prints the pids (but its own) holding the node open as it starts, then holds its GPU.
HOLDERS = ("import json, os, sys, time\n"
           "want = os.stat(sys.argv[1]).st_rdev\n"
           "held = []\n"
           "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
           "    try: fds = os.listdir(f'/proc/{pid}/fd')\n"
           "    except OSError: continue\n"
           "    for fd in fds:\n"
           "        try: st = os.stat(f'/proc/{pid}/fd/{fd}')\n"
           "        except OSError: continue\n"
           "        if st.st_rdev == want and int(pid) != os.getpid(): held.append(int(pid))\n"
           "print(json.dumps(held), flush=True)\n"
           "time.sleep(3600)\n")


def a_passed_gpu_fd_is_ended_before_the_gpu_is_handed_on(tmp_path: Path) -> None:
    """One GPU, whose stand-in node opens (``/dev/full``'s numbers, 1:7: an open fd is needed).
    A ``--gpus 1`` task passes its open node to a task of the same user without GPUs and
    exits; a task waiting for the GPU starts only after the receiver was ended (it finds no
    other process holding the node), the GPU shown draining meanwhile, the end logged."""
    with gpu_nodes(tmp_path, ((1, 7),)) as (node,):
        _a_passed_gpu_fd_is_ended(tmp_path, node)


def _a_passed_gpu_fd_is_ended(tmp_path: Path, node: str) -> None:
    config = ('[capacity]\ncpu = 1\nmemory = "1G"\n'
              f'gpus = {json.dumps([str(node)])}\ngpu_control = []\n'
              '[groups.A]\nusers = ["root"]\n[groups.B]\nusers = ["root"]\n')
    gov = Governor(tmp_path, config)
    try:
        socket_path, done = str(tmp_path / "pass.sock"), tmp_path / "sender-may-exit"
        receiver = gov.run("A", [sys.executable, "-c", RECEIVER, socket_path], cpus=0.1, memory="32M")
        receiving = int(receiver.stdout.readline())  # listening
        sender = gov.run("A", [sys.executable, "-c", SENDER, str(node), socket_path, str(done)],
                         gpus=1, cpus=0.1, memory="32M")
        assert json.loads(receiver.stdout.readline()) == {"fds": 1}
        waiting = gov.run_queued("B", [sys.executable, "-c", HOLDERS, str(node)], gpus=1, cpus=0.1, memory="32M")
        done.touch()
        assert sender.wait(30) == 0
        held = json.loads(waiting.stdout.readline())  # it started: the GPU was handed on
        assert held == [], f"processes holding the GPU when it was handed on: {held}"
        assert receiver.wait(10) in (-signal.SIGKILL, 128 + signal.SIGKILL), receiver.returncode  # governor run: 137
        ended = [e["message"] for e in gov.status()["events"] if e["kind"] == "gpu_holder_ended"]
        assert len(ended) == 1 and ended[0].startswith(f"process {receiving} (user root, task "), ended
        assert [(g["task"] is not None, g["draining"]) for g in gov.status()["gpus"]] == [(True, False)]
    finally:
        gov.close()
