"""Who holds the other end of a TCP connection made from this host: the uid that owns the
client's socket, asked of the kernel's socket diagnostics (``sock_diag(7)``, the query ``ss``
makes), one exact lookup by the connection's four addresses.

The metrics listener is TCP, where no ``SO_PEERCRED`` says who connected: every local client
comes from ``127.0.0.1``, the scraper and a user holding connections open alike. The uid tells
them apart (:mod:`governor.wire.metrics`).
"""

from __future__ import annotations

import ipaddress
import socket
import struct

__all__ = ["peer_uid"]

NETLINK_SOCK_DIAG = 4  # linux/netlink.h
SOCK_DIAG_BY_FAMILY = 20  # linux/sock_diag.h
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
INET_DIAG_NOCOOKIE = 0xFFFFFFFF  # linux/inet_diag.h: match the socket whatever its cookie
_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr
# struct inet_diag_msg: family, state, timer, retrans, the sockid (48 bytes), expires, rqueue,
# wqueue, uid, inode.
_UID_AT = 4 + 48 + 12


def peer_uid(connection: socket.socket) -> int | None:
    """The uid owning the socket at the other end of TCP ``connection`` (an accepted one)
    where that end is on this host, in this network namespace; else None (a remote client,
    one gone already, or a kernel without TCP socket diagnostics).

    The answer is read with ``MSG_DONTWAIT``: the kernel answers an exact lookup before the
    request's ``sendto`` returns, so the call never waits on the event loop."""
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
    # The client's socket: its source is the peer's address, its destination ours.
    request = _pack(family, peer_ip, peer[1], our_ip, ours[1])
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG) as diag:
            diag.sendto(request, (0, 0))
            answer = diag.recv(4096, socket.MSG_DONTWAIT)
    except OSError:
        return None
    if len(answer) < _HEADER.size:
        return None
    _, kind, _, _, _ = _HEADER.unpack_from(answer)
    if kind != SOCK_DIAG_BY_FAMILY or len(answer) < _HEADER.size + _UID_AT + 4:
        return None  # NLMSG_ERROR: no such socket here (ENOENT), or no TCP diagnostics
    return struct.unpack_from("=I", answer, _HEADER.size + _UID_AT)[0]


def _addresses(family: int, peer: str, ours: str) -> tuple[int, bytes, bytes]:
    """The family to ask in and both addresses packed: an IPv4 client of a dual-stack listener
    shows as ``::ffff:a.b.c.d`` there, and its own socket is an IPv4 one."""
    peer_ip, our_ip = ipaddress.ip_address(peer), ipaddress.ip_address(ours)
    if family == socket.AF_INET6 and peer_ip.ipv4_mapped is not None and our_ip.ipv4_mapped is not None:
        peer_ip, our_ip = peer_ip.ipv4_mapped, our_ip.ipv4_mapped
    family = socket.AF_INET if peer_ip.version == 4 else socket.AF_INET6
    return family, peer_ip.packed.ljust(16, b"\0"), our_ip.packed.ljust(16, b"\0")


def _pack(family: int, source: bytes, sport: int, destination: bytes, dport: int) -> bytes:
    """A netlink request for the one TCP socket so addressed: struct inet_diag_req_v2 (family,
    protocol, extensions, pad, states), then struct inet_diag_sockid (ports and addresses in
    network order, any interface, any cookie)."""
    body = (struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
            + struct.pack(">HH", sport, dport) + source + destination
            + struct.pack("=III", 0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE))
    return _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + body
