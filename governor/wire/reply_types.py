"""The control protocol's replies: one dataclass per operation's success payload (the reply
line without its ``"ok": true``), with ``to_json`` (what a daemon sends) and ``from_json``
(what a client reads). :mod:`governor.wire.protocol` names each operation's reply type.

The bodies of ``status``, ``explain`` and ``ps`` stay JSON objects here: their schemas are in
docs/operator.md and docs/user.md, and the views read them. ``from_json`` checks the
envelope and raises ValueError ("has no status object") for a payload that is not the
operation's.
"""

from __future__ import annotations

from dataclasses import dataclass


_KIND_NAMES = {dict: "object", list: "list", str: "string"}


def _field(payload: object, key: str, kind: type | tuple[type, ...]):
    """``payload[key]``, which must be a ``kind`` (else ValueError: "has no ``key`` object")."""
    value = payload.get(key) if isinstance(payload, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):  # no field of a reply is a boolean
        raise ValueError(f"has no {key} {_KIND_NAMES.get(kind, 'number')}")
    return value


@dataclass
class StatusReply:
    """``status`` and each line of ``watch``: ``{"status": {...}}`` (docs/operator.md).
    Not frozen: the daemon's own (:class:`governor.wire.status.StatusReply`) keeps its encoding."""

    status: dict

    def to_json(self) -> dict:
        """The payload."""
        return {"status": self.status}

    @classmethod
    def from_json(cls, payload: dict) -> StatusReply:
        """The reply (raises ValueError for another payload)."""
        return cls(_field(payload, "status", dict))


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
class StopReply:
    """``stop``: the ids of the tasks stopped (every one asked), their processes gone."""

    stopped: tuple[str, ...]

    def to_json(self) -> dict:
        """The payload, ``{"stopped": [id, ...]}``."""
        return {"stopped": list(self.stopped)}

    @classmethod
    def from_json(cls, payload: dict) -> StopReply:
        """The reply (raises ValueError for another payload)."""
        return cls(tuple(map(str, _field(payload, "stopped", list))))


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


class LaunchReply:
    """A line of ``launch``'s stream: :class:`Queued` while the task waits, then
    :class:`Started`."""

    @staticmethod
    def from_json(payload: dict) -> Queued | Started:
        """The line's reply (raises ValueError for another payload)."""
        if isinstance(payload, dict) and "queued" in payload:
            return Queued.from_json(payload)
        return Started.from_json(payload)


@dataclass(frozen=True)
class Queued(LaunchReply):
    """The task waits: its ``place`` in the queue (``position``, ``waiting_for``,
    ``held_by``...: :func:`governor.core.queue.queue_view`), sent again at each change."""

    place: dict

    def to_json(self) -> dict:
        """The payload, ``{"queued": place}``."""
        return {"queued": self.place}

    @classmethod
    def from_json(cls, payload: dict) -> Queued:
        """The reply (raises ValueError for another payload)."""
        return cls(_field(payload, "queued", dict))


@dataclass(frozen=True)
class Started(LaunchReply):
    """The task runs: its id, group, cgroup (path), the cgroup files in force (file →
    value); ``gpus``: how CUDA names each of its GPUs, when GPUs are governed, else None;
    ``nested``: the caller already was in this task (a launch from inside it)."""

    task: str
    group: str
    cgroup: str
    limits: dict
    gpus: tuple[str, ...] | None = None
    nested: bool = False

    def to_json(self) -> dict:
        """The payload (``gpus`` when not None, ``nested`` when true)."""
        payload = {"task": self.task, "group": self.group, "cgroup": self.cgroup, "limits": self.limits}
        if self.gpus is not None:
            payload["gpus"] = list(self.gpus)
        if self.nested:
            payload["nested"] = True
        return payload

    @classmethod
    def from_json(cls, payload: dict) -> Started:
        """The reply (raises ValueError for another payload)."""
        gpus = payload.get("gpus") if isinstance(payload, dict) else None
        if gpus is not None and not (isinstance(gpus, list) and all(isinstance(gpu, str) for gpu in gpus)):
            raise ValueError("has no gpus list of strings")
        return cls(_field(payload, "task", str), _field(payload, "group", str), _field(payload, "cgroup", str),
                   _field(payload, "limits", dict), None if gpus is None else tuple(gpus),
                   payload.get("nested") is True)
