"""The ``launch`` operation's request and replies (:mod:`governor.wire.request_types` and
:mod:`governor.wire.reply_types` hold them with the others'; :mod:`governor.wire.protocol` names
them in its table). Apart from the other operations' so that ``governor run`` loads these four
types and not every operation's: each dataclass costs a launch about half a millisecond to
define, and the client sends its request with :mod:`governor.wire.lines` alone. They are named
tuples, not dataclasses: ``governor run`` loads neither dataclasses nor typing (issue 46).
"""

from __future__ import annotations

from collections import namedtuple

from governor.wire import fields
from governor.wire.fields import reply_field as _field


class LaunchRequest(namedtuple("LaunchRequest", "pid group demand command wait name time_limit",
                               defaults=(True, None, None))):
    """``launch``: govern process ``pid`` as a new task.

    Attributes:
        pid: the process to move into the task cgroup (> 0; must be the caller's own).
        group: the group to launch into, or ``None`` for the caller's default group.
        demand: the declared demand by wire key (:func:`governor.config.resources.wire_keys`): ``cpu``
            a float (cores), ``memory`` an int (bytes), ``gpu`` an int (whole GPUs),
            ``io_read``/``io_write`` ints (bytes/s); any subset.
        command: the command line (≤ 64 items of ≤ 4096 characters), for display only.
        wait: queue when the memory does not fit now; False refuses with ``would_wait``.
        name: the task's name (:func:`~governor.wire.fields.name_problem` holds for it), or
            None for the command's basename.
        time_limit: seconds (> 0) after its start at which the whole task is ended, or None.
    """

    __slots__ = ()
    op = "launch"

    def to_json(self) -> dict:
        """The request object (``name`` and ``time_limit`` only when given)."""
        message = {"op": self.op, "pid": self.pid, "group": self.group, "demand": dict(self.demand),
                   "command": list(self.command), "wait": self.wait}
        if self.name is not None:
            message["name"] = self.name
        if self.time_limit is not None:
            message["time_limit"] = self.time_limit
        return message

    @classmethod
    def from_json(cls, message: dict) -> LaunchRequest:
        """The checked request (raises RequestError ``bad_request`` naming the field)."""
        fields.check_fields(message, allowed=("pid", "group", "demand", "command", "wait", "name", "time_limit"),
                            required=("pid",))
        return cls(pid=fields.integer(message["pid"], "pid", minimum=1),
                   group=fields.text(message.get("group"), "group", nullable=True),
                   demand=fields.demand(message.get("demand", {})),
                   command=fields.command(message.get("command", [])),
                   wait=fields.boolean(message.get("wait", True), "wait"),
                   name=fields.task_name(message.get("name")),
                   time_limit=fields.time_limit(message.get("time_limit")))


class LaunchReply:
    """A line of ``launch``'s stream: :class:`Queued` while the task waits, then
    :class:`Started`."""

    __slots__ = ()

    @staticmethod
    def from_json(payload: dict) -> Queued | Started:
        """The line's reply (raises ValueError for another payload)."""
        if isinstance(payload, dict) and "queued" in payload:
            return Queued.from_json(payload)
        return Started.from_json(payload)


class Queued(namedtuple("Queued", "place"), LaunchReply):
    """The task waits: its ``place`` in the queue (``position``, ``waiting_for``,
    ``held_by``...: :func:`governor.core.queue.queue_view`), sent again at each change."""

    __slots__ = ()

    def to_json(self) -> dict:
        """The payload, ``{"queued": place}``."""
        return {"queued": self.place}

    @classmethod
    def from_json(cls, payload: dict) -> Queued:
        """The reply (raises ValueError for another payload)."""
        return cls(_field(payload, "queued", dict))


class Started(namedtuple("Started", "task group cgroup limits gpus nested memory_cgroup", defaults=(None, False, None)),
              LaunchReply):
    """The task runs: its id, group, cgroup (path), the cgroup files in force (file →
    value); ``gpus``: how CUDA names each of its GPUs, when GPUs are governed, else None;
    ``nested``: the caller already was in this task (a launch from inside it);
    ``memory_cgroup``: the path where its memory files are when not ``cgroup`` (v1's memory
    hierarchy), else None."""

    __slots__ = ()

    def to_json(self) -> dict:
        """The payload (``gpus`` and ``memory_cgroup`` when not None, ``nested`` when true)."""
        payload = {"task": self.task, "group": self.group, "cgroup": self.cgroup, "limits": self.limits}
        if self.gpus is not None:
            payload["gpus"] = list(self.gpus)
        if self.nested:
            payload["nested"] = True
        if self.memory_cgroup is not None:
            payload["memory_cgroup"] = self.memory_cgroup
        return payload

    @classmethod
    def from_json(cls, payload: dict) -> Started:
        """The reply (raises ValueError for another payload)."""
        gpus = payload.get("gpus") if isinstance(payload, dict) else None
        if gpus is not None and not (isinstance(gpus, list) and all(isinstance(gpu, str) for gpu in gpus)):
            raise ValueError("has no gpus list of strings")
        memory = payload.get("memory_cgroup")
        if memory is not None and not isinstance(memory, str):
            raise ValueError("has no memory_cgroup string")
        return cls(_field(payload, "task", str), _field(payload, "group", str), _field(payload, "cgroup", str),
                   _field(payload, "limits", dict), None if gpus is None else tuple(gpus),
                   payload.get("nested") is True, memory)
