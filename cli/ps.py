"""``governor ps``: the caller's tasks, running and queued, with their process trees; or the
tasks that ended lately (rich table, or ``--json``)."""

from __future__ import annotations

import click


@click.command(short_help="List your tasks, running, queued or ended.")
@click.option("--all", "everyone", is_flag=True, help="Everyone's tasks (root and admins).")
@click.option("--ended", is_flag=True, help="Tasks that ended lately, with why, wall and CPU time and memory peak.")
@click.option("--json", "as_json", is_flag=True, help="Print the list as one JSON line (schema in docs/user.md).")
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock).")
def ps(everyone: bool, ended: bool, as_json: bool, socket_option: str | None) -> None:
    """List your tasks: id, name, group, state, age, and CPU and memory as guarantee / cap /
    use, the GPUs each holds (when one does), with the processes in each.

    Amounts in JSON are base units: cores, bytes; times are Unix seconds.

    \b
    Examples:
      governor ps
      sudo governor ps --all
      governor ps --ended --json
    """
    import json
    import time

    from governor.cli.client import call, socket_path
    from governor.errors import ControlSocketError

    path = socket_path(socket_option)
    key = "ended" if ended else "tasks"
    rows = call(path, {"op": "ps", "all": everyone, "ended": ended}).get(key)
    if not isinstance(rows, list):
        raise ControlSocketError(path, f"the daemon's ps reply has no {key} list")
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no tasks ended lately" if ended else "no tasks running or queued")
        return
    from rich.console import Console

    from governor.cli.ps_view import ended_table, tasks_table

    table = ended_table if ended else tasks_table
    Console().print(table(rows, now=time.time(), users=everyone))
