"""``governor run``: have the daemon govern this very process, then exec the user's command.

The CLI asks the daemon to launch its own pid; the daemon moves it into a fresh task cgroup
before answering, so after ``exec`` the command runs with the same pid, terminal, environment
and exit code, and all its memory is charged to the task from the first byte.

When the task's declared memory does not fit yet, the daemon queues it and the CLI waits,
saying so on stderr: one line updated in place on a terminal, a plain line per change
otherwise. Ctrl-C leaves the queue (exit 130); ``--no-wait`` refuses at once (exit 75). If
the daemon restarts meanwhile, the CLI queues again (nothing had started).

This is the hot path: it imports click, the stdlib client and ``governor.units`` only (a test
checks that rich, psutil, SciPy and the allocator stay unloaded).
"""

from __future__ import annotations

import errno
import math
import os
import sys

import click

# Exit statuses a shell uses when it cannot run a command.
EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126
# sysexits.h EX_TEMPFAIL: --no-wait and the task's memory does not fit now.
EXIT_WOULD_WAIT = 75
# 128 + SIGINT, as a shell reports a Ctrl-C.
EXIT_INTERRUPTED = 130
# How long to wait for a restarting daemon before giving up a queued launch.
RESTART_GRACE_S = 60.0


def _cores(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"must be a number of cores > 0, got {value}")
    return value


def _bytes(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """A size like ``4G`` (K/M/G/T are powers of 1024) as whole bytes, rounded to the nearest."""
    if value is None:
        return None
    from governor.units import parse_quantity

    try:
        return round(parse_quantity(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--group", help="Group to run in (default: the daemon picks yours).")
@click.option("--cpus", type=float, callback=_cores, help="CPU demand in cores, e.g. 1.5.")
@click.option("--memory", metavar="SIZE", callback=_bytes, help="Memory demand, e.g. 4G.")
@click.option("--io-read", metavar="RATE", callback=_bytes, help="Read bandwidth demand per second, e.g. 200M.")
@click.option("--io-write", metavar="RATE", callback=_bytes, help="Write bandwidth demand per second, e.g. 100M.")
@click.option("--no-wait", is_flag=True, help="Fail (exit 75) instead of waiting when the memory "
                                                 "does not fit now.")
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(group: str | None, cpus: float | None, memory: int | None, io_read: int | None,
        io_write: int | None, no_wait: bool, socket_option: str | None, cmd: tuple[str, ...]) -> None:
    """Run CMD as a governed task with the given demand.

    Flags not given take the daemon's default task demand. Sizes use K, M, G, T (powers of
    1024). The demand is a cap: CMD never gets more; when others are idle it may use their
    share up to it. CMD starts when its memory fits; until then it waits in a queue. CMD
    keeps this terminal and its exit code becomes governor's.
    """
    from cli.client import socket_path

    demand = {key: value for key, value in
              (("cpu", cpus), ("memory", memory), ("io_read", io_read), ("io_write", io_write))
              if value is not None}
    request = {"op": "launch", "pid": os.getpid(), "group": group, "demand": demand, "command": list(cmd),
               "wait": not no_wait}
    # DaemonNotRunning / DaemonError propagate to cli.main, which prints one line and exits 1.
    started = _launch(socket_path(socket_option), request)
    if started.get("nested"):
        click.echo(f"governor: already in task {started.get('task')} (group {started.get('group')}): "
                   f"{cmd[0]} runs there, with that task's caps", err=True)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        # Like a shell: 127 when the command does not exist, 126 when it exists but cannot run.
        if exc.errno == errno.ENOENT:
            reason, status = "command not found", EXIT_NOT_FOUND
        elif exc.errno in (errno.EACCES, errno.EPERM):
            reason, status = "permission denied", EXIT_CANNOT_EXECUTE
        else:
            reason, status = exc.strerror or str(exc), EXIT_CANNOT_EXECUTE
        click.echo(f"governor: {cmd[0]}: {reason}", err=True)
        sys.exit(status)


def _launch(path: str, request: dict) -> dict:
    """Ask the daemon to start this process as a task, waiting in its queue if need be; the
    started task's payload (``nested``: this process already was in that task)."""
    import time

    from cli.client import QueueInterrupted, launch
    from governor.errors import DaemonError, DaemonNotRunning

    line = _QueueLine()
    restarted_by = None  # once the daemon went away: how long to wait for it to come back
    try:
        while True:
            try:
                return launch(path, request, line.show)
            except QueueInterrupted:
                line.note("the daemon went away; queueing again when it is back")
                restarted_by = time.monotonic() + RESTART_GRACE_S
            except DaemonNotRunning:
                if restarted_by is None or time.monotonic() > restarted_by:
                    raise
                time.sleep(0.5)
    except DaemonError as error:
        if error.code != "would_wait":
            raise
        line.done()
        click.echo(f"governor: error: {error.message} (--no-wait given)", err=True)
        sys.exit(EXIT_WOULD_WAIT)
    except KeyboardInterrupt:
        line.done()
        click.echo("governor: left the queue; nothing was started", err=True)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        line.done()


class _QueueLine:
    """The "waiting" message on stderr: rewritten in place on a terminal, one line per change
    otherwise (logs, pipes)."""

    def __init__(self) -> None:
        self.live = sys.stderr.isatty()
        self.shown = False

    def show(self, place: dict) -> None:
        from governor.units import format_size

        holders = ", ".join(f"{h['group']} {format_size(h['memory'])}" for h in place.get("held_by", []))
        text = (f"governor: queued (position {place.get('position', '?')}): waiting for "
                f"{format_size(place.get('waiting_for', 0))} of memory to free"
                + (f", held by {holders}" if holders else "") + "; Ctrl-C leaves the queue")
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
        self.shown = True
