"""Checks of the control protocol's request fields, each raising a ``bad_request``
:class:`~governor.errors.RequestError` whose message starts with the field (``pid``,
``demand.memory``, ``command[2]``), so that a client sees what is wrong and where.

Pure: no I/O. The request types (:mod:`governor.wire.request_types`) call them in ``from_json``.
"""

from __future__ import annotations

import math

from governor.config import resources
from governor.config.units import MAX_TIME_LIMIT_S, json_type, magnitude
from governor.errors import RequestError

MAX_COMMAND_ITEMS = 64
MAX_COMMAND_ITEM_CHARS = 4096
# Cgroup files hold signed 64-bit values; a larger byte count can only be a mistake.
MAX_INT = 2**63 - 1
MAX_NAME_CHARS = 64


def bad(field: str, reason: str) -> RequestError:
    """The ``bad_request`` error for ``field``: ``"field: reason"``."""
    return RequestError("bad_request", f"{field}: {reason}")


def reply_field(payload: object, key: str, kind: type | tuple[type, ...]):
    """A reply's ``payload[key]``, which must be a ``kind`` (else ValueError: "has no ``key``
    object"): what a reply type's ``from_json`` checks (:mod:`governor.wire.reply_types`)."""
    value = payload.get(key) if isinstance(payload, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):  # no field of a reply is a boolean
        raise ValueError(f"has no {key} {_KIND_NAMES.get(kind, 'number')}")
    return value


_KIND_NAMES = {dict: "object", list: "list", str: "string"}


def _got(value: object) -> str:
    """What a field holds, for a message: a string by its length (it failed on that), else its type."""
    if isinstance(value, str):
        return "an empty string" if not value else f"a string of {len(value):,} characters"
    return json_type(value)


def check_fields(message: dict, *, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> None:
    """Refuse a field of ``message`` not in ``allowed`` (``op`` is always allowed), and a
    missing one of ``required``."""
    allowed = ("op", *allowed)
    unknown = sorted(set(message) - set(allowed))
    if unknown:
        raise bad(unknown[0], f"unknown field for op {message.get('op')!r} (known: {', '.join(allowed)})")
    for field in required:
        if field not in message:
            raise bad(field, "missing field")


def number(value: object, field: str) -> float:
    """``value`` as a finite JSON number (int or float, not a boolean)."""
    try:  # an integer past a float's range (10**400) overflows here, not later in a handler
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        raise bad(field, f"must be a finite number, got {json_type(value)}")
    return value


def in_range(value: object, field: str, bounds: tuple[float, float], unit: str = "") -> float:
    """``value`` as a float within ``bounds`` (inclusive; ``unit`` names them in the message)."""
    amount = number(value, field)
    low, high = bounds
    if not low <= amount <= high:
        raise bad(field, f"must be between {low:g} and {high:g}{unit}, got {amount!r}")
    return float(amount)


def integer(value: object, field: str, *, minimum: int) -> int:
    """``value`` as an int from ``minimum`` to 2^63-1."""
    # bool is an int subclass in Python, but `true` is not a pid or a byte count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(field, f"must be an integer, got {json_type(value)}")
    if not minimum <= value <= MAX_INT:
        raise bad(field, f"must be between {minimum} and 2^63-1, got {magnitude(value)}")
    return value


def boolean(value: object, field: str) -> bool:
    """``value`` as true or false."""
    if not isinstance(value, bool):
        raise bad(field, f"must be true or false, got {json_type(value)}")
    return value


# Names one filter may list (ps -u, --group).
MAX_NAMES = 64


def names(value: object, field: str) -> tuple[str, ...]:
    """``value`` as a list of at most :data:`MAX_NAMES` names (user or group names: 1 to
    :data:`MAX_NAME_CHARS` characters each), each once."""
    if not isinstance(value, list) or len(value) > MAX_NAMES:
        raise bad(field, f"must be a list of at most {MAX_NAMES} names, got {json_type(value)}")
    for i, item in enumerate(value):
        if not (isinstance(item, str) and 0 < len(item) <= MAX_NAME_CHARS):
            raise bad(f"{field}[{i}]", f"must be a name of 1 to {MAX_NAME_CHARS} characters, got {_got(item)}")
    return tuple(dict.fromkeys(value))


def text(value: object, field: str, *, nullable: bool = False) -> str | None:
    """``value`` as a non-empty string (or None where ``nullable``)."""
    if value is None and nullable:
        return None
    if not (isinstance(value, str) and value):
        raise bad(field, f"must be a non-empty string{' or null' if nullable else ''}, got {_got(value)}")
    return value


def task_id(value: object, field: str) -> str:
    """``value`` as a task id: 1 to :data:`MAX_NAME_CHARS` characters."""
    if not (isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS):
        raise bad(field, f"must be a task id (a non-empty string of at most {MAX_NAME_CHARS} characters), "
                         f"got {_got(value)}")
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


def task_name(value: object) -> str | None:
    """``value`` as a task's name (:func:`name_problem`), or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad("name", f"must be a string or null, got {json_type(value)}")
    problem = name_problem(value)
    if problem:
        raise bad("name", problem)
    return value


def time_limit(value: object) -> float | None:
    """``value`` as seconds above 0 and at most ``MAX_TIME_LIMIT_S`` (ten years), or None."""
    if value is None:
        return None
    seconds = number(value, "time_limit")
    if not 0 < seconds <= MAX_TIME_LIMIT_S:
        raise bad("time_limit", f"must be a number of seconds above 0 and at most {MAX_TIME_LIMIT_S:,} (ten years), "
                                f"got {float(seconds):g}")
    return float(seconds)


def demand(value: object) -> dict[str, float | int]:
    """``value`` as a demand by wire key (:data:`governor.config.resources.RESOURCES`): whole
    resources as ints ≥ 0, the others as finite floats ≥ 0."""
    if not isinstance(value, dict):
        raise bad("demand", f"must be an object, got {json_type(value)}")
    keys = {entry.wire: entry for entry in resources.RESOURCES}
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise bad(f"demand.{unknown[0]}", f"unknown field (known: {', '.join(keys)})")
    checked: dict[str, float | int] = {}
    for key, entry in keys.items():
        if key not in value:
            continue
        field = f"demand.{key}"
        if entry.whole:
            checked[key] = integer(value[key], field, minimum=0)
            continue
        amount = value[key]
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise bad(field, f"must be a number of {entry.unit}, got {json_type(amount)}")
        try:  # an integer past a float's range (10**400) overflows here
            amount = float(amount)
        except OverflowError:
            raise bad(field, f"must be a finite number ≥ 0, got {magnitude(amount)}") from None
        if not math.isfinite(amount) or amount < 0:
            raise bad(field, f"must be a finite number ≥ 0, got {amount!r}")
        checked[key] = amount
    return checked


def command(value: object) -> tuple[str, ...]:
    """``value`` as a command line: at most :data:`MAX_COMMAND_ITEMS` strings of at most
    :data:`MAX_COMMAND_ITEM_CHARS` characters."""
    if not isinstance(value, list):
        raise bad("command", f"must be a list of strings, got {json_type(value)}")
    if len(value) > MAX_COMMAND_ITEMS:
        raise bad("command", f"at most {MAX_COMMAND_ITEMS} items, got {len(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise bad(f"command[{i}]", f"must be a string, got {json_type(item)}")
        if len(item) > MAX_COMMAND_ITEM_CHARS:
            raise bad(f"command[{i}]", f"at most {MAX_COMMAND_ITEM_CHARS} characters, got {len(item)}")
    return tuple(value)
