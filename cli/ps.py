"""``governor ps``: the caller's tasks, running and queued, with their process trees; or the
tasks that ended lately (rich table, or ``--json``)."""

from __future__ import annotations

import click


@click.command(short_help="List your tasks, running, queued or ended.")
@click.option("--all", "everyone", is_flag=True,
              help="Everyone's tasks (another user's without command line, pid or processes, unless you are "
                   "root or an admin).")
@click.option("-u", "--user", "users", metavar="USER", multiple=True,
              help="Only the tasks of USER (a name or uid; repeat it or separate with commas), whoever's, as ps -u.")
@click.option("--group", "groups", metavar="GROUP", multiple=True,
              help="Only the tasks in GROUP (repeat it or separate with commas).")
@click.option("--ended", is_flag=True, help="Tasks that ended lately, with why, wall and CPU time and memory peak.")
@click.option("--json", "as_json", is_flag=True, help="Print the list as one JSON line (schema in docs/user.md).")
@click.option("--format", "fields", metavar="FIELDS",
              help="Plain columns of these comma-separated fields, e.g. id,state,memory. Fields: id, name, group, "
                   "user, pid, state, position, age, cpu, memory, gpus, processes, reason, and each amount by name: "
                   "cpu.guarantee, cpu.cap, cpu.used, memory.reserved, memory.cap, memory.used (one set per "
                   "resource; a misspelt field lists them all); with --ended: id, name, group, user, ended, exit, "
                   "wall, cpu, peak, reason, why.")
@click.option("--noheader", is_flag=True, help="Plain columns without the header line.")
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock).")
def ps(everyone: bool, users: tuple[str, ...], groups: tuple[str, ...], ended: bool, as_json: bool,
       fields: str | None, noheader: bool, socket_option: str | None) -> None:
    """List your tasks: id, name, group, state, age, and CPU and memory as guarantee / cap /
    use, the GPUs each holds (when one does), with the processes in each. With --ended, each
    ended task's exit code or the signal that ended it (-: not known). Another user's tasks
    (--all, -u, --group) come without command line, pid or processes, unless you are root or
    an admin.

    On a terminal, a table that leaves out whole columns rather than wrap or cut a value.
    Piped, or with --format or --noheader, plain columns, one line per task, for scripts.
    Amounts in JSON are base units: cores, bytes; times are Unix seconds.

    \b
    Examples:
      governor ps
      sudo governor ps --all
      governor ps -u alice --group physics
      governor ps --ended --json
      governor ps --noheader --format id,state,memory
    """
    import json
    import time

    from governor.cli import ps_plain
    from governor.cli.client import call, socket_path
    from governor.errors import ControlSocketError
    from governor.wire.ps_types import EndedRecord, TaskRow, decode_rows
    from governor.wire.request_types import PsRequest
    from governor.wire.status_json import MalformedStatus

    try:
        chosen = None if fields is None else ps_plain.parse_fields(fields, ended=ended)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--format") from None
    path = socket_path(socket_option)
    key = "ended" if ended else "tasks"
    request = PsRequest(all=everyone, ended=ended, users=_names(users), groups=_names(groups))
    rows = getattr(call(path, request), key)
    if not isinstance(rows, list):
        raise ControlSocketError(path, f"the daemon's ps reply has no {key} list")
    if as_json:
        click.echo(json.dumps(rows))
        return
    try:
        rows = decode_rows(EndedRecord if ended else TaskRow, rows, key)
    except MalformedStatus as error:  # a daemon's bug, or a hostile one
        raise ControlSocketError(path, f"the daemon's ps reply {error}") from None
    if not rows and (unknown := [name for name in request.users if not _user_exists(name)]):
        from governor.config.units import quoted  # as ps -u says "user name does not exist"

        raise click.BadParameter(f"no user named {quoted(unknown[0])} on this host", param_hint="'-u' / '--user'")
    plain = chosen is not None or noheader or not on_terminal()
    others = everyone or bool(users) or bool(groups)  # a user column: the rows may be others'
    if not rows and not plain:
        click.echo("no tasks ended lately" if ended else "no tasks running or queued")
        return
    if plain:
        from governor.cli.ps_view import holds_gpus

        chosen = chosen or ps_plain.default_fields(ended=ended, users=others, gpus=holds_gpus(rows))
        for line in ps_plain.lines(rows, chosen, now=time.time(), ended=ended, header=not noheader):
            click.echo(line)
        return
    from governor.cli.ps_view import ended_table, tasks_table
    from governor.cli.view_common import console

    table = ended_table if ended else tasks_table
    console().print(table(rows, now=time.time(), users=others))


def _names(given: tuple[str, ...]) -> tuple[str, ...]:
    """Names given as repeated options and comma-separated lists, each once."""
    return tuple(dict.fromkeys(name.strip() for item in given for name in item.split(",") if name.strip()))


def _user_exists(name: str) -> bool:
    """Whether ``name`` is a uid or a user of this host (one whose tasks only ended records
    name, since removed, is found when a record lists it: asked only where none did)."""
    import pwd

    if name.isdigit():
        return True
    try:
        pwd.getpwnam(name)
    except (KeyError, ValueError):  # ValueError: a NUL in it
        return False
    return True


def on_terminal() -> bool:
    """Whether ps writes to a terminal (a person reads a table) rather than a pipe or a file."""
    import sys

    return sys.stdout.isatty()
