"""``governor status`` and the socket client (cli/client.py): the socket's path, a reply's payload
and the daemon's errors, against a fake daemon; broken, endless or missing replies from a
one-shot server, each a control-socket error."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading

import pytest
from click.testing import CliRunner

from governor.cli.client import DEFAULT_SOCKET, call, socket_path
from governor.cli.main import main
from governor.errors import ControlSocketError, DaemonError, DaemonNotRunning, RequestError
from governor.wire.protocol import LaunchRequest, StatusRequest
from support.status_sample import STATUS


def test_status_json_prints_the_status_object(fake_daemon):
    result = CliRunner().invoke(main, ["status", "--json", "--socket", fake_daemon.path])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1
    assert json.loads(result.output) == STATUS


def test_status_human_output_at_80_columns(fake_daemon, monkeypatch):
    monkeypatch.setenv("GOVERNOR_SOCKET", fake_daemon.path)
    result = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["status"])
    assert result.exit_code == 0, result.output
    for text in ("physics", "ops", "50.0%", "25.0%", "cpu saturated", "7.25", "150.0M/s", "backup.sh"):
        assert text in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_status_reply_without_status_object_is_an_error(fake_daemon):
    fake_daemon.status = ["not", "an", "object"]
    result = CliRunner().invoke(main, ["status", "--socket", fake_daemon.path])
    assert result.exit_code == 1
    assert result.output == f"governor: error: {fake_daemon.path}: the daemon's status reply has no status object\n"


def test_socket_path_precedence(monkeypatch):
    monkeypatch.delenv("GOVERNOR_SOCKET", raising=False)
    assert socket_path(None) == DEFAULT_SOCKET == "/run/governor/governor.sock"
    monkeypatch.setenv("GOVERNOR_SOCKET", "/tmp/env.sock")
    assert socket_path(None) == "/tmp/env.sock"
    assert socket_path("/tmp/option.sock") == "/tmp/option.sock"


def test_call_returns_the_payload_and_raises_daemon_errors(fake_daemon):
    assert call(fake_daemon.path, LaunchRequest(pid=os.getpid(), group=None, demand={}, command=())).task == "t1"
    fake_daemon.refuse = RequestError("not_found", "no group 'x' in the config")
    with pytest.raises(DaemonError) as info:
        call(fake_daemon.path, StatusRequest())
    assert (info.value.code, info.value.message, info.value.op) == ("not_found", "no group 'x' in the config", "status")
    with pytest.raises(DaemonNotRunning):
        call(fake_daemon.path + ".absent", StatusRequest())


def one_shot(path: str, reply: bytes | None) -> threading.Thread:
    """A server that accepts one connection, reads a line, sends ``reply`` (None: nothing, hold
    the connection open for a second) and hangs up."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()

    def serve():
        with listener, listener.accept()[0] as conn:
            conn.recv(65536)
            if reply is None:
                threading.Event().wait(1)
            else:
                with contextlib.suppress(BrokenPipeError):  # a client that stopped reading
                    conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(("reply", "timeout", "message"), [
    (b"", 5, "closed the connection without replying"),
    (b'{"ok": true', 5, "closed the connection without replying"),
    (b"<html>\n", 5, "not JSON"),
    (b"[1, 2]\n", 5, "malformed reply"),
    (b'{"ok": true, "status": {"version": NaN}}\n', 5, "not JSON"),  # Python's json would read it
    (b'{"ok": true, "status": {"version": -Infinity}}\n', 5, "not JSON"),
    (b"[" * 5000 + b"]" * 5000 + b"\n", 5, "nested too deeply to read"),  # json's RecursionError
    (b'{"ok": false, "error": "nope"}\n', 5, "malformed error reply"),
    (None, 0.2, "no reply from the daemon within 0.2 s"),
])
def test_call_broken_replies_are_control_socket_errors(tmp_path, reply, timeout, message):
    path = str(tmp_path / "odd.sock")
    thread = one_shot(path, reply)
    with pytest.raises(ControlSocketError, match=message) as info:
        call(path, StatusRequest(), timeout=timeout)
    assert not isinstance(info.value, DaemonNotRunning)
    thread.join(5)


def test_a_reply_past_the_longest_read_is_cut_there(tmp_path, monkeypatch):
    import governor.cli.client as client

    monkeypatch.setattr(client, "MAX_REPLY_BYTES", 1 << 20)
    path = str(tmp_path / "endless.sock")
    thread = one_shot(path, b"x" * (3 << 20))  # no newline: a server that never ends its line
    with pytest.raises(ControlSocketError, match="reply is longer than 1 MiB; nothing more was read"):
        call(path, StatusRequest(), timeout=5)
    thread.join(5)


def test_a_stop_reply_of_other_than_ids_is_refused():
    from governor.wire.reply_types import StopReply

    assert StopReply.from_json({"stopped": ["7"]}).stopped == ("7",)
    with pytest.raises(ValueError, match="not of task ids"):  # was printed as {'a': 1}, None, 10**300
        StopReply.from_json({"stopped": [{"a": 1}, None, 10**300]})



@contextlib.contextmanager
def full_queue(path: str):
    """A listening socket at ``path`` that accepts nothing, its queue of connections not yet
    accepted full: (the server, the queued connections)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server, contextlib.ExitStack() as stack:
        server.bind(path)
        server.listen(0)
        queued = []
        while True:
            filler = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            filler.setblocking(False)
            try:
                filler.connect(path)
            except BlockingIOError:
                break
            queued.append(filler)
        yield server, queued


def test_a_connect_that_finds_the_daemons_queue_full_waits_for_room(tmp_path, monkeypatch):
    # One user's loop of connects filled the queue of connections not yet accepted, and every
    # other client's connect failed at once ("Resource temporarily unavailable").
    import governor.cli.client as client

    path, waited, outcome = str(tmp_path / "busy.sock"), threading.Event(), []
    real_sleep = client.time.sleep

    def pause(seconds):
        waited.set()
        real_sleep(seconds)

    def connect():
        try:
            outcome.append(client._connect(path, 10))
        except ControlSocketError as error:
            outcome.append(error)

    monkeypatch.setattr(client.time, "sleep", pause)
    with full_queue(path) as (server, queued):
        thread = threading.Thread(target=connect)
        thread.start()
        while not waited.is_set() and thread.is_alive():
            waited.wait(0.01)
        for _ in queued:  # room, one at a time
            server.accept()[0].close()
        thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], socket.socket), outcome
    outcome[0].close()


def test_a_queue_that_stays_full_is_said_once_the_timeout_passed(tmp_path):
    from governor.cli.client import _connect

    path = str(tmp_path / "busy.sock")
    with full_queue(path), pytest.raises(ControlSocketError, match="took no connection within 0.05 s"):
        _connect(path, 0.05)
