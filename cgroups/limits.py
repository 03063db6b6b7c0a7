"""The data contract between governor's planner and the cgroup drivers, and its file mapping.

:class:`CgroupLimits` says what one cgroup should be limited to; :func:`v2_files` and
:func:`v1_files` say which kernel files carry it. Both are pure. A field left ``None`` (an empty
``io_max``) is not written at all: if a driver wrote it before, it writes the file's reset value
(:func:`v2_reset` / :func:`v1_reset`) instead, so "unset" always ends as "unlimited".

Write order (fixed; one controller after another as runc's ``fs2.Set`` does):

cgroup v2 (:data:`V2_ORDER`)
    ``cpu.weight``, ``cpu.max``, ``cpuset.cpus``, ``memory.min``, ``memory.low``,
    ``memory.high``, ``memory.max``, ``io.weight``, ``io.bfq.weight``, ``io.max`` (one line per device, in the
    order given), ``pids.max``. ``memory.high`` goes before ``memory.max`` so that a cgroup is first
    throttled and reclaimed gently; only then can the hard limit OOM-kill.

cgroup v1 (:data:`V1_ORDER`)
    ``cpu.cfs_period_us``, ``cpu.cfs_quota_us``, ``cpu.shares``, ``cpuset.cpus``,
    ``memory.soft_limit_in_bytes``, ``memory.limit_in_bytes``, ``blkio.bfq.weight_device``,
    ``blkio.throttle.read_bps_device``, ``blkio.throttle.write_bps_device``,
    ``devices.deny`` (one rule per denied node; a rule no longer wanted is written to
    ``devices.allow``, which removes it: the driver's), ``pids.max``. v1 has no
    ``memory.min``/``memory.low`` and no io.cost: those fields and ``io.weight`` are not written
    there (a v1 host shares I/O proportionally only under BFQ). The period goes
    before the quota because the kernel validates a quota against the period in force (v2
    writes both at once in ``cpu.max``); the soft limit goes before the hard one for the same
    reason as on v2.

Device rules (``devices_denied``): the nodes a cgroup's processes may not open. v2 has no
file for them: the v2 driver attaches a BPF device program and records it under the key
:data:`V2_DEVICE_PROGRAM` with :func:`devices_text` as its value.

Keys: every setting is identified by a key so that drivers can diff against what they last
wrote: ``(file, device)`` on v2 and ``(controller, file, device)`` on v1, where ``device`` is
the ``MAJ:MIN`` of io/blkio lines, the rule (``c 195:1``) of a ``devices.deny`` line and
``""`` otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from governor.cgroups.device_rules import Device, checked_device, v1_line
from governor.cgroups.parse import format_cpu_max, format_max

__all__ = ["CgroupLimits", "V2_DEVICE_PROGRAM", "IoMax", "IoWeight", "CGROUP_WEIGHT_RANGE", "MIN_QUOTA_USEC",
           "V1_ORDER", "V2_ORDER", "diff_writes", "v1_files",
           "v1_key", "v1_reset", "v2_files", "v2_key", "v2_reset", "weight_to_shares"]

# The kernel's facts, here alone (governor's planner imports them): the CFS period by default
# and its bounds, 1 ms .. 1 s; a quota of at least 1 ms; a cgroup v2 weight (cpu.weight,
# io.weight) 1..10000, 100 by default (CGROUP_WEIGHT_MIN/MAX/DFL); v1 cpu.shares 2..262144,
# 1024 by default; BFQ's weights 1..1000.
DEFAULT_PERIOD_USEC = 100_000
DEFAULT_CPU_WEIGHT = 100
DEFAULT_CPU_SHARES = 1024
_PERIOD_RANGE_USEC = (1_000, 1_000_000)
MIN_QUOTA_USEC = 1_000
CGROUP_WEIGHT_RANGE = (1, 10_000)
_SHARES_RANGE = (2, 262_144)
_BFQ_WEIGHT_RANGE = (1, 1_000)
_DEVICE_RE = re.compile(r"\d+:\d+")

V2_ORDER: tuple[str, ...] = ("cpu.weight", "cpu.max", "cpuset.cpus", "memory.min", "memory.low", "memory.high",
                             "memory.max", "io.weight", "io.bfq.weight", "io.max", "pids.max")
# The v2 memory files, in write order, and the fields that carry them (bytes).
_V2_MEMORY = tuple((file, f"{file.replace('.', '_')}_bytes") for file in V2_ORDER if file.startswith("memory."))
V1_ORDER: tuple[tuple[str, str], ...] = (
    ("cpu", "cpu.cfs_period_us"),
    ("cpu", "cpu.cfs_quota_us"),
    ("cpu", "cpu.shares"),
    ("cpuset", "cpuset.cpus"),
    ("memory", "memory.soft_limit_in_bytes"),
    ("memory", "memory.limit_in_bytes"),
    ("blkio", "blkio.bfq.weight_device"),
    ("blkio", "blkio.throttle.read_bps_device"),
    ("blkio", "blkio.throttle.write_bps_device"),
    ("devices", "devices.deny"),
    ("pids", "pids.max"),
)
# The v2 record's key of a cgroup's device program (no file: a BPF program, see the module).
V2_DEVICE_PROGRAM = ("device program", "")


@dataclass(frozen=True)
class IoMax:
    """A bandwidth cap on one block device.

    Attributes:
        device: ``MAJ:MIN`` of a whole disk (the kernel rejects partitions; see
            :func:`governor.cgroups.devices.whole_disk`).
        rbps: read limit in bytes/s, None = unlimited.
        wbps: write limit in bytes/s, None = unlimited.

    Raises:
        ValueError: device not ``MAJ:MIN``, or a rate that is not positive.
    """

    device: str
    rbps: int | None = None
    wbps: int | None = None

    def __post_init__(self) -> None:
        if not _DEVICE_RE.fullmatch(self.device):
            raise ValueError(f"io device must be 'MAJ:MIN', got {self.device!r}")
        for name in ("rbps", "wbps"):
            rate = getattr(self, name)
            if rate is not None and rate <= 0:
                raise ValueError(f"{name} must be > 0 bytes/s or None, got {rate}")


@dataclass(frozen=True)
class IoWeight:
    """A proportional I/O weight on one block device (a guarantee, not a cap).

    Attributes:
        device: ``MAJ:MIN`` of a whole disk.
        weight: 1..10000 with ``io.weight`` semantics (100 = default); BFQ's files take
            1..1000, so the weight is divided by 10 there.
        controller: ``"io.weight"`` (v2 io.cost) or ``"io.bfq.weight"`` (the BFQ scheduler,
            v2 ``io.bfq.weight`` / v1 ``blkio.bfq.weight_device``).

    Raises:
        ValueError: device not ``MAJ:MIN``, weight out of range, unknown controller.
    """

    device: str
    weight: int
    controller: str = "io.weight"

    def __post_init__(self) -> None:
        if not _DEVICE_RE.fullmatch(self.device):
            raise ValueError(f"io device must be 'MAJ:MIN', got {self.device!r}")
        low, high = CGROUP_WEIGHT_RANGE
        if not low <= self.weight <= high:
            raise ValueError(f"io weight must be in {low}..{high}, got {self.weight}")
        if self.controller not in ("io.weight", "io.bfq.weight"):
            raise ValueError(f"io weight controller must be io.weight or io.bfq.weight, got {self.controller!r}")

    @property
    def bfq_weight(self) -> int:
        """The weight in BFQ's 1..1000 range."""
        low, high = _BFQ_WEIGHT_RANGE
        return min(high, max(low, round(self.weight / 10)))


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    """Limits for one cgroup; every ``None`` means "not limited".

    Attributes:
        cpu_quota_usec: CPU time allowed per period, usec (cores × period); None = no quota.
        cpu_period_usec: the CFS period, usec (1000..1000000); used only with a quota.
        cpu_weight: proportional CPU weight, 1..10000 with v2 semantics (100 = default);
            mapped to ``cpu.shares`` on v1.
        cpuset_cpus: CPU list in kernel syntax (``"0-1,4"``).
        memory_min_bytes: memory never reclaimed, bytes (v2 only; bounded by the parent's).
        memory_low_bytes: memory reclaimed only when nothing unprotected is left, bytes (v2 only).
        memory_high_bytes: throttle-and-reclaim threshold, bytes (v1: soft limit).
        memory_max_bytes: hard limit, bytes; exceeding it ends in the OOM killer.
        io_weight: per-device proportional weights, at most one entry per device.
        io_max: per-device bandwidth caps, at most one entry per device.
        devices_denied: device nodes the cgroup's processes may not open (``open``,
            ``mknod``: ``EPERM``), canonical: sorted, each once (any iterable of
            :data:`Device` is taken and made so).
        pids_max: processes and threads the cgroup holds at most (a fork past it: ``EAGAIN``).

    Raises:
        ValueError: a value outside the kernel's accepted range, a block device listed twice,
            or a denied device that is not a valid :data:`Device`.
    """

    cpu_quota_usec: int | None = None
    cpu_period_usec: int = DEFAULT_PERIOD_USEC
    cpu_weight: int | None = None
    cpuset_cpus: str | None = None
    memory_min_bytes: int | None = None
    memory_low_bytes: int | None = None
    memory_high_bytes: int | None = None
    memory_max_bytes: int | None = None
    io_weight: tuple[IoWeight, ...] = ()
    io_max: tuple[IoMax, ...] = ()
    devices_denied: tuple[Device, ...] = ()
    pids_max: int | None = None

    def __post_init__(self) -> None:
        if self.devices_denied:
            object.__setattr__(self, "devices_denied", tuple(sorted(set(map(checked_device, self.devices_denied)))))
        low, high = _PERIOD_RANGE_USEC
        if not low <= self.cpu_period_usec <= high:
            raise ValueError(f"cpu_period_usec must be in {low}..{high}, got {self.cpu_period_usec}")
        if self.cpu_quota_usec is not None and self.cpu_quota_usec < MIN_QUOTA_USEC:
            raise ValueError(f"cpu_quota_usec must be >= {MIN_QUOTA_USEC}, got {self.cpu_quota_usec}")
        low, high = CGROUP_WEIGHT_RANGE
        if self.cpu_weight is not None and not low <= self.cpu_weight <= high:
            raise ValueError(f"cpu_weight must be in {low}..{high}, got {self.cpu_weight}")
        for _, name in (*_V2_MEMORY, ("pids.max", "pids_max")):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        for name in ("io_weight", "io_max"):
            devices = [io.device for io in getattr(self, name)]
            if len(set(devices)) != len(devices):
                raise ValueError(f"{name} lists a device twice: {devices}")


