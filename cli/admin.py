"""Admin commands (root, or the config's admin_group): ``governor reload``, ``governor set-weight``."""

from __future__ import annotations

import click

from governor.cli.completion import group_names

_SOCKET_HELP = "Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock)."


@click.command()
@click.option("--socket", "socket_option", metavar="PATH", help=_SOCKET_HELP)
def reload(socket_option: str | None) -> None:
    """Re-read the daemon's config file and refill. A bad file is refused (file, key, reason)
    and the config in force stays.

    \b
    Examples:
      sudo governor reload
    """
    from governor.cli.client import call, socket_path
    from governor.wire.request_types import ReloadRequest

    reply = call(socket_path(socket_option), ReloadRequest())
    click.echo(f"reloaded {reply.config}")


def _weight(ctx: click.Context, param: click.Parameter, text: str) -> float:
    """A group's weight as a config gives it: from 0.001 to 1000 (nan, inf are neither), in
    ASCII digits with no digit groups (``1_0`` and ``٣`` were 10 and 3)."""
    from governor.config.resource_values import plain_number
    from governor.config.settings import GROUP_WEIGHT_RANGE
    from governor.config.units import quoted

    try:
        value = float(plain_number(text, "float"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a valid float") from None  # click's words, as before
    low, high = GROUP_WEIGHT_RANGE
    if not low <= value <= high:
        # As typed: "got 1000" was said of 1000.0001.
        raise click.BadParameter(f"must be a weight from {low:g} to {high:g}, got {quoted(text)}")
    return value


@click.command("set-weight", short_help="Set a group's weight until the next reload.")
@click.argument("group", shell_complete=group_names)
@click.argument("weight", callback=_weight)
@click.option("--socket", "socket_option", metavar="PATH", help=_SOCKET_HELP)
def set_weight(group: str, weight: float, socket_option: str | None) -> None:
    """Give GROUP the WEIGHT (0.001 to 1000) until the next reload or restart, and refill.

    \b
    Examples:
      sudo governor set-weight physics 3
    """
    from governor.cli.client import call, socket_path
    from governor.wire.request_types import SetWeightRequest

    reply = call(socket_path(socket_option), SetWeightRequest(group, weight))
    click.echo(f"weight of {reply.group} is now {reply.weight:g}")
