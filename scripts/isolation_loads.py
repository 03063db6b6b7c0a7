"""The isolation benchmark's workloads (scripts/isolation.py): the victim, the hostile
neighbours, user B's launch prober, the users they run as, and the cleanup of every process
they started.

Each workload is one command line (argv), so the same program runs plain (ungoverned) or
after `governor run … --` (governed), and each is started in a session of its own: killing its
process group ends it and all it forked. A neighbour runs as an ordinary user of its own
(``gov-hostile``), B as another (``gov-bob``): uids at or above UID_MIN, which sessions govern
(a system user's would be left alone); the victim runs as root, which sessions never move, so
its runs alone are plain wherever the daemon is.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

NEIGHBOUR_USER, B_USER = "gov-hostile", "gov-bob"

# The victim: a CPU loop counting iterations; every 0.5 s one line: iterations per second, and
# the CPU it had meanwhile (cores, its own process_time over the wall time).
VICTIM = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
start, count, cpu = time.monotonic(), 0, time.process_time()
while start < end:
    for _ in range(20000):
        pass
    count += 20000
    now = time.monotonic()
    if now - start >= 0.5:
        print(f"{count / (now - start):.0f} {(time.process_time() - cpu) / (now - start):.3f}", flush=True)
        start, count, cpu = now, 0, time.process_time()
"""

# User B: a command (argv[2:]) in a loop, at most two a second; one line per run, its wall time
# and its CPU time (the command's and its children's, user + sys), ms; or "failed".
PROBER = """
import resource, subprocess, sys, time
seconds, command = float(sys.argv[1]), sys.argv[2:]
end = time.monotonic() + seconds
while time.monotonic() < end:
    before, began = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    code = subprocess.call(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    took, after = time.perf_counter() - began, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"{took * 1000:.1f} {cpu * 1000:.1f}" if code == 0 else "failed", flush=True)
    time.sleep(max(0.0, 0.5 - took))
"""

# B's launch, `governor run -- true` (after the path of `governor`).
LAUNCH = ("run", "--group", "b", "--cpus", "0.1", "--memory", "16M", "--", "true")

# B's CPU twin, for the phases with no daemon: a new interpreter that spins until it has used
# argv[1] ms of CPU (its start counts), what B's launch used, quiet. Beside a neighbour, its
# wall time is what the neighbour's CPU alone makes of a launch's: the floor under B's figure,
# and the same load on the victim as B's launches are in the governed phase.
TWIN = """
import sys, time
until = float(sys.argv[1]) / 1000
while time.process_time() < until:
    pass
"""

# Workers forked by a Python neighbour: one per core it asks for.
_FORK_WORKERS = "import os\nfor _ in range(1, int(os.environ['WORKERS'])):\n    if os.fork() == 0:\n        break\n"

THREADS = _FORK_WORKERS + """
import threading
while True:
    thread = threading.Thread(target=int)
    thread.start()
    thread.join()
"""

# prctl(PR_SET_NAME) sends one process event per call (issue 42: 2.2 M/s on one core).
PRCTL = _FORK_WORKERS + """
import ctypes
prctl = ctypes.CDLL(None, use_errno=True).prctl
while True:
    prctl(15, b"prctl-storm", 0, 0, 0)
"""

# A fork bomb, bounded for the ungoverned run's sake: starts sleeps (posix_spawn: a fork and an
# exec) up to argv[1] of them, retrying at once each one refused (EAGAIN past a pids cap), as a
# fork bomb does. At its bound it keeps looping as at a limit, so that it loads the CPU alike
# governed (stopped at its cap, retrying) and ungoverned (at its bound, where an unbounded bomb
# would retry at the kernel's limit): before, only the governed one kept a core busy.
FORK_BOMB = """
import os, sys
bound, children = int(sys.argv[1]), 0
while True:
    try:
        if children < bound:
            os.posix_spawn("/bin/sleep", ["sleep", "3600"], os.environ)
            children += 1
    except OSError:
        pass
"""
# The fork bombs' cap: a task's `--pids`, and the benchmark daemon's `[sessions] pids`; the
# most sleeps a bomb starts, ten times that.
BOMB_CAP, BOMB_BOUND = 100, 1000

# Touches every page of what it holds, growing by 32 MiB up to its bound (bytes, argv[1]).
MEMORY_HOG = """
import sys
bound, chunks = int(sys.argv[1]), []
while True:
    if len(chunks) * (32 << 20) < bound:
        chunks.append(bytearray(32 << 20))
    for chunk in chunks:
        chunk[::4096] = bytes([len(chunks) & 255]) * (len(chunk) // 4096)
"""


