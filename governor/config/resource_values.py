"""How each resource's amounts are read and written: ``governor run``'s values (CLI text), a
config key's value, and an amount for people. The registry (:mod:`governor.config.resources`) names
these per entry. Pure.
"""

from __future__ import annotations

from governor.errors import ConfigError
from governor.config.units import format_number, format_size, parse_size, quoted

__all__ = ["bytes_setting", "cores", "cores_setting", "devices", "format_bytes", "format_cores", "format_count",
           "format_processes", "format_rate", "memory", "memory_setting", "pids_setting", "plain_number", "processes",
           "size"]


# Parsing ``governor run``'s values: each raises ValueError saying what is wrong.

def plain_number(text: str | float, kind: str) -> str | float:
    """``text`` as float() and int() may read it: written in ASCII, with no ``_`` (they also
    take other scripts' digits and Python's digit groups: ``--cpus ١`` was 1 core, ``--cpus 1_0``
    10, where ``--memory 1_0G`` was refused). Raises ValueError in click's words."""
    if isinstance(text, str) and (not text.isascii() or "_" in text):
        raise ValueError(f"{text!r} is not a valid {kind}.")
    return text


def cores(text: str | float) -> float:
    """A CPU demand in cores: a finite number from ``MIN_CORES`` to ``MAX_CORES``."""
    try:
        value = float(plain_number(text, "float"))
    except ValueError:
        raise ValueError(f"{text!r} is not a valid float.") from None  # click's words, as before
    if not MIN_CORES <= value <= MAX_CORES:  # nan too
        raise ValueError(f"must be a number of cores from {MIN_CORES:g} (the kernel's smallest CPU quota) to "
                         f"{MAX_CORES:,}, got {value:.6g}")
    return value


def devices(text: str | int) -> int:
    """A count of whole devices, ≥ 0."""
    try:
        value = int(plain_number(text, "integer"))
    except ValueError:
        raise ValueError(f"{text!r} is not a valid integer.") from None  # click's words, as before
    if value < 0:
        raise ValueError(f"must be a whole number of GPUs ≥ 0, got {value}")
    return value


def processes(text: str | int) -> int:
    """A cap on processes and threads (``pids.max``): a whole number from 1 to ``MAX_PIDS``."""
    try:
        value = int(plain_number(text, "integer"))
    except ValueError:
        raise ValueError(f"{text!r} is not a valid integer.") from None  # click's words, as before
    if not 1 <= value <= MAX_PIDS:
        raise ValueError(f"must be a whole number of processes from 1 to {MAX_PIDS:,}, got {value}")
    return value


def memory(text: str) -> int:
    """A task's memory cap, as :func:`size` reads it, at least ``MIN_TASK_MEMORY`` (0.5 said
    "> 0" and 16 "at least 1.0M": one bound, one message)."""
    value = size(text)
    if value < MIN_TASK_MEMORY:
        raise ValueError(f"must be at least {format_size(MIN_TASK_MEMORY)}: no process starts in less, "
                         f"got {quoted(text)}")
    return value


def size(text: str) -> int:
    """A size like ``4G`` (K/M/G/T are powers of 1024) as whole bytes, rounded to the nearest,
    at most ``MAX_BYTES``."""
    value = parse_size(text)
    if value > MAX_BYTES:
        raise ValueError(f"must be at most {format_size(MAX_BYTES)}, got {quoted(text)}")
    return value


# Bounds on what a config or a request may say: beyond them no host has the amount, and the
# kernel's files (microseconds, bytes in 63 bits) could not hold it.
MAX_CORES = 65_536
# The kernel's smallest CPU quota: 1 ms per 100 ms period (cpu.max, cpu.cfs_quota_us). A cap or
# a capacity below it cannot be enforced, and a capacity of 1e-310 cores overflowed the filling.
MIN_CORES = 0.01
MAX_BYTES = 1 << 62
# A task's declared memory is its cap: below this no process starts (a documented minimum, so
# that no declaration is so small it reads as "no limit" anywhere).
MIN_TASK_MEMORY = 1 << 20
# The kernel's PID_MAX_LIMIT on a 64-bit host: no cgroup ever holds more processes and threads.
MAX_PIDS = 4 * 1024 * 1024


