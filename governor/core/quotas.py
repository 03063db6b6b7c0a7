"""The quotas admission holds waiting tasks to (DESIGN.md §2 "Hierarchy"): each group's
``limit`` of memory over its subtree, and each member's ``user_limit`` in a group. Pure.

A group's memory is incompressible, so its limit is kept at the door as well as by the
kernel (its cgroup's ``memory.max``): a task that would take its group past it waits rather
than starting into an OOM kill. GPUs are whole devices no cgroup file counts, so the door is
all that keeps a group's ``gpus`` limit: every admitted resource
(:func:`governor.config.resources.admitted`) is held there. A group's CPU limit needs no door: its
cgroup's ``cpu.max`` shares it, as its ``pids.max`` holds its ``pids`` limit. A user limit is "admission plus caps": every task runs within the cap it
declared, so holding the declarations of one member's tasks and session to ``user_limit``
holds what they use to it, without a cgroup level per user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from governor.config import resources
from governor.core.admission import Quota, Waiting
from governor.config.settings import Config
from governor.errors import RequestError
from governor.core.state import Tasks, one_session_each
from governor.config.resources import format_amount


def quotas(config: Config, tasks: Tasks, waiting: Sequence[Waiting]) -> list[Quota]:
    """The quotas that cover some waiting task, with what the running tasks declare under each.

    Args:
        config: the config in force; tasks: the running tasks (sessions too: one per user
            and group, :func:`~governor.core.state.one_session_each`);
        waiting: the queue.

    Returns:
        one :class:`~governor.core.admission.Quota` per limited group above a waiting task (its
        limit of admitted resources: memory bytes, whole GPUs) and per waiting member of a group with a ``user_limit``.
    """
    found: dict[tuple[str, str | None], Quota] = {}
    at_door = {entry.name for entry in resources.admitted()}  # a CPU limit is its cgroup's cpu.max
    for entry in waiting:
        for group in (entry.group, *config.ancestors(entry.group)):
            rule = config.rule(group)
            limit = {r: a for r, a in rule.limit.items() if r in at_door} if rule else {}
            if limit and (group, None) not in found:
                found[(group, None)] = Quota(f"group {group}'s limit", limit, {}, frozenset(_subtree(config, group)))
        user_limit = config.user_limit(entry.group)
        if user_limit and (entry.group, entry.user) not in found:
            found[(entry.group, entry.user)] = Quota(f"{entry.user}'s user_limit in group {entry.group}",
                                                     user_limit, {}, frozenset([entry.group]), entry.user)
    if not found:
        return []
    # What a group's limit counts is its subtree's groups' summed declarations, which Tasks
    # keeps per group (summed again only for a group whose tasks changed); a user's is her
    # tasks' in one group. Neither looks at every running task at every settle.
    demands = tasks.demands()
    for quota in found.values():
        if quota.user is None:
            declared = [demands[group] for group in quota.groups if group in demands]
        else:
            [group] = quota.groups
            declared = [task.demand for task in one_session_each(tasks.in_group(group)) if task.user == quota.user]
        for demand in declared:
            for resource in quota.limit:
                quota.used[resource] = quota.used.get(resource, 0.0) + demand.get(resource, 0.0)
    return list(found.values())


def _subtree(config: Config, group: str) -> list[str]:
    return [group, *(rule.name for rule in config.groups if group in config.ancestors(rule.name))]


def check_within_quotas(config: Config, group: str, demand: Mapping[str, float]) -> None:
    """Refuse a launch into ``group`` that no quota over it could ever admit, even with no
    other task running (it would wait for ever).

    Raises:
        RequestError: ``exceeds_capacity`` naming the quota, the resource, the demand and the limit.
    """
    user_limit = config.user_limit(group)
    bounds = [(f"{group}'s user_limit", user_limit)] if user_limit else []
    for above in (group, *config.ancestors(group)):
        limited = config.rule(above)
        if limited is not None:  # a declared cpu above the limit could never get it either
            # A count's cap above the group's harms nothing: the group's pids.max holds them all.
            bounds.append((f"group {above}'s limit", {r: a for r, a in limited.limit.items() if not resources.count(r)}))
    for name, limit in bounds:
        for resource, amount in limit.items():
            if demand.get(resource, 0.0) > amount * (1 + 1e-9):
                asked, has = (format_amount(resource, v, unit=True) for v in (demand[resource], amount))
                raise RequestError("exceeds_capacity", f"demand {resource} = {asked} exceeds {name} of {has}")
