"""The governor daemons of this host, as each tells the others (DESIGN.md §8).

Two promises need a place every daemon sees, whatever its ``--socket``, ``--state-dir`` or
``--cgroup-root``: **one daemon governs the host's sessions**, and **no daemon moves a process
out of another daemon's cgroups** (a second daemon that took a task's processes into its own
session left ``governor stop`` of the first one killing nothing). That place is a host-wide
directory, :data:`REGISTRY` (``/run/governor/daemons``), owned by root and writable by nobody
else (a forged entry would hide processes from governance):

* the sessions' lock, ``sessions.lock`` in :data:`~governor.cgroups.locks.LOCKS`
  (``/run/governor/locks``, 0700: no other user may open it, so none can hold it and keep the
  daemon from starting): held (``flock``) by the one daemon whose config enables sessions; it
  holds that daemon's entry, so a second one is refused with its pid, cgroup root and config, and
  one that finds it held for a daemon that is gone takes it over (:mod:`governor.cgroups.locks`).
* ``root-<digest>.json``: one per cgroup root, written by the daemon that holds that root: its
  pid, root, config and socket, and how ``/proc/<pid>/cgroup`` spells the root. It stays after a
  crash (the root's tasks outlive the daemon, and its restart re-adopts them), is removed by a
  daemon that removes its root at a clean stop, and by anyone once its root is gone.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from governor.cgroups.locks import LockHeld, release, rewrite, take
from governor.errors import GovernorError, StateFileError
from governor.host.state_files import read_trusted, write_atomically
from governor.host.trust import untrusted

log = logging.getLogger(__name__)

REGISTRY = Path("/run/governor/daemons")
SESSIONS_LOCK = "sessions.lock"
# An entry is a few hundred bytes; anything larger is not one.
_MAX_ENTRY_BYTES = 64 * 1024
# How old the directory's mtime must be before the entries read with it are kept: two changes
# one clock tick apart (1-10 ms) may leave the same mtime.
SETTLED_MTIME_NS = 1_000_000_000


@dataclass(frozen=True)
class DaemonEntry:
    """One daemon as the others see it.

    Attributes:
        pid: its process id.
        root: its cgroup root directory (``/sys/fs/cgroup/cpu/governor`` on v1).
        config: its config file (or ``<embedded default>``).
        socket: its control socket.
        proc_key, proc_root: the line of ``/proc/<pid>/cgroup`` that shows its root (``""``
            on v2, ``cpu`` on v1) and the root as spelt there; None before it has a root.
    """

    pid: int
    root: str
    config: str
    socket: str
    proc_key: str = ""
    proc_root: str | None = None

    def holds(self, where: Mapping[str, str]) -> bool:
        """Whether a process whose ``/proc/<pid>/cgroup`` reads ``where`` (hierarchy key →
        path) is in this daemon's root or below it."""
        path = where.get(self.proc_key)
        if path is None or self.proc_root is None:
            return False
        return path == self.proc_root or path.startswith(self.proc_root.rstrip("/") + "/")

    def describe(self) -> str:
        return f"pid {self.pid}, cgroup root {self.root}, config {self.config}, socket {self.socket}"


