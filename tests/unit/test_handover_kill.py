"""The hand-over's kill (issue 31, point 5) on real child processes: a holder is killed through
a pidfd only once a last look shows it still holds the node and is still governed (a pid may be
reused between the scan and the kill); one that closed it meanwhile, or that is now outside
governor, lives on."""

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

from governor.cgroups.hierarchy import Location
from governor.daemon.handover import Handover, Holder
from governor.errors import CgroupError
from governor.core.state import Tasks

NULL = (os.major(os.stat("/dev/null").st_rdev), os.minor(os.stat("/dev/null").st_rdev))
ZERO = (os.major(os.stat("/dev/zero").st_rdev), os.minor(os.stat("/dev/zero").st_rdev))
# Holds /dev/null open (fd 3 onwards), says so, and waits.
HOLDS = "import os, sys, time\nfd = os.open('/dev/null', os.O_RDONLY)\nprint(fd, flush=True)\ntime.sleep(60)\n"


def handover(where: dict[int, Location] | None = None) -> Handover:
    """A hand-over whose hierarchy finds each pid in ``where`` (default: in task 1's cgroup),
    read at each call: a test changes it between the look and the kill."""
    where = {} if where is None else where

    def locate(pid: int) -> Location:
        if where.get(pid, ...) is None:
            raise CgroupError(f"process {pid} is gone", path=f"/proc/{pid}/cgroup")
        return where.get(pid, Location("A/task-1", None))

    return Handover(hierarchy=SimpleNamespace(locate=locate), policy=SimpleNamespace(devices={}), tasks=Tasks(),
                    inbox=SimpleNamespace(), journal=SimpleNamespace())


def killed(pid: int) -> bool:
    """Whether ``pid`` has a SIGKILL pending or has exited (a kill is delivered at once: it is
    pending, or the process a zombie)."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":" in line)
    pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
    return bool(pending & (1 << (signal.SIGKILL - 1))) or fields["State"].split()[0] in ("Z", "X")


def test_a_holder_is_killed_and_one_that_holds_no_longer_is_not():
    child = subprocess.Popen([sys.executable, "-c", HOLDS], stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", HOLDS], stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline(), other.stdout.readline()  # both hold /dev/null now
        ending = handover()
        ending.kill(Holder(child.pid, os.getuid(), frozenset({NULL}), Location("A/task-1", None)))
        assert child.wait(10) == -signal.SIGKILL
        # Seen holding /dev/zero, which it does not (as if its pid had been reused): left alone.
        ending.kill(Holder(other.pid, os.getuid(), frozenset({ZERO}), Location("A/task-2", None)))
        assert not killed(other.pid)
        ending.kill(Holder(child.pid, os.getuid(), frozenset({NULL}), Location("A/task-1", None)))  # gone: no error
    finally:
        for process in (child, other):
            process.kill()
            process.wait()



def test_a_holder_found_governed_is_not_killed_once_its_pid_is_outside_governor():
    # Break 5: between the look (on the hand-over thread) and the kill, the holder ended and
    # its pid went to a process outside governor, which holds the node rightly: it lives on,
    # whether /proc showed the descriptor or only NVML named the process.
    child = subprocess.Popen([sys.executable, "-c", HOLDS], stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()
        where = {child.pid: Location(None, None)}  # found in task 1; now outside governor's root
        ending = handover(where)
        for listed_only in (False, True):
            ending.kill(Holder(child.pid, os.getuid(), frozenset({NULL}), Location("A/task-1", None), listed_only))
            assert not killed(child.pid)
        where[child.pid] = None  # gone meanwhile: nothing to do, no error
        ending.kill(Holder(child.pid, os.getuid(), frozenset({NULL}), Location("A/task-1", None), True))
        assert not killed(child.pid)
        del where[child.pid]  # governed again (task 1's cgroup): named by NVML alone, it is killed
        ending.kill(Holder(child.pid, os.getuid(), frozenset({ZERO}), Location("A/task-1", None), True))
        assert child.wait(10) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
