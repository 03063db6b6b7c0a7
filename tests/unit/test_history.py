"""The history journal (issue 47): the ``[history]`` config, the writer's rotation and pruning,
reading back after a crash, the daemon's one entry per event, and ``governor history``."""

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.daemons import GIB, launch, on_loop

from governor.cli.main import main
from governor.config.history_rules import _KEYS, HistoryRules
from governor.config.load import parse_config
from governor.errors import ConfigError
from governor.host.history_store import HistoryWriter, journal_files, read_history
from governor.errors import RequestError

GROUPS = '[groups.A]\nusers = ["root"]\n'
EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "governor.toml"


def test_history_defaults_hold_a_month_in_200M():
    assert parse_config(GROUPS, "t.toml").history == HistoryRules(True, 30 * 86400, 200 * 1024**2)
    rules = parse_config(GROUPS + '[history]\nkeep = "7d"\nmax_size = "1G"\nenabled = false\n', "t.toml").history
    assert rules == HistoryRules(False, 7 * 86400, 1024**3)


@pytest.mark.parametrize("table, key, words", [
    ('keep = 7', "history.keep", "time span"),
    ('keep = "soon"', "history.keep", ""),
    ('keep = "20000d"', "history.keep", "ten years"),
    ('max_size = "1K"', "history.max_size", "64K"),
    ('max_size = "lots"', "history.max_size", ""),
    ('enabled = "yes"', "history.enabled", "true or false"),
    ('kept = "1d"', "history.kept", ""),
])
def test_a_bad_history_setting_is_a_clear_error_at_its_key(table, key, words):
    with pytest.raises(ConfigError) as raised:
        parse_config(GROUPS + "[history]\n" + table + "\n", "t.toml")
    assert raised.value.key == key and words in str(raised.value)


def test_every_history_key_is_documented_in_the_example_config():
    text = EXAMPLE.read_text()
    assert "# [history]" in text
    for key in _KEYS:
        assert re.search(rf"^# {key}: ", text, re.MULTILINE), key


