"""The kinds of task, and the one place their ids and cgroup names are made and parsed. Pure.

=========  ==================  ===================================  ==============================
kind       id                  cgroup                               what it holds
=========  ==================  ===================================  ==============================
task       ``7``               ``<group>/task-7``                   one ``governor run``
session    ``session-<uid>``   ``<group>/session-<uid>``            a user's processes started
                                                                    outside ``governor run``
login      ``login-<uid>``     ``user.slice/user-<uid>.slice``      the same, in the user's logind
                                                                    slice (a systemd host)
=========  ==================  ===================================  ==============================

A task's and a session's cgroup is named relative to governor's root; a login session's is
logind's slice, relative to the cgroup v2 mount (:mod:`governor.cgroups.logind`).
"""

from __future__ import annotations

import enum

from governor.cgroups.logind import login_slice

__all__ = ["Kind", "SESSION_PREFIX", "TASK_PREFIX", "cgroup_of", "is_task_name", "kind_of", "login_id",
           "name_of_task", "record_id_fits", "session_id", "task_in", "uid_of_login"]

TASK_PREFIX = "task-"
SESSION_PREFIX = _SESSION = "session-"
_LOGIN = "login-"


class Kind(enum.Enum):
    """What a task is (see the module's table)."""

    TASK = "task"
    SESSION = "session"
    LOGIN = "login"

    @property
    def is_session(self) -> bool:
        """A session or a login session: a user's processes outside ``governor run``."""
        return self is not Kind.TASK


def kind_of(task_id: str) -> Kind:
    """The kind of the task with id ``task_id``."""
    if task_id.startswith(_SESSION):
        return Kind.SESSION
    if task_id.startswith(_LOGIN):
        return Kind.LOGIN
    return Kind.TASK


def session_id(uid: int) -> str:
    """The id of user ``uid``'s session (one per user)."""
    return f"{_SESSION}{uid}"


def login_id(uid: int) -> str:
    """The id of user ``uid``'s login session (one per user, on systemd hosts)."""
    return f"{_LOGIN}{uid}"


def uid_of_login(task_id: str) -> int | None:
    """The uid of login session ``task_id`` (``login-1000`` → 1000); None for another id."""
    digits = task_id.removeprefix(_LOGIN)
    return int(digits) if task_id.startswith(_LOGIN) and digits.isdigit() else None


def cgroup_of(place: str, task_id: str) -> str:
    """The cgroup of task ``task_id`` in the group whose cgroup is ``place`` (the group's name,
    or its ancestors' and its own, ``science/physics-lab``; see the module's table)."""
    kind = kind_of(task_id)
    if kind is Kind.LOGIN:
        return login_slice(int(task_id.removeprefix(_LOGIN)))
    return f"{place}/{task_id}" if kind is Kind.SESSION else f"{place}/{TASK_PREFIX}{task_id}"


def is_task_name(name: str) -> bool:
    """Whether a cgroup named ``name`` below a group is a task's or a session's."""
    return name_of_task(name) is not None


def name_of_task(name: str) -> tuple[Kind, str] | None:
    """The kind and id of the task whose cgroup is named ``name`` (``task-7`` → (TASK, ``"7"``),
    ``session-1000`` → (SESSION, ``"session-1000"``)), or None."""
    if name.startswith(TASK_PREFIX) and name.removeprefix(TASK_PREFIX).isdigit():
        return Kind.TASK, name.removeprefix(TASK_PREFIX)
    if name.startswith(_SESSION) and name.removeprefix(_SESSION).isdigit():
        return Kind.SESSION, name
    return None


def task_in(rel: str) -> tuple[Kind, str] | None:
    """The task whose cgroup is ``rel`` (relative to governor's root) or holds it: its kind and
    id (``"physics/task-7"`` → (TASK, ``"7"``), ``"science/lab/session-1000/x"`` → (SESSION,
    ``"session-1000"``)); None for the root, a group, or a name no task has. The first name
    below a group that is a task's is the task (no group is named like one)."""
    for name in rel.split("/")[1:]:
        found = name_of_task(name)
        if found is not None:
            return found
    return None


def record_id_fits(task_id: str, uid: int) -> bool:
    """Whether a stored record may have id ``task_id`` for owner ``uid``: a number, or that
    user's own session or login session."""
    return task_id.isdigit() or task_id in (session_id(uid), login_id(uid))
