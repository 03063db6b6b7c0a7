"""``governor ps``, ``governor stop`` and run's ``--name``, ``--time-limit`` and ``--summary``
against a ControlServer with a fake handler (support.client)."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
from click.testing import CliRunner
from support.client import FakeDaemon, governor
from support.task_rows import ENDED, ROWS

from governor.cli.main import main
from governor.cli.ps_view import process_tree
from governor.cli.summary import ended_line, summary_lines
from governor.errors import RequestError
from governor.wire.protocol import LaunchRequest, PsRequest, StopRequest
from governor.wire.ps_types import EndedRecord, TaskRow, decode_rows


class TasksDaemon(FakeDaemon):
    """Answers ps with ``rows`` / ``ended`` and stop with what it was asked, or ``refuse``."""

    def __init__(self):
        super().__init__()
        self.rows, self.ended = ROWS, ENDED

    async def handle(self, request, peer):
        self.seen.append((request, peer))
        if self.refuse is not None:
            raise self.refuse
        if isinstance(request, PsRequest):
            return {"ended": self.ended} if request.ended else {"tasks": self.rows}
        if isinstance(request, StopRequest):
            return {"stopped": list(request.tasks)}
        return {"status": self.status}


@pytest.fixture
def tasks_daemon(fake_daemon, monkeypatch):
    """The fake daemon's socket, answered by a TasksDaemon."""
    fake = TasksDaemon()
    fake.path = fake_daemon.path
    monkeypatch.setattr(fake_daemon, "handle", fake.handle)
    monkeypatch.setattr(fake_daemon, "stream", fake.stream)
    monkeypatch.setenv("GOVERNOR_SOCKET", fake.path)
    return fake


def test_ps_json_is_the_daemons_list_and_asks_for_the_callers_own(tasks_daemon):
    result = CliRunner().invoke(main, ["ps", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == ROWS
    assert tasks_daemon.seen[0][0] == PsRequest(all=False, ended=False)
    CliRunner().invoke(main, ["ps", "--all", "--ended", "--json"])
    assert tasks_daemon.seen[1][0] == PsRequest(all=True, ended=True)


def test_ps_shows_each_task_with_its_process_tree_at_80_columns(tasks_daemon, monkeypatch):
    monkeypatch.setattr("time.time", lambda: 1100.0)
    monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: True)
    result = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["ps", "--all"])
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    for text in ("build", "4100 make", "  4101 sh", "    4103 ld", "running", "queued 1",
                 "1.5/2/1.98", "4G/4G/812M", "left out at this"):  # age, user: left out, not cut
        assert text in result.output, text


def test_process_tree_indents_children_below_their_parent():
    assert process_tree(decode_rows(TaskRow, ROWS, "tasks")[0].processes) == ["4100 make", "  4101 sh", "    4103 ld", "  4102 cc1"]


def test_ps_ended_says_why_each_task_ended(tasks_daemon, monkeypatch):
    monkeypatch.setattr("time.time", lambda: 960.0)
    monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: True)
    result = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["ps", "--ended"])
    assert result.exit_code == 0, result.output
    for text in ("sleep", "time limit", "2.01s", "1.996s", "1.2M", "57s ago"):
        assert text in result.output, text


@pytest.mark.parametrize("value", [1e308, -1e308, -0.0])
def test_ps_ended_shows_hostile_times_short(tasks_daemon, monkeypatch, value):
    # A daemon's bug, or a hostile one: a time 1e308 s ago is a short cell, not 300 digits.
    tasks_daemon.ended = [{**ENDED[0], "ended": value, "started": value, "wall_s": value, "cpu_s": value}]
    for terminal in (False, True):  # piped, every cell whole; on a terminal, rich's table
        monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: terminal)
        result = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["ps", "--ended"])
        assert result.exit_code == 0, result.output
        assert not re.search(r"\d{13}", result.output) and "1.2M" in result.output, result.output


def test_ps_with_nothing_to_show_says_so(tasks_daemon, monkeypatch):
    tasks_daemon.ended = []
    assert CliRunner().invoke(main, ["ps", "--ended"]).output.split() == [  # piped: the header alone
        "id", "name", "group", "ended", "exit", "wall", "cpu", "peak", "why"]
    monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: True)
    assert CliRunner().invoke(main, ["ps", "--ended"]).output == "no tasks ended lately\n"