@dataclass(frozen=True)
class Neighbour:
    """A hostile neighbour: its name in the table, what it runs (argv), the demand it
    declares when governed (`governor run` flags), whether it runs only in the VM, and whether
    governed it is started plain, in its user's session (``session``), not by `governor run`."""
    name: str
    argv: tuple[str, ...]
    demand: tuple[str, ...] = ("--cpus", "1", "--memory", "256M")
    vm_only: bool = False
    env: tuple[tuple[str, str], ...] = ()
    session: bool = False


def neighbours(python: str, cores: int, in_vm: bool, disk: str | None) -> list[Neighbour]:
    """The neighbours of this run, in order: those of every host, then (``in_vm``) the memory
    hog and (with a scratch ``disk``) the I/O flood."""
    shell = ("/bin/sh", "-c")
    workers = str(max(2, cores))
    found = [
        Neighbour(f"CPU burners ({workers} busy loops)",
                  shell + (f"for i in $(seq {workers}); do (while :; do :; done) & done; wait",),
                  ("--cpus", workers, "--memory", "64M")),
        Neighbour("exec storm (2 shells running /bin/true)",
                  shell + ("for i in 1 2; do (while :; do /bin/true; done) & done; wait",), ("--cpus", "2")),
        Neighbour("thread storm (2 processes creating and joining threads)", (python, "-c", THREADS),
                  ("--cpus", "2"), env=(("WORKERS", "2"),)),
        Neighbour("prctl(PR_SET_NAME) storm (1 process)", (python, "-c", PRCTL), env=(("WORKERS", "1"),)),
        Neighbour(f"fork bomb in a task (--pids {BOMB_CAP}; up to {BOMB_BOUND:,} sleeps)",
                  (python, "-c", FORK_BOMB, str(BOMB_BOUND)), ("--cpus", "1", "--memory", "256M", "--pids", str(BOMB_CAP))),
        Neighbour(f"fork bomb in a session (pids {BOMB_CAP}; up to {BOMB_BOUND:,} sleeps)",
                  (python, "-c", FORK_BOMB, str(BOMB_BOUND)), session=True),
    ]
    if in_vm:
        bound = int(0.6 * psutil.virtual_memory().total)
        found.append(Neighbour(f"memory hog (up to {bound >> 20} MiB, declares 256M)",
                               (python, "-c", MEMORY_HOG, str(bound)), vm_only=True))
        if disk is not None:
            found.append(Neighbour(f"I/O flood (direct 1 MiB writes to {disk})", shell + (
                f"while :; do dd if=/dev/zero of={disk} bs=1M count=64 oflag=direct status=none; done",),
                vm_only=True))
    return found


def ensure_user(name: str) -> pwd.struct_passwd:
    """The account ``name``, made (no home, an ordinary uid) when missing: what
    scripts/bench-sessions does for its user."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
        return pwd.getpwnam(name)


class Processes:
    """Every process this benchmark starts: each in a session of its own, as ``user`` (None:
    root), ended with all it forked by :meth:`stop` or :meth:`stop_all`."""

    def __init__(self, work: Path, socket: str):
        self.work, self.started, self.log = work, [], work / "processes.log"  # their stderr
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GOVERNOR_SOCKET": socket, "LANG": "C.UTF-8"}
        self.users = {pwd.getpwnam(name).pw_uid for name in (NEIGHBOUR_USER, B_USER)}

    def start(self, argv: list[str], user: str | None = None, env: dict[str, str] | None = None,
              stdout=subprocess.DEVNULL) -> subprocess.Popen:
        """``argv`` started as ``user`` in ``self.work``; its stdout to ``stdout``, its stderr
        to ``self.log``."""
        account = pwd.getpwnam(user) if user else None
        with open(self.log, "a") as log:
            process = subprocess.Popen(
                argv, cwd=self.work, env={**self.env, **(env or {})}, stdout=stdout, stderr=log,
                start_new_session=True, **({"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
                                           if account else {}))
        self.started.append(process)
        return process

    def stop(self, process: subprocess.Popen) -> None:
        """End ``process`` and every process in its group (what it forked), and reap it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if process in self.started:
            self.started.remove(process)

    def count(self, user: str) -> int:
        """How many processes ``user`` holds now (threads not counted)."""
        uid = pwd.getpwnam(user).pw_uid
        return sum(1 for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid)

    def stop_all(self) -> None:
        """End what is left: each started process's group, then any process of the
        benchmark's own users that left it (a daemonised child), by pid, until none is left."""
        for process in list(self.started):
            self.stop(process)
        for _ in range(50):
            left = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real in self.users]
            if not left:
                return
            for process in left:
                with contextlib.suppress(psutil.Error):
                    process.kill()
            psutil.wait_procs(left, timeout=1)
        print(f"processes of {sorted(self.users)} are still left", file=sys.stderr)
