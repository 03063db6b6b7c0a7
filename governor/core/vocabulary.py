"""The numbers behind DESIGN.md §1's words, each computed here once for every view. Pure.

============  ==============================================================================
floor         ``w_g / Σ w``: the share of every resource DRF promises a group while every group
              is busy (sharing incentive, Ghodsi et al. §3, §4.3 for weights), all of it while
              the others are idle; never more than its ``limit`` lets it have.
guarantee     the group's DRF allocation ``A_g`` of a *compressible* resource (cpu, I/O),
              enforced by weights: work-conserving. A task's part of it: λ × its declaration.
reserved      the declared memory of admitted tasks (what the admission queue counts); for a
              session, what it uses (at most its cap): an idle shell holds nothing. A user's
              session counts once (:func:`reserved_by_task`): admission, status, top, ps and
              the metrics all read that one figure.
cap           a task's declaration; a group's: the sum of its tasks' (``demand``, D_g).
use           what the kernel measures.
borrowed      use above the guarantee, of a compressible resource (idle shares lent).
reservation   what the queue's head holds of the admitted resources it lacks, only those: what
              frees of them goes to it first (:mod:`governor.core.admission`).
headroom      the unused part of a group's ``guarantee`` of an admitted resource, kept free of
              other groups' admissions (Mesos quota; :mod:`governor.core.admission`).
============  ==============================================================================

Memory and GPUs are not shared by weights: they are admitted and reserved, never squeezed
(:func:`governor.config.resources.compressible` says which resources are which); a group's guarantee
of them is kept at the door as headroom.
``status``, ``--json``, ``ps``, ``top``, ``explain``, ``check-config`` and the metrics call
these functions, so one word is one number on every screen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from governor.config.resources import admitted, compressible
from governor.core.state import Task, Tasks

# Use is sampled over one second: a group at its guarantee reads a little above it half the
# time. Less than this fraction of the guarantee above it is not borrowing.
BORROW_NOISE = 0.02


def floors(weights: Mapping[str, float], parents: Mapping[str, str | None] | None = None, *,
           capacity: Mapping[str, float] | None = None,
           limits: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """Group → its floor, a fraction in [0, 1].

    Args:
        weights: every configured group → its weight (> 0), internal groups of the tree too.
        parents: group → the group it nests under (None or left out: a top-level group).
        capacity: resource → what governor divides (cores, bytes, devices, bytes/s); with
            ``limits``, what a limit is a fraction of.
        limits: group → its effective limit (:meth:`~governor.config.settings.Config.effective_limit`:
            resource → amount, in capacity's units); a group left out has none.

    Returns:
        ``w_g / Σ w`` over the group and its siblings, times its parent's floor (a lab's floor
        is its share of its department's), no more than its limit's smallest fraction of the
        capacity: DRF never gives a group past its limit, so it cannot promise more of every
        resource (issue 32: 66.7% of 23G shown beside a 2G limit). Empty for no group.
    """
    parents = parents or {}
    totals: dict[str | None, float] = {}
    for group, weight in weights.items():
        totals[parents.get(group)] = totals.get(parents.get(group), 0.0) + weight
    result: dict[str, float] = {}

    def floor(group: str) -> float:
        if group not in result:
            parent = parents.get(group)
            above = floor(parent) if parent is not None and parent in weights else 1.0
            result[group] = min(above * weights[group] / totals[parent], ceiling(group))
        return result[group]

    def ceiling(group: str) -> float:
        # A limit of 0 (gpus = 0) keeps the group off that resource; its tasks then ask for
        # none of it, so it lowers no promise of the others.
        limit = (limits or {}).get(group, {})
        return min((amount / capacity[r] for r, amount in limit.items() if amount > 0 and capacity and capacity.get(r)),
                   default=1.0)

    for group in weights:
        floor(group)
    return result


def guarantee(allocation: Mapping[str, float]) -> dict[str, float]:
    """A group's guarantee: the compressible part of its DRF allocation ``A_g`` (cores, bytes/s)."""
    return {r: float(v) for r, v in allocation.items() if compressible(r)}


def task_guarantee(declared: Mapping[str, float], fraction: float) -> dict[str, float]:
    """A task's part of its group's guarantee: ``fraction`` (the group's λ) of each
    compressible resource it declared."""
    return {r: fraction * float(v) for r, v in declared.items() if compressible(r)}


def reserved(declared: Mapping[str, float], *, session: bool = False,
             used: Mapping[str, float] | None = None) -> dict[str, float]:
    """What a task holds in the admission count: its declared admitted resources (memory,
    GPUs: :func:`governor.config.resources.admitted`); a session, what it uses
    (at most its cap), so that no user queues behind their own idle shell. Empty when nothing
    is held."""
    if session:
        used = used or {}
        held = {r.name: min(float(used.get(r.name, 0.0)), float(declared[r.name]))
                for r in admitted() if declared.get(r.name)}
    else:
        held = {r.name: float(declared[r.name]) for r in admitted() if declared.get(r.name)}
    return {r: v for r, v in held.items() if v > 0}


def reserved_by_task(tasks: Iterable[Task], usage: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Task id → what it holds in the admission count (:func:`reserved`): the one figure of
    reserved memory and GPUs that admission counts and every view shows.

    A user's session is one session in its group wherever its processes live: logind's slice
    (``login-<uid>``), governor's session cgroup (``session-<uid>``: ``runuser``, cron, ``sudo
    -u`` beside a login), or both. Both places together hold what they use, bounded by the one
    cap :meth:`~governor.core.state.Tasks.demands` counts (:func:`~governor.core.state.one_session_each`:
    the session cgroup's): governor's session cgroup is counted first, the login slice holds
    what is left of the cap (issue 43: each counted in full and taken off once, a user's
    two idle places made 2G free that was not, and a queued task started past the capacity).

    Args:
        tasks: the running tasks (sessions and login sessions too).
        usage: cgroup → its measured use (bytes; a cgroup not sampled yet uses nothing).

    Returns:
        every task's id → resource → amount (bytes, GPUs), empty where it holds nothing.
    """
    tasks = list(tasks)
    names = admitted_names()  # once: every status and ps asks of every task
    held_by_session = sessions_reserved([task for task in tasks if task.is_session], usage)
    return {task.id: held_by_session[task.id] if task.is_session else held(task, names) for task in tasks}


def admitted_names() -> tuple[str, ...]:
    """The names of the admitted resources (and devices), in registry order: what
    :func:`held` counts."""
    return tuple(entry.name for entry in admitted())


def held(task: Task, names: Sequence[str]) -> dict[str, float]:
    """What a launched task (not a session) holds in the admission count: its declaration of
    each admitted resource of ``names`` (:func:`admitted_names`) it asked some of (bytes,
    GPUs). It depends on the task alone: a status keeps it with the task's entry."""
    demand = task.demand
    return {resource: float(demand[resource]) for resource in names if demand.get(resource, 0) > 0}


def sessions_reserved(sessions: Iterable[Task],
                      usage: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Session id → what it holds in the admission count (:func:`reserved_by_task` says how a
    user's two places share one cap), for ``sessions`` (login sessions too); ``usage`` as
    there."""
    held_by: dict[str, dict[str, float]] = {}
    caps: dict[tuple[int, str], dict[str, float]] = {}  # a user's session in a group → what is left of its cap
    for task in sorted(sessions, key=lambda t: t.is_login):  # governor's cgroup first
        cap = caps.setdefault((task.uid, task.group), dict(task.demand))
        held_by[task.id] = reserved(cap, session=True, used=usage.get(task.cgroup))
        for resource, amount in held_by[task.id].items():
            cap[resource] -= amount
    return held_by


def reserved_by_group(tasks: Tasks, usage: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Group → what its running ``tasks`` hold in the admission count: the sum of
    :func:`reserved_by_task` (``usage`` as there) over its tasks; every group with a task is
    a key, empty where it holds nothing.

    A launched task holds its declaration, so its group's part comes from the sums ``tasks``
    keeps per group (:meth:`~governor.core.state.Tasks.launched_demands`); only the sessions
    are looked at one by one. Settle asks this at every launch and exit: summing every running
    task each time cost a host of 1,000 tasks about 3 ms of CPU per settle (in process)."""
    names = admitted_names()
    launched = tasks.launched_demands()
    groups: dict[str, dict[str, float]] = {}
    for group in tasks.counts():
        declared = launched.get(group, {})
        groups[group] = {resource: float(declared[resource]) for resource in names if declared.get(resource, 0) > 0}
    sessions = tasks.sessions()
    held_by_session = sessions_reserved(sessions, usage)
    for session in sessions:
        summed = groups[session.group]
        for resource, amount in held_by_session[session.id].items():
            summed[resource] = summed.get(resource, 0.0) + float(amount)
    return groups


def borrowed(used: Mapping[str, float], guarantee_: Mapping[str, float]) -> dict[str, float]:
    """Use above the guarantee, for the compressible resources, beyond sampling noise
    (:data:`BORROW_NOISE`)."""
    result = {}
    for resource, amount in used.items():
        if not compressible(resource):
            continue
        floor = float(guarantee_.get(resource, 0.0))
        if amount > floor * (1 + BORROW_NOISE):
            result[resource] = amount - floor
    return result


def total(vectors: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The sum of resource vectors (the host's guaranteed, reserved, used)."""
    summed: dict[str, float] = {}
    for vector in vectors:
        for resource, amount in vector.items():
            summed[resource] = summed.get(resource, 0.0) + float(amount)
    return summed
