"""The resources governor divides, each declared once here (DESIGN.md §1, "resource"). Pure.

======================  =========  ============  ==============  ==========  ==========  =========
resource                unit       kind          ``run`` flag    wire key    config key  quota key
======================  =========  ============  ==============  ==========  ==========  =========
``cpu``                 cores      compressible  ``--cpus``      cpu         cpu         cpu
``memory``              bytes      admitted      ``--memory``    memory      memory      memory
``gpu``                 devices    device        ``--gpus``      gpu         —           gpus
``io.<dev>.read``       bytes/s    compressible  ``--io-read``   io_read     io_read     —
``io.<dev>.write``      bytes/s    compressible  ``--io-write``  io_write    io_write    —
``pids``                processes  count         ``--pids``      pids        pids        pids
======================  =========  ============  ==============  ==========  ==========  =========

Capacity: ``capacity.cpu`` and ``capacity.memory`` (else the host's minus ``capacity.reserve``),
the GPUs found for ``capacity.gpus``, each ``[[capacity.io]]`` device's ``read`` and ``write``.

A **count** (``pids``: processes and threads, DESIGN.md §3 "Counts are caps") is a cap and never
a DRF resource: a task declares it like the rest and its cgroup is held to it (``pids.max``),
but nothing divides it: :func:`capacity` (what DRF divides) leaves it out, and :func:`caps` gives
the root's instead, the kernel's limit less ``capacity.reserve.pids``.

The wire key names the resource in a launch request's ``demand``; the config key in
``[defaults.task]`` and ``[sessions]``, its value checked by the entry's ``setting`` (— : none,
a task asks for 0 unless it says); the quota key in a group's ``guarantee``, ``limit`` and
``user_limit`` (— : none). The I/O
entries are *families*: one resource per governed block device, the same flag and default for
each. The CLI, the protocol, the config, admission, the queue, the views and the metrics iterate
:data:`RESOURCES`: a new resource is an entry here (and, to be enforced, its mapping in
``cgroups/``). Tests put a stand-in in :data:`RESOURCES` (``monkeypatch.setattr``): every
function here reads it when called, never at import (``governor run``'s options are made when
:func:`governor.cli.run.command` is called: ``governor.cli.main`` calls it once, at import).
"""

from __future__ import annotations

import enum
import math
from collections import namedtuple
from collections.abc import Callable, Mapping
from itertools import zip_longest

from governor.errors import ConfigError
from governor.config.resource_values import (MAX_PIDS, bytes_setting, cores, cores_setting, devices, format_bytes,
                                             format_cores, format_count, format_processes, format_rate, memory,
                                             memory_setting, pids_setting, processes, size)
from governor.config.units import format_number, format_size

# typing.TYPE_CHECKING without importing typing: `governor run` parses its options with this
# registry, and loads neither typing, dataclasses nor fractions (governor.cli.launch, issue 46).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from fractions import Fraction
    from typing import Protocol

    class Settings(Protocol):
        """What the registry reads of a config (:class:`governor.config.settings.Config` has it
        all; the config model builds on this module, so it is named by its shape here, not
        imported)."""

        file: str
        cpu_cores: float | None  # capacity.cpu, cores, or None: the host's less the reserve
        reserve_cpu_cores: float
        memory_bytes: int | None  # capacity.memory, bytes, or None: the host's less the reserve
        reserve_memory_bytes: int
        gpus: object  # capacity.gpus: None when no GPU is governed
        io_devices: tuple  # [[capacity.io]] entries: .name, .read_bps, .write_bps (bytes/s)
        reserve_pids: int | None  # capacity.reserve.pids, or None: a tenth of the kernel's limit


class ResourceKind(enum.Enum):
    """How a resource is shared (DESIGN.md §3)."""

    COMPRESSIBLE = "compressible"  # a task given less runs slower: shared by weights
    ADMITTED = "admitted"  # counted at the door and never taken back (memory)
    DEVICE = "device"  # admitted whole, and the kernel's device rules keep others out (GPUs)
    COUNT = "count"  # a cap on every cgroup, never divided nor admitted (pids)


