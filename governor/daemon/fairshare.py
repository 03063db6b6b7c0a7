"""The fair-share history as the daemon keeps it: in memory, and in a file of the state
directory that the next daemon reads back (:mod:`governor.fairshare` has the arithmetic)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from governor.daemon.journal import Journal
from governor.fairshare import FairShare, Standing

__all__ = ["FILE_NAME", "MAX_FILE_BYTES", "FairShareHistory", "FairShareStage", "dominant_use"]

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
      its measured use over the tick (fractions of capacity; leaves' only, their parents count
      them) and the tick's length in seconds (from the monotonic clock);
    * at each refill: :meth:`weights` with ``time.time()``, the configured weights of the
      groups the refill weighs and their parents, and the allocation uses what it returns;
      ``explain`` and the metrics show :meth:`standings`;
    * now and then (each reconcile pass) and at shutdown: :meth:`save`. The file is not synced:
      a crash loses the last minutes of history, which only shift weights a little.

    Args:
        directory: the state directory (trusted and made 0700 by
            :class:`~governor.task_store.TaskStore`); half_life_s: the configured half-life, seconds;
        journal: where a file that could not be read or written is told.
    """

    def __init__(self, directory: Path, half_life_s: float, journal: Journal) -> None:
        self.path = directory / FILE_NAME
        self.journal = journal
        self._save_failed = False
        self.history = self.load(half_life_s)

    def load(self, half_life_s: float) -> FairShare:
        """The history in the file; an empty one when there is none yet, or when it cannot be
        used (not a regular file of the daemon's own, too large, not JSON, a value out of
        bounds): then it is set aside as ``fairshare.state.bad`` and a warning says why.
        Never raises but for a bad ``half_life_s`` (ValueError)."""
        try:
            return FairShare.from_json(json.loads(_read(self.path)), half_life_s)
        except FileNotFoundError:
            return FairShare(half_life_s)
        except (OSError, ValueError, RecursionError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path.with_name(self.path.name + ".bad"))
            self.journal.event("error", f"fair-share history {self.path} set aside as {self.path.name}.bad and "
                                        f"started afresh: {reason}", logging.WARNING)
            return FairShare(half_life_s)

    def record(self, now: float, shares: Mapping[str, float], seconds: float) -> None:
        """Add a sample: ``shares`` (group → dominant share of measured use, fraction of
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
        temporary = self.path.with_name(f".{FILE_NAME}.tmp")  # removed at start by TaskStore.prepare
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            with os.fdopen(fd, "wb") as stream:
                os.fchmod(fd, 0o644)  # whatever the daemon's umask
                stream.write(json.dumps(self.history.to_json()).encode())
            os.replace(temporary, self.path)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            if not self._save_failed:
                self.journal.event("error", f"cannot write fair-share history {self.path}: {error.strerror}; kept "
                                            "in memory and written again at the next save", logging.WARNING)
            self._save_failed = True
            return False
        if self._save_failed:
            self.journal.event("record", f"fair-share history {self.path} is written again")
        self._save_failed = False
        return True


def _read(path: Path) -> bytes:
    """The file's bytes, read only as a regular file of the daemon's user that nobody else can
    write (a forged history would move every group's weight), of at most :data:`MAX_FILE_BYTES`.

    Raises:
        FileNotFoundError: there is none; OSError: it cannot be opened or read (a link);
        ValueError: it is not such a file, or too large.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as stream:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("it is not a regular file")
        if info.st_uid != os.geteuid():
            raise ValueError(f"it is owned by uid {info.st_uid}, not {os.geteuid()}")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ValueError(f"it is writable by others (mode {stat.S_IMODE(info.st_mode):04o})")
        data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"it is larger than {MAX_FILE_BYTES} bytes")
    return data


# A refill for fair share only when some effective weight moved by more than this (relative):
# decay moves them a little at every sample.
WEIGHT_STEP = 0.01
# Seconds between saves of the history (and at shutdown).
SAVE_EVERY_S = 60.0


class FairShareStage:
    """Fair share over time in the running daemon (``[fairshare]``, DESIGN.md §2): at each
    sample, the groups' dominant shares of measured use go into the history, the effective
    weights are computed again, and a refill is asked for when one moved by more than
    :data:`WEIGHT_STEP`. Off (and the effective weights cleared) while the config has no
    ``[fairshare]``.

    Args:
        directory: the state directory the history is kept in;
        policy: the config in force, the capacity, the configured weights, and where the
            effective weights go (``policy.effective``); tasks: the running tasks;
        usage: group → measured use (cores, bytes, bytes/s); settle: asked to refill;
        journal: events.
    """

    def __init__(self, *, directory: Path, policy, tasks, usage, settle, journal: Journal) -> None:
        self.directory = directory
        self.policy, self.tasks, self.usage, self.settle, self.journal = policy, tasks, usage, settle, journal
        self.history: FairShareHistory | None = None
        self._ticked: float | None = None
        self._saved = 0.0

    def tick(self, now: float, monotonic: float) -> None:
        """One sample: ``now`` unix seconds, ``monotonic`` the monotonic clock's seconds."""
        config = self.policy.config
        if config.fairshare_half_life_s is None:
            self.close()
            return
        if self.history is None:
            self.history = FairShareHistory(self.directory, config.fairshare_half_life_s, self.journal)
            self._saved = monotonic
        self.history.history.half_life_s = config.fairshare_half_life_s  # a reload may change it
        seconds = monotonic - self._ticked if self._ticked is not None else 0.0
        self._ticked = monotonic
        capacity = self.policy.capacity
        usage = self.usage()
        shares = {group: dominant_use(usage.get(group, {}), capacity) for group in self.tasks.groups()}
        self.history.record(now, shares, seconds)
        configured = {group: about["weight"] for group, about in self.policy.configured(self.tasks.counts()).items()}
        effective = self.history.weights(now, configured, config.parents)
        old = self.policy.effective
        if effective.keys() != old.keys() or any(abs(w / old[g] - 1) > WEIGHT_STEP for g, w in effective.items()):
            self.policy.effective = effective
            if self.tasks:
                self.settle.soon("fair share: effective weights moved")
        if monotonic - self._saved >= SAVE_EVERY_S:
            self.history.save()
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
            self._ticked = None


def dominant_use(use: Mapping[str, float], capacity: Mapping[str, float]) -> float:
    """The largest share of the capacity ``use`` takes of any resource (a fraction, ≤ 1)."""
    return min(1.0, max((amount / capacity[r] for r, amount in use.items() if capacity.get(r)), default=0.0))