# A launch entry as the readers take it (governor.host.history_check): these tests are of the
# writer and the reader, not of the entries' fields.
LAUNCH = {"kind": "launch", "task": "1", "group": "g", "uid": 1000}


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def test_the_writer_begins_a_file_at_a_tenth_of_max_size_and_drops_the_oldest_past_it(tmp_path):
    clock = Clock(1_000_000.0)
    writer = HistoryWriter(tmp_path / "h", lambda: HistoryRules(True, 86400, 64 * 1024), clock)
    entry = {**LAUNCH, "pad": "x" * 900}
    for at in range(200):  # ~190K: about three times max_size
        clock.now += 1
        writer.write([{**entry, "at": clock.now}])
    files = journal_files(tmp_path / "h")
    assert all(path.stat().st_size <= 64 * 1024 // 10 + 1024 for path in files)
    assert sum(path.stat().st_size for path in files) <= 64 * 1024 + 64 * 1024 // 10
    kept = [e["at"] for e in read_history(tmp_path / "h")]
    assert kept == sorted(kept) and kept[-1] == clock.now and kept[0] > 1_000_001  # the oldest went
    assert oct(files[-1].stat().st_mode & 0o777) == "0o600"


def test_the_capacity_outlives_the_file_that_held_the_daemons_start(tmp_path):
    # An attacker's check: once the oldest files went, the daemon's start entry went with them,
    # and replay refused every period ("holds no daemon start before the period's end") until
    # a reload or a restart wrote one again.
    from governor.daemon.replay_input import recorded

    clock = Clock(1_000_000.0)
    writer = HistoryWriter(tmp_path / "h", lambda: HistoryRules(True, 86400, 64 * 1024), clock)
    writer.write([{"at": clock.now, "kind": "daemon", "reason": "start", "capacity": {"cpu": 2, "memory": GIB},
                   "config": "g.toml"}])
    for _ in range(200):  # about three times max_size: the first file goes
        clock.now += 1
        writer.write([{**LAUNCH, "pad": "x" * 900, "at": clock.now}])
    entries = list(read_history(tmp_path / "h"))
    assert all(entry["reason"] == "carried" for entry in entries if entry["kind"] == "daemon")
    for path in journal_files(tmp_path / "h"):
        first = json.loads(path.read_bytes().splitlines()[0])
        assert first["kind"] == "daemon" and first["capacity"] == {"cpu": 2, "memory": GIB}, path
    period = recorded(entries, clock.now - 10, clock.now + 1)
    assert period.capacity == {"cpu": 2.0, "memory": float(GIB)} and len(period.jobs) == 1  # (one task id)
    kinds = [entry["kind"] for entry in entries]
    assert kinds.count("daemon") == len(journal_files(tmp_path / "h"))


def test_files_older_than_keep_are_removed(tmp_path):
    clock = Clock(1_000_000.0)
    rules = HistoryRules(True, 3600, 64 * 1024)
    writer = HistoryWriter(tmp_path / "h", lambda: rules, clock)
    writer.write([{**LAUNCH, "at": clock.now, "pad": "x" * 7000}])  # fills its file
    old = journal_files(tmp_path / "h")[0]
    os.utime(old, (clock.now, clock.now))
    clock.now += 7200
    writer.write([{**LAUNCH, "at": clock.now}])
    assert old not in journal_files(tmp_path / "h")
    assert [e["at"] for e in read_history(tmp_path / "h")] == [clock.now]


def test_a_line_cut_short_by_a_kill_is_skipped_and_the_rest_read_in_the_period(tmp_path):
    writer = HistoryWriter(tmp_path / "h", HistoryRules, Clock(100.0))
    writer.write([{**LAUNCH, "at": float(at)} for at in (100, 200, 300)])
    with open(journal_files(tmp_path / "h")[-1], "ab") as stream:
        stream.write(b'{"at": 400, "kind": "la')  # kill -9 mid-write
    assert [e["at"] for e in read_history(tmp_path / "h")] == [100, 200, 300]
    assert [e["at"] for e in read_history(tmp_path / "h", since=150, until=300)] == [200]


def test_the_writer_thread_writes_what_it_was_given_before_it_closes(tmp_path):
    writer = HistoryWriter(tmp_path / "h", HistoryRules)
    writer.start()
    for at in range(50):
        writer.put({**LAUNCH, "at": float(at)})
    writer.close()
    assert len(list(read_history(tmp_path / "h"))) == 50


def _journal(daemon):
    daemon.history.close()
    return list(read_history(daemon.store.directory / "history"))


def test_the_daemon_journals_each_launch_start_end_and_refusal_once(daemon):
    daemon.history.writer.start()
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    daemon.hierarchy.driver.procs["A/task-1"] = []
    on_loop(daemon, lambda: daemon.exits.check(["1"], "exit"))
    with pytest.raises(RequestError):
        launch(daemon, 200, group="A", cpu=1.0, memory=100 * GIB)  # can never fit
    entries = _journal(daemon)
    assert [e["kind"] for e in entries] == ["launch", "start", "end", "refusal"]
    launched, started, ended, refused = entries
    assert (launched["task"], launched["group"], launched["user"], launched["demand"]["memory"]) == ("1", "A", "root", GIB)
    assert started["waited_s"] >= 0 and started["at"] == ended["started"]
    assert ended["reason"] == "exit" and "wall_s" in ended and "cpu_s" in ended
    assert refused["code"] == "exceeds_capacity" and refused["demand"]["memory"] == 100 * GIB
    assert refused["user"] == "root"  # it was the uid alone: history showed "0"
    for entry in entries:  # nothing the visibility rule hides from others
        assert not {"command", "pid", "processes"} & set(entry)


def test_a_refused_group_name_is_kept_as_long_as_a_name_and_shown_so(daemon, tmp_path):
    # A refused launch's group of 5,000 characters was journalled cut to 4,096, and every line
    # of everyone's `governor history` became that wide.
    daemon.history.writer.start()
    with pytest.raises(RequestError):
        launch(daemon, 200, group="G" * 5000, cpu=1.0, memory=GIB)
    refused = _journal(daemon)[-1]
    assert refused["kind"] == "refusal" and refused["group"] == "G" * 64 + "…"
    directory = tmp_path / "old"
    HistoryWriter(directory, HistoryRules, Clock(100.0)).write([  # as an older daemon journalled it
        {"at": 1e9, "kind": "refusal", "task": None, "uid": 0, "group": "G" * 4096, "demand": {}, "code": "x"}])
    done = CliRunner().invoke(main, ["history", "--dir", str(directory), "--since", "2000-01-01"])
    assert done.exit_code == 0 and max(map(len, done.output.splitlines())) < 130, done.output  # 4,200 before


def test_governor_history_shows_others_entries_as_private_and_writes_json_lines(daemon, tmp_path):
    daemon.history.writer.start()
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    _journal(daemon)
    runner = CliRunner()
    directory = str(daemon.store.directory / "history")
    done = runner.invoke(main, ["history", "--dir", directory, "--since", "1h", "--json"])
    assert done.exit_code == 0, done.output
    lines = [json.loads(line) for line in done.output.splitlines()]
    assert [e["kind"] for e in lines] == ["launch", "start"]
    assert all(e.get("private") is (os.getuid() != 0) or (os.getuid() == 0 and "private" not in e) for e in lines)
    table = runner.invoke(main, ["history", "--dir", directory])
    assert table.exit_code == 0 and "launch" in table.output and "start" in table.output
    bad = runner.invoke(main, ["history", "--dir", directory, "--since", "last tuesday"])
    assert bad.exit_code != 0 and "--since" in bad.output and "Traceback" not in bad.output
    missing = runner.invoke(main, ["history", "--dir", str(tmp_path / "none")])
    assert missing.exit_code != 0 and "cannot read the history" in missing.output


def test_a_restarted_writer_appends_to_what_the_last_daemon_wrote(tmp_path):
    for at in (1.0, 2.0):  # two daemons, one after the other
        writer = HistoryWriter(tmp_path / "h", HistoryRules, Clock(at))
        writer.start()
        writer.put({"at": at, "kind": "daemon", "capacity": {}})
        writer.close()
    assert [e["at"] for e in read_history(tmp_path / "h")] == [1.0, 2.0]
    assert len(journal_files(tmp_path / "h")) == 1


def test_a_session_is_journaled_when_it_starts_and_when_it_ends(tmp_path):
    from support.sessions import USER, session_daemon

    daemon = session_daemon(tmp_path)
    daemon.history.writer.start()
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    daemon.hierarchy.driver.procs["A/session-1"] = []
    on_loop(daemon, lambda: daemon.exits.check(["session-1"], "exit"))
    entries = _journal(daemon)
    assert [(e["kind"], e["task"], e["user"], e["session"]) for e in entries] == [
        ("session", "session-1", USER, True), ("end", "session-1", USER, True)]
    assert entries[0]["waited_s"] == 0.0 and entries[0]["demand"]["memory"] == 3 * GIB


def test_the_history_operation_sends_the_period_as_the_caller_may_see_it(daemon):
    import asyncio

    from governor.wire.protocol import HistoryRequest, Peer, parse_request
    from governor.wire.visibility import Viewer

    daemon.history.writer.start()
    launch(daemon, 100, group="A", cpu=1.0, memory=GIB)
    daemon.history.writer.close()
    request = parse_request(b'{"op": "history", "since": 0}\n')
    assert request == HistoryRequest(0.0, None)
    theirs = asyncio.run(daemon.history.reply(request, Viewer(65534, False)))
    assert [(e["kind"], e["private"]) for e in theirs.entries] == [("launch", True), ("start", True)]
    assert not theirs.truncated
    mine = asyncio.run(daemon._history(request, Peer(pid=1, uid=0, gid=0)))
    assert [e["kind"] for e in mine.to_json()["entries"]] == ["launch", "start"] and "private" not in mine.entries[0]
    assert asyncio.run(daemon.history.reply(HistoryRequest(until=0.0), Viewer(0, True))).entries == []
    with pytest.raises(RequestError) as bad:
        parse_request(b'{"op": "history", "since": "yesterday"}\n')
    assert bad.value.code == "bad_request" and "since" in bad.value.message


def test_a_history_reply_carries_at_most_its_bytes_the_newest(daemon, monkeypatch):
    # An attacker's check: entries of a kilobyte (a name of 64 emoji, escaped) made the 100,000
    # sent a reply of 102 MB, and the daemon went from 60 to 564 MB to build it.
    import asyncio

    import governor.daemon.history as history
    from governor.wire.protocol import HistoryRequest
    from governor.wire.visibility import Viewer

    entries = [{**LAUNCH, "at": 1e9 + i, "task": str(i), "name": "\U0001f600" * 64} for i in range(40)]
    HistoryWriter(daemon.history.writer.directory, HistoryRules, Clock(100.0)).write(entries)
    size = len(json.dumps(entries[-1], separators=(",", ":")))  # (each of the last ten as long)
    monkeypatch.setattr(history, "BYTES_SENT", 10 * size)
    reply = asyncio.run(daemon.history.reply(HistoryRequest(0.0, None), Viewer(0, True)))
    assert reply.truncated and [e["task"] for e in reply.entries] == [str(i) for i in range(30, 40)]
    monkeypatch.setattr(history, "BYTES_SENT", 40 * size)
    reply = asyncio.run(daemon.history.reply(HistoryRequest(0.0, None), Viewer(0, True)))
    assert not reply.truncated and len(reply.entries) == 40


def test_history_requests_read_the_journal_one_at_a_time(daemon, monkeypatch):
    import asyncio
    import threading

    from governor.daemon import history as history_module
    from governor.wire.protocol import HistoryRequest
    from governor.wire.visibility import Viewer

    reading, most = [0], [0]
    lock = threading.Lock()

    def read_history(directory, since, until, skipped=None):  # counts the reads under way at once
        with lock:
            reading[0] += 1
            most[0] = max(most[0], reading[0])
        threading.Event().wait(0.05)  # a read that takes a while, so that reads could overlap
        with lock:
            reading[0] -= 1
        return iter([])

    monkeypatch.setattr(history_module, "read_history", read_history)

    async def many():
        # Eight users: one user's second read at once is refused (tests/unit/test_history_pace.py).
        return await asyncio.gather(*(daemon.history.reply(HistoryRequest(0.0, None), Viewer(60000 + uid, False))
                                      for uid in range(8)))

    assert all(reply.entries == [] for reply in asyncio.run(many()))
    assert most[0] == 1


@pytest.mark.parametrize(("entry", "shown"), [
    ({**LAUNCH, "demand": [1]}, "demand must be an object of amounts, got an array"),
    ({**LAUNCH, "kind": "end", "wall_s": "x"}, "wall_s must be a number of seconds from 0 to 8,589,934,592, got a string"),
    ({"kind": ["launch"]}, "kind must be a string, got an array"),
    ({**LAUNCH, "demand": {"cpu": -1}}, "demand.cpu must be an amount from 0 to 65,536, got -1"),
    # Stranger check: replay divided by these, and one such line stopped the whole replay.
    ({**LAUNCH, "demand": {"cpu": 1, "banana": 5}}, "demand.banana names no resource governor knows"),
    ({"kind": "daemon", "capacity": {"cpu": 0, "memory": 0}}, "capacity.cpu must be above 0, got 0"),
    ({**LAUNCH, "kind": ""}, "kind must be a non-empty string, got an empty one"),
    ({"kind": "end", "reason": "[/oops]", "name": "\x1b]0;PWNED\x07", "task": "7", "group": "[link=http://x]A"}, None),
])
def test_a_journal_entry_edited_by_hand_is_skipped_and_named_or_shown_as_text(tmp_path, entry, shown):
    # The table read the entries' fields untyped: a hand-edited journal (or a hostile daemon's
    # history reply) met it as AttributeError, TypeError or rich's MarkupError. Then one such
    # entry refused the whole period, naming it by its index after filtering; --json passed it.
    directory = tmp_path / "h"
    HistoryWriter(directory, HistoryRules, Clock(100.0)).write([{"at": 1e9, **entry}, {**LAUNCH, "at": 1e9 + 1}])
    runner = CliRunner(env={"COLUMNS": "200"})
    table = runner.invoke(main, ["history", "--dir", str(directory), "--since", "2000-01-01"])
    assert "Traceback" not in table.output and "\x1b" not in table.output and "\x07" not in table.output
    assert table.exit_code == 0
    if shown is None:
        assert "[/oops]" in table.output and "[link=http://x]A" in table.output
    else:
        journal = journal_files(directory)[0]
        assert f"skipped 1 line of the journal that is no entry (the first: {journal} line 1: {shown})" in table.output
        lines = runner.invoke(main, ["history", "--dir", str(directory), "--since", "2000-01-01", "--json"])
        assert lines.exit_code == 0 and [json.loads(line)["at"] for line in lines.stdout.splitlines()] == [1e9 + 1]


def test_a_refusal_of_io_where_no_device_is_governed_is_an_entry_every_reader_reads(daemon, tmp_path):
    # A stranger's check: the refusal was journaled with the demand as asked, {"io_read": …},
    # and every history and replay then skipped it as naming no resource, with a warning to
    # every user for as long as the journal kept it.
    from governor.daemon.replay_input import recorded
    from governor.host.history_check import entry_problem

    daemon.history.writer.start()
    with pytest.raises(RequestError, match="no I/O device is governed"):
        launch(daemon, 100, group="A", cpu=1.0, memory=GIB, io_read=1 << 20)
    [refused] = _journal(daemon)
    assert refused["kind"] == "refusal" and refused["demand"]["io_read"] == 1 << 20
    assert entry_problem(refused) is None
    directory = daemon.store.directory / "history"
    done = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["history", "--dir", str(directory), "--since", "2000-01-01"])
    assert done.exit_code == 0 and "skipped" not in done.output, done.output
    assert "io_read 1.0M/s" in done.output
    assert len(recorded(read_history(directory), 0.0, 2e9).refusals) == 1