class Host(namedtuple("Host", "cpus memory_bytes gpus pids", defaults=(0, 0))):
    """What this host has, before the config's reserve: ``cpus`` (cores), ``memory_bytes``,
    ``gpus`` (the GPUs found for ``capacity.gpus``), ``pids`` (the kernel's limit on processes
    and threads, the lower of ``pid_max`` and ``threads-max``; 0: unknown, no root cap).

    A named tuple, as :class:`Resource` is: a dataclass costs ``governor run`` the import of
    dataclasses (and inspect, ast…) before its command starts."""

    __slots__ = ()


class Resource(namedtuple("Resource", "name unit kind flag metavar help wire config parse whole format capacity names "
                                      "noun queue absent setting quota", defaults=("", "", "", None, ""))):
    """One resource, or a family of them (one per governed block device).

    Attributes:
        name: the resource's name (``cpu``); a family's, with ``<dev>`` for the device
            (``io.<dev>.read``).
        unit: what its amounts count (``cores``, ``bytes``, ``devices``, ``bytes/s``).
        kind: how it is shared.
        flag, metavar, help: ``governor run``'s option for it.
        wire: its key in a launch request's ``demand``.
        config: its key in ``[defaults.task]`` and ``[sessions]``, or None (a task asks for 0
            unless it says).
        setting: with :attr:`config`, (value, dotted key, file) → the amount that key gives
            (:func:`cores_setting`, :func:`bytes_setting`, :func:`memory_setting`); raises
            ConfigError naming the file, the key and the reason.
        parse: ``governor run``'s text → an amount in :attr:`unit`; raises ValueError saying
            what is wrong.
        whole: amounts are integers on the wire (bytes, devices), not any number (cores).
        format: an amount for people; with ``unit`` true, its unit where a bare number is
            ambiguous (``1.5 cores``).
        capacity: (config, host) → resource name → what governor divides of it, for each one
            this config governs (none: empty).
        names: config → the resource names it governs, in order (a family: one per device).
        noun: what one of it is called where a count of it is said (``1 GPU``, ``2 GPUs``);
            empty: amounts are said as :attr:`format` writes them (``4.0G``).
        queue: of an admitted resource, what a queued task's keys for it start with
            (``gpus_`` → ``gpus_waiting_for``, ``gpus_held_by``; memory's have none).
        absent: why a launch asking for some is refused where the config governs none of it
            (its :attr:`names` are empty), naming the config key that would; cpu and memory
            are always governed.
        quota: its key in a group's ``guarantee``, ``limit`` and ``user_limit``, or empty
            (no quota names it: a family's devices have none).

    An immutable named tuple (keywords as a dataclass's), not a dataclass: ``governor run``
    reads its options from this registry and loads no dataclasses (issue 46).
    """

    __slots__ = ()

    @property
    def family(self) -> bool:
        """Whether this is a family: one resource per instance :attr:`names` lists (I/O: per
        governed block device), each named by putting the instance for ``<dev>``."""
        return _DEVICE in self.name

    def holds(self, resource: str) -> bool:
        """Whether ``resource`` is this resource, or one of this family (``io.sda.read``)."""
        if not self.family:
            return resource == self.name
        before, _, after = self.name.partition(_DEVICE)
        return resource.startswith(before) and resource.endswith(after)

    def said(self, amount: float) -> str:
        """``amount`` as a sentence says it: ``2 GPUs``, ``4.0G``."""
        text = self.format(amount, False)
        return f"{text} {self.noun}{'' if text == '1' else 's'}" if self.noun else text

    @property
    def admitted(self) -> bool:
        """Whether a task must fit in what is left of it to start, and keeps it to its end."""
        return self.kind in (ResourceKind.ADMITTED, ResourceKind.DEVICE)


_DEVICE = "<dev>"


