"""Group names for shell completion (click's own: ``_GOVERNOR_COMPLETE=bash_source governor``).

``--group`` and the GROUP arguments complete to the groups this user can see: the ``[groups.*]``
tables of the config file (``/etc/governor/governor.toml`` is world-readable as installed),
then whatever the daemon reports, if it answers within :data:`DAEMON_TIMEOUT_S` (the groups
with tasks, per-user groups included, and every configured one). Completion runs inside the
user's shell at each Tab: it must be quick and must never fail, so every error gives fewer
names, never a traceback.
"""

from __future__ import annotations

import click
from click.shell_completion import CompletionItem

from governor.cli.daemon_cmd import DEFAULT_CONFIG

# A Tab waits at most this long for the daemon.
DAEMON_TIMEOUT_S = 0.3


def group_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """A click ``shell_complete`` callback: the known group names starting with ``incomplete``."""
    names = dict.fromkeys([*_configured(DEFAULT_CONFIG), *_from_daemon(ctx.params.get("socket_option"))])
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def _configured(path: str) -> list[str]:
    """The config's explicit group names (``"*"``, one group per user, is no name); [] when the
    file cannot be read or parsed."""
    import tomllib

    try:
        with open(path, "rb") as file:
            groups = tomllib.load(file).get("groups", {})
    except (OSError, ValueError, RecursionError):  # tomllib.TOMLDecodeError is a ValueError; [[[…]]] recurses
        return []
    return [name for name in groups if name != "*"] if isinstance(groups, dict) else []


def _from_daemon(socket_option: str | None) -> list[str]:
    """The groups the daemon's ``explain`` names (running and configured); [] when it does not
    answer in time or at all."""
    from governor.cli.client import call, socket_path
    from governor.errors import GovernorError
    from governor.wire.request_types import ExplainRequest

    try:
        answer = call(socket_path(socket_option), ExplainRequest(), timeout=DAEMON_TIMEOUT_S).explain
    except GovernorError:
        return []
    return [str(name) for key in ("groups", "configured") if isinstance(answer.get(key), dict) for name in answer[key]]
