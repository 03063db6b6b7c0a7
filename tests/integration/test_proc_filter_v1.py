"""The process-events intake on this host's kernel (issue 42, part 2): with a socket filter
attached (and, from Linux 6.6, the connector's event-type filter), a ``prctl(PR_SET_NAME)``
storm, a thread storm and every exec reach the daemon's socket as nothing, while a uid change
and the forks sessions need still do: every process's fork through the classic filter; through
the eBPF one only those of a process watched since its uid change, so that root running
commands costs the daemon nothing. A socket without the filter, beside, sees everything: the
test would fail without the filter.

"""

import os
import socket
import struct
import subprocess
import sys
import textwrap

import pytest
from support.waits import wait_until

from governor.host import procevents
from governor.host.procevents import ProcessEvents

pytestmark = [pytest.mark.kernel_v1,
              pytest.mark.skipif(os.geteuid() != 0, reason="the process-events connector needs CAP_NET_ADMIN (root)")]
RENAMES, THREADS, EXECS = 5000, 50, 50
PROC_EVENT_EXEC, PROC_EVENT_COMM = 0x2, 0x200
# In a child: rename itself RENAMES times, start THREADS threads, run /bin/true EXECS times, then
# fork a process that takes uid 1 and forks one that execs /bin/true. It prints its pid and
# that process's pid.
STORM = textwrap.dedent(f"""
    import ctypes, os, subprocess, threading
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    for i in range({RENAMES}):
        prctl(15, b"storm%d" % (i % 10), 0, 0, 0)  # PR_SET_NAME
    threads = [threading.Thread(target=lambda: None) for _ in range({THREADS})]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for _ in range({EXECS}):
        subprocess.run(["/bin/true"], check=True)
    child = os.fork()
    if child == 0:
        os.setuid(1)
        if os.fork() == 0:
            os.execv("/bin/true", ["true"])
        os.wait()
        os._exit(0)
    os.waitpid(child, 0)
    print(os.getpid(), child, flush=True)
""")


def unfiltered() -> ProcessEvents:
    """A subscription to every event without any filter: what the daemon read before."""
    events = ProcessEvents.__new__(ProcessEvents)
    events._loop = events.watched = None
    events._socket = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC,
                                   procevents.NETLINK_CONNECTOR)
    events._socket.setsockopt(socket.SOL_SOCKET, 33, procevents.RECEIVE_BUFFER_BYTES)  # SO_RCVBUFFORCE
    events._socket.bind((0, procevents.CN_IDX_PROC))
    events._send(procevents.PROC_CN_MCAST_LISTEN)
    events._socket.setblocking(False)
    return events


def datagrams(events: ProcessEvents) -> list[tuple[int, tuple[int, ...]]]:
    """Every datagram queued on ``events``' socket now: (what, its six u32 data fields)."""
    got = []
    while True:
        try:
            data = events._socket.recv(65536)
        except BlockingIOError:
            return got
        if len(data) >= 76:
            got.append((struct.unpack_from("=I", data, 36)[0], struct.unpack_from("=6I", data, 52)))


@pytest.mark.parametrize("watch", [False, True], ids=["classic filter", "eBPF filter"])
@pytest.mark.parametrize("event_types", [False, True, None],
                         ids=["socket filter", "and the connector's", "as the daemon subscribes"])
def test_storms_of_renames_threads_and_execs_never_reach_the_daemons_socket(event_types, watch):
    if event_types and not procevents.has_event_type_filter():
        pytest.skip(f"the connector filters event types from Linux 6.6; this is {os.uname().release}")
    before, filtered = unfiltered(), ProcessEvents(event_types=event_types, watch=watch)
    if watch and filtered.watched is None:
        filtered.close()
        before.close()
        pytest.skip("no bpf(2) for this process here: the daemon keeps the classic filter")
    seen_before: list = []
    seen: list = []
    try:
        storm, child = map(int, subprocess.run([sys.executable, "-c", STORM], capture_output=True, text=True,
                                              check=True, timeout=60).stdout.split())
        def passed_the_last() -> bool:  # the fork of the storm's child's child: the last event the filter must pass
            seen.extend(datagrams(filtered))
            seen_before.extend(datagrams(before))
            return any(what == procevents.PROC_EVENT_FORK and data[1] == child for what, data in seen)
        wait_until(passed_the_last, "the fork of the storm's child's child", timeout=10, every=0.01)
        seen_before += datagrams(before)
    finally:
        filtered.close()
        before.close()
    renames = [d for what, d in seen_before if what == PROC_EVENT_COMM and d[1] == storm]
    # A thread's fork event names its process as child_tgid (and the process's parent as parent).
    threads = [d for what, d in seen_before if what == procevents.PROC_EVENT_FORK and d[3] == storm and d[2] != storm]
    commands = [d for what, d in seen_before if what == procevents.PROC_EVENT_FORK and d[1] == storm and d[2] == d[3]]
    assert len(renames) >= RENAMES and len(threads) >= THREADS and len(commands) > EXECS  # the storms happened
    assert any(what == PROC_EVENT_EXEC for what, _ in seen_before)
    # Through the filter: only a process's fork and uid events, from any process of the host.
    assert {what for what, _ in seen} <= {procevents.PROC_EVENT_FORK, procevents.PROC_EVENT_UID}
    assert all(d[2] == d[3] for what, d in seen if what == procevents.PROC_EVENT_FORK)
    assert any(what == procevents.PROC_EVENT_UID and d[1] == child and d[2] == 1 for what, d in seen)
    storms_forks = [d for what, d in seen if what == procevents.PROC_EVENT_FORK and d[1] == storm]
    # root's commands and the fork of the child before its uid change: every one classically, none watched
    assert len(storms_forks) == (0 if watch else len(commands))


def test_the_forks_of_a_watched_process_pass_until_it_is_forgotten():
    # Through the kernel: the daemon stops watching a process once moved (or settled), and
    # watches one a rescan found outside its place.
    events = ProcessEvents(watch=True)
    if events.watched is None:
        events.close()
        pytest.skip("no bpf(2) for this process here: the daemon keeps the classic filter")
    go, say = os.pipe()
    done, hear = os.pipe()
    try:
        child = os.fork()
        if child == 0:  # takes uid 1, then runs /bin/true each time the test says so, and says when done
            os.setuid(1)
            while os.read(go, 1) == b"x":
                subprocess.run(["/bin/true"], check=False)
                os.write(hear, b"d")
            os._exit(0)

        def forks_after_one_command() -> list[int]:
            os.write(say, b"x")
            os.read(done, 1)  # the command ran: its fork event, sent as it forked, is queued if passed
            got, _ = events.read()
            return [pid for kind, pid, parent in got if kind == procevents.FORK and parent == child]

        def watched() -> bool:  # its uid event passed: the program watches it
            events.read()
            return child in events.watched.watched
        wait_until(watched, "the child's uid event", timeout=5, every=0.01)
        assert len(forks_after_one_command()) == 1
        events.forget(child)
        assert forks_after_one_command() == []
        events.watch(child)
        assert len(forks_after_one_command()) == 1
    finally:
        os.write(say, b"q")
        for end in (go, say, done, hear):
            os.close(end)
        events.close()
    os.waitpid(child, 0)
