"""The daemon's config file (``/etc/governor/governor.toml``), checked into a frozen :class:`Config`.

Pure: the caller reads the file, and passes host facts (CPUs, memory) to :meth:`Config.capacity`.
``configs/governor.toml`` documents every key; in short::

    [capacity]                  # optional cpu / memory: divide exactly these instead of the host's
    reserve = { cpu = 0.5, memory = "1G" }   # subtracted from the host's values only
    gpus = "auto"               # or device nodes: ["/dev/nvidia0", "/dev/nvidia1"]; off when left out
    [[capacity.io]]             # one per governed block device; read and write bytes/s required
    device = "/dev/nvme0n1"
    read = "2G"
    write = "1G"
    [defaults.task]             # demand of a task launched without flags
    cpu = 1
    memory = "1G"
    [enforcement]
    cpu = "quota"               # or "cores"
    memory = "hard"             # or "soft" (v2: throttled, never killed)
    memory_protection = true    # v2 memory.min/low follow guarantees and reservations
    [groups.physics]            # explicit groups, by users and Unix groups
    weight = 2
    unix_groups = ["physics"]
    [groups."*"]                # everyone in no explicit group: one group per user
    [sessions]                  # processes started outside governor run: one task per user
    cpu = 1
    memory = "2G"
    exempt = ["backup"]
    [daemon]
    admin_group = "wheel"

Every key but ``[groups]`` is optional; a left-out key takes the value :data:`DEFAULT_CONFIG`
spells out. Every problem is a :class:`~governor.errors.ConfigError` naming the file, the dotted
key and the reason.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from functools import partial
from typing import TypeVar

from governor.config import resources
from governor.config.groups import EVERYONE, names, parse_groups
from governor.config.foreign_rules import parse_foreign
from governor.config.gpu_rules import gpu_control_nodes, gpu_guard, gpu_nodes
from governor.config.notify_rules import notify_rules
from governor.config.history_rules import DEFAULT_STATE_DIR, history_rules
from governor.config.settings import Config, GroupRule, IoDevice, SessionRules, group_name_problem
from governor.errors import ConfigError
from governor.config.resource_values import bytes_setting, cores_setting, memory_setting, pids_setting
from governor.config.tomlcheck import in_range, login_name, no_unknown_keys, parse_toml, subtable, type_name
from governor.config.units import MAX_TIME_LIMIT_S, listen_address, parse_duration, quoted

__all__ = ["CONFIG_PATH", "DEFAULT_CONFIG", "DEFAULT_STATE_DIR", "EVERYONE", "Config", "GroupRule", "IoDevice",
           "default_config", "group_name_problem", "load_config", "parse_config", "parse_half_life"]

CONFIG_PATH = "/etc/governor/governor.toml"
DEFAULT_FILE = "<embedded default>"

DEFAULT_CONFIG = """\
# governor's embedded default config (`governor check-config --default` prints it).
# Every user is a group of their own with weight 1; governor divides the host's CPUs and
# memory, minus a small reserve for the system, and governs no block device.

[capacity]
reserve = { cpu = 0.25, memory = "256M" }
# reserve.pids: left out, a tenth of the kernel's limit on processes stays the system's

[defaults.task]
cpu = 1
memory = "512M"
pids = 4096

[enforcement]
cpu = "quota"
# memory: "hard" (memory.max: a task never holds more than it declared); "soft" (memory.high,
# cgroup v2) only throttles a task past its declaration

[groups."*"]
weight = 1

[sessions]
enabled = true
cpu = 1
memory = "2G"
pids = 4096
exempt = []

