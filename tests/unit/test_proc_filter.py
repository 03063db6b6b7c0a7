"""The process-events intake (issue 42, part 2): the classic BPF program that keeps from the
daemon every event sessions do not need, run here over messages laid out as the kernel sends
them (tests/integration/test_proc_filter_v1.py attaches it to the real connector); the
subscription that asks the connector for the wanted event types only; and reads in bounded
batches."""

import asyncio
import errno
import socket
import struct
import sys

import pytest

from governor.host import proc_filter, procevents
from governor.host.proc_filter import ACCEPT, DROP
from governor.host.procevents import ProcessEvents, has_event_type_filter, parse_events
from support.proc_messages import message, run_filter
from support.waits import until

PROGRAM = proc_filter.instructions()
# proc_event.what of the kinds the daemon never needs (linux/cn_proc.h).
PROC_EVENT_NONE, PROC_EVENT_EXEC, PROC_EVENT_SID, PROC_EVENT_GID = 0x0, 0x2, 0x80, 0x40
PROC_EVENT_PTRACE, PROC_EVENT_COMM, PROC_EVENT_COREDUMP, PROC_EVENT_EXIT = 0x100, 0x200, 0x40000000, 0x80000000


@pytest.mark.parametrize("packet", [
    message(procevents.PROC_EVENT_FORK, 10, 10, 11, 11, 0, 0),  # a process forked
    message(procevents.PROC_EVENT_UID, 11, 11, 1000, 1000, 0, 0),
])
def test_the_filter_passes_a_process_fork_and_a_uid_change(packet):
    assert run_filter(PROGRAM, packet) == ACCEPT


@pytest.mark.parametrize("packet", [
    message(procevents.PROC_EVENT_FORK, 10, 10, 12, 10, 0, 0),  # a thread of 10: pid != tgid
    message(PROC_EVENT_EXEC, 11, 11, 0, 0, 0, 0),  # half the events of a shell running commands: not needed
    message(PROC_EVENT_COMM, 11, 11, 0x41414141, 0, 0, 0),  # prctl(PR_SET_NAME)
    message(PROC_EVENT_EXIT, 11, 11, 0, 17, 10, 10),
    message(PROC_EVENT_SID, 11, 11, 0, 0, 0, 0),
    message(PROC_EVENT_GID, 11, 11, 100, 100, 0, 0),
    message(PROC_EVENT_PTRACE, 11, 11, 12, 12, 0, 0),
    message(PROC_EVENT_COREDUMP, 11, 11, 10, 10, 0, 0),
    message(PROC_EVENT_NONE, 0, 0, 0, 0, 0, 0),  # the subscription's acknowledgement
    message(procevents.PROC_EVENT_UID, 11, 11, 1, 1, index=2),  # another connector's
    message(procevents.PROC_EVENT_UID, 11, 11, 1, 1, kind=2),  # an error message
    message(procevents.PROC_EVENT_FORK, 10, 10, 11),  # cut short: its child_tgid is missing
    b"\x00" * 8,
])
def test_the_filter_drops_threads_execs_and_every_other_kind(packet):
    assert run_filter(PROGRAM, packet) == DROP


def test_the_program_is_what_the_kernel_takes():
    code = proc_filter.program()
    assert len(code) == 8 * len(PROGRAM)  # struct sock_filter: u16, u8, u8, u32
    assert struct.unpack_from("=HBBI", code, 8 * 12) == PROGRAM[12]
    for at, (op, jt, jf, _) in enumerate(PROGRAM):  # every jump lands inside, forwards (no loops)
        if op & 0x07 == proc_filter.BPF_JMP:
            assert at + 1 + max(jt, jf) < len(PROGRAM)
    assert PROGRAM[-1][0] == proc_filter.BPF_RET | proc_filter.BPF_K


def test_constants_are_compared_as_a_big_endian_load_reads_the_hosts_bytes():
    # what = 4 (uid), as this host writes it, loaded as the kernel's BPF_ABS load does.
    loaded = int.from_bytes((4).to_bytes(4, sys.byteorder), "big")
    assert (proc_filter.BPF_JMP | proc_filter.BPF_JEQ, 6, 0, loaded) == PROGRAM[7]


@pytest.mark.parametrize("release, expected", [
    ("6.6.0", True), ("6.18.44-fc-v782", True), ("7.0.1", True), ("6.5.13-amd64", False), ("5.15.0-91-generic", False),
    ("4.19.0", False), ("weird", False),
])
def test_the_connector_filters_event_types_from_linux_6_6(release, expected):
    assert has_event_type_filter(release) is expected


