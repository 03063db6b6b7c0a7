"""``governor explain``: why the live host is divided the way it is (reasons, then the filling)."""

from __future__ import annotations

import click

from governor.cli.completion import group_names


@click.command(short_help="Why each group gets what it gets.")
@click.argument("group", required=False, shell_complete=group_names)
@click.option("--json", "as_json", is_flag=True, help="Print the explain object as one JSON line.")
@click.option("--socket", "socket_option", metavar="PATH",
              help="Daemon socket (default: $GOVERNOR_SOCKET, else /run/governor/governor.sock).")
def explain(group: str | None, as_json: bool, socket_option: str | None) -> None:
    """Show why each group's share stopped growing (its demand was met, or a resource it needs
    ran out), the tasks waiting for their declared memory to fit (if any), then the daemon's
    last progressive filling step by step, like the DRF paper's Table 1. Where the host has
    pressure stall information (PSI), what each group's tasks waited for over the last 10 s
    ("physics: stalled 23 % on memory over the last 10 s"). With GROUP, only that group (and
    only its entries in the JSON), and the stalls of each of its tasks; a group of the config
    with no task running shows its weight and the share it is sure of once it runs one.

    Amounts in JSON are base units: cores, bytes, bytes/s; shares are fractions of the host.

    \b
    Examples:
      governor explain
      governor explain physics
      governor explain physics --json
    """
    import time

    from governor.cli.client import call, socket_path
    from governor.errors import ControlSocketError
    from governor.wire.request_types import ExplainRequest

    path = socket_path(socket_option)
    answer = call(path, ExplainRequest()).explain
    if not isinstance(answer.get("groups"), dict):
        raise ControlSocketError(path, "the daemon's explain reply has no explain object")
    configured = answer.get("configured") if isinstance(answer.get("configured"), dict) else {}
    # A group whose only task waits (a user's own group of "*", made at her first launch) is in
    # neither: it is known by its queue entries.
    queue = answer.get("queue") if isinstance(answer.get("queue"), list) else []
    waiting = [q.get("group") for q in queue if isinstance(q, dict) and isinstance(q.get("group"), str)]
    if group is not None and group not in answer["groups"] and group not in configured and group not in waiting:
        from governor.cli.command_failure import Failure
        from governor.cli.failures import EXIT_BAD_INPUT

        known = ", ".join(dict.fromkeys([*answer["groups"], *configured, *waiting])) or "none"
        raise Failure(f"no group {group!r} on this host", EXIT_BAD_INPUT, hint=f"groups: {known}", code="not_found")
    if as_json:
        import json

        if group is not None:
            answer = {**answer, "groups": {g: v for g, v in answer["groups"].items() if g == group},
                      "configured": {g: v for g, v in configured.items() if g == group},
                      "queue": [q for q in queue if isinstance(q, dict) and q.get("group") == group]}
        click.echo(json.dumps(answer))
        return
    from governor.cli import view_common as view
    from governor.cli.explain_view import explain_renderables

    from governor.wire.status_json import MalformedStatus

    try:
        renderables = explain_renderables(answer, group, now=time.time())
    except MalformedStatus as error:  # its queue, psi or foreign, which status carries too
        raise ControlSocketError(path, f"the daemon's explain reply {error}") from None
    console = view.console()
    for renderable in renderables:
        console.print(renderable)
