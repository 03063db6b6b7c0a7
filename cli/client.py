"""A small synchronous client for the control socket (protocol in ``governor/wire/protocol.py``).

Only the standard library, the error classes and the launch's types and lines: ``governor run``
imports this on its way to exec the user's command, so every module loaded here delays the
user's work (every other operation's types load with :mod:`governor.wire.protocol`, when one is
called). Requests go out typed and replies come back typed, through
:data:`governor.wire.protocol.OPERATIONS`; a launch's through its own types.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import stat
import time
from collections.abc import Callable, Iterator

from governor.errors import ControlSocketError, DaemonError, DaemonNotRunning, SocketPermissionError
from governor.wire.launch_types import LaunchReply, LaunchRequest, Queued, Started
from governor.wire.lines import request_line

TYPE_CHECKING = False  # typing's, without loading typing: governor run's path (issue 46)
if TYPE_CHECKING:
    from governor.wire.request_types import Request

DEFAULT_SOCKET = "/run/governor/governor.sock"
_RECV_BYTES = 65536
# The longest reply line read: a status of 10,000 tasks is a few MiB; a server that sends
# without end (not governor's daemon) is cut here, not read until memory runs out.
MAX_REPLY_BYTES = 128 << 20
# A connect() the daemon's queue of connections not yet accepted has no room for (a burst of
# clients, or one user's connect flood) is tried again after these pauses (s, doubling) until
# the call's timeout: it failed at once with "Resource temporarily unavailable".
_BUSY_PAUSE_S, _BUSY_PAUSE_MAX_S = 0.001, 0.02
# struct ucred: pid, uid, gid, three C ints, read as memoryview casts them (the struct module is
# one more import on governor run's way: issue 46).
_PEERCRED_BYTES = 12


def socket_path(option: str | None) -> str:
    """The socket to talk to: ``option`` (``--socket``), else ``$GOVERNOR_SOCKET``, else the default."""
    return option or os.environ.get("GOVERNOR_SOCKET") or DEFAULT_SOCKET


def call(socket_path: str, request: Request, timeout: float = 30):
    """Send one request and return its typed reply (the operation's reply type in
    :data:`governor.wire.protocol.OPERATIONS`).

    Args:
        socket_path: the daemon's Unix socket.
        request: the request, e.g. ``StatusRequest()``.
        timeout: seconds allowed for connecting, and again for each send and receive.

    Raises:
        DaemonNotRunning: the socket file is missing or nobody listens on it.
        SocketPermissionError: the caller may not connect to the socket.
        DaemonError: the daemon answered ``ok: false`` (carries its code, message and op).
        ControlSocketError: anything else: no reply within ``timeout``, the connection
            closed early, or a reply that is not the operation's.
    """
    from governor.wire.protocol import parse_reply

    with _connect(socket_path, timeout) as sock:
        try:
            sock.sendall(request_line(request))
            reply = _read_line(sock, socket_path)
        except TimeoutError:
            raise ControlSocketError(socket_path, f"no reply from the daemon within {timeout:g} s") from None
        except OSError as exc:
            raise ControlSocketError(socket_path, f"connection failed: {exc.strerror or exc}") from exc
    if not reply.endswith(b"\n"):
        raise ControlSocketError(socket_path, "the daemon closed the connection without replying")
    return _reply(socket_path, reply, request, functools.partial(parse_reply, request))


class DaemonWentAway(ControlSocketError):
    """The daemon closed the connection before its answer was complete (it stopped, restarted
    or was killed)."""


class LaunchInterrupted(ControlSocketError):
    """The daemon went away before it answered a launch with the started task (it stopped,
    restarted or was killed; the task may have waited in its queue): the launch may be sent
    again. The launched pid is this process: a daemon that moved it before it went away
    re-adopts its task, and answers the launch sent again with that task (nothing starts
    twice); one that did not starts it then."""


def launch(socket_path: str, request: LaunchRequest, on_queued: Callable[[dict], None],
           timeout: float = 30, sent: Callable[[], None] | None = None) -> Started:
    """Send a ``launch`` and wait, as long as it takes, until the task starts.

    Args:
        socket_path: the daemon's Unix socket.
        request: the launch request.
        on_queued: called with each queue place (:class:`~governor.wire.reply_types.Queued`) (position, waiting_for, held_by...)
            while the task waits for its memory to fit.
        timeout: seconds allowed for connecting and for the first reply line; once queued,
            the wait has no limit (a Ctrl-C ends it and, with the connection, the place).
        sent: as :func:`stream`'s.

    Returns:
        the started task.

    Raises:
        DaemonNotRunning, DaemonError, ControlSocketError: as :func:`call`;
        LaunchInterrupted: the daemon went away before the task started (queued or not).
    """
    try:
        for reply in _stream(socket_path, request, timeout, sent, LaunchReply.from_json):
            if not isinstance(reply, Queued):
                return reply
            on_queued(reply.place)
    except DaemonWentAway as error:
        raise LaunchInterrupted(socket_path, error.reason) from error
    raise ControlSocketError(socket_path, "the daemon closed the connection without replying")


def stream(socket_path: str, request: Request, timeout: float = 30,
           sent: Callable[[], None] | None = None) -> Iterator:
    """Send one request for a streamed operation (``watch``, ``launch``) and yield each typed reply.

    The daemon answers with one line per update for as long as the connection is open; closing
    the generator (or leaving the ``for`` loop) closes the connection, which is how a client
    stops the stream.

    Args:
        socket_path: the daemon's Unix socket.
        request: the request, e.g. ``WatchRequest(1.0)``.
        timeout: seconds allowed for connecting, and for each reply line to arrive; pick it
            above the stream's interval.
        sent: called once the request is sent, before the first reply is read: what the
            caller readies while the daemon works (``governor run``'s child arms its parent
            death signal there).

    Yields:
        each line's reply, in order.

    Raises:
        DaemonNotRunning: the socket file is missing or nobody listens on it.
        SocketPermissionError: the caller may not connect to the socket.
        DaemonError: the daemon sent an ``ok: false`` line (the stream ends there).
        DaemonWentAway: the daemon closed the stream (a stream never ends by itself) or reset
            the connection.
        ControlSocketError: no line arrived within ``timeout``, the connection failed
            otherwise, or a line is not a reply.
    """
    from governor.wire.protocol import parse_reply

    return _stream(socket_path, request, timeout, sent, functools.partial(parse_reply, request))


def _stream(socket_path: str, request: Request, timeout: float, sent: Callable[[], None] | None,
            parse: Callable[[dict], object]) -> Iterator:
    """:func:`stream`, each line's payload typed by ``parse`` (raises ValueError)."""
    with _connect(socket_path, timeout) as sock:
        buffered = b""
        try:
            sock.sendall(request_line(request))
            if sent is not None:
                sent()
            while True:
                chunk = sock.recv(_RECV_BYTES)
                if not chunk:
                    raise DaemonWentAway(socket_path, "the daemon closed the stream")
                lines = (buffered + chunk).split(b"\n")
                buffered = lines.pop()  # the part after the last newline: an incomplete line
                if len(buffered) > MAX_REPLY_BYTES:
                    raise _too_long(socket_path)
                for line in lines:
                    reply = _reply(socket_path, line, request, parse)
                    if isinstance(reply, Queued):
                        sock.settimeout(None)  # a queue may be long: only the daemon's end stops it
                    yield reply
        except TimeoutError:
            raise ControlSocketError(socket_path, f"no update from the daemon within {timeout:g} s") from None
        except ControlSocketError:
            raise
        except (ConnectionResetError, BrokenPipeError) as exc:  # a daemon killed mid-reply
            raise DaemonWentAway(socket_path, f"connection failed: {exc.strerror or exc}") from exc
        except OSError as exc:
            raise ControlSocketError(socket_path, f"connection failed: {exc.strerror or exc}") from exc


