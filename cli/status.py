"""``governor status``: ask the daemon for a snapshot and show it (rich tables, or ``--json``)."""

from __future__ import annotations

import click


@click.command(short_help="Capacity, groups, allocations, tasks, usage.")
@click.option("--json", "as_json", is_flag=True, help="Print the status object as one JSON line.")
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock).")
def status(as_json: bool, socket_option: str | None) -> None:
    """Show capacity, groups, allocations, tasks and measured usage.

    Amounts in JSON are base units: cores, bytes, bytes/s; times are Unix seconds.

    \b
    Examples:
      governor status
      governor status --json | jq '.groups | keys'
    """
    import json
    import time

    from governor.cli.client import call, socket_path
    from governor.wire.request_types import StatusRequest

    reply = call(socket_path(socket_option), StatusRequest())
    if as_json:  # the object as the daemon sent it, keys this CLI does not know included
        click.echo(json.dumps(reply.status))
        return
    from governor.cli import view_common as view
    from governor.cli.status_view import status_renderables

    console = view.console()
    for renderable in status_renderables(reply.snapshot, now=time.time()):
        console.print(renderable)
