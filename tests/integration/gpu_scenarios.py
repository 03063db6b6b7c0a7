"""GPUs on the real kernel (issue 26), without a GPU: two stand-in char nodes
(:func:`device_nodes.stand_in_nodes`: minors 0 and 1 on a major no driver holds, so on a host
with a real NVIDIA driver too) stand in for ``/dev/nvidia0`` and ``/dev/nvidia1``. An open the
device cgroup lets through reaches no driver: ``ENXIO``; one it refuses: ``EPERM``. NVML knows
no GPU at them, so CUDA is told each by its minor number, with or without a real GPU here.
Shared by the v1 (native, ``devices.deny``) and v2 (VM, a BPF device program) test modules
through ``kernel_cases``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from daemon_harness import GOVERNOR, Governor
from support.device_nodes import OPENS, device_nodes, outcomes, stand_in_nodes

# Says what it was handed (CUDA_VISIBLE_DEVICES, "-" when unset) and what each node gives it,
# then holds its GPUs until killed. sh, not Python (:data:`~support.device_nodes.OPENS`).
PROBE = OPENS + 'echo "${CUDA_VISIBLE_DEVICES--}"; opens "$@"; exec sleep 3600\n'

# The CPU each task here declares (of the configs' 1 core; three at most run at once): a Python
# one at 0.1 of a core took 11 s of the emulated VM's time to start and say what it saw.
CPUS = 0.25


def probe_command(nodes: list[str]) -> list[str]:
    """:data:`PROBE` on ``nodes``, as a task's command."""
    return ["sh", "-c", PROBE, "probe", *nodes]


def what_it_saw(proc: subprocess.Popen) -> dict:
    """What a :data:`PROBE` task said: ``CUDA_VISIBLE_DEVICES`` (None: unset) and each node's
    outcome ("ok" or the error's name)."""
    cuda = proc.stdout.readline().strip()
    return {"CUDA_VISIBLE_DEVICES": None if cuda == "-" else cuda, **outcomes(proc.stdout.readline())}


def probe(gov: Governor, group: str, nodes: list[str], **demand) -> tuple[subprocess.Popen, dict]:
    """Launch :data:`PROBE` in ``group`` and read what it saw."""
    proc = gov.run(group, probe_command(nodes), **demand)
    return proc, what_it_saw(proc)


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
            first, seen = probe(gov, "A", nodes, gpus=1, cpus=CPUS, memory="32M")
            assert seen == {"CUDA_VISIBLE_DEVICES": "0", nodes[0]: "ENXIO", nodes[1]: "EPERM"}, seen
            second, seen = probe(gov, "A", nodes, gpus=1, cpus=CPUS, memory="32M")
            assert seen == {"CUDA_VISIBLE_DEVICES": "1", nodes[0]: "EPERM", nodes[1]: "ENXIO"}, seen
            plain, seen = probe(gov, "B", nodes, cpus=CPUS, memory="32M")
            assert seen[nodes[0]] == seen[nodes[1]] == "EPERM", seen
            gov.stop_tasks([plain])
            holders = {g["index"]: (g["group"], g["task"]) for g in gov.status()["gpus"]}
            assert [group for group, _ in holders.values()] == ["A", "A"], holders

            a_third = gov.run_queued("A", probe_command(nodes), gpus=1, cpus=CPUS, memory="32M")
            b_first = gov.run_queued("B", probe_command(nodes), gpus=1, cpus=CPUS, memory="32M")
            queue = gov.status()["queue"]
            print(f"\n[{gov.status()['daemon']['cgroup_mode']}] GPU queue: "
                  + "; ".join(f"#{q['position']} {q['group']}: {q['reason']}" for q in queue))
            assert [q["group"] for q in queue] == ["B", "A"], queue
            assert queue[0]["reason"].startswith("gpu: waits for 1 GPU to free (held by A 2)"), queue[0]
            gov.stop_tasks([first])
            saw = what_it_saw(b_first)
            assert saw == {"CUDA_VISIBLE_DEVICES": "0", nodes[0]: "ENXIO", nodes[1]: "EPERM"}, saw
            assert [q["group"] for q in gov.status()["queue"]] == ["A"]
            gov.stop_tasks([second])
            assert what_it_saw(a_third)[nodes[1]] == "ENXIO"
        finally:
            gov.close()


# What each node gives it, and again at each SIGUSR1: what a running task's processes may open
# after a reload. (A SIGUSR1 ends the wait; the loop sleeps again.)
PROBE_AGAIN = OPENS + 'trap \'opens "$@"\' USR1; opens "$@"; while :; do sleep 3600 & wait $!; done\n'


