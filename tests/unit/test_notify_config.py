"""``[notify]`` (governor.config.notify_rules) and its document (governor.wire.notice): good tables
become exact rules, each bad one names its key, the example config documents every key, and the
document carries the task's fields as data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from governor.config import notify_rules as notify_module
from governor.config.load import DEFAULT_CONFIG, parse_config
from governor.config.notify_rules import EVENTS, NotifyRules
from governor.core.state import Task
from governor.errors import ConfigError
from governor.host.alerts import encode
from governor.wire.notice import SCHEMA, notice

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "governor.toml"


def rules(table: str) -> NotifyRules:
    return parse_config(f"{DEFAULT_CONFIG}\n[notify]\n{table}\n", "governor.toml").notify


def test_notify_is_off_unless_a_command_is_given():
    assert parse_config(DEFAULT_CONFIG, "governor.toml").notify == NotifyRules()
    assert NotifyRules().command == ()


def test_a_full_table_becomes_exact_rules():
    got = rules('command = "/usr/local/bin/tell --to \'ops team\'"\ntimeout = "30s"\nmax_running = 2\n'
                'queued_longer_than = "1h"\nevents = ["queued", "oom_kill"]\nuser = "notify"')
    assert got == NotifyRules(command=("/usr/local/bin/tell", "--to", "ops team"), timeout_s=30.0, max_running=2,
                              queued_longer_than_s=3600.0, events=("oom_kill", "queued"), user="notify")
    assert rules('command = ["/bin/mail", "$(not a shell)"]\ntimeout = 2.5').command == ("/bin/mail", "$(not a shell)")
    assert rules('command = "/bin/true"').timeout_s == 10.0


@pytest.mark.parametrize("table, key, words", [
    ("timeout = 5", "notify.command", "missing"),
    ('command = "mail root"', "notify.command", "absolute path"),
    ('command = "/bin/tell \'open"', "notify.command", "as a shell would"),
    ("command = 7", "notify.command", "a string or a list of strings"),
    ("command = []", "notify.command", "absolute path"),
    ('command = "/bin/true"\ntimeout = 0', "notify.timeout", "> 0"),
    ('command = "/bin/true"\ntimeout = "soon"', "notify.timeout", "time span"),
    ('command = "/bin/true"\nmax_running = 0', "notify.max_running", "1 to 64"),
    ('command = "/bin/true"\nmax_running = 1.5', "notify.max_running", "1 to 64"),
    ('command = "/bin/true"\nqueued_longer_than = -1', "notify.queued_longer_than", "negative"),
    ('command = "/bin/true"\nevents = []', "notify.events", "non-empty"),
    ('command = "/bin/true"\nevents = ["oom_kill", "reboot"]', "notify.events[1]", "one of"),
    ('command = "/bin/true"\nuser = ""', "notify.user", "user name"),
    ('command = "/bin/true"\nshell = true', "notify.shell", "unknown key"),
    # check-config showed a timeout of 1e308 s with a traceback (its milliseconds overflow)
    ('command = "/bin/true"\ntimeout = 1e308', "notify.timeout", "at most 30d"),
    ('command = "/bin/true"\nqueued_longer_than = "31d"', "notify.queued_longer_than", "at most 30d"),
    # a NUL reached exec (ValueError in the runner) or getpwnam (a traceback in check-config)
    ('command = ["/bin/tell", "a\\u0000b"]', "notify.command", "NUL"),
    ('command = "/bin/true"\nuser = "ops\\u0000"', "notify.user", "user name"),
])
def test_a_bad_table_names_its_key(table, key, words):
    with pytest.raises(ConfigError) as caught:
        rules(table)
    assert caught.value.key == key and words in str(caught.value), str(caught.value)
    assert "governor.toml" in str(caught.value)


def test_the_example_config_documents_every_key_and_its_commented_table_parses():
    text = EXAMPLE.read_text()
    for key in notify_module._KEYS:
        assert re.search(rf"^#\s+{key}:", text, re.MULTILINE), f"notify.{key} is not documented"
    block = text[text.index("# [notify]\n"):]
    block = re.split(r"^# \[(?!notify\])", block, maxsplit=1, flags=re.MULTILINE)[0]  # up to the next table
    uncommented = "\n".join(line.removeprefix("# ") for line in block.splitlines()
                            if re.match(r"# (\[notify\]|\w+ = )", line))
    assert rules(uncommented.removeprefix("[notify]\n")).events == ("oom_kill", "time_limit", "memory_held")


def test_the_document_carries_the_task_as_data_in_one_line_of_json():
    task = Task(id="7", group="physics", pid=4242, uid=1000, user="alice",
                command=("python3", "-c", "x = '\n$(rm -rf /)\x1b[2J'", "y" * 1000), demand={"memory": 2**20},
                started=100.0, name="train\x1b]0;owned\x07", time_limit=2.0)
    document = notice("time_limit", "task 7 (train) ended", at=102.5, host="node1", task=task,
                      details={"time_limit_s": 2.0, "wall_s": 2.5})
    line = encode(document)
    assert line.endswith(b"\n") and line.count(b"\n") == 1 and line.isascii()
    read = json.loads(line)
    assert read == document
    assert (read["schema"], read["kind"], read["time"], read["host"]) == (SCHEMA, "time_limit", 102.5, "node1")
    assert (read["group"], read["user"], read["uid"]) == ("physics", "alice", 1000)
    assert read["task"]["name"] == task.name and read["task"]["command"][2] == task.command[2]
    assert read["task"]["command_cut"] > 0  # a long command is cut as in every view
    assert read["details"] == {"time_limit_s": 2.0, "wall_s": 2.5}


def test_a_document_about_no_task_names_its_group_or_nothing():
    document = notice("gpu_drained", "GPU 1 is free", at=1.0, host="h", details={"gpu": 1})
    assert (document["task"], document["user"], document["uid"], document["group"]) == (None, None, None, None)
    assert set(EVENTS) >= {document["kind"]}
