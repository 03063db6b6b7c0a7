"""``governor replay`` at its edges (issue 42's attacker): membership changed by the proposed
config, a journal line of the wrong shape, a task of zero length, refusals only, and names a
terminal would act on."""

import json

import pytest
from click.testing import CliRunner

from governor.cli.main import main
from governor.config.load import parse_config
from governor.daemon.replay import replay, timeline
from governor.daemon.replay_input import Job, Recorded
from governor.daemon.replay_report import compare

GIB = 1 << 30
CAPACITY = {"cpu": 2.0, "memory": 8.0 * GIB}
RECORDED = """
[capacity]
cpu = 2
memory = "8G"
[groups.lab]
users = ["u1", "u2"]
"""


def _job(task, user, uid, *, group="lab", named=None, session=False, start=0.0, end=100.0):
    return Job(task, group, user, uid, {"cpu": 0.5, "memory": GIB}, session, start, start, end, named_group=named)


def _period(*jobs, refusals=()):
    return Recorded(0.0, 200.0, list(jobs), list(refusals), dict(CAPACITY), ((0.0, dict(CAPACITY)),))


def _report(period, proposed_text, unix_groups=None):
    recorded_config, proposed = parse_config(RECORDED, "now.toml"), parse_config(proposed_text, "p.toml")
    return compare(period, timeline(period, recorded_config, CAPACITY), replay(period, proposed, CAPACITY, unix_groups),
                   proposed)


def test_a_user_moved_to_another_group_runs_there_in_the_replay():
    # Before, a task kept its recorded group: the proposed side was the recorded one.
    proposed = RECORDED.replace('users = ["u1", "u2"]', 'users = ["u1"]') + '[groups.solo]\nusers = ["u2"]\n'
    report = _report(_period(_job("1", "u1", 1001), _job("2", "u2", 1002)), proposed)
    assert report["groups"]["lab"]["recorded"]["tasks"] == 2 and report["groups"]["lab"]["proposed"]["tasks"] == 1
    assert report["groups"]["solo"]["proposed"]["tasks"] == 1 and report["groups"]["solo"]["recorded"]["tasks"] == 0
    assert report["groups"]["solo"]["proposed"]["memory_share"] == pytest.approx(0.125 * 100 / 200)


def test_everyone_in_a_group_of_their_own_splits_a_shared_group():
    proposed = '[capacity]\ncpu = 2\nmemory = "8G"\n[groups."*"]\n'
    report = _report(_period(_job("1", "u1", 1001), _job("2", "u2", 1002)), proposed)
    assert {name: sides["proposed"]["tasks"] for name, sides in report["groups"].items()} == {"lab": 0, "u1": 1, "u2": 1}


def test_a_launch_that_named_a_group_its_user_has_left_is_refused_and_unix_groups_count():
    proposed = RECORDED.replace('users = ["u1", "u2"]', 'users = ["u1"]\nunix_groups = ["physics"]')
    period = _period(_job("1", "u2", 1002, named=True), _job("2", "u2", 1002, named=False, start=1.0))
    run = replay(period, parse_config(proposed, "p.toml"), CAPACITY)
    assert run.refused == {"1": "forbidden", "2": "forbidden"}  # u2 is in no group of it
    run = replay(period, parse_config(proposed, "p.toml"), CAPACITY, {"u2": ("physics",)})
    assert run.refused == {} and set(run.starts) == {"1", "2"}


def test_a_session_follows_its_user_and_one_no_group_governs_is_left_out():
    proposed = RECORDED.replace('users = ["u1", "u2"]', 'users = ["u1"]') + '[groups.solo]\nusers = ["u2"]\n'
    period = _period(_job("s1", "u2", 1002, session=True), _job("s2", "u3", 1003, session=True))
    run = replay(period, parse_config(proposed, "p.toml"), CAPACITY)
    assert run.groups == {"s1": "solo"} and set(run.memory_s) == {"solo"}


def test_a_task_that_ended_as_it_started_holds_nothing_on_either_side():
    # Its end sorted before its start at one instant: on the recorded side it held its share
    # to the period's end, and the two sides differed under one config.
    period = _period(_job("1", "u1", 1001, start=10.0, end=10.0))
    report = _report(period, RECORDED)
    lab = report["groups"]["lab"]
    assert lab["recorded"]["memory_share"] == lab["proposed"]["memory_share"] == 0.0
    assert lab["recorded"]["tasks"] == lab["proposed"]["tasks"] == 1


def test_refusals_alone_are_counted_in_the_groups_table_and_the_heading():
    refusal = {"at": 5.0, "kind": "refusal", "task": None, "uid": 1001, "user": "u1", "group": "lab",
               "demand": {"memory": 100 * GIB}, "code": "exceeds_capacity"}
    report = _report(_period(refusals=[refusal] * 3), RECORDED)
    assert report["refusals"] == 3 and report["groups"]["lab"]["proposed"]["refused"] == 3
    assert report["users"]["u1"]["recorded"]["refused"] == 3


def test_a_refusal_of_a_group_not_the_askers_counts_for_the_asker_alone():
    # An attacker's check: nobody's `governor run --group lab` (forbidden), 60 a minute, was
    # counted as refusals of lab, a group nobody is not in; and a group no config has was
    # listed.
    refused = [{"at": 5.0, "kind": "refusal", "task": None, "uid": 65534, "user": "nobody", "group": group,
                "demand": {}, "code": code} for group, code in (("lab", "forbidden"), ("nosuch", "not_found"))]
    report = _report(_period(refusals=refused), RECORDED)
    assert report["refusals"] == 2 and report["users"]["nobody"]["recorded"]["refused"] == 2
    assert report["groups"] == {}  # neither lab nor nosuch had a refusal of its own


