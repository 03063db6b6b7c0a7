"""The fair-share history as the daemon keeps it: in memory, and in a file of the state
directory that the next daemon reads back (:mod:`governor.core.fairshare` has the arithmetic)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from governor.daemon import inbox
from governor.daemon.journal import Journal
from governor.errors import StateFileError
from governor.core.fairshare import FairShare, Standing
from governor.config.resources import compressible, count
from governor.host.state_files import load, write_atomically
from governor.core.usage import Charges

__all__ = ["FILE_NAME", "MAX_FILE_BYTES", "SAVE_EVERY_S", "FairShareHistory", "FairShareStage", "save_due"]

# Not ``*.json``: TaskStore.load_all reads every ``<state_dir>/*.json`` as a task record and
# would set this file aside as a bad one at each start.
FILE_NAME = "fairshare.state"
# About 60 bytes a group: room for many thousand per-user groups.
MAX_FILE_BYTES = 4 << 20


class FairShareHistory:
    """Groups' decayed usage, kept in ``<directory>/fairshare.state`` across restarts.

    Meant to be called so:

    * at start, after the state directory is prepared: ``FairShareHistory(state_dir,
      half_life_s, journal)`` reads the file (:meth:`load`);
    * at each sample tick: :meth:`record` with ``time.time()``, each group's dominant share of
      what it was charged over the tick (fractions of capacity; leaves' only, their parents
      count them: :class:`~governor.core.usage.Charges`) and the tick's length in seconds (from the
      monotonic clock);
    * at each refill: :meth:`weights` with ``time.time()``, the configured weights of the
      groups the refill weighs and their parents, and the allocation uses what it returns;
      ``explain`` and the metrics show :meth:`standings`;
    * at most :data:`SAVE_EVERY_S` apart (:func:`save_due`) and at shutdown: :meth:`save`. The
      file is not synced: a kill -9 loses at most those seconds of history; a host's crash may
      lose what the page cache held, which only shifts weights a little.

    Args:
        directory: the state directory (trusted and made 0700 by
            :class:`~governor.host.task_store.TaskStore`); half_life_s: the configured half-life, seconds;
        journal: where a file that could not be read or written is told.
    """

    def __init__(self, directory: Path, half_life_s: float, journal: Journal) -> None:
        self.path = directory / FILE_NAME
        self.journal = journal
        self._save_failed = False
        self.history = self.load(half_life_s)

    def load(self, half_life_s: float) -> FairShare:
        """The history in the file; an empty one when there is none yet, or when it cannot be
        used (:func:`governor.host.state_files.load`: not a regular file of the daemon's own that
        nobody else may write, larger than :data:`MAX_FILE_BYTES`, not JSON, a value out of
        bounds): then it is set aside as ``fairshare.state.bad`` and a warning says why.
        Never raises but for a bad ``half_life_s`` (ValueError)."""
        fresh = FairShare(half_life_s)  # a bad half-life raises here, not as a bad file set aside
        history, problem = load(self.path, "fair-share history",
                                lambda data: FairShare.from_json(json.loads(data), half_life_s), MAX_FILE_BYTES)
        if problem:
            self.journal.event("error", f"{problem}; it starts afresh", logging.WARNING)
        return fresh if history is None else history

    def record(self, now: float, shares: Mapping[str, float], seconds: float) -> None:
        """Add a sample: ``shares`` (group → dominant share of what it was charged, fraction of
        capacity) held for ``seconds`` up to ``now`` (unix s); see :meth:`FairShare.add`."""
        self.history.add(now, shares, seconds)

    def weights(self, now: float, configured: Mapping[str, float],
                parents: Mapping[str, str | None] | None = None) -> dict[str, float]:
        """group → effective weight at ``now`` (unix s) for each group of ``configured``
        (group → configured weight); see :meth:`FairShare.effective_weights` (ValueError)."""
        return self.history.effective_weights(now, configured, parents)

    def standings(self, now: float, configured: Mapping[str, float],
                  parents: Mapping[str, str | None] | None = None) -> dict[str, Standing]:
        """Each group's configured weight, decayed usage and effective weight at ``now``
        (:meth:`FairShare.standings`)."""
        return self.history.standings(now, configured, parents)

    def save(self) -> bool:
        """Write the history atomically (a reader sees the old file or the new one), mode 0644.

        Returns:
            whether it was written. A failure is told once (until a save succeeds again), not
            raised: the daemon runs on with the history in memory.
        """
        try:
            write_atomically(self.path, json.dumps(self.history.to_json()).encode(), "fair-share history", mode=0o644)
        except StateFileError as error:
            if not self._save_failed:
                self.journal.event("error", f"{error}; kept in memory and written again at the next save",
                                   logging.WARNING)
            self._save_failed = True
            return False
        if self._save_failed:
            self.journal.event("record", f"fair-share history {self.path} is written again")
        self._save_failed = False
        return True


# A refill for fair share only when some effective weight moved by more than this (relative):
# decay moves them a little at every sample.
WEIGHT_STEP = 0.01
# The most seconds of history a daemon killed (kill -9, a crash) may lose: the file is saved
# at the tick after which waiting one more sample interval would leave it further behind.
SAVE_EVERY_S = 5.0


def save_due(saved: float, now: float, interval: float) -> bool:
    """Whether to save the history at this tick (``now``, monotonic seconds; ``saved``: the
    last save's; ``interval``: seconds to the next tick): when not saving now would leave the
    file more than :data:`SAVE_EVERY_S` behind at the next tick, so that a daemon killed
    between two ticks loses at most that much (every tick saves with an interval of 5 s or more)."""
    return now + interval - saved > SAVE_EVERY_S


class FairShareStage:
    """Fair share over time in the running daemon (``[fairshare]``, DESIGN.md §2): at each
    sample, what each group was charged since the last (:class:`~governor.core.usage.Charges`: CPU
    from its cgroup's cumulative counter, memory and GPUs as reserved × time) goes into the
    history as its dominant share, the effective weights are computed again, and a refill is
    asked for when one moved by more than :data:`WEIGHT_STEP`. Off (and the effective weights
    cleared) while the config has no ``[fairshare]``.

    Told, besides each tick: each counter read (:meth:`counted`: the sampler's, and a group
    cgroup's just before its removal, :meth:`removed`) and each task that ended (:meth:`ended`).

    Args:
        directory: the state directory the history is kept in;
        policy: the config in force, the capacity, the configured weights, and where the
            effective weights go (``policy.effective``); tasks: the running tasks;
        inbox: told when the weights moved (settle refills); journal: events.
    """

    def __init__(self, *, directory: Path, policy, tasks, inbox, journal: Journal) -> None:
        self.directory = directory
        self.policy, self.tasks, self.inbox, self.journal = policy, tasks, inbox, journal
        self.history: FairShareHistory | None = None
        self.charges = Charges()
        self._ticked: float | None = None  # the last tick, monotonic s
        self._since: float | None = None  # the last tick, unix s: reservations are charged from it
        self._saved: float | None = None  # the last save, monotonic s

    def counted(self, cgroup: str, group: str, usage_usec: int, *, made_here: bool = True,
                removed: bool = False) -> None:
        """A reading of ``cgroup``'s cumulative CPU counter (µs), charged to ``group``
        (:meth:`Charges.counted <governor.core.usage.Charges.counted>`); ignored while fair share is off."""
        if self._open() is not None:
            self.charges.counted(cgroup, group, usage_usec, made_here=made_here, removed=removed)

    def removed(self, rel: str, usage_usec: int, gone: bool) -> None:
        """Group cgroup ``rel`` (relative to governor's root) read just before its removal
        (``gone``: it was removed; else it stays, holding something). An inner group's cgroup
        is left out: its counter holds its child groups', charged to them."""
        group = rel.rsplit("/", 1)[-1]
        if group not in set(self.policy.config.parents.values()):
            self.counted(group, group, usage_usec, removed=gone)

    def ended(self, task, now: float) -> None:
        """``task`` ended at ``now`` (unix s): its reservation is charged up to then."""
        if self.history is not None and self._since is not None:
            self.charges.reserved(task.group, task.demand, now - max(task.started, self._since), _held)

    def tick(self, now: float, monotonic: float) -> None:
        """One sample: ``now`` unix seconds, ``monotonic`` the monotonic clock's seconds."""
        config = self.policy.config
        history = self._open()
        if history is None:
            self.close()
            return
        history.history.half_life_s = config.fairshare_half_life_s  # a reload may change it
        seconds = monotonic - self._ticked if self._ticked is not None else 0.0
        self._ticked = monotonic
        # Reservations over wall-clock spans (tasks' starts are unix times): a clock stepped
        # forward charges at most the whole host for the tick (FairShare.add cuts a share at 1).
        if self._since is not None:
            for task in self.tasks:
                self.charges.reserved(task.group, task.demand, now - max(task.started, self._since), _held)
        self._since = now
        history.record(now, self.charges.take(self.policy.capacity, seconds), seconds)
        configured = {group: about["weight"] for group, about in self.policy.configured(self.tasks.counts()).items()}
        effective = history.weights(now, configured, config.parents)
        old = self.policy.effective
        if effective.keys() != old.keys() or any(abs(w / old[g] - 1) > WEIGHT_STEP for g, w in effective.items()):
            self.policy.effective = effective
            if self.tasks:
                self.inbox.put(inbox.FairShare())
        if self._saved is None or save_due(self._saved, monotonic, config.sample_interval_s):
            history.save()
            self._saved = monotonic

    def standings(self, now: float) -> dict[str, Standing]:
        """Each group's configured weight, decayed usage and effective weight; empty when off."""
        if self.history is None:
            return {}
        configured = {group: about["weight"] for group, about in self.policy.configured(self.tasks.counts()).items()}
        return self.history.standings(now, configured, self.policy.config.parents)

    def close(self) -> None:
        """Save the history and stop using it (the config turned fair share off, or the daemon stops)."""
        if self.history is not None:
            self.history.save()
            self.history = None
            self.policy.effective = {}
            self.charges = Charges()
            self._ticked = self._since = self._saved = None

    def _open(self) -> FairShareHistory | None:
        """The history, read from its file the first time it is wanted; None while the config
        has no ``[fairshare]``."""
        half_life_s = self.policy.config.fairshare_half_life_s
        if half_life_s is not None and self.history is None:
            self.history = FairShareHistory(self.directory, half_life_s, self.journal)
        return self.history if half_life_s is not None else None


def _held(resource: str) -> bool:
    """Whether a task is charged for what it reserves of ``resource`` (memory, GPUs: held until
    it ends, used or not) rather than for what the kernel counts it used (cpu); a count (pids)
    is a cap, never charged."""
    return not compressible(resource) and not count(resource)
