"""Log lines suit journald under systemd (priority prefix, no timestamp) and a terminal elsewhere."""

import logging

import pytest

from governor.logs import setup_logging


@pytest.fixture
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def test_under_systemd_levels_become_syslog_priorities(monkeypatch, capsys, restore_root_logger):
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    setup_logging()
    logging.getLogger("governor.daemon").error("failed to write '1' to /x/cpu.max:\nEINVAL")
    logging.getLogger("governor.daemon").info("refill after start")
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["<3>governor.daemon: failed to write '1' to /x/cpu.max: EINVAL",
                     "<6>governor.daemon: refill after start"]


def test_in_a_terminal_lines_carry_time_and_level(monkeypatch, capsys, restore_root_logger):
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    setup_logging()
    logging.getLogger("governor.daemon").warning("cannot remove cgroup A")
    line = capsys.readouterr().err.strip()
    assert line.endswith("WARNING governor.daemon: cannot remove cgroup A") and line[:4].isdigit()
