"""``governor top``: a live view of the daemon (the screen is ``cli/top_view.py``, the keys
``cli/top_state.py``, the terminal and the stream ``cli/top_terminal.py``)."""

from __future__ import annotations

import click


@click.command(short_help="Watch the daemon live, like htop.")
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock).")
@click.option("--interval", type=click.FloatRange(0.5, 60), default=1.0, show_default=True,
              help="Seconds between the daemon's updates.")
def top(socket_option: str | None, interval: float) -> None:
    """Watch groups, shares, allocations, usage and pressure live, like htop.

    Keys: q quit, ↑/↓ or j/k select a group, enter show its tasks, s next sort column,
    / filter by group name (enter applies, esc clears), ? help. While the daemon cannot be
    reached, top says so and reconnects every second.

    \b
    Examples:
      governor top
      governor top --interval 5
    """
    from governor.cli.client import socket_path
    from governor.cli.top_terminal import run

    run(socket_path(socket_option), interval)