def _connect(socket_path: str, timeout: float) -> socket.socket:
    """A socket connected to ``socket_path`` with ``timeout`` set; errors as in :func:`call`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        _connect_when_room(sock, socket_path, timeout)
    except FileNotFoundError:
        sock.close()
        raise DaemonNotRunning(socket_path, "no socket") from None
    except ConnectionRefusedError:
        sock.close()
        if not _is_socket(socket_path):  # connect() to a plain file is refused too
            raise ControlSocketError(socket_path, "not a socket: give the daemon's (--socket, $GOVERNOR_SOCKET)") \
                from None
        raise DaemonNotRunning(socket_path, "connection refused") from None
    except PermissionError as exc:
        sock.close()
        raise SocketPermissionError(socket_path, f"cannot connect: {exc.strerror or exc}") from None
    except ControlSocketError:
        sock.close()
        raise
    except OSError as exc:
        sock.close()
        raise ControlSocketError(socket_path, f"cannot connect: {exc.strerror or exc}") from exc
    # Whoever can write the socket's directory can put a socket of their own there: talk only
    # to a server run by root (governor's daemon) or by oneself, before sending anything.
    _, uid, _ = memoryview(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED_BYTES)).cast("i")
    if uid not in (0, os.getuid()):
        sock.close()
        raise ControlSocketError(socket_path, f"the server runs as uid {uid}, not as root: it is not governor's "
                                              "daemon; nothing was sent")
    return sock


def _connect_when_room(sock: socket.socket, socket_path: str, timeout: float) -> None:
    """Connect ``sock`` to ``socket_path``, waiting up to ``timeout`` for room in the daemon's
    queue of connections not yet accepted; raises what ``connect`` raises, ControlSocketError
    once the timeout passed with the queue full."""
    deadline, pause = None, _BUSY_PAUSE_S
    while True:
        try:
            sock.connect(socket_path)
            return
        except BlockingIOError:  # EAGAIN: the queue is full (a timeout makes connect non-blocking)
            now = time.monotonic()
            deadline = now + timeout if deadline is None else deadline
            if now >= deadline:
                raise ControlSocketError(socket_path, f"cannot connect: the daemon took no connection within "
                                                      f"{timeout:g} s (its queue of connections stayed full)") from None
            time.sleep(min(pause, deadline - now))
            pause = min(2 * pause, _BUSY_PAUSE_MAX_S)


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return True  # gone meanwhile: as refused


def _read_line(sock: socket.socket, socket_path: str) -> bytes:
    """Bytes up to and including the first newline, or all bytes until EOF if there is none.

    Raises:
        ControlSocketError: more than :data:`MAX_REPLY_BYTES` came without a newline.
    """
    chunks, size = [], 0
    while True:
        chunk = sock.recv(_RECV_BYTES)
        chunks.append(chunk)
        size += len(chunk)
        if not chunk or b"\n" in chunk:
            # One request, one reply: nothing follows the newline.
            return b"".join(chunks)
        if size > MAX_REPLY_BYTES:
            raise _too_long(socket_path)


def _too_long(socket_path: str) -> ControlSocketError:
    return ControlSocketError(socket_path, f"the daemon's reply is longer than {MAX_REPLY_BYTES >> 20} MiB; "
                                           "nothing more was read")


def _reply(path: str, reply: bytes, request: Request, parse: Callable[[dict], object]):
    """The reply in one line to ``request``, typed by ``parse`` (errors as in :func:`call`)."""
    try:
        message = json.loads(reply, parse_constant=_no_constant)
    except ValueError:  # NaN and Infinity too: JSON has none, and a daemon's replies hold none
        raise ControlSocketError(path, f"the daemon sent a reply that is not JSON: {reply[:100]!r}") from None
    except RecursionError:  # no reply of governor's nests past a few levels
        raise ControlSocketError(path, "the daemon sent a reply nested too deeply to read") from None
    if not isinstance(message, dict) or not isinstance(message.get("ok"), bool):
        raise ControlSocketError(path, f"the daemon sent a malformed reply: {reply[:100]!r}")
    if not message["ok"]:
        failure = message.get("error")
        if not isinstance(failure, dict):
            raise ControlSocketError(path, f"the daemon sent a malformed error reply: {reply[:100]!r}")
        raise DaemonError(str(failure.get("code", "unknown")), str(failure.get("message", "")), request.op)
    del message["ok"]
    try:
        return parse(message)
    except ValueError as error:
        raise ControlSocketError(path, f"the daemon's {request.op} reply {error}") from None


def _no_constant(name: str) -> None:
    """``json.loads``' ``parse_constant``: a reply's ``NaN`` or ``Infinity`` is not JSON."""
    raise ValueError(f"{name} is not a JSON number")
