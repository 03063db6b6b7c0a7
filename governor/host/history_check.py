"""Whether a line of the history journal is an entry ``governor history`` and ``governor replay``
can use (schema in docs/admin.md, "History and replay"; :mod:`governor.daemon.history` writes
them): each field they read of the right type and within what a host can have. The journal is
root's, but a disk, a hand edit or another version may leave a line of another shape; the
readers skip it and say where, rather than meet it as a traceback or a 300-digit share. Fields
no reader reads are not looked at (a newer daemon may add some). Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from governor.config.resource_values import MAX_BYTES, MAX_CORES, MAX_PIDS
from governor.config.units import json_type

__all__ = ["MAX_DEVICES", "entry_problem"]

# The most devices of one class a host has: NVIDIA's driver numbers its nodes 0–255, and a
# journal saying 1e7 GPUs had replay build a list of ten million of them.
MAX_DEVICES = 1024
# The largest amount of each unit a host can have (the config's bounds), by the registry's unit.
_BOUNDS = {"cores": MAX_CORES, "bytes": MAX_BYTES, "bytes/s": MAX_BYTES, "devices": MAX_DEVICES,
           "processes": MAX_PIDS}
# A time or a duration: seconds, within what a float says to the microsecond (year ~2255).
_MAX_SECONDS = 2.0 ** 33
_TASK_KINDS = ("launch", "start", "session", "end")


def entry_problem(entry: object) -> str | None:
    """What makes ``entry`` (a parsed JSON line) no usable entry, in words naming the field
    (``demand.cpu must be an amount from 0 to 65,536, got a string``), or None when it is one.
    Every kind's fields the readers read are checked where present (a newer daemon's kind is
    listed by ``history``); a task's entry needs its ``task`` and ``group``, a ``daemon``
    entry its ``capacity``."""
    if not isinstance(entry, dict):
        return f"an entry must be a JSON object, got {json_type(entry)}"
    problem = _seconds(entry.get("at"), "at", required=True)
    if problem or not isinstance(entry.get("kind"), str):
        return problem or f"kind must be a string, got {json_type(entry.get('kind'))}"
    if not entry["kind"]:  # (history listed it as a row of no kind)
        return "kind must be a non-empty string, got an empty one"
    kind = entry["kind"]
    if kind == "daemon":  # a host of no core or no memory is none to replay on
        return _amounts(entry.get("capacity"), "capacity", required=True) or next(
            (f"capacity.{name} must be above 0, got 0" for name in ("cpu", "memory")
             if entry["capacity"].get(name, 1) == 0), None)
    if kind in _TASK_KINDS:
        problem = _text(entry.get("task"), "task", required=True) or _text(entry.get("group"), "group", required=True)
        if problem:
            return problem
    if kind == "refusal":
        problem = _amounts(entry.get("demand"), "demand", bounded=False)
        if problem:
            return problem
    return next(filter(None, (check(entry.get(key), key) for key, check in _FIELDS.items()
                              if not (kind == "refusal" and key == "demand"))), None)


def _optional_text(value: object, key: str) -> str | None:
    return _text(value, key, required=False, empty=True)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _seconds(value: object, key: str, *, required: bool = False) -> str | None:
    return _amount(value, key, _MAX_SECONDS, required=required, what="a number of seconds")


def _amount(value: object, key: str, bound: float, *, required: bool, what: str = "an amount") -> str | None:
    if value is None and not required:
        return None
    if _number(value) and (isinstance(value, int) or math.isfinite(value)) and 0 <= value <= bound:
        return None
    if not _number(value):
        got = json_type(value)
    elif isinstance(value, int) and len(str(abs(value))) > 20:  # (str of a 5,000-digit int raises)
        got = "a number of over 20 digits"
    else:
        got = f"{value:.6g}" if isinstance(value, float) else str(value)
    limit = "" if bound == math.inf else f" to {bound:,.0f}"
    return f"{key} must be {what} from 0{limit}, got {got}"


def _amounts(value: object, key: str, *, required: bool = False, bounded: bool = True) -> str | None:
    """An object of amounts, each within its resource's bound (unbounded: a refused launch's
    demand as it was asked, which may be past any host's)."""
    from governor.config import resources

    if value is None and not required:
        return None
    if not isinstance(value, Mapping):
        return f"{key} must be an object of amounts, got {json_type(value)}"
    for name, amount in value.items():
        # A refused launch's demand is as it was asked: ``io_read`` where no device is governed
        # (an attacker's check: each such refusal was a line every history and replay skipped).
        entry = resources.find(name) if bounded else resource_asked(name)
        if entry is None:  # replay divided by it, and stopped at the whole journal's first such line
            return f"{key}.{name} names no resource governor knows"
        bound = _BOUNDS.get(entry.unit, MAX_BYTES) if bounded else math.inf
        problem = _amount(amount, f"{key}.{name}", bound, required=True)
        if problem:
            return problem
    return None


def resource_asked(name: str):
    """The registry entry of ``name`` as a launch request's demand spells it: a resource's name,
    or the request key of a family named per device (``io_read``: the governed devices' read
    bandwidth), as a refused launch is journaled; None for neither."""
    from governor.config import resources

    return resources.find(name) or next((entry for entry in resources.RESOURCES if entry.wire == name), None)


def _text(value: object, key: str, *, required: bool, empty: bool = False) -> str | None:
    if (value is None and not required) or (isinstance(value, str) and (value or empty)):
        return None
    return f"{key} must be a{'' if empty else ' non-empty'} string, got {json_type(value) if value != '' else 'an empty one'}"


def _uid(value: object) -> str | None:
    if value is None or (type(value) is int and 0 <= value < 2 ** 32):
        return None
    return f"uid must be a whole number from 0 to {2 ** 32 - 1:,}, got {json_type(value) if type(value) is not int else value}"


def _flag(value: object, key: str) -> str | None:
    return None if value is None or isinstance(value, bool) else f"{key} must be true or false, got {json_type(value)}"


# The fields the readers read (:class:`governor.wire.history_types.HistoryEntry`, replay's
# :func:`governor.daemon.replay_input.recorded`) → their check, each None where left out.
_FIELDS = {
    "task": _optional_text, "name": _optional_text, "user": _optional_text, "group": _optional_text,
    "reason": _optional_text, "code": _optional_text, "uid": lambda value, key: _uid(value),
    "demand": _amounts, "session": _flag, "group_named": _flag,
    "started": _seconds, "waited_s": _seconds, "wall_s": _seconds, "cpu_s": _seconds,
    "memory_peak": lambda value, key: _amount(value, key, MAX_BYTES, required=False),
}
