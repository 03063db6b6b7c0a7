"""What a task used, kept once it ended: the record ``governor ps --ended`` shows and the daemon
logs, one line per task (Slurm's ``sacct``, systemd's unit accounting).

The figures are the task cgroup's counters read just before the cgroup is removed (it still
exists once it holds no process), or, if that read fails, at the last sample; the exit status
of its launched process from a pidfd (:mod:`governor.host.exit_status`). The daemon keeps the last
:data:`ENDED_KEPT` records and saves them in its state directory (:meth:`Ended.to_saved`), so a
restart keeps them; a task that ended while the daemon was down has none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Protocol

from governor.cgroups.stats import CgroupStats
from governor.host.exit_status import describe
from governor.core.state import Task
from governor.config.resources import format_amount
from governor.config.units import format_size, format_timespan
from governor.core.task_record import record_of, task_fields

# How many ended records the daemon keeps (the oldest go first): about 1 KiB each.
ENDED_KEPT = 1000
# Why a task ended.
EXIT, STOP, TIME_LIMIT, OOM_KILL = "exit", "stop", "time_limit", "oom_kill"
REASONS = (EXIT, STOP, TIME_LIMIT, OOM_KILL)


class EndFacts(Protocol):
    """What :func:`why_ended` reads of an ended task: the daemon's :class:`Ended`, or the
    record a client decoded (:class:`governor.wire.ps_types.EndedRecord`)."""

    reason: str | None
    stopped_by: str | None

    @property
    def time_limit(self) -> float | None: ...  # seconds

    @property
    def demand(self) -> Mapping[str, float]: ...  # its caps: memory in bytes, pids

    @property
    def forks_refused(self) -> int | None: ...  # at its pids.max; None: not known

    @property
    def killed_by(self) -> str | None: ...  # the signal that ended its command (KILL); None: it exited, or not known


@dataclass
class Ended:
    """One ended task and what it used.

    Attributes:
        task: the task as it ran (id, name, group, owner, command, declared demand, start).
        ended: unix time the daemon saw its cgroup empty, seconds.
        reason: one of :data:`REASONS`: its processes exited (``exit``), ``governor stop``
            ended it (``stop``, ``stopped_by`` says who), it reached its ``time_limit``, or
            its processes exited after the kernel's OOM killer killed one of them
            (``oom_kill``).
        stopped_by: the user who stopped it, for ``stop``.
        stats: its cgroup's counters at the end, or None when none could be read.
        exit_status: the wait status of its launched process (:mod:`governor.host.exit_status`), or None
            where unknown; it may become known a moment after the record is made.
    """

    task: Task
    ended: float
    reason: str
    stopped_by: str | None
    stats: CgroupStats | None
    exit_status: int | None = None

    @property
    def killed_by(self) -> str | None:
        """The signal that ended its launched process (``KILL``, ``34``), or None: it exited, or
        its exit status is not known."""
        return None if self.exit_status is None else describe(self.exit_status).get("signal")

    @property
    def time_limit(self) -> float | None:
        """Its time limit, seconds (None: none)."""
        return self.task.time_limit

    @property
    def demand(self) -> Mapping[str, float]:
        """What it declared (its caps)."""
        return self.task.demand

    @property
    def forks_refused(self) -> int | None:
        """Forks the kernel refused it at its ``pids.max`` (None: not known)."""
        return None if self.stats is None else self.stats.pids_refused

    def to_json(self, *, command_chars: int | None = None) -> dict:
        """The record as ``governor ps --ended --json`` shows it (schema in docs/user.md):
        seconds, bytes, and None where unknown; the command cut to ``command_chars`` if given
        (:meth:`~governor.core.state.Task.to_json`)."""
        stats = self.stats
        task = self.task
        return {**task.to_json(command_chars=command_chars), "ended": self.ended, "wall_s": max(0.0, self.ended - task.started),
                "reason": self.reason, "stopped_by": self.stopped_by,
                "exit_status": None if self.exit_status is None else describe(self.exit_status),
                "cpu_s": None if stats is None else stats.cpu_usage_usec / 1e6,
                "throttled_s": None if stats is None else stats.cpu_throttled_usec / 1e6,
                "memory_peak": None if stats is None else stats.memory_peak_bytes,
                "oom_kills": None if stats is None else stats.memory_events.get("oom_kill"),
                # Over its soft cap (memory.high: reclaimed and throttled) and at its hard cap.
                "memory_high_events": None if stats is None else stats.memory_events.get("high"),
                "memory_max_events": None if stats is None else stats.memory_events.get("max"),
                # Forks and clones refused at its pids.max (pids.events' max); None: no pids controller.
                "forks_refused": self.forks_refused}

    def to_saved(self) -> dict:
        """The record as the state directory keeps it (:func:`ended_from_saved` reads it back):
        the task's own record, then what ended it, its counters and its exit status."""
        return {"task": record_of(self.task), "id": self.task.id, "ended": self.ended, "reason": self.reason,
                "stopped_by": self.stopped_by, "stats": None if self.stats is None else asdict(self.stats),
                "exit_status": self.exit_status}

    def line(self, seen: str) -> str:
        """The log line, ``seen`` being how the end was noticed: ``task 7 ended (exit): its
        time limit of 2s was reached; name sleep, user alice, group A, wall 2.01s, ...``."""
        record = self.to_json()
        why = why_ended(self)
        named = f"name {self.task.name}, " if self.task.name else ""
        return (f"{self.task.label} ended ({seen}): {why}; {named}user {self.task.user}, group {self.task.group}, "
                f"wall {format_timespan(record['wall_s'])}, CPU {_span(record['cpu_s'])}, "
                f"throttled {_span(record['throttled_s'])}, memory peak {_bytes(record['memory_peak'])}, "
                f"OOM kills {_count(record['oom_kills'])}, exit status {exit_words(self.exit_status)}")


