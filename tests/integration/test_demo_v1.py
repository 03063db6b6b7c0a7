"""``scripts/demo`` on this host's real cgroup v1: it runs governor's main job with sessions off,
then removes everything it made and prints nothing from the work it killed (issue 11, point 14),
also when it is interrupted (issue 21, point 3)."""

from __future__ import annotations

import glob
import signal
import subprocess
from pathlib import Path

import pytest
from test_daemon_v1 import _skip_reason

pytestmark = pytest.mark.kernel_v1
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _needs_v1():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)


def nothing_left(before: set[str]) -> None:
    assert set(glob.glob("/tmp/governor-demo.*")) == before
    assert not glob.glob("/sys/fs/cgroup/*/governor-demo") + glob.glob("/sys/fs/cgroup/*/*/*/governor-demo")
    burners = subprocess.run(["pgrep", "-f", "while True: pass"], capture_output=True, text=True).stdout.split()
    assert not burners, f"the demo left its work running: {burners}"


def test_the_demo_shows_two_groups_and_leaves_nothing_behind():
    before = set(glob.glob("/tmp/governor-demo.*"))
    result = subprocess.run([str(REPO / "scripts" / "demo")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "root" in result.stdout and "nobody" in result.stdout  # both groups in the status
    for noise in ("Terminated", "Killed", "Traceback"):
        assert noise not in result.stdout + result.stderr
    assert "session" not in result.stdout  # its daemon (whose log it shows) moved nothing it did not start
    nothing_left(before)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_demo_leaves_nothing_behind(how):
    before = set(glob.glob("/tmp/governor-demo.*"))
    demo = subprocess.Popen([str(REPO / "scripts" / "demo")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    for line in demo.stdout:
        if line.startswith("== governor run"):
            break  # the daemon serves and the burners are starting
    demo.send_signal(how)
    rest = demo.communicate(timeout=120)[0]
    assert demo.returncode == 128 + how, rest
    nothing_left(before)
