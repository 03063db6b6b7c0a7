"""What ``governor run -- true`` is set beside in scripts/bench (issue 46): other programs that
start a command in a cgroup, timed in the same rounds, so that the bench shows ratios (wall
times move with the host's load; their ratios much less).

  cgexec        libcgroup's (cgroup-tools): the same write of its own pid to ``cgroup.procs``,
                from a C program, into ``cpu,memory:<a cgroup of the bench's own>`` (made for
                it, removed at the end), as the issue measured it
  systemd-run   ``systemd-run --scope --quiet``: systemd makes a transient scope unit and moves
                the command there (only where systemd is PID 1: the systemd VM)

A peer missing here is left out of the table, never faked.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The controllers cgexec is given: the issue's `cgexec -g cpu,memory:x`.
CGEXEC_CONTROLLERS = ("cpu", "memory")


@contextlib.contextmanager
def peer_commands(command: list[str]) -> Iterator[dict[str, list[str]]]:
    """Each peer this host has → its command line running ``command``; cgexec's cgroup is made
    under a root of the bench's own for the while, in each hierarchy of
    :data:`CGEXEC_CONTROLLERS` (v1) or in the v2 tree, and removed after."""
    peers: dict[str, list[str]] = {}
    made: list[Path] = []
    try:
        if shutil.which("cgexec"):
            name = f"governor-peer-{uuid.uuid4().hex[:8]}"
            for directory in _cgexec_dirs(name):
                directory.mkdir()
                made.append(directory)
            peers["cgexec"] = ["cgexec", "-g", f"{','.join(CGEXEC_CONTROLLERS)}:{name}", *command]
        if shutil.which("systemd-run") and Path("/run/systemd/system").is_dir():  # systemd is PID 1
            peers["systemd-run"] = ["systemd-run", "--scope", "--quiet", "--collect", *command]
        yield peers
    finally:
        for directory in reversed(made):
            with contextlib.suppress(FileNotFoundError):
                directory.rmdir()


def _cgexec_dirs(name: str) -> list[Path]:
    """Where cgexec's cgroup ``name`` must exist: the v2 tree's, or each v1 hierarchy of
    :data:`CGEXEC_CONTROLLERS` once (co-mounted controllers share one)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / name]
    return sorted({(CGROUP_ROOT / controller).resolve() / name for controller in CGEXEC_CONTROLLERS})
