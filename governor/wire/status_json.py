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
from collections.abc import Callable, Mapping, Sequence

from governor.wire.fields import json_type
from governor.wire.status_types import Group, Status, TaskEntry

__all__ = ["MalformedStatus", "decode", "decode_part", "decode_section", "drop_gone", "encode"]


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
        kept: id(task or group entry) → (the entry, its JSON) of the statuses encoded, this
            one's added (those no status holds any more are dropped once they are a quarter of
            it): an unchanged entry (the same object) gets the same JSON object, which the
            reply's encoding does not check again (a status of 10,000 tasks).
    """
    if kept is None:
        return _encode(status, {}, None)
    encoded = _encode(status, kept, kept)  # what is new is added beside what is kept
    drop_gone(kept, [(group, group.tasks) for group in status.groups.values()])
    return encoded


def drop_gone(kept: dict[int, tuple], groups: Sequence[tuple[object, Sequence[object]]]) -> None:
    """Keep in ``kept`` (id(entry) → a tuple whose first item is the entry) only the entries of
    ``groups`` (each group entry with its task entries) once a quarter of it is of entries no
    status holds any more: a status of 10,000 tasks is not walked again for each."""
    live = sum(1 + len(tasks) for _, tasks in groups)
    if len(kept) > live + live // 4 + 64:
        held = {id(entry): kept[id(entry)] for group, tasks in groups for entry in (group, *tasks)
                if id(entry) in kept}
        kept.clear()
        kept.update(held)


def _encode(value: object, kept: Mapping[int, tuple], fresh: dict | None) -> object:
    kind = type(value)
    if kind in _LEAVES:
        return value
    plan = _PLANS.get(kind)
    if plan is None and kind is not dict and dataclasses.is_dataclass(kind):
        plan = _plan(kind)
    if plan is not None:
        if kind in _KEPT and fresh is not None:
            last = kept.get(id(value))
            if last is not None and last[0] is value:
                return last[1]
        out = {}
        for attr, key, omit, spread, _ in plan:
            item = getattr(value, attr)
            if spread:
                out.update((name, _encode(v, kept, fresh)) for name, v in item.items())
            elif item is not omit:
                out[key] = item if type(item) in _LEAVES else _encode(item, kept, fresh)
        if kind in _KEPT and fresh is not None:
            fresh[id(value)] = (value, out)
        return out
    if kind is tuple or kind is list:
        return [item if type(item) in _LEAVES else _encode(item, kept, fresh) for item in value]
    if isinstance(value, Mapping):
        if all(type(item) in _LEAVES for item in value.values()):
            return value if kind is dict else dict(value)  # a vector, a kernel file's value: as it is
        return {name: _encode(item, kept, fresh) for name, item in value.items()}
    return value


_LEAVES = frozenset({str, int, float, bool, type(None)})  # what is its own JSON
_KEPT = (TaskEntry, Group)  # what a status keeps while unchanged: its JSON is kept with it
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
    return decode_part(Status, payload, "status")


def decode_part(kind: object, payload: object, where: str):
    """``payload`` as a ``kind`` (a type of :mod:`governor.wire.status_types`,
    :mod:`governor.wire.ps_types` or :mod:`governor.wire.explain_types`, or
    ``tuple[TaskRow, ...]``…): another reply typed as the status is (``ps``'s rows, ``explain``'s
    object, which carries the status's ``queue``, ``psi`` and ``foreign``); ``where`` names it
    in errors.

    Raises:
        MalformedStatus: as :func:`decode`.
    """
    try:
        return _decoder(kind)(payload)
    except _Bad as bad:
        raise bad.named(where) from None


def decode_section(name: str, payload: object):
    """``payload`` as the status's field ``name`` (``queue``, ``events``, ``daemon``…): a
    section another module keeps as a JSON object, typed as a client types it.

    Raises:
        MalformedStatus: as :func:`decode`.
    """
    hints = {attr: hint for attr, _, _, _, hint in _PLANS.get(Status) or _plan(Status)}
    return decode_part(hints[name], payload, f"status.{name}")


class _Bad(Exception):
    """A malformed value, on its way up to :func:`decode_part`, which names it: each level it
    passes adds its key (built only then: a status of 10,000 tasks is decoded at every
    ``top`` update, and naming each value on the way down took most of the time)."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem, self.path = problem, []

    def at(self, key: str) -> _Bad:
        self.path.append(key)
        return self

    def named(self, where: str) -> MalformedStatus:
        return MalformedStatus(self.problem.format(where + "".join(reversed(self.path))))


def _wrong(wanted: str, value: object) -> _Bad:
    return _Bad(f"has a malformed {{}}: must be {wanted}, got {json_type(value)}")


Decoder = Callable[[object], object]

# A scalar type → the exact Python types of the JSON values it takes (bool is not an int
# here), and what it is in words.
_SCALARS: dict[object, tuple[frozenset, str]] = {
    str: (frozenset({str}), "a string"), bool: (frozenset({bool}), "true or false"),
    int: (frozenset({int}), "an integer"), float: (frozenset({int, float}), "a number"),
}


# A JSON integer past a signed 64-bit one is no figure a daemon writes (bytes up to 8 EiB, pids,
# counts): one past 2**1024 made a view's float() raise OverflowError, and a 300-digit pid is
# no cell.
_INT_BOUND = 2**63


def _scalar(hint: object) -> Decoder:
    kinds, wanted = _SCALARS[hint]

    def decoded(value: object) -> object:
        if type(value) not in kinds:
            raise _wrong(wanted, value)
        if type(value) is int and not -_INT_BOUND <= value < _INT_BOUND:
            raise _Bad(f"has a malformed {{}}: must be {wanted} of 64 bits at most, got a larger integer")
        return value
    return decoded


def _listed(item: Decoder) -> Decoder:
    def decoded(value: object) -> tuple:
        if type(value) is not list:
            raise _wrong("an array", value)
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v))
            except _Bad as bad:
                raise bad.at(f"[{i}]") from None
        return tuple(out)
    return decoded