def a_gpu_added_by_a_reload_or_a_restart_is_denied_to_running_tasks(tmp_path: Path) -> None:
    """Issue 31: under ``gpus = [g0, g1]`` a task without GPUs (denied both) and one holding g0
    run; the config is reloaded with ``[g0, g1, g2]``. Both running tasks then get EPERM on g2
    (before the reload its node was no GPU of governor's: ENXIO), the holder still opens g0,
    and status shows the new rules in force on each task's cgroup. Then the daemon is killed,
    g3 added to the file and the daemon started again: the tasks it takes back get EPERM on
    g3 too (a restarted daemon has no record of what it wrote: it finds its rules again)."""
    with stand_in_nodes(tmp_path, 4) as (_, nodes):
        gov = Governor(tmp_path, '[capacity]\ncpu = 1\nmemory = "1G"\n'
                                 f'gpus = {json.dumps(nodes[:2])}\ngpu_control = []\n'
                                 '[groups.A]\nusers = ["root"]\n')
        path = tmp_path / "governor.toml"
        try:
            command = ["sh", "-c", PROBE_AGAIN, "probe", *nodes]
            tasks = {"plain": gov.run("A", command, cpus=CPUS, memory="32M"),
                     "holder": gov.run("A", command, gpus=1, cpus=CPUS, memory="32M")}
            before = {name: outcomes(proc.stdout.readline()) for name, proc in tasks.items()}
            assert list(before["plain"].values()) == ["EPERM", "EPERM", "ENXIO", "ENXIO"], before
            assert list(before["holder"].values()) == ["ENXIO", "EPERM", "ENXIO", "ENXIO"], before

            def governed(count: int) -> None:
                path.write_text(path.read_text().replace(f"gpus = {json.dumps(nodes[:count - 1])}",
                                                         f"gpus = {json.dumps(nodes[:count])}"))

            def looked_again() -> dict:
                seen = {}
                for name, proc in tasks.items():
                    proc.send_signal(signal.SIGUSR1)
                    seen[name] = outcomes(proc.stdout.readline())
                return seen

            governed(3)
            applied = subprocess.run([GOVERNOR, "reload", "--socket", gov.socket], capture_output=True, text=True)
            assert applied.returncode == 0, applied.stderr
            status = gov.status()
            assert status["capacity"]["gpu"] == 3
            reloaded = looked_again()
            print(f"\n[{status['daemon']['cgroup_mode']}] opens before the reload {before}, after it {reloaded}")
            assert list(reloaded["plain"].values()) == ["EPERM", "EPERM", "EPERM", "ENXIO"], reloaded
            assert list(reloaded["holder"].values()) == ["ENXIO", "EPERM", "EPERM", "ENXIO"], reloaded
            major = os.major(os.stat(nodes[2]).st_rdev)
            limits = [" ".join(t["limits"].values()) for t in status["groups"]["A"]["tasks"]]
            assert len(limits) == 2 and all(f"{major}:2" in text for text in limits), limits

            gov.daemon.send_signal(signal.SIGKILL)
            gov.daemon.wait()
            governed(4)
            gov.restart()
            assert gov.status()["capacity"]["gpu"] == 4 and gov.task_count("A") == 2
            restarted = looked_again()
            print(f"after a restart with g3 added: {restarted}")
            assert list(restarted["plain"].values()) == ["EPERM"] * 4, restarted
            assert list(restarted["holder"].values()) == ["ENXIO", "EPERM", "EPERM", "EPERM"], restarted
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
    with device_nodes(tmp_path, ((1, 7),)) as (node,):
        _a_passed_gpu_fd_is_ended(tmp_path, node)


def _a_passed_gpu_fd_is_ended(tmp_path: Path, node: str) -> None:
    config = ('[capacity]\ncpu = 1\nmemory = "1G"\n'
              f'gpus = {json.dumps([str(node)])}\ngpu_control = []\n'
              '[groups.A]\nusers = ["root"]\n[groups.B]\nusers = ["root"]\n')
    gov = Governor(tmp_path, config)
    try:
        socket_path, done = str(tmp_path / "pass.sock"), tmp_path / "sender-may-exit"
        receiver = gov.run("A", [sys.executable, "-c", RECEIVER, socket_path], cpus=CPUS, memory="32M")
        receiving = int(receiver.stdout.readline())  # listening
        sender = gov.run("A", [sys.executable, "-c", SENDER, str(node), socket_path, str(done)],
                         gpus=1, cpus=CPUS, memory="32M")
        assert json.loads(receiver.stdout.readline()) == {"fds": 1}
        waiting = gov.run_queued("B", [sys.executable, "-c", HOLDERS, str(node)], gpus=1, cpus=CPUS, memory="32M")
        done.touch()
        assert sender.wait(30) == 0
        held = json.loads(waiting.stdout.readline())  # it started: the GPU was handed on
        assert held == [], f"processes holding the GPU when it was handed on: {held}"
        assert receiver.wait(10) in (-signal.SIGKILL, 128 + signal.SIGKILL), receiver.returncode  # governor run: 137
        ended = [e["message"] for e in gov.status()["events"] if e["kind"] == "gpu_holder_ended"]
        # The event names no pid (status's events are everyone's); the log, the admins', does.
        assert len(ended) == 1 and ended[0].startswith("a process (user root, task "), ended
        assert f"{ended[0]} (pid {receiving})" in gov.daemon_log()
        assert [(g["task"] is not None, g["draining"]) for g in gov.status()["gpus"]] == [(True, False)]
    finally:
        gov.close()
