"""The admission queue: which waiting tasks start now, in discrete-DRF order. Pure.

Memory is incompressible, so a task starts only when its declared memory fits beside the
declared memory of the running tasks (DESIGN.md §3); GPUs are whole devices, so a task asking
for N starts only when N are free (each admitted resource, :func:`governor.config.resources.admitted`,
is counted the same way). Waiting tasks are served as in the
paper's Algorithm 1 (§4.2, discrete progressive filling): repeatedly take the group with the
lowest weighted dominant share ``s_g / w_g`` (over its running tasks' declarations, D_g) that
has a task waiting, and start its next task if it fits. Ties go to the group with fewer running
tasks, then to the group name (Mesos's sorter), as in :func:`governor.core.drf.discrete_filling`.

**Reservations** (DESIGN.md §2). When the next task of the lowest-share group does not fit, it
holds a reservation of the resources it lacks, and only those: what frees of them is kept for
it, and other groups' tasks start if they fit beside it (backfill that takes none of what it
waits for). A task that needs none of the exhausted resource still starts (paper §4.1): a task
waiting for GPUs holds no memory that it can already get. A task started beside it may take
memory the head could get now: the head then lacks it only while that task runs, and from the
next pass reserves it too (:attr:`Admission.beside`). Without the reservation, a busy
group's small tasks take every byte that frees and a large task of an idle group waits for ever
(measured: 85 s, 840 tasks of the busy group started meanwhile).

**Headroom** (DESIGN.md §2, Mesos quota). The unused part of each group's ``guarantee`` of an
admitted resource is kept free of other groups' admissions, so a task within its group's
guarantee starts at once, whatever the others queued or hold. Nested guarantees are kept
inside their parent's: a group keeps the larger of its own unused guarantee and the sum of
what its guaranteed descendants keep.

**Quotas** (DESIGN.md §2 "Hierarchy"). A group's ``limit`` (over its subtree) and a member's
``user_limit`` bound what their running tasks declare together; a task that would take one past
it waits, without the reservation (what frees elsewhere is no use to it), until tasks under
that quota end.

Within a group, tasks wait in arrival order and the first one blocks the rest: a group's
small late task never overtakes its own large early one, which would otherwise wait forever.
A task held back by its member's ``user_limit`` blocks only that member's later tasks.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from governor.config.resources import format_amount
from governor.config import resources
# Float declarations carry rounding error: a task fits within this relative slack.
_SLACK = 1e-9
HELD_BY_SHOWN = 3


@dataclass(frozen=True)
class Waiting:
    """A task waiting for admission.

    Attributes:
        task: its id.
        group: its group.
        demand: its declared demand (resource → cores, bytes, bytes/s).
    """

    task: str
    group: str
    demand: Mapping[str, float]
    user: str = ""


@dataclass(frozen=True)
class Quota:
    """A bound on what some tasks declare together: a group's ``limit`` (its subtree's tasks)
    or one member's ``user_limit`` in a group.

    Attributes:
        name: how people read it: ``group science's limit``, ``alice's user_limit in lab``.
        limit: resource → the most the tasks under it may declare (cores, bytes).
        used: resource → what its running tasks declare now.
        groups: the groups whose tasks it covers; user: only this user's tasks (None: all).
    """

    name: str
    limit: Mapping[str, float]
    used: dict[str, float]
    groups: frozenset[str]
    user: str | None = None

    def covers(self, waiting: Waiting) -> bool:
        """Whether ``waiting`` counts against this quota."""
        return waiting.group in self.groups and (self.user is None or waiting.user == self.user)


@dataclass(frozen=True)
class Guarantee:
    """A group's ``guarantee`` of admitted resources, kept as headroom (DESIGN.md §2).

    Attributes:
        group: the group; amount: admitted resource → what it is guaranteed (bytes, GPUs);
        groups: its subtree (itself and its descendants), whose running tasks use it.
    """

    group: str
    amount: Mapping[str, float]
    groups: frozenset[str]


@dataclass
class Admission:
    """The answer of :func:`admit`.

    Attributes:
        admitted: ids of the tasks to start now, in admission order.
        waiting: ids of the tasks that keep waiting, in the order they would be served if
            memory were free (position 1 first).
        free: admitted resource → what is left of it beside the running and admitted tasks
            (bytes of memory, GPUs; 0 where none is governed).
        holders: admitted resource → the groups holding the most of it after admission,
            largest first (at most :data:`HELD_BY_SHOWN`): ``(group, amount)``.
        reserved_for: the waiting task that holds the reservation (the next task of the
            lowest-share group, which did not fit), or None.
        reserved: what is kept for it: admitted resource it lacks → amount; empty without one.
        beside: the admitted tasks that started beside the reservation (none of them takes
            any of what it reserved), in admission order.
        headroom: admitted resource → ``(group, amount)`` for each top guaranteed group that
            keeps some of it unused (the part of its guarantee its tasks do not declare).
        short: waiting task → admitted resource → how much must free before it fits beside
            the others' headroom (not counting the reservation, which the reason names apart);
            empty when it would fit now.
        lacks: waiting task → admitted resource it is short of → how much of that shortfall is
            missing on the host itself (the rest is kept as other groups' headroom).
        limited: waiting task → why a quota holds it back (``group science's limit: memory
            60.0G of 64.0G declared``).
    """

    admitted: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    free: dict[str, float] = field(default_factory=dict)
    holders: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    reserved_for: str | None = None
    reserved: dict[str, float] = field(default_factory=dict)
    beside: list[str] = field(default_factory=list)
    headroom: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    short: dict[str, dict[str, float]] = field(default_factory=dict)
    lacks: dict[str, dict[str, float]] = field(default_factory=dict)
    limited: dict[str, str] = field(default_factory=dict)


def admit(capacity: Mapping[str, float], running: Mapping[str, Mapping[str, float]],
          running_tasks: Mapping[str, int], weights: Mapping[str, float],
          queue: Sequence[Waiting], quotas: Sequence[Quota] = (),
          guarantees: Sequence[Guarantee] = ()) -> Admission:
    """Decide which queued tasks start now (paper §4.2, Algorithm 1, with reservations of the
    resources the head lacks and guarantees kept as headroom, DESIGN.md §2).

    Args:
        capacity: resource → amount governor divides (``memory`` in bytes and ``gpu`` in whole
            devices admit; the others only weigh in the dominant share).
        running: group → D_g, the summed declarations of its running tasks.
        running_tasks: group → how many tasks it runs (the first tie-break).
        weights: group → weight (> 0); a group missing here weighs 1.
        queue: the waiting tasks in arrival order.
        quotas: group limits and user limits; a task starts only within each that covers it.
        guarantees: the groups' guarantees of admitted resources, kept as headroom.

    Returns:
        an :class:`Admission`. A task whose memory exceeds the capacity on its own never fits;
        the caller refuses such a demand before it queues.
    """
    demands = {g: dict(d) for g, d in running.items()}
    counts = dict(running_tasks)
    counted = [entry.name for entry in resources.admitted()]
    room = _Room(capacity, counted, guarantees, demands)
    by_group: dict[str, list[Waiting]] = {}
    for waiting in queue:
        by_group.setdefault(waiting.group, []).append(waiting)

    result = Admission()
    quota_used = [dict(quota.used) for quota in quotas]
    heap = [_key(g, demands, counts, weights, capacity) for g in by_group]
    heapq.heapify(heap)
    while heap:
        *_, group = heapq.heappop(heap)
        head = by_group[group][0]
        covering = [index for index, quota in enumerate(quotas) if quota.covers(head)]
        over, quota = _over_quota(head, [(quotas[i], quota_used[i]) for i in covering])
        if over is not None:
            result.limited[head.task] = over
            if quota.user is not None:  # only this member waits (for their own tasks): the others go on
                for later in by_group[group][1:]:
                    if later.user == head.user:
                        result.limited[later.task] = f"behind task {head.task}, held by {over}"
                by_group[group] = [w for w in by_group[group] if w.user != head.user]
                if by_group[group]:
                    heapq.heappush(heap, _key(group, demands, counts, weights, capacity))
            continue  # no reservation: what frees elsewhere is no use to it
        short, take = room.short(head, result.reserved)
        if short:
            if result.reserved_for is None:  # the lowest share that does not fit: what frees of what it lacks is its
                result.reserved_for = head.task
                result.reserved = {r: take[r] for r in short if take[r] > 0}
            continue  # skipped for this pass: it fits neither now nor beside the reservation
        room.start(head)
        if result.reserved_for is not None:
            result.beside.append(head.task)
        for index in covering:
            _add(quota_used[index], head.demand)
        by_group[group].pop(0)
        result.admitted.append(head.task)
        counts[group] = counts.get(group, 0) + 1
        if by_group[group]:
            heapq.heappush(heap, _key(group, demands, counts, weights, capacity))

    admitted = set(result.admitted)
    by_group = {}
    for waiting in queue:
        if waiting.task not in admitted:
            by_group.setdefault(waiting.group, []).append(waiting)
            if waiting.task not in result.limited:
                result.short[waiting.task], _ = room.short(waiting, {})
                result.lacks[waiting.task] = {r: max(0.0, waiting.demand.get(r, 0.0) + room.used[r] - room.capacity[r])
                                              for r in result.short[waiting.task]}
    result.waiting = _serving_order(by_group, demands, counts, weights, capacity)
    if result.reserved_for in result.waiting:  # the holder is served first
        result.waiting.remove(result.reserved_for)
        result.waiting.insert(0, result.reserved_for)
    result.free = {r: max(0.0, capacity.get(r, 0.0) - room.used[r]) for r in counted}
    result.holders = {r: _holders(demands, r) for r in counted}
    result.headroom = {r: room.headroom(r) for r in counted}
    return result


class _Room:
    """What is used of each admitted resource and what the guarantees keep unused (headroom),
    as tasks start during one :func:`admit` pass."""

    def __init__(self, capacity: Mapping[str, float], counted: Sequence[str],
                 guarantees: Sequence[Guarantee], demands: dict[str, dict[str, float]]) -> None:
        self.counted, self.demands = counted, demands
        self.capacity = {r: capacity.get(r, 0.0) for r in counted}
        self.used = {r: sum(d.get(r, 0.0) for d in demands.values()) for r in counted}
        # The guarantee tree: a guarantee inside another's subtree is kept inside it.
        self.inner = {g.group: [c for c in guarantees if c is not g and c.groups < g.groups
                                and not any(c.groups < m.groups < g.groups for m in guarantees)]
                      for g in guarantees}
        self.tops = [g for g in guarantees if not any(g.groups < m.groups for m in guarantees)]
        self.kept = {r: self._kept(r, None) for r in counted}

    def _kept(self, resource: str, extra: Waiting | None) -> float:
        """What the guarantees keep unused of ``resource``, were ``extra`` running too."""
        return sum(self._keep(g, resource, extra) for g in self.tops)

    def _keep(self, g: Guarantee, resource: str, extra: Waiting | None) -> float:
        """What ``g`` keeps: the larger of its own unused guarantee and what its inner ones keep."""
        uses = sum(self.demands.get(h, {}).get(resource, 0.0) for h in g.groups)
        if extra is not None and extra.group in g.groups:
            uses += extra.demand.get(resource, 0.0)
        inner = sum(self._keep(c, resource, extra) for c in self.inner[g.group])
        return max(g.amount.get(resource, 0.0) - uses, inner, 0.0)

    def short(self, waiting: Waiting, reserved: Mapping[str, float]
              ) -> tuple[dict[str, float], dict[str, float]]:
        """(resource → how much ``waiting`` lacks, resource → what it takes beyond its own
        groups' headroom): it fits when the first is empty. It must fit on the host, and what
        it takes beyond its headroom must fit beside the others' headroom and ``reserved``."""
        short, take = {}, {}
        for r in self.counted:
            wanted = waiting.demand.get(r, 0.0)
            if wanted <= 0:
                continue
            take[r] = max(0.0, wanted + self._kept(r, waiting) - self.kept[r])
            lack = self.used[r] + wanted - self.capacity[r]
            if take[r] > wanted * _SLACK:  # within its own headroom it takes nothing the others wait for
                lack = max(lack, self.used[r] + self.kept[r] + reserved.get(r, 0.0) + take[r] - self.capacity[r])
            if lack > self.capacity[r] * _SLACK:
                short[r] = lack
        return short, take

    def start(self, waiting: Waiting) -> None:
        """Count ``waiting`` as running."""
        _add(self.demands.setdefault(waiting.group, {}), waiting.demand)
        for r in self.counted:
            self.used[r] += waiting.demand.get(r, 0.0)
            self.kept[r] = self._kept(r, None)

    def headroom(self, resource: str) -> list[tuple[str, float]]:
        """``(group, amount)`` kept of ``resource`` for each top guaranteed group keeping some."""
        return [(g.group, amount) for g in self.tops if (amount := self._keep(g, resource, None)) > 0]


def _holders(demands: Mapping[str, Mapping[str, float]], resource: str) -> list[tuple[str, float]]:
    """The groups holding the most of ``resource``, largest first (at most :data:`HELD_BY_SHOWN`)."""
    held = sorted(((g, d.get(resource, 0.0)) for g, d in demands.items() if d.get(resource, 0.0) > 0),
                  key=lambda item: (-item[1], item[0]))
    return held[:HELD_BY_SHOWN]


def _over_quota(waiting: Waiting, quotas: Sequence[tuple[Quota, Mapping[str, float]]]
                ) -> tuple[str, Quota] | tuple[None, None]:
    """Why ``waiting`` would take a quota past its limit, and that quota (the first such), or Nones."""
    for quota, used in quotas:
        for resource, limit in quota.limit.items():
            wanted = waiting.demand.get(resource, 0.0)
            if wanted > 0 and used.get(resource, 0.0) + wanted > limit * (1 + _SLACK):
                return (f"{quota.name}: {resource} {format_amount(resource, used.get(resource, 0.0), unit=True)} of "
                        f"{format_amount(resource, limit, unit=True)} declared by running tasks, this one wants "
                        f"{format_amount(resource, wanted, unit=True)}"), quota
    return None, None


def _serving_order(by_group: dict[str, list[Waiting]], demands: dict[str, dict[str, float]],
                   counts: dict[str, int], weights: Mapping[str, float],
                   capacity: Mapping[str, float]) -> list[str]:
    """The order the rest would be served in with memory to spare: their queue positions."""
    demands = {g: dict(d) for g, d in demands.items()}
    counts = dict(counts)
    pending = {g: list(tasks) for g, tasks in by_group.items() if tasks}
    heap = [_key(g, demands, counts, weights, capacity) for g in pending]
    heapq.heapify(heap)
    order = []
    while heap:
        *_, group = heapq.heappop(heap)
        head = pending[group].pop(0)
        order.append(head.task)
        _add(demands.setdefault(group, {}), head.demand)
        counts[group] = counts.get(group, 0) + 1
        if pending[group]:
            heapq.heappush(heap, _key(group, demands, counts, weights, capacity))
    return order


def _key(group: str, demands: Mapping[str, Mapping[str, float]], counts: Mapping[str, int],
         weights: Mapping[str, float], capacity: Mapping[str, float]) -> tuple[float, int, str]:
    demand = demands.get(group, {})
    share = max((amount / capacity[r] for r, amount in demand.items() if capacity.get(r)), default=0.0)
    return share / weights.get(group, 1.0), counts.get(group, 0), group


def _add(total: dict[str, float], demand: Mapping[str, float]) -> None:
    for resource, amount in demand.items():
        total[resource] = total.get(resource, 0.0) + amount