[daemon]
sample_interval = 1.0
reconcile_interval = 5.0
state_dir = "/run/governor/state"
max_tasks_per_user = 256
max_connections_per_user = 32
"""

# Values of left-out keys; DEFAULT_CONFIG spells the same ones out (a test keeps them equal).
_RESERVE_CPU_CORES = 0.25
_RESERVE_MEMORY_BYTES = 256 * 1024**2
# [defaults.task] and [sessions] by config key (governor.config.resources); a key not here: 0.
# pids: 4,096 processes and threads, RHEL's default `ulimit -u` for a user: above a `make -j`
# of a large tree or a JVM's few thousand threads, far below the tens of thousands a fork bomb
# takes (docs/admin.md, "Processes").
_TASK_DEFAULTS = {"cpu": 1.0, "memory": 512 * 1024**2, "pids": 4096}
_SESSION_DEFAULTS = {"cpu": 1.0, "memory": 2 * 1024**3, "pids": 4096}
_SAMPLE_INTERVAL_S = 1.0
_RECONCILE_INTERVAL_S = 5.0
_MAX_TASKS_PER_USER = 256
_MAX_CONNECTIONS_PER_USER = 32
_MAX_COUNT = 1_000_000

_SECTIONS = ("capacity", "defaults", "enforcement", "groups", "fairshare", "sessions", "foreign", "daemon", "notify",
             "metrics", "history")
_FAIRSHARE_KEYS = ("half_life",)
_CAPACITY_KEYS = ("cpu", "memory", "reserve", "io", "gpus", "gpu_control", "gpu_guard", "gpu_guard_parents")
_RESERVE_KEYS = ("cpu", "memory", "pids")
_IO_KEYS = ("device", "read", "write")
# The first choice is the default (None: left out, Config.memory_mode gives "hard").
_ENFORCEMENT = {"cpu": ("quota", "cores"), "memory": (None, "soft", "hard")}
_DAEMON_KEYS = ("admin_group", "sample_interval", "reconcile_interval", "state_dir", "max_tasks_per_user",
                "max_connections_per_user")

_T = TypeVar("_T")


def parse_config(text: str | bytes, file: str) -> Config:
    """Parse and check config text (bytes must be UTF-8).

    Raises:
        ConfigError: naming ``file`` alone for text that is not UTF-8 or not TOML (the reason
            carries tomllib's line and column), else naming the key at fault (see :func:`load_config`).
    """
    return load_config(parse_toml(text, file), file)


def default_config() -> Config:
    """The embedded default, :data:`DEFAULT_CONFIG`, checked (file name ``"<embedded default>"``)."""
    return parse_config(DEFAULT_CONFIG, DEFAULT_FILE)


def load_config(data: Mapping[str, object], file: str) -> Config:
    """Check a parsed config file and convert it to a :class:`Config`.

    Args:
        data: the dict ``tomllib`` returned for the file.
        file: the file name to put in error messages (kept in :attr:`Config.file`).

    Raises:
        ConfigError: for an unknown key; a value of the wrong type; a negative, non-finite or
            malformed amount; a capacity, bandwidth, weight or interval ≤ 0; a reserve given
            beside an explicit capacity it could not apply to; an I/O entry missing a key, with
            a device path not under ``/dev/`` or repeating another's path or name; a default task
            demanding nothing, or I/O with no device governed; an enforcement mode not allowed; no
            group; an unusable group name or a group nobody could join; a non-absolute state_dir.
    """
    no_unknown_keys(data, _SECTIONS, None, file)
    capacity = subtable(data, "capacity", None, file)
    no_unknown_keys(capacity, _CAPACITY_KEYS, "capacity", file)
    cpu_cores = _value(capacity, "cpu", "capacity", file, cores_setting, None)
    memory_bytes = _value(capacity, "memory", "capacity", file, _capacity_memory, None)
    reserve = subtable(capacity, "reserve", "capacity", file)
    no_unknown_keys(reserve, _RESERVE_KEYS, "capacity.reserve", file)
    # The reserve comes off the host's values only; beside an explicit value it would be ignored.
    for name, explicit in (("cpu", cpu_cores), ("memory", memory_bytes)):
        if name in reserve and explicit is not None:
            raise ConfigError(file, f"capacity.reserve.{name}",
                              f"has no effect: capacity.{name} is given and is divided as it is")
    io_devices = _io_devices(capacity, file)
    task = _task(data, file)

    enforcement = subtable(data, "enforcement", None, file)
    no_unknown_keys(enforcement, (*_ENFORCEMENT, "memory_protection"), "enforcement", file)
    modes = {name: _choice(enforcement, name, file) for name in _ENFORCEMENT}

    groups, everyone_weight, everyone_user_limit = parse_groups(data, file)
    if modes["cpu"] == "cores" and any(rule.parent for rule in groups):
        raise ConfigError(file, "enforcement.cpu", '"cores" hands whole cores to top-level groups only; nested groups '
                                                   '(a parent key) need "quota"')

    daemon = subtable(data, "daemon", None, file)
    no_unknown_keys(daemon, _DAEMON_KEYS, "daemon", file)
    metrics = subtable(data, "metrics", None, file)
    no_unknown_keys(metrics, ("listen",), "metrics", file)
    config = Config(
        cpu_cores=cpu_cores,
        memory_bytes=memory_bytes,
        reserve_cpu_cores=_value(reserve, "cpu", "capacity.reserve", file, partial(cores_setting, zero=True),
                                 _RESERVE_CPU_CORES),  # a host may keep no core back
        reserve_memory_bytes=_value(reserve, "memory", "capacity.reserve", file, bytes_setting,
                                    _RESERVE_MEMORY_BYTES),
        reserve_pids=_value(reserve, "pids", "capacity.reserve", file, pids_setting, None),
        io_devices=io_devices,
        task_defaults=task,
        cpu_enforcement=modes["cpu"],
        memory_enforcement=modes["memory"],
        groups=groups,
        everyone_weight=everyone_weight,
        everyone_user_limit=everyone_user_limit,
        admin_group=_value(daemon, "admin_group", "daemon", file, login_name, None),
        sample_interval_s=_value(daemon, "sample_interval", "daemon", file, _interval, _SAMPLE_INTERVAL_S),
        reconcile_interval_s=_value(daemon, "reconcile_interval", "daemon", file, _interval, _RECONCILE_INTERVAL_S),
        state_dir=_value(daemon, "state_dir", "daemon", file, _absolute_path, DEFAULT_STATE_DIR),
        max_tasks_per_user=_value(daemon, "max_tasks_per_user", "daemon", file, _count, _MAX_TASKS_PER_USER),
        max_connections_per_user=_value(daemon, "max_connections_per_user", "daemon", file, _count,
                                        _MAX_CONNECTIONS_PER_USER),
        sessions=_sessions(data, file),
        foreign=parse_foreign(data, file),
        fairshare_half_life_s=_fairshare(data, file),
        gpus=gpu_nodes(capacity, file),
        gpu_control=gpu_control_nodes(capacity, file),
        gpu_guard=gpu_guard(capacity, file),
        notify=notify_rules(data, file),
        history=history_rules(data, file, daemon.get("state_dir")),  # the journal follows a moved one
        memory_protection=_value(enforcement, "memory_protection", "enforcement", file, _boolean, True),
        metrics_listen=_value(metrics, "listen", "metrics", file, _listen, None),
        file=file,
    )
    _governed(config)
    return config


def _io_devices(capacity: Mapping[str, object], file: str) -> tuple[IoDevice, ...]:
    entries = capacity.get("io", [])
    if not isinstance(entries, list) or not all(isinstance(entry, Mapping) for entry in entries):
        raise ConfigError(file, "capacity.io",
                          f"must be an array of tables, one [[capacity.io]] per device, got {type_name(entries)}")
    devices: list[IoDevice] = []
    for index, entry in enumerate(entries):
        where = f"capacity.io[{index}]"
        no_unknown_keys(entry, _IO_KEYS, where, file)
        for name in _IO_KEYS:
            if name not in entry:
                raise ConfigError(file, f"{where}.{name}",
                                  "missing; each [[capacity.io]] gives device, read and write (bytes/s)")
        path = _device_path(entry["device"], f"{where}.device", file)
        name = posixpath.basename(path)
        for other_index, other in enumerate(devices):
            if other.device == path:
                raise ConfigError(file, f"{where}.device", f"{path} is listed twice (also capacity.io[{other_index}])")
            if other.name == name:
                raise ConfigError(file, f"{where}.device",
                                  f"has the name {name!r} of capacity.io[{other_index}] ({other.device}); "
                                  f"resources are named io.<name>.read/write, so names must differ")
        devices.append(IoDevice(device=path, name=name,
                                read_bps=_positive_bytes(entry["read"], f"{where}.read", file),
                                write_bps=_positive_bytes(entry["write"], f"{where}.write", file)))
    return tuple(devices)


def _demand_keys() -> tuple[str, ...]:
    """The config keys of :data:`governor.config.resources.RESOURCES`, in registry order."""
    return tuple(entry.config for entry in resources.RESOURCES if entry.config)


def _session_keys() -> tuple[str, ...]:
    return ("enabled", *_demand_keys(), "exempt")


def _demand(table: Mapping[str, object], where: str, defaults: Mapping[str, float], file: str) -> dict[str, float]:
    """Each resource's config key in ``table`` (key ``where.<config key>``) checked by its
    entry's ``setting``: config key → amount, ``defaults`` (else 0) for one left out."""
    return {entry.config: _value(table, entry.config, where, file, entry.setting, defaults.get(entry.config, 0))
            for entry in resources.RESOURCES if entry.config}


def _task(data: Mapping[str, object], file: str) -> dict[str, float]:
    defaults = subtable(data, "defaults", None, file)
    no_unknown_keys(defaults, ("task",), "defaults", file)
    table = subtable(defaults, "task", "defaults", file)
    no_unknown_keys(table, _demand_keys(), "defaults.task", file)
    return _demand(table, "defaults.task", _TASK_DEFAULTS, file)


def _sessions(data: Mapping[str, object], file: str) -> SessionRules:
    table = subtable(data, "sessions", None, file)
    no_unknown_keys(table, _session_keys(), "sessions", file)
    return SessionRules(
        enabled=_value(table, "enabled", "sessions", file, _boolean, True),
        demand=_demand(table, "sessions", _SESSION_DEFAULTS, file),
        exempt=_value(table, "exempt", "sessions", file, names, ()),
    )


def _governed(config: Config) -> None:
    """Refuse a default demand of a resource ``config`` governs none of (I/O with no
    ``[[capacity.io]]``): ConfigError at its ``defaults.task`` or ``sessions`` key."""
    for where, demand in (("defaults.task", config.task_defaults), ("sessions", config.sessions.demand)):
        for entry in resources.RESOURCES:
            if entry.config and demand[entry.config] and not entry.names(config):
                raise ConfigError(config.file, f"{where}.{entry.config}", f"{entry.absent}, or leave this out")


def parse_half_life(value: object) -> float:
    """The ``half_life`` setting in seconds: a time span as systemd writes one (``"1d"``,
    ``"12h"``, ``"1h30m"``; :func:`governor.config.units.parse_duration`).

    Raises:
        ValueError: not a string, not a span, not above zero, or over ten years (as a time
            limit: "99999999999999999999d" was taken as 8.64e+24 s).
    """
    if not isinstance(value, str):
        raise ValueError(f'expected a time span string like "1d" or "12h", got {type(value).__name__}')
    seconds = parse_duration(value)
    if seconds > MAX_TIME_LIMIT_S:
        raise ValueError(f"must be at most {MAX_TIME_LIMIT_S // 86_400} days, got {quoted(value)}")
    return seconds


def _fairshare(data: Mapping[str, object], file: str) -> float | None:
    table = subtable(data, "fairshare", None, file)
    no_unknown_keys(table, _FAIRSHARE_KEYS, "fairshare", file)
    if "fairshare" not in data:
        return None
    if "half_life" not in table:
        raise ConfigError(file, "fairshare.half_life", 'missing: give the half-life of past use, e.g. "1d"')
    try:
        return parse_half_life(table["half_life"])
    except ValueError as error:
        raise ConfigError(file, "fairshare.half_life", str(error)) from None


def _value(table: Mapping[str, object], name: str, where: str, file: str,
           convert: Callable[[object, str, str], _T], default: _T) -> _T:
    """``convert`` the value of ``name`` (key ``where.name``), or ``default`` when it is left out."""
    return convert(table[name], f"{where}.{name}", file) if name in table else default


# Seconds between two of the daemon's periodic passes: a millionth of a second was accepted, and
# the daemon would have spun on it; past a day a pass is not periodic.
_INTERVAL_S = (0.1, 86_400.0)


def _interval(value: object, key: str, file: str) -> float:
    return float(in_range(value, key, file, *_INTERVAL_S))


def _positive_bytes(value: object, key: str, file: str) -> int:
    result = bytes_setting(value, key, file)
    if result == 0:
        raise ConfigError(file, key, "must be > 0")
    return result


def _capacity_memory(value: object, key: str, file: str) -> int:
    # Less than the smallest task could never run one (`memory = 1`, one byte, passed).
    return memory_setting(_positive_bytes(value, key, file), key, file)


def _choice(table: Mapping[str, object], name: str, file: str) -> str | None:
    choices = _ENFORCEMENT[name]
    value = table.get(name, choices[0])
    if value is None and name in table or value not in choices:
        allowed = [c for c in choices if c is not None]
        raise ConfigError(file, f"enforcement.{name}",
                          f"must be {' or '.join(f'{c!r}' for c in allowed)}, got {value!r}")
    return value


def _count(value: object, key: str, file: str) -> int:
    if type(value) is not int or not 1 <= value <= _MAX_COUNT:
        raise ConfigError(file, key, f"must be a whole number from 1 to {_MAX_COUNT:,}, got {value!r}")
    return value


def _boolean(value: object, key: str, file: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(file, key, f"must be true or false, got {value!r}")
    return value


def _string(value: object, key: str, file: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(file, key, f"must be a non-empty string, got {value!r}")
    return value


def _device_path(value: object, key: str, file: str) -> str:
    path = _string(value, key, file)
    # normpath catches "..", "//" and a trailing "/", which would escape /dev/ or leave no name.
    if not path.startswith("/dev/") or posixpath.normpath(path) != path:
        raise ConfigError(file, key, f"must be a normalised path under /dev/ like /dev/nvme0n1, got {path!r}")
    return path


def _listen(value: object, key: str, file: str) -> tuple[str, int]:
    try:
        return listen_address(_string(value, key, file))
    except ValueError as error:
        raise ConfigError(file, key, str(error)) from None


def _absolute_path(value: object, key: str, file: str) -> str:
    path = _string(value, key, file)
    if not posixpath.isabs(path):
        raise ConfigError(file, key, f"must be an absolute path, got {path!r}")
    return path
