"""A small synchronous client for the control socket (protocol in ``governor/protocol.py``).

Only the standard library and the error classes: ``governor run`` imports this on its way to
exec the user's command, so every module loaded here delays the user's work.
"""

from __future__ import annotations

import json
import os
import socket

from governor.errors import ControlSocketError, DaemonError, DaemonNotRunning

DEFAULT_SOCKET = "/run/governor/governor.sock"
_RECV_BYTES = 65536


def socket_path(option: str | None) -> str:
    """The socket to talk to: ``option`` (``--socket``), else ``$GOVERNOR_SOCKET``, else the default."""
    return option or os.environ.get("GOVERNOR_SOCKET") or DEFAULT_SOCKET


def call(socket_path: str, request: dict, timeout: float = 30) -> dict:
    """Send one request and return the reply's payload (the reply without its ``ok`` key).

    Args:
        socket_path: the daemon's Unix socket.
        request: the request object, e.g. ``{"op": "status"}``.
        timeout: seconds allowed for connecting, and again for each send and receive.

    Raises:
        DaemonNotRunning: the socket file is missing or nobody listens on it.
        DaemonError: the daemon answered ``ok: false`` (carries its code and message).
        ControlSocketError: anything else: no permission, no reply within ``timeout``, the
            connection closed early, or a reply that is not a JSON object.
    """
    line = json.dumps(request, separators=(",", ":")).encode() + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
        except FileNotFoundError:
            raise DaemonNotRunning(socket_path, "no socket") from None
        except ConnectionRefusedError:
            raise DaemonNotRunning(socket_path, "connection refused") from None
        except OSError as exc:
            raise ControlSocketError(socket_path, f"cannot connect: {exc.strerror or exc}") from exc
        try:
            sock.sendall(line)
            reply = _read_line(sock)
        except TimeoutError:
            raise ControlSocketError(socket_path, f"no reply from the daemon within {timeout:g} s") from None
        except OSError as exc:
            raise ControlSocketError(socket_path, f"connection failed: {exc.strerror or exc}") from exc
    if not reply.endswith(b"\n"):
        raise ControlSocketError(socket_path, "the daemon closed the connection without replying")
    return _payload(socket_path, reply)


def _read_line(sock: socket.socket) -> bytes:
    """Bytes up to and including the first newline, or all bytes until EOF if there is none."""
    chunks = []
    while True:
        chunk = sock.recv(_RECV_BYTES)
        chunks.append(chunk)
        if not chunk or b"\n" in chunk:
            # One request, one reply: nothing follows the newline.
            return b"".join(chunks)


def _payload(path: str, reply: bytes) -> dict:
    try:
        message = json.loads(reply)
    except ValueError:
        raise ControlSocketError(path, f"the daemon sent a reply that is not JSON: {reply[:100]!r}") from None
    if not isinstance(message, dict) or not isinstance(message.get("ok"), bool):
        raise ControlSocketError(path, f"the daemon sent a malformed reply: {reply[:100]!r}")
    if not message["ok"]:
        failure = message.get("error")
        if not isinstance(failure, dict):
            raise ControlSocketError(path, f"the daemon sent a malformed error reply: {reply[:100]!r}")
        raise DaemonError(str(failure.get("code", "unknown")), str(failure.get("message", "")))
    del message["ok"]
    return message
