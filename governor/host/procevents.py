"""The kernel's process-events connector: which processes just forked, ran ``exec`` or changed uid.

Why this mechanism for sessions (docs/admin.md, "Sessions"): it is the only one that sees every way a
process of a user can start (an ssh login, ``su -``, ``runuser``, cron, ``setsid``, a double
fork), on any host, with or without systemd or PAM, within a millisecond: ``sshd``, ``su`` and
cron call ``setuid`` (a uid event) before they ``exec`` the user's command (an exec event).
libcgroup's rules daemon (``cgrulesengd``) classifies processes the same way. Forks matter too:
a job that forks at once and whose parent exits (as a root-owned ``runuser`` child does) is
gone before its uid event is handled, and only its child's fork event shows the child. A PAM hook would
miss cron without ``pam_systemd``, ``runuser`` without ``-l`` and everything already running.

It is a netlink socket (``NETLINK_CONNECTOR``, multicast group ``CN_IDX_PROC``) that needs
CAP_NET_ADMIN. The kernel drops events when the socket's buffer is full; a read then fails
with ENOBUFS, which :meth:`ProcessEvents.read` reports so that the caller rescans every
process instead.

Message layout (``linux/netlink.h``, ``linux/connector.h``, ``linux/cn_proc.h``)::

    nlmsghdr  u32 len, u16 type, u16 flags, u32 seq, u32 pid            16 bytes
    cn_msg    u32 idx, u32 val, u32 seq, u32 ack, u16 len, u16 flags     20 bytes
    proc_event u32 what, u32 cpu, u64 timestamp_ns, then by ``what``:
        fork: u32 parent_pid, u32 parent_tgid, u32 child_pid, u32 child_tgid
        exec: u32 process_pid, u32 process_tgid
        uid:  u32 process_pid, u32 process_tgid, u32 ruid, u32 euid
"""

from __future__ import annotations

import errno
import os
import socket
import struct

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
NLMSG_DONE = 3
PROC_CN_MCAST_LISTEN = 1
PROC_CN_MCAST_IGNORE = 2
PROC_EVENT_FORK = 0x1
PROC_EVENT_EXEC = 0x2
PROC_EVENT_UID = 0x4
# Enough for a burst of tens of thousands of events before the kernel drops any (root may set
# it beyond net.core.rmem_max with SO_RCVBUFFORCE).
RECEIVE_BUFFER_BYTES = 8 << 20

# What :meth:`ProcessEvents.read` gives: (FORK, child tgid, parent tgid), (EXEC, tgid, None),
# (UID, tgid, real uid).
FORK, EXEC, UID = "fork", "exec", "uid"
Event = tuple[str, int, "int | None"]

_HEADER = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_EVENT = struct.Struct("=IIQ")
_FORK = struct.Struct("=IIII")
_EXEC = struct.Struct("=II")
_UID = struct.Struct("=IIII")
_EVENT_AT = _HEADER.size + _CN_MSG.size
_DATA_AT = _EVENT_AT + _EVENT.size


class ProcessEvents:
    """A subscription to fork, exec and uid-change events of every process on the host.

    Raises (constructor):
        OSError: the kernel has no connector (``EPROTONOSUPPORT``) or the caller lacks
            CAP_NET_ADMIN (``EPERM``).
    """

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_CONNECTOR)
        try:
            try:
                self._socket.setsockopt(socket.SOL_SOCKET, 33, RECEIVE_BUFFER_BYTES)  # SO_RCVBUFFORCE
            except OSError:
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
            self._socket.bind((0, CN_IDX_PROC))
            self._send(PROC_CN_MCAST_LISTEN)
            self._socket.setblocking(False)
        except OSError:
            self._socket.close()
            raise

    def fileno(self) -> int:
        return self._socket.fileno()

    def read(self) -> tuple[list[Event], bool]:
        """Every event queued now, without blocking.

        Returns:
            The events in the order the kernel sent them (:data:`Event`; order matters: a
            child forked after its parent took a user's uid is that user's), and whether events
            were lost (the buffer overflowed, ENOBUFS) since the last read.
        """
        events: list[Event] = []
        lost = False
        while True:
            try:
                data = self._socket.recv(65536)
            except BlockingIOError:
                return events, lost
            except OSError as error:
                if error.errno != errno.ENOBUFS:
                    raise
                lost = True
                continue
            parse_events(data, events)

    def close(self) -> None:
        try:
            self._socket.setblocking(True)
            self._send(PROC_CN_MCAST_IGNORE)
        except OSError:
            pass  # closing the socket ends the subscription anyway
        self._socket.close()

    def _send(self, operation: int) -> None:
        body = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, 4, 0) + struct.pack("=I", operation)
        self._socket.send(_HEADER.pack(_HEADER.size + len(body), NLMSG_DONE, 0, 0, os.getpid()) + body)


def parse_events(data: bytes, events: list[Event]) -> None:
    """Append the fork, exec and uid events of one datagram (one or more netlink messages) to
    ``events``, in order. A new thread is no new process, and is left out; messages that are
    short, of another type or of another connector are skipped."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind = _HEADER.unpack_from(data, offset)[:2]
        if length < _HEADER.size or offset + length > len(data):
            return
        message = data[offset:offset + length]
        offset += (length + 3) & ~3  # NLMSG_ALIGN
        if kind != NLMSG_DONE or len(message) < _DATA_AT:
            continue
        index, value = _CN_MSG.unpack_from(message, _HEADER.size)[:2]
        if (index, value) != (CN_IDX_PROC, CN_VAL_PROC):
            continue
        what = _EVENT.unpack_from(message, _EVENT_AT)[0]
        if what == PROC_EVENT_FORK and len(message) >= _DATA_AT + _FORK.size:
            _, parent, child_pid, child = _FORK.unpack_from(message, _DATA_AT)
            if child_pid == child:
                events.append((FORK, child, parent))
        elif what == PROC_EVENT_EXEC and len(message) >= _DATA_AT + _EXEC.size:
            events.append((EXEC, _EXEC.unpack_from(message, _DATA_AT)[1], None))
        elif what == PROC_EVENT_UID and len(message) >= _DATA_AT + _UID.size:
            _, tgid, ruid, _ = _UID.unpack_from(message, _DATA_AT)
            events.append((UID, tgid, ruid))
