"""Fair share over time: each group's past use, decaying with a half-life, lowers its weight
(opt-in, ``[fairshare] half_life = "1d"``), as Slurm's fair-share factor (``PriorityDecayHalfLife``)
and HTCondor's ``PRIORITY_HALFLIFE`` do.

A group's **usage** is its dominant share of what it was charged (at each sample: the largest,
over resources, of its charge / capacity, a fraction of capacity) times the seconds it lasted,
in capacity-seconds, decayed by half every ``half_life_s``. Charged, as Slurm charges a job's
allocated TRES over its run: CPU from the kernel's cumulative counters, memory and GPUs as
reserved × time (:class:`governor.core.usage.Charges`), never from samples that miss short tasks. Its **effective weight** is Slurm's
classic fair-share factor applied to its configured weight::

    effective = weight × 2^(−U/S)
    U = the group's usage / its sibling set's usage (0 when that is 0)
    S = the group's weight / its sibling set's weights

where the sibling set is the groups compared with it (same parent, itself included) and a
group with child groups counts its own usage plus its subtree's. A group that used exactly its
share (U = S) gets half its weight, as does every sibling that did: DRF compares weights only
within a sibling set, so equal factors change nothing and only a group ahead of or behind its
share moves.

The effective weight is bounded below by :data:`MIN_EFFECTIVE_WEIGHT`, the config's least
weight (0.001): 2^(−U/S) underflows to 0.0 once U/S passes ~1075 (S can be 1e−6 with weights
0.001 and 1000), and every effective weight then stays a weight the config could have written,
which the allocation and the kernel-weight mapping already handle. A floor relative to the
weight (weight × 2^−k) was not taken: it would cap how much history can count (with k+1 equal
siblings, one that ran alone would already sit on it).

Pure: no clock (times are passed in, unix seconds, so that a history written by one daemon
is read by the next) and no I/O (:mod:`governor.daemon.fairshare_history` keeps the file).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from governor.config.settings import GROUP_WEIGHT_RANGE, group_name_problem

__all__ = ["MIN_EFFECTIVE_WEIGHT", "FORMAT_VERSION", "FairShare", "Standing"]

MIN_EFFECTIVE_WEIGHT = GROUP_WEIGHT_RANGE[0]
FORMAT_VERSION = 1
# Usage below this (a millisecond at a thousandth of the host) is dropped: per-user groups come
# and go, and a history of every user ever seen would only grow.
_FORGOTTEN = 1e-6


@dataclass(frozen=True, slots=True)
class Standing:
    """One group's fair-share standing, for ``explain`` and the metrics.

    Attributes:
        weight: the configured weight; usage: decayed usage of the group and its subtree,
            capacity-seconds; usage_share: U, that usage / its sibling set's (0..1);
            weight_share: S, weight / its sibling set's weights (0..1]; factor: 2^(−U/S);
            effective: the weight the allocation uses, ``max(weight × factor, floor)``.
    """

    weight: float
    usage: float
    usage_share: float
    weight_share: float
    factor: float
    effective: float


@dataclass
class FairShare:
    """Groups' decayed usage, and the weights it gives.

    Attributes:
        half_life_s: seconds in which usage decays to half (> 0, finite).
        usage: group → decayed usage, capacity-seconds (dominant share × seconds), as of ``at``.
        at: unix time (seconds) ``usage`` is decayed to, or None before the first sample.

    Raises:
        ValueError: a half-life that is not finite and above zero.
    """

    half_life_s: float
    usage: dict[str, float] = field(default_factory=dict)
    at: float | None = None

    def __post_init__(self) -> None:
        if not (_number(self.half_life_s) and self.half_life_s > 0):
            raise ValueError(f"half_life_s: must be a finite number of seconds above zero, got {self.half_life_s!r}")

    def decayed(self, now: float) -> dict[str, float]:
        """Each group's usage decayed to ``now`` (unix seconds), capacity-seconds; changes nothing.

        A clock that went back (``now`` before :attr:`at`) decays nothing. Usage decayed below
        a millionth of a capacity-second is left out (forgotten): U is relative to the
        siblings' usage, so only forgetting ends the history of a group nobody ran after.

        Raises:
            ValueError: ``now`` is not a finite number.
        """
        keep = self._keep(now)
        return {group: used * keep for group, used in self.usage.items() if used * keep >= _FORGOTTEN}

    def add(self, now: float, shares: Mapping[str, float], seconds: float) -> None:
        """Decay the usage to ``now`` (unix seconds), then add each group's ``shares[g] × seconds``
        (decayed within the sample too, which falls short of share × seconds by about
        seconds × ln 2 / (2 × half-life): 4e−5 for a 10 s sample against a day).

        Args:
            shares: group → its dominant share of what it was charged over the sample, a
                fraction of capacity. A share that is not a finite number ≥ 0 is ignored (a counter that
                could not be read must not poison days of history); one above 1 counts as 1 (no
                group uses more than the whole host; a reading above it is a counter's hiccup).
            seconds: how long the sample lasted (up to ``now``). Nothing is added when it is not
                a finite number > 0 (a clock that went back), but the decay still happens.

        Raises:
            ValueError: ``now`` is not a finite number.
        """
        decayed = self.decayed(now)
        # A clock that went back moves `at` back with it: holding the later time would stop all
        # decay until the clock caught up (a year, after a bad RTC was corrected).
        self.at, self.usage = now, decayed
        if not (_number(seconds) and seconds > 0):
            return
        # A share held for `seconds`, decaying meanwhile: share × ∫ 2^(−t/h) dt over the sample,
        # share × seconds for a sample much shorter than the half-life, and never above share ×
        # h/ln 2, so no sample, however long, makes the history infinite.
        held = -math.expm1(-seconds * math.log(2) / self.half_life_s) * self.half_life_s / math.log(2)
        for group, share in shares.items():
            if _number(share) and share > 0:
                self.usage[group] = self.usage.get(group, 0.0) + min(share, 1.0) * held

    def standings(self, now: float, weights: Mapping[str, float],
                  parents: Mapping[str, str | None] | None = None) -> dict[str, Standing]:
        """Each group's :class:`Standing` at ``now`` (unix seconds); changes nothing.

        Args:
            weights: group → configured weight (> 0), for every group to compare: usually every
                group the allocation weighs. Siblings missing from it are not compared.
            parents: group → its parent group, None (or absent) for a top-level group. A group's
                usage includes that of every group (in :attr:`usage` too) below it.

        Returns:
            a standing for each group of ``weights``.

        Raises:
            ValueError: naming the group, for a weight that is not finite and above zero, or a
                cycle in ``parents``; ``now`` is not a finite number.
        """
        parents = parents or {}
        for group, weight in weights.items():
            if not (_number(weight) and weight > 0):
                raise ValueError(f"weights[{group!r}]: must be a finite number above zero, got {weight!r}")
        subtree = dict.fromkeys(weights, 0.0)
        for group, used in self.decayed(now).items():
            for member in _ancestry(group, parents):
                if member in subtree:
                    subtree[member] += used
        siblings: dict[str | None, list[str]] = {}
        for group in weights:
            siblings.setdefault(parents.get(group), []).append(group)
        found = {}
        for members in siblings.values():
            total_weight = sum(weights[g] for g in members)
            total_usage = sum(subtree[g] for g in members)
            for group in members:
                weight = weights[group]
                u = subtree[group] / total_usage if total_usage > 0 else 0.0
                s = weight / total_weight
                factor = 2.0 ** (-u / s)
                floor = min(weight, MIN_EFFECTIVE_WEIGHT)  # a caller's weight below the config's stays
                found[group] = Standing(weight, subtree[group], u, s, factor, max(weight * factor, floor))
        return found

    def effective_weights(self, now: float, weights: Mapping[str, float],
                          parents: Mapping[str, str | None] | None = None) -> dict[str, float]:
        """group → effective weight at ``now``, for each group of ``weights``: the
        :attr:`Standing.effective` of :meth:`standings` (same arguments and errors)."""
        return {group: s.effective for group, s in self.standings(now, weights, parents).items()}

    def to_json(self) -> dict:
        """The history as JSON: ``{"version": 1, "at": unix s | null, "usage": {group:
        capacity-seconds}}`` (the half-life is the config's, not the file's)."""
        return {"version": FORMAT_VERSION, "at": self.at, "usage": dict(self.usage)}

    @classmethod
    def from_json(cls, data: object, half_life_s: float) -> FairShare:
        """A history from :meth:`to_json`'s form, every value checked (the file is read back by a
        daemon that trusts its weights to it).

        Raises:
            ValueError: naming the key: not an object, an unknown or missing key, another
                version, ``at`` not a finite number ≥ 0 or null, a usage that is not a finite
                number ≥ 0 or whose total is not finite, a key that is no group name; or a bad
                ``half_life_s``.
        """
        if not isinstance(data, dict):
            raise ValueError(f"fair-share history: expected a JSON object, got {type(data).__name__}")
        if set(data) != {"version", "at", "usage"}:
            got = ", ".join(sorted(map(str, data)))
            raise ValueError(f"fair-share history: keys must be at, usage, version; got {got}")
        if data["version"] != FORMAT_VERSION or type(data["version"]) is not int:
            raise ValueError(f"version: expected {FORMAT_VERSION}, got {data['version']!r}")
        at = data["at"]
        if at is not None and not (_number(at) and at >= 0):
            raise ValueError(f"at: must be a finite unix time >= 0 or null, got {at!r}")
        usage = data["usage"]
        if not isinstance(usage, dict):
            raise ValueError(f"usage: expected an object of group → capacity-seconds, got {type(usage).__name__}")
        for group, used in usage.items():
            problem = group_name_problem(group)
            if problem:
                raise ValueError(f"usage[{group!r}]: {problem}")
            if not (_number(used) and used >= 0):
                raise ValueError(f"usage[{group!r}]: must be a finite number >= 0, got {used!r}")
        if not math.isfinite(sum(usage.values())):
            raise ValueError("usage: the total is not finite")
        return cls(half_life_s, {g: float(u) for g, u in usage.items()}, None if at is None else float(at))

    def _keep(self, now: float) -> float:
        """The fraction of usage left from :attr:`at` to ``now``."""
        if not _number(now):
            raise ValueError(f"now: must be a finite unix time, got {now!r}")
        if self.at is None:
            return 1.0
        return 2.0 ** (-max(now - self.at, 0.0) / self.half_life_s)


def _number(value: object) -> bool:
    """A finite int or float (not a bool, which JSON and Python would let pass as 0 or 1)."""
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int of 400 digits, as JSON may give
        return False


def _ancestry(group: str, parents: Mapping[str, str | None]) -> list[str]:
    """``group`` then its parent, its parent's parent… (ValueError: a cycle)."""
    chain = [group]
    while (parent := parents.get(chain[-1])) is not None:
        if parent in chain:
            raise ValueError(f"parents: {group!r} is part of a cycle")
        chain.append(parent)
    return chain
