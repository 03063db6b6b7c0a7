"""The last records of many owners, kept fairly: at most a number in all and, once full, each new
record pushes out the oldest of the owner who has the most. An attacker's check: one user's
churn of 1,005 short tasks pushed every other user's ended records out of the daemon's last
1,000 (``ps --ended`` showed them nothing), as one queue of the last 1,000 does. Pure."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

__all__ = ["KeptRecords"]

T = TypeVar("T")


class KeptRecords(Generic[T]):
    """Records, oldest first, at most ``maxlen`` of them (as a bounded deque's); ``owner(record)``
    says whose.

    A record is pushed out only when the records are full: the oldest of the owner with the most
    (of two such, the one whose oldest is older). An owner with no more than ``maxlen`` divided by
    the owners' number keeps all of hers, whatever another appends.
    """

    def __init__(self, maxlen: int, owner: Callable[[T], Hashable]):
        self.maxlen = maxlen
        self.owner = owner
        self._records: deque[T] = deque()
        self._counts: Counter = Counter()

    def append(self, record: T) -> None:
        """Keep ``record`` as the newest, pushing out one as said above if full."""
        self._records.append(record)
        self._counts[self.owner(record)] += 1
        if len(self._records) > self.maxlen:  # (counted with the new one: an owner at her share keeps it)
            self._push_out()

    def _push_out(self) -> None:
        most = max(self._counts.values())
        for index, record in enumerate(self._records):
            whose = self.owner(record)
            if self._counts[whose] == most:
                del self._records[index]
                self._counts[whose] -= 1
                if not self._counts[whose]:
                    del self._counts[whose]
                return

    def __iter__(self) -> Iterator[T]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> T:
        return self._records[index]
