"""The control protocol's replies: one dataclass per operation's success payload (the reply
line without its ``"ok": true``), with ``to_json`` (what a daemon sends) and ``from_json``
(what a client reads). :mod:`governor.wire.protocol` names each operation's reply type.

The bodies of ``status``, ``explain`` and ``ps`` stay JSON objects here: their schemas are in
docs/operator.md and docs/user.md, and the views read them. ``from_json`` checks the
envelope and raises ValueError ("has no status object") for a payload that is not the
operation's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from governor.wire.fields import MAX_INT
from governor.wire.fields import reply_field as _field
from governor.wire.launch_types import LaunchReply, Queued, Started
from governor.wire.status_json import decode as decode_status
from governor.wire.status_types import Status

__all__ = ["ExplainReply", "HistoryReply", "LaunchReply", "PsReply", "Queued", "ReloadReply", "SetWeightReply", "Started", "StatusReply",
           "StopReply"]


@dataclass
class StatusReply:
    """``status`` and each line of ``watch``: ``{"status": {...}}`` (docs/operator.md):
    ``status``, the object as sent (what ``status --json`` prints), and ``snapshot``, the same
    decoded (:func:`governor.wire.status_json.decode`), which the views read; the daemon's
    own reply leaves it None. Not frozen: the daemon's own
    (:class:`governor.wire.status.StatusReply`) keeps its encoding."""

    status: dict
    snapshot: Status | None = field(default=None, compare=False)  # derived from status

    def to_json(self) -> dict:
        """The payload."""
        return {"status": self.status}

    @classmethod
    def from_json(cls, payload: dict) -> StatusReply:
        """The reply, decoded (raises ValueError for another payload, and
        :class:`~governor.wire.status_json.MalformedStatus` naming a malformed field)."""
        status = _field(payload, "status", dict)
        return cls(status, decode_status(status))


@dataclass(frozen=True)
class ExplainReply:
    """``explain``: ``{"explain": {"capacity", "groups": {name: {"weight", "demand",
    "allocation", "lambda", "dominant_resources", "dominant_share", "stop"}}, "trace": [...]}}``,
    the live host's progressive filling, one trace row per event (paper Table 1)."""

    explain: dict

    def to_json(self) -> dict:
        """The payload."""
        return {"explain": self.explain}

    @classmethod
    def from_json(cls, payload: dict) -> ExplainReply:
        """The reply (raises ValueError for another payload)."""
        return cls(_field(payload, "explain", dict))


@dataclass(frozen=True)
class PsReply:
    """``ps``: ``tasks``, the rows of running and queued tasks (:func:`governor.wire.ps.task_rows`),
    or with ``ended`` asked, ``ended``, the ended records
    (:meth:`governor.host.accounting.Ended.to_json`); exactly one is not None."""

    tasks: list[dict] | None = None
    ended: list[dict] | None = None

    def to_json(self) -> dict:
        """The payload: ``{"tasks": [...]}`` or ``{"ended": [...]}``."""
        return {"tasks": self.tasks} if self.ended is None else {"ended": self.ended}

    @classmethod
    def from_json(cls, payload: dict) -> PsReply:
        """The reply (raises ValueError for another payload)."""
        if isinstance(payload, dict) and "ended" in payload:
            return cls(ended=_field(payload, "ended", list))
        return cls(tasks=_field(payload, "tasks", list))


@dataclass(frozen=True)
class HistoryReply:
    """``history``: ``entries``, the journal's (:mod:`governor.daemon.history`), oldest first;
    ``truncated``: older entries of the period were left out (at most
    :data:`governor.daemon.history.ENTRIES_SENT` and ``BYTES_SENT``, the newest); ``skipped``: lines of the
    period that are no usable entry, left out (an older daemon sends none: 0)."""

    entries: list[dict]
    truncated: bool = False
    skipped: int = 0

    def to_json(self) -> dict:
        """The payload: ``{"entries": [...], "truncated": bool, "skipped": int}``."""
        return {"entries": self.entries, "truncated": self.truncated, "skipped": self.skipped}

    @classmethod
    def from_json(cls, payload: dict) -> HistoryReply:
        """The reply (raises ValueError for another payload)."""
        skipped = _field(payload, "skipped", int) if isinstance(payload, dict) and "skipped" in payload else 0
        if not 0 <= skipped <= MAX_INT:
            raise ValueError("has a skipped count out of range")
        return cls(_field(payload, "entries", list), bool(payload.get("truncated", False)), skipped)


@dataclass(frozen=True)
class StopReply:
    """``stop``: the ids of the tasks stopped (every one asked), their processes gone."""

    stopped: tuple[str, ...]

    def to_json(self) -> dict:
        """The payload, ``{"stopped": [id, ...]}``."""
        return {"stopped": list(self.stopped)}

    @classmethod
    def from_json(cls, payload: dict) -> StopReply:
        """The reply (raises ValueError for another payload, or ids that are not strings)."""
        stopped = tuple(_field(payload, "stopped", list))
        if not all(isinstance(task, str) for task in stopped):
            raise ValueError("has a stopped list that is not of task ids (strings)")
        return cls(stopped)


@dataclass(frozen=True)
class ReloadReply:
    """``reload``: the config file now in force (its path)."""

    config: str

    def to_json(self) -> dict:
        """The payload, ``{"reloaded": {"config": path}}``."""
        return {"reloaded": {"config": self.config}}

    @classmethod
    def from_json(cls, payload: dict) -> ReloadReply:
        """The reply (raises ValueError for another payload)."""
        return cls(_field(_field(payload, "reloaded", dict), "config", str))


@dataclass(frozen=True)
class SetWeightReply:
    """``set-weight``: the group and its weight now in force (until the next reload)."""

    group: str
    weight: float

    def to_json(self) -> dict:
        """The payload, ``{"group", "weight"}``."""
        return {"group": self.group, "weight": self.weight}

    @classmethod
    def from_json(cls, payload: dict) -> SetWeightReply:
        """The reply (raises ValueError for another payload)."""
        return cls(_field(payload, "group", str), float(_field(payload, "weight", (int, float))))
