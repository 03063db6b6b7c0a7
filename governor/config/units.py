"""Quantities as people write them, and back.

Sizes follow systemd and the kernel: the suffixes ``K M G T`` are powers of 1024, so ``"4G"``
is 4 × 1024³ bytes and ``"2G"`` as an I/O rate is 2 × 1024³ bytes/s. Plain numbers are base
units (cores, bytes, bytes/s). Parsing is exact: it returns a :class:`fractions.Fraction`, so a
scenario computed with it reproduces the paper's shares to the last digit.
"""

from __future__ import annotations

import math
import re

# typing.TYPE_CHECKING without importing typing, and fractions imported where used: `governor run
# --memory 4G` loads neither (governor.cli.launch).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from fractions import Fraction

SUFFIXES = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
# re.ASCII: \d is 0-9 only (Python's own also takes other scripts' digits: "١G" was 1G).
_QUANTITY = re.compile(r"\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<suffix>[KMGT]?)\s*", re.IGNORECASE | re.ASCII)


def parse_quantity(value: object) -> Fraction:
    """Parse a non-negative quantity: an int, a finite float, or a string like ``"18G"``.

    Returns:
        the value in base units as an exact Fraction (floats are read by their decimal
        representation, so ``0.1`` is exactly 1/10).

    Raises:
        ValueError: with a message fit to follow a file and key, for booleans, negative or
            non-finite numbers, and strings that are not a number with an optional K/M/G/T suffix.
    """
    from fractions import Fraction

    if isinstance(value, bool):
        raise ValueError(f"expected a number or a size like \"4G\", got {value!r}")
    if isinstance(value, int):
        number = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value!r}")
        number = Fraction(repr(value))
    elif isinstance(value, str):
        match = _QUANTITY.fullmatch(value)
        if match is None:
            raise ValueError(
                f"expected a number with an optional K, M, G or T suffix (powers of 1024), got {value!r}"
            )
        number = Fraction(match["number"]) * SUFFIXES[match["suffix"].upper()]
    else:
        raise ValueError(f"expected a number or a size like \"4G\", got {type(value).__name__}")
    if number < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return number


def parse_size(text: str) -> int:
    """``text`` read as :func:`parse_quantity` reads it, in whole base units (bytes), rounded to
    the nearest; raises ValueError as it does. A whole number needs no Fraction to be exact."""
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if match is not None and len(match["number"]) > 4000:  # past 4,300 digits int() would give Python's advice
        raise ValueError(f"has too many digits for a size, got {quoted(text)}")
    if match is not None and "." not in match["number"]:
        return int(match["number"]) * SUFFIXES[match["suffix"].upper()]
    return round(parse_quantity(text))


def format_size(value: float | Fraction, *, precision: int = 1) -> str:
    """Render bytes (or bytes/s) with the largest K/M/G/T suffix that keeps the number ≥ 1.

    ``format_size(12 * 1024**3) == "12.0G"``; values under 1 KiB keep no suffix.
    """
    number = float(value) + 0.0  # -0.0 + 0.0 is 0.0: no "-0"
    if not abs(number) < _HUGE * SUFFIXES["T"]:  # a hostile 1e308 is not a 300-digit line, nor NaN a crash
        return f"{number:.3g}"
    for suffix in ("T", "G", "M", "K"):
        scale = SUFFIXES[suffix]
        if abs(number) >= scale:
            return f"{number / scale:.{precision}f}{suffix}"
    return f"{number:.0f}" if number == int(number) else f"{number:.{precision}f}"


def format_number(value: float | Fraction, *, precision: int = 3) -> str:
    """Render a count or core figure without trailing zeros: ``3``, ``2.5``, ``0.333``."""
    number = float(value)
    if abs(number) >= _HUGE:
        return f"{number:.3g}"
    text = f"{number:.{precision}f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


# Past this, a figure is shown as 1e+15 rather than with all its digits.
_HUGE = 1e15


# Time span units as systemd.time(7) spells them, in seconds.
_SPAN_UNITS = {"us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "": 1.0, "s": 1.0, "sec": 1.0, "second": 1.0,
               "seconds": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hr": 3600.0,
               "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0, "w": 604800.0,
               "week": 604800.0, "weeks": 604800.0}
_SPAN_PART = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)", re.IGNORECASE | re.ASCII)


# The longest time limit a task may have (ten years): past it a limit is no limit, and the
# daemon's timer and records would carry a number like 1e300 seconds.
MAX_TIME_LIMIT_S = 3650 * 86_400


