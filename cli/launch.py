"""What ``governor run`` does once its options are parsed, without click: build the launch
request, ask the daemon (waiting in its queue if need be), exec the command.

This is the hot path: :mod:`governor.cli.entry` runs it for a plain ``governor run`` without loading
click (65 ms of imports on a slow host, three times Python's own start), so it imports the
stdlib client, ``governor.config.units`` and the resource registry only, and no dataclasses,
typing or contextlib (issue 46): tests/unit/test_run_launch_modules.py holds the set of modules
loaded up to the exec, beyond what any socket client loads (``import os, socket, json``).
"""

from __future__ import annotations

import os
from collections import namedtuple


class RunOption(namedtuple("RunOption", "flag keyword parse metavar help")):
    """One of ``governor run``'s own options, besides one per resource
    (:func:`governor.config.resources.flags`): both :func:`plain` and the click command
    (:mod:`governor.cli.run`) are built from :data:`RUN_OPTIONS`.

    Attributes:
        flag: the option (``--group``).
        keyword: :func:`start`'s keyword for its value.
        parse: its text → its value (raises ValueError); None for a flag without a value (True
            when given, else False).
        metavar, help: as ``governor run --help`` shows it.

    A named tuple: this module loads no dataclasses (issue 46).
    """

    __slots__ = ()


def time_limit(text: str) -> float:
    """A ``--time-limit`` like ``90s``, ``10m``, ``1h30m`` or plain seconds, in seconds > 0
    and at most ten years (raises ValueError)."""
    from governor.config.units import MAX_TIME_LIMIT_S, parse_duration, quoted

    seconds = parse_duration(text)
    if seconds > MAX_TIME_LIMIT_S:
        raise ValueError(f"must be at most {MAX_TIME_LIMIT_S // 86_400} days, got {quoted(text)}")
    return seconds


RUN_OPTIONS = (
    RunOption("--group", "group", str, None, "Group to run in (default: the daemon picks yours)."),
    RunOption("--no-wait", "no_wait", None, None,
              "Fail instead of waiting: exit 75 when the memory or GPUs do not fit now, 69 when no daemon "
              "answers (without it, run waits for a restarting daemon)."),
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
    from governor.config.resources import flags as resource_flags

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
    from governor.cli.become_task import execute, hand_gpus, launch_waiting, resolve
    from governor.cli.client import socket_path
    from governor.wire.launch_types import LaunchRequest

    resolve(cmd[0])
    request = LaunchRequest(pid=os.getpid(), group=group, demand=demand, command=shown(cmd), wait=not no_wait,
                            name=name, time_limit=time_limit)
    if not exec_in_place:
        from governor.cli.summary import run_with_summary

        run_with_summary(socket_path(socket_option), request, cmd, summary=summary, verbose=verbose)
    started = launch_waiting(socket_path(socket_option), request)
    hand_gpus(started)
    execute(cmd)


def shown(cmd: tuple[str, ...]) -> tuple[str, ...]:
    """``cmd`` as the daemon shows it (status, ps, the journal): at most
    :data:`~governor.wire.fields.MAX_COMMAND_ITEMS` words of at most
    :data:`~governor.wire.fields.MAX_COMMAND_ITEM_CHARS` characters, :data:`SHOWN_CHARS` in all,
    a longer word cut and the words past them counted (``…`` marks each cut). The command itself
    runs whole: the daemon refused ``governor run -- gcc *.c`` past 64 files, and a long
    ``sh -c`` script."""
    from governor.wire.fields import MAX_COMMAND_ITEM_CHARS, MAX_COMMAND_ITEMS

    words: list[str] = []
    left = SHOWN_CHARS
    for at, word in enumerate(cmd):
        if left <= 0 or (len(words) == MAX_COMMAND_ITEMS - 1 and len(cmd) > MAX_COMMAND_ITEMS):
            words.append(f"… {len(cmd) - at} more")
            break
        limit = min(MAX_COMMAND_ITEM_CHARS, left)
        words.append(word if len(word) <= limit else word[:limit - 1] + "…")
        left -= len(words[-1])
    return tuple(words)


# Characters of a command sent to be shown: its request line stays within the 64 KiB the daemon
# reads (protocol.MAX_LINE_BYTES) even were each one sent as JSON's six-byte \uXXXX.
SHOWN_CHARS = 8192
