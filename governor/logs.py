"""Logging that suits journald and a terminal alike: one line per event.

Under systemd (``JOURNAL_STREAM`` set) each line starts with a syslog priority prefix
(``<3>`` for errors), which journald turns into the entry's level, and carries no timestamp
of our own: the journal has one. Elsewhere lines get a timestamp and the level name.
"""

from __future__ import annotations

import logging
import os
import sys

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        priority = _PRIORITY.get(record.levelno, 6)
        return f"<{priority}>{super().format(record)}".replace("\n", " ")


def setup_logging(level: int = logging.INFO) -> None:
    """Send governor's log to stderr, formatted for journald or for a terminal."""
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