def test_the_listing_aligns_every_column_in_terminal_cells_under_its_header(tmp_path):
    # A rich table took about a millisecond a row (a week of a busy host: minutes); the listing
    # is plain lines, each column as wide as its widest cell, a wide character two cells.
    from rich.cells import cell_len

    directory = tmp_path / "h"
    HistoryWriter(directory, HistoryRules, Clock(100.0)).write([
        {"at": 1e9, "kind": "launch", "task": "7", "name": "計算", "user": "alice", "group": "A",
         "demand": {"cpu": 2.0, "memory": GIB}},
        {"at": 1e9 + 1, "kind": "end", "task": "12345", "name": "x", "user": "bo", "group": "physics",
         "demand": {}, "reason": "exit", "wall_s": 1.0},
        {"at": 1e9 + 2, "kind": "refusal", "task": None, "uid": 1001, "group": None, "demand": {"cpu": 1.0},
         "code": "too_large"}])
    done = CliRunner().invoke(main, ["history", "--dir", str(directory), "--since", "2000-01-01"])
    assert done.exit_code == 0, done.output
    header, *lines = done.output.splitlines()
    assert header.split() == ["time", "kind", "task", "user", "group", "demand", "details"]
    for word in ("kind", "task", "user", "group", "demand", "details"):
        start = header.index(word)
        for line in (line for line in lines if cell_len(line) > start):  # an empty last cell is cut
            # every cell of the column begins where its header does, counted in cells
            prefix = next(line[:i] for i in range(len(line) + 1) if cell_len(line[:i]) >= start)
            assert cell_len(prefix) == start and line[len(prefix) - 1] == " ", (word, line)
    assert "7 計算" in lines[0] and "12345 x" in lines[1] and "1001" in lines[2] and lines[2].endswith("too_large")


