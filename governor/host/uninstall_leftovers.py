"""What governor leaves on a host besides its unit files, found for ``install-systemd --uninstall``
(:mod:`governor.cli.uninstall_systemd`): every function looks below ``root`` (``/`` on the host, a
fake tree in tests) and removes nothing.

* Drop-ins of governor's own units (``governor.service``, ``governor-tasks.service``,
  ``governor.slice``): the ``<unit>.d`` directories in ``/etc/systemd/system`` (an admin's, e.g.
  an old ``governor.service.d/metrics.conf``) and where ``systemctl set-property`` writes
  (``/run/systemd/system.control``, ``/etc/systemd/system.control``, and
  ``/run/systemd/transient`` for a transient unit): the units are gone, so are these.
* Drop-ins governor's resets left on logind's user slices: ``user-UID.slice.d/50-<Property>.conf``
  in the runtime directories, for a property governor sets (:data:`~governor.cgroups.systemd.RESETS`),
  that holds systemd's default, as a reset writes it (``MemoryLow=0``, ``MemoryMax=infinity``,
  ``CPUQuota=``): it sets nothing. One holding a value (an admin's own ``set-property``) stays.
* ``/run/governor``: the daemons' registry entries whose cgroup root is gone, and the lock files
  no process holds (:func:`~governor.cgroups.locks.held`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from governor.cgroups.locks import held
from governor.cgroups.systemd import RESET_WRITTEN, RESETS, in_dropin_order
from governor.host.systemd_files import OWN_UNITS, UNIT_DIR

__all__ = ["RUNTIME_CONTROL", "idle_locks", "login_slice_resets", "own_dropins", "slice_resets", "stale_entries"]

# Where systemctl set-property writes (--runtime, persistent) and systemd keeps transient units'.
RUNTIME_CONTROL = ("run/systemd/system.control", "run/systemd/transient")
CONTROL = (*RUNTIME_CONTROL, "etc/systemd/system.control")
_LOGIN_SLICE = re.compile(r"user-\d+\.slice\.d")
_ASSIGNMENT = re.compile(r"^\s*(\w+)=(.*?)\s*$")


def slice_resets() -> list[str]:
    """``systemctl set-property`` assignments (``Name=value``) that reset every property governor
    sets on a slice to systemd's default, in the order a drop-in must be written in."""
    return in_dropin_order([f"{name}={value}" for name, value in RESETS.items()])


def own_dropins(root: Path) -> list[Path]:
    """The drop-in directories of governor's own units below ``root``, sorted."""
    return sorted(path for place in (UNIT_DIR, *CONTROL) for unit in OWN_UNITS
                  if (path := root / place / f"{unit}.d").is_dir())


def login_slice_resets(root: Path) -> list[Path]:
    """The drop-ins on logind's user slices below ``root`` that a reset of governor's left: named
    for a property governor sets, holding only that property at systemd's default. Sorted."""
    found = []
    for place in RUNTIME_CONTROL:
        directory = root / place
        if not directory.is_dir():
            continue
        for slice_dir in directory.iterdir():
            if not _LOGIN_SLICE.fullmatch(slice_dir.name) or not slice_dir.is_dir():
                continue
            for name, default in RESET_WRITTEN.items():
                path = slice_dir / f"50-{name}.conf"
                if path.is_file() and _assignments(path) == [(name, default)]:
                    found.append(path)
    return sorted(found)


def stale_entries(daemons: Path) -> list[Path]:
    """The registry entries (``root-*.json``) in ``daemons`` whose daemon's cgroup root is gone
    (or which are not entries): nothing of theirs is left to protect. Sorted."""
    stale = []
    for path in sorted(daemons.glob("root-*.json")):
        try:
            root = json.loads(path.read_text()).get("root")
        except (OSError, ValueError, AttributeError):
            root = None
        if not isinstance(root, str) or not Path(root).is_dir():
            stale.append(path)
    return stale


def idle_locks(*directories: Path) -> tuple[list[Path], list[Path]]:
    """The lock files in ``directories`` (``locks``; ``daemons``, where a governor before issue
    31.7 kept ``sessions.lock``): (those no process holds, those a running daemon holds)."""
    idle, busy = [], []
    for path in sorted(path for directory in directories for path in directory.glob("*.lock")):
        (busy if held(path) else idle).append(path)
    return idle, busy


def _assignments(path: Path) -> list[tuple[str, str]]:
    """The ``Name=value`` lines of a drop-in (comments and section headers skipped)."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return [(m[1], m[2]) for line in lines if not line.lstrip().startswith(("#", ";", "["))
            and (m := _ASSIGNMENT.match(line))]
