"""``governor run`` while the daemon is away (issue 43, point 5): a launch the daemon went away
from before it answered is sent again when it is back, and a client that finds no daemon waits
for one, up to :data:`governor.cli.become_task.RESTART_GRACE_S`, saying so on a terminal only.
The daemon's side (a launch sent again finds its task) is in test_daemon_records.py."""

from __future__ import annotations

import os
import socket
import threading

import pytest
from support.client import governor
from support.fake_socket import FakeSocket
from support.waits import wait_until

from governor.cli import become_task
from governor.cli.become_task import launch_waiting
from governor.errors import DaemonNotRunning
from governor.wire.launch_types import LaunchRequest

STARTED = {"ok": True, "task": "7", "group": "A", "cgroup": "/sys/fs/cgroup/g/A/task-7", "limits": {}}


def request(*, wait: bool = True) -> LaunchRequest:
    return LaunchRequest(pid=os.getpid(), group="A", demand={"cpu": 1.0}, command=("true",), wait=wait)


def in_thread(work) -> tuple[threading.Thread, dict]:
    """Run ``work()`` on a thread; the dict gets its ``result`` or its ``error``."""
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = work()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_launch_the_daemon_went_away_from_is_sent_again_when_it_is_back(tmp_path, capsys):
    # Issue 43, point 5: 25 clients of a daemon killed (-9) during their launches failed with
    # "the daemon closed the stream" (exit 1), though it was back 4.7 s later.
    path = str(tmp_path / "g.sock")
    dying = FakeSocket(path, [])  # reads the launch, then hangs up without a word
    thread, outcome = in_thread(lambda: launch_waiting(path, request()))
    wait_until(lambda: dying.requests, "the first launch")
    dying.close()
    os.unlink(path)
    back = FakeSocket(path, [STARTED])
    thread.join(30)
    assert outcome["result"].task == "7", outcome
    assert [r["pid"] for r in back.requests] == [os.getpid()]  # the same launch: its own pid
    assert "the daemon went away; asking again when it is back" in capsys.readouterr().err
    back.close()


def test_a_client_that_finds_no_daemon_waits_for_it_quietly_off_a_terminal(tmp_path, monkeypatch, capsys):
    # Issue 43, point 5: every client started during a restart failed at once (exit 69).
    import governor.cli.client as client

    path, refused = str(tmp_path / "g.sock"), []

    def counted(*args, **kwargs):
        try:
            return launch(*args, **kwargs)
        except DaemonNotRunning as error:
            refused.append(error)
            raise

    launch = client.launch
    monkeypatch.setattr(client, "launch", counted)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(path)  # the socket of a killed daemon: connection refused
        thread, outcome = in_thread(lambda: launch_waiting(path, request()))
        wait_until(lambda: len(refused) >= 2, "the client trying again")
    os.unlink(path)
    wait_until(lambda: any("no socket" in str(error) for error in refused), "the client finding no socket")
    back = FakeSocket(path, [STARTED])
    thread.join(30)
    assert outcome["result"].task == "7", outcome
    assert capsys.readouterr().err == ""  # not a terminal: nothing said
    back.close()


def test_the_wait_for_the_daemon_is_said_on_a_terminal_and_bounded(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(become_task, "RESTART_GRACE_S", 0.3)
    monkeypatch.setattr(become_task.sys.stderr, "isatty", lambda: True)
    with pytest.raises(DaemonNotRunning, match="no socket"):
        launch_waiting(str(tmp_path / "absent.sock"), request())
    assert capsys.readouterr().err.startswith("\r\x1b[Kgovernor: waiting for the daemon to come back…")


def test_a_daemon_that_hangs_up_on_every_launch_is_given_up_on_after_the_wait(tmp_path, monkeypatch):
    from governor.cli.client import LaunchInterrupted

    monkeypatch.setattr(become_task, "RESTART_GRACE_S", 0.3)
    path = str(tmp_path / "g.sock")
    hanging_up = FakeSocket(path, [])
    with pytest.raises(LaunchInterrupted, match="the daemon closed the stream"):
        launch_waiting(path, request())
    assert len(hanging_up.requests) >= 2  # asked again, for a while only
    hanging_up.close()


def test_no_wait_waits_for_no_daemon(tmp_path):
    result, _ = governor("run", "--no-wait", "--", "true", socket_path=str(tmp_path / "absent.sock"))
    assert result.returncode == 69 and "daemon is not running" in result.stderr
