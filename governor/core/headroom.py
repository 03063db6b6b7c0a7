"""Whether a config's guarantees of admitted resources can all be held as headroom. Pure.

Admission keeps each group's unused guarantee of an admitted resource (memory, GPUs: the
registry's :func:`governor.config.resources.admitted`) free of other groups' admissions (DESIGN.md
§2, Mesos quota), a nested guarantee inside its parent's. With every group idle, what is kept
is the sum of the outermost guarantees of each resource (those of groups none of whose
ancestors guarantee any of it). The config's own check counts only top-level groups; the
children of a group with neither a guarantee nor a limit of that resource escape it.
"""

from __future__ import annotations

from collections.abc import Mapping

from governor.config import resources
from governor.core.admission import Guarantee, Waiting, admit
from governor.config.settings import Config
from governor.errors import ConfigError, RequestError
from governor.config.tomlcheck import join_key
from governor.config.resources import format_amount


# The last config asked about and its guarantees: every launch and every settle asks, a scan of
# every group (10,000 on a large host) whose answer changes only with the config.
_last: tuple[Config | None, tuple[Guarantee, ...]] = (None, ())


def guarantees(config: Config) -> tuple[Guarantee, ...]:
    """Every group's guarantee of the admitted resources, which admission keeps as headroom:
    one :class:`~governor.core.admission.Guarantee` per group guaranteed some of one, with its
    subtree (worked out once per config)."""
    global _last
    if _last[0] is not config:
        _last = (config, tuple(_guarantees(config)))
    return _last[1]


def _guarantees(config: Config) -> list[Guarantee]:
    counted = {entry.name for entry in resources.admitted()}
    found = []
    for rule in config.groups:
        amount = {r: a for r, a in rule.guarantee.items() if r in counted and a > 0}
        if amount:
            subtree = [rule.name, *(other.name for other in config.groups if rule.name in config.ancestors(other.name))]
            found.append(Guarantee(rule.name, amount, frozenset(subtree)))
    return found


def check_beside_headroom(config: Config, capacity: Mapping[str, float], group: str,
                          demand: Mapping[str, float]) -> None:
    """Refuse a launch into ``group`` that could never start beside the other groups'
    guarantees, even on an idle host (it would wait for ever): admission itself is asked.

    Args:
        config: the config in force; capacity: resource → what is divided (bytes, GPUs);
        group: the task's group; demand: its declared demand vector.

    Raises:
        RequestError: ``exceeds_capacity`` naming the resource, the demand and the headroom kept.
    """
    kept = guarantees(config)
    if not kept:
        return
    answer = admit(capacity, {}, {}, {}, [Waiting("new", group, demand)], guarantees=kept)
    for resource in answer.short.get("new", {}):
        asked, has = (format_amount(resource, v, unit=True) for v in (demand[resource], capacity.get(resource, 0.0)))
        others = ", ".join(f"{g} {format_amount(resource, a, unit=True)}"
                           for g, a in answer.headroom[resource] if g != group)
        raise RequestError("exceeds_capacity", f"demand {resource} = {asked} can never start beside the other "
                                               f"groups' guarantees kept as headroom ({others}) in the capacity "
                                               f"of {has}")


def check_guarantees_held(config: Config, capacity: Mapping[str, float]) -> None:
    """Refuse guarantees of admitted resources that cannot all be held at once.

    Args:
        config: the parsed config; capacity: resource → what the daemon divides (bytes, GPUs);
            a resource it lacks is not checked (``check-config --portable`` without ``capacity.memory``).

    Raises:
        ConfigError: at the first outermost group's ``guarantee.<resource>``, naming the groups,
            their sum and the capacity.
    """
    for entry in resources.admitted():
        resource = entry.name
        if resource not in capacity:
            continue
        outer = [rule for rule in config.groups if rule.guarantee.get(resource, 0) > 0
                 and not any(resource in config.rule(above).guarantee for above in config.ancestors(rule.name))]
        total = sum(rule.guarantee[resource] for rule in outer)
        if outer and total > capacity[resource] * (1 + 1e-9):
            asked, has = (format_amount(resource, v, unit=True) for v in (total, capacity[resource]))
            raise ConfigError(config.file, f"{join_key('groups', outer[0].name)}.guarantee.{entry.quota or resource}",
                              f"the guarantees kept as headroom ({', '.join(rule.name for rule in outer)}) add up "
                              f"to {asked}, more than the capacity here, {has}: they cannot all be held")
