"""``governor top -b``'s width (cli/top_batch.py): the terminal's, else ``$COLUMNS``, else 120."""

from __future__ import annotations

import os

import pytest
from support.status_sample import STATUS

from governor.cli import top_batch
from governor.wire.status_json import decode


@pytest.mark.parametrize("columns", [None, "0", "abc"])
def test_top_batch_on_a_terminal_of_no_size_prints_at_a_width_it_knows(monkeypatch, columns):
    # A pty given no size (docker exec -t, some CI runners) says 0 columns: top -b printed one
    # blank line, even with COLUMNS set.
    monkeypatch.setattr(os, "get_terminal_size", lambda *fd: os.terminal_size((0, 0)))
    if columns is None:
        monkeypatch.setenv("COLUMNS", "90")
    else:
        monkeypatch.setenv("COLUMNS", columns)
    text = next(top_batch.snapshots([decode(STATUS)], 1))
    assert all(group in text for group in STATUS["groups"])
    assert max(map(len, text.splitlines())) == (90 if columns is None else 120)
