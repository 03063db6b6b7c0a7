"""How a failure reaches the user: one line and an exit code, the same for every command.

``governor: error: <what went wrong> (<hint>)`` on stderr; with ``--verbose`` the internal
code follows in brackets (``[forbidden]``). Each kind of failure has one exit code, listed in
docs/user.md, "Errors and exit codes" (a test per row)::

    0    done
    1    failure: none of the below (a cgroup write refused, a daemon bug, a broken reply)
    2    bad input: a usage error, a bad config or scenario file, a request the daemon refuses
         as wrong (bad_request, not_found, exceeds_capacity, invalid_config)
    69   unavailable (sysexits EX_UNAVAILABLE): no daemon on the socket, or it cannot do this here
    75   try again later (EX_TEMPFAIL): --no-wait and the memory does not fit now; too many tasks
    77   permission (EX_NOPERM): the daemon says no (forbidden), or the socket cannot be opened
    126  run's command exists but cannot be executed, as in a shell
    127  run's command is not found, as in a shell
    130  interrupted (Ctrl-C; in run's queue nothing was started)
    137  run's task was stopped (governor stop) while it waited in the queue: the code a
         stopped running task ends with too (128 + SIGKILL)
    143  run got SIGTERM while it waited in the queue (128 + SIGTERM): nothing was started

Only the standard library and the error classes at import: ``governor run``'s fast path
(:mod:`governor.cli.entry`) prints its failures with this module before click is ever loaded
(the client's default socket is looked up where a hint needs it: the client, which raised
the error, is loaded by then).
"""

from __future__ import annotations

from governor.errors import (AllocationInputError, ConfigError, ControlSocketError, DaemonError, DaemonNotRunning,
                             GovernorError, SocketPermissionError)

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 69
EXIT_WOULD_WAIT = 75
EXIT_NO_PERMISSION = 77
EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127
EXIT_INTERRUPTED = 130
EXIT_STOPPED = 137

# The longest part of an error line shown (its message, its hint, its code).
LINE_PART_CHARS = 2000
START_DAEMON = "start it: sudo systemctl start governor"  # the installed unit's socket (the default)
JOIN_A_GROUP = "ask an admin to add you to a [groups] entry"

# Internal code (the daemon's error code, or a name for a failure found on this side) →
# (exit code, hint for a user who is stuck, or None when the message says it all).
KINDS: dict[str, tuple[int, str | None]] = {
    # The daemon's codes (governor/wire/protocol.py ERROR_CODES).
    "bad_request": (EXIT_BAD_INPUT, None),
    "too_large": (EXIT_BAD_INPUT, None),
    "timeout": (EXIT_FAILURE, None),
    "unknown_op": (EXIT_FAILURE, "the daemon is older than this command: restart it: sudo systemctl restart governor"),
    "forbidden": (EXIT_NO_PERMISSION, JOIN_A_GROUP),
    "not_found": (EXIT_BAD_INPUT, "governor explain lists the groups"),
    "exceeds_capacity": (EXIT_BAD_INPUT, "ask for less: governor status shows the capacity"),
    "would_wait": (EXIT_WOULD_WAIT, "--no-wait given: without it the task waits in the queue"),
    "unavailable": (EXIT_UNAVAILABLE, None),
    "too_many": (EXIT_WOULD_WAIT, "try again when one of your tasks has ended"),
    "invalid_config": (EXIT_BAD_INPUT, "the config in force stays; governor check-config FILE checks a file"),
    "stopped": (EXIT_STOPPED, None),
    "internal": (EXIT_FAILURE, "a bug in the daemon: journalctl -u governor has the details"),
    # Found on this side.
    "daemon_not_running": (EXIT_UNAVAILABLE, START_DAEMON),
    "socket_permission": (EXIT_NO_PERMISSION, "ask an admin for access to the control socket"),
    "socket": (EXIT_FAILURE, None),
    "bad_input": (EXIT_BAD_INPUT, None),
    "error": (EXIT_FAILURE, None),
}
# Admin operations refused: the hint is about who may, not about groups.
_ADMIN_OPS = {"reload", "set-weight"}
_AS_ROOT = "run it as root, or as a member of the config's admin_group"
# Refused for a task (another user's, or none such: stop, ps --all): no group is missing.
_OWNER_OPS = {"stop", "ps"}


