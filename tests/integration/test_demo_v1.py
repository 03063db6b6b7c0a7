"""``scripts/demo`` on this host's real cgroup v1: it runs governor's main job, then removes
everything it made and prints nothing from the work it killed (issue 11, point 14)."""

from __future__ import annotations

import glob
import subprocess
from pathlib import Path

import pytest
from test_daemon_v1 import _skip_reason

pytestmark = pytest.mark.kernel_v1
REPO = Path(__file__).resolve().parents[2]


def test_the_demo_shows_two_groups_and_leaves_nothing_behind():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    before = set(glob.glob("/tmp/governor-demo.*"))
    result = subprocess.run([str(REPO / "scripts" / "demo")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "root" in result.stdout and "nobody" in result.stdout  # both groups in the status
    for noise in ("Terminated", "Killed", "Traceback"):
        assert noise not in result.stdout + result.stderr
    assert set(glob.glob("/tmp/governor-demo.*")) == before
    assert not glob.glob("/sys/fs/cgroup/*/governor-demo") + glob.glob("/sys/fs/cgroup/*/*/*/governor-demo")
    burners = subprocess.run(["pgrep", "-f", "while True: pass"], capture_output=True, text=True).stdout.split()
    assert not burners, f"the demo left its work running: {burners}"