def ended_from_saved(saved: dict) -> Ended:
    """An :class:`Ended` from :meth:`Ended.to_saved`'s form, checked as a task record is.

    Raises:
        ValueError: what is wrong with it.
    """
    try:
        task = Task(**task_fields(str(saved["id"]), json.dumps(saved["task"]).encode()))
        stats = None if saved["stats"] is None else CgroupStats(**saved["stats"])
        ended, reason, by, status = saved["ended"], saved["reason"], saved["stopped_by"], saved["exit_status"]
    except (KeyError, TypeError) as error:
        raise ValueError(f"not an ended record: {error!r}") from None
    if not isinstance(ended, (int, float)) or reason not in REASONS or not isinstance(by, (str, type(None))) \
            or not isinstance(status, (int, type(None))):
        raise ValueError(f"ended record of task {task.id}: a field out of bounds")
    return Ended(task, float(ended), reason, by, stats, status)


def why_ended(record: EndFacts) -> str:
    """Why a task ended, in words, from its ``record`` (:class:`EndFacts`): ``its time limit
    of 3s was reached``, ``stopped by alice``, ``OOM-killed at its memory cap 100.0M``, ``its
    command was killed by SIGKILL`` (by another than governor) or ``its processes exited``,
    then where forks were refused at its cap, ``; it was refused 12 forks at its cap of 512
    processes``. The log, ``governor run`` and ``--summary`` say it so."""
    refused = forks_refused(record)
    return _why(record) + (f"; it {refused}" if refused else "")


def forks_refused(record: EndFacts) -> str | None:
    """``was refused 12 forks at its cap of 512 processes`` where the kernel refused a task's
    forks at its ``pids.max`` (from its ``record``, :class:`EndFacts`), else None."""
    refused = record.forks_refused
    if not refused:
        return None
    cap = record.demand.get("pids")
    at = f" at its cap of {format_amount('pids', cap, unit=True)}" if cap else ""
    return f"was refused {refused} fork{'' if refused == 1 else 's'}{at}"


def _why(record: EndFacts) -> str:
    if record.reason == STOP:
        return f"stopped by {record.stopped_by or 'an admin'}"
    if record.reason == TIME_LIMIT:
        return f"its time limit of {format_timespan(record.time_limit or 0)} was reached"
    if record.reason == OOM_KILL:
        cap = record.demand.get("memory")
        return f"OOM-killed at its memory cap {format_size(cap)}" if cap else "OOM-killed"
    killed = record.killed_by  # its exit status said so ("exited" beside code=killed read as a contradiction)
    if killed is not None:
        return f"its command was killed by {f'signal {killed}' if killed.isdigit() else f'SIG{killed}'}"
    return "its processes exited"


def reason_of(task: Task, ending: tuple[str, str | None] | None, stats: CgroupStats | None) -> tuple[str, str | None]:
    """Why ``task`` ended, and who stopped it: the daemon's own kill (``ending``: the reason
    and the user, set when it killed the task) first, then an OOM kill the counters show."""
    if ending is not None:
        return ending
    if stats is not None and stats.memory_events.get("oom_kill", 0) > 0:
        return OOM_KILL, None
    return EXIT, None


def exit_words(status: int | None) -> str:
    """``code=exited/status=0``, ``code=killed/status=KILL`` (systemd's words), or ``unknown``."""
    if status is None:
        return "unknown"
    shown = describe(status)
    return f"code={shown['code']}/status={shown.get('status', shown.get('signal'))}"


def _span(seconds: float | None) -> str:
    return "unknown" if seconds is None else format_timespan(seconds)


def _bytes(amount: int | None) -> str:
    return "unknown" if amount is None else format_size(amount)


def _count(number: int | None) -> str:
    return "unknown" if number is None else str(number)
