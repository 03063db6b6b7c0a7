"""The process-events intake on this host's kernel (issue 42, part 2): with the socket filter
attached (and, from Linux 6.6, the connector's event-type filter), a ``prctl(PR_SET_NAME)``
storm and a thread storm reach the daemon's socket as nothing, while a process's fork, its
exec and a uid change still do. A socket without the filter, beside, sees the storms: the
test would fail without the filter."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from governor.host import procevents
from governor.host.procevents import ProcessEvents

pytestmark = [pytest.mark.kernel_v1,
              pytest.mark.skipif(os.geteuid() != 0, reason="the process-events connector needs CAP_NET_ADMIN (root)")]
RENAMES, THREADS = 5000, 50
PROC_EVENT_COMM = 0x200
# In a child: rename itself RENAMES times, start THREADS threads, then fork a process that takes
# uid 1 and execs /bin/true. It prints its pid and that process's pid.
STORM = textwrap.dedent(f"""
    import ctypes, os, threading
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    for i in range({RENAMES}):
        prctl(15, b"storm%d" % (i % 10), 0, 0, 0)  # PR_SET_NAME
    threads = [threading.Thread(target=lambda: None) for _ in range({THREADS})]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    child = os.fork()
    if child == 0:
        os.setuid(1)
        os.execv("/bin/true", ["true"])
    os.waitpid(child, 0)
    print(os.getpid(), child, flush=True)
""")


def unfiltered() -> ProcessEvents:
    """A subscription to every event without any filter: what the daemon read before."""
    events = ProcessEvents.__new__(ProcessEvents)
    events._loop = None
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


@pytest.mark.parametrize("event_types", [False, True, None],
                         ids=["socket filter", "and the connector's", "as the daemon subscribes"])
def test_storms_of_renames_and_threads_never_reach_the_daemons_socket(event_types):
    if event_types and not procevents.has_event_type_filter():
        pytest.skip(f"the connector filters event types from Linux 6.6; this is {os.uname().release}")
    before, filtered = unfiltered(), ProcessEvents(event_types=event_types)
    seen_before: list = []
    seen: list = []
    try:
        storm, true = map(int, subprocess.run([sys.executable, "-c", STORM], capture_output=True, text=True,
                                              check=True, timeout=60).stdout.split())
        deadline = time.monotonic() + 10
        while not any(what == procevents.PROC_EVENT_EXEC and data[1] == true for what, data in seen):
            assert time.monotonic() < deadline, "the exec of the storm's child never came"
            seen += datagrams(filtered)
            seen_before += datagrams(before)
            time.sleep(0.01)
        seen_before += datagrams(before)
    finally:
        filtered.close()
        before.close()
    renames = [d for what, d in seen_before if what == PROC_EVENT_COMM and d[1] == storm]
    # A thread's fork event names its process as child_tgid (and the process's parent as parent).
    threads = [d for what, d in seen_before if what == procevents.PROC_EVENT_FORK and d[3] == storm and d[2] != storm]
    assert len(renames) >= RENAMES and len(threads) >= THREADS  # the storms happened, unfiltered
    # Through the filter: only a process's fork, exec and uid events, from any process of the host.
    assert {what for what, _ in seen} <= {procevents.PROC_EVENT_FORK, procevents.PROC_EVENT_EXEC,
                                          procevents.PROC_EVENT_UID}
    assert all(d[2] == d[3] for what, d in seen if what == procevents.PROC_EVENT_FORK)
    assert (procevents.PROC_EVENT_FORK, (storm, storm, true, true, 0, 0)[:4]) in [(w, d[:4]) for w, d in seen]
    assert any(what == procevents.PROC_EVENT_UID and d[1] == true and d[2] == 1 for what, d in seen)