def find(resource: str) -> Resource | None:
    """The entry of ``resource`` (``cpu``, ``io.sda.read``), or None for a name that is no
    resource (``cpu.nr_throttled``)."""
    global _found_in
    if _found_in is not RESOURCES or len(_found) > _FOUND_KEPT:  # a test put a stand-in in: look again
        _found.clear()
        _found_in = RESOURCES
    if resource not in _found:
        _found[resource] = next((entry for entry in RESOURCES if entry.holds(resource)), None)
    return _found[resource]


# Every amount shown and every usage key of every task's status asks find(): 0.7 µs each
# scanning the registry, a few ms per status of 1,000 tasks; the names asked are few.
_found: dict[str, Resource | None] = {}
_found_in: tuple[Resource, ...] = ()
_FOUND_KEPT = 1024


def admitted() -> tuple[Resource, ...]:
    """The admitted resources (and devices), in registry order: what the queue counts. None
    of them is a family: admission counts each by its one name."""
    return tuple(entry for entry in RESOURCES if entry.admitted)


def count(resource: str) -> bool:
    """Whether ``resource`` is a count (``pids``): a cap on every cgroup, never divided."""
    entry = find(resource)
    return entry is not None and entry.kind is ResourceKind.COUNT


def compressible(resource: str) -> bool:
    """Whether a task given less of ``resource`` only runs slower (cpu, I/O) rather than being
    reclaimed into a stall or killed (memory), or made to wait (GPUs); not a count (a cap only).
    A name that is no resource counts as compressible: it is never admitted."""
    entry = find(resource)
    return entry is None or entry.kind is ResourceKind.COMPRESSIBLE


def measured(resource: str) -> bool:
    """Whether cgroups measure a task's use of ``resource``: not of a device, held whole until
    the task ends (whether it computes is NVML's to say)."""
    entry = find(resource)
    return entry is None or entry.kind is not ResourceKind.DEVICE


def sized(resource: str) -> bool:
    """Whether amounts of ``resource`` are bytes or bytes/s, written with K/M/G/T (memory, I/O)."""
    entry = find(resource)
    return entry is not None and entry.unit in ("bytes", "bytes/s")


def governed(config: Settings) -> tuple[str, ...]:
    """The resource names ``config`` governs: the single resources in registry order, then
    each governed device's family members (``io.sda.read``, ``io.sda.write``, ``io.sdb.read``…);
    a family with more members than another (not the same devices) keeps them all."""
    single = [name for entry in RESOURCES if not entry.family for name in entry.names(config)]
    per_device = zip_longest(*(entry.names(config) for entry in RESOURCES if entry.family))
    return (*single, *(name for names in per_device for name in names if name is not None))


def capacity(config: Settings, host: Host) -> dict[str, float]:
    """What governor divides on ``host`` under ``config``, by resource, in :func:`governed`
    order (cores, bytes, devices, bytes/s); no count (:func:`caps` has those).

    Raises:
        ConfigError: at ``capacity.reserve.cpu`` / ``capacity.reserve.memory`` when the
            reserve leaves nothing of the host's value.
    """
    amounts: dict[str, float] = {}
    for entry in RESOURCES:
        if entry.kind is not ResourceKind.COUNT:
            amounts.update(entry.capacity(config, host))
    return {name: amounts[name] for name in governed(config) if name in amounts}


def caps(config: Settings, host: Host) -> dict[str, int]:
    """The root's cap on each count on ``host`` under ``config`` (``pids``: processes and
    threads), the kernel's limit less the reserve; none where the host's limit is unknown.

    Raises:
        ConfigError: at ``capacity.reserve.pids`` when the reserve leaves nothing.
    """
    found: dict[str, int] = {}
    for entry in RESOURCES:
        if entry.kind is ResourceKind.COUNT:
            found.update({name: int(amount) for name, amount in entry.capacity(config, host).items()})
    return found


def quota_keys() -> dict[str, Resource]:
    """What a group's ``guarantee``, ``limit`` and ``user_limit`` may name: quota key
    (``cpu``, ``memory``, ``gpus``) → its resource, in registry order."""
    return {entry.quota: entry for entry in RESOURCES if entry.quota}


