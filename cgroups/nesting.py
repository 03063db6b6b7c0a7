"""cgroup v1's rule for CFS quotas of nested cgroups, as bookkeeping. Pure.

On cgroup v1 the kernel refuses (``EINVAL``) a quota that would let a child run more than its
parent: a parent's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` below one of its children's,
and a child's above its parent's (``tg_cfs_schedulable_down`` in kernel/sched/core.c; cgroup v2
takes both and lets the parent's bound the child's). governor holds a group to its guarantee
(a quota) while its tasks keep their caps (quotas too), so the v1 driver asks this index before
each write: a parent is written at least its largest child's quota, and a parent below a new
child's quota is raised first. A cgroup with no quota of its own is bounded by its parent's
(the kernel takes the parent's as its own), so its children's quotas count as its parent's
children's: a group not held to its guarantee passes its tasks' caps up to the root.
"""

from __future__ import annotations

import math

__all__ = ["QuotaNesting"]


class QuotaNesting:
    """The CFS quota in force of every cgroup that has one, in cores (quota / period), with
    each parent's children indexed: the largest is found among a group's own tasks, not all.
    Cgroups are named relative to governor's root (``""`` the root, ``"g/task-1"``)."""

    def __init__(self) -> None:
        self._cores: dict[str, float] = {}
        self._children: dict[str, dict[str, float]] = {}
        # parent → its children with no quota of their own that pass their children's up
        self._open: dict[str, set[str]] = {}
        # cgroup → its largest child's quota, kept until a quota below it is set or dropped.
        # Groups not held to a guarantee pass their tasks' caps up: the root's (written at
        # every launch and exit, its memory protection changing) looked at every task's cap
        # each time. Each refill's group writes still clear the root's, which is then found
        # among the groups' kept ones: a refill's cost follows the groups, not the tasks.
        self._largest: dict[str, float] = {}

    def cores(self, rel: str) -> float | None:
        """``rel``'s quota in cores; None when it has none (unlimited)."""
        return self._cores.get(rel)

    def has_children(self, rel: str) -> bool:
        """Whether a child of ``rel`` has a quota, or passes its children's up."""
        return rel in self._children or rel in self._open

    def largest_child(self, rel: str) -> float:
        """The largest quota, in cores, of ``rel``'s children, a child with none counting its own
        children's (0 when none has one)."""
        found = self._largest.get(rel)
        if found is None:
            found = max((*self._children.get(rel, {}).values(), *map(self.largest_child, self._open.get(rel, ()))),
                        default=0.0)
            self._largest[rel] = found
        return found

    def at_least_children(self, rel: str, quota_usec: int, period_usec: int) -> int:
        """``quota_usec``, or the quota over ``period_usec`` of ``rel``'s largest child where
        that is more (rounded up: never below it)."""
        return max(quota_usec, math.ceil(self.largest_child(rel) * period_usec))

    def set(self, rel: str, quota_usec: int | None, period_usec: int) -> None:
        """Note the quota in force in ``rel`` (None: unlimited)."""
        parent = _parent(rel)
        if quota_usec is None:
            if rel:
                self.drop(rel)
            else:  # (drop("") forgets every quota: the root's alone goes)
                self._cores.pop(rel, None)
            return
        self._changed(rel)
        cores = quota_usec / period_usec
        self._cores[rel] = cores
        if parent is not None:
            self._children.setdefault(parent, {})[rel] = cores
            self._opened(parent)
        self._opened(rel)

    def drop(self, rel: str) -> None:
        """Forget ``rel``'s quota (``""``: every quota)."""
        if not rel:
            self._cores.clear()
            self._children.clear()
            self._open.clear()
            self._largest.clear()
            return
        self._changed(rel)
        self._largest.pop(rel, None)  # (a task's cgroup goes for good: keep nothing of it)
        self._cores.pop(rel, None)
        siblings = self._children.get(_parent(rel))
        if siblings is not None:
            siblings.pop(rel, None)
            if not siblings:
                del self._children[_parent(rel)]
            self._opened(_parent(rel))
        self._opened(rel)

    def _changed(self, rel: str) -> None:
        """Forget the largest child's quota kept for ``rel``'s ancestors: ``rel``'s quota, or
        whether it passes its children's up, is about to change."""
        while (rel := _parent(rel)) is not None:
            self._largest.pop(rel, None)

    def _opened(self, rel: str) -> None:
        """Note whether ``rel``, and each of its ancestors in turn, passes its children's
        quotas up: it has none of its own, and children with one or passing theirs up."""
        while (parent := _parent(rel)) is not None:
            members = self._open.get(parent)
            if rel not in self._cores and (rel in self._children or rel in self._open):
                self._open.setdefault(parent, set()).add(rel)
            elif members is not None and rel in members:
                members.discard(rel)
                if not members:
                    del self._open[parent]
            rel = parent


def _parent(rel: str) -> str | None:
    """The parent of ``rel`` (``"g"`` → ``""``); None for the root."""
    return rel.rpartition("/")[0] if rel else None