class FakeSocket:
    """Datagrams as a non-blocking netlink socket gives them; an OSError in the list is raised."""

    def __init__(self, datagrams):
        self.datagrams = list(datagrams)
        self.sent: list[bytes] = []

    def recv_into(self, view):
        if not self.datagrams:
            raise BlockingIOError
        data = self.datagrams.pop(0)
        if isinstance(data, OSError):
            raise data
        view[:len(data)] = data
        return len(data)

    def send(self, data):
        self.sent.append(data)


def events_on(datagrams) -> ProcessEvents:
    events = ProcessEvents.__new__(ProcessEvents)
    events._socket = FakeSocket(datagrams)
    events._buffer = bytearray(65536)
    events._view = memoryview(events._buffer)
    events._loop = events._wake = events.watched = None
    events._received = 0
    return events


def test_a_read_takes_a_bounded_batch_and_leaves_the_rest_queued():
    datagrams = [message(procevents.PROC_EVENT_UID, pid, pid, 1, 1) for pid in range(1, 11)]
    events = events_on(datagrams)
    assert events.read(limit=4) == ([("uid", pid, 1) for pid in range(1, 5)], False)
    assert events.read(limit=100) == ([("uid", pid, 1) for pid in range(5, 11)], False)
    assert events.read() == ([], False)


def test_a_short_datagram_after_a_long_one_is_parsed_alone():
    # One buffer for every datagram: the bytes a longer one left must not be read as a message.
    two = message(procevents.PROC_EVENT_FORK, 6, 6, 7, 7) + message(procevents.PROC_EVENT_UID, 8, 8, 5, 5)
    events = events_on([two, message(procevents.PROC_EVENT_UID, 9, 9, 1, 1)])
    assert events.read() == ([("fork", 7, 6), ("uid", 8, 5), ("uid", 9, 1)], False)


def test_lost_events_are_reported_and_the_read_goes_on():
    events = events_on([message(procevents.PROC_EVENT_UID, 1, 1, 1, 1), OSError(errno.ENOBUFS, "lost"),
                        message(procevents.PROC_EVENT_UID, 2, 2, 1, 1)])
    assert events.read() == ([("uid", 1, 1), ("uid", 2, 1)], True)


def test_parse_reads_only_the_size_given():
    seen: list = []
    data = bytearray(message(procevents.PROC_EVENT_UID, 3, 3, 1, 1)) + message(procevents.PROC_EVENT_UID, 4, 4, 1, 1)
    parse_events(data, seen, len(data) // 2)
    assert seen == [("uid", 3, 1)]


@pytest.mark.parametrize("event_types, body", [
    (True, struct.pack("=II", procevents.PROC_CN_MCAST_LISTEN, 0x5)),  # struct proc_input: fork|uid
    (False, struct.pack("=I", procevents.PROC_CN_MCAST_LISTEN)),  # any kernel: every kind
])
def test_the_subscription_asks_for_the_wanted_event_types_where_the_kernel_filters(event_types, body):
    events = events_on([])
    events._send(procevents.PROC_CN_MCAST_LISTEN, 0x5 if event_types else None)
    sent = events._socket.sent[0]
    assert sent[36:] == body and struct.unpack_from("=H", sent, 32)[0] == len(body)  # cn_msg.len
    assert struct.unpack_from("=I", sent)[0] == len(sent)


def test_events_that_come_soon_after_a_wake_up_are_read_at_the_next_all_together(monkeypatch):
    # A wake of the event loop per event cost the daemon more than the event (issue 42).
    monkeypatch.setattr(procevents, "GATHER_S", 0.2)  # far longer than the loop turns below
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ours.setblocking(False)
    events = events_on([])
    events._socket = ours
    reads: list[int] = []

    def handle():
        got, _ = events.read()
        if not reads:  # one more event in each of the next five turns of the loop
            send(5)
        reads.append(len(got))

    def send(left):
        theirs.send(message(procevents.PROC_EVENT_UID, left, left, 1, 1))
        if left > 1:
            asyncio.get_running_loop().call_soon(send, left - 1)

    async def scenario():
        events.follow(handle)
        theirs.send(message(procevents.PROC_EVENT_UID, 9, 9, 1, 1))
        await until(lambda: len(reads) >= 3, "a read that finds nothing")
        assert events._wake is None  # quiet: waiting for the next event, no timer
        theirs.send(message(procevents.PROC_EVENT_UID, 9, 9, 1, 1))
        await until(lambda: len(reads) >= 4, "the next event, at once")
        events.close()

    try:
        asyncio.run(scenario())
    finally:
        theirs.close()
    assert reads[:4] == [1, 5, 0, 1]
