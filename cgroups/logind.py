"""Where logind keeps each user's login sessions: ``user.slice/user-UID.slice`` (pam_systemd),
relative to the cgroup v2 mount. Pure names; :mod:`governor.cgroups.systemd` sets their limits."""

from __future__ import annotations

import re

__all__ = ["LOGIN_SLICES", "is_login_slice", "login_slice", "login_uid"]

LOGIN_SLICES = "user.slice"
# A process's path in the tree (``/proc/<pid>/cgroup``) inside a user's slice, scopes below it.
_IN_LOGIN_SLICE = re.compile(r"/user\.slice/user-(\d+)\.slice(?:/|$)")
# Built once: every cgroup operation asks (a status of 10,000 tasks, 11,000 times).
_LOGIN_SLICE_PREFIX = f"{LOGIN_SLICES}/user-"


def login_slice(uid: int) -> str:
    """The slice logind keeps user ``uid``'s sessions in, relative to the cgroup v2 mount."""
    return f"{LOGIN_SLICES}/user-{uid}.slice"


def is_login_slice(rel: str) -> bool:
    """Whether ``rel`` names a user's login slice (:func:`login_slice`), not a cgroup below
    governor's root (whose first part is a group name, never ``user.slice``)."""
    return rel.startswith(_LOGIN_SLICE_PREFIX)


def login_uid(path: str) -> int | None:
    """The uid whose login slice holds cgroup-tree ``path`` (``/user.slice/user-1000.slice/
    session-3.scope`` → 1000), or None."""
    found = _IN_LOGIN_SLICE.match(path)
    return int(found.group(1)) if found else None