@pytest.mark.parametrize("form", [[], ["--all"], ["--ended"], ["--all", "--ended"]])
@pytest.mark.parametrize("terminal", [True, False])
def test_every_ps_form_works_on_an_empty_list(tasks_daemon, monkeypatch, form, terminal):
    # Issue 43, point 6: `ps --noheader` with nothing to list was a traceback (max() of an
    # empty sequence), exit 1; so were --all and --ended with it.
    from governor.cli.ps_plain import ENDED_FIELDS, task_fields

    tasks_daemon.rows, tasks_daemon.ended = [], []
    monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: terminal)
    fields = list(ENDED_FIELDS if "--ended" in form else task_fields())
    header = ["id", "name", "group", *(["user"] if "--all" in form else [])]
    for options, said in ((["--noheader"], ""), (["--json"], "[]\n"),
                          *((["--format", field], f"{field}\n") for field in fields),
                          (["--noheader", "--format", ",".join(fields)], ""),
                          (["--format", ",".join(fields)], "  ".join(fields) + "\n")):
        result = CliRunner().invoke(main, ["ps", *form, *options])
        assert (result.exit_code, result.output) == (0, said), (options, result.output)
    plain = CliRunner().invoke(main, ["ps", *form])
    assert plain.exit_code == 0, plain.output
    if terminal:
        assert plain.output.startswith("no tasks"), plain.output
    else:
        assert plain.output.split()[:len(header)] == header


def test_stop_sends_the_ids_and_says_what_it_stopped(tasks_daemon):
    result = CliRunner().invoke(main, ["stop", "7", "8"])
    assert result.exit_code == 0, result.output
    assert result.output == "stopped task 7\nstopped task 8\n"
    assert tasks_daemon.seen[0][0] == StopRequest(("7", "8"))


def test_a_refused_stop_is_one_line(tasks_daemon):
    tasks_daemon.refuse = RequestError("forbidden", "task 7 is bob's: only bob, root and admins may stop it")
    result = CliRunner().invoke(main, ["stop", "7"])
    assert result.exit_code == 77
    assert result.output == "governor: error: task 7 is bob's: only bob, root and admins may stop it\n"


def test_a_stop_whose_processes_outlive_the_kill_names_them_and_fails(tasks_daemon):
    message = ("not stopped: task 7: pids 4100, 4102 still running 5 s after SIGKILL; the daemon kills them again "
               "at its next check (stopped: 8)")
    tasks_daemon.refuse = RequestError("unavailable", message)
    result = CliRunner().invoke(main, ["stop", "7", "8"])
    assert (result.exit_code, result.output) == (69, f"governor: error: {message}\n")


def test_stop_needs_a_task():
    result = CliRunner().invoke(main, ["stop"])
    assert result.exit_code == 2 and "Missing argument 'TASK...'" in result.output


@pytest.mark.parametrize("fast", [True, False])
def test_run_sends_name_and_time_limit_on_both_paths(tasks_daemon, fast):
    # `--socket` before the options makes no difference to the fast parser; `-h`-free, so a
    # plain run; the click path is forced by a group option the fast parser leaves to click.
    args = ["run", "--name", "nightly", "--time-limit", "1h30m", "--", "true"]
    if fast:
        result, _ = governor(*args, socket_path=tasks_daemon.path)
        assert result.returncode == 0, result.stderr
    else:
        from unittest import mock

        with mock.patch("os.execvp", side_effect=SystemExit(0)):
            result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
    request = tasks_daemon.seen[0][0]
    assert isinstance(request, LaunchRequest)
    assert (request.name, request.time_limit) == ("nightly", 5400.0)


def test_a_bad_time_limit_is_a_usage_error():
    result = CliRunner().invoke(main, ["run", "--time-limit", "soon", "--", "true"])
    assert result.exit_code == 2
    assert "Invalid value for '--time-limit': expected a time span like 90s, 10m, 2h or 1h30m" in result.output


def test_summary_runs_the_command_as_a_governed_child_and_keeps_its_exit_code(tasks_daemon):
    tasks_daemon.ended = [{**ENDED[0], "id": "t1", "reason": "exit", "time_limit": None}]
    result, pid = governor("run", "--summary", "--", "sh", "-c", "echo ran; exit 3", socket_path=tasks_daemon.path)
    assert result.returncode == 3
    assert result.stdout == "ran\n"
    assert result.stderr.splitlines() == [
        "Finished with result: exit-code", "Main processes terminated with: code=exited/status=3",
        "Service runtime: 2.01s", "CPU time consumed: 1.996s", "CPU time throttled: 0.25s", "Memory peak: 1.2M"]
    launch = tasks_daemon.seen[0]
    assert launch[0].pid == launch[1].pid != pid  # the child asked for itself, not governor run's process