def weight_to_shares(weight: int) -> int:
    """Convert a v2 ``cpu.weight`` (1..10000) to v1 ``cpu.shares`` as systemd does:
    ``weight * 1024 / 100`` (integer division), clamped to the kernel's 2..262144."""
    low, high = _SHARES_RANGE
    return min(max(weight * DEFAULT_CPU_SHARES // DEFAULT_CPU_WEIGHT, low), high)


def v2_files(limits: CgroupLimits) -> list[tuple[str, str]]:
    """Return ``(file, value)`` pairs for cgroup v2 in :data:`V2_ORDER`, set fields only.

    >>> v2_files(CgroupLimits(cpu_quota_usec=30000, memory_max_bytes=1 << 20))
    [('cpu.max', '30000 100000'), ('memory.max', '1048576')]
    """
    files: list[tuple[str, str]] = []
    if limits.cpu_weight is not None:
        files.append(("cpu.weight", str(limits.cpu_weight)))
    if limits.cpu_quota_usec is not None:
        files.append(("cpu.max", format_cpu_max(limits.cpu_quota_usec, limits.cpu_period_usec)))
    if limits.cpuset_cpus is not None:
        files.append(("cpuset.cpus", limits.cpuset_cpus))
    for file, name in _V2_MEMORY:
        if (value := getattr(limits, name)) is not None:
            files.append((file, str(value)))
    for io in limits.io_weight:
        weight = io.weight if io.controller == "io.weight" else io.bfq_weight
        files.append((io.controller, f"{io.device} {weight}"))
    for io in limits.io_max:
        files.append(("io.max", f"{io.device} rbps={format_max(io.rbps)} wbps={format_max(io.wbps)}"))
    if limits.pids_max is not None:
        files.append(("pids.max", str(limits.pids_max)))
    return files


_PER_DEVICE_V2 = ("io.max", "io.weight", "io.bfq.weight")


def v2_key(file: str, value: str) -> tuple[str, str]:
    """The diff key of a v2 setting: ``(file, "MAJ:MIN")`` for per-device files (``io.max``,
    ``io.weight``, ``io.bfq.weight``), else ``(file, "")``."""
    return (file, value.split(maxsplit=1)[0] if file in _PER_DEVICE_V2 else "")


def v2_reset(file: str, value: str) -> str:
    """The value that undoes ``value`` in v2 ``file`` (kernel defaults: no limit, weight 100,
    empty cpuset = the parent's CPUs).

    Raises:
        ValueError: ``file`` is not one of :data:`V2_ORDER`.
    """
    if file == "io.max":
        return f"{v2_key(file, value)[1]} rbps=max wbps=max"
    if file in _PER_DEVICE_V2:
        return f"{v2_key(file, value)[1]} default"
    resets = {"cpu.weight": str(DEFAULT_CPU_WEIGHT),
              "cpu.max": format_cpu_max(None, DEFAULT_PERIOD_USEC),
              "cpuset.cpus": "", "memory.min": "0", "memory.low": "0", "memory.high": format_max(None),
              "memory.max": format_max(None), "pids.max": format_max(None)}
    if file not in resets:
        raise ValueError(f"not a governed cgroup v2 file: {file!r}")
    return resets[file]


def v1_files(limits: CgroupLimits) -> list[tuple[str, str, str]]:
    """Return ``(controller, file, value)`` triples for cgroup v1 in :data:`V1_ORDER`.

    ``cpu_weight`` becomes ``cpu.shares`` (:func:`weight_to_shares`); ``memory_high_bytes``
    becomes ``memory.soft_limit_in_bytes``; BFQ weights become ``blkio.bfq.weight_device``;
    ``memory_min_bytes``, ``memory_low_bytes`` and io.cost weights have no v1 file and are left out; an ``IoMax``
    side left None writes no blkio rule; each denied device is a ``devices.deny`` line
    (``c 195:1 rwm``: read, write, mknod); ``pids_max`` is ``pids.max`` in the pids hierarchy.

    >>> v1_files(CgroupLimits(cpu_quota_usec=30000, cpu_weight=200))
    [('cpu', 'cpu.cfs_period_us', '100000'), ('cpu', 'cpu.cfs_quota_us', '30000'), ('cpu', 'cpu.shares', '2048')]
    """
    files: list[tuple[str, str, str]] = []
    if limits.cpu_quota_usec is not None:
        files.append(("cpu", "cpu.cfs_period_us", str(limits.cpu_period_usec)))
        files.append(("cpu", "cpu.cfs_quota_us", str(limits.cpu_quota_usec)))
    if limits.cpu_weight is not None:
        files.append(("cpu", "cpu.shares", str(weight_to_shares(limits.cpu_weight))))
    if limits.cpuset_cpus is not None:
        files.append(("cpuset", "cpuset.cpus", limits.cpuset_cpus))
    if limits.memory_high_bytes is not None:
        files.append(("memory", "memory.soft_limit_in_bytes", str(limits.memory_high_bytes)))
    if limits.memory_max_bytes is not None:
        files.append(("memory", "memory.limit_in_bytes", str(limits.memory_max_bytes)))
    for io in limits.io_weight:
        if io.controller == "io.bfq.weight":
            files.append(("blkio", "blkio.bfq.weight_device", f"{io.device} {io.bfq_weight}"))
    for side, file in (("rbps", "blkio.throttle.read_bps_device"),
                       ("wbps", "blkio.throttle.write_bps_device")):
        for io in limits.io_max:
            rate = getattr(io, side)
            if rate is not None:
                files.append(("blkio", file, f"{io.device} {rate}"))
    for device in limits.devices_denied:
        files.append(("devices", "devices.deny", v1_line(device)))
    if limits.pids_max is not None:
        files.append(("pids", "pids.max", str(limits.pids_max)))
    return files


def v1_key(controller: str, file: str, value: str) -> tuple[str, str, str]:
    """The diff key of a v1 setting: ``(controller, file, "MAJ:MIN")`` for per-device blkio
    lines, ``(controller, file, "c 195:1")`` for a ``devices.deny`` line, else
    ``(controller, file, "")``."""
    if file.startswith("blkio."):
        device = value.split(maxsplit=1)[0]
    elif file == "devices.deny":
        device = value.rsplit(maxsplit=1)[0]
    else:
        device = ""
    key = (controller, file, device)
    # One tuple per distinct setting, shared by every cgroup's record: a host of 10,000 tasks
    # kept 41,000 equal tuples (2.5 MiB).
    return _V1_KEYS.setdefault(key, key)


_V1_KEYS: dict[tuple[str, str, str], tuple[str, str, str]] = {}


def v1_reset(controller: str, file: str, value: str) -> str | None:
    """The value that undoes ``value`` in v1 ``file``: ``-1`` (unlimited) for quota and memory
    limits, ``max`` for ``pids.max``, the defaults for period and shares, ``"MAJ:MIN 0"`` (rule removed) for blkio.

    Returns None for ``cpuset.cpus``: v1 has no "inherit" value, the driver copies the
    parent's list.

    Raises:
        ValueError: ``(controller, file)`` is not one of :data:`V1_ORDER`, or it is
            ``devices.deny``, undone in another file (the same rule to ``devices.allow``).
    """
    if (controller, file) not in V1_ORDER or file == "devices.deny":
        raise ValueError(f"not a governed cgroup v1 file: {controller}/{file}")
    if file.startswith("blkio.throttle."):
        return f"{v1_key(controller, file, value)[2]} 0"
    if file == "blkio.bfq.weight_device":
        return f"{v1_key(controller, file, value)[2]} default"
    return {"cpu.cfs_period_us": str(DEFAULT_PERIOD_USEC), "cpu.cfs_quota_us": "-1",
            "cpu.shares": str(DEFAULT_CPU_SHARES), "cpuset.cpus": None,
            "memory.soft_limit_in_bytes": "-1", "memory.limit_in_bytes": "-1", "pids.max": format_max(None)}[file]


K = TypeVar("K", bound=Hashable)


def diff_writes(desired: Sequence[tuple[K, str]], last: Mapping[K, str],
                rank: Callable[[K], int]) -> list[tuple[K, str | None]]:
    """Plan the writes that turn ``last`` (what was written) into ``desired``.

    Returns ``(key, value)`` for every desired setting whose value changed, and
    ``(key, None)`` ("reset it") for every key written before but no longer desired, sorted
    by ``rank(key)`` (the position of the key's file in the write order); within one file,
    desired lines keep their given order and resets follow them.
    """
    wanted = dict(desired)
    writes: list[tuple[K, str | None]] = [(k, v) for k, v in desired if last.get(k) != v]
    writes += [(k, None) for k in last if k not in wanted]
    return sorted(writes, key=lambda kv: rank(kv[0]))
