"""Logging that suits journald and a terminal alike: one line per event.

Under systemd (``JOURNAL_STREAM`` set) each line starts with a syslog priority prefix
(``<3>`` for errors), which journald turns into the entry's level, and carries no timestamp
of our own: the journal has one. Elsewhere lines get a timestamp and the level name.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        priority = _PRIORITY.get(record.levelno, 6)
        return f"<{priority}>{super().format(record)}".replace("\n", " ")


class RepeatFilter(logging.Filter):
    """Let through at most ``burst`` records of one kind (logger, level and the line's text:
    not its template, which is ``"%s"`` for every daemon event) per ``window_s`` seconds; the
    first record of a kind after a quiet window says how many of it were dropped. So a storm
    (an accept() error per connection attempt while out of file descriptors) costs a few
    lines, not one per attempt, and nothing is dropped silently. Only the ``kept`` kinds seen
    last are remembered (a storm is one line again and again, so it stays among them): the
    memory is bounded whatever the log's rate (a refill's line is new every time).

    Args:
        burst: records of one kind let through per window, ≥ 1.
        window_s: the window, seconds.
        kept: how many kinds are remembered, the least recently seen forgotten first.
        clock: seconds from a monotonic clock (tests pass a fake).
    """

    def __init__(self, burst: int = 5, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 kept: int = 256):
        super().__init__()
        self.burst, self.window_s, self.clock, self.kept = burst, window_s, clock, kept
        # kind → [window start, let through, dropped], least recently seen first
        self._kinds: OrderedDict[tuple[str, int, str], list] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        kind = (record.name, record.levelno, record.getMessage())
        seen = self._kinds.get(kind)
        if seen is not None:
            self._kinds.move_to_end(kind)
        if seen is None or now - seen[0] >= self.window_s:
            dropped = seen[2] if seen else 0
            self._kinds[kind] = [now, 1, 0]
            if len(self._kinds) > self.kept:
                self._kinds.popitem(last=False)
            if dropped:
                record.msg = f"{record.getMessage()} ({dropped} more like this in the last {self.window_s:g} s " \
                             "not logged)"
                record.args = ()
            return True
        if seen[1] < self.burst:
            seen[1] += 1
            return True
        seen[2] += 1
        return False


def setup_logging(level: int = logging.INFO) -> None:
    """Send governor's log to stderr, formatted for journald or for a terminal, with repeated
    lines rate-limited (:class:`RepeatFilter`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RepeatFilter())
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
