"""Log lines suit journald under systemd (priority prefix, no timestamp) and a terminal elsewhere."""

import logging

import pytest

from governor.host.logs import setup_logging


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


def test_a_storm_of_one_line_is_a_few_lines_and_says_how_many_were_dropped():
    from governor.host.logs import RepeatFilter
    now = [0.0]
    storm = RepeatFilter(burst=3, window_s=60.0, clock=lambda: now[0])
    record = lambda msg: logging.LogRecord("asyncio", logging.ERROR, "x", 1, msg, None, None)  # noqa: E731
    passed = [storm.filter(record("socket.accept() out of system resource")) for _ in range(1000)]
    assert sum(passed) == 3
    assert storm.filter(record("another line"))  # each kind has its own budget
    now[0] = 61.0
    after = record("socket.accept() out of system resource")
    assert storm.filter(after) and "997 more like this in the last 60 s not logged" in after.getMessage()
    # Every daemon event is logged as "%s" with its text: different lines are different kinds.
    events = [logging.LogRecord("governor.daemon", logging.INFO, "x", 1, "%s", (f"refill {n}",), None)
              for n in range(100)]
    assert all(storm.filter(event) for event in events)


def test_it_remembers_a_bounded_number_of_lines_and_a_storm_stays_among_them():
    from governor.host.logs import RepeatFilter
    now = [0.0]
    lines = RepeatFilter(burst=1, window_s=60.0, clock=lambda: now[0], kept=100)
    record = lambda text: logging.LogRecord("governor.daemon", logging.INFO, "x", 1, "%s", (text,), None)  # noqa: E731
    storm = [lines.filter(record("accept failed")) for _ in range(3)]
    for n in range(10_000):  # one-off lines between the storm's
        assert lines.filter(record(f"refill {n}"))
        if n % 50 == 0:
            storm.append(lines.filter(record("accept failed")))
    assert storm.count(True) == 1 and len(lines._kinds) == 100
