"""``[groups.<name>]`` tables: who may launch into a group, its weight, and its place in the
group tree with its quotas (DESIGN.md §2 "Hierarchy", §7). Pure: checks what ``tomllib`` gave.

A group names a ``parent`` to nest under it; a group that is some group's parent is an
**internal node**: it has no members of its own (its users are in its child groups), so that
its cgroup holds no process (cgroup v2's no-internal-process rule). Quotas are vectors keyed
by each resource's quota key (:func:`governor.config.resources.quota_keys`): ``cpu`` (cores),
``memory`` (bytes), ``gpus`` (whole devices, where ``capacity.gpus`` governs some).
``guarantee`` is satisfied before fair sharing divides the rest, ``limit`` is never exceeded,
``user_limit`` caps what each member's tasks and session in a leaf group declare together.
``[groups."*"]`` (every other user a group of her own) takes a ``weight`` and a ``user_limit``.
"""

from __future__ import annotations

from collections.abc import Mapping

from governor.config.settings import GROUP_WEIGHT_RANGE, GroupRule, group_name_problem
from governor.config.resource_values import MAX_BYTES, cores_setting
from governor.errors import ConfigError
from governor.config.resources import Resource, ResourceKind, quota_keys
from governor.config.tomlcheck import (amount, in_range, join_key, login_name, no_unknown_keys, number, subtable,
                                      type_name)
from governor.config.resources import format_amount

EVERYONE = "*"
_GROUP_KEYS = ("weight", "users", "unix_groups", "parent", "guarantee", "limit", "user_limit")
# Levels below governor's root a group may sit at: each is a cgroup directory a task's path
# goes through, and v1 writes every quota level by level.
MAX_DEPTH = 8
_WEIGHT = 1.0


def parse_groups(data: Mapping[str, object],
                 file: str) -> tuple[tuple[GroupRule, ...], float | None, dict[str, float]]:
    """The explicit groups (file order), the weight of ``[groups."*"]`` (None without it) and
    its ``user_limit``: what each of its users (each a group of her own) may declare together.

    Raises:
        ConfigError: naming the key, for no group; an unusable group name; an unknown key; a
            weight outside 0.001–1000; a leaf group nobody could join; members on a group with
            child groups; a parent that is no explicit group, itself, or part of a cycle; a tree
            deeper than :data:`MAX_DEPTH`; a quota naming no quota key (cpu, memory, gpus), an
            amount that is negative, not finite or too large, a ``gpus`` that is no whole
            number, where ``capacity.gpus`` governs none, or above how many it lists; a
            guarantee above the same group's limit; children's guarantees that do not fit in their parent's guarantee
            or limit; a ``user_limit`` on a group with child groups.
    """
    table = subtable(data, "groups", None, file, required=True)
    if not table:
        raise ConfigError(file, "groups", 'defines no group; add [groups."*"] for one group per user')
    everyone_weight, everyone_limit = None, {}
    gpus = _gpu_count(data)
    tables: dict[str, Mapping[str, object]] = {}
    for name in table:
        where = join_key("groups", name)
        rule = subtable(table, name, "groups", file)
        if name == EVERYONE:
            no_unknown_keys(rule, ("weight", "user_limit"), where, file)
            everyone_weight = _weight(rule["weight"], f"{where}.weight", file) if "weight" in rule else _WEIGHT
            everyone_limit = _quota(rule, "user_limit", where, file, gpus)
            continue
        problem = group_name_problem(name)
        if problem is not None:
            raise ConfigError(file, where, problem)
        no_unknown_keys(rule, _GROUP_KEYS, where, file)
        tables[name] = rule
    parents = {name: _parent(rule, name, tables, file) for name, rule in tables.items()}
    internal = {parent for parent in parents.values() if parent is not None}
    rules = []
    for name, rule in tables.items():
        where = join_key("groups", name)
        users = names(rule.get("users", []), f"{where}.users", file)
        unix_groups = names(rule.get("unix_groups", []), f"{where}.unix_groups", file)
        if name in internal:
            if users or unix_groups:
                raise ConfigError(file, where, "has child groups, so it has no members of its own: put its users "
                                               "in a child group (a cgroup with children holds no process)")
            if "user_limit" in rule:
                raise ConfigError(file, f"{where}.user_limit",
                                  "applies to a group's members; this group has child groups and no members")
        elif not users and not unix_groups:
            raise ConfigError(file, where, "lists no users or unix_groups, so nobody could launch into it")
        rules.append(GroupRule(
            name, _weight(rule["weight"], f"{where}.weight", file) if "weight" in rule else _WEIGHT, users,
            unix_groups, parent=parents[name], guarantee=_quota(rule, "guarantee", where, file, gpus),
            limit=_quota(rule, "limit", where, file, gpus), user_limit=_quota(rule, "user_limit", where, file, gpus)))
    check_tree(parents, file)
    _check_quotas(rules, file)
    return tuple(rules), everyone_weight, everyone_limit


def _parent(rule: Mapping[str, object], name: str, tables: Mapping[str, object], file: str) -> str | None:
    if "parent" not in rule:
        return None
    key = f"{join_key('groups', name)}.parent"
    parent = rule["parent"]
    if not isinstance(parent, str):
        raise ConfigError(file, key, f"must be the name of another group, got {type_name(parent)}")
    if parent == name:
        raise ConfigError(file, key, "names the group itself")
    if parent not in tables:
        many = ' ([groups."*"] stands for many groups and has no children)' if parent == EVERYONE else ""
        raise ConfigError(file, key, f"names {parent!r}, which is no [groups.<name>] table of this file{many}")
    return parent


