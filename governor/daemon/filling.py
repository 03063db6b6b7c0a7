"""Progressive filling over the groups' demands under the config in force: what a refill and
``governor explain`` divide the host with. Pure: the config, the capacity and the weights in,
the allocation out."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from governor.config.load import Config
from governor.config.resources import count
from governor.core.hdrf import TreeNode, hierarchical_filling
from governor.core.model import Allocation, GroupDemand
from governor.errors import FillingDiverged

__all__ = ["fill"]


def fill(config: Config, capacity: Mapping[str, float], weight: Callable[[str], float],
         demands: Mapping[str, Mapping[str, float]], *, trace: bool = False) -> Allocation | None:
    """Progressive filling over the groups' summed demands (group → D_g, cores, bytes,
    bytes/s) within ``capacity``: H-DRF over ``config``'s group tree with its quotas
    (:func:`governor.core.hdrf.hierarchical_filling`; flat weighted DRF when no group nests or
    has a quota), each group weighed with ``weight(group)`` (its effective weight:
    :meth:`Policy.fair_weight <governor.daemon.policy.Policy.fair_weight>`). None with no
    demand; with ``trace``, the filling's steps are kept (``governor explain``).

    Raises:
        FillingDiverged: the filling reached no answer (one of its own checks failed, or its
            arithmetic: a division by zero, an overflow, on extreme amounts the config let through):
            the caller keeps the plan in force. No other division stands in for it: flat
            DRF would drop every guarantee and limit of the tree (DESIGN.md §2).
    """
    if not demands:
        return None
    # A count (pids) is a cap, never divided (DESIGN.md §3): the filling never sees one. The
    # names are few: each is asked once per filling, not once per group and resource (at 1,000
    # groups whose demands carry a pids cap, asking took 3 of the filling's 8.6 ms).
    rules = config.groups if config.nested else ()
    named = set().union(*demands.values(), *(rule.guarantee for rule in rules), *(rule.limit for rule in rules))
    counts = frozenset(resource for resource in named if count(resource))
    groups = [GroupDemand(g, _divided(d, counts), weight=weight(g), tasks=1) for g, d in demands.items()]
    tree = tuple(TreeNode(rule.name, rule.parent, weight(rule.name), _divided(rule.guarantee, counts),
                          _divided(rule.limit, counts)) for rule in rules)
    try:
        return hierarchical_filling(capacity, groups, tree, trace=trace)
    except (AssertionError, ArithmeticError) as error:  # its own check, or its arithmetic, failed on input it accepted
        raise FillingDiverged(f"{'H-DRF' if tree else 'DRF'}: {error or 'an invariant failed'}") from error


def _divided(vector: Mapping[str, float], counts: frozenset[str]) -> Mapping[str, float]:
    """``vector`` less the resources of ``counts`` (the same object when it has none of them)."""
    return vector if counts.isdisjoint(vector) else {r: a for r, a in vector.items() if r not in counts}
