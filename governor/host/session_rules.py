"""Whose processes outside ``governor run`` are governed, and as what (docs/admin.md, "Sessions").

A governed user is one the config gives a group. Every process of such a user that is not in a
task of ``governor run`` belongs to the user's **session**: one task per user, in the user's
default group, with the ``[sessions]`` demand as its cap and its DRF demand. Without sessions,
using governor would make a user worse off than not using it: their ``governor run`` work would
be capped while their neighbour's ``make -j32`` typed in a shell would not.

A process belongs to the user of its **real** uid: the one ``su``, ``runuser``, ``sshd`` and
cron switch to before running the user's command, and the one a setuid program (``passwd``)
does not change. Never governed: root, system users (uid below ``UID_MIN`` of
``/etc/login.defs``, and ``nobody``), ``[sessions] exempt`` users, uids the user database does not know, and
users in no group.
"""

from __future__ import annotations

import pwd
from pathlib import Path

from governor.host import access
from governor.config.load import Config

LOGIN_DEFS = Path("/etc/login.defs")
# The kernel's overflow uid, "nobody": above UID_MIN, yet never a person.
NOBODY_UID = 65534
# useradd's own default when login.defs says nothing (shadow-utils).
DEFAULT_UID_MIN = 1000


def login_uid_min(path: Path = LOGIN_DEFS) -> int:
    """The first uid of a login (non-system) user: ``UID_MIN`` in ``path``, else 1000 (also
    when the file is missing or unreadable)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return DEFAULT_UID_MIN
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "UID_MIN" and fields[1].isdigit() and int(fields[1]) > 0:
            return int(fields[1])
    return DEFAULT_UID_MIN


class SessionOwners:
    """Who has a session, in which group: :meth:`owner` per uid, from the config in force and
    the host's user database (looked up once per uid until :meth:`forget`).

    Args:
        config: the config in force (``[sessions]``, ``[groups]``).
        uid_min: the first login uid (:func:`login_uid_min`).
    """

    def __init__(self, config: Config, uid_min: int):
        self.config = config
        self.uid_min = uid_min
        self._owners: dict[int, tuple[str, str] | None] = {}

    @property
    def enabled(self) -> bool:
        return self.config.sessions.enabled

    def owner(self, uid: int) -> tuple[str, str] | None:
        """``(user name, group)`` of ``uid``'s session, or None when ``uid`` is not governed."""
        if not self.enabled or uid == 0 or uid < self.uid_min or uid == NOBODY_UID:
            return None
        if uid not in self._owners:
            self._owners[uid] = self._look_up(uid)
        return self._owners[uid]

    def forget(self) -> None:
        """Look users up again from now on (users and groups change while the daemon runs)."""
        self._owners.clear()

    def _look_up(self, uid: int) -> tuple[str, str] | None:
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            return None
        if entry.pw_name in self.config.sessions.exempt:
            return None
        who = access.identify(uid, entry.pw_gid)
        group = self.config.group_for(who.user, who.groups)
        return None if group is None else (who.user, group)
