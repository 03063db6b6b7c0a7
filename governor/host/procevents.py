"""The kernel's process-events connector: which processes just forked or changed uid.

Why this mechanism for sessions (docs/admin.md, "Sessions"): it is the only one that sees every way a
process of a user can start (an ssh login, ``su -``, ``runuser``, cron, ``setsid``, a double
fork), on any host, with or without systemd or PAM, within a millisecond: ``sshd``, ``su`` and
cron call ``setuid`` (a uid event) before they ``exec`` the user's command.
libcgroup's rules daemon (``cgrulesengd``) classifies processes the same way. Forks matter too:
a job that forks at once and whose parent exits (as a root-owned ``runuser`` child does) is
gone before its uid event is handled, and only its child's fork event shows the child. A PAM hook would
miss cron without ``pam_systemd``, ``runuser`` without ``-l`` and everything already running.

It is a netlink socket (``NETLINK_CONNECTOR``, multicast group ``CN_IDX_PROC``) that needs
CAP_NET_ADMIN. The kernel drops events when the socket's buffer is full; a read then fails
with ENOBUFS, which :meth:`ProcessEvents.read` reports so that the caller rescans every
process instead.

What it costs the daemon (docs/design.md, "The event intake"): only the events sessions need
reach it, decided in the kernel, in the context of the task that caused the event. Sessions need
a uid change (a process becomes a user's) and the forks of a process between its uid change and
its move (a child starts in its parent's cgroup); an exec changes neither. Where the kernel
takes it, the eBPF socket filter of :mod:`governor.host.proc_watch` passes only those: an exec,
fork or thread of a process that needs nothing costs the daemon nothing. Elsewhere (no
``bpf(2)`` for the daemon) the classic filter of :mod:`governor.host.proc_filter` passes every
process's fork and every uid change, and the daemon decides a fork from its own tables. The
connector's event-type filter (Linux 6.6 and later: a ``struct proc_input`` subscription to
fork and uid events only) spares both the rest. A read takes at most :data:`READ_BATCH`
datagrams, into one buffer, so that a backlog is worked through between the event loop's other
work.

Message layout (``linux/netlink.h``, ``linux/connector.h``, ``linux/cn_proc.h``)::

    nlmsghdr  u32 len, u16 type, u16 flags, u32 seq, u32 pid            16 bytes
    cn_msg    u32 idx, u32 val, u32 seq, u32 ack, u16 len, u16 flags     20 bytes
    proc_event u32 what, u32 cpu, u64 timestamp_ns, then by ``what``:
        fork: u32 parent_pid, u32 parent_tgid, u32 child_pid, u32 child_tgid
        uid:  u32 process_pid, u32 process_tgid, u32 ruid, u32 euid
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import socket
import struct
from collections.abc import Callable

import psutil

from governor.host import proc_filter
from governor.host.proc_filter import CN_IDX_PROC, CN_VAL_PROC, NLMSG_DONE, PROC_EVENT_FORK, PROC_EVENT_UID
from governor.host.proc_watch import Watched

NETLINK_CONNECTOR = 11
PROC_CN_MCAST_LISTEN = 1
PROC_CN_MCAST_IGNORE = 2
# The first kernel whose connector takes a ``struct proc_input`` {mcast_op, event_type} and
# sends that socket only the event types asked for (cn_proc.c's cn_filter).
EVENT_TYPE_FILTER_SINCE = (6, 6)
# Enough for a burst of tens of thousands of events before the kernel drops any (root may set
# it beyond net.core.rmem_max with SO_RCVBUFFORCE).
RECEIVE_BUFFER_BYTES = 8 << 20
# Datagrams one read takes at most (one event each, 76 bytes): a backlog is read in turns of the
# event loop, each a few ms at most (~3 µs an event of a settled process, ~30 µs one whose /proc
# is read), with requests and exits served between.
READ_BATCH = 512
# After a wake-up that found events, those of this long gather in the socket's queue for one
# read: under a storm one turn of the event loop (~30 µs of Python) serves them all, not one
# each. The first event after a quiet spell is handled at once.
GATHER_S = 0.005

# What :meth:`ProcessEvents.read` gives: (FORK, child tgid, parent tgid), (UID, tgid, effective
# uid). The effective uid, as the owner of /proc/<pid> gives it: a root process that borrows a
# user's real uid for a moment (pam_keyinit in su's and runuser's session, setreuid(user, 0))
# is root's still, and a setuid program a user runs was forked where she is.
FORK, UID = "fork", "uid"
Event = tuple[str, int, int]

_HEADER = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_EVENT = struct.Struct("=IIQ")
_FORK = struct.Struct("=IIII")
_UID = struct.Struct("=IIII")
_EVENT_AT = _HEADER.size + _CN_MSG.size
_DATA_AT = _EVENT_AT + _EVENT.size


class ProcessEvents:
    """A subscription to the uid changes and the forks (of processes) that sessions need,
    filtered in the kernel.

    Raises (constructor):
        OSError: the kernel has no connector (``EPROTONOSUPPORT``), the caller lacks
            CAP_NET_ADMIN (``EPERM``), or the kernel refused the classic socket filter.

    Args:
        event_types: whether to ask the connector for the wanted event types only
            (:func:`has_event_type_filter`, the kernel's release); a socket filter is
            attached either way.
        watch: whether to try the eBPF filter (:mod:`governor.host.proc_watch`) before the
            classic one.
    """

    def __init__(self, event_types: bool | None = None, watch: bool = True) -> None:
        self._socket = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_CONNECTOR)
        self._buffer = bytearray(65536)
        self._view = memoryview(self._buffer)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.TimerHandle | None = None
        self._handle: Callable[[], None] = lambda: None
        self._received = 0  # datagrams the handler read at this wake-up
        self.watched: Watched | None = None  # the eBPF filter's watched processes; None: the classic filter
        try:
            try:
                self._socket.setsockopt(socket.SOL_SOCKET, 33, RECEIVE_BUFFER_BYTES)  # SO_RCVBUFFORCE
            except OSError:
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
            # Before the subscription: nothing unfiltered is queued.
            if watch:
                try:
                    self.watched = Watched(self._socket)
                except OSError:
                    pass  # no bpf(2) for the daemon here: the classic filter
            if self.watched is None:
                proc_filter.attach(self._socket)
            self._socket.bind((0, CN_IDX_PROC))
            if has_event_type_filter() if event_types is None else event_types:
                self._send(PROC_CN_MCAST_LISTEN, PROC_EVENT_FORK | PROC_EVENT_UID)
            else:
                self._send(PROC_CN_MCAST_LISTEN)
            self._socket.setblocking(False)
        except OSError:
            self.close_filter()
            self._socket.close()
            raise

    def fileno(self) -> int:
        return self._socket.fileno()

    def follow(self, handle: Callable[[], None]) -> None:
        """Call ``handle`` (which reads the events) on the running event loop when events are
        queued, then not again for :data:`GATHER_S`, until :meth:`close`.

        Raises:
            RuntimeError: no event loop runs in this thread.
        """
        self._loop, self._handle = asyncio.get_running_loop(), handle
        self._loop.add_reader(self._socket.fileno(), self._readable)

    def _readable(self) -> None:
        self._loop.remove_reader(self._socket.fileno())
        self._take()

    def _take(self) -> None:
        """Hand what is queued to the handler; while it found events, read again in
        :data:`GATHER_S` (one timer a turn, no wake per event); once none came, wait for the
        next event."""
        self._received = 0
        try:
            self._handle()
        finally:
            if self._received:
                self._wake = self._loop.call_later(GATHER_S, self._take)
            else:
                self._wake = None
                self._loop.add_reader(self._socket.fileno(), self._readable)

    def read(self, limit: int = READ_BATCH) -> tuple[list[Event], bool]:
        """The events queued now, from at most ``limit`` datagrams, without blocking (the rest
        keeps the socket readable for the next turn of the event loop).

        Returns:
            The events in the order the kernel sent them (:data:`Event`; order matters: a
            child forked after its parent took a user's uid is that user's), and whether events
            were lost (the buffer overflowed, ENOBUFS) since the last read.
        """
        events: list[Event] = []
        lost = False
        receive, buffer, view = self._socket.recv_into, self._buffer, self._view
        for _ in range(limit):
            try:
                size = receive(view)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno != errno.ENOBUFS:
                    raise
                lost = True
                continue
            parse_events(buffer, events, size)
            self._received += 1
        if self.watched is not None:
            for kind, pid, other in events:  # the program watches each process an event passed
                self.watched.passed(pid)
                if kind == FORK:
                    self.watched.passed(other)
        return events, lost

    def watch(self, pid: int) -> None:
        """Pass the forks of process ``pid`` too (one found outside its place otherwise than by
        an event), until :meth:`forget`; the classic filter passes every fork already."""
        if self.watched is not None:
            self.watched.watch(pid)

    def forget(self, pid: int, *, forked: bool = False) -> None:
        """Stop passing the forks of process ``pid`` (it needs nothing, or is moved, or gone);
        ``forked``: decided by its parent at its fork (:meth:`Watched.forget`)."""
        if self.watched is not None:
            self.watched.forget(pid, forked=forked)

    def keep_watching(self, pids: set[int]) -> None:
        """:meth:`forget` every watched process but ``pids`` (those alive, from a rescan: one gone
        unseen, its events lost, would hold its place in the kernel's map)."""
        if self.watched is not None:
            for pid in self.watched.watched - pids:
                self.watched.forget(pid)

    def close_filter(self) -> None:
        if self.watched is not None:
            self.watched.close()
            self.watched = None

    def close(self) -> None:
        if self._loop is not None:
            if self._wake is not None:
                self._wake.cancel()
            self._loop.remove_reader(self._socket.fileno())
        try:
            self._socket.setblocking(True)
            self._send(PROC_CN_MCAST_IGNORE)
        except OSError:
            pass  # closing the socket ends the subscription anyway
        self._socket.close()
        self.close_filter()

    def _send(self, operation: int, event_types: int | None = None) -> None:
        """Send the connector ``operation``: an ``enum proc_cn_mcast_op`` alone, or with
        ``event_types`` a ``struct proc_input`` {mcast_op, event_type} (Linux 6.6 and later;
        an older kernel ignores a message of that length)."""
        data = struct.pack("=I", operation) if event_types is None else struct.pack("=II", operation, event_types)
        body = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(data), 0) + data
        self._socket.send(_HEADER.pack(_HEADER.size + len(body), NLMSG_DONE, 0, 0, os.getpid()) + body)


def effective_uid(pid: int) -> int:
    """The owner of ``/proc/<pid>``: the process's effective uid, in one stat.

    Raises:
        OSError: the process is gone.
    """
    return os.stat(f"/proc/{pid}").st_uid


def real_uid(pid: int) -> int:
    """Process ``pid``'s real uid now.

    Raises:
        psutil.Error: the process is gone.
    """
    return psutil.Process(pid).uids().real


def has_event_type_filter(release: str | None = None) -> bool:
    """Whether the kernel (its ``release``, ``uname -r``; this one's when None) has the
    connector's event-type filter (:data:`EVENT_TYPE_FILTER_SINCE`). A release that does not
    start with ``major.minor`` is taken for an older kernel: the plain subscription works on
    every kernel."""
    found = re.match(r"(\d+)\.(\d+)", os.uname().release if release is None else release)
    return found is not None and (int(found[1]), int(found[2])) >= EVENT_TYPE_FILTER_SINCE


def parse_events(data: bytes | bytearray, events: list[Event], size: int | None = None) -> None:
    """Append the fork and uid events of one datagram (one or more netlink messages; its
    first ``size`` bytes, all when None) to ``events``, in order. A new thread is no new
    process, and is left out; messages that are short, of another type or of another connector
    are skipped."""
    end = len(data) if size is None else size
    offset = 0
    while offset + _HEADER.size <= end:
        length, kind = _HEADER.unpack_from(data, offset)[:2]
        if length < _HEADER.size or offset + length > end:
            return
        at, available = offset, length
        offset += (length + 3) & ~3  # NLMSG_ALIGN
        if kind != NLMSG_DONE or available < _DATA_AT:
            continue
        index, value = _CN_MSG.unpack_from(data, at + _HEADER.size)[:2]
        if (index, value) != (CN_IDX_PROC, CN_VAL_PROC):
            continue
        what = _EVENT.unpack_from(data, at + _EVENT_AT)[0]
        if what == PROC_EVENT_FORK and available >= _DATA_AT + _FORK.size:
            _, parent, child_pid, child = _FORK.unpack_from(data, at + _DATA_AT)
            if child_pid == child:
                events.append((FORK, child, parent))
        elif what == PROC_EVENT_UID and available >= _DATA_AT + _UID.size:
            _, tgid, _, euid = _UID.unpack_from(data, at + _DATA_AT)
            events.append((UID, tgid, euid))
