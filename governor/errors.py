"""Domain errors: every failure governor reports derives from :class:`GovernorError`.

The base and the cgroup and device errors are defined in :mod:`governor.cgroups.errors` (the lowest
layer imports nothing from above it) and re-exported here. OS errors are converted to these at
the edge (``cgroups/files.py`` for cgroupfs,
``cgroups/devices.py`` for block devices, the CLI for files it reads), so callers catch one
tree and every message says what was wrong and where::

    GovernorError
    ├── AllocationInputError      bad capacity/demand/weight given to the allocator (group, resource)
    ├── FillingDiverged           the filling reached no answer (a flaw of the allocator, not its input)
    ├── ConfigError               bad scenario or config file (file, key, reason)
    ├── StateFileError            a state file cannot be written, trusted or read (path, reason)
    ├── CgroupError               a cgroupfs operation failed (path, errno)
    │   ├── CgroupReadError       reading a cgroup file failed
    │   ├── CgroupWriteError      writing a value to a cgroup file failed (path, value, errno)
    │   │   └── ProcessGone       the process to move into a cgroup is gone (ESRCH)
    │   │       ├── EndedAtPidsMax  ended, not moved: its session is at its pids.max
    │   │       └── NoLongerTheUsers  not moved: its real uid is no longer the session's user's
    │   ├── CgroupBusy            a cgroup to remove still holds processes or child cgroups (EBUSY)
    │   └── CgroupUnsupported     the host lacks a hierarchy or controller governor needs
    ├── DeviceError               a configured block device cannot be governed (path, reason)
    ├── RequestError              a control-socket request the daemon refuses (code, message)
    ├── DaemonError               the daemon answered a client with ok=false (code, message)
    └── ControlSocketError        the control socket cannot be bound, reached or read (path, reason)
        ├── DaemonNotRunning      no socket file, or nobody listening on it (client side)
        └── SocketPermissionError the caller may not connect to the socket (client side)
"""

from __future__ import annotations

from governor.cgroups.errors import (CgroupBusy, CgroupError, CgroupReadError, CgroupUnsupported, CgroupWriteError,
                                     DeviceError, GovernorError, ProcessGone)

__all__ = ["AllocationInputError", "CgroupBusy", "CgroupError", "CgroupReadError", "CgroupUnsupported", "CgroupWriteError",
           "ConfigError", "ControlSocketError", "DaemonError", "DaemonNotRunning", "DeviceError", "EndedAtPidsMax",
           "FillingDiverged", "GovernorError", "NoLongerTheUsers", "ProcessGone", "RequestError", "SocketPermissionError", "StateFileError"]


class AllocationInputError(GovernorError, ValueError):
    """Input the allocator cannot divide fairly.

    Attributes:
        group: the group whose entry is wrong, or ``None`` for capacity-level errors.
        resource: the resource concerned, or ``None``.
        reason: what is wrong, in words.
    """

    def __init__(self, reason: str, *, group: str | None = None, resource: str | None = None):
        self.group = group
        self.resource = resource
        self.reason = reason
        where = []
        if group is not None:
            where.append(f"group {group!r}")
        if resource is not None:
            where.append(f"resource {resource!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {reason}" if prefix else reason)


class FillingDiverged(GovernorError):
    """Progressive filling reached no answer on valid input (no event ahead while groups still
    grow, or more events than the problem can have): a flaw of the allocator. The daemon keeps
    the last good plan in force and reports it (DESIGN.md §2); it never divides otherwise."""


class ConfigError(GovernorError, ValueError):
    """A scenario or config file that cannot be used.

    Attributes:
        file: path of the file (as given by the user), or ``"<string>"``.
        key: dotted key inside the file (``groups.A.task.cpu``), or ``None`` for the whole file.
        reason: what is wrong, in words.
    """

    def __init__(self, file: str, key: str | None, reason: str):
        self.file = file
        self.key = key
        self.reason = reason
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {reason}")


class StateFileError(GovernorError):
    """A file the daemon keeps between runs (:mod:`governor.host.state_files`) cannot be written, or
    cannot be trusted or read back.

    Attributes:
        path: the file.
        reason: what is wrong, in words: the OS's (``No space left on device``, ``Too many
            levels of symbolic links`` for a link) or the check's (``it is writable by others
            (mode 0666)``, ``it is larger than 1048576 bytes``).
    """

    def __init__(self, message: str, *, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(message)


class EndedAtPidsMax(ProcessGone):
    """A process was ended (SIGKILL) rather than moved into session cgroup ``path``, which was at
    its ``pids.max``: it was started after the session's first process, so a fork inside the
    session could not have started it (:mod:`governor.daemon.session_pids`)."""

    def __init__(self, path: str, pid: int):
        super().__init__(path, str(pid))


class NoLongerTheUsers(ProcessGone):
    """A process was not moved into session cgroup ``path``: its real uid, read again just
    before the move, is no longer the session's user's (runuser's parent takes the user's uid
    for a moment, then root's back: root's process stays where it is)."""

    def __init__(self, path: str, pid: int):
        super().__init__(path, str(pid))


class RequestError(GovernorError):
    """A control-socket request the daemon refuses; the server sends it back as
    ``{"ok": false, "error": {"code": code, "message": message}}``.

    Raised by ``governor.wire.protocol.parse_request`` (``bad_request``, ``too_large``,
    ``unknown_op``) and by the daemon's request handler (``forbidden``, ``not_found``,
    ``exceeds_capacity``, ``unavailable``). The codes are listed in ``governor/wire/protocol.py``.

    Attributes:
        code: the machine-readable error code.
        message: what is wrong, in words; for ``bad_request`` it names the field.
    """

    def __init__(self, code: str, message: str):
        self.code = code
        self.message = message
        super().__init__(message)


class DaemonError(GovernorError):
    """The daemon answered a client request with ``ok: false``.

    Attributes:
        code: the error code from the reply (``forbidden``, ``exceeds_capacity``...).
        message: the daemon's message.
        op: the request's operation (``launch``, ``reload``...), or None when not known.
    """

    def __init__(self, code: str, message: str, op: str | None = None):
        self.code = code
        self.message = message
        self.op = op
        super().__init__(f"{message} ({code})")


class ControlSocketError(GovernorError):
    """The control socket cannot be used: bound by the daemon, reached or read by a client.

    Attributes:
        path: the socket path.
        reason: what is wrong, in words.
    """

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class DaemonNotRunning(ControlSocketError):
    """No daemon listens on the control socket: the file is missing or the connection is refused.

    The message reads ``governor daemon is not running (no socket at /run/governor/governor.sock)``.

    Attributes:
        reason: ``"no socket"`` or ``"connection refused"``.
    """

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        # Not ControlSocketError's "path: reason": this message is a sentence for the user.
        GovernorError.__init__(self, f"governor daemon is not running ({reason} at {path})")


class SocketPermissionError(ControlSocketError):
    """The caller may not connect to the control socket (EACCES/EPERM on connect)."""