def test_summary_of_a_task_governor_ended_says_why_first_as_without_it(tasks_daemon):
    # An attacker's finding: --summary printed "Finished with result: timeout" and not the
    # line that says which limit ended it.
    tasks_daemon.ended = [{**ENDED[0], "id": "t1"}]
    result, _ = governor("run", "--summary", "--", "sh", "-c", "exit 3", socket_path=tasks_daemon.path)
    assert result.stderr.splitlines()[:2] == ["governor: task t1 ended: its time limit of 2s was reached",
                                              "Finished with result: timeout"]


def test_a_malformed_ended_record_is_named_and_the_summary_goes_on_without_it(tasks_daemon):
    # A daemon's bug, or a hostile one: one line naming the field, not a traceback.
    tasks_daemon.ended = [{**ENDED[0], "id": "t1", "reason": "exit", "wall_s": "soon"}]
    result, _ = governor("run", "--summary", "--", "sh", "-c", "exit 3", socket_path=tasks_daemon.path)
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        "governor: the daemon's ended record of task t1 has a malformed ended[0].wall_s: must be a number, got a string",
        "Finished with result: exit-code", "Main processes terminated with: code=exited/status=3",
        result.stderr.splitlines()[3],  # the runtime measured here
        "Task t1: no ended record (processes of it may still run); see governor ps --ended"]
    assert result.stderr.splitlines()[3].startswith("Service runtime: ")


@pytest.mark.parametrize("reason", ["exit", "stop", "time_limit", "oom_kill"])
@pytest.mark.parametrize("value", [1e308, -1e308, -0.0, 0, float("nan")])
def test_hostile_figures_in_an_ended_record_are_printed_not_raised(reason, value):
    figures = dict.fromkeys(("wall_s", "cpu_s", "throttled_s", "memory_peak", "time_limit"), value)
    record = decode_rows(EndedRecord, [{"id": "1", "reason": reason, **figures, "forks_refused": 2,
                                        "demand": {"pids": value, "memory": value}}], "ended")[0]
    lines = summary_lines(record, 0, 1.0, task="1")
    assert lines[0].startswith("Finished with result: ") and any(line.startswith("Forks refused: 2") for line in lines)
    assert ended_line(record, "1").startswith("governor: task 1 ")


def test_summary_of_a_task_ended_at_its_time_limit():
    lines = summary_lines(decode_rows(EndedRecord, ENDED, "ended")[0], signal.SIGKILL, 2.2, task="5")
    assert lines[:3] == ["Finished with result: timeout", "Main processes terminated with: code=killed/status=KILL",
                         "Service runtime: 2.01s"]


def test_summary_without_a_record_says_so():
    lines = summary_lines(None, 0, 1.5, task="9")
    assert lines == ["Finished with result: success", "Main processes terminated with: code=exited/status=0",
                     "Service runtime: 1.5s",
                     "Task 9: no ended record (processes of it may still run); see governor ps --ended"]


def test_a_summary_run_refused_by_the_daemon_prints_one_line_and_runs_nothing(tasks_daemon):
    tasks_daemon.refuse = RequestError("forbidden", "user x may not launch into group 'ops'")
    result, _ = governor("run", "--summary", "--", "sh", "-c", "echo ran", socket_path=tasks_daemon.path)
    assert result.returncode == 77 and result.stdout == ""  # as without --summary (cli/failures.py)
    assert result.stderr == ("governor: error: user x may not launch into group 'ops' "
                             "(ask an admin to add you to a [groups] entry)\n")
    assert os.environ.get("GOVERNOR_SOCKET")  # (set by the fixture for the CliRunner tests)


def test_a_summary_of_a_command_ended_by_a_real_time_signal():
    status = 34 + 6  # SIGRTMIN + 6: no name in signal.Signals
    assert summary_lines(None, status, 0.5, task=None)[:2] == [
        "Finished with result: signal", f"Main processes terminated with: code=killed/status={status}"]


def test_a_summary_inside_an_enclosing_task_has_no_record_to_wait_for():
    assert summary_lines(None, 0, 1.5, task=None) == [
        "Finished with result: success", "Main processes terminated with: code=exited/status=0",
        "Service runtime: 1.5s"]


def test_an_unknown_task_is_one_line_without_a_group_hint(tasks_daemon):
    tasks_daemon.refuse = RequestError("not_found", "no task 99 is running or queued")
    result = CliRunner().invoke(main, ["stop", "99"])
    assert (result.exit_code, result.output) == (2, "governor: error: no task 99 is running or queued\n")