def flags() -> dict[str, Resource]:
    """``governor run``'s resource options: flag (``--cpus``) → its resource."""
    return {entry.flag: entry for entry in RESOURCES}


def wire_keys() -> tuple[str, ...]:
    """The keys a launch request's ``demand`` may hold, in registry order."""
    return tuple(entry.wire for entry in RESOURCES)


def format_amount(resource: str, value: float | Fraction, *, unit: bool = False) -> str:
    """An amount of ``resource`` for people, the one rule every view and message follows: its
    registry entry's. ``memory`` is bytes (``4.0G``), ``io.…`` bytes/s (``200.0M/s``), ``cpu``,
    ``gpu`` and a name that is no resource a plain number with up to two decimals (``1.5``;
    with ``unit``, cpu reads ``1.5 cores``, ``1 core``). Sizes use K/M/G/T, powers of 1024
    (:func:`governor.config.units.format_size`).
    """
    entry = find(resource)
    return entry.format(value, unit) if entry else format_number(value, precision=2)


# Capacities: (config, host) → name → amount.

def _cpu_capacity(config: Settings, host: Host) -> dict[str, float]:
    if config.cpu_cores is not None:
        return {"cpu": config.cpu_cores}
    cpu = host.cpus - config.reserve_cpu_cores
    if cpu <= 0:
        raise ConfigError(config.file, "capacity.reserve.cpu",
                          f"reserving {config.reserve_cpu_cores:g} cores leaves nothing of the "
                          f"host's {host.cpus:g}; lower it or set capacity.cpu")
    return {"cpu": cpu}


def lent_cpu(config: Settings) -> float:
    """The cores of ``capacity.reserve.cpu`` that governed tasks may use while the system
    leaves them idle: all of them when the capacity is the host's less the reserve, none when
    ``capacity.cpu`` is given (divided as written). CPU is compressible: the system takes its
    reserve back by weight the moment it wants it (an idle reserve held back by a quota made
    every governed user worse off than no governor, issue 42). Memory's is never lent."""
    return 0.0 if config.cpu_cores is not None else config.reserve_cpu_cores


def _memory_capacity(config: Settings, host: Host) -> dict[str, float]:
    if config.memory_bytes is not None:
        return {"memory": config.memory_bytes}
    memory = host.memory_bytes - config.reserve_memory_bytes
    if memory <= 0:
        raise ConfigError(config.file, "capacity.reserve.memory",
                          f"reserving {format_size(config.reserve_memory_bytes)} leaves nothing of the "
                          f"host's {format_size(host.memory_bytes)}; lower it or set capacity.memory")
    return {"memory": memory}


# With no capacity.reserve.pids the system keeps this part of the kernel's limit (systemd's
# TasksMax= percentages are of it too): a host's own processes hold hundreds to a few thousand.
_PIDS_RESERVE_FRACTION = 0.1


def _pids_capacity(config: Settings, host: Host) -> dict[str, float]:
    if not host.pids:
        return {}
    reserve = config.reserve_pids
    if reserve is None:
        reserve = math.ceil(host.pids * _PIDS_RESERVE_FRACTION)
    if reserve >= host.pids:
        raise ConfigError(config.file, "capacity.reserve.pids",
                          f"reserving {reserve:,} processes leaves nothing of the kernel's limit of {host.pids:,} "
                          "(the lower of kernel.pid_max and kernel.threads-max); lower it")
    return {"pids": host.pids - reserve}


def _always(name: str) -> Callable[[Settings], tuple[str, ...]]:
    return lambda config: (name,)


def _gpu_names(config: Settings) -> tuple[str, ...]:
    return ("gpu",) if config.gpus is not None else ()


