"""``[notify]``: a command run on events a person should hear about (issue 35, point 3). Pure:
the daemon's runner (:mod:`governor.host.alerts`) runs it; the document it reads on stdin is
:mod:`governor.wire.notice`'s (docs/notify.md).

Off unless ``command`` is given. The command runs as ``user`` (default: the daemon's own), never
as the user whose task an event is about: the runner refuses such a run, as a hook run with a
user's rights over a document that user's own command line fills is that user's to subvert.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from governor.config.tomlcheck import join_key, no_unknown_keys, number, subtable, type_name
from governor.config.units import parse_duration
from governor.errors import ConfigError

__all__ = ["EVENTS", "NotifyRules", "notify_rules"]

# The kinds of event, in the words of docs/notify.md: a task OOM-killed, ended at its time
# limit, held at its memory cap; a task queued longer than ``queued_longer_than``; a task held
# back by a group's (or a member's) limit; a GPU drained and free.
EVENTS = ("oom_kill", "time_limit", "memory_held", "queued", "group_at_limit", "gpu_drained")
_KEYS = ("command", "timeout", "max_running", "queued_longer_than", "events", "user")
_MAX_RUNNING = 64
# The longest timeout or wait: a span past it is a typo (1e308 is not a wait), and a figure
# this size still prints as a span (check-config) and fits the event loop's timers.
_MAX_SECONDS = 30 * 86_400


@dataclass(frozen=True)
class NotifyRules:
    """``[notify]``.

    Attributes:
        command: argv of the command (``command[0]`` an absolute path); () when notifications
            are off.
        timeout_s: seconds one run may take before its process group is killed, > 0 and at
            most 30 days.
        max_running: runs at once, at most (1 to 64).
        queued_longer_than_s: seconds a task waits in the queue before ``queued`` is sent, > 0
            and at most 30 days.
        events: the kinds sent, a subset of :data:`EVENTS` in that order.
        user: the account the command runs as, or None for the daemon's own.
    """

    command: tuple[str, ...] = ()
    timeout_s: float = 10.0
    max_running: int = 4
    queued_longer_than_s: float = 600.0
    events: tuple[str, ...] = EVENTS
    user: str | None = None


def notify_rules(data: Mapping[str, object], file: str) -> NotifyRules:
    """The ``[notify]`` table of a parsed config file (the defaults, off, when it is left out).

    Raises:
        ConfigError: at ``notify.<key>``: an unknown key; no ``command`` in a ``[notify]``
            table; a command that is not a string or list of strings, does not split as a
            shell would (an open quote), holds a NUL, or whose program is not an absolute
            path; a ``timeout`` or ``queued_longer_than`` not a positive number of seconds or
            a span like ``"10m"``, or over 30 days; ``max_running`` not a whole number from 1
            to 64; ``events`` naming a kind not in :data:`EVENTS`, or none; ``user`` not a
            non-empty string without NUL.
    """
    table = subtable(data, "notify", None, file)
    no_unknown_keys(table, _KEYS, "notify", file)
    if "notify" not in data:
        return NotifyRules()
    if "command" not in table:
        raise ConfigError(file, "notify.command", "missing: give the command to run on each event, e.g. "
                                                  '"/usr/local/libexec/governor-notify"')
    defaults = NotifyRules()
    user = table.get("user", defaults.user)
    if user is not None and (not isinstance(user, str) or not user or "\0" in user):
        raise ConfigError(file, "notify.user", f"must be a user name, got {user!r}")
    return NotifyRules(
        command=_command(table["command"], file),
        timeout_s=_seconds(table, "timeout", file, defaults.timeout_s),
        max_running=_max_running(table.get("max_running", defaults.max_running), file),
        queued_longer_than_s=_seconds(table, "queued_longer_than", file, defaults.queued_longer_than_s),
        events=_events(table.get("events", list(EVENTS)), file),
        user=user,
    )


def _command(value: object, file: str) -> tuple[str, ...]:
    key = "notify.command"
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as error:
            raise ConfigError(file, key, f"does not split into words as a shell would: {error}") from None
    elif isinstance(value, list) and all(isinstance(word, str) for word in value):
        argv = list(value)
    else:
        raise ConfigError(file, key, f"must be a string or a list of strings, got {type_name(value)}")
    if any("\0" in word for word in argv):  # exec would refuse it at every event
        raise ConfigError(file, key, f"must not hold a NUL character, got {value!r}")
    # Run with no shell and no search path: the daemon's PATH is not the admin's.
    if not argv or not argv[0].startswith("/"):
        raise ConfigError(file, key, f"must start with the program's absolute path, got {value!r}")
    return tuple(argv)


def _seconds(table: Mapping[str, object], name: str, file: str, default: float) -> float:
    key = join_key("notify", name)
    if name not in table:
        return default
    value = table[name]
    if isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ValueError as error:
            raise ConfigError(file, key, str(error)) from None
    else:
        seconds = float(number(value, key, file, positive=True))
    if seconds > _MAX_SECONDS:
        raise ConfigError(file, key, f"must be at most 30d ({_MAX_SECONDS} seconds), got {value!r}")
    return seconds


def _max_running(value: object, file: str) -> int:
    if type(value) is not int or not 1 <= value <= _MAX_RUNNING:
        raise ConfigError(file, "notify.max_running", f"must be a whole number from 1 to {_MAX_RUNNING}, "
                                                      f"got {value!r}")
    return value


def _events(value: object, file: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(file, "notify.events", f"must be a non-empty list of {', '.join(EVENTS)}, got {value!r}")
    for index, kind in enumerate(value):
        if kind not in EVENTS:
            raise ConfigError(file, f"notify.events[{index}]", f"must be one of {', '.join(EVENTS)}, got {kind!r}")
    return tuple(kind for kind in EVENTS if kind in value)
