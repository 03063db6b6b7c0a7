"""The history journal's reader (:func:`governor.host.history_store.read_history`) at lines no
writer makes (stranger check, 2026-12-03): one nested past the JSON decoder's depth, one at a
time no journal holds, a "file" that is none. Each is passed over, and a line is named to the
caller wherever the period asked lies."""

import pytest
from support.history import Clock

from governor.config.history_rules import HistoryRules
from governor.host.history_store import HistoryWriter, journal_files, read_history

# A launch entry as the readers take it (governor.host.history_check).
LAUNCH = {"kind": "launch", "task": "1", "group": "g", "uid": 1000}


def _writer(directory) -> HistoryWriter:
    clock = Clock()
    clock.now = 100.0
    return HistoryWriter(directory, HistoryRules, clock)


def test_a_line_nested_past_the_decoders_depth_is_skipped_and_a_file_that_is_no_file_passed_over(tmp_path):
    # Stranger check: a RecursionError traceback from history and replay; a journal file that
    # links to /dev/zero was read until the memory ran out.
    writer = _writer(tmp_path / "h")
    writer.write([{**LAUNCH, "at": 100.0}])
    with open(journal_files(tmp_path / "h")[-1], "ab") as stream:
        stream.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    (tmp_path / "h" / "history-999999999999999.jsonl").symlink_to("/dev/zero")
    skipped = []
    assert [e["at"] for e in read_history(tmp_path / "h", skipped=lambda *line: skipped.append(line))] == [100]
    assert [(number, why) for _, number, why in skipped] == [(2, "not a JSON object (cut short by a crash?)")]


@pytest.mark.parametrize("at", [float("inf"), -5.0, 1e30])
def test_a_line_at_no_time_a_journal_holds_is_named_whatever_the_period(tmp_path, at):
    # Whether it was named or dropped unsaid hung on the period asked: history and replay disagreed.
    writer = _writer(tmp_path / "h")
    writer.write([{**LAUNCH, "at": 100.0}, {**LAUNCH, "at": at}])
    for since, until in ((None, None), (50.0, 150.0), (50.0, None)):
        skipped = []
        kept = [e["at"] for e in read_history(tmp_path / "h", since, until, lambda *line: skipped.append(line))]
        assert kept == [100.0] and [number for _, number, _ in skipped] == [2], (since, until)
