"""``governor history``: what the daemon journaled (launches, starts, ends, refusals, sessions),
as a table or as JSON lines (issue 47; docs/admin.md, "History and replay")."""

from __future__ import annotations

from collections.abc import Iterable

import click

from governor.cli.history_input import journal_options


@click.command("history", short_help="Show the host's journal of launches, starts and ends.")
@journal_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (JSON lines), as journaled.")
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket, asked when the journal is not readable here, or when named (this option, "
                   "$GOVERNOR_SOCKET) and neither --config nor --dir is (default: /run/governor/governor.sock).")
def history(since: str, until: str | None, as_json: bool, config_file: str, directory: str | None,
            socket_option: str | None) -> None:
    """Show what the daemon journaled in a period: each launch, start (with its time in the
    queue), end (with its CPU time and memory peak), refused launch and session, oldest first.
    Another user's entries show no command line or pid (the journal never holds them), as
    every view shows them; with --json, such an entry says "private". Root reads the journal's files (those of
    --config's daemon, or --dir); anyone else, and root naming a daemon by its socket alone,
    asks the daemon, which sends at most the newest 100,000 entries (40 MB) of the period and paces
    each user's requests (a tenth of its time; exit 75: ask again when it says).

    \b
    Examples:
      sudo governor history --since 1d
      sudo governor history --since 2026-11-20 --until 2026-11-21 --json | jq .
    """
    import json
    import os
    import time

    from governor.cli.history_input import entries, journal_dir, period, reader
    from governor.cli.view_common import printable
    from governor.wire.visibility import rows_for

    start, end = period(since, until, time.time())
    found, config = journal_dir(config_file, directory)
    # The journal is the daemon's (0700), or in a directory of its own (--history-dir): not
    # readable here, the daemon is asked; where none answers either, what is wrong here is said.
    # A daemon named by its socket alone is asked too: the installed config's journal is
    # another daemon's (root's history read /var/lib/governor/history's, empty, and said so).
    asked = directory is None and (_names_another_daemon(socket_option, config_file)
                                   or not os.access(found, os.R_OK | os.X_OK))
    if asked:
        from governor.errors import DaemonNotRunning

        try:
            shown = _asked(socket_option, start, end)
        except DaemonNotRunning:
            if os.path.exists(found):
                raise
            entries(found, start, end)  # raises: no journal here
            raise
    else:
        shown = rows_for((entry for entry in entries(found, start, end) if entry.get("kind") != "daemon"),
                         reader(config))
    if as_json:
        _echo_lines(json.dumps(entry, separators=(",", ":")) for entry in shown)
        return
    if not shown:
        click.echo("nothing journaled in this period" + ("" if asked else f" in {printable(str(found))}"))
        return
    from governor.cli.command_failure import Failure
    from governor.cli.failures import EXIT_FAILURE
    from governor.cli.history_view import history_lines
    from governor.wire.history_types import decode_entries
    from governor.wire.status_json import MalformedStatus

    try:
        typed = decode_entries(list(shown), "history")
    except MalformedStatus as error:  # a daemon's bug or a hostile one; a journal file edited by hand
        source = "the daemon's history reply" if asked else f"the journal in {found}"
        raise Failure(f"{source} {error}", EXIT_FAILURE) from None
    lines = history_lines(typed)
    click.secho(next(lines), bold=True)  # the header; styled on a terminal only
    _echo_lines(lines)


def _names_another_daemon(socket_option: str | None, config_file: str) -> bool:
    """Whether the command names a daemon by its socket alone (``--socket`` or
    ``$GOVERNOR_SOCKET``, not the installed unit's, and no ``--config``): the installed
    config's journal is not that daemon's."""
    import os

    from click.core import ParameterSource

    from governor.cli.client import DEFAULT_SOCKET

    named = socket_option or os.environ.get("GOVERNOR_SOCKET")
    given = click.get_current_context().get_parameter_source("config_file") is not ParameterSource.DEFAULT
    return bool(named) and not given and os.path.realpath(named) != os.path.realpath(DEFAULT_SOCKET)


def _echo_lines(lines: Iterable[str]) -> None:
    """Print ``lines``, a thousand a write (one echo a line was a second of a week's 300,000)."""
    chunk: list[str] = []
    for text in lines:
        chunk.append(text)
        if len(chunk) == 1000:
            click.echo("\n".join(chunk))
            chunk.clear()
    if chunk:
        click.echo("\n".join(chunk))


def _asked(socket_option: str | None, since: float | None, until: float | None) -> list[dict]:
    """The period's entries as the daemon shows them to this user."""
    from governor.cli.client import call, socket_path
    from governor.wire.protocol import HistoryRequest

    reply = call(socket_path(socket_option), HistoryRequest(since, until), timeout=120)
    if reply.truncated:
        click.echo("governor: only the newest entries of the period are shown (at most 100,000, 40 MB of them); "
                   "ask a shorter one", err=True)
    if reply.skipped:
        lines = "1 line" if reply.skipped == 1 else f"{reply.skipped:,} lines"
        click.echo(f"governor: the daemon skipped {lines} of its journal that {'is' if reply.skipped == 1 else 'are'} "
                   "no entry (which: governor history --dir DIR, the journal's directory, as root)", err=True)
    return reply.entries
