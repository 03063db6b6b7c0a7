"""The locks that make one governor daemon the only one doing something on this host
(governing a cgroup root, governing the sessions), on files no other user can open.

A ``flock`` is only as exclusive as its file: any user who can open a file may lock it (read-only
will do), and a daemon that must not wait for it then cannot start: a user held the cgroup
root's directory, or a 0644 lock file, and every restart of the daemon was refused. So every
lock is a file in a directory only the daemon's user may enter: :data:`LOCKS` for root, a
directory of its own below the temporary directory for anyone else (a daemon's code run as an
ordinary user in tests).

The kernel drops a flock when the last descriptor of it closes, so a daemon's locks go with it,
``kill -9`` included, unless a process it forked still holds the descriptor. Each lock file names
its holder (pid and start time, :func:`take`) and what it claims; a daemon that finds a lock held
while the process it names is gone, or its pid is another process now, takes it over: it removes
the file and locks a new one (logged).

Lives in ``cgroups/``, the lowest layer, because :func:`~governor.cgroups.hierarchy.hold_root`
needs it and ``cgroups/`` imports nothing from above.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from governor.cgroups.errors import GovernorError

log = logging.getLogger(__name__)

LOCKS = Path("/run/governor/locks")
# A claim is a few hundred bytes; anything larger is not one.
_MAX_BYTES = 64 * 1024


class LockHeld(GovernorError):
    """The lock is held by a process that is alive (or has not said who it is yet).

    Attributes:
        path: the lock file.
        pid: the holder's pid; None when it has not written it yet.
        claim: what the holder claims (the mapping it gave :func:`take`); None when unknown.
    """

    def __init__(self, path: Path, holder: Mapping | None):
        self.path = path
        self.pid = holder.get("pid") if holder else None
        claim = holder.get("claim") if holder else None
        self.claim = claim if isinstance(claim, dict) else None
        super().__init__(f"{path} is held by pid {self.pid}" if self.pid else f"{path} is held")


def lock_directory() -> Path:
    """Where this process's locks go: :data:`LOCKS` (``/run/governor/locks``) for root,
    ``<temporary directory>/governor-locks-<uid>`` for another user."""
    uid = os.geteuid()
    return LOCKS if uid == 0 else Path(tempfile.gettempdir()) / f"governor-locks-{uid}"


def take(path: Path, claim: Mapping[str, object]) -> int:
    """Take the exclusive lock ``path`` without waiting, and write this process's pid, start
    time and ``claim`` (JSON-serialisable) in it. Its directory is made (mode 0700) if missing.

    Returns:
        The descriptor holding the lock (close-on-exec; held until closed or the process ends).

    Raises:
        LockHeld: a live process holds it.
        GovernorError: the directory is not private to this user (naming it, and what to do),
            or the file cannot be made.
    """
    _private(path.parent)
    while True:
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            if holder is None or _alive(holder):
                os.close(fd)
                raise LockHeld(path, holder) from None
            _take_over(path, fd, holder)
            os.close(fd)
            continue
        # The holder before may have removed the file (release, or a take-over) between our open
        # and our lock: then the lock is on a file nobody else will ever open.
        if _same_file(path, fd):
            break
        os.close(fd)
    rewrite(fd, claim)
    return fd


def rewrite(fd: int, claim: Mapping[str, object]) -> None:
    """Replace what the lock held by ``fd`` claims (:func:`take`)."""
    pid = os.getpid()
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": pid, "started": start_time(pid), "claim": dict(claim)}).encode(), 0)


def release(path: Path, fd: int) -> None:
    """Give up the lock ``path`` held by ``fd``: the file is removed while still locked, so a
    process waiting on it tries again on a new one."""
    if _same_file(path, fd):
        with contextlib.suppress(OSError):
            os.unlink(path)
    os.close(fd)


def held(path: Path) -> bool:
    """Whether a process holds the lock ``path`` now (a file that cannot be opened counts as
    held: it is left alone). Takes the lock for a moment when it is free, never waits."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def claims(directory: Path, pattern: str = "*.lock") -> list[tuple[Path, dict]]:
    """The locks matching ``pattern`` in ``directory`` that a live process holds now, with what
    each holder wrote (:func:`take`: ``pid``, ``started``, ``claim``); none where the directory
    cannot be read."""
    found = []
    for path in sorted(directory.glob(pattern)) if directory.is_dir() else ():
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            holder = _read(fd)
        finally:
            os.close(fd)
        if holder is not None and held(path):
            found.append((path, holder))
    return found


def start_time(pid: int, proc: Path = Path("/proc")) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat`` field 22);
    None when there is no such process. Two processes with the same pid differ in it."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold blanks and ")".
    fields = text.rpartition(")")[2].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _alive(holder: Mapping) -> bool:
    pid, started = holder.get("pid"), holder.get("started")
    if type(pid) is not int:
        return True  # not a holder this code wrote: it cannot be judged dead
    now = start_time(pid)
    return now is not None and (type(started) is not int or now == started)


def _take_over(path: Path, fd: int, holder: Mapping) -> None:
    """Remove the lock file a dead holder left locked (``fd`` is open on it). Two daemons may
    find it at once: the directory's own lock (only this user can open the directory) makes one
    of them remove it, and the other then finds the new file."""
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        if _same_file(path, fd):
            os.unlink(path)
            log.warning("took over %s from pid %s (%s), which is gone: a process it left still held the lock",
                        path, holder.get("pid"), json.dumps(holder.get("claim")))
    finally:
        os.close(directory)


def _same_file(path: Path, fd: int) -> bool:
    try:
        now, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise GovernorError(f"cannot open the lock {path}: {error.strerror}") from None


def _read(fd: int) -> dict | None:
    try:
        holder = json.loads(os.pread(fd, _MAX_BYTES, 0))
    except (OSError, ValueError):
        return None  # empty: the holder has not written it yet
    return holder if isinstance(holder, dict) else None


def _private(directory: Path) -> None:
    """Make ``directory`` (0700; missing parents 0755) or check that only this user may open it."""
    uid = os.geteuid()
    try:
        missing = [d for d in (directory, *directory.parents) if not d.exists()]
        for made in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(made)
                os.chmod(made, 0o700 if made == directory else 0o755)  # mkdir's mode is masked by the umask
        info, parent = os.lstat(directory), os.lstat(directory.parent)
    except OSError as error:
        raise GovernorError(f"cannot make the lock directory {directory}: {error.strerror}") from None
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "not a directory (a link, or another kind of file)"
    elif info.st_uid != uid:
        problem = f"owned by uid {info.st_uid}, not {uid}"
    elif info.st_mode & 0o077:
        problem = f"open to other users (mode {stat.S_IMODE(info.st_mode):04o}, not 0700)"
    elif parent.st_uid not in (0, uid) or (parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX):
        problem = f"in {directory.parent}, which other users may change"
    if problem:
        raise GovernorError(f"{directory} is {problem}: governor's locks must be where no other user can "
                            "hold them (or a user could keep the daemon from starting). Remove it, and "
                            "governor makes it again (mode 0700)")
