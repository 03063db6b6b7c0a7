"""The control protocol's requests (:mod:`governor.wire.protocol` has the transport, and the table
of operations that names each request's reply): one frozen dataclass per operation, with
``to_json`` (the object a client sends) and ``from_json`` (the checked request a daemon gets).

Every ``from_json`` takes a decoded JSON object whose ``op`` is the request's, checks every
field (unknown fields are refused) and raises :class:`~governor.errors.RequestError`
``bad_request`` naming the field (:mod:`governor.wire.fields`). ``to_json`` leaves out fields
at their defaults, so that ``from_json(to_json())`` is the request itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from governor.wire import fields
from governor.wire.launch_types import LaunchRequest
# A watcher gets a whole status each interval: 32 at 0.2 s took the daemon 9.4 s of CPU in 15 s.
WATCH_INTERVAL_S = (0.5, 60.0)
MAX_STOP_TASKS = 64


@dataclass(frozen=True)
class _NoFields:
    """A request that carries nothing but its ``op``."""

    op: ClassVar[str]

    def to_json(self) -> dict:
        """The request object, ``{"op": ...}``."""
        return {"op": self.op}

    @classmethod
    def from_json(cls, message: dict):
        """The request (raises RequestError ``bad_request`` for any other field)."""
        fields.check_fields(message, allowed=())
        return cls()


@dataclass(frozen=True)
class StatusRequest(_NoFields):
    """``status``: a snapshot of groups, tasks, allocations and usage."""

    op: ClassVar[str] = "status"


@dataclass(frozen=True)
class ExplainRequest(_NoFields):
    """``explain``: the live progressive filling's trace and each group's reason to stop."""

    op: ClassVar[str] = "explain"


@dataclass(frozen=True)
class ReloadRequest(_NoFields):
    """``reload`` (admin): re-read the config file."""

    op: ClassVar[str] = "reload"


@dataclass(frozen=True)
class WatchRequest:
    """``watch``: a status snapshot at once, then every ``interval`` seconds (0.5–60)."""

    op: ClassVar[str] = "watch"
    interval: float = 1.0

    def to_json(self) -> dict:
        """The request object."""
        return {"op": self.op, "interval": self.interval}

    @classmethod
    def from_json(cls, message: dict) -> WatchRequest:
        """The checked request (raises RequestError ``bad_request`` naming the field)."""
        fields.check_fields(message, allowed=("interval",))
        return cls(fields.in_range(message.get("interval", 1.0), "interval", WATCH_INTERVAL_S, " seconds"))


@dataclass(frozen=True)
class PsRequest:
    """``ps``: the caller's tasks, running and queued, or with ``ended`` its ended records;
    ``all``: everyone's; ``users``, ``groups``: those of these users (names) or in these groups
    only, everyone's (``ps -u``, ``--group``); ``task``: only that task id's (``run --summary``
    waits for its own record). Another user's tasks come as
    :mod:`governor.wire.visibility` shows them."""

    op: ClassVar[str] = "ps"
    all: bool = False
    ended: bool = False
    task: str | None = None
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """The request object (``task``, ``users`` and ``groups`` only when given)."""
        message = {"op": self.op, "all": self.all, "ended": self.ended}
        if self.task is not None:
            message["task"] = self.task
        for key in ("users", "groups"):
            if getattr(self, key):
                message[key] = list(getattr(self, key))
        return message

    @classmethod
    def from_json(cls, message: dict) -> PsRequest:
        """The checked request (raises RequestError ``bad_request`` naming the field)."""
        fields.check_fields(message, allowed=("all", "ended", "task", "users", "groups"))
        task = message.get("task")
        if task is not None and not (isinstance(task, str) and 0 < len(task) <= fields.MAX_NAME_CHARS):
            raise fields.bad("task", f"must be a task id (1 to {fields.MAX_NAME_CHARS} characters), "
                                     f"got {fields.json_type(task)}")
        return cls(fields.boolean(message.get("all", False), "all"),
                   fields.boolean(message.get("ended", False), "ended"), task,
                   fields.names(message.get("users", []), "users"), fields.names(message.get("groups", []), "groups"))


@dataclass(frozen=True)
class StopRequest:
    """``stop``: end the whole process tree of each task in ``tasks`` (ids, 1 to
    :data:`MAX_STOP_TASKS`, each once)."""

    op: ClassVar[str] = "stop"
    tasks: tuple[str, ...]

    def to_json(self) -> dict:
        """The request object."""
        return {"op": self.op, "tasks": list(self.tasks)}

    @classmethod
    def from_json(cls, message: dict) -> StopRequest:
        """The checked request, a repeated id once (raises RequestError ``bad_request``
        naming the field)."""
        fields.check_fields(message, allowed=("tasks",), required=("tasks",))
        tasks = message["tasks"]
        if not isinstance(tasks, list) or not 1 <= len(tasks) <= MAX_STOP_TASKS:
            raise fields.bad("tasks", f"must be a list of 1 to {MAX_STOP_TASKS} task ids")
        return cls(tuple(dict.fromkeys(fields.task_id(task, f"tasks[{i}]") for i, task in enumerate(tasks))))


@dataclass(frozen=True)
class SetWeightRequest:
    """``set-weight`` (admin): ``group``'s weight (0.001–1000) until the next reload."""

    op: ClassVar[str] = "set-weight"
    group: str
    weight: float

    def to_json(self) -> dict:
        """The request object."""
        return {"op": self.op, "group": self.group, "weight": self.weight}

    @classmethod
    def from_json(cls, message: dict) -> SetWeightRequest:
        """The checked request (raises RequestError ``bad_request`` naming the field)."""
        # Imported here: the config's modules are not needed by a plain `governor run`.
        from governor.config.settings import GROUP_WEIGHT_RANGE

        fields.check_fields(message, allowed=("group", "weight"), required=("group", "weight"))
        return cls(fields.text(message["group"], "group"), fields.in_range(message["weight"], "weight", GROUP_WEIGHT_RANGE))


@dataclass(frozen=True)
class HistoryRequest:
    """``history``: the journal's entries with ``since <= at < until`` (unix seconds; None:
    unbounded), as :mod:`governor.wire.visibility` shows them to the caller."""

    op: ClassVar[str] = "history"
    since: float | None = None
    until: float | None = None

    def to_json(self) -> dict:
        """The request object (``since``, ``until`` only when given)."""
        return {"op": self.op, **{key: getattr(self, key) for key in ("since", "until")
                                  if getattr(self, key) is not None}}

    @classmethod
    def from_json(cls, message: dict) -> HistoryRequest:
        """The checked request (raises RequestError ``bad_request`` naming the field)."""
        fields.check_fields(message, allowed=("since", "until"))
        return cls(*(None if message.get(key) is None else fields.number(message[key], key)
                     for key in ("since", "until")))


Request = (LaunchRequest | StatusRequest | WatchRequest | ExplainRequest | ReloadRequest | SetWeightRequest
           | PsRequest | StopRequest | HistoryRequest)
