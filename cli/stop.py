"""``governor stop``: end tasks' whole process trees (like ``scancel``)."""

from __future__ import annotations

import click


@click.command(short_help="End tasks' whole process trees.")
@click.argument("tasks", nargs=-1, required=True, metavar="TASK...")
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock).")
def stop(tasks: tuple[str, ...], socket_option: str | None) -> None:
    """End each TASK (an id from `governor ps`): every process in it is killed (SIGKILL); a
    queued task leaves the queue. Your own tasks; root and admins may stop anyone's. A
    user's session is not stopped. Nothing is stopped unless every TASK may be. A task is
    said stopped once its processes are gone; those that outlive the kill for 5 s are
    named, and the exit status is 69.

    \b
    Examples:
      governor stop 7
      governor stop 7 12
    """
    from governor.cli.client import call, socket_path
    from governor.cli.view_common import printable
    from governor.wire.request_types import StopRequest

    for task in call(socket_path(socket_option), StopRequest(tuple(tasks))).stopped:
        click.echo(f"stopped task {printable(task)}")  # an id is the daemon's text: no escape reaches the terminal