def test_a_journal_not_found_here_is_asked_of_the_daemon(tmp_path, monkeypatch):
    # A daemon with a journal of its own (--history-dir, another [history] directory): history
    # said "no history journal here" and never asked it, though the help says anyone else does.
    import governor.cli.history as history_cli

    config = tmp_path / "governor.toml"
    config.write_text(f'[groups.A]\nusers = ["root"]\n[history]\ndirectory = "{tmp_path / "nowhere" / "history"}"\n')
    asked = []
    monkeypatch.setattr(history_cli, "_asked", lambda socket, since, until: asked.append(socket) or [
        {"at": 1e9, "kind": "refusal", "task": None, "uid": 0, "user": "root", "group": "A", "demand": {},
         "code": "too_many"}])
    done = CliRunner().invoke(main, ["history", "--config", str(config), "--since", "2000-01-01", "--socket", "/x.sock"])
    assert done.exit_code == 0 and asked == ["/x.sock"] and "too_many" in done.output, done.output


@pytest.mark.parametrize("named", [["--socket", "/x.sock"], []])
def test_a_daemon_named_by_its_socket_alone_is_asked_though_a_journal_is_readable_here(tmp_path, monkeypatch, named):
    # Root's history with $GOVERNOR_SOCKET set read the installed config's journal (another
    # daemon's: none, or empty) and said "nothing journaled in this period" (new-user check).
    import governor.cli.history as history_cli
    import governor.cli.history_input as history_input
    from governor.config.load import default_config

    monkeypatch.setenv("GOVERNOR_SOCKET", "/x.sock")
    monkeypatch.setattr(history_input, "journal_dir", lambda config, directory: (tmp_path, default_config()))
    asked = []
    monkeypatch.setattr(history_cli, "_asked", lambda socket, since, until: asked.append(socket) or [])
    done = CliRunner().invoke(main, ["history", "--since", "2000-01-01", *named])
    assert done.exit_code == 0 and asked == [None if not named else "/x.sock"], done.output
    assert done.output == "nothing journaled in this period\n"
    read = CliRunner().invoke(main, ["history", "--since", "2000-01-01", "--dir", str(tmp_path), *named])
    assert read.exit_code == 0 and len(asked) == 1, read.output  # --dir: read here, as before
    for also in (["--socket", "/run/governor/governor.sock"], ["--config", str(tmp_path / "g.toml")]):
        # The installed unit's socket, or a config named: its journal is read here, as before.
        (tmp_path / "g.toml").write_text('[groups.A]\nusers = ["root"]\n')
        again = CliRunner().invoke(main, ["history", "--since", "2000-01-01", *named, *also])
        assert again.exit_code == 0 and len(asked) == 1, (also, again.output)
    assert " ".join(read.output.split()) == f"nothing journaled in this period in {tmp_path}"


