"""The numbers behind DESIGN.md §1's words, each computed here once for every view. Pure.

*floor*: ``w_g / Σ w``, the share of every resource DRF promises a group while every group is
busy (sharing incentive, Ghodsi et al. §3 and §4.3 for weights), and all of it while the others
are idle. It is what ``check-config``, ``explain`` and ``status`` call a group's floor.
"""

from __future__ import annotations

from collections.abc import Mapping


def floors(weights: Mapping[str, float]) -> dict[str, float]:
    """Group → its floor, a fraction in (0, 1].

    Args:
        weights: every configured group → its weight (> 0).

    Returns:
        ``w_g / Σ w`` per group; empty for no group.
    """
    total = sum(weights.values())
    return {group: weight / total for group, weight in weights.items()} if total > 0 else {}