def kind(error: GovernorError) -> str:
    """The internal code of ``error``: a key of :data:`KINDS`."""
    if isinstance(error, DaemonError):
        return error.code if error.code in KINDS else "error"
    if isinstance(error, DaemonNotRunning):
        return "daemon_not_running"
    if isinstance(error, SocketPermissionError):
        return "socket_permission"
    if isinstance(error, ControlSocketError):
        return "socket"
    if isinstance(error, (ConfigError, AllocationInputError)):
        return "bad_input"
    return "error"


def line(what: str, hint: str | None = None, code: str | None = None) -> str:
    """``governor: error: <what> (<hint>)``, then `` [<code>]`` when a code is given (--verbose);
    each part printable and at most :data:`LINE_PART_CHARS` long (a daemon's message may quote
    another user's input, and a megabyte of it is no line)."""
    from governor.cli.view_common import printable

    def shown(text: str) -> str:
        if len(text) > LINE_PART_CHARS:
            text = text[:LINE_PART_CHARS] + f"… ({len(text):,} characters)"
        return printable(text)

    text = f"governor: error: {shown(what)}"
    if hint:
        text += f" ({shown(hint)})"
    return text + (f" [{shown(code)}]" if code else "")


def describe(error: GovernorError) -> tuple[str, str | None, str, int]:
    """``error`` as (what went wrong, hint or None, internal code, exit code): the module's table."""
    code = kind(error)
    status, hint = KINDS[code]
    what = error.message if isinstance(error, DaemonError) else str(error)
    if code == "forbidden" and error.op in _ADMIN_OPS:
        hint = _AS_ROOT
    elif code in ("forbidden", "not_found") and error.op in _OWNER_OPS:
        hint = None  # about a task, not a group: the message says which and whose
    elif code == "too_many" and error.op == "history":
        hint = None  # paced reads, not tasks: the message says when to ask again
    elif code == "exceeds_capacity" and ("user_limit" in what or "'s limit" in what):
        hint = "ask for less, or an admin to raise it"  # the config's quota, not the host's capacity
    elif code == "forbidden" and not _about_groups(what):
        hint = None  # another daemon's process, another pid: no group would let it (the message says what does)
    elif isinstance(error, DaemonNotRunning) and not _is_default_socket(error.path):
        hint = start_by_hand(error.path)  # a daemon run by hand: no unit serves this socket
    if isinstance(error, DaemonError):
        code = error.code  # one this client does not know yet is still shown with --verbose
    return what, hint, code, status


def _about_groups(message: str) -> bool:
    """Whether a refusal is about the user's groups (no group, not that group): the one an
    admin's ``[groups]`` entry answers."""
    import re

    return re.search(r"\bgroups?\b", message) is not None


def _is_default_socket(path: str) -> bool:
    """Whether ``path`` is the installed unit's socket, however spelt (``/var/run`` is a link
    to ``/run``)."""
    import os

    from governor.cli.client import DEFAULT_SOCKET  # loaded already: the client raised the error

    return os.path.realpath(path) == os.path.realpath(DEFAULT_SOCKET)


def start_by_hand(path: str) -> str:
    """The hint for a daemon not running on socket ``path``, not the installed unit's: start the
    one that serves it (quoted for a shell: a path may hold a space)."""
    import shlex

    return f"start the daemon that serves it: sudo governor daemon --socket {shlex.quote(path)} …"


def report(error: GovernorError, *, verbose: bool = False) -> tuple[str, int]:
    """The line to print for ``error`` and the exit code to end with."""
    what, hint, code, status = describe(error)
    return line(what, hint, code if verbose else None), status
