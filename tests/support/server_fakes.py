"""A fake handler behind a real control socket server, for the server's tests: :class:`FakeHandler`,
:func:`running` (a :class:`ControlServer` on a path for the block), :func:`exchange` (a request
and its replies on one connection) and :data:`STATUS` (a status request line)."""

from __future__ import annotations

import asyncio
import contextlib
import json

from governor.wire.protocol import Peer, SetWeightRequest
from governor.wire.server import ControlServer
from support.wire_fakes import handlers_of


class FakeHandler:
    """Answers status with the peer it saw; set-weight does what ``behaviour`` says; a launch
    streams ``queued`` lines until ``admit`` is set, then the task, and records whether its
    stream was closed."""

    def __init__(self, behaviour=None):
        self.seen: list[tuple[object, Peer]] = []
        self.behaviour = behaviour
        self.admit = asyncio.Event()
        self.left: list[int] = []

    async def handle(self, request, peer: Peer) -> dict:
        self.seen.append((request, peer))
        if isinstance(request, SetWeightRequest) and self.behaviour is not None:
            return self.behaviour(request)
        return {"peer": [peer.pid, peer.uid, peer.gid], "request": type(request).__name__}

    def handlers(self) -> dict:
        return handlers_of(self)

    async def stream(self, request, peer: Peer):
        try:
            yield {"queued": {"position": 1}}
            await self.admit.wait()
            yield {"task": f"t{request.pid}"}
        finally:
            self.left.append(request.pid)


@contextlib.asynccontextmanager
async def running(handler, path, **kwargs):
    server = ControlServer(handler.handlers(), str(path), **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def exchange(path, data: bytes, replies: int = 1) -> list[dict]:
    """Send ``data`` on one connection and read ``replies`` reply lines."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(data)
    await writer.drain()
    answers = [json.loads(await reader.readline()) for _ in range(replies)]
    writer.close()
    return answers


STATUS = b'{"op": "status"}\n'
