"""The control-socket protocol: request parsing and reply encoding, with no I/O.

Transport: a Unix stream socket (default ``/run/governor/governor.sock``). A client sends one
JSON object per line (UTF-8, at most :data:`MAX_LINE_BYTES` bytes before the newline) and gets
one reply line per request, in order; a connection may carry several requests. The server
closes the connection on end of input, after :data:`READ_TIMEOUT_S` seconds without a complete
line, and after a ``too_large`` line. Replies::

    {"ok": true, ...payload}
    {"ok": false, "error": {"code": "bad_request", "message": "demand.cpu: must be ..."}}

Error codes (:data:`ERROR_CODES`):

- ``bad_request``: not UTF-8 JSON, not an object, or a field unknown, missing or mistyped;
  the message starts with the field (``pid``, ``demand.memory``, ``command[2]``).
- ``too_large``: a line longer than :data:`MAX_LINE_BYTES`.
- ``timeout``: no complete line within the read timeout.
- ``unknown_op``: ``op`` is a string but not an operation this daemon knows.
- ``forbidden``: the caller (by its SO_PEERCRED uid/gid/pid) may not do this.
- ``not_found``: the group (or task) named does not exist.
- ``exceeds_capacity``: the demand can never fit in the host's capacity.
- ``would_wait``: a ``launch`` with ``"wait": false`` whose memory does not fit now.
- ``unavailable``: the daemon cannot do it on this host (e.g. no cgroup support).
- ``too_many``: the caller's uid already has as many tasks (running and queued) or
  connections as ``[daemon] max_tasks_per_user`` / ``max_connections_per_user`` allow.
- ``invalid_config``: ``reload`` found the config file bad ("file: key: reason"); the config in
  force stays.
- ``stopped``: a queued ``launch`` whose task was stopped (``governor stop``) before it started.
- ``internal``: a bug in the daemon; it logs the traceback and keeps serving.

Operations; every field is checked and unknown fields are refused:

- ``{"op": "launch", "pid": int > 0, "group": str | null, "demand": {"cpu": number ≥ 0 (cores),
  "memory": int ≥ 0 (bytes), "gpu": int ≥ 0 (whole GPUs), "io_read": int ≥ 0 (bytes/s),
  "io_write": int ≥ 0 (bytes/s)},
  "command": [str, ...], "wait": bool, "name": str | null, "time_limit": number | null}``. Only
  ``op`` and ``pid`` are required; ``demand`` may give any subset; ``command`` (≤ 64 items of
  ≤ 4096 characters) is for display; ``name`` (1–64 printable characters; default: the
  command's basename) names the task; ``time_limit`` (seconds > 0) ends the whole task that
  long after it started. The pid must be the caller's own. When the task's declared memory does not fit beside the running tasks'
  the task is queued: the daemon sends ``{"ok": true, "queued": {"position", "waiting_for",
  "held_by", ...}}`` now and whenever its place changes, and the connection stays open; closing
  it leaves the queue. With ``"wait": false`` (default true) it answers ``would_wait`` instead.
  The last line is the started task: ``{"task": str, "group": str, "cgroup": str,
  "limits": {file: value}}``; the server then closes the connection (as after a ``watch``).
  A pid that already runs as a task gets that task back, so a client that lost the reply may
  simply ask again.
- ``{"op": "status"}``. Reply payload: ``{"status": {...}}`` (schema in docs/operator.md).
- ``{"op": "watch", "interval": number}`` (interval optional, 0.5–60 s, default 1): a stream of
  ``{"ok": true, "status": {...}}`` lines, the first at once, then one per interval, until the
  client closes the connection.
- ``{"op": "explain"}``. Reply payload: ``{"explain": {"capacity", "groups": {name: {"weight",
  "demand", "allocation", "lambda", "dominant_resources", "dominant_share", "stop"}}, "trace":
  [...]}}``: the live host's progressive filling, one trace row per event (paper Table 1).
- ``{"op": "ps", "all": bool, "ended": bool, "task": str}`` (all optional; default false and
  every task): the caller's tasks, running and queued → ``{"tasks": [...]}``, or with
  ``ended`` its recent ended records → ``{"ended": [...]}`` (schemas in docs/user.md); with
  ``task``, only that one's. Root and admins get everyone's with ``all``; anyone else asking
  for ``all`` is ``forbidden``.
- ``{"op": "stop", "tasks": [str, ...]}`` (1–64 task ids): end each task's whole process tree
  (a queued one leaves the queue) → ``{"stopped": [id, ...]}`` once their processes are gone, else
  ``unavailable`` naming the pids left. Only the task's owner, root and admins may (``forbidden``); a
  user's session is refused (``forbidden``); an unknown id is ``not_found``. Nothing is stopped unless every id may be.
- Admin only (uid 0, or a member of the config's ``admin_group``):
  ``{"op": "reload"}`` re-reads the config file → ``{"reloaded": {"config": path}}``;
  ``{"op": "set-weight", "group": str, "weight": number in 0.001..1000}`` →
  ``{"group", "weight"}``, in force until the next reload or restart.

Try it by hand::

    $ echo '{"op": "status"}' | nc -U /run/governor/governor.sock
    {"ok":true,"status":{"daemon":{"pid":812,...},...}}
    $ socat - UNIX-CONNECT:/run/governor/governor.sock
    {"op": "launch", "pid": 1}
    {"ok":false,"error":{"code":"forbidden","message":"pid 1 is not the caller's pid ..."}}
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from governor import resources
from governor.config_types import GROUP_WEIGHT_RANGE
from governor.errors import RequestError

MAX_LINE_BYTES = 65536
READ_TIMEOUT_S = 10
MAX_COMMAND_ITEMS = 64
MAX_COMMAND_ITEM_CHARS = 4096
# Cgroup files hold signed 64-bit values; a larger byte count can only be a mistake.
MAX_INT = 2**63 - 1

ERROR_CODES = frozenset({
    "bad_request", "too_large", "timeout", "unknown_op", "forbidden", "not_found",
    "exceeds_capacity", "would_wait", "unavailable", "invalid_config", "internal", "too_many", "stopped",
})
# A watcher gets a whole status each interval: 32 at 0.2 s took the daemon 9.4 s of CPU in 15 s.
WATCH_INTERVAL_S = (0.5, 60.0)
MAX_NAME_CHARS = 64
MAX_STOP_TASKS = 64


@dataclass(frozen=True)
class Peer:
    """The process at the other end of a connection, from SO_PEERCRED (as of its connect()).

    ``pidfd`` refers to that very process (SO_PEERPIDFD), not to whatever later holds its pid:
    a launch checks it, so that a client whose process exited cannot have its pid, reused by
    another user's process, governed as its own. None where the kernel offers none.
    """

    pid: int
    uid: int
    gid: int
    pidfd: int | None = None


@dataclass(frozen=True)
class LaunchRequest:
    """Ask the daemon to govern process ``pid`` as a new task.

    Attributes:
        pid: the process to move into the task cgroup (> 0; must be the caller's own).
        group: the group to launch into, or ``None`` for the caller's default group.
        demand: the declared demand by wire key (:func:`governor.resources.wire_keys`): ``cpu``
            a float (cores), ``memory`` an int (bytes), ``gpu`` an int (whole GPUs),
            ``io_read``/``io_write`` ints (bytes/s).
        command: the command line, for display only.
        wait: queue when the memory does not fit now; False refuses with ``would_wait``.
        name: the task's name (:func:`name_problem` holds for it), or None for the
            command's basename.
        time_limit: seconds after its start at which the whole task is ended, or None.
    """

    pid: int
    group: str | None
    demand: dict[str, float | int]
    command: tuple[str, ...]
    wait: bool = True
    name: str | None = None
    time_limit: float | None = None


@dataclass(frozen=True)
class StatusRequest:
    """Ask for a snapshot of groups, tasks, allocations and usage."""


@dataclass(frozen=True)
class WatchRequest:
    """Stream a status snapshot every ``interval`` seconds (0.5–60)."""

    interval: float = 1.0


@dataclass(frozen=True)
class ExplainRequest:
    """Ask for the live progressive filling's trace and each group's reason to stop."""


@dataclass(frozen=True)
class PsRequest:
    """List the caller's tasks, running and queued, or with ``ended`` its ended records;
    ``all``: everyone's (root and admins only)."""

    all: bool = False
    ended: bool = False
    task: str | None = None  # only this task id (``run --summary`` waits for its own record)


@dataclass(frozen=True)
class StopRequest:
    """End the whole process tree of each task in ``tasks`` (ids, 1 to :data:`MAX_STOP_TASKS`)."""

    tasks: tuple[str, ...]


@dataclass(frozen=True)
class ReloadRequest:
    """Re-read the config file (admin)."""


@dataclass(frozen=True)
class SetWeightRequest:
    """Set a group's weight until the next reload (admin). ``weight`` > 0."""

    group: str
    weight: float


Request = (LaunchRequest | StatusRequest | WatchRequest | ExplainRequest | ReloadRequest | SetWeightRequest
           | PsRequest | StopRequest)


def parse_request(line: bytes) -> Request:
    """Parse and validate one request line (the trailing newline is optional).

    Raises:
        RequestError: ``too_large`` for more than MAX_LINE_BYTES bytes; ``bad_request`` for
            bad UTF-8 or JSON, a non-object, or any unknown, missing or mistyped field (the
            message starts with the field's name); ``unknown_op`` for an op string that is
            not one of :data:`OPERATIONS`.
    """
    body = line[:-1] if line.endswith(b"\n") else line
    if len(body) > MAX_LINE_BYTES:
        raise RequestError("too_large", f"request line is longer than {MAX_LINE_BYTES} bytes")
    try:
        message = _scrub(json.loads(body.decode("utf-8"), parse_constant=_reject_constant))
    except UnicodeDecodeError as error:
        raise RequestError("bad_request", f"request is not valid UTF-8: {error.reason} at byte {error.start}")
    except json.JSONDecodeError as error:
        raise RequestError("bad_request", f"request is not JSON: {error.msg} at column {error.colno}")
    except RecursionError:
        raise RequestError("bad_request", "request is nested too deeply") from None
    except ValueError as error:  # an integer literal longer than Python converts (4,300 digits)
        raise RequestError("bad_request", f"request holds a number too long to read: {error}") from None
    if not isinstance(message, dict):
        raise RequestError("bad_request", f"request must be a JSON object, got {_json_type(message)}")
    if "op" not in message:
        raise RequestError("bad_request", "op: missing field")
    op = message["op"]
    if not isinstance(op, str):
        raise RequestError("bad_request", f"op: must be a string, got {_json_type(op)}")
    if op == "launch":
        return _parse_launch(message)
    if op in _NO_FIELDS:
        _check_fields(message, allowed=("op",))
        return _NO_FIELDS[op]()
    if op == "watch":
        _check_fields(message, allowed=("op", "interval"))
        interval = _number(message.get("interval", 1.0), "interval")
        low, high = WATCH_INTERVAL_S
        if not low <= interval <= high:
            raise RequestError("bad_request", f"interval: must be between {low:g} and {high:g} seconds, got {interval!r}")
        return WatchRequest(float(interval))
    if op == "ps":
        _check_fields(message, allowed=("op", "all", "ended", "task"))
        task = message.get("task")
        if task is not None and not (isinstance(task, str) and 0 < len(task) <= MAX_NAME_CHARS):
            raise RequestError("bad_request", f"task: must be a task id (1 to {MAX_NAME_CHARS} characters), "
                                              f"got {_json_type(task)}")
        return PsRequest(_bool(message.get("all", False), "all"), _bool(message.get("ended", False), "ended"),
                         task)
    if op == "stop":
        return _parse_stop(message)
    if op == "set-weight":
        _check_fields(message, allowed=("op", "group", "weight"))
        for field in ("group", "weight"):
            if field not in message:
                raise RequestError("bad_request", f"{field}: missing field")
        group = message["group"]
        if not (isinstance(group, str) and group):
            raise RequestError("bad_request", f"group: must be a non-empty string, got {_json_type(group)}")
        weight = _number(message["weight"], "weight")
        low, high = GROUP_WEIGHT_RANGE
        if not low <= weight <= high:
            raise RequestError("bad_request", f"weight: must be between {low:g} and {high:g}, got {weight!r}")
        return SetWeightRequest(group, float(weight))
    raise RequestError("unknown_op", f"op: unknown operation {op!r} (known: {', '.join(OPERATIONS)})")


def ok(payload: dict) -> bytes:
    """Encode a success reply, ``{"ok": true, ...payload}``, as one newline-terminated line.

    Raises:
        ValueError: if ``payload`` has an ``ok`` key, or holds NaN/infinity.
        TypeError: if ``payload`` is not a dict or holds something JSON cannot encode.
    """
    if "ok" in payload:
        raise ValueError("a reply payload must not have an 'ok' key")
    return _encode({"ok": True, **payload})


def error(code: str, message: str) -> bytes:
    """Encode an error reply, ``{"ok": false, "error": {"code", "message"}}``, as one line.

    Raises:
        ValueError: if ``code`` is not one of :data:`ERROR_CODES`.
    """
    if code not in ERROR_CODES:
        raise ValueError(f"unknown error code {code!r}")
    return _encode({"ok": False, "error": {"code": code, "message": message}})


def _encode(reply: dict) -> bytes:
    return as_line(encode_json(reply))


def encode_json(value: object) -> str:
    """``value`` as compact JSON text, as replies are written (parts of a reply encoded apart,
    then joined: :class:`governor.status.StatusReply`).

    Raises:
        ValueError: NaN or infinity in ``value``.
        TypeError: something JSON cannot encode.
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def as_line(text: str) -> bytes:
    """A reply's JSON text as the bytes of one line."""
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (a name read with surrogateescape): shown as U+FFFD
        return _LONE_SURROGATE.sub("\ufffd", text).encode() + b"\n"


# A surrogate code point left alone: JSON's "\udcff" escape, or an undecodable byte read with
# surrogateescape. Pairs were already joined by json.loads, so any match is lone.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrub(value: object) -> object:
    """``value`` with every lone surrogate, in strings and keys, replaced by U+FFFD: it can be
    neither encoded as UTF-8 nor printed, so one in a command line would break every reply
    that shows it (status, watch) for every user."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_scrub(item) for item in value]
    if isinstance(value, dict):
        return {_scrub(key): _scrub(item) for key, item in value.items()}
    return value


_NO_FIELDS = {"status": StatusRequest, "explain": ExplainRequest, "reload": ReloadRequest}
OPERATIONS = ("launch", "status", "watch", "explain", "ps", "stop", "reload", "set-weight")


def _number(value: object, field: str) -> float:
    try:  # an integer past a float's range (10**400) overflows here, not later in a handler
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        raise RequestError("bad_request", f"{field}: must be a finite number, got {_json_type(value)}")
    return value


def name_problem(name: str) -> str | None:
    """What is wrong with ``name`` as a task's name (1 to :data:`MAX_NAME_CHARS` printable
    characters, no tab or newline), or None."""
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME_CHARS:
        return f"at most {MAX_NAME_CHARS} characters, got {len(name)}"
    if not name.isprintable():
        return "must be printable characters only (no tab, newline or control character)"
    return None


def default_name(command: tuple[str, ...]) -> str:
    """The name of a task launched without one: its command's basename, made printable and
    cut to :data:`MAX_NAME_CHARS` (``task`` for no command)."""
    base = command[0].rstrip("/").rpartition("/")[2] if command else ""
    shown = "".join(c if c.isprintable() else "?" for c in base)[:MAX_NAME_CHARS]
    return shown or "task"


def _parse_stop(message: dict) -> StopRequest:
    _check_fields(message, allowed=("op", "tasks"))
    if "tasks" not in message:
        raise RequestError("bad_request", "tasks: missing field")
    tasks = message["tasks"]
    if not isinstance(tasks, list) or not 1 <= len(tasks) <= MAX_STOP_TASKS:
        raise RequestError("bad_request", f"tasks: must be a list of 1 to {MAX_STOP_TASKS} task ids")
    for i, task in enumerate(tasks):
        if not isinstance(task, str) or not 0 < len(task) <= MAX_NAME_CHARS:
            raise RequestError("bad_request", f"tasks[{i}]: must be a task id (a non-empty string of at most "
                                              f"{MAX_NAME_CHARS} characters), got {_json_type(task)}")
    return StopRequest(tuple(dict.fromkeys(tasks)))


def _parse_launch(message: dict) -> LaunchRequest:
    _check_fields(message, allowed=("op", "pid", "group", "demand", "command", "wait", "name", "time_limit"))
    if "pid" not in message:
        raise RequestError("bad_request", "pid: missing field")
    pid = _int(message["pid"], "pid", minimum=1)
    group = message.get("group")
    if group is not None and not (isinstance(group, str) and group):
        raise RequestError("bad_request", f"group: must be a non-empty string or null, got {_json_type(group)}")
    return LaunchRequest(
        pid=pid,
        group=group,
        demand=_demand(message.get("demand", {})),
        command=_command(message.get("command", [])),
        wait=_bool(message.get("wait", True), "wait"),
        name=_name(message.get("name")),
        time_limit=_time_limit(message.get("time_limit")),
    )


def _name(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestError("bad_request", f"name: must be a string or null, got {_json_type(value)}")
    problem = name_problem(value)
    if problem:
        raise RequestError("bad_request", f"name: {problem}")
    return value


def _time_limit(value: object) -> float | None:
    if value is None:
        return None
    seconds = _number(value, "time_limit")
    if seconds <= 0:
        raise RequestError("bad_request", f"time_limit: must be a number of seconds > 0, got {seconds!r}")
    return float(seconds)


def _bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise RequestError("bad_request", f"{field}: must be true or false, got {_json_type(value)}")
    return value


def _demand(value: object) -> dict[str, float | int]:
    if not isinstance(value, dict):
        raise RequestError("bad_request", f"demand: must be an object, got {_json_type(value)}")
    keys = {entry.wire: entry for entry in resources.RESOURCES}
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise RequestError("bad_request", f"demand.{unknown[0]}: unknown field (known: {', '.join(keys)})")
    demand: dict[str, float | int] = {}
    for key, entry in keys.items():
        if key not in value:
            continue
        field = f"demand.{key}"
        if entry.whole:
            demand[key] = _int(value[key], field, minimum=0)
            continue
        amount = value[key]
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise RequestError("bad_request", f"{field}: must be a number of {entry.unit}, got {_json_type(amount)}")
        if not math.isfinite(amount) or amount < 0:
            raise RequestError("bad_request", f"{field}: must be a finite number ≥ 0, got {amount!r}")
        demand[key] = float(amount)
    return demand


def _command(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise RequestError("bad_request", f"command: must be a list of strings, got {_json_type(value)}")
    if len(value) > MAX_COMMAND_ITEMS:
        raise RequestError("bad_request", f"command: at most {MAX_COMMAND_ITEMS} items, got {len(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise RequestError("bad_request", f"command[{i}]: must be a string, got {_json_type(item)}")
        if len(item) > MAX_COMMAND_ITEM_CHARS:
            raise RequestError("bad_request",
                               f"command[{i}]: at most {MAX_COMMAND_ITEM_CHARS} characters, got {len(item)}")
    return tuple(value)


def _int(value: object, field: str, *, minimum: int) -> int:
    # bool is an int subclass in Python, but `true` is not a pid or a byte count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError("bad_request", f"{field}: must be an integer, got {_json_type(value)}")
    if not minimum <= value <= MAX_INT:
        raise RequestError("bad_request", f"{field}: must be between {minimum} and 2^63-1, got {value}")
    return value


def _check_fields(message: dict, *, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(message) - set(allowed))
    if unknown:
        raise RequestError("bad_request",
                           f"{unknown[0]}: unknown field for op {message['op']!r} (known: {', '.join(allowed)})")


def _reject_constant(name: str) -> None:
    # json.loads accepts NaN and Infinity by default; they are not JSON and no field takes them.
    raise RequestError("bad_request", f"request is not JSON: {name} is not a JSON value")


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for messages (``string``, ``array``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    names = {str: "a string", int: "an integer", float: "a number", list: "an array", dict: "an object"}
    return names.get(type(value), type(value).__name__)
