"""Who sees what of a task: one rule for every view (DESIGN.md §6; docs/user.md "Who sees
what"). A user sees their own tasks in full; another user's task without its command line, its
pid or its processes (a queued task has no process, so nothing else on the host shows its
command line, and ``hidepid`` cannot help: issue 43, point 4); root and the members of the
config's ``admin_group`` see every task in full. No view carries a task's environment: the
daemon is never told it.

What stays for others: the task's id, name (its ``--name``, by default its command's
basename), group, user, state and amounts, which the fairness views are made of.

:func:`shown` is the rule on one task entry (a status task, a ``ps`` row, an ended record, a
queue item); :func:`status_for`, :func:`queue_for` and :func:`rows_for` apply it to a reply.
:class:`StatusViews` keeps each viewer's form of the one status the daemon builds, so that a
storm of ``status`` requests and many ``watch`` streams still cost one build and one encoding
per form. Pure: no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["ADMIN", "PUBLIC", "StatusViews", "Viewer", "private", "queue_for", "rows_for", "shown", "status_for"]


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who a reply is for: ``uid`` (None: no one in particular, as the metrics' scraper) and
    whether they are ``admin`` (root or in the config's ``admin_group``:
    :func:`governor.host.access.is_admin`)."""

    uid: int | None
    admin: bool

    def sees(self, owner: object) -> bool:
        """Whether this viewer sees a task of uid ``owner`` in full."""
        return self.admin or (self.uid is not None and owner == self.uid)


ADMIN = Viewer(0, True)  # root: every task in full (the daemon's own uses, the tests)
PUBLIC = Viewer(None, False)  # anyone: no task in full (the metrics)

# The fields a task entry loses for a viewer who may not see it in full, and what they become.
HIDDEN = {"command": [], "command_cut": 0, "pid": None, "processes": [], "processes_total": None}


def private(entry: Mapping) -> dict:
    """``entry`` as others see it: the :data:`HIDDEN` fields it has replaced (command ``[]``,
    pid ``null``, no processes) and ``"private": true``, saying that they were left out."""
    return {**entry, **{key: value for key, value in HIDDEN.items() if key in entry}, "private": True}


def shown(entry: Mapping, viewer: Viewer) -> Mapping:
    """``entry`` (a task's: it has ``uid``) as ``viewer`` sees it: itself, or :func:`private`."""
    return entry if viewer.sees(entry.get("uid")) else private(entry)


def rows_for(rows: Iterable[Mapping], viewer: Viewer) -> list:
    """Each task entry of ``rows`` (``ps``'s rows, ended records) as ``viewer`` sees it."""
    return [shown(row, viewer) for row in rows]


def queue_for(queue: Iterable[Mapping], viewer: Viewer) -> list:
    """The queue (:func:`governor.core.queue.queue_view`'s items) as ``viewer`` sees it."""
    return rows_for(queue, viewer)


def status_for(status: dict, viewer: Viewer,
               private_of: Callable[[dict], dict] = private) -> dict:
    """The status object (:func:`governor.wire.status.build_status`) as ``viewer`` sees it:
    itself for an admin; else a copy in which each other user's task, in its group and in the
    queue, is :func:`private`. Only what differs is copied: a group none of whose tasks
    changed is the same object. ``private_of`` makes a task entry's private form (a cache's).
    """
    if viewer.admin:
        return status
    groups = {}
    for name, group in status["groups"].items():
        tasks = group["tasks"]
        seen = [entry if viewer.sees(entry.get("uid")) else private_of(entry) for entry in tasks]
        groups[name] = group if all(a is b for a, b in zip(seen, tasks)) else {**group, "tasks": seen}
    return {**status, "groups": groups, "queue": queue_for(status["queue"], viewer)}


# The viewers whose own form of one status is kept (one per user with tasks who asks).
FORMS_KEPT = 64


class StatusViews:
    """Each viewer's form of the daemon's one status reply, made once per status.

    An admin gets the reply itself; a user with no task in the status the public form (every
    task private), shared by all such users; a user with tasks their own form. A private task
    entry is kept while its task's entry is the same object (:func:`build_status` keeps an
    unchanged task's), so a status of 10,000 tasks is not copied again at each sample.

    Args:
        make: (status, checked) → a reply (:class:`governor.wire.status.StatusReply`); every
            form but the admins' shares one ``checked`` (what its encoding looked at), since
            their entries are mostly the same objects.
    """

    def __init__(self, make: Callable[[dict, dict], object]):
        self._make = make
        self._checked: dict[int, tuple] = {}
        self._base: object | None = None  # the full reply the forms below are of
        self._owners: frozenset = frozenset()  # uids with a task or a queued launch in it
        self._forms: OrderedDict[int | None, object] = OrderedDict()  # uid (None: public) → its reply
        self._private: dict[int, tuple[dict, dict]] = {}  # id(entry) → (entry, its private form)

    def reply(self, full, viewer: Viewer):
        """``full`` (a status reply, the admins' form) as ``viewer`` sees it."""
        if viewer.admin:
            return full
        if full is not self._base:
            self._renew(full)
        key = viewer.uid if viewer.uid in self._owners else None
        form = self._forms.get(key)
        if form is None:
            form = self._make(status_for(full.status, Viewer(key, False), self._private_of), self._checked)
            self._forms[key] = form
            if len(self._forms) > FORMS_KEPT:
                self._forms.popitem(last=False)
        return form

    def _renew(self, full) -> None:
        self._base = full
        self._forms.clear()
        status = full.status
        entries = [entry for group in status["groups"].values() for entry in group["tasks"]]
        self._owners = frozenset(entry.get("uid") for entry in entries + status["queue"])
        live = {id(entry) for entry in entries}
        self._private = {key: kept for key, kept in self._private.items() if key in live}

    def _private_of(self, entry: dict) -> dict:
        kept = self._private.get(id(entry))
        if kept is None or kept[0] is not entry:
            kept = (entry, private(entry))
            self._private[id(entry)] = kept
        return kept[1]
