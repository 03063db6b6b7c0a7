"""The uid at the other end of a local TCP connection, from the kernel's socket diagnostics: what
the metrics listener counts scrape slots by (a local user holding connections open kept every
scrape out)."""

import os
import socket
import subprocess
import sys

import pytest

from governor.host.socket_owner import _owner, _request, answers, peer_uid

TCP_LISTEN = 10


def needs_diagnostics():
    if not answers():
        pytest.skip("this kernel answers no TCP socket diagnostics (tcp_diag)")


def connected_as(uid: int, listen: tuple[str, int], family: int, to: str) -> tuple[subprocess.Popen, socket.socket]:
    """A child of uid ``uid`` connected to a listener on ``listen``; the accepted end."""
    with socket.socket(family) as listener:
        if family == socket.AF_INET6:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        try:
            listener.bind(listen)
        except OSError as error:
            pytest.skip(f"cannot listen on {listen[0]} here: {error}")
        listener.listen(1)
        listener.settimeout(10)
        port = listener.getsockname()[1]
        child = subprocess.Popen([sys.executable, "-c", f"import os, socket, sys\nos.setuid({uid})\n"
                                  f"s = socket.create_connection(({to!r}, {port}))\nsys.stdin.read()"],
                                 stdin=subprocess.PIPE)
        try:
            accepted, _ = listener.accept()
        except TimeoutError:
            child.kill()
            pytest.fail(f"the child could not connect to {to}")
        return child, accepted


@pytest.mark.parametrize("family, listen, to", [
    (socket.AF_INET, ("127.0.0.1", 0), "127.0.0.1"),
    (socket.AF_INET6, ("::1", 0), "::1"),
    (socket.AF_INET6, ("::", 0), "127.0.0.1"),  # dual stack: the client's is an IPv4 socket
])
def test_a_local_client_is_known_by_its_uid(family, listen, to):
    if os.geteuid() != 0:
        pytest.skip("needs root: the client runs as nobody")
    needs_diagnostics()
    child, accepted = connected_as(65534, listen, family, to)
    try:
        with accepted:
            assert peer_uid(accepted) == 65534
    finally:
        child.stdin.close()
        child.wait()


def test_a_client_of_this_process_is_known_without_root():
    needs_diagnostics()
    with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_connection(listener.getsockname()):
        accepted, _ = listener.accept()
        with accepted:
            assert peer_uid(accepted) == os.geteuid()


class Seen:
    """A connection as accepted from ``peer`` on ``ours``: what peer_uid reads of one."""

    family = socket.AF_INET

    def __init__(self, peer: tuple[str, int], ours: tuple[str, int]):
        self.peer, self.ours = peer, ours

    def getpeername(self):
        return self.peer

    def getsockname(self):
        return self.ours


def test_a_remote_peer_is_never_taken_for_the_owner_of_a_listener_on_its_port():
    # A reviewer's: the kernel's exact lookup falls back to a listener on the port asked for, so a
    # remote scraper whose source port a user listens on was counted as that user (and one user
    # listening on every port could have every remote scrape refused as hers).
    needs_diagnostics()
    with socket.create_server(("0.0.0.0", 0)) as users_listener, socket.create_server(("127.0.0.1", 0)) as ours:
        remote = Seen(("10.9.8.7", users_listener.getsockname()[1]), ours.getsockname())
        assert peer_uid(remote) is None


def test_the_kernels_answer_counts_only_where_it_is_the_connected_socket_asked_for():
    source, destination = socket.inet_aton("127.0.0.1").ljust(16, b"\0"), socket.inet_aton("127.0.0.2").ljust(16, b"\0")
    asked = (socket.AF_INET, source, 40000, destination, 9101)
    request = _request(*asked, 0)
    assert len(request) == 16 + 56 and request[16] == socket.AF_INET and request[17] == socket.IPPROTO_TCP
    assert request[24:26] == (40000).to_bytes(2, "big") and request[26:28] == (9101).to_bytes(2, "big")

    def answer(state=1, sport=40000, uid=1234, inode=77, kind=20) -> bytes:
        body = (bytes([socket.AF_INET, state, 0, 0]) + sport.to_bytes(2, "big") + (9101).to_bytes(2, "big")
                + source + destination + bytes(12) + bytes(12) + uid.to_bytes(4, sys.byteorder)
                + inode.to_bytes(4, sys.byteorder))
        return (16 + len(body)).to_bytes(4, sys.byteorder) + kind.to_bytes(2, sys.byteorder) + bytes(10) + body

    assert _owner(answer(), *asked) == 1234
    assert _owner(answer(state=TCP_LISTEN), *asked) is None  # a listener on the port: not the client
    assert _owner(answer(inode=0), *asked) is None  # an orphan: no process owns it
    assert _owner(answer(sport=40001), *asked) is None  # another socket than the one asked for
    error = (36).to_bytes(4, sys.byteorder) + (2).to_bytes(2, sys.byteorder) + bytes(10) + (-2).to_bytes(4, sys.byteorder, signed=True) + bytes(16)
    assert _owner(error, *asked) is None  # NLMSG_ERROR: ENOENT
    assert _owner(answer(kind=2) + bytes(8), *asked) is None


def test_a_socket_with_no_peer_has_no_owner():
    with socket.socket() as unconnected:
        assert peer_uid(unconnected) is None
    left, right = socket.socketpair()
    with left, right:
        assert peer_uid(left) is None  # a unix socket: SO_PEERCRED's, not this
