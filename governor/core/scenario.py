"""Scenario files for ``governor simulate``: a capacity and some groups, checked into exact numbers.

Pure: the caller reads and parses the TOML; this module checks the resulting dict. A scenario
looks like::

    [capacity]
    cpu = 9
    memory = "18G"                 # K M G T are powers of 1024; plain numbers are base units
    io.nvme0n1.read = "2G"         # dotted keys name the resource "io.nvme0n1.read"

    [groups.A]
    task = { cpu = 1, memory = "4G" }
    weight = 1                     # optional, > 0, default 1
    tasks = 10                     # optional, whole number ≥ 0, default unbounded

    [groups.science]               # a group tree (H-DRF): an internal node has no task
    guarantee = { cpu = 2 }        # optional: satisfied first (Mesos quota)
    limit = { cpu = 6 }            # optional: never exceeded
    [groups.lab]
    parent = "science"
    task = { cpu = 1 }

Every problem is a :class:`~governor.errors.ConfigError` naming the file, the dotted key and the
reason. The checks are those of :func:`governor.core.model.normalize`, done here first so the allocator
never sees bad input and each error points at the line to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from governor.config.groups import check_tree
from governor.config.settings import GROUP_WEIGHT_RANGE
from governor.config.resource_values import MAX_BYTES
from governor.errors import AllocationInputError, ConfigError
from governor.core.model import TreeNode
from governor.core.model import GroupDemand
from governor.config.tomlcheck import amount, in_range, join_key, no_unknown_keys, subtable, type_name

_SECTIONS = ("capacity", "groups")
_GROUP_KEYS = ("task", "weight", "tasks", "parent", "guarantee", "limit")


@dataclass(frozen=True)
class Scenario:
    """A checked scenario.

    Attributes:
        capacity: resource → amount in base units (cores, bytes, bytes/s), in file order.
        groups: one :class:`GroupDemand` per ``[groups.<name>]`` table with a task, in file
            order, with exact amounts and weights.
        tree: one :class:`~governor.core.hdrf.TreeNode` per group when some group has a
            ``parent``, ``guarantee`` or ``limit`` (for :func:`governor.core.hdrf.hierarchical_filling`),
            else empty.
    """

    capacity: dict[str, Fraction]
    groups: list[GroupDemand]
    tree: list[TreeNode] = field(default_factory=list)


def load_scenario(data: Mapping[str, object], file: str) -> Scenario:
    """Check a parsed scenario file and convert it to exact numbers.

    Args:
        data: the dict ``tomllib`` returned for the file.
        file: the file name to put in error messages.

    Returns:
        the :class:`Scenario`.

    Raises:
        ConfigError: for a missing ``[capacity]`` or ``[groups]`` section; an unknown key; a value
            of the wrong type; a negative, non-finite or malformed amount, or one above 2^62; a
            weight outside 0.001–1000; a task
            count that is not a whole number ≥ 0; a task demanding a resource the capacity lacks
            or whose capacity is 0; a task demanding nothing; a group with neither a task nor a
            child group, or with both; a parent that is no group of the file, or a cycle; a
            quota naming a resource the capacity lacks; a name that is not printable text.
    """
    no_unknown_keys(data, _SECTIONS, None, file)
    capacity_table = subtable(data, "capacity", None, file, required=True)
    if not capacity_table:
        raise ConfigError(file, "capacity", "lists no resource; give at least one, e.g. cpu = 4")
    capacity = _amounts(capacity_table, "capacity", file)

    groups_table = subtable(data, "groups", None, file, required=True)
    if not groups_table:
        raise ConfigError(file, "groups", "defines no group; add a table like [groups.A]")
    for name in groups_table:
        _printable(name, "groups", file)
    parents = {name: _parent(name, table, groups_table, file) for name, table in groups_table.items()}
    internal = set(parents.values()) - {None}
    groups, tree = [], []
    for name, table in groups_table.items():
        where = join_key("groups", name)
        if not isinstance(table, Mapping):
            raise ConfigError(file, where, f"must be a table [{where}], got {type_name(table)}")
        if name in internal:
            no_unknown_keys(table, _GROUP_KEYS, where, file)
            if "task" in table or "tasks" in table:
                raise ConfigError(file, f"{where}.task", "a group with child groups has no task of its own")
        else:
            groups.append(_group(name, table, capacity, file))
        tree.append(TreeNode(name, parents[name], _weight(table, where, file),
                             _quota(table, "guarantee", where, capacity, file),
                             _quota(table, "limit", where, capacity, file)))
    check_tree(parents, file, max_depth=None)
    nested = any(node.parent or node.guarantee or node.limit for node in tree)
    return Scenario(capacity, groups, tree if nested else [])


def _parent(name: str, table: object, groups: Mapping[str, object], file: str) -> str | None:
    if not isinstance(table, Mapping) or "parent" not in table:
        return None
    parent = table["parent"]
    key = f"{join_key('groups', name)}.parent"
    if not isinstance(parent, str) or parent == name or parent not in groups:
        raise ConfigError(file, key, f"must name another [groups.<name>] table of this file, got {parent!r}")
    return parent


def _quota(table: Mapping[str, object], name: str, where: str, capacity: Mapping[str, Fraction],
           file: str) -> dict[str, Fraction]:
    if name not in table:
        return {}
    key = f"{where}.{name}"
    if not isinstance(table[name], Mapping):
        raise ConfigError(file, key, f"must be a table like {{ cpu = 2 }}, got {type_name(table[name])}")
    amounts = _amounts(table[name], key, file)
    for resource in amounts:
        if resource not in capacity:
            raise ConfigError(file, f"{key}.{resource}",
                              f"resource not in [capacity] (capacity has: {', '.join(capacity)})")
    return amounts


def allocation_error(error: AllocationInputError, file: str) -> ConfigError:
    """Point an error the allocator raised at the scenario key it comes from.

    ``group`` and ``resource`` become ``groups.<group>.task.<resource>``, ``groups.<group>`` or
    ``capacity.<resource>``; an error about neither names the whole file.
    """
    if error.group is not None:
        key = join_key("groups", error.group)
        if error.resource is not None:
            key += f".task.{error.resource}"
    elif error.resource is not None:
        key = f"capacity.{error.resource}"
    else:
        key = None
    return ConfigError(file, key, error.reason)


def _group(name: str, table: object, capacity: Mapping[str, Fraction], file: str) -> GroupDemand:
    where = join_key("groups", name)
    if not isinstance(table, Mapping):
        raise ConfigError(file, where, f"must be a table [{where}], got {type_name(table)}")
    no_unknown_keys(table, _GROUP_KEYS, where, file)
    if "task" not in table:
        raise ConfigError(file, f"{where}.task", "missing; give the demand of one task, e.g. task = { cpu = 1 }")
    task_table = table["task"]
    if not isinstance(task_table, Mapping):
        raise ConfigError(file, f"{where}.task", f"must be a table like {{ cpu = 1 }}, got {type_name(task_table)}")
    task = _amounts(task_table, f"{where}.task", file)
    for resource, needed in task.items():
        if resource not in capacity:
            raise ConfigError(
                file, f"{where}.task.{resource}",
                f"resource not in [capacity] (capacity has: {', '.join(capacity)})",
            )
        if needed > 0 and capacity[resource] == 0:
            raise ConfigError(file, f"{where}.task.{resource}", f"demands capacity.{resource}, which is 0")
    if not any(task.values()):
        raise ConfigError(file, f"{where}.task", "demands nothing; a task must need some resource")
    return GroupDemand(name=name, task=task, weight=_weight(table, where, file), tasks=_tasks(table, where, file))


def _weight(table: Mapping[str, object], where: str, file: str) -> Fraction:
    if "weight" not in table:
        return Fraction(1)
    return in_range(table["weight"], f"{where}.weight", file, *GROUP_WEIGHT_RANGE)


def _tasks(table: Mapping[str, object], where: str, file: str) -> int | None:
    if "tasks" not in table:
        return None
    value = table["tasks"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            file, f"{where}.tasks", f"must be a whole number ≥ 0 (leave it out for unbounded), got {value!r}"
        )
    return value


def _amounts(table: Mapping[str, object], where: str, file: str) -> dict[str, Fraction]:
    """Flatten a table of amounts, so ``io.sda.read = "1G"`` (nested by TOML) is resource ``io.sda.read``."""
    amounts: dict[str, Fraction] = {}
    for resource, value in _flatten(table, ""):
        _printable(resource, where, file)
        key = f"{where}.{resource}"
        if resource in amounts:
            raise ConfigError(file, key, "given twice (once as a dotted key, once quoted)")
        amounts[resource] = amount(value, key, file)
        # The daemon's own bound: beyond it no host has the amount, and floats lose it.
        if amounts[resource] > MAX_BYTES:
            raise ConfigError(file, key, f"must be at most {MAX_BYTES:,}, got {float(amounts[resource]):g}")
    return amounts


def _printable(name: str, where: str, file: str) -> None:
    """Refuse a name with a character a terminal acts on: the tables print names as written
    (a group named ``"\\u001b[2Jbio"`` cleared the screen)."""
    if not name.isprintable():
        raise ConfigError(file, where, f"names must be printable text, got {ascii(name)[:60]}")


def _flatten(table: Mapping[str, object], prefix: str):
    for name, value in table.items():
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value