def check_tree(parents: Mapping[str, str | None], file: str, *, max_depth: int | None = MAX_DEPTH) -> None:
    """Refuse a cycle of ``parent`` keys, or a group deeper than ``max_depth`` levels (None: any).

    Args:
        parents: group → the group it names as ``parent`` (None: top level); every parent is a key.

    Raises:
        ConfigError: at ``groups.<name>.parent``, showing the cycle or the depth.
    """
    for name in parents:
        seen = [name]
        node = parents[name]
        while node is not None:
            if node in seen:
                raise ConfigError(file, f"{join_key('groups', name)}.parent",
                                  f"makes a cycle: {' -> '.join([*seen, node])}")
            seen.append(node)
            node = parents[node]
        if max_depth is not None and len(seen) > max_depth:
            raise ConfigError(file, f"{join_key('groups', name)}.parent",
                              f"puts the group {len(seen)} levels deep; at most {max_depth} are allowed")


def _check_quotas(rules: list[GroupRule], file: str) -> None:
    # Children by parent, once: a scan of every rule for each took 40 s at 10,000 groups.
    children_of: dict[str, list[GroupRule]] = {}
    for rule in rules:
        if rule.parent is not None:
            children_of.setdefault(rule.parent, []).append(rule)
    keys = {entry.name: key for key, entry in quota_keys().items()}  # resource → the key it was given as
    for rule in rules:
        where = join_key("groups", rule.name)
        for resource, guaranteed in rule.guarantee.items():
            if guaranteed > rule.limit.get(resource, guaranteed):
                own = format_amount(resource, rule.limit[resource], unit=True)
                raise ConfigError(file, f"{where}.guarantee.{keys[resource]}", f"is above the group's own limit, {own}")
        children = children_of.get(rule.name, [])
        for resource in keys:
            given = [child for child in children if resource in child.guarantee]
            total = sum(child.guarantee[resource] for child in given)
            bound = rule.guarantee.get(resource, rule.limit.get(resource))
            if given and bound is not None and total > bound:
                which = "guarantee" if resource in rule.guarantee else "limit"
                raise ConfigError(file, f"{join_key('groups', given[0].name)}.guarantee.{keys[resource]}",
                                  f"the guarantees of {rule.name}'s child groups add up to "
                                  f"{format_amount(resource, total, unit=True)}, more than {rule.name}'s {which}, "
                                  f"{format_amount(resource, bound, unit=True)}")


def _quota(rule: Mapping[str, object], name: str, where: str, file: str, gpus: int | None) -> dict[str, float]:
    """``guarantee``, ``limit`` or ``user_limit`` of one group: resource name → amount."""
    key = f"{where}.{name}"
    table = subtable(rule, name, where, file)
    keys = quota_keys()
    no_unknown_keys(table, tuple(keys), key, file)
    for given in table:
        if name == "guarantee" and keys[given].kind is ResourceKind.COUNT:
            raise ConfigError(file, f"{key}.{given}", f"a count is a cap, never divided: nothing guarantees "
                                                      f"{keys[given].unit}; give it in limit or user_limit")
    return {keys[given].name: _quota_amount(keys[given], value, f"{key}.{given}", file, gpus)
            for given, value in table.items()}


def _quota_amount(entry: Resource, value: object, at: str, file: str, gpus: int | None) -> float:
    """One quota's amount of ``entry``, by its unit: cores from 0.01 (the kernel's smallest CPU
    quota: a limit of 1e-310 cores once passed, and the filling handed the group as much), bytes
    > 0, whole devices ≥ 0 (``gpus = 0`` keeps a group off the GPUs) no more than ``gpus`` (None:
    not known here)."""
    if entry.unit == "cores":
        return cores_setting(value, at, file)
    if entry.kind is ResourceKind.COUNT:
        return float(entry.setting(value, at, file))
    if entry.unit == "devices":
        count = number(value, at, file)
        if count.denominator != 1:
            raise ConfigError(file, at, f"must be a whole number of GPUs, got {float(count):g}")
        if gpus is None and entry.absent:
            raise ConfigError(file, at, f"names GPUs, but {entry.absent}")
        if gpus and count > gpus:
            raise ConfigError(file, at, f"must be at most the {gpus} GPUs capacity.gpus lists, got {count}")
        return float(count)
    size = amount(value, at, file)
    if not 0 < size <= MAX_BYTES:
        raise ConfigError(file, at, f"must be more than 0 and at most {MAX_BYTES:,} bytes")
    return float(int(size))


def _gpu_count(data: Mapping[str, object]) -> int | None:
    """How many GPUs ``capacity.gpus`` governs: its list's length, 0 for ``"auto"`` (found at
    start), None where it is left out (checked in full with ``[capacity]``)."""
    capacity = data.get("capacity")
    gpus = capacity.get("gpus") if isinstance(capacity, Mapping) else None
    return len(gpus) if isinstance(gpus, list) else None if gpus is None else 0


def _weight(value: object, key: str, file: str) -> float:
    return float(in_range(value, key, file, *GROUP_WEIGHT_RANGE))


def names(value: object, key: str, file: str) -> tuple[str, ...]:
    """An array of user or Unix group names at ``key``, each one :func:`login_name` takes.
    Raises ConfigError."""
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(file, key, f'must be an array of non-empty strings like ["alice"], got {value!r:.80}')
    return tuple(login_name(item, f"{key}[{index}]", file) for index, item in enumerate(value))
