"""What ``governor check-config`` warns of ``[notify]`` on this host: a program the daemon could
not run, or a user it could not run it as (each event's run would then fail, counted in status)."""

from __future__ import annotations

import os
import pwd
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from governor.config.load import Config


def notify_warnings(config: Config) -> list[str]:
    """Why ``config``'s ``[notify]`` command could not run here: its program is no executable
    file, or ``notify.user`` is no user of this host; [] when it could, or none is given."""
    notify = config.notify
    if not notify.command:
        return []
    warnings = []
    program = notify.command[0]
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        warnings.append(f"notify.command: {program} is no executable file here: every notification would fail")
    if notify.user is not None:
        try:
            pwd.getpwnam(notify.user)
        except KeyError:
            warnings.append(f"notify.user: {notify.user!r} is no user of this host: no notification would run")
    return warnings