def test_ps_cells_drop_only_a_whole_numbers_point_zero():
    from governor.cli.ps_view import triple

    row = TaskRow("1", guarantee={"cpu": 1.05, "memory": 2 << 30}, demand={"cpu": 2.0, "memory": 2 << 30},
                  usage={"cpu": 0.07, "memory": 812 << 20}, reserved={"memory": 2 << 30})
    assert (triple(row, "cpu", "guarantee"), triple(row, "memory", "reserved")) == ("1.05/2/0.07", "2G/2G/812M")


@pytest.mark.parametrize("columns", ["80", "200"])
@pytest.mark.parametrize("terminal", [True, False])
def test_ps_never_wraps_or_cuts_a_value(tasks_daemon, monkeypatch, columns, terminal):
    # Issue 33, point 6: at 80 columns and piped, "name," / "processes" and long names wrapped.
    monkeypatch.setattr("time.time", lambda: 1100.0)
    monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: terminal)
    result = CliRunner(env={"COLUMNS": columns}).invoke(main, ["ps", "--all"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    whole = ("simulation-with-a-rather-long-name", "1.5/2/1.98", "4G/4G/812M", "—/16G/—" if terminal else "-/16G/-")
    for value in whole:
        assert any(value in line for line in lines), (value, result.output)
    if terminal:
        assert max(map(len, lines)) <= int(columns)
        assert any("name, processes" in line for line in lines)
        return
    # Piped: one line per task, the same at any width, every field whole.
    assert [line.split()[:10] for line in lines] == [
        ["id", "name", "group", "user", "state", "age", "cpu", "memory", "pids", "reason"],
        ["7", "build", "physics", "alice", "running", "1m", "1.5/2/1.98", "4G/4G/812M", "-/-/-", "-"],
        ["8", "simulation-with-a-rather-long-name", "physics", "alice", "queued", "10s", "-/1/-", "-/16G/-",
         "-/-/-", "memory:"]]
    assert lines[2].endswith("waits for 12.0G to free (held by physics 16.0G, ops 12.0G)")


def test_ps_format_and_noheader_print_the_fields_asked_for(tasks_daemon, monkeypatch):
    monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: True)  # chosen fields are plain anyway
    result = CliRunner().invoke(main, ["ps", "--noheader", "--format", "id,state,position,memory"])
    assert result.exit_code == 0, result.output
    assert result.output == "7  running  -  4G/4G/812M\n8  queued   1  -/16G/-\n"
    result = CliRunner().invoke(main, ["ps", "--format", "id,nosuch"])
    assert result.exit_code == 2
    assert "unknown field 'nosuch'; ps fields: id, name" in result.output, result.output


def test_each_amount_is_a_named_format_field(tasks_daemon):
    # Issue 44, point 5: the packed 0.58/1/0.79 cell, split into fields a script can name.
    fields = "id,cpu.guarantee,cpu.cap,cpu.used,memory.reserved,memory.cap,memory.used"
    result = CliRunner().invoke(main, ["ps", "--noheader", "--format", fields])
    assert result.exit_code == 0, result.output
    assert [line.split() for line in result.output.splitlines()] == [
        ["7", "1.5", "2", "1.98", "4G", "4G", "812M"], ["8", "-", "1", "-", "-", "16G", "-"]]
    result = CliRunner().invoke(main, ["ps", "--format", "cpu.reserved"])  # cpu is guaranteed, not reserved
    assert result.exit_code == 2 and "cpu.guarantee, cpu.cap, cpu.used" in result.output, result.output


def test_the_named_amount_fields_come_from_the_resource_registry():
    from governor.cli.ps_plain import task_fields
    from governor.cli.ps_view import amount_columns
    from governor.config import resources

    known = task_fields()
    for name in amount_columns():  # every resource ps shows a column of, a new one too (pids)
        held = "guarantee" if resources.compressible(name) else "" if resources.count(name) else "reserved"
        assert {name, *([f"{name}.{held}"] if held else []), f"{name}.cap", f"{name}.used"} <= set(known), name
        assert not resources.count(name) or f"{name}.reserved" not in known, name  # a count is never held


def test_ps_u_and_group_ask_for_those_users_and_groups_and_show_whose(tasks_daemon, monkeypatch):
    monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: False)
    result = CliRunner().invoke(main, ["ps", "-u", "alice,bob", "--user", "1003", "--group", "physics"])
    assert result.exit_code == 0, result.output
    assert tasks_daemon.seen[0][0] == PsRequest(users=("alice", "bob", "1003"), groups=("physics",))
    assert result.output.split()[:4] == ["id", "name", "group", "user"]  # whose each task is


