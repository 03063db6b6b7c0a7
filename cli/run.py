"""``governor run``: have the daemon govern this very process, then exec the user's command.

The CLI asks the daemon to launch its own pid; the daemon moves it into a fresh task cgroup
before answering, so after ``exec`` the command runs with the same pid, terminal, environment
and exit code, and all its memory is charged to the task from the first byte.

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
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(group: str | None, cpus: float | None, memory: int | None, io_read: int | None,
        io_write: int | None, socket_option: str | None, cmd: tuple[str, ...]) -> None:
    """Run CMD as a governed task with the given demand.

    Flags not given take the daemon's default task demand. Sizes use K, M, G, T (powers of
    1024). CMD keeps this terminal and its exit code becomes governor's.
    """
    from cli.client import call, socket_path

    demand = {key: value for key, value in
              (("cpu", cpus), ("memory", memory), ("io_read", io_read), ("io_write", io_write))
              if value is not None}
    request = {"op": "launch", "pid": os.getpid(), "group": group, "demand": demand, "command": list(cmd)}
    # DaemonNotRunning / DaemonError propagate to cli.main, which prints one line and exits 1.
    call(socket_path(socket_option), request)
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
