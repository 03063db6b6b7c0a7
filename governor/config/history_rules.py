"""``[history]``: the journal of launches, starts, ends, refusals and sessions the daemon keeps
(issue 47; docs/admin.md, "History and replay"). Pure: the writer is
:mod:`governor.host.history_store`.

Where: ``directory``, by default :data:`DEFAULT_DIRECTORY` on disk (systemd's
``StateDirectory=governor``), so that it outlives a reboot, unlike the task records in ``/run``;
a config that moves ``[daemon] state_dir`` keeps the journal there (``<state_dir>/history``), as
governor did before, unless it names a ``directory``.

The defaults hold a month of a busy login node: an entry is about 400 bytes, so 200M is some
500,000 launches, starts and ends, some 5,000 tasks a day for 30 days.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from governor.config.resource_values import bytes_setting
from governor.config.tomlcheck import no_unknown_keys, subtable, type_name
from governor.config.units import parse_duration
from governor.errors import ConfigError

__all__ = ["DEFAULT_DIRECTORY", "DEFAULT_STATE_DIR", "HistoryRules", "following", "history_rules"]

DEFAULT_DIRECTORY = "/var/lib/governor/history"
# ``[daemon] state_dir``'s default (the task records): in /run, which a reboot empties.
DEFAULT_STATE_DIR = "/run/governor/state"
_KEYS = ("enabled", "keep", "max_size", "directory")
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
        directory: the journal's directory, an absolute path (read when the daemon starts: a
            reload that changes it takes effect at the next start).
        named: whether the config names ``directory``; where it does not, the journal follows
            the state directory (:func:`following`), ``governor daemon --state-dir`` too.
    """

    enabled: bool = True
    keep_s: float = 30 * _DAY_S
    max_size_bytes: int = 200 * 1024**2
    directory: str = DEFAULT_DIRECTORY
    named: bool = False


def following(state_dir: str | None) -> str:
    """The journal's directory where the config names none: ``<state_dir>/history`` for a
    state directory moved from the default (``[daemon] state_dir``, ``governor daemon
    --state-dir``, an absolute path), so that two daemons with state of their own keep journals
    of their own; :data:`DEFAULT_DIRECTORY` for the default one (None, or
    :data:`DEFAULT_STATE_DIR` however spelt: ``/run/governor/state/`` or through the
    ``/var/run`` link would put the journal in ``/run``, which a reboot empties)."""
    spelt = None if state_dir is None else "/" + posixpath.normpath(state_dir).lstrip("/")  # (normpath keeps "//")
    if spelt is not None and spelt.startswith("/var/run/"):
        spelt = spelt.removeprefix("/var")  # /var/run links to /run (FHS 3.0)
    if spelt is None or spelt == DEFAULT_STATE_DIR:
        return DEFAULT_DIRECTORY
    return f"{state_dir.rstrip('/')}/history"


def history_rules(data: Mapping[str, object], file: str, state_dir: object = None) -> HistoryRules:
    """The ``[history]`` table of a parsed config file (the defaults when it is left out);
    ``state_dir``: ``[daemon] state_dir`` as the file sets it (already checked), None when it
    is left out.

    Raises:
        ConfigError: an unknown key; ``enabled`` not a boolean; ``keep`` not a time span
            (``"30d"``, ``"12h"``) or above ten years; ``max_size`` not a size or below 64K;
            ``directory`` not an absolute path.
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
    directory = following(state_dir if isinstance(state_dir, str) else None)
    if "directory" in table:
        directory = table["directory"]
        if not isinstance(directory, str) or not directory.startswith("/"):
            raise ConfigError(file, "history.directory", f"must be an absolute path, got {directory!r}")
    return HistoryRules(enabled, keep_s, size, directory, "directory" in table)
