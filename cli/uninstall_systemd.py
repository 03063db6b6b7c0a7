"""``governor install-systemd --uninstall``: take governor off a systemd host.

In order: the daemon stops (``systemctl disable --now governor``); the limits governor set on
users' logind slices (their login sessions) are reset through systemd; ``governor-tasks.service``
and ``governor.slice`` stop, which ends every task and every process of a session held in
governor's tree (systemd's SIGTERM, then SIGKILL) and removes their cgroups; the unit files, their
drop-ins (an admin's in ``/etc``, the ``set-property`` ones in ``/run/systemd/system.control``),
the drop-ins governor's resets left on users' slices, and the man pages install-systemd wrote go,
and systemd reloads; the runtime directory (socket, task records, the registry entries and locks
of daemons that are gone: :mod:`governor.host.uninstall_leftovers`) goes. Kept, and said so: the
config, a state directory outside ``/run/governor`` and the history journal (``[history]
directory``, by default in ``/var/lib/governor``, the unit's ``StateDirectory=``, which goes
with it when nothing else is left there), unless ``purge``; a lock a running
daemon (not the unit's) holds. Under ``--root DIR`` (a staged tree, not this host) only files are
removed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import click

from governor.host import uninstall_leftovers as leftovers
from governor.host.systemd_files import CONFIG, MAN_DIR, SLICE, UNIT_DIR, UNITS, installed_man_pages

RUNTIME = "run/governor"
STATE_DIRECTORY = "var/lib/governor"  # governor.service's StateDirectory=


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

    def remove(path: Path, why: str = "") -> None:
        step(f"removed {path}{why}")
        if not dry_run:
            _remove(path)

    config = root / CONFIG
    state = root / _state_dir(config).lstrip("/")
    history = root / _history_dir(config).lstrip("/")
    if live and units[0].exists():
        step("stopped the daemon (governor.service)", ["systemctl", "disable", "--now", "governor.service"])
    if live:
        for uid in _login_sessions(state):
            _release_slice(uid, cgroup_mount, step)
        step("stopped governor-tasks.service and governor.slice: every task and session process in governor's "
             "tree ended", ["systemctl", "stop", "governor-tasks.service", SLICE], must=False)
    for path in units:
        if path.exists():
            remove(path)
    for path in leftovers.own_dropins(root):
        remove(path, " (drop-ins of governor's units)")
    for path in leftovers.login_slice_resets(root):
        remove(path, " (a reset governor left on a user's slice)")
        if not dry_run and not any(path.parent.iterdir()):
            path.parent.rmdir()
    man_pages = installed_man_pages(root / MAN_DIR)
    if man_pages:
        step(f"removed {len(man_pages)} man pages from {root / MAN_DIR} (governor*.1, governor.toml.5)")
        if not dry_run:
            for path in man_pages:
                _remove(path)
    if live:
        step("ran systemctl daemon-reload", ["systemctl", "daemon-reload"])
        step("cleared the units' failed state", ["systemctl", "reset-failed", *UNITS], must=False)
        _tidy_runtime(root / RUNTIME, state, purge=purge, dry_run=dry_run, remove=remove)
    _tidy_history(history, root / STATE_DIRECTORY, purge=purge, dry_run=dry_run, remove=remove)
    if purge and config.exists():
        remove(config)
        if not dry_run and not any(config.parent.iterdir()):
            config.parent.rmdir()
    elif config.exists():
        click.echo(f"kept {config} (--purge removes it)")
    if live and not dry_run:
        left = cgroup_mount / SLICE
        if left.exists():
            raise GovernorError(f"{left} is still there: systemctl stop {SLICE} did not remove it")
        click.echo(f"nothing of governor is left in {cgroup_mount}")


def _tidy_runtime(runtime: Path, state: Path, *, purge: bool, dry_run: bool, remove) -> None:
    """Remove what governor keeps at run time: the socket, a state directory in ``runtime`` (one
    elsewhere only with ``purge``), the registry entries and locks of daemons that are gone,
    then ``runtime`` if that left it empty; say what stays."""
    if state.exists() and (purge or state.is_relative_to(runtime)):
        remove(state)
    elif state.exists():
        click.echo(f"kept {state} (the state directory: task records, fair-share history; --purge removes it)")
    if (runtime / "state").exists() and runtime / "state" != state:  # the default's, from before
        remove(runtime / "state")
    socket = runtime / "governor.sock"
    if socket.exists() or socket.is_symlink():
        remove(socket)
    for path in leftovers.stale_entries(runtime / "daemons"):
        remove(path, " (a stopped daemon's registry entry)")
    idle, busy = leftovers.idle_locks(runtime / "locks", runtime / "daemons")  # an older governor's there
    for path in idle:
        remove(path, " (a stopped daemon's lock)")
    for path in busy:
        click.echo(f"kept {path} (held by a running governor daemon)")
    for directory in (runtime / "daemons", runtime / "locks", runtime):  # a running daemon's entries keep them
        if not dry_run and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()


def _tidy_history(history: Path, state_directory: Path, *, purge: bool, dry_run: bool, remove) -> None:
    """Remove the history journal with ``purge``, and the unit's StateDirectory if that left it
    empty; else say it is kept."""
    if history.exists() and not purge:
        click.echo(f"kept {history} (the history journal; --purge removes it)")
        return
    if history.exists():
        remove(history, " (the history journal)")
    if not dry_run and state_directory.is_dir() and not any(state_directory.iterdir()):
        state_directory.rmdir()


def _state_dir(config: Path) -> str:
    """The config's ``[daemon] state_dir`` (an absolute path); the default where the config is
    missing or unreadable (the daemon would not have started with it)."""
    from governor.config.history_rules import DEFAULT_STATE_DIR

    return _setting(config, "daemon", "state_dir", DEFAULT_STATE_DIR)


def _history_dir(config: Path) -> str:
    """The config's ``[history] directory``, as :func:`governor.config.history_rules.history_rules`
    finds it: the key, else in a ``state_dir`` the config moves, else the default."""
    from governor.config.history_rules import following

    return _setting(config, "history", "directory", following(_state_dir(config)))


def _setting(config: Path, table: str, key: str, default: str | None) -> str | None:
    """An absolute path the config sets as ``[table] key``; ``default`` where it does not, or
    the config is missing or unreadable."""
    import tomllib

    try:
        value = tomllib.loads(config.read_text()).get(table, {}).get(key, default)
    except (OSError, ValueError, AttributeError, RecursionError):  # (RecursionError: [[[…]]] past its depth)
        return default
    return value if isinstance(value, str) and value.startswith("/") else default


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
    step(f"reset the limits on user-{uid}.slice (a login session governor governed)",
         ["systemctl", "set-property", "--runtime", "--", f"user-{uid}.slice", *leftovers.slice_resets()],
         must=False)


def _remove(path: Path) -> None:
    from governor.errors import GovernorError

    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except OSError as error:
        raise GovernorError(f"{path}: cannot remove: {error.strerror}") from error
