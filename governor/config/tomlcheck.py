"""Checking the dicts ``tomllib`` returns, for scenario and config files alike.

Pure: callers read the bytes; these helpers parse them and check tables, so every problem
becomes one :class:`~governor.errors.ConfigError` naming the file, the dotted key and the reason.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from fractions import Fraction

from governor.errors import ConfigError
from governor.config.units import parse_quantity

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def parse_toml(text: str | bytes, file: str) -> dict:
    """Parse TOML text (bytes must be UTF-8).

    Raises:
        ConfigError: naming ``file`` alone, for bytes that are not UTF-8 or text that is not
            TOML (the reason carries tomllib's line and column), or nests past Python's recursion.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(file, None, "not UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(file, None, f"not valid TOML: {error}") from None
    except RecursionError:  # tomllib recurses into each array and inline table: x = [[[…]]]
        raise ConfigError(file, None, "not valid TOML for governor: arrays or tables nested too deeply") from None


def join_key(where: str | None, name: str) -> str:
    """The dotted key of ``name`` inside table ``where`` (``None`` for the top level).

    Names TOML would need quoted are quoted, so ``groups."a.b".weight`` stays unambiguous.
    """
    part = name if _BARE_KEY.fullmatch(name) else f'"{name}"'
    return f"{where}.{part}" if where else part


def type_name(value: object) -> str:
    """How to name the type of a TOML value in an error message, in TOML's words."""
    return {str: "a string", list: "an array", bool: "a boolean", dict: "a table", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


# The longest user or group name a host has: glibc's LOGIN_NAME_MAX (256, with the NUL).
_NAME_MAX = 255


def login_name(value: object, key: str, file: str) -> str:
    """A user or Unix group name: a non-empty string of printable characters (no escape or
    newline: a name reaches check-config's and the daemon's output as written), at most 255.

    Raises:
        ConfigError: at ``key``, saying what is wrong (the value cut to 60 characters).
    """
    if not isinstance(value, str) or not value or not value.isprintable() or len(value) > _NAME_MAX:
        raise ConfigError(file, key, f"must be a name of printable characters, at most {_NAME_MAX}, "
                                     f"got {toml_text(value)}")
    return value


def toml_text(value: object) -> str:
    """A TOML value as TOML writes it, for an error message: ``true``, not Python's ``True``;
    cut to 60 characters."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def no_unknown_keys(table: Mapping[str, object], allowed: tuple[str, ...], where: str | None, file: str) -> None:
    """Refuse a key of ``table`` that is not in ``allowed``; the reason lists the allowed keys.

    Raises:
        ConfigError: at the first unknown key.
    """
    for name in table:
        if name not in allowed:
            raise ConfigError(file, join_key(where, name), f"unknown key; allowed keys: {', '.join(allowed)}")


def subtable(parent: Mapping[str, object], name: str, where: str | None, file: str, *,
             required: bool = False) -> Mapping[str, object]:
    """The table ``name`` of ``parent``; an empty one when it is left out and not ``required``.

    Raises:
        ConfigError: when a required table is missing, or the value is not a table.
    """
    key = join_key(where, name)
    if name not in parent:
        if required:
            raise ConfigError(file, key, f"missing section [{key}]")
        return {}
    table = parent[name]
    if not isinstance(table, Mapping):
        raise ConfigError(file, key, f"must be a table [{key}], got {type_name(table)}")
    return table


def amount(value: object, key: str, file: str) -> Fraction:
    """A non-negative amount in base units: a number or a size string like ``"4G"``.

    Raises:
        ConfigError: at ``key``, with :func:`~governor.config.units.parse_quantity`'s reason.
    """
    try:
        return parse_quantity(value)
    except ValueError as error:
        raise ConfigError(file, key, str(error)) from None


def number(value: object, key: str, file: str, *, positive: bool = False) -> Fraction:
    """A non-negative finite number (and > 0 when ``positive``), exact.

    Sizes make no sense for weights, cores or seconds, so a string is a type error rather
    than ``"1K"``.

    Raises:
        ConfigError: at ``key``, for strings, booleans, negative or non-finite numbers, and 0
            when ``positive``.
    """
    if isinstance(value, str):
        raise ConfigError(file, key, f"must be a number, got string {value!r}")
    result = amount(value, key, file)
    if positive and result == 0:
        raise ConfigError(file, key, "must be > 0")
    return result


def in_range(value: object, key: str, file: str, low: float, high: float) -> Fraction:
    """A number from ``low`` to ``high`` (a weight), exact. Every value out of it, 0, negative,
    too large or not a number, is refused in the same words, which say the range.

    Raises:
        ConfigError: at ``key``: ``must be a number between <low> and <high>, got <value>``.
    """
    words = f"must be a number between {low:g} and {high:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(file, key, f"{words}, got {type_name(value)} {toml_text(value)}")
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(file, key, f"{words}, got {value:g}")
    return Fraction(repr(value))  # as written: 0.1 is 1/10, not the float nearest it
