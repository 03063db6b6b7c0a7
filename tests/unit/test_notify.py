"""sd_notify messages reach a datagram socket as systemd would read them."""

import socket

import pytest

from governor.host.sd_notify import Notifier


@pytest.fixture
def manager(tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(2)
    yield sock, str(tmp_path / "notify")
    sock.close()


def test_messages_and_the_watchdog_interval(manager):
    sock, path = manager
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "30000000"})
    assert notifier.watchdog_interval_s == 15
    notifier.send("READY=1", "STATUS=2 task(s)")
    assert sock.recv(4096) == b"READY=1\nSTATUS=2 task(s)"
    notifier.reloading()
    fields = sock.recv(4096).decode().split("\n")
    assert fields[0] == "RELOADING=1" and fields[1].startswith("MONOTONIC_USEC=")


def test_outside_systemd_nothing_is_sent_and_nothing_fails():
    notifier = Notifier({})
    assert notifier.watchdog_interval_s is None
    notifier.send("READY=1")


def test_a_vanished_manager_is_logged_not_raised(tmp_path, caplog):
    Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")}).send("READY=1")
    assert "cannot notify systemd" in caplog.text
