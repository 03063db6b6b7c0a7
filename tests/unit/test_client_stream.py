"""``governor.cli.client.stream`` (the ``watch`` stream) and ``governor top``'s feed thread, against a
fake socket that streams scripted JSON lines."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import tempfile

import pytest
from support.fake_socket import FakeSocket

from governor.cli.client import call, stream
from governor.cli.top_terminal import Feed
from governor.errors import ControlSocketError, DaemonError, DaemonNotRunning
from governor.wire.reply_types import StatusReply
from governor.wire.request_types import LaunchRequest, WatchRequest
from governor.wire.status_json import decode


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "g.sock")


def status(n: int) -> dict:
    return {"ok": True, "status": {"n": n}}


def test_stream_yields_each_payload_then_an_unexpected_end_is_an_error(path):
    server = FakeSocket(path, [status(1), status(2), status(3)])
    got = []
    with pytest.raises(ControlSocketError, match="the daemon closed the stream") as info:
        for payload in stream(path, WatchRequest(0.5), timeout=5):
            got.append(payload)
    assert not isinstance(info.value, DaemonNotRunning)
    assert got == [StatusReply({"n": 1}), StatusReply({"n": 2}), StatusReply({"n": 3})]
    assert server.requests == [{"op": "watch", "interval": 0.5}]
    server.close()


def test_stream_reassembles_lines_split_across_reads(path):
    # One line in three pieces, the second piece also carrying the start of the next line.
    server = FakeSocket(path, [b'{"ok": true, "sta', b'tus": {"n": 1}}\n{"ok": tr', b'ue, "status": {"n": 2}}\n'],
                        pause=0.05, hold=True)
    updates = stream(path, WatchRequest(), timeout=5)
    assert [next(updates), next(updates)] == [StatusReply({"n": 1}), StatusReply({"n": 2})]
    updates.close()  # closing the generator hangs up: that is how a client ends a stream
    assert server.closed.wait(5)
    server.close()


def test_stream_error_line_is_a_daemon_error(path):
    server = FakeSocket(path, [status(1), {"ok": False, "error": {"code": "forbidden", "message": "no"}}], hold=True)
    updates = stream(path, WatchRequest(), timeout=5)
    assert next(updates) == StatusReply({"n": 1})
    with pytest.raises(DaemonError) as info:
        next(updates)
    assert (info.value.code, info.value.message) == ("forbidden", "no")
    server.close()


def test_stream_silence_longer_than_the_timeout_is_an_error(path):
    server = FakeSocket(path, [status(1)], hold=True)
    updates = stream(path, WatchRequest(), timeout=0.3)
    next(updates)
    with pytest.raises(ControlSocketError, match="no update from the daemon within 0.3 s"):
        next(updates)
    server.close()


def test_stream_garbage_line_is_an_error(path):
    server = FakeSocket(path, [b"<html>\n"], hold=True)
    with pytest.raises(ControlSocketError, match="not JSON"):
        next(stream(path, WatchRequest(), timeout=5))
    server.close()


def test_stream_without_a_daemon(path, tmp_path):
    with pytest.raises(DaemonNotRunning, match="no socket"):
        next(stream(path, WatchRequest()))


def test_feed_reports_the_daemon_down_then_reconnects_when_it_is_back(path):
    wake_read, wake_write = os.pipe()
    feed = Feed(path, 0.2, wake_write)
    feed.start()
    kind, reason, _ = feed.updates.get(timeout=5)
    assert kind == "down" and "not running" in reason
    assert os.read(wake_read, 100)  # the main loop was woken up
    server = FakeSocket(path, [status(7)])
    while True:  # down reports repeat once a second until the daemon answers
        kind, value, _ = feed.updates.get(timeout=5)
        if kind == "status":
            break
    assert value == decode({"n": 7})  # top reads the status decoded (issue 45: a typed status)
    assert server.requests[-1] == {"op": "watch", "interval": 0.2}
    feed.stop()
    server.close()
    os.close(wake_read)
    os.close(wake_write)


def test_feed_reports_a_reply_without_status(path):
    wake_read, wake_write = os.pipe()
    server = FakeSocket(path, [{"ok": True, "nothing": 1}], hold=True)
    feed = Feed(path, 1.0, wake_write)
    feed.start()
    kind, reason, _ = feed.updates.get(timeout=5)
    assert kind == "down" and "no status object" in reason
    feed.stop()
    server.close()
    os.close(wake_read)
    os.close(wake_write)
    with pytest.raises(queue.Empty):
        feed.updates.get(timeout=1.5)  # stopped: no reconnection


def test_a_stopped_feed_writes_no_wake_up_so_its_pipe_may_be_closed_and_the_number_reused(path):
    # The feed's last wake-up came after top had closed the pipe: a pipe opened next with the
    # same number received a stray "." (a later test in the same process saw it).
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen()
        feed = Feed(path, 0.2, wake_write)
        feed.start()
        connection, _ = listener.accept()
        with connection:
            connection.sendall(json.dumps(status(1)).encode() + b"\n")
            assert feed.updates.get(timeout=5)[0] == "status"
            feed.stop()
            os.read(wake_read, 100)  # the wake-ups written before stop() returned
        # hung up: the feed reports the daemon down, and must not wake the loop that stopped it
        feed.join(10)
    assert not feed.is_alive() and feed.updates.get(timeout=1)[0] == "down"
    with pytest.raises(BlockingIOError):
        os.read(wake_read, 100)
    os.close(wake_read)
    os.close(wake_write)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a server as another user")
def test_a_server_not_run_by_root_or_oneself_is_refused_before_anything_is_sent():
    where = tempfile.mkdtemp()  # not under pytest's tmp_path, which nobody may enter
    os.chmod(where, 0o777)
    path = os.path.join(where, "fake.sock")
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a fake daemon run by nobody, recording what it receives
        try:
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(path)
                server.listen()
                os.write(ready_write, b"x")
                connection, _ = server.accept()
                os.write(ready_write, connection.recv(4096) or b"<nothing>")
        finally:
            os._exit(0)
    os.close(ready_write)
    assert os.read(ready_read, 1) == b"x"
    try:
        with pytest.raises(ControlSocketError, match="uid 65534, not as root"):
            call(path, LaunchRequest(pid=os.getpid(), group=None, demand={}, command=("secret",)))
    finally:
        os.waitpid(pid, 0)
    assert os.read(ready_read, 4096) == b"<nothing>"
    os.close(ready_read)
    shutil.rmtree(where)
