"""The rows of ``governor ps`` as its views read them (schema in docs/user.md: "governor ps"):
a running or queued task (:class:`TaskRow`), an ended one (:class:`EndedRecord`), typed as the
status's task entries are and decoded by the status's one decoder (:func:`decode_rows`), a
malformed field named rather than met as a traceback in a view. The daemon writes them as
JSON objects (:func:`governor.wire.ps.task_rows`, :meth:`governor.host.accounting.Ended.to_json`)
and ``ps --json`` prints those as they came.

A field's default is what a daemon that left it out means; amounts are base units (cores,
bytes), times Unix seconds and durations seconds. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from governor.wire.status_json import decode_part
from governor.wire.status_types import TaskFields, Vector, empty

__all__ = ["EndedRecord", "ExitStatus", "Process", "TaskRow", "decode_rows"]


@dataclass(frozen=True, slots=True)
class Process:
    """One process of a running task, as ``ps`` draws its tree."""

    pid: int
    ppid: int | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class TaskRow(TaskFields):
    """A running or queued task (``state``): its amounts per resource as ``ps`` packs them in a
    cell (:mod:`governor.core.vocabulary`: ``guarantee`` of a compressible resource, ``reserved``
    in the admission count, the cap in ``demand``, ``usage``), and its ``processes``
    (``processes_total`` of them in all; None: past the trees one reply lists). Queued: when
    (``queued_at``), its ``position`` and the ``reason`` it waits."""

    state: str = "?"
    queued_at: float | None = None
    position: int | None = None
    reason: str | None = None
    guarantee: Vector = empty()
    reserved: Vector = empty()
    usage: Vector = empty()
    processes: tuple[Process, ...] = ()
    processes_total: int | None = 0


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How an ended task's command ended, in systemd's words (:func:`governor.host.exit_status.describe`):
    ``code`` ``exited`` with ``status``, or ``killed``/``dumped`` by ``signal`` (``KILL``)."""

    code: str | None = None
    status: int | None = None
    signal: str | None = None


@dataclass(frozen=True, slots=True)
class EndedRecord(TaskFields):
    """A task that ended lately: when (``ended``), why (``reason``: exit, stop, time_limit,
    oom_kill; ``stopped_by``), its command's ``exit_status`` (None: not known), and its
    counters (None: not known): wall, CPU and throttled seconds, memory peak in bytes, OOM
    kills, times over its soft and at its hard memory cap, forks refused at its pids cap."""

    ended: float | None = None
    wall_s: float | None = None
    reason: str | None = None
    stopped_by: str | None = None
    exit_status: ExitStatus | None = None
    cpu_s: float | None = None
    throttled_s: float | None = None
    memory_peak: float | None = None
    oom_kills: int | None = None
    memory_high_events: int | None = None
    memory_max_events: int | None = None
    forks_refused: int | None = None

    @property
    def killed_by(self) -> str | None:
        """The signal that ended its command (``KILL``), or None: it exited, or not known (or the
        daemon's word is no signal's name: it reaches a terminal)."""
        signal = None if self.exit_status is None else self.exit_status.signal
        return signal if signal is not None and signal.isascii() and signal.isalnum() and len(signal) <= 8 else None


def decode_rows(kind: type, rows: object, where: str) -> Sequence:
    """``rows`` (a ps reply's ``tasks`` or ``ended`` list) as a tuple of ``kind``
    (:class:`TaskRow` or :class:`EndedRecord`); ``where`` names the list in errors.

    Raises:
        MalformedStatus: a row, or a field of one, that is not of its type (``has a malformed
            tasks[0].demand: must be an object, got an array``).
    """
    return decode_part(tuple[kind, ...], rows, where)
