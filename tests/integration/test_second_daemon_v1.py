"""A second daemon started by hand beside the host's (stranger check, 2026-12-03): given a
``--state-dir`` and a config named relative to its working directory, it keeps its history
journal in that state directory (it wrote into the host's, ``/var/lib/governor/history``, both
appending to one file and either one's pruning removing the other's), and names its config
in full wherever it shows it."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from daemon_harness import GOVERNOR
from support.waits import wait_until

from governor.cli.client import call
from governor.config.history_rules import DEFAULT_DIRECTORY
from governor.errors import GovernorError
from governor.host.history_store import journal_files
from governor.wire.request_types import StatusRequest

pytestmark = pytest.mark.kernel_v1


def _entries(directory: Path) -> list[dict]:
    return [json.loads(line) for path in journal_files(directory) for line in path.read_text().splitlines()]


def test_a_daemon_given_a_state_dir_keeps_its_journal_there_and_names_its_config_in_full(tmp_path):
    state, socket, config = tmp_path / "own state", str(tmp_path / "g.sock"), tmp_path / "g.toml"
    config.write_text('[groups.R]\nusers = ["root"]\n[sessions]\nenabled = false\n[foreign]\ndetect = false\n')
    proc = subprocess.Popen([GOVERNOR, "daemon", "--config", "g.toml", "--state-dir", str(state), "--socket", socket,
                             "--cgroup-root", f"governor-test-{uuid.uuid4().hex[:8]}"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def status() -> dict | None:
            assert proc.poll() is None, proc.communicate()[1]
            with contextlib.suppress(GovernorError):
                return call(socket, StatusRequest(), timeout=20).status
            return None
        wait_until(status, "the daemon to answer status", timeout=60)
        assert status()["daemon"]["config"] == str(config)  # not "g.toml": whose working directory?
        run = subprocess.run([GOVERNOR, "run", "--socket", socket, "--cpus", "0.1", "--memory", "32M", "--", "true"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        wait_until(lambda: any(e["kind"] == "end" for e in _entries(state / "history")),
                   "the task's end in the journal under --state-dir", timeout=60)
        assert [e for e in _entries(state / "history") if e["kind"] == "daemon"][0]["config"] == str(config)
        assert not [e for e in _entries(Path(DEFAULT_DIRECTORY)) if e.get("config") == str(config)]  # not the host's
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