# Checking a config key's value: (value, dotted key, file) → amount.

def cores_setting(value: object, key: str, file: str, *, zero: bool = False) -> float:
    """Cores: a number (not a string) from ``MIN_CORES`` to ``MAX_CORES``, or 0 where ``zero``
    (a reserve of none). No task, session or quota runs on less than the kernel's smallest CPU
    quota: a ``[defaults.task]`` of 0 cores passed, and every launch asking for no CPU was refused.

    Raises:
        ConfigError: at ``key`` in ``file``, saying what is wrong.
    """
    from governor.config.tomlcheck import number  # tomllib: a config's, not `governor run`'s

    result = float(_at_most(number(value, key, file, positive=not zero), MAX_CORES, "cores", key, file))
    if 0 < result < MIN_CORES:
        raise ConfigError(file, key, f"must be {'0 or ' if zero else ''}at least {MIN_CORES:g} cores (the kernel's "
                                     f"smallest CPU quota), got {result:.6g}")
    return result


def bytes_setting(value: object, key: str, file: str) -> int:
    """Bytes (or bytes/s): a number or a size like ``"1.5G"``, ≥ 0, rounded down to whole
    bytes (no kernel limit takes a fraction of one), at most ``MAX_BYTES``.

    Raises:
        ConfigError: at ``key`` in ``file``, saying what is wrong.
    """
    from governor.config.tomlcheck import amount

    return int(_at_most(amount(value, key, file), MAX_BYTES, "bytes", key, file))


def memory_setting(value: object, key: str, file: str) -> int:
    """A task's memory: as :func:`bytes_setting`, and at least ``MIN_TASK_MEMORY``.

    Raises:
        ConfigError: at ``key`` in ``file``, saying what is wrong.
    """
    result = bytes_setting(value, key, file)
    if result < MIN_TASK_MEMORY:
        raise ConfigError(file, key, f"must be at least {format_size(MIN_TASK_MEMORY)}: no process starts in less")
    return result


def pids_setting(value: object, key: str, file: str) -> int:
    """A cap on processes and threads: a whole number (not a string, a float or a boolean)
    from 1 to ``MAX_PIDS``.

    Raises:
        ConfigError: at ``key`` in ``file``, saying what is wrong.
    """
    if type(value) is not int or not 1 <= value <= MAX_PIDS:
        raise ConfigError(file, key, f"must be a whole number of processes from 1 to {MAX_PIDS:,}, got {value!r}")
    return value


def _at_most(value, bound: int, unit: str, key: str, file: str):
    if value > bound:
        raise ConfigError(file, key, f"must be at most {bound:,} {unit}, got {float(value):g}")
    return value


# Formatting amounts: (amount, with its unit?) → text.

def format_cores(value: float, unit: bool) -> str:
    """Cores: ``1.5`` (with ``unit``: ``1.5 cores``, ``1 core``)."""
    text = format_number(value, precision=2)
    return f"{text} core" + ("" if text == "1" else "s") if unit else text


def format_bytes(value: float, unit: bool) -> str:
    """Bytes: ``4.0G`` (K/M/G/T are powers of 1024)."""
    return format_size(value)


def format_rate(value: float, unit: bool) -> str:
    """Bytes/s: ``200.0M/s``."""
    return f"{format_size(value)}/s"


def format_processes(value: float, unit: bool) -> str:
    """Processes and threads: ``512`` (with ``unit``: ``512 processes``, ``1 process``)."""
    text = format_number(value, precision=2)
    return f"{text} process" + ("" if text == "1" else "es") if unit else text


def format_count(value: float, unit: bool) -> str:
    """Whole devices: ``2``."""
    return format_number(value, precision=2)