def _journal(directory, lines):
    directory.mkdir(parents=True)
    (directory / "history-000000000000001.jsonl").write_bytes(b"".join(lines))


def _line(entry):
    return json.dumps(entry).encode() + b"\n"


DAEMON = {"at": 1e9, "kind": "daemon", "reason": "start", "capacity": CAPACITY, "config": "t.toml"}
LAUNCH = {"kind": "launch", "task": "1", "group": "lab", "user": "u1", "uid": 1001,
          "demand": {"cpu": 0.5, "memory": GIB}}


@pytest.mark.parametrize("bad", [
    {**LAUNCH, "task": None}, {**LAUNCH, "group": None}, {**LAUNCH, "demand": [1]}, {**LAUNCH, "demand": {"cpu": float("inf")}},
    {**LAUNCH, "demand": {"cpu": "lots"}}, {**LAUNCH, "uid": "abc"}, {**LAUNCH, "task": [1]},
    {**LAUNCH, "demand": {"cpu": -1}}, {**LAUNCH, "kind": "session", "memory_peak": 1e308},
    {**DAEMON, "capacity": [1]}, {**DAEMON, "capacity": None}, {**DAEMON, "capacity": {"gpu": 1e7}},
])
def test_a_journal_line_of_the_wrong_shape_is_skipped_and_said_not_a_traceback(tmp_path, bad):
    # Each of these ended replay in a traceback (KeyError, AttributeError, ValueError…), or
    # built a list of ten million GPUs, or printed a 300-digit percentage.
    directory = tmp_path / "h"
    good = [{**LAUNCH, "at": 1e9 + 1, "task": "7"}, {**LAUNCH, "kind": "start", "at": 1e9 + 2, "task": "7"}]
    _journal(directory, [_line(DAEMON), _line({**bad, "at": 1e9 + 1}), *map(_line, good)])
    proposed = tmp_path / "p.toml"
    proposed.write_text(RECORDED)
    done = CliRunner().invoke(main, ["replay", str(proposed), "--dir", str(directory), "--since", "2001-01-01",
                                     "--until", "2100-01-01", "--json"])
    assert done.exit_code == 0 and "Traceback" not in done.output, done.output
    assert "skipped 1 line of the journal that is no entry" in done.stderr and "line 2:" in done.stderr
    assert json.loads(done.stdout)["groups"]["lab"]["recorded"]["tasks"] == 1


def _replay_of(tmp_path, launch, runner=None):
    """``governor replay`` (its tables) of a journal of one task, ``launch`` started."""
    directory = tmp_path / "h"
    _journal(directory, [_line(DAEMON), _line({**launch, "at": 1e9 + 1}), _line({**launch, "kind": "start", "at": 1e9 + 2})])
    proposed = tmp_path / "p.toml"
    proposed.write_text(RECORDED)
    return (runner or CliRunner()).invoke(main, ["replay", str(proposed), "--dir", str(directory),
                                                 "--since", "2001-01-01", "--until", "2100-01-01"])


def test_names_a_terminal_acts_on_reach_replays_table_as_text(tmp_path):
    odd = {**LAUNCH, "group": "\x1b[2Jbio", "user": "\x1b]0;x\x07"}
    done = _replay_of(tmp_path, odd, CliRunner(env={"COLUMNS": "200"}))
    assert done.exit_code == 0, done.output
    assert "\x1b" not in done.output and "\x07" not in done.output and "?[2Jbio" in done.output


def test_simulate_refuses_a_name_a_terminal_acts_on(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text('[capacity]\ncpu = 4\n[groups."\\u001b[2Jbio"]\ntask = { cpu = 1 }\n')
    done = CliRunner().invoke(main, ["simulate", str(scenario)])
    assert done.exit_code == 2 and "\x1b" not in done.output and "must be printable" in done.output


def test_replay_piped_shows_every_name_and_figure_whole(tmp_path):
    # Piped at 80 columns (a log, a file) the tables cut their cells: "physi…  recor…".
    # (No $COLUMNS: pytest-xdist's workers have COLUMNS=80, and a width asked for is kept.)
    done = _replay_of(tmp_path, {**LAUNCH, "group": "lab", "user": "a-rather-long-user-name"},
                      CliRunner(env={"COLUMNS": None}))
    assert done.exit_code == 0, done.output
    assert "…" not in done.output and "a-rather-long-user-name" in done.output, done.output
    assert "recorded" in done.output and "proposed" in done.output and "memory share" in done.output


@pytest.mark.parametrize(("since", "words"), [
    ("99999999d", "reaches back before 1970"),  # replay's heading read "-271764-03-23 … to …"
    ("9999-12-31", "is not before now"),  # a period ending before it began, with no --until
])
@pytest.mark.parametrize("command", [["history"], ["replay"]])
def test_a_since_past_1970_or_after_now_is_refused_naming_it(tmp_path, since, words, command):
    (tmp_path / "proposed.toml").write_text('[groups."*"]\n')
    proposed = [str(tmp_path / "proposed.toml")] if command == ["replay"] else []
    done = CliRunner().invoke(main, [*command, *proposed, "--dir", str(tmp_path), "--since", since])
    assert done.exit_code == 2 and f"Invalid value for --since: '{since}' {words}" in done.output, done.output


def test_the_heading_counts_one_task_as_one(tmp_path):
    done = _replay_of(tmp_path, LAUNCH)
    assert done.exit_code == 0 and "replay of 1 task, " in done.output, done.output  # not "1 tasks"
