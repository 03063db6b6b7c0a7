"""What ``governor run`` does once its options are parsed, without click: build the launch
request, ask the daemon (waiting in its queue if need be), exec the command.

This is the hot path: :mod:`governor.cli.entry` runs it for a plain ``governor run`` without loading
click (65 ms of imports on a slow host, three times Python's own start), so it imports the
stdlib client, ``governor.units`` and the resource registry only; a test checks that click, rich, psutil, SciPy and
the allocator stay unloaded up to the exec.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from governor.cli.failures import EXIT_CANNOT_EXECUTE, EXIT_INTERRUPTED, EXIT_NOT_FOUND
from governor.cli.failures import line as error_line

if TYPE_CHECKING:
    from governor.wire_replies import Started
    from governor.wire_requests import LaunchRequest

# How long to wait for a restarting daemon before giving up a queued launch.
RESTART_GRACE_S = 60.0


@dataclass(frozen=True)
class RunOption:
    """One of ``governor run``'s own options, besides one per resource
    (:func:`governor.resources.flags`): both :func:`plain` and the click command
    (:mod:`governor.cli.run`) are built from :data:`RUN_OPTIONS`.

    Attributes:
        flag: the option (``--group``).
        keyword: :func:`start`'s keyword for its value.
        parse: its text → its value (raises ValueError); None for a flag without a value (True
            when given, else False).
        metavar, help: as ``governor run --help`` shows it.
    """

    flag: str
    keyword: str
    parse: Callable[[str], object] | None
    metavar: str | None
    help: str


def time_limit(text: str) -> float:
    """A ``--time-limit`` like ``90s``, ``10m``, ``1h30m`` or plain seconds, in seconds > 0
    (raises ValueError)."""
    from governor.units import parse_duration

    return parse_duration(text)


RUN_OPTIONS = (
    RunOption("--group", "group", str, None, "Group to run in (default: the daemon picks yours)."),
    RunOption("--no-wait", "no_wait", None, None,
              "Fail (exit 75) instead of waiting when the memory or GPUs do not fit now."),
    RunOption("--name", "name", str, None, "Name of the task in `governor ps` (default: the command's name)."),
    RunOption("--time-limit", "time_limit", time_limit, "DURATION",
              "End the whole task this long after it starts, e.g. 90s, 10m, 1h30m (plain: seconds)."),
    RunOption("--summary", "summary", None, None,
              "When CMD ends, print its result, run time, CPU time and memory peak on stderr (as systemd-run --wait)."),
    RunOption("--exec", "exec_in_place", None, None,
              "Become CMD (its pid is this process's) instead of waiting for it: nothing is said when governor "
              "ends it."),
    RunOption("--socket", "socket_option", str, "PATH",
              "Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock)."),
)


def plain(args: list[str]) -> dict | None:
    """The arguments after ``run`` as :func:`start`'s keywords when they are plain: only run's
    own options, each with a valid value, then the command. None for anything else (help, an
    unknown option, a bad value, no command), which the click command then parses and reports.
    """
    from governor.resources import flags as resource_flags

    resources = resource_flags()
    own = {option.flag: option for option in RUN_OPTIONS}
    given_text: dict[str, str] = {}  # flag → the text given
    flags = {option.keyword: False for option in RUN_OPTIONS if option.parse is None}
    at = 0
    while at < len(args) and args[at].startswith("-"):
        name, given, value = args[at].partition("=")
        at += 1
        if name == "--" and not given:
            break
        option = own.get(name)
        if option is not None and option.parse is None:
            if given:  # a flag takes no value (--no-wait=yes)
                return None
            flags[option.keyword] = True
            continue
        if (option is None and name not in resources) or (not given and at == len(args)):
            return None
        if not given:
            value, at = args[at], at + 1
        given_text[name] = value
    cmd = tuple(args[at:])
    if not cmd or (flags["summary"] and flags["exec_in_place"]):
        return None
    try:
        demand = {resources[flag].wire: resources[flag].parse(text) for flag, text in given_text.items()
                  if flag in resources}
        values = {own[flag].keyword: own[flag].parse(text) for flag, text in given_text.items() if flag in own}
    except ValueError:
        return None
    return {**{option.keyword: None for option in RUN_OPTIONS}, **values, **flags, "demand": demand, "cmd": cmd}


def start(demand: dict, group: str | None, no_wait: bool, socket_option: str | None, cmd: tuple[str, ...], *,
          name: str | None = None, time_limit: float | None = None, summary: bool = False,
          exec_in_place: bool = False, verbose: bool = False) -> None:
    """Have the daemon govern ``cmd`` with ``demand`` (cores, bytes, bytes/s), named ``name``
    (None: the daemon names it after the command) and ended after ``time_limit`` seconds
    (None: never); never returns. ``cmd`` runs as a child, and when governor ends it (stop,
    time limit, OOM kill) one line says why before its exit code; with ``summary``, what it
    used is printed when it ends (:func:`governor.cli.summary.run_with_summary`). With
    ``exec_in_place``, this process is governed and execs ``cmd`` itself (nothing is said
    when it ends). A command that cannot run exits 127 or 126, as in a shell. ``verbose``: a
    refusal the child reports shows its code (``--verbose``).

    Raises:
        DaemonNotRunning, DaemonError, ControlSocketError: the daemon is not there or refused
            (the caller prints one line and exits as :mod:`governor.cli.failures` says).
    """
    from governor.cli.client import socket_path

    from governor.wire_requests import LaunchRequest

    resolve(cmd[0])
    request = LaunchRequest(pid=os.getpid(), group=group, demand=demand, command=cmd, wait=not no_wait, name=name,
                            time_limit=time_limit)
    if not exec_in_place:
        from governor.cli.summary import run_with_summary

        run_with_summary(socket_path(socket_option), request, cmd, summary=summary, verbose=verbose)
    started = launch_waiting(socket_path(socket_option), request)
    hand_gpus(started)
    execute(cmd)


def hand_gpus(started: Started) -> None:
    """Name the started task's GPUs to CUDA and to NVIDIA's container tools before the exec:
    ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` list them (UUIDs, or minor
    numbers, which follow PCI bus order: hence ``CUDA_DEVICE_ORDER``), so the task numbers
    them from 0. A task without GPUs keeps its environment: its opens are refused anyway."""
    if started.gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["NVIDIA_VISIBLE_DEVICES"] = ",".join(started.gpus)
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"


def resolve(name: str) -> str:
    """The file ``name`` runs, checked before the daemon is asked: found on ``PATH`` as
    :func:`execute` finds it, or (with a slash) the path itself; exits as a shell would when it
    cannot run: 127 (not found), 126 (a directory, or no exec permission). ``execute`` still
    reports what changes between the two (the file removed meanwhile)."""
    path = name if "/" in name else _find(name)
    if path is None:
        _fail(f"{name}: command not found", EXIT_NOT_FOUND)
    elif not os.path.exists(path):
        _fail(f"{name}: No such file or directory", EXIT_NOT_FOUND)
    elif os.path.isdir(path):
        _fail(f"{name}: Is a directory", EXIT_CANNOT_EXECUTE)
    elif not os.access(path, os.X_OK):
        _fail(f"{name}: permission denied", EXIT_CANNOT_EXECUTE)
    return path


def _fail(reason: str, status: int) -> None:
    _say(error_line(reason))
    sys.exit(status)


def execute(cmd: tuple[str, ...]) -> None:
    """Exec ``cmd``, found on ``PATH`` as a POSIX shell finds it; never returns. A command
    found nowhere exits 127 (``command not found``), one found but not executable 126 (a
    directory of ``PATH`` this user cannot search is passed over, as bash does: execvp would
    report its EACCES as the command's)."""
    path = cmd[0] if "/" in cmd[0] else _find(cmd[0])
    if path is None:
        _fail(f"{cmd[0]}: command not found", EXIT_NOT_FOUND)
    try:
        os.execv(path, cmd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            reason, status = "No such file or directory", EXIT_NOT_FOUND
        elif exc.errno in (errno.EACCES, errno.EPERM):
            reason, status = "permission denied", EXIT_CANNOT_EXECUTE
        else:
            reason, status = exc.strerror or str(exc), EXIT_CANNOT_EXECUTE
        _fail(f"{cmd[0]}: {reason}", status)


def _find(name: str) -> str | None:
    """The first ``PATH`` entry holding an executable file ``name``; else the first holding
    a file by that name (exec then fails: 126); else None."""
    found = None
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            found = found or candidate
    return found


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def launch_waiting(path: str, request: LaunchRequest) -> Started:
    """Ask the daemon to start this process as a task, waiting in its queue if need be; the
    started task (``nested``: this process already was in that task, which is said
    on stderr, with and without ``--exec``)."""
    import time

    from governor.cli.client import QueueInterrupted, launch
    from governor.errors import DaemonNotRunning

    line = _QueueLine()
    restarted_by = None  # once the daemon went away: how long to wait for it to come back
    try:
        while True:
            try:
                started = launch(path, request, line.show)
                if started.nested:
                    _say(f"governor: already in task {started.task} (group {started.group}): "
                         f"{request.command[0]} runs there, with that task's caps")
                if line.since is not None and not started.nested:
                    from governor.units import format_timespan

                    line.done()
                    _say(f"governor: task {started.task} started after waiting "
                         f"{format_timespan(time.monotonic() - line.since)}")
                return started
            except QueueInterrupted:
                line.note("the daemon went away; queueing again when it is back")
                restarted_by = time.monotonic() + RESTART_GRACE_S
            except DaemonNotRunning:
                if restarted_by is None or time.monotonic() > restarted_by:
                    raise
                time.sleep(0.5)
    except KeyboardInterrupt:
        line.done()
        _say("governor: left the queue; nothing was started")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        line.done()


class _QueueLine:
    """The "waiting" message on stderr: rewritten in place on a terminal, one line per change
    otherwise (logs, pipes)."""

    def __init__(self) -> None:
        self.live = sys.stderr.isatty()
        self.shown = False
        self.since: float | None = None  # time.monotonic() of the first "queued"
        self.last: str | None = None  # the line written last

    def show(self, place: dict) -> None:
        import time

        from governor.cli.view_common import reason

        if self.since is None:
            self.since = time.monotonic()
        why = reason(place)  # the daemon's one reason, as ps, status, explain and top show it
        text = f"governor: queued (position {place.get('position', '?')}): {why}; Ctrl-C leaves the queue"
        if text != self.last:  # the daemon tells every change of its place; a line says only what is new
            self._write(text)

    def note(self, text: str) -> None:
        self._write(f"governor: {text}")

    def done(self) -> None:
        if self.live and self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        self.shown = False

    def _write(self, text: str) -> None:
        if self.live:
            sys.stderr.write("\r\x1b[K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
        self.shown, self.last = True, text