def test_ps_u_of_no_such_user_says_so_where_no_task_is_listed(tasks_daemon):
    # An attacker's finding: `ps -u nosuchuser` printed an empty table, as ps -u says "user name
    # does not exist". A removed user's ended tasks are still listed.
    tasks_daemon.rows = []
    result = CliRunner().invoke(main, ["ps", "-u", "root,no-such-user-here"])
    assert result.exit_code == 2 and "no user named 'no-such-user-here' on this host" in result.output, result.output
    assert CliRunner().invoke(main, ["ps", "-u", "root,4000000"]).exit_code == 0  # a uid is taken as given
    tasks_daemon.ended = ENDED
    assert CliRunner().invoke(main, ["ps", "--ended", "-u", "no-such-user-here"]).exit_code == 0


def test_ps_ended_shows_the_exit_code_or_the_signal(tasks_daemon, monkeypatch):
    # Issue 33, point 6: an exit 127 read "why: exited", its code only in --json.
    monkeypatch.setattr("time.time", lambda: 960.0)
    tasks_daemon.ended = [
        {**ENDED[0], "id": "5", "reason": "exit", "exit_status": {"code": "exited", "status": 127}},
        {**ENDED[0], "id": "6", "reason": "oom_kill", "exit_status": {"code": "killed", "signal": "KILL"}},
        {**ENDED[0], "id": "9", "reason": "exit", "exit_status": {"code": "dumped", "signal": "SEGV"}},
        {**ENDED[0], "id": "10", "exit_status": None}]
    piped = CliRunner().invoke(main, ["ps", "--ended", "--noheader", "--format", "id,exit,reason"]).output
    assert piped.splitlines() == ["5   127           exit", "6   SIGKILL       oom_kill", "9   SIGSEGV+core  exit",
                                  "10  -             time_limit"]
    monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: True)
    table = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["ps", "--ended"]).output
    assert "exit" in table.splitlines()[1].split()
    rows = [line.split() for line in table.splitlines() if line.split()[:1] in (["5"], ["6"], ["9"], ["10"])]
    exits = {"5": "127", "6": "SIGKILL", "9": "SIGSEGV+core", "10": "-"}
    assert len(rows) == 4 and all(exits[cells[0]] in cells[1:] for cells in rows), table
    everyone = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["ps", "--ended", "--all"]).output
    assert "why" in everyone.splitlines()[1].split() and "OOM kill" in everyone, everyone  # rich dropped it


@pytest.mark.parametrize("ended, row, said", [
    (False, 5, "tasks[0]: must be an object, got an integer"),
    (False, {"id": "1", "demand": [1]}, "tasks[0].demand: must be an object, got an array"),
    (False, {"id": "1", "processes": [1, 2]}, "tasks[0].processes[0]: must be an object, got an integer"),
    (True, {"id": "1", "ended": "yesterday"}, "ended[0].ended: must be a number, got a string"),
    (True, {"id": "1", "exit_status": "x"}, "ended[0].exit_status: must be an object, got a string")])
@pytest.mark.parametrize("terminal", [True, False])
def test_a_malformed_ps_row_is_one_line_naming_the_field(tasks_daemon, monkeypatch, ended, row, said, terminal):
    # Each was a traceback (AttributeError, TypeError) in the table or the plain columns: the
    # rows are typed now (governor.wire.ps_types), decoded before any view reads them.
    tasks_daemon.rows = tasks_daemon.ended = [row]
    monkeypatch.setattr("governor.cli.ps.on_terminal", lambda: terminal)
    result = CliRunner().invoke(main, ["ps", *(["--ended"] if ended else [])])
    assert (result.exit_code, result.output.count("\n")) == (1, 1), result.output
    assert f"the daemon's ps reply has a malformed {said}" in result.output
    assert CliRunner().invoke(main, ["ps", "--json", *(["--ended"] if ended else [])]).output == json.dumps([row]) + "\n"


@pytest.mark.parametrize("args", [["stop", "abc"], ["stop", "7", "abc"], ["explain", "abc"]])
def test_a_task_command_without_a_daemon_says_the_daemon_is_not_running(args, tmp_path):
    # Issue 44.5: an admin's `governor stop abc` with no daemon must hear that the daemon is not
    # running (exit 69), not that abc is no task id: the daemon is asked before any id is judged.
    result = CliRunner().invoke(main, [*args, "--socket", str(tmp_path / "no.sock")])
    assert result.exit_code == 69, result.output
    assert "daemon is not running" in result.output and "task id" not in result.output
