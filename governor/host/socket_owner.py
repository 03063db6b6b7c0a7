"""Who holds the other end of a TCP connection made from this host: the uid that owns the
client's socket, asked of the kernel's socket diagnostics (``sock_diag(7)``, the query ``ss``
makes), one exact lookup by the connection's four addresses.

The metrics listener is TCP, where no ``SO_PEERCRED`` says who connected: every local client
comes from ``127.0.0.1``, the scraper and a user holding connections open alike. The uid tells
them apart (:mod:`governor.wire.metrics`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct

__all__ = ["answers", "peer_uid"]

NETLINK_SOCK_DIAG = 4  # linux/netlink.h
SOCK_DIAG_BY_FAMILY = 20  # linux/sock_diag.h
NLM_F_REQUEST = 1
INET_DIAG_NOCOOKIE = 0xFFFFFFFF  # linux/inet_diag.h: match the socket whatever its cookie
_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr
# struct inet_diag_msg: family, state, timer, retrans; the sockid (ports, network order;
# source and destination addresses, 16 bytes each; interface; cookie); expires, rqueue,
# wqueue, uid, inode.
_MESSAGE = struct.Struct("=BBBB2s2s16s16sIII5I")
# A connected client's states (include/net/tcp_states.h): established, or closing its side. The
# kernel's exact lookup falls back to a listening socket on the port (a user's, any port:
# a remote peer would be taken for that user) and finds orphans, which no process owns.
_CONNECTED = {1, 4, 5}  # TCP_ESTABLISHED, TCP_FIN_WAIT1, TCP_FIN_WAIT2


def peer_uid(connection: socket.socket) -> int | None:
    """The uid owning the socket at the other end of TCP ``connection`` (an accepted one)
    where that end is a connected socket on this host, in this network namespace; else None (a
    remote client, one gone already, or a kernel without TCP socket diagnostics: ``tcp_diag``).

    The answer is read with ``MSG_DONTWAIT``: the kernel answers an exact lookup before the
    request's ``sendto`` returns. Where ``tcp_diag`` is a module not loaded yet, the kernel
    loads it first (modprobe, once): :func:`answers` at start, not on the event loop."""
    if connection.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        peer, ours = connection.getpeername(), connection.getsockname()
    except OSError:
        return None  # gone
    try:
        family, peer_ip, our_ip = _addresses(connection.family, peer[0], ours[0])
    except ValueError:
        return None  # not an address the kernel's lookup takes
    # The client's socket: its source is the peer's address, its destination ours (a link-local
    # IPv6 address is one only on its interface).
    asked = (family, peer_ip, peer[1], our_ip, ours[1])
    interface = ours[3] if family == socket.AF_INET6 and len(ours) > 3 else 0
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG) as diag:
            diag.sendto(_request(*asked, interface), (0, 0))
            answer = diag.recv(4096, socket.MSG_DONTWAIT)
    except OSError:
        return None
    return _owner(answer, *asked)


def answers() -> bool:
    """Whether this kernel tells who owns a local connection's other end: a loopback
    connection of this process's own is looked up (and ``tcp_diag`` loaded, where it is a
    module, before any client waits on it)."""
    try:
        with socket.create_server(("127.0.0.1", 0)) as listener, \
                socket.create_connection(listener.getsockname(), timeout=1):
            accepted, _ = listener.accept()
            with accepted:
                return peer_uid(accepted) == os.geteuid()
    except OSError:
        return False


def _addresses(family: int, peer: str, ours: str) -> tuple[int, bytes, bytes]:
    """The family to ask in and both addresses packed: an IPv4 client of a dual-stack listener
    shows as ``::ffff:a.b.c.d`` there, and its own socket is an IPv4 one."""
    peer_ip, our_ip = ipaddress.ip_address(peer), ipaddress.ip_address(ours)
    if family == socket.AF_INET6 and peer_ip.ipv4_mapped is not None and our_ip.ipv4_mapped is not None:
        peer_ip, our_ip = peer_ip.ipv4_mapped, our_ip.ipv4_mapped
    family = socket.AF_INET if peer_ip.version == 4 else socket.AF_INET6
    return family, peer_ip.packed.ljust(16, b"\0"), our_ip.packed.ljust(16, b"\0")


def _request(family: int, source: bytes, sport: int, destination: bytes, dport: int, interface: int) -> bytes:
    """A netlink request for the one TCP socket so addressed: struct inet_diag_req_v2 (family,
    protocol, extensions, pad, states), then struct inet_diag_sockid (ports and addresses in
    network order, the interface, any cookie)."""
    body = (struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
            + struct.pack(">HH", sport, dport) + source + destination
            + struct.pack("=III", interface, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE))
    return _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + body


def _owner(answer: bytes, family: int, source: bytes, sport: int, destination: bytes, dport: int) -> int | None:
    """The uid in the kernel's ``answer`` where it is of the socket asked for, connected and
    owned by a process; None otherwise (an error, another socket: a listener, an orphan)."""
    if len(answer) < _HEADER.size + _MESSAGE.size:
        return None  # NLMSG_ERROR (no such socket: ENOENT) is shorter
    _, kind, _, _, _ = _HEADER.unpack_from(answer)
    if kind != SOCK_DIAG_BY_FAMILY:
        return None
    (got_family, state, _, _, got_sport, got_dport, got_source, got_destination, _, _, _,
     _, _, _, uid, inode) = _MESSAGE.unpack_from(answer, _HEADER.size)
    width = 4 if family == socket.AF_INET else 16
    same = (got_family == family and got_sport == struct.pack(">H", sport) and got_dport == struct.pack(">H", dport)
            and got_source[:width] == source[:width] and got_destination[:width] == destination[:width])
    return uid if same and state in _CONNECTED and inode != 0 else None
