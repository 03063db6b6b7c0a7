"""Prometheus metrics for ``governor daemon --metrics [ADDR:]PORT`` (prometheus-client).

Per-group gauges are read at scrape time from the daemon's status (built once per change and
shared, :meth:`Observation.status <governor.daemon.observation.Observation.status>`). Counters
and the refill histogram are updated by the daemon as things happen. With GPUs governed, who
holds each GPU comes from the status too; what NVML says of them (utilization, memory, per
task) from the last sample the daemon's sampler thread took (:meth:`Metrics.gpu_sample`,
:mod:`governor.daemon.observation`): a scrape never calls NVML.

Scrapes are served on the daemon's own event loop (:meth:`Metrics.serve`), at most
:data:`MAX_SCRAPES` at once, each within :data:`SCRAPE_TIMEOUT_S`: prometheus-client's own
server gives every connection a thread with no timeout, and ``nobody`` holding ~1,010 idle
connections took every descriptor of the daemon (launches and ``status`` failed, for root too).
One client holds at most :data:`MAX_SCRAPES_PER_CLIENT` of them, a client being the uid that
owns a local connection (:func:`~governor.host.socket_owner.peer_uid`), else the remote
address (an IPv6 one by its /64, which one host picks from): a local user holding 40 idle
connections kept every real scrape out, unsaid, until Prometheus paged that the daemon was
down. With every slot held, a new connection takes the slot of the oldest one that has not
sent its request yet (clients enough to hold them all, 8 users or 8 remote hosts, still cannot
keep a scraper out, which sends its request at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from governor.errors import GovernorError
from governor.core.gpus import GpuUse
from governor.host.socket_owner import answers, peer_uid
from governor.wire.metrics_families import StatusFamilies
from governor.wire.status_types import Status

log = logging.getLogger(__name__)

# Scrapes served at once; a connection beyond them takes the slot of one that has not asked
# yet, else is answered 503 (a scrape takes ~1 ms).
MAX_SCRAPES = 16
# Of them, held at once by one client (a uid on this host, else an address): Prometheus scrapes
# a target one connection at a time, and an agent beside it (or `curl`) makes two; a local user
# holding connections open keeps at most this many from the others.
MAX_SCRAPES_PER_CLIENT = 2
# Refused connections are logged at most once in this many seconds (with how many since).
REFUSED_LOG_S = 60.0
# Why a connection was closed unserved (governor_metrics_refused_total's reason), in words.
_REASONS = {"busy": "every slot is held by a scrape that has asked",
            "client": "its share of the slots is held by scrapes that have asked",
            "idle": "it had not asked, and a new connection took its slot"}
# A refused connection's request is read and dropped for at most this long after its 503, so
# that the client reads the 503 rather than a reset (closing with its request unread resets
# the connection); at most this many at once, those beyond are reset at once.
REFUSED_LINGER_S = 0.5
MAX_REFUSED_LINGERING = 32
# How long a scrape may take, from its connection to its last byte sent.
SCRAPE_TIMEOUT_S = 5.0
# A request's line and headers (a Prometheus scrape sends ~300 bytes).
MAX_REQUEST_BYTES = 8192

REFILL_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
QUEUE_WAIT_BUCKETS_S = (0.01, 0.1, 1, 10, 60, 300, 1800, 3600, 4 * 3600, 24 * 3600)


class Metrics:
    """The daemon's metrics sink and exporter.

    Args:
        snapshot: returns the latest status (:class:`~governor.wire.status_types.Status`).
    """

    def __init__(self, snapshot: Callable[[], Status], *, pinned: bool = False):
        self.pinned = pinned  # --metrics gave the address: it overrides the config's
        self.address: tuple[str, int] | None = None  # where it listens; None: nowhere
        self._listener: socket.socket | None = None
        self._server: asyncio.AbstractServer | None = None
        self._scrapes: set[asyncio.Task] = set()
        self.registry = CollectorRegistry()
        self._refill = Histogram("governor_refill_duration_seconds", "Time to re-run progressive filling "
                                 "and write the limits that changed", buckets=REFILL_BUCKETS_S, registry=self.registry)
        self._events = Counter("governor_events", "Daemon events by kind", ["kind"], registry=self.registry)
        self._queue_wait = Histogram("governor_queue_wait_seconds", "Time a started task waited in the "
                                     "admission queue for its memory to fit", buckets=QUEUE_WAIT_BUCKETS_S,
                                     registry=self.registry)
        self._write_errors = Counter("governor_limit_write_errors", "cgroup limit writes the kernel refused",
                                     registry=self.registry)
        # Exported from the start (0): the alert on it has a series to evaluate.
        self._allocation_failures = Counter("governor_allocation_failures", "Refills whose progressive filling "
                                            "diverged (the last good plan stayed in force)", registry=self.registry)
        self._refusals = Counter("governor_metrics_refused", "Connections to the metrics endpoint closed "
                                 "unserved: every scrape slot held by one that asked (busy), the client's "
                                 "share held by ones that asked (client), or idle, its slot taken by a new "
                                 "one (idle)", ["reason"], registry=self.registry)
        for reason in _REASONS:  # exported from the start (0): an alert has series to evaluate
            self._refusals.labels(reason)
        self._slots: dict[asyncio.Task, _Slot] = {}  # the scrapes under way
        self._lingering = 0  # refused connections whose request is being read and dropped
        self._refused: tuple[float, int] = (float("-inf"), 0)  # when one was last logged, how many since
        self._by_uid: bool | None = None  # whether the kernel tells a local client's uid (at the first bind)
        self._gpu: tuple[GpuUse, dict[int, tuple[str, str]]] | None = None
        self.registry.register(StatusFamilies(snapshot, lambda: self._gpu))

    def refill(self, seconds: float) -> None:
        self._refill.observe(seconds)

    def event(self, kind: str) -> None:
        self._events.labels(kind).inc()

    def write_error(self) -> None:
        self._write_errors.inc()

    def allocation_failure(self) -> None:
        self._allocation_failures.inc()

    def admitted(self, waited_s: float) -> None:
        self._queue_wait.observe(waited_s)

    def gpu_sample(self, use: GpuUse | None, owners: Mapping[int, tuple[str, str]]) -> None:
        """What NVML last said of the governed GPUs (:func:`governor.host.nvml.sample_use`), and pid →
        ``(group, task id)`` of the processes it names that run in a task: exported until the
        next sample. None (NVML did not answer): no NVML series."""
        self._gpu = None if use is None else (use, dict(owners))

    def bind(self, address: str, port: int) -> None:
        """Listen on ``address:port`` (served from :meth:`serve` on; a taken port refuses the
        daemon's start before anything is made).

        Raises:
            GovernorError: the port is taken, or the address is not one of this host's.
        """
        try:
            family, kind, proto, _, where = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0]
            listener = socket.socket(family, kind, proto)
        except OSError as error:  # socket.gaierror for a name that does not resolve is one too
            raise GovernorError(f"cannot serve metrics on {address}:{port}: {error.strerror or error}") from None
        if self._by_uid is None:  # (tcp_diag loaded now, where it is a module: never while a client waits)
            self._by_uid = answers()
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(where)
            listener.listen(MAX_SCRAPES)
        except OSError as error:
            listener.close()
            raise GovernorError(f"cannot serve metrics on {address}:{port}: {error.strerror or error}") from None
        self._listener, self.address = listener, (address, port)

    async def serve(self) -> None:
        """Serve ``/metrics`` (and ``/``) over HTTP on the socket :meth:`bind` made, on the
        running event loop, until :meth:`close`; nothing when it listens nowhere."""
        if self._listener is not None:
            self._server = await asyncio.start_server(self._scrape, sock=self._listener, limit=MAX_REQUEST_BYTES)

    def follow(self, address: tuple[str, int] | None) -> None:
        """(On the loop, at a reload) serve on ``address``, the config's ``[metrics] listen``,
        from now on; None: serve nowhere. Nothing changes when ``--metrics`` gave the address
        (it overrides the config) or the address is the one served.

        Raises:
            GovernorError: cannot listen on ``address``; the address served before stays.
        """
        if self.pinned or address == self.address:
            return
        server, listener = self._server, self._listener
        if address is not None:
            self.bind(*address)
        else:
            self._listener = self.address = None
        self._server = None
        if server is not None:
            server.close()  # the listening socket closes; scrapes under way finish
        elif listener is not None:
            listener.close()
        if self._listener is not None:
            asyncio.get_running_loop().create_task(self.serve())

    async def close(self) -> None:
        """Stop serving: no new scrape, and those under way end now."""
        if self._server is not None:
            self._server.close()
            for scrape in self._scrapes:
                scrape.cancel()
            await asyncio.gather(*self._scrapes, return_exceptions=True)
            await self._server.wait_closed()

    def holders(self) -> dict[str, int]:
        """Each client (``uid N``, an address, an IPv6 /64) → its scrapes under way."""
        held: dict[str, int] = {}
        for slot in self._slots.values():
            held[slot.client] = held.get(slot.client, 0) + 1
        return held

    async def _scrape(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._scrapes.add(task)
        try:
            client = self._client(writer)
            # (A client sharing an identity with idle ones, a neighbour on its /64 or behind its
            # NAT, takes one of their slots: it has a request to send.)
            if self.holders().get(client, 0) >= MAX_SCRAPES_PER_CLIENT and not self._free_a_slot(client):
                await self._refuse(reader, writer, client, "client")
                return
            if len(self._slots) >= MAX_SCRAPES and not self._free_a_slot():
                await self._refuse(reader, writer, client, "busy")
                return
            slot = self._slots[task] = _Slot(client, time.monotonic(), writer)
            try:
                async with asyncio.timeout(SCRAPE_TIMEOUT_S):
                    head = await reader.readuntil(b"\r\n\r\n")
                    slot.asked = True
                    await self._answer(head, writer)
            finally:
                self._slots.pop(task, None)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            writer.transport.abort()  # a slow, idle, oversized, vanished or evicted client: nothing lingers
        except Exception:  # a defect here must not end the daemon's serving, nor go unsaid
            log.exception("metrics: a scrape failed")
            writer.transport.abort()
        finally:
            self._scrapes.discard(task)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _free_a_slot(self, client: str | None = None) -> bool:
        """Take the slot of the oldest scrape (of ``client``, where given) that has not sent its
        request yet (its connection reset); False where every one has."""
        idle = [(slot.since, task) for task, slot in self._slots.items()
                if not slot.asked and client in (None, slot.client)]
        if not idle:
            return False
        _, task = min(idle, key=lambda item: item[0])
        dropped = self._slots.pop(task)
        dropped.writer.transport.abort()  # its read ends: IncompleteReadError
        self._refusals.labels("idle").inc()
        self._log_refusal(dropped.client, "idle")
        return True

    async def _answer(self, head: bytes, writer: asyncio.StreamWriter) -> None:
        """Answer the request whose line and headers are ``head``."""
        method, _, rest = head.partition(b" ")
        path = rest.partition(b" ")[0].partition(b"?")[0]
        if method not in (b"GET", b"HEAD"):
            writer.write(_response(b"405 Method Not Allowed", b"only GET\n", b"text/plain"))
        elif path not in (b"/metrics", b"/"):
            writer.write(_response(b"404 Not Found", b"metrics are at /metrics\n", b"text/plain"))
        else:
            body = generate_latest(self.registry)
            writer.write(_response(b"200 OK", body if method == b"GET" else b"", CONTENT_TYPE_LATEST.encode(),
                                   length=len(body)))
        await writer.drain()

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str,
                      reason: str) -> None:
        """Answer 503, then read and drop the request until the client closes, for at most
        :data:`REFUSED_LINGER_S` (closed with its request unread, the connection would be reset
        and the 503 lost); past :data:`MAX_REFUSED_LINGERING` such at once, reset at once. Count
        it, and log it (:meth:`_log_refusal`)."""
        self._refusals.labels(reason).inc()
        self._log_refusal(client, reason)
        if self._lingering >= MAX_REFUSED_LINGERING:
            writer.transport.abort()
            return
        self._lingering += 1
        try:
            writer.write(_response(b"503 Service Unavailable", b"too many scrapes at once\n", b"text/plain"))
            writer.write_eof()
            left = MAX_REQUEST_BYTES
            async with asyncio.timeout(REFUSED_LINGER_S):
                while left > 0:
                    dropped = await reader.read(left)
                    if not dropped:
                        return
                    left -= len(dropped)
        except (asyncio.TimeoutError, OSError):
            pass  # closed as it is: what it sent since may reset it
        finally:
            self._lingering -= 1

    def _log_refusal(self, client: str, reason: str) -> None:
        """Log a connection closed unserved (``reason``: one of :data:`_REASONS`), at most once
        in :data:`REFUSED_LOG_S` (with how many since), naming who holds the most slots."""
        logged, since = self._refused
        now = time.monotonic()
        if now - logged < REFUSED_LOG_S:
            self._refused = (logged, since + 1)
            return
        self._refused = (now, 0)
        holders = sorted(self.holders().items(), key=lambda item: -item[1])
        who = ", ".join(f"{name} holds {count}" for name, count in holders[:3])
        log.warning("metrics: a connection from %s closed unserved (%s; %d more since the last such line): "
                    "%d of %d scrapes under way (%s)", client, _REASONS[reason], since, len(self._slots),
                    MAX_SCRAPES, who or "none")

    def _client(self, writer: asyncio.StreamWriter) -> str:
        """Who connected, as scrape slots are counted: ``uid N`` for a connection from this
        host (where the kernel tells), else the remote address, an IPv6 one by its /64 (``?``
        where the socket is gone already)."""
        connection = writer.get_extra_info("socket")
        uid = peer_uid(connection) if self._by_uid and connection is not None else None
        if uid is not None:
            return f"uid {uid}"
        peer = writer.get_extra_info("peername")
        try:
            address = ipaddress.ip_address(peer[0])
        except (TypeError, IndexError, ValueError):
            return "?"
        if address.version == 4:
            return str(address)
        if address.ipv4_mapped is not None:  # an IPv4 client of a dual-stack listener
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address.packed[:8] + bytes(8), 64)))


class _Slot:
    """A scrape under way: its client, when it connected (``time.monotonic()``), whether it has
    sent its request, and its connection."""

    __slots__ = ("asked", "client", "since", "writer")

    def __init__(self, client: str, since: float, writer: asyncio.StreamWriter):
        self.client, self.since, self.writer, self.asked = client, since, writer, False


def _response(status: bytes, body: bytes, kind: bytes, *, length: int | None = None) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind + b"\r\nContent-Length: "
            + str(len(body) if length is None else length).encode() + b"\r\nConnection: close\r\n\r\n" + body)
