"""``governor run`` whose child is killed before it could say which task it started: the
user is told so, not left with an exit status of 137 alone."""

import os
import signal

import pytest

from governor.cli import summary
from governor.wire.launch_types import LaunchRequest


def test_a_child_killed_before_the_command_started_is_said_so(monkeypatch, capfd):
    # A --time-limit of 1e-7 s ended the task before its exec: exit 137 and not a word (attacker check).
    monkeypatch.setattr(summary, "_child", lambda *args: os.kill(os.getpid(), signal.SIGKILL))
    request = LaunchRequest(pid=0, group=None, demand={}, command=("true",))
    with pytest.raises(SystemExit) as left:
        summary.run_with_summary("/nonexistent.sock", request, ("true",), summary=False)
    assert left.value.code == 137
    assert capfd.readouterr().err == ("governor: killed by SIGKILL before the command started (governor ps --ended "
                                      "says why, if governor ended its task)\n")
