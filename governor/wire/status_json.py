"""The status's one encoder (:func:`encode`: a :class:`~governor.wire.status_types.Status` to the
JSON object the socket carries, ``governor status --json``'s) and one decoder (:func:`decode`:
that object to a ``Status``, each field checked against its type, a malformed one named:
``status.groups.physics.weight: must be a number, got a string``).

Both walk the dataclasses of :mod:`governor.wire.status_types` by their fields and type hints,
so a field added there is encoded and decoded with nothing written here. Numbers keep the type
the daemon gave them (an int stays an int), so that decoding and encoding again gives the same
JSON. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping

from governor.wire.fields import json_type
from governor.wire.status_types import Status, TaskEntry

__all__ = ["MalformedStatus", "decode", "decode_part", "decode_section", "encode"]


class MalformedStatus(ValueError):
    """A status object with a field that is not what its type says (a daemon's bug or a
    hostile one): the message names the field, ``has a malformed status.groups.A.weight: must
    be a number, got a string`` (what a client's ``the daemon's status reply …`` goes on with)."""


# ── encoding ─────────────────────────────────────────────────────────────────────────────

def encode(status: Status, kept: dict[int, tuple[TaskEntry, dict]] | None = None) -> dict:
    """``status`` as the JSON object the daemon sends (keys in field order, a field's
    ``omit`` value left out, ``lambda_`` as ``lambda``).

    Args:
        status: the status.
        kept: id(task entry) → (the entry, its JSON) of the last status encoded, replaced by
            this one's: an unchanged task entry (the same object) gets the same JSON object,
            which the reply's encoding does not check again (a status of 10,000 tasks).
    """
    fresh: dict[int, tuple[TaskEntry, dict]] | None = {} if kept is not None else None
    encoded = _encode(status, kept or {}, fresh)
    if kept is not None:
        kept.clear()
        kept.update(fresh)
    return encoded


def _encode(value: object, kept: Mapping[int, tuple], fresh: dict | None) -> object:
    kind = type(value)
    plan = _PLANS.get(kind) or (_plan(kind) if dataclasses.is_dataclass(kind) else None)
    if plan is not None:
        if kind is TaskEntry and fresh is not None:
            last = kept.get(id(value))
            if last is not None and last[0] is value:
                fresh[id(value)] = last
                return last[1]
        out = {}
        for attr, key, omit, spread, _ in plan:
            item = getattr(value, attr)
            if spread:
                out.update((name, _encode(v, kept, fresh)) for name, v in item.items())
            elif item is not omit:
                out[key] = _encode(item, kept, fresh)
        if kind is TaskEntry and fresh is not None:
            fresh[id(value)] = (value, out)
        return out
    if kind is tuple or kind is list:
        return [_encode(item, kept, fresh) for item in value]
    if isinstance(value, Mapping):
        return {name: _encode(item, kept, fresh) for name, item in value.items()}
    return value


_NEVER = object()  # a field that is always written

# dataclass → [(attribute, JSON key, omit value, spread suffixes, type hint)]
_PLANS: dict[type, list[tuple[str, str, object, tuple[str, ...], object]]] = {}


def _plan(kind: type) -> list[tuple[str, str, object, tuple[str, ...], object]]:
    hints = typing.get_type_hints(kind)
    plan = [(f.name, f.name.rstrip("_"), f.metadata.get("omit", _NEVER), f.metadata.get("spread", ()),
             hints[f.name]) for f in dataclasses.fields(kind)]
    _PLANS[kind] = plan
    return plan


# ── decoding ─────────────────────────────────────────────────────────────────────────────

def decode(payload: object) -> Status:
    """The status in ``payload`` (the ``status`` object of a reply). A field left out takes
    its default (an older daemon's status); a key this CLI does not know is ignored (a newer
    daemon's).

    Raises:
        MalformedStatus: a field of the wrong type, or a required one (a task's ``id``, a
            queue item's ``task``, a GPU's ``index``) missing; the message names it.
    """
    return _decoder(Status)(payload, "status")


def decode_part(kind: object, payload: object, where: str):
    """``payload`` as a ``kind`` (a type of :mod:`governor.wire.status_types`, or
    ``tuple[QueueItem, ...]``…): a part of the status that another reply carries too
    (``explain``'s ``queue``, ``psi`` and ``foreign``); ``where`` names it in errors.

    Raises:
        MalformedStatus: as :func:`decode`.
    """
    return _decoder(kind)(payload, where)


def decode_section(name: str, payload: object):
    """``payload`` as the status's field ``name`` (``queue``, ``events``, ``daemon``…): a
    section another module keeps as a JSON object, typed as a client types it.

    Raises:
        MalformedStatus: as :func:`decode`.
    """
    hints = {attr: hint for attr, _, _, _, hint in _PLANS.get(Status) or _plan(Status)}
    return decode_part(hints[name], payload, f"status.{name}")


Decoder = Callable[[object, str], object]


def _bad(where: str, wanted: str, value: object) -> MalformedStatus:
    return MalformedStatus(f"has a malformed {where}: must be {wanted}, got {json_type(value)}")


def _scalar(check: Callable[[object], bool], wanted: str) -> Decoder:
    def decoded(value: object, where: str) -> object:
        if not check(value):
            raise _bad(where, wanted, value)
        return value
    return decoded


_SCALARS: dict[object, Decoder] = {
    object: lambda value, where: value,
    str: _scalar(lambda v: isinstance(v, str), "a string"),
    bool: _scalar(lambda v: isinstance(v, bool), "true or false"),
    int: _scalar(lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: _scalar(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
}


@functools.cache
def _decoder(hint: object) -> Decoder:
    """The decoder of values of type ``hint`` (made once per type)."""
    if hint in _SCALARS:
        return _SCALARS[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):  # X | None
        inner = _decoder(next(arg for arg in args if arg is not type(None)))
        return lambda value, where: None if value is None else inner(value, where)
    if origin is tuple:
        item = _decoder(args[0])

        def listed(value: object, where: str) -> tuple:
            if not isinstance(value, list):
                raise _bad(where, "an array", value)
            return tuple(item(v, f"{where}[{i}]") for i, v in enumerate(value))
        return listed
    if origin in (Mapping, dict):
        item = _decoder(args[1])

        def mapped(value: object, where: str) -> dict:
            if not isinstance(value, dict):
                raise _bad(where, "an object", value)
            return {key: item(v, f"{where}.{key}") for key, v in value.items()}
        return mapped
    if dataclasses.is_dataclass(hint):
        return _object_decoder(hint)
    raise TypeError(f"no decoder for {hint!r}")  # a field type status_types should not use


def _object_decoder(kind: type) -> Decoder:
    fields = {f.name: f for f in dataclasses.fields(kind)}
    plan = [(attr, key, spread, fields[attr], hint) for attr, key, _, spread, hint in _PLANS.get(kind) or _plan(kind)]

    def decoded(value: object, where: str) -> object:
        if not isinstance(value, dict):
            raise _bad(where, "an object", value)
        found = {}
        for attr, key, spread, about, hint in plan:
            if spread:
                found[attr] = {name: item for name, item in value.items() if name.endswith(spread)}
            elif key in value:
                found[attr] = _decoder(hint)(value[key], f"{where}.{key}")
            elif about.default is dataclasses.MISSING and about.default_factory is dataclasses.MISSING:
                raise MalformedStatus(f"has no {where}.{key}")
        return kind(**found)
    return decoded
