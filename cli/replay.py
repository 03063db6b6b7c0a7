"""``governor replay CONFIG``: the host's history re-run under a proposed config, recorded and
proposed side by side (issue 47; docs/admin.md, "History and replay")."""

from __future__ import annotations

import click

from governor.cli.history_input import journal_options

# The width replay's tables are laid out in when piped: wider than any row they hold (names are
# at most 64 characters), so none is cut; rich pads no line to it.
PIPED_WIDTH = 1000


@click.command("replay", short_help="Re-run the host's history under a proposed config.")
@click.argument("proposed", metavar="CONFIG", type=click.Path())
@journal_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--plot", "plot_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Also draw the groups' waits and shares, recorded beside proposed, to FILE (.png, .svg, "
                   ".pdf); needs matplotlib (pip install 'drf-governor[plot]').")
def replay(proposed: str, since: str, until: str | None, as_json: bool, config_file: str,
           directory: str | None, plot_file: str | None) -> None:
    """Replay the launches and sessions the daemon journaled in a period under the proposed
    CONFIG, in simulated time, through the daemon's own admission, queue, quotas, H-DRF
    filling and fair share, and show per group and per user, recorded beside proposed: tasks
    started, refused and still queued, queue wait p50 and p95, CPU share (the filling's
    guarantee) and memory share (reserved) of the host averaged over the period, and the
    fair-share standing at its end. Each task runs as long as it ran; what a replay cannot
    know is listed with the answer. CONFIG is checked as the daemon checks it.

    \b
    Examples:
      sudo governor replay /etc/governor/proposed.toml --since 7d
      sudo governor replay new.toml --since 2026-11-01 --until 2026-11-08 --json
      sudo governor replay new.toml --since 7d --plot replay.png
    """
    import os
    import time

    from governor.cli.history_input import entries, journal_dir, period
    from governor.cli.inputs import read_input
    from governor.config.load import parse_config
    from governor.daemon import replay as replaying
    from governor.daemon.replay_input import recorded
    from governor.daemon.replay_report import compare

    now = time.time()
    config = parse_config(read_input(proposed), proposed)
    start, end = period(since, until, now)
    found, in_force = journal_dir(config_file, directory)
    end = now if end is None else end
    history = recorded(entries(found, None, end), now - 7 * 86400 if start is None else start, end)
    if history.capacity is None:
        raise click.ClickException(f"the history in {found} holds no daemon start before the period's end: "
                                   "its capacity is not known")
    # A capacity the proposed config sets is what it divides; else the host's, as recorded at
    # each moment (a reload may have changed it).
    explicit = {name: float(amount) for name, amount in (("cpu", config.cpu_cores), ("memory", config.memory_bytes))
                if amount is not None}
    proposed_capacities = [(at, {**capacity, **explicit}) for at, capacity in history.capacities]
    unix_groups = {job.user: _unix_groups(job.uid) for job in history.jobs}
    report = compare(history, replaying.timeline(history, in_force, history.capacities),
                     replaying.replay(history, config, proposed_capacities, unix_groups), config)
    if plot_file is not None:
        from governor.cli.replay_plot import plot_report

        plot_report(report, plot_file, proposed)
    if as_json:
        import json

        click.echo(json.dumps(report))
        return
    from governor.cli.replay_view import replay_tables
    from governor.cli.view_common import console as plain_console

    console = plain_console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped (a log, a file): every name and figure whole, however wide the tables; at
        # rich's 80 columns their cells were cut ("physi…  recor…"). A terminal's width holds.
        console = plain_console(width=PIPED_WIDTH)
    for renderable in replay_tables(report):
        console.print(renderable)


def _unix_groups(uid: int) -> tuple[str, ...]:
    """The Unix groups of the user with ``uid`` today, as a launch of theirs would find them
    (none for a user this host no longer has): the journal keeps no membership."""
    import pwd

    from governor.host.access import identify

    try:
        gid = pwd.getpwuid(uid).pw_gid
    except (KeyError, OverflowError):
        return ()
    return identify(uid, gid).groups
