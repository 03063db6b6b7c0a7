"""The uid at the other end of a local TCP connection, from the kernel's socket diagnostics: what
the metrics listener counts scrape slots by (a local user holding connections open kept every
scrape out)."""

import os
import socket
import subprocess
import sys

import pytest

from governor.host.socket_owner import peer_uid


def connected_as(uid: int, listen: tuple[str, int], family: int, to: str) -> tuple[subprocess.Popen, socket.socket]:
    """A child of uid ``uid`` connected to a listener on ``listen``; the accepted end."""
    with socket.socket(family) as listener:
        listener.bind(listen)
        listener.listen(1)
        port = listener.getsockname()[1]
        child = subprocess.Popen([sys.executable, "-c", f"import os, socket, sys\nos.setuid({uid})\n"
                                  f"s = socket.create_connection(({to!r}, {port}))\nsys.stdin.read()"],
                                 stdin=subprocess.PIPE)
        accepted, _ = listener.accept()
        return child, accepted


@pytest.mark.parametrize("family, listen, to", [
    (socket.AF_INET, ("127.0.0.1", 0), "127.0.0.1"),
    (socket.AF_INET6, ("::1", 0), "::1"),
    (socket.AF_INET6, ("::", 0), "127.0.0.1"),  # dual stack: the client's is an IPv4 socket
])
def test_a_local_client_is_known_by_its_uid(family, listen, to):
    if os.geteuid() != 0:
        pytest.skip("needs root: the client runs as nobody")
    if family == socket.AF_INET6 and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    child, accepted = connected_as(65534, listen, family, to)
    try:
        with accepted:
            uid = peer_uid(accepted)
            if uid is None and family == socket.AF_INET:
                pytest.skip("this kernel answers no TCP socket diagnostics (sock_diag)")
            assert uid == 65534
    finally:
        child.stdin.close()
        child.wait()


def test_a_socket_with_no_peer_has_no_owner():
    with socket.socket() as unconnected:
        assert peer_uid(unconnected) is None
    left, right = socket.socketpair()
    with left, right:
        assert peer_uid(left) is None  # a unix socket: SO_PEERCRED's, not this
