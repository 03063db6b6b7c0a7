"""The control socket server (governor/wire/server.py) over a real Unix socket with a fake handler
(:mod:`support.server_fakes`): the peer's credentials, requests answered in order, bad requests
and handler bugs answered without stopping the server, streamed replies.

Each test runs its own event loop with asyncio.run; client and server share it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket

import pytest
from support.waits import until

from governor.errors import RequestError
from governor.wire.protocol import MAX_LINE_BYTES, StatusRequest
from support.server_fakes import STATUS, FakeHandler, exchange, running


def weigh(number: int = 1) -> bytes:
    return json.dumps({"op": "set-weight", "group": f"g{number}", "weight": 1}).encode() + b"\n"


def _kernel_has_peer_pidfd() -> bool:
    left, right = socket.socketpair()
    with left, right:
        try:
            os.close(left.getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_PEERPIDFD", 77)))
        except OSError:
            return False
    return True


def test_peer_credentials_are_the_callers_own(tmp_path):
    handler = FakeHandler()

    async def scenario():
        async with running(handler, tmp_path / "g.sock"):
            return await exchange(tmp_path / "g.sock", STATUS)

    [reply] = asyncio.run(scenario())
    assert reply == {"ok": True, "peer": [os.getpid(), os.getuid(), os.getgid()], "request": "StatusRequest"}
    [(request, peer)] = handler.seen
    assert request == StatusRequest() and (peer.pid, peer.uid, peer.gid) == (os.getpid(), os.getuid(), os.getgid())


@pytest.mark.skipif(not _kernel_has_peer_pidfd(), reason="the kernel has no SO_PEERPIDFD (Linux < 6.5)")
def test_the_peer_comes_with_a_pidfd_of_the_connecting_process_closed_with_the_connection(tmp_path):
    seen = {}

    class Handler(FakeHandler):
        async def handle(self, request, peer):
            with open(f"/proc/self/fdinfo/{peer.pidfd}") as info:
                seen["pid"] = next(int(line.split()[1]) for line in info if line.startswith("Pid:"))
            seen["pidfd"] = peer.pidfd
            return await super().handle(request, peer)

    async def scenario():
        async with running(Handler(), tmp_path / "g.sock"):
            return await exchange(tmp_path / "g.sock", STATUS)

    asyncio.run(scenario())
    assert seen["pid"] == os.getpid()
    with pytest.raises(OSError):
        os.fstat(seen["pidfd"])  # closed with the connection (unless reused since)


def test_several_requests_on_one_connection_are_answered_in_order(tmp_path):
    handler = FakeHandler(behaviour=lambda request: {"task": f"t{request.group}"})

    async def scenario():
        async with running(handler, tmp_path / "g.sock"):
            return await exchange(tmp_path / "g.sock", weigh(7) + STATUS + b"nope\n" + weigh(9), replies=4)

    replies = asyncio.run(scenario())
    assert [r["ok"] for r in replies] == [True, True, False, True]
    assert replies[0]["task"] == "tg7" and replies[1]["request"] == "StatusRequest"
    assert replies[2]["error"]["code"] == "bad_request"
    assert replies[3]["task"] == "tg9"


def test_malformed_json_is_bad_request_and_the_server_serves_the_next_client(tmp_path):
    async def scenario():
        async with running(FakeHandler(), tmp_path / "g.sock"):
            bad = await exchange(tmp_path / "g.sock", b'{"op": \n')
            good = await exchange(tmp_path / "g.sock", STATUS)
            return bad + good

    bad, good = asyncio.run(scenario())
    assert bad["ok"] is False and bad["error"]["code"] == "bad_request" and "not JSON" in bad["error"]["message"]
    assert good["ok"] is True


@pytest.mark.parametrize(("request_line", "code", "message"), [
    (b'{"op": "frobnicate"}\n', "unknown_op",
     "op: unknown operation 'frobnicate' (known: launch, status, watch, explain, ps, stop, reload, set-weight, history)"),
    (b'{"op": "launch", "pid": "me"}\n', "bad_request", "pid: must be an integer, got a string"),
    (b'{"op": "stop", "tasks": ["7", 8]}\n', "bad_request", "tasks[1]: must be a task id"),
    (b'{"op": "status", "verbose": true}\n', "bad_request", "verbose: unknown field for op 'status'"),
], ids=["unknown op", "mistyped field", "mistyped item", "unknown field"])
def test_a_bad_request_gets_a_clear_error_and_the_server_keeps_serving(tmp_path, request_line, code, message):
    handler = FakeHandler()

    async def scenario():
        async with running(handler, tmp_path / "g.sock"):
            same = await exchange(tmp_path / "g.sock", request_line + STATUS, replies=2)
            return same + await exchange(tmp_path / "g.sock", STATUS)

    refused, after, other = asyncio.run(scenario())
    assert refused["ok"] is False and refused["error"]["code"] == code
    assert refused["error"]["message"].startswith(message)
    assert after["ok"] is True and other["ok"] is True
    # The bad one reached no handler.
    assert [type(request) for request, _ in handler.seen] == [StatusRequest, StatusRequest]


@pytest.mark.parametrize("newline", [b"", b"\n"], ids=["no newline yet", "complete line"])
def test_line_over_64_kib_is_too_large_and_closes_the_connection(tmp_path, newline):
    async def scenario():
        async with running(FakeHandler(), tmp_path / "g.sock"):
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "g.sock"))
            writer.write(b"x" * (MAX_LINE_BYTES + 2) + newline)
            reply = json.loads(await reader.readline())
            rest = await reader.read()  # EOF: the server hung up
            writer.close()
            after = await exchange(tmp_path / "g.sock", STATUS)
            return reply, rest, after

    reply, rest, [after] = asyncio.run(scenario())
    assert reply["error"]["code"] == "too_large"
    assert rest == b""
    assert after["ok"] is True


def test_partial_line_times_out_and_closes(tmp_path):
    async def scenario():
        async with running(FakeHandler(), tmp_path / "g.sock", read_timeout_s=0.2):
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "g.sock"))
            writer.write(b'{"op": "sta')
            reply = json.loads(await asyncio.wait_for(reader.readline(), 5))
            rest = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            return reply, rest

    reply, rest = asyncio.run(scenario())
    assert reply["error"] == {"code": "timeout", "message": "no complete request line within 0.2 s"}
    assert rest == b""


def test_last_request_without_newline_is_answered_at_eof(tmp_path):
    async def scenario():
        async with running(FakeHandler(), tmp_path / "g.sock"):
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "g.sock"))
            writer.write(b'{"op": "status"}')
            writer.write_eof()
            return await reader.read()

    reply = asyncio.run(scenario())
    assert reply.endswith(b"\n") and json.loads(reply)["ok"] is True


def test_request_error_from_the_handler_keeps_its_code(tmp_path):
    def refuse(request):
        raise RequestError("exceeds_capacity", "demand cpu 64 exceeds the capacity 16")

    async def scenario():
        async with running(FakeHandler(refuse), tmp_path / "g.sock"):
            return await exchange(tmp_path / "g.sock", weigh())

    [reply] = asyncio.run(scenario())
    assert reply == {"ok": False, "error": {"code": "exceeds_capacity", "message": "demand cpu 64 exceeds the capacity 16"}}


@pytest.mark.parametrize("behaviour", [
    lambda request: 1 / 0,
    lambda request: {"share": float("nan")},  # a payload JSON cannot carry is a bug too
    lambda request: ["not", "a", "dict"],
], ids=["raises", "nan payload", "not a dict"])
def test_a_bug_in_the_handler_is_internal_logged_and_the_server_keeps_serving(tmp_path, caplog, behaviour):
    async def scenario():
        async with running(FakeHandler(behaviour), tmp_path / "g.sock"):
            same_connection = await exchange(tmp_path / "g.sock", weigh() + STATUS, replies=2)
            next_connection = await exchange(tmp_path / "g.sock", STATUS)
            return same_connection + next_connection

    with caplog.at_level(logging.ERROR, logger="governor.wire.server"):
        broken, status, again = asyncio.run(scenario())
    assert broken["error"]["code"] == "internal"
    assert status["ok"] is True and again["ok"] is True
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.exc_info is not None  # the traceback is in the log


def test_handler_raising_runtime_error_is_internal(tmp_path, caplog):
    def crash(request):
        raise RuntimeError("boom")

    async def scenario():
        async with running(FakeHandler(crash), tmp_path / "g.sock"):
            return await exchange(tmp_path / "g.sock", weigh())

    with caplog.at_level(logging.ERROR, logger="governor.wire.server"):
        [reply] = asyncio.run(scenario())
    assert reply["error"]["code"] == "internal"
    assert "boom" not in reply["error"]["message"]  # internals stay in the log
    assert any(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in caplog.records)


def test_a_streamed_launch_sends_each_line_and_a_client_that_leaves_closes_its_stream(tmp_path):
    handler = FakeHandler()
    launch = json.dumps({"op": "launch", "pid": os.getpid()}).encode() + b"\n"

    async def scenario():
        async with running(handler, tmp_path / "g.sock"):
            # One client leaves while queued: its stream is closed at once, not at the next line.
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "g.sock"))
            writer.write(launch)
            queued = json.loads(await reader.readline())
            writer.close()
            await until(lambda: handler.left, "the stream of the client that left to be closed")
            left = list(handler.left)
            # Another waits and gets the task when admitted, though it sent a stray line meanwhile;
            # the connection then ends.
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "g.sock"))
            writer.write(launch + STATUS)
            first = json.loads(await reader.readline())
            handler.admit.set()
            second = json.loads(await reader.readline())
            rest = await reader.read()
            writer.close()
            return queued, left, first, second, rest

    queued, left, first, second, rest = asyncio.run(scenario())
    assert queued == {"ok": True, "queued": {"position": 1}} and left == [os.getpid()]
    assert first["queued"] == {"position": 1} and second == {"ok": True, "task": f"t{os.getpid()}"}
    assert rest == b""


def test_a_bug_in_one_connection_is_one_log_line_and_the_others_are_served(tmp_path, monkeypatch, caplog):
    import governor.wire.server as server_module

    def broken(line):
        if b"boom" in line:
            raise RuntimeError("a bug")
        return server_module.parse_request.__wrapped__(line)

    broken.__wrapped__ = server_module.parse_request
    monkeypatch.setattr(server_module, "parse_request", broken)

    async def scenario():
        async with running(FakeHandler(), tmp_path / "g.sock"):
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "g.sock"))
            writer.write(b'{"op": "boom"}\n')
            await writer.drain()
            closed = await reader.read()  # the connection ends without a reply
            writer.close()
            return closed, await exchange(tmp_path / "g.sock", STATUS)

    with caplog.at_level(logging.ERROR, logger="governor.wire.server"):
        closed, [reply] = asyncio.run(scenario())
    assert closed == b"" and reply["ok"]
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "internal error" in record.getMessage() and "RuntimeError('a bug')" in record.getMessage()
    assert record.exc_info is None  # one line, not a traceback