def _io(direction: str) -> tuple[Callable[[Settings, Host], dict[str, float]], Callable[[Settings], tuple[str, ...]]]:
    """A family's capacity and names: ``io.<dev>.<direction>`` for each ``[[capacity.io]]``."""
    def capacity_(config: Settings, host: Host) -> dict[str, float]:
        return {f"io.{d.name}.{direction}": getattr(d, f"{direction}_bps") for d in config.io_devices}

    def names(config: Settings) -> tuple[str, ...]:
        return tuple(f"io.{d.name}.{direction}" for d in config.io_devices)

    return capacity_, names


_NO_IO = "no I/O device is governed (add a [[capacity.io]] entry to the config)"
RESOURCES: tuple[Resource, ...] = (
    Resource("cpu", "cores", ResourceKind.COMPRESSIBLE, "--cpus", "FLOAT", "CPU demand in cores, e.g. 1.5.",
             "cpu", "cpu", cores, False, format_cores, _cpu_capacity, _always("cpu"), setting=cores_setting, quota="cpu"),
    Resource("memory", "bytes", ResourceKind.ADMITTED, "--memory", "SIZE", "Memory demand, e.g. 4G.",
             "memory", "memory", memory, True, format_bytes, _memory_capacity, _always("memory"), setting=memory_setting,
             quota="memory"),
    Resource("gpu", "devices", ResourceKind.DEVICE, "--gpus", "N",
             "Whole GPUs (default none): CMD starts when N are free, may open only those, and finds them in "
             "CUDA_VISIBLE_DEVICES.",
             "gpu", None, devices, True, format_count,
             lambda config, host: {"gpu": float(host.gpus)} if config.gpus is not None else {}, _gpu_names,
             noun="GPU", queue="gpus_", absent="no GPU is governed on this host (capacity.gpus in the config)",
             quota="gpus"),
    Resource("io.<dev>.read", "bytes/s", ResourceKind.COMPRESSIBLE, "--io-read", "RATE",
             "Read bandwidth demand per second, e.g. 200M.", "io_read", "io_read", size, True, format_rate, *_io("read"),
             absent=_NO_IO, setting=bytes_setting),
    Resource("io.<dev>.write", "bytes/s", ResourceKind.COMPRESSIBLE, "--io-write", "RATE",
             "Write bandwidth demand per second, e.g. 100M.", "io_write", "io_write", size, True, format_rate,
             *_io("write"), absent=_NO_IO, setting=bytes_setting),
    Resource("pids", "processes", ResourceKind.COUNT, "--pids", "N",
             "The most processes and threads CMD may hold at once (pids.max); a fork past it fails.",
             "pids", "pids", processes, True, format_processes, _pids_capacity, _always("pids"),
             setting=pids_setting, quota="pids"),
)


def demand(given: Mapping[str, float | None], defaults: Mapping[str, float], config: Settings) -> dict[str, float]:
    """One task's demand vector under ``config``.

    Args:
        given: wire key → amount asked for (None or left out: the default).
        defaults: config key → amount (``[defaults.task]`` or ``[sessions]``).
        config: which resources are governed (a family's amount goes to each device).

    Returns:
        resource → amount, in :func:`governed` order, leaving out resources at 0.

    Raises:
        ValueError: a given amount that is negative, not finite, or a boolean, or a count that is
            not a whole number from 1 to ``MAX_PIDS``, naming its wire key.
    """
    by_entry: dict[str, float] = {}
    for entry in RESOURCES:
        value = given.get(entry.wire)
        if value is not None and (isinstance(value, bool) or not math.isfinite(value) or value < 0):
            raise ValueError(f"{entry.wire} must be a finite number >= 0, got {value!r}")
        if value is not None and entry.kind is ResourceKind.COUNT and not (value == int(value) and 1 <= value <= MAX_PIDS):
            raise ValueError(f"{entry.wire} must be a whole number from 1 to {MAX_PIDS:,}, got {value!r}")
        if value is None:
            value = defaults.get(entry.config, 0) if entry.config else 0
        for name in entry.names(config):
            by_entry[name] = value
    return {name: by_entry[name] for name in governed(config) if by_entry[name]}