def magnitude(value: int) -> str:
    """An integer for a message: as it is up to 20 digits, past that its number of digits (a
    300-digit count echoed back is noise, and past 4,300 digits Python refuses to print it)."""
    absolute = abs(value)
    digits = int((absolute.bit_length() - 1) * math.log10(2)) + 1 if absolute else 1  # at most one short
    digits += absolute >= 10**digits
    return str(value) if digits <= 20 else f"a {digits}-digit number"


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for messages (``a string``, ``an array``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    names = {str: "a string", int: "an integer", float: "a number", list: "an array", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def quoted(text: str, limit: int = 24) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters: what a user typed, echoed
    back, is not 300 digits long."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def parse_duration(text: str) -> float:
    """A time span as systemd writes one (``RuntimeMaxSec=``): ``90``, ``90s``, ``10m``,
    ``2h``, ``1h30m``, ``1h 30min``, ``1d``; a number without a unit is seconds.

    Returns:
        seconds, > 0.

    Raises:
        ValueError: not a span, or not above zero.
    """
    at, total = 0, 0.0
    while at < len(text.rstrip()):
        match = _SPAN_PART.match(text, at)
        unit = match[2].lower() if match else None
        if match is None or unit not in _SPAN_UNITS:
            raise ValueError(f"expected a time span like 90s, 10m, 2h or 1h30m, got {quoted(text)}")
        total += float(match[1]) * _SPAN_UNITS[unit]
        at = match.end()
    if math.isinf(total):
        raise ValueError(f"is too long a time span, got {quoted(text)}")
    if not (math.isfinite(total) and total > 0):
        raise ValueError(f"must be a time span above zero, like 90s, 10m, 2h or 1h30m, got {quoted(text)}")
    return total


def format_timespan(seconds: float) -> str:
    """Seconds as systemd shows a span to the millisecond: ``2.012s``, ``1min 30.5s``,
    ``2h 5min``, ``0``; a hostile ``1e308`` or ``nan`` as ``1e+308s``, ``nans``."""
    if not abs(seconds) < _HUGE:  # NaN too: neither fits a count of milliseconds
        return f"{seconds:.3g}s"
    millis = round(seconds * 1000)
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if millis >= size:
            parts.append(f"{millis // size}{unit}")
            millis %= size
    if millis:
        whole, fraction = divmod(millis, 1000)
        parts.append(f"{whole}.{fraction:03d}".rstrip("0").rstrip(".") + "s")
    return " ".join(parts) or "0"


# A figure in a sentence: a number with an optional size suffix ("1.2G", "3", "0.5").
_FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)([KMGT]?)(?![\w.])")


def materially_changed(before: str, after: str, *, ratio: float = 0.1) -> bool:
    """Whether sentence ``after`` says something ``before`` did not: its words differ (another
    group, another resource, another position in words), or a figure in it differs by more than
    ``ratio`` of the larger one (sizes compared in bytes: ``1.2G`` and ``1.21G`` do not differ).

    >>> materially_changed("memory: waits for 4.0G (held by chem 1.2G)", "memory: waits for 4.1G (held by chem 1.2G)")
    False
    >>> materially_changed("memory: waits for 4.0G (held by chem 1.2G)", "memory: waits for 4.0G (held by chem 1.2G, bio 1M)")
    True
    >>> materially_changed("(position 3): memory", "(position 2): memory")
    True
    """
    if _FIGURE.sub("#", before) != _FIGURE.sub("#", after):
        return True
    for old, new in zip(_FIGURE.finditer(before), _FIGURE.finditer(after)):
        a, b = (float(m[1]) * SUFFIXES[m[2].upper()] for m in (old, new))
        if abs(a - b) > ratio * max(abs(a), abs(b)):
            return True
    return False


def listen_address(text: str) -> tuple[str, int]:
    """Where to listen, ``[ADDR:]PORT``: ``"9110"`` → ``("127.0.0.1", 9110)`` (loopback unless
    an address is given), ``"0.0.0.0:9110"`` and ``"[::1]:9110"`` as given.

    Raises:
        ValueError: not ``[ADDR:]PORT`` with a port in 1-65535.
    """
    address, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected [ADDR:]PORT (e.g. \"127.0.0.1:9101\"), got {text!r}")
    return (address.strip("[]") or "127.0.0.1"), int(port)
