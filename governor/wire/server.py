"""The control socket: an asyncio Unix stream server speaking :mod:`governor.wire.protocol`.

The server owns transport concerns only (binding, peer credentials, line framing, timeouts,
error replies); what a request does is the handler's business. A handler raises
:class:`~governor.errors.RequestError` to refuse a request; any other exception is a bug: it is
logged with its traceback and answered ``internal``, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from governor.errors import ControlSocketError, GovernorError, RequestError
from governor.wire.protocol import MAX_LINE_BYTES, OPERATIONS, READ_TIMEOUT_S, Peer, Request, error, ok, parse_request
from governor.wire.socket_file import SocketFile

logger = logging.getLogger(__name__)

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # asm-generic/socket.h; Python 3.11 lacks the name
# How long a reply may wait for its client to read before the connection is closed: a `watch`
# client that stops reading would otherwise hold its unsent snapshots for ever.
WRITE_TIMEOUT_S = 30.0
# Bytes of replies one uid's connections may hold that their clients have not read: a reply
# that would go past it waits (then the connection closes, as a stalled one). 32 connections of
# `nobody` that asked for a 15.6 MB status and never read held 450 MB of the daemon.
IN_FLIGHT_PER_UID = 8 << 20
# How often a reply waiting for its uid's budget looks again.
_BUDGET_POLL_S = 0.05
# A reply is handed to its connection's transport this much at a time, the next part once the
# client read the last: asyncio (before Python 3.12) copies what the socket does not take at
# once into a buffer of the connection's own, so 50 `watch` streams of a 5 MB status held
# 50 copies (daemon RSS 96-140 MiB after them, 63-69 before).
WRITE_CHUNK = 256 << 10
# Connections the kernel queues before they are accepted (the kernel caps it at
# net.core.somaxconn, 4096 by default): asyncio's default of 100 was filled by one user's loop
# of connects, and every other user's connect failed at once; a client that finds it full
# waits for room (cli/client.py), as a storm of 1,000 clients connecting at once does.
LISTEN_BACKLOG = 4096


# What the daemon registers for each operation of :data:`~governor.wire.protocol.OPERATIONS`: called
# with the parsed request and the caller, it returns the reply (awaited), or for a streamed
# operation an async iterator of replies, one line each, until it ends or the client closes (the
# iterator is then closed: its ``finally`` runs). Replies are the table's reply types (``to_json``;
# one with an ``encoded()`` method encodes itself: :class:`~governor.wire.status.StatusReply`). It
# raises RequestError to refuse with that code and message (a stream: to end with that line).
Handler = Callable[[Request, Peer], Awaitable | AsyncIterator]


class ControlServer:
    """Serve the control protocol on a Unix socket at ``path``.

    Args:
        handlers: operation name → its :data:`Handler`, one for every operation of the table;
            each receives its valid requests with the caller's credentials.
        path: the socket path; its parent directory is created (mode 0755) if missing.
        mode: permission bits of the socket file; 0666 lets every user connect, since
            authorisation comes from the peer credentials, not from file permissions.
        read_timeout_s: how long a connection may take to send a complete line.
        write_timeout_s: how long a reply may wait for the client to read it; then the
            connection is closed.
        connections_per_uid: how many connections one uid other than root may hold open
            (asked at each connection, so a reload may change it); None: no bound.
        account: a uid → whose bounds its connections count against (connections, replies not
            read): the daemon's counts the uids its user database does not know as one (a
            user's subordinate uids); None: each uid its own.

    Raises:
        ValueError: ``handlers`` misses an operation of the table, or names one it lacks.
    """

    def __init__(self, handlers: Mapping[str, Handler], path: str, *, mode: int = 0o666,
                 read_timeout_s: float = READ_TIMEOUT_S, write_timeout_s: float = WRITE_TIMEOUT_S,
                 connections_per_uid: Callable[[], int] | None = None, account: Callable[[int], int] | None = None):
        if set(handlers) != set(OPERATIONS):
            raise ValueError(f"handlers for {sorted(handlers)}, operations {sorted(OPERATIONS)}")
        self.handlers = handlers
        self.path = path
        self.mode = mode
        self.read_timeout_s = read_timeout_s
        self.write_timeout_s = write_timeout_s
        self.connections_per_uid = connections_per_uid
        self.account = account or (lambda uid: uid)
        self._by_uid: Counter[int] = Counter()
        # uid → its connections' writers that may hold bytes their clients have not read: only
        # those are summed for its budget (summing all of them, at every reply, was a twentieth
        # of the daemon's CPU with a few hundred `governor run`s waiting for their tasks).
        self._holding: dict[int, set[asyncio.StreamWriter]] = {}
        self._uid_of: dict[asyncio.StreamWriter, int] = {}
        self._server: asyncio.AbstractServer | None = None
        self.file = SocketFile(path, mode)
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._streams: set[asyncio.Task] = set()
        self._encoded: tuple[object, bytes] | None = None  # the last reply and its line
        self._unsent: dict[asyncio.StreamWriter, int] = {}  # bytes of a reply not yet handed over

    async def start(self, *, serving: bool = True) -> None:
        """Bind and listen; returns once clients can connect. Without ``serving`` their
        connections wait in the backlog until :meth:`start_serving` (the daemon takes back
        its tasks first).

        A socket file left by a dead daemon is replaced; one that still answers is not.

        Raises:
            ControlSocketError: another process is serving on ``path``, ``path`` exists and is
                not a socket, or the directory or socket cannot be created.
        """
        sock = await self.file.bind()
        try:
            if not serving:
                sock.listen(LISTEN_BACKLOG)
            self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=MAX_LINE_BYTES + 1,
                                                           backlog=LISTEN_BACKLOG, start_serving=serving)
        except OSError as exc:
            sock.close()
            self.file.abandon(bound=True)
            raise ControlSocketError(self.path, f"cannot listen: {exc.strerror or exc}") from exc
        logger.info("control socket listening on %s (mode %o)", self.path, self.mode)

    async def start_serving(self) -> None:
        """Accept the connections waiting since :meth:`start`, and every later one."""
        await self._server.start_serving()

    async def close(self) -> None:
        """Stop accepting, close open connections, wait for their handlers, remove the socket file.

        A request being handled is allowed to finish (its reply is dropped), so a launch is
        never cut in half. The file is removed only if it is still the one this server bound.
        """
        if self._server is None:
            return
        self._server.close()
        # Closing the transports ends each connection's read loop at its next read.
        for writer in self._connections.values():
            writer.close()
        for stream in self._streams:
            stream.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
        self.file.remove()

    def _account(self, uid: int) -> int:
        """Whose bounds ``uid``'s connections count against; its own where that cannot be told."""
        try:
            return self.account(uid)
        except GovernorError:  # (the user database unreadable: the bound of the uid itself)
            return uid

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: read lines, answer each, until EOF, timeout, an oversized line or close()."""
        task = asyncio.current_task()
        self._connections[task] = writer
        peer = key = None
        try:
            peer = _peer_credentials(writer.get_extra_info("socket"))
            key = self._account(peer.uid)
            self._by_uid[key] += 1
            self._uid_of[writer] = key
            limit = self.connections_per_uid() if self.connections_per_uid and peer.uid != 0 else None
            if limit is not None and self._by_uid[key] > limit:
                whose = f"uid {peer.uid} already has" if key == peer.uid else "uids this host's users do not own have"
                await self._send(writer, error("too_many", f"{whose} {limit} connections open to the daemon, the "
                                                           "most one user may ([daemon] max_connections_per_user)"))
                return
            while True:
                try:
                    # asyncio.timeout, not wait_for: wait_for's inner task keeps the error, its
                    # traceback and the reader's buffer (up to 128 KiB) in a reference cycle
                    # until the collector runs: 800 oversized lines held 130 MiB.
                    async with asyncio.timeout(self.read_timeout_s):
                        line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as eof:
                    # A last request without its newline (`printf ... | nc -U`) still gets an answer.
                    if eof.partial.strip():
                        await self._answer(eof.partial, peer, reader, writer)
                    return
                except asyncio.LimitOverrunError:
                    await self._send(writer, error("too_large", f"request line is longer than {MAX_LINE_BYTES} bytes"))
                    return
                except asyncio.TimeoutError:
                    await self._send(writer, error(
                        "timeout", f"no complete request line within {self.read_timeout_s:g} s"))
                    return
                if not await self._answer(line, peer, reader, writer):
                    return
        except OSError as exc:
            # The peer went away mid-reply (or before SO_PEERCRED could be read): nothing to answer.
            logger.debug("control connection dropped: %s", exc)
        except Exception as exc:  # a bug: one line, and the daemon keeps serving the others
            logger.error("control connection from pid %s closed on an internal error: %r",
                         peer.pid if peer else "?", exc)
        finally:
            self._connections.pop(task, None)
            if key is not None:
                self._by_uid[key] -= 1
                if not self._by_uid[key]:
                    del self._by_uid[key]
                self._uid_of.pop(writer, None)
                holding = self._holding.get(key, set())
                holding.discard(writer)
                if not holding:
                    self._holding.pop(key, None)
            if peer is not None and peer.pidfd is not None:
                os.close(peer.pidfd)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _ok(self, reply) -> bytes:
        """The success line of a typed reply (:func:`~governor.wire.protocol.ok` of its
        ``to_json()``), encoding a reply sent just before once (a handler hands every watcher
        the same status object, and never modifies a reply it gave); a reply with an
        ``encoded()`` method encodes itself (:class:`~governor.wire.status.StatusReply`)."""
        if self._encoded is None or self._encoded[0] is not reply:
            encoded = getattr(reply, "encoded", None)
            self._encoded = (reply, encoded() if encoded is not None else ok(reply.to_json()))
        return self._encoded[1]

    async def _send(self, writer: asyncio.StreamWriter, reply: bytes) -> None:
        """Send one reply line once its uid's replies not yet read leave room for it
        (:data:`IN_FLIGHT_PER_UID`; a reply alone may exceed it); a client that does not read
        it within ``write_timeout_s`` is cut off (StalledClient), so a reader that stopped
        holds at most one reply, and one uid's readers that stopped at most the budget. The
        line goes :data:`WRITE_CHUNK` bytes at a time, each once the client read the last:
        every watcher is sent the same bytes, none a copy of its own."""
        view = memoryview(reply)
        try:
            async with asyncio.timeout(self.write_timeout_s):
                uid = self._uid_of.get(writer)
                while uid is not None and 0 < (held := self._in_flight(uid)) and held + len(reply) > IN_FLIGHT_PER_UID:
                    await asyncio.sleep(_BUDGET_POLL_S)
                if uid is not None:
                    self._holding.setdefault(uid, set()).add(writer)
                for start in range(0, len(reply), WRITE_CHUNK):
                    self._unsent[writer] = max(0, len(reply) - start - WRITE_CHUNK)
                    writer.write(view[start:start + WRITE_CHUNK])
                    await writer.drain()
        except asyncio.TimeoutError:
            logger.warning("closing a control connection whose client has not read for %g s", self.write_timeout_s)
            raise StalledClient(f"the client did not read for {self.write_timeout_s:g} s") from None
        finally:
            self._unsent.pop(writer, None)

    def _in_flight(self, uid: int) -> int:
        """Bytes of replies to ``uid``'s connections that their clients have not read yet
        (in their transports' buffers, or still to be handed to them)."""
        holding = self._holding.get(uid)
        held = 0
        for writer in list(holding or ()):
            size = writer.transport.get_write_buffer_size() + self._unsent.get(writer, 0)
            if size:
                held += size
            else:  # all read: it holds nothing until its next reply
                holding.discard(writer)
        if holding is not None and not holding:
            del self._holding[uid]
        return held

    async def _answer(self, line: bytes, peer: Peer, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> bool:
        """Answer one request line. Returns False when the connection is done (after a stream)."""
        try:
            request = parse_request(line)
        except RequestError as refused:
            await self._send(writer, error(refused.code, refused.message))
            return True
        logger.debug("request from pid %d uid %d: %r", peer.pid, peer.uid, request)
        if OPERATIONS[request.op].streamed:
            await self._stream(request, peer, reader, writer)
            return False
        await self._send(writer, await self._reply(request, peer))
        return True

    async def _reply(self, request: Request, peer: Peer) -> bytes:
        """The reply line for one request; never raises (a bug becomes an ``internal`` reply)."""
        try:
            return self._ok(await self.handlers[request.op](request, peer))
        except RequestError as refused:
            return error(refused.code, refused.message)
        except Exception:
            logger.exception("internal error handling %r from pid %d uid %d", request, peer.pid, peer.uid)
            return error("internal", "internal error in the governor daemon; see its log")

    async def _stream(self, request: Request, peer: Peer, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        """Send the handler's payloads as they come until they end, the client leaves (end of
        input, noticed at once even while the handler waits) or the server closes."""
        task = asyncio.current_task()
        self._streams.add(task)
        payloads = self.handlers[request.op](request, peer)
        # The end of the client's input means it is gone (a Ctrl-C'd `governor run` leaves the
        # queue at once); anything it sends meanwhile is not a request and is dropped.
        gone = asyncio.ensure_future(_until_eof(reader))
        step: asyncio.Future | None = None
        try:
            while True:
                step = asyncio.ensure_future(anext(payloads))
                await asyncio.wait({step, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    return
                try:
                    payload = step.result()
                except StopAsyncIteration:
                    return
                await self._send(writer, self._ok(payload))
        except RequestError as refused:
            await self._send(writer, error(refused.code, refused.message))
        except asyncio.CancelledError:
            pass  # close(): a stream has nothing half done
        except OSError:
            pass  # the client went away: the usual end of a watch
        except Exception:
            logger.exception("internal error streaming %r to pid %d uid %d", request, peer.pid, peer.uid)
            await self._send(writer, error("internal", "internal error in the governor daemon; see its log"))
        finally:
            gone.cancel()
            if step is not None and not step.done():
                # The handler waits inside the iterator: cancelling that wait runs its finally.
                step.cancel()
                await asyncio.gather(step, return_exceptions=True)
            await payloads.aclose()
            self._streams.discard(task)


async def _until_eof(reader: asyncio.StreamReader) -> None:
    while await reader.read(4096):
        pass


def _peer_credentials(sock: socket.socket) -> Peer:
    """The connecting process's pid, uid and gid, as the kernel recorded them at connect(), and
    a pidfd of that process (Linux ≥ 6.5; None before). The caller closes the pidfd."""
    pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    try:
        pidfd = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD)
    except OSError:  # ENOPROTOOPT: an older kernel
        pidfd = None
    return Peer(pid=pid, uid=uid, gid=gid, pidfd=pidfd)


class StalledClient(ConnectionError):
    """The client did not read a reply within the write timeout."""
