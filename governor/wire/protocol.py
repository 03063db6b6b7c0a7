"""The control-socket protocol, with no I/O: its transport and errors, the table of operations
(:data:`OPERATIONS`), request parsing and reply encoding.

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
  connections as ``[daemon] max_tasks_per_user`` / ``max_connections_per_user`` allow; or
  asks for ``history`` while its last is answered or sooner than its pace allows.
- ``invalid_config``: ``reload`` found the config file bad ("file: key: reason"); the config in
  force stays.
- ``stopped``: a queued ``launch`` whose task was stopped (``governor stop``) before it started.
- ``internal``: a bug in the daemon; it logs the traceback and keeps serving.

Operations are the entries of :data:`OPERATIONS`, one a line: its name (the request's
``op``), its request type (:mod:`governor.wire.request_types`: fields, units, checks), its reply
type (:mod:`governor.wire.reply_types`), whether it streams, and what it does. Every field is
checked and unknown fields are refused. Client and daemon both go through the table: adding an
operation is an entry here, its two types, and the daemon's handler for it
(:meth:`governor.daemon.requests.Requests.handlers`).

Try it by hand::

    $ echo '{"op": "status"}' | nc -U /run/governor/governor.sock
    {"ok":true,"status":{"daemon":{"pid":812,...},...}}
    $ socat - UNIX-CONNECT:/run/governor/governor.sock
    {"op": "launch", "pid": 1}
    {"ok":false,"error":{"code":"forbidden","message":"pid 1 is not the caller's pid ..."}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from governor.errors import RequestError
from governor.wire import lines
from governor.wire.fields import json_type
from governor.wire.lines import LONE_SURROGATE, as_line, encode_json
from governor.wire.reply_types import (ExplainReply, HistoryReply, LaunchReply, PsReply, ReloadReply, SetWeightReply,
                                   StatusReply, StopReply)
from governor.wire.request_types import (ExplainRequest, HistoryRequest, LaunchRequest, PsRequest, ReloadRequest,
                                    Request, SetWeightRequest, StatusRequest, StopRequest, WatchRequest)

MAX_LINE_BYTES = 65536
READ_TIMEOUT_S = 10

ERROR_CODES = frozenset({
    "bad_request", "too_large", "timeout", "unknown_op", "forbidden", "not_found",
    "exceeds_capacity", "would_wait", "unavailable", "invalid_config", "internal", "too_many", "stopped",
})


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
class Operation:
    """One operation of the protocol.

    Attributes:
        name: the request's ``op``.
        request: its request type (``to_json``; ``from_json`` raises RequestError).
        reply: its reply type (``to_json``; ``from_json`` raises ValueError); for a stream,
            the type of each line.
        streamed: the daemon answers with lines until it or the client ends the stream, then
            closes the connection; else one reply line, and the connection stays open.
        doc: what it does, who may, and its errors beyond ``bad_request``.
    """

    name: str
    request: type
    reply: type
    streamed: bool
    doc: str


_TABLE = (
    Operation("launch", LaunchRequest, LaunchReply, True,
              "Govern the caller's own process as a task. When its declared memory does not fit beside the "
              "running tasks', a Queued line now and at each change of its place, the connection held open "
              "(closing it leaves the queue); with wait false, would_wait instead. The last line is Started. "
              "A pid that already runs as a task gets that task back, so a client that lost the reply may "
              "ask again. Errors: forbidden (not the caller's pid), not_found, exceeds_capacity, would_wait, "
              "too_many, stopped, unavailable."),
    Operation("status", StatusRequest, StatusReply, False, "A snapshot of the daemon (docs/operator.md)."),
    Operation("watch", WatchRequest, StatusReply, True,
              "A status at once, then one per interval, until the client closes the connection."),
    Operation("explain", ExplainRequest, ExplainReply, False,
              "The live host's progressive filling with its trace; one user's take at most a tenth of the "
              "daemon's time (the next waits; root's do not). Errors: unavailable (the filling diverged)."),
    Operation("ps", PsRequest, PsReply, False,
              "The caller's tasks, or its recent ended records; others' with all, users or groups, as "
              "docs/user.md's \"Who sees what\" says. One user's take at most a tenth of the daemon's time (the "
              "next waits; root's do not). Errors: not_found (a group the config does not know, with no "
              "task)."),
    Operation("stop", StopRequest, StopReply, False,
              "End each task's whole process tree (a queued one leaves the queue); the reply comes once their "
              "processes are gone. Only the task's owner, root and admins may; nothing is stopped unless "
              "every id may be. Errors: forbidden (another's task, or a user's session), not_found, "
              "unavailable (naming the pids left)."),
    Operation("reload", ReloadRequest, ReloadReply, False,
              "Admin (uid 0 or the config's admin_group): re-read the config file. Errors: forbidden, "
              "invalid_config (file: key: reason; the config in force stays)."),
    Operation("set-weight", SetWeightRequest, SetWeightReply, False,
              "Admin: a group's weight until the next reload or restart. Errors: forbidden, not_found."),
    Operation("history", HistoryRequest, HistoryReply, False,
              "The history journal's entries in a period (docs/admin.md, History and replay), another user's "
              "marked private. One per uid at a time, and one user's reads take at most a tenth of the "
              "daemon's time. Errors: too_many (ask again in the seconds it says), unavailable (the journal "
              "cannot be read)."),
)
OPERATIONS: dict[str, Operation] = {operation.name: operation for operation in _TABLE}
# The lines of :mod:`governor.wire.lines`, named with the rest of the protocol here (status
# replies encode their parts with them).
request_line = lines.request_line


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
    except ValueError:  # an integer literal longer than Python converts (4,300 digits)
        raise RequestError("bad_request", "request holds a number of more than 4,300 digits: no field takes "
                                          "one") from None
    if not isinstance(message, dict):
        raise RequestError("bad_request", f"request must be a JSON object, got {json_type(message)}")
    if "op" not in message:
        raise RequestError("bad_request", "op: missing field")
    op = message["op"]
    if not isinstance(op, str):
        raise RequestError("bad_request", f"op: must be a string, got {json_type(op)}")
    if op not in OPERATIONS:
        raise RequestError("unknown_op", f"op: unknown operation {op!r} (known: {', '.join(OPERATIONS)})")
    return OPERATIONS[op].request.from_json(message)


def parse_reply(request: Request, payload: dict):
    """The typed reply to ``request`` from a success line's payload (the line without ``ok``).

    Raises:
        ValueError: the payload is not that operation's reply (names the field).
    """
    return OPERATIONS[request.op].reply.from_json(payload)


def ok(payload: dict) -> bytes:
    """Encode a success reply, ``{"ok": true, ...payload}``, as one newline-terminated line.

    Raises:
        ValueError: if ``payload`` has an ``ok`` key, or holds NaN/infinity.
        TypeError: if ``payload`` is not a dict or holds something JSON cannot encode.
    """
    if "ok" in payload:
        raise ValueError("a reply payload must not have an 'ok' key")
    return as_line(encode_json({"ok": True, **payload}))


def error(code: str, message: str) -> bytes:
    """Encode an error reply, ``{"ok": false, "error": {"code", "message"}}``, as one line.

    Raises:
        ValueError: if ``code`` is not one of :data:`ERROR_CODES`.
    """
    if code not in ERROR_CODES:
        raise ValueError(f"unknown error code {code!r}")
    return as_line(encode_json({"ok": False, "error": {"code": code, "message": message}}))


def _scrub(value: object) -> object:
    """``value`` with every lone surrogate, in strings and keys, replaced by U+FFFD: it can be
    neither encoded as UTF-8 nor printed, so one in a command line would break every reply
    that shows it (status, watch) for every user."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_scrub(item) for item in value]
    if isinstance(value, dict):
        return {_scrub(key): _scrub(item) for key, item in value.items()}
    return value


def _reject_constant(name: str) -> None:
    # json.loads accepts NaN and Infinity by default; they are not JSON and no field takes them.
    raise RequestError("bad_request", f"request is not JSON: {name} is not a JSON value")