def _mapped(item: Decoder, scalars: frozenset | None) -> Decoder:
    def decoded(value: object) -> dict:
        if type(value) is not dict:
            raise _wrong("an object", value)
        if scalars is not None and all(type(v) in scalars and (type(v) is not int or -_INT_BOUND <= v < _INT_BOUND)
                                       for v in value.values()):
            return value  # a vector: as decoded from the line, not copied
        out = {}
        for key, v in value.items():
            try:
                out[key] = item(v)
            except _Bad as bad:
                raise bad.at(f".{key}") from None
        return out
    return decoded


# How deep a value of no fixed type (a limit's value, a queue item's holders) may nest: the
# daemon's nest two or three levels; a reply nested ~850 deep made the views' recursion fail.
_ANY_DEPTH = 32


def _any(value: object) -> object:
    """A value of any JSON type, nested at most :data:`_ANY_DEPTH` levels."""
    if type(value) in _LEAVES:
        return value
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > _ANY_DEPTH:
            raise _Bad(f"has a malformed {{}}: nested past {_ANY_DEPTH} levels")
        level = [item for inner in level for item in (inner.values() if type(inner) is dict else inner)
                 if type(item) in (dict, list)]
    return value


@functools.cache
def _decoder(hint: object) -> Decoder:
    """The decoder of values of type ``hint`` (made once per type)."""
    if hint is object:
        return _any
    if hint in _SCALARS:
        return _scalar(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):  # X | None
        inner = _decoder(next(arg for arg in args if arg is not type(None)))
        return lambda value: None if value is None else inner(value)
    if origin is tuple:
        return _listed(_decoder(args[0]))
    if origin in (Mapping, dict):
        return _mapped(_decoder(args[1]), _SCALARS[args[1]][0] if args[1] in _SCALARS else None)
    if dataclasses.is_dataclass(hint):
        return _object_decoder(hint)
    raise TypeError(f"no decoder for {hint!r}")  # a field type status_types should not use


def _object_decoder(kind: type) -> Decoder:
    fields = {f.name: f for f in dataclasses.fields(kind)}
    plan = [(attr, key, spread, _decoder(hint),
             fields[attr].default is dataclasses.MISSING and fields[attr].default_factory is dataclasses.MISSING)
            for attr, key, _, spread, hint in _PLANS.get(kind) or _plan(kind)]

    def decoded(value: object) -> object:
        if type(value) is not dict:
            raise _wrong("an object", value)
        found = {}
        for attr, key, spread, item, required in plan:
            if spread:
                found[attr] = spreads = {}
                for name, v in value.items():
                    if name.endswith(spread):
                        try:
                            spreads[name] = _any(v)
                        except _Bad as bad:
                            raise bad.at(f".{name}") from None
            elif key in value:
                try:
                    found[attr] = item(value[key])
                except _Bad as bad:
                    raise bad.at(f".{key}") from None
            elif required:
                raise _Bad("has no {}").at(f".{key}")
        return kind(**found)
    return decoded
