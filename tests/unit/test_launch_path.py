"""`scripts/launch-path` (issue 45): a launch's calls, as its profile hook notes them, are split
at the first cap write and at the start reply. Nothing here starts a daemon."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    loader = importlib.machinery.SourceFileLoader("launch_path_script", str(REPO / "scripts" / "launch-path"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("launch_path_script", loader))
    loader.exec_module(module)
    return module


def _call(when: float, file: str, wrote: str = "") -> list:
    return [when, str(REPO / file), "f", wrote]


def test_the_calls_split_at_the_first_cap_write_and_the_start_reply():
    calls = [_call(0, "governor/daemon/observation.py"),  # before the request: not the launch's
             _call(1, "governor/wire/server.py"), _call(2, "governor/daemon/requests.py"),
             _call(3, "cgroups/files.py", "/sys/fs/cgroup/cpu/r/A/task-1/cpu.cfs_period_us"),
             _call(4, "cgroups/files.py", "/sys/fs/cgroup/cpu/r/A/task-1/cpu.cfs_quota_us"),
             _call(5, "governor/core/drf.py"),
             _call(6, "cgroups/files.py", "/sys/fs/cgroup/cpu/r/A/task-1/cgroup.procs"),
             _call(7, "governor/daemon/starts.py"), _call(8, "governor/wire/server.py"),
             _call(9, "governor/daemon/exits.py"), _call(10, "governor/daemon/requests.py")]
    assert _script()._phases(calls) == {
        "request to the first cap write": ["cgroups/files.py", "governor/daemon/requests.py",
                                           "governor/wire/server.py"],
        "then through the start reply": ["governor/core/drf.py", "governor/daemon/starts.py"],
        "its exit adds": ["governor/daemon/exits.py"]}
