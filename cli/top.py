"""``governor top``: a live view of the daemon (the screen is ``cli/top_view.py``, the keys
``cli/top_state.py``, the terminal and the stream ``cli/top_terminal.py``)."""

from __future__ import annotations

import click


@click.command(short_help="Watch the daemon live, like htop.")
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock).")
@click.option("-d", "--interval", type=click.FloatRange(0.5, 60), default=1.0, show_default=True,
              callback=lambda ctx, param, value: _a_number(value), help="Seconds between the daemon's updates.")
@click.option("-b", "--batch", is_flag=True,
              help="Print plain-text snapshots on stdout, one per update, instead of the live screen (no keys).")
@click.option("-n", "--iterations", type=click.IntRange(min=1), metavar="N",
              help="With --batch: stop after N snapshots (default: until interrupted).")
def top(socket_option: str | None, interval: float, batch: bool, iterations: int | None) -> None:
    """Watch groups, shares, allocations, usage and pressure live, like htop.

    Keys: q quit, ↑/↓ or j/k select a group, enter show its tasks, s next sort column,
    / filter by group name (enter applies, esc clears), ? help. While the daemon cannot be
    reached, top says so and reconnects every second. With -b (batch, as top -b), snapshots
    go to stdout as plain text, every group's tasks shown, blank-line separated.

    \b
    Examples:
      governor top
      governor top --interval 5
      governor top -b -n 1                  # one snapshot, e.g. for a log
      governor top -b -d 10 >> top.log      # one every 10 s
    """
    from governor.cli.client import socket_path

    if iterations is not None and not batch:
        raise click.UsageError("-n/--iterations goes with -b/--batch")
    if batch:
        from governor.cli.client import stream
        from governor.cli.top_batch import snapshots
        from governor.wire.request_types import WatchRequest

        updates = (reply.snapshot for reply in stream(socket_path(socket_option), WatchRequest(interval),
                                                     max(5.0, 3 * interval)))
        for count, text in enumerate(snapshots(updates, iterations)):
            click.echo(("\n" if count else "") + text)
        return
    from governor.cli.top_terminal import run

    run(socket_path(socket_option), interval)


def _a_number(interval: float) -> float:
    """``interval``, refused when NaN: FloatRange lets it through (it fails every comparison),
    and the watch request it went into could not be encoded (a traceback over the screen)."""
    if interval != interval:
        raise click.BadParameter(f"{interval} is not in the range 0.5<=x<=60.")
    return interval
