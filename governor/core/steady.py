"""A state that flips back and forth (the groups' CPU saturation), told only once it holds.

Told at every flip, the CPU saturation filled the journal and ``top``'s event list: five
messages in 13 s while a group's use hovered at its guarantee. :class:`Steady` tells a new state
once it has held ``hold_s`` seconds and differs from the one told last: a flip and back within
that time is told never, a state that stays is told once. Pure: the caller passes the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

__all__ = ["Steady"]


@dataclass
class Steady:
    """When to tell a state that flips (see the module).

    Attributes:
        hold_s: how long, seconds, a new state must hold before it is told.
        told: the state told last (at first: the state nobody needs telling, e.g. not saturated).
        since: the untold state seen last and when it was first seen (seconds, the caller's
            clock); None while the state is the one told.
    """

    hold_s: float
    told: Hashable = None
    since: tuple[Hashable, float] | None = None

    def see(self, state: Hashable, now: float) -> bool:
        """Whether ``state``, seen at ``now`` (seconds, any monotonic clock), is to be told
        now: it differs from the state told last and has held for :attr:`hold_s`.

        >>> steady = Steady(10.0, told=False)
        >>> [steady.see(s, t) for s, t in [(True, 0), (False, 3), (True, 5), (True, 14), (True, 15), (True, 16)]]
        [False, False, False, False, True, False]
        """
        if state == self.told:
            self.since = None
            return False
        if self.since is None or self.since[0] != state:
            self.since = (state, now)
        if now - self.since[1] < self.hold_s:
            return False
        self.told, self.since = state, None
        return True