class Registry:
    """This host's daemons, under ``directory`` (created 0755, owned by root, on first use); the
    sessions' lock in ``locks`` (default: ``locks`` beside ``directory``, ``/run/governor/locks``;
    made 0700).

    Raises (every method but :meth:`owner`):
        GovernorError: the directory or a file in it is not trustworthy or cannot be written,
            naming the path; the sessions are another daemon's (:meth:`claim_sessions`).
    """

    def __init__(self, directory: Path = REGISTRY, locks: Path | None = None):
        self.directory = directory
        self.locks = locks or directory.parent / "locks"
        self._sessions_fd: int | None = None
        self._state: tuple[Path, int] | None = None  # the state directory's lock: its file and descriptor
        self._entry: Path | None = None
        self._made: list[Path] = []  # directories this daemon created, removed again when empty
        # (directory mtime, entries), once the mtime is SETTLED_MTIME_NS old.
        self._seen: tuple[int, list[DaemonEntry]] | None = None

    @property
    def holds_sessions(self) -> bool:
        return self._sessions_fd is not None

    def claim_sessions(self, me: DaemonEntry) -> None:
        """Become the daemon that governs this host's sessions (held until :meth:`release_sessions`
        or the process ends, ``kill -9`` included; a claim whose daemon is gone while a process
        it left holds the lock is taken over, logged). Claiming again only updates ``me``.

        Raises:
            GovernorError: another daemon holds them, named by pid, cgroup root and config.
        """
        if self._sessions_fd is not None:
            rewrite(self._sessions_fd, asdict(me))
            return
        try:
            self._sessions_fd = take(self.locks / SESSIONS_LOCK, asdict(me))
        except LockHeld as held:
            raise GovernorError(
                f"another governor daemon governs this host's sessions ({_entry_text(held.claim)}): one daemon "
                "may. Stop it, or set [sessions] enabled = false in this daemon's config") from None

    def release_sessions(self) -> None:
        """Stop governing sessions: another daemon may claim them."""
        if self._sessions_fd is None:
            return
        release(self.locks / SESSIONS_LOCK, self._sessions_fd)
        self._sessions_fd = None

    def claim_state(self, directory: Path, me: DaemonEntry) -> None:
        """Become the one daemon keeping its task records in ``directory`` (held until
        :meth:`release_state` or the process ends, ``kill -9`` included). Two daemons given one
        state directory each took the other's running tasks for tasks that ended while it was
        down: their records removed, their ends journaled.

        Raises:
            GovernorError: another daemon keeps its records there, named by pid, cgroup root
                and config.
        """
        key = hashlib.sha256(os.path.realpath(directory).encode()).hexdigest()[:16]
        path = self.locks / f"state-{key}.lock"
        try:
            self._state = (path, take(path, asdict(me)))
        except LockHeld as held:
            raise GovernorError(
                f"another governor daemon keeps its task records in {directory} ({_entry_text(held.claim)}): "
                "each daemon needs a state directory of its own ([daemon] state_dir, --state-dir)") from None

    def release_state(self) -> None:
        """Give up the state directory (a refused start, a stopped daemon): its lock file goes."""
        if self._state is not None:
            release(*self._state)
            self._state = None

    def register(self, me: DaemonEntry) -> None:
        """Tell the other daemons which cgroup root is ``me``'s (replacing an entry a crashed
        daemon of the same root left)."""
        self._prepare()
        path = self.directory / f"root-{hashlib.sha256(me.root.encode()).hexdigest()[:16]}.json"
        write_atomically(path, json.dumps(asdict(me)).encode(), "this daemon's entry", mode=0o644)
        self._entry = path

    def unregister(self) -> None:
        """Remove this daemon's entry (its root is gone), and the directory if it made it and
        nothing else is left in it."""
        if self._entry is not None:
            with contextlib.suppress(FileNotFoundError):
                self._entry.unlink()
            self._entry = None
        self._tidy()

    def owner(self, where: Mapping[str, str]) -> DaemonEntry | None:
        """The other daemon whose root holds a process whose ``/proc/<pid>/cgroup`` reads
        ``where``, or None. Entries are read again only when the directory changed; an
        untrusted or unreadable one counts for nothing (logged)."""
        for entry in self._others():
            if entry.holds(where):
                return entry
        return None

    def _others(self) -> list[DaemonEntry]:
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except OSError:
            return []
        if self._seen is not None and self._seen[0] == mtime:
            return self._seen[1]
        entries = []
        try:
            problem = untrusted(os.lstat(self.directory), directory=True)
            names = [] if problem else sorted(os.listdir(self.directory))
        except OSError:
            names = []
        for name in names:
            path = self.directory / name
            if not (name.startswith("root-") and name.endswith(".json")) or path == self._entry:
                continue
            entry = _read_entry(path)
            if entry is None:
                continue
            if not os.path.isdir(entry.root):  # its root is gone: nothing of it to protect
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            entries.append(entry)
        # A directory changed within the last moments may change again with the same mtime (the
        # kernel stamps it from a coarse clock, one tick apart): read it again until it is older.
        if time.time_ns() - mtime >= SETTLED_MTIME_NS:
            self._seen = (mtime, entries)
        return entries

    def _prepare(self) -> None:
        missing = []
        for directory in (self.directory, *self.directory.parents):
            if directory.exists():
                break
            missing.append(directory)
        try:
            for directory in reversed(missing):
                directory.mkdir(mode=0o755)
                os.chmod(directory, 0o755)  # mkdir's mode is masked by the umask
                self._made.append(directory)
            for directory in (self.directory, self.directory.parent):
                problem = untrusted(os.lstat(directory), directory=True)
                if problem:
                    raise GovernorError(f"{directory} is {problem}: it tells which daemon governs what, so only "
                                        "root may write it")
        except OSError as error:
            raise GovernorError(f"cannot use {self.directory}: {error.strerror}") from None

    def _tidy(self) -> None:
        for directory in reversed(self._made):
            try:
                directory.rmdir()
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                    log.warning("cannot remove %s: %s", directory, error.strerror)
                break
        self._made = [d for d in self._made if d.exists()]


def _read_entry(path: Path) -> DaemonEntry | None:
    """The entry in ``path``; None, logged, where it cannot be trusted or is not an entry (and
    where it was removed meanwhile, not logged)."""
    try:
        return _parse(read_trusted(path, _MAX_ENTRY_BYTES))
    except FileNotFoundError:
        return None
    except (StateFileError, ValueError, TypeError) as error:
        log.warning("ignoring %s: %s", path, error.reason if isinstance(error, StateFileError) else error)
        return None


def _parse(data: bytes) -> DaemonEntry:
    """Raises ValueError or TypeError for what is not an entry."""
    return _entry(json.loads(data))


def _entry(fields: object) -> DaemonEntry:
    """Raises ValueError or TypeError for what is not an entry."""
    if not isinstance(fields, dict):
        raise ValueError("not a daemon entry")
    entry = DaemonEntry(**fields)
    if not (type(entry.pid) is int and all(isinstance(v, str) for v in (entry.root, entry.config, entry.socket,
                                                                          entry.proc_key))
            and (entry.proc_root is None or isinstance(entry.proc_root, str))):
        raise ValueError("a field of the wrong type")
    return entry


def _entry_text(fields: object) -> str:
    try:
        return _entry(fields).describe()
    except (ValueError, TypeError):
        return "its pid is unknown: it has not written its entry yet"


def other_daemon(registry: Registry | None, location) -> DaemonEntry | None:
    """The other governor daemon whose cgroup root holds a process at ``location`` (a
    :class:`~governor.cgroups.hierarchy.Location`: outside this daemon's root, its
    ``/proc/<pid>/cgroup`` read), or None; always None without a registry (no other daemon is
    known)."""
    if registry is None or location.rel is not None or location.paths is None:
        return None
    return registry.owner(location.paths)
