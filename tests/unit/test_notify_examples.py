"""The two ``[notify]`` commands configs/notify/ ships, fed a real document, with ``who``,
``write`` and ``sendmail`` stood in for on PATH: what reaches a terminal has no control
character, the mail goes to the user and the admin, and the task's words stay out of headers."""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
from pathlib import Path

from governor.core.state import Task
from governor.host.alerts import encode
from governor.wire.notice import notice

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "notify"
TASK = Task(id="7", group="physics", pid=1, uid=1000, user="alice", command=("python3", "x\x1b[2J.py"),
            demand={"memory": 2**26}, started=0.0, name="evil\x1b]0;owned\x07", time_limit=None)


def _run(example: str, tmp_path: Path, tools: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run an example with ``tools`` (name → shell script body) first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    document = notice("oom_kill", f"task 7 ({TASK.name}) ended: OOM-killed at its memory cap 64.0M", at=1.0,
                      host="node1", task=TASK, details={"memory_cap_bytes": 2**26})
    return subprocess.run([sys.executable, str(EXAMPLES / example), *args], input=encode(document),
                          capture_output=True, timeout=30, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})


def test_write_to_terminals_writes_a_clean_line_to_each_of_the_users_terminals(tmp_path):
    out = tmp_path / "written"
    result = _run("write-to-terminals", tmp_path, {
        "who": "echo 'alice    pts/1  2026-11-27 10:00'; echo 'bob pts/2 x'; echo 'alice pts/3 y'",
        "write": f'echo "$@" >> {out}; cat >> {out}'})
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert lines[0::2] == ["alice pts/1", "alice pts/3"]
    assert lines[1] == lines[3] == "governor on node1: task 7 (evil?]0;owned?) ended: OOM-killed at its memory cap 64.0M"


def test_mail_goes_to_the_user_and_the_admin_with_the_task_kept_out_of_the_headers(tmp_path):
    out = tmp_path / "mail"
    result = _run("mail", tmp_path, {"sendmail": f'echo "$@" > {out}.args; cat > {out}'}, "ops@example.org")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "mail.args").read_text().split() == ["-t", "-oi"]
    sent = email.message_from_bytes(out.read_bytes())
    assert sent["To"] == "alice, ops@example.org"
    assert sent["Subject"] == "governor on node1: oom_kill task 7"
    body = sent.get_payload(decode=True).decode()
    assert json.loads(body.split("\n\n", 1)[1])["task"]["name"] == TASK.name
