"""``governor install-systemd --uninstall``: take governor off a systemd host.

In order: the daemon stops (``systemctl disable --now governor``); the limits governor set on
users' logind slices (their login sessions) are reset through systemd; ``governor-tasks.service``
and ``governor.slice`` stop, which ends every task and every process of a session held in
governor's tree (systemd's SIGTERM, then SIGKILL) and removes their cgroups; the unit files and
the man pages install-systemd wrote go, and systemd reloads; the runtime directory (socket, task
records) goes. The config stays unless ``purge``. Under ``--root DIR`` (a staged tree, not this
host) only files are removed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import click

from governor.cli.systemd_files import CONFIG, MAN_DIR, SLICE, UNIT_DIR, UNITS, installed_man_pages

RUNTIME = "run/governor"
STATE = "run/governor/state"


def uninstall(root: Path, *, purge: bool, dry_run: bool, live: bool,
              run: Callable[[list[str]], subprocess.CompletedProcess] | None = None,
              cgroup_mount: Path = Path("/sys/fs/cgroup")) -> None:
    """Take governor off the host (``live``: systemd manages ``root``, which is ``/``) or
    off the staged tree ``root``; with ``dry_run``, only say what would be done.

    Raises:
        GovernorError: a file cannot be removed, or a systemctl step failed (the steps before
            it are done; running it again finishes the rest).
    """
    from governor.errors import GovernorError

    run = run or (lambda argv: subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False))
    units = [root / UNIT_DIR / name for name in UNITS]

    def step(what: str, argv: list[str] | None = None, *, must: bool = True) -> None:
        if dry_run:
            verb, _, rest = what.partition(" ")
            click.echo(f"# would {_PRESENT.get(verb, verb)} {rest}" + (f": {' '.join(argv)}" if argv else ""))
            return
        if argv is not None:
            done = run(argv)
            if done.returncode != 0 and must:
                raise GovernorError(f"{' '.join(argv)} failed: {(done.stderr or '').strip()}")
        click.echo(what)

    if live and units[0].exists():
        step("stopped the daemon (governor.service)", ["systemctl", "disable", "--now", "governor.service"])
    if live:
        for uid in _login_sessions(root / STATE):
            _release_slice(uid, cgroup_mount, step)
        step("stopped governor-tasks.service and governor.slice: every task and session process in governor's "
             "tree ended", ["systemctl", "stop", "governor-tasks.service", SLICE], must=False)
    for path in units:
        if path.exists():
            step(f"removed {path}")
            if not dry_run:
                _remove(path)
    man_pages = installed_man_pages(root / MAN_DIR)
    if man_pages:
        step(f"removed {len(man_pages)} man pages from {root / MAN_DIR} (governor*.1, governor.toml.5)")
        if not dry_run:
            for path in man_pages:
                _remove(path)
    if live:
        step("ran systemctl daemon-reload", ["systemctl", "daemon-reload"])
        step("cleared the units' failed state", ["systemctl", "reset-failed", *UNITS], must=False)
        runtime = root / RUNTIME
        for path in (runtime / "state", runtime / "governor.sock"):
            if path.exists() or path.is_symlink():
                step(f"removed {path}")
                if not dry_run:
                    _remove(path)
        for directory in (runtime / "daemons", runtime):  # another daemon's entries keep them
            if not dry_run and directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
    config = root / CONFIG
    if purge and config.exists():
        step(f"removed {config}")
        if not dry_run:
            _remove(config)
            if not any(config.parent.iterdir()):
                config.parent.rmdir()
    elif config.exists():
        click.echo(f"kept {config} (--purge removes it)")
    if live and not dry_run:
        left = cgroup_mount / SLICE
        if left.exists():
            raise GovernorError(f"{left} is still there: systemctl stop {SLICE} did not remove it")
        click.echo(f"nothing of governor is left in {cgroup_mount}")


# Each step says what it did; a dry run says what it would do.
_PRESENT = {"stopped": "stop", "removed": "remove", "ran": "run", "cleared": "clear", "reset": "reset"}


def _login_sessions(state: Path) -> list[int]:
    """The uids whose login sessions (logind slices) the daemon governed: its records there."""
    from governor.config.kinds import uid_of_login

    try:
        uids = [uid_of_login(p.stem) for p in state.glob("*.json")]
    except OSError:
        return []
    return sorted(uid for uid in uids if uid is not None)


def _release_slice(uid: int, mount: Path, step) -> None:
    from governor.cgroups.systemd import RESETS

    step(f"reset the limits on user-{uid}.slice (a login session governor governed)",
         ["systemctl", "set-property", "--runtime", "--", f"user-{uid}.slice",
          *(f"{name}={value}" for name, value in RESETS.items())], must=False)


def _remove(path: Path) -> None:
    from governor.errors import GovernorError

    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except OSError as error:
        raise GovernorError(f"{path}: cannot remove: {error.strerror}") from error
