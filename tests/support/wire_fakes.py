"""A fake daemon's handlers for the control server: payloads of any shape, sent as they are,
so that tests can serve what a real daemon would not (a malformed reply, a peer echo)."""

from __future__ import annotations

import contextlib

from governor.wire.protocol import OPERATIONS


class Payload:
    """A reply of any shape (the server sends a reply's ``to_json()``)."""

    def __init__(self, payload: object):
        self.payload = payload

    def to_json(self) -> object:
        return self.payload


def handlers_of(fake) -> dict:
    """The server's handler of each operation: ``fake.handle``'s payload for a one-reply
    operation, ``fake.stream``'s for a streamed one (each looked up at the call, so a test may
    replace them)."""
    async def one(request, peer):
        return Payload(await fake.handle(request, peer))

    async def lines(request, peer):
        async with contextlib.aclosing(fake.stream(request, peer)) as payloads:
            async for payload in payloads:
                yield Payload(payload)

    return {name: lines if operation.streamed else one for name, operation in OPERATIONS.items()}
