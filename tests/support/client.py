"""A fake daemon behind a real control socket, for the CLI's tests: :class:`FakeDaemon` (served
by the ``fake_daemon`` fixture of tests/unit/conftest.py) and :func:`governor`, the CLI in a
subprocess."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

from governor.errors import RequestError
from governor.wire.protocol import Peer
from support.status_sample import STATUS

REPO = Path(__file__).resolve().parents[2]
GOVERNOR = [sys.executable, "-c", "from governor.cli.entry import main; main()"]  # as the console script


class FakeDaemon:
    """Launch answers like the daemon (first the ``queued`` places, or raises ``refuse``);
    status returns ``status``."""

    def __init__(self):
        self.seen: list[tuple[object, Peer]] = []
        self.refuse: RequestError | None = None
        self.status: object = STATUS
        self.queued: list[dict] = []
        self.hold = False  # after the queued places, wait until the client leaves
        self.nested = False  # answer that the caller already is in task t1
        self.left = threading.Event()
        self.started: dict = {}  # what the started reply says besides the defaults below

    async def handle(self, request, peer: Peer) -> dict:
        self.seen.append((request, peer))
        if self.refuse is not None:
            raise self.refuse
        return {"status": self.status}

    async def stream(self, request, peer: Peer):
        self.seen.append((request, peer))
        if self.refuse is not None:
            raise self.refuse
        try:
            for place in self.queued:
                yield {"queued": place}
                await asyncio.sleep(0.05)
            if self.hold:
                await asyncio.Event().wait()
        finally:
            self.left.set()
        yield {"task": "t1", "group": request.group or "root", "cgroup": "/sys/fs/cgroup/g/t1",
               "limits": {"cpu.max": "100000 100000"}, **({"nested": True} if self.nested else {}), **self.started}


def governor(*args: str, socket_path: str) -> tuple[subprocess.CompletedProcess, int]:
    """Run the governor CLI in a subprocess with GOVERNOR_SOCKET set; returns (result, its pid)."""
    env = {**os.environ, "GOVERNOR_SOCKET": socket_path}
    with subprocess.Popen([*GOVERNOR, *args], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        stdout, stderr = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), proc.pid
