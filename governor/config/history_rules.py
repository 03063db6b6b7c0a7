"""``[history]``: the journal of launches, starts, ends, refusals and sessions the daemon keeps
in its state directory (issue 47; docs/admin.md, "History and replay"). Pure: the writer is
:mod:`governor.host.history_store`.

The defaults hold a month of a busy login node: an entry is about 400 bytes, so 200M is some
500,000 launches, starts and ends, some 5,000 tasks a day for 30 days.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from governor.config.resource_values import bytes_setting
from governor.config.tomlcheck import no_unknown_keys, subtable, type_name
from governor.config.units import parse_duration
from governor.errors import ConfigError

__all__ = ["HistoryRules", "history_rules"]

_KEYS = ("enabled", "keep", "max_size")
_DAY_S = 86_400
# A journal smaller than a few entries could never hold one rotation's worth; ten years is
# past any host's life and keeps the figure a span check-config can print.
_MIN_SIZE_BYTES = 64 * 1024
_MAX_KEEP_S = 3650 * _DAY_S


@dataclass(frozen=True)
class HistoryRules:
    """``[history]``.

    Attributes:
        enabled: whether the journal is written (default true).
        keep_s: seconds an entry is kept (files whose newest entry is older are removed), > 0,
            at most ten years; default 30 days.
        max_size_bytes: the journal's files together never hold more (the oldest file goes
            first), at least 64K; default 200M. A file is closed and a new one begun at a
            tenth of it.
    """

    enabled: bool = True
    keep_s: float = 30 * _DAY_S
    max_size_bytes: int = 200 * 1024**2


def history_rules(data: Mapping[str, object], file: str) -> HistoryRules:
    """The ``[history]`` table of a parsed config file (the defaults when it is left out).

    Raises:
        ConfigError: an unknown key; ``enabled`` not a boolean; ``keep`` not a time span
            (``"30d"``, ``"12h"``) or above ten years; ``max_size`` not a size or below 64K.
    """
    table = subtable(data, "history", None, file)
    no_unknown_keys(table, _KEYS, "history", file)
    rules = HistoryRules()
    enabled = table.get("enabled", rules.enabled)
    if not isinstance(enabled, bool):
        raise ConfigError(file, "history.enabled", f"must be true or false, got {enabled!r}")
    keep_s = rules.keep_s
    if "keep" in table:
        value = table["keep"]
        if not isinstance(value, str):
            raise ConfigError(file, "history.keep", f'must be a time span like "30d" or "12h", got {type_name(value)}')
        try:
            keep_s = parse_duration(value)
        except ValueError as error:
            raise ConfigError(file, "history.keep", str(error)) from None
        if keep_s > _MAX_KEEP_S:
            raise ConfigError(file, "history.keep", f"must be at most ten years, got {value!r}")
    size = rules.max_size_bytes
    if "max_size" in table:
        size = bytes_setting(table["max_size"], "history.max_size", file)
        if size < _MIN_SIZE_BYTES:
            raise ConfigError(file, "history.max_size", f'must be at least "64K", got {table["max_size"]!r}')
    return HistoryRules(enabled, keep_s, size)