def test_lines_the_daemon_skipped_are_said_to_a_user_who_asked_it(daemon, tmp_path, monkeypatch):
    # A user who cannot read the journal asks the daemon: lines that are no entry were left out
    # of its reply without a word (the journal's reader names them, to root).
    import asyncio

    import governor.cli.client as client
    from governor.wire.protocol import HistoryRequest
    from governor.wire.visibility import Viewer

    HistoryWriter(daemon.history.writer.directory, HistoryRules, Clock(100.0)).write(
        [{**LAUNCH, "at": 1e9, "demand": [1]}, {"at": 1e9 + 1, "kind": ["end"]}, {**LAUNCH, "at": 1e9 + 2}])
    reply = asyncio.run(daemon.history.reply(HistoryRequest(0.0, None), Viewer(65534, False)))
    assert reply.skipped == 2 and [e["at"] for e in reply.entries] == [1e9 + 2]
    config = tmp_path / "governor.toml"
    config.write_text(f'[groups.A]\nusers = ["root"]\n[history]\ndirectory = "{tmp_path / "nowhere"}"\n')
    monkeypatch.setattr(client, "call", lambda *_, **__: reply)
    done = CliRunner().invoke(main, ["history", "--config", str(config), "--since", "2000-01-01", "--socket", "/x.sock"])
    assert done.exit_code == 0, done.output
    assert "the daemon skipped 2 lines of its journal that are no entry" in " ".join(done.output.split())


def test_a_journal_that_cannot_be_read_says_so_in_governors_words(tmp_path):
    done = CliRunner().invoke(main, ["history", "--dir", str(tmp_path / "none"), "--since", "1h"])
    assert done.exit_code == 1 and done.output.startswith("governor: error: cannot read the history"), done.output


@pytest.mark.parametrize(("options", "said"), [
    (["--since", "0001-01-01"], "'0001-01-01' is a date this host's clock cannot say"),
    (["--since", "10min", "--until", "1h"], "'10min' is not before --until '1h': the period would be empty"),
])
def test_a_period_out_of_range_or_inverted_is_said_so(tmp_path, options, said):
    # The first read "must be a span or a date"; the second was an empty period, silently.
    proposed = tmp_path / "p.toml"
    proposed.write_text('[groups."*"]\n')
    for command in ("history", "replay"):
        args = [command, *([str(proposed)] if command == "replay" else []), "--dir", str(tmp_path), *options]
        done = CliRunner().invoke(main, args)
        assert done.exit_code == 2 and said in " ".join(done.output.split()), done.output
