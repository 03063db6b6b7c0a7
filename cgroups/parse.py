"""Pure parsers and formatters for the text of cgroup (and ``/proc``) files.

Nothing here touches the OS. The kernel's ``max`` (no limit) is turned into ``None`` by
:func:`parse_max` and back by :func:`format_max`, and nowhere else, so callers never see the
string. Malformed text raises ``ValueError`` naming the offending text: the kernel writes these
files, so a parse failure means the wrong file was read.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CgroupEvents",
    "format_cpu_list",
    "format_cpu_max",
    "format_max",
    "parse_blkio_service_bytes",
    "parse_cgroup_events",
    "parse_controllers",
    "parse_cpu_list",
    "parse_cpu_max",
    "parse_flat_keyed",
    "parse_int",
    "parse_max",
    "parse_nested_keyed",
    "parse_pids",
    "parse_proc_cgroup",
]

MAX = "max"


def parse_int(text: str) -> int:
    """Parse a single-integer file (``memory.current``, ``cpuacct.usage``...).

    Raises:
        ValueError: the text is not one integer.
    """
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def parse_max(text: str) -> int | None:
    """Parse an integer-or-``max`` value (``memory.max``, one ``io.max`` field): ``max`` → None.

    Raises:
        ValueError: neither ``max`` nor an integer.
    """
    text = text.strip()
    return None if text == MAX else parse_int(text)


def format_max(value: int | None) -> str:
    """Format an integer-or-unlimited value for the kernel: None → ``max``."""
    return MAX if value is None else str(value)


def parse_flat_keyed(text: str) -> dict[str, int]:
    """Parse a flat keyed file (``cpu.stat``, ``memory.events``, v1 ``memory.oom_control``).

    ``"usage_usec 12\\nnr_throttled 3\\n"`` → ``{"usage_usec": 12, "nr_throttled": 3}``.

    Raises:
        ValueError: a line is not ``key integer``.
    """
    result: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"expected 'key value', got {line!r}")
        result[parts[0]] = parse_int(parts[1])
    return result


def parse_nested_keyed(text: str) -> dict[str, dict[str, int | None]]:
    """Parse a nested keyed file (``io.stat``, ``io.max``): one ``MAJ:MIN key=value...`` line
    per device.

    ``"8:0 rbps=1048576 wbps=max"`` → ``{"8:0": {"rbps": 1048576, "wbps": None}}``.

    Raises:
        ValueError: a field is not ``key=integer`` or ``key=max``.
    """
    result: dict[str, dict[str, int | None]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        fields: dict[str, int | None] = {}
        for field in parts[1:]:
            key, sep, value = field.partition("=")
            if not sep:
                raise ValueError(f"expected 'key=value' in {line!r}, got {field!r}")
            fields[key] = parse_max(value)
        result[parts[0]] = fields
    return result


def parse_cpu_max(text: str) -> tuple[int | None, int]:
    """Parse ``cpu.max``: ``"max 100000"`` → ``(None, 100000)``, ``"20000 100000"`` →
    ``(20000, 100000)``; both in usec (quota, period).

    Raises:
        ValueError: not ``quota period``.
    """
    parts = text.split()
    if len(parts) != 2:
        raise ValueError(f"expected '<quota|max> <period>', got {text!r}")
    return parse_max(parts[0]), parse_int(parts[1])


def format_cpu_max(quota_usec: int | None, period_usec: int) -> str:
    """Format ``cpu.max`` from a quota (usec per period, None = unlimited) and a period (usec)."""
    return f"{format_max(quota_usec)} {period_usec}"


@dataclass(frozen=True)
class CgroupEvents:
    """The content of ``cgroup.events``.

    Attributes:
        populated: some process lives in this cgroup or below it.
        frozen: the cgroup is frozen.
    """

    populated: bool
    frozen: bool


def parse_cgroup_events(text: str) -> CgroupEvents:
    """Parse ``cgroup.events`` (``"populated 1\\nfrozen 0\\n"``); ``frozen`` is absent before
    Linux 5.2 and then reads as False.

    Raises:
        ValueError: malformed, or ``populated`` missing.
    """
    values = parse_flat_keyed(text)
    if "populated" not in values:
        raise ValueError(f"no 'populated' key in {text!r}")
    return CgroupEvents(populated=values["populated"] != 0, frozen=values.get("frozen", 0) != 0)


def parse_pids(text: str) -> list[int]:
    """Parse ``cgroup.procs`` / ``tasks``: one pid per line → list of pids in file order.

    Raises:
        ValueError: a line is not an integer.
    """
    return [parse_int(line) for line in text.splitlines() if line.strip()]


def parse_controllers(text: str) -> set[str]:
    """Parse ``cgroup.controllers`` / ``cgroup.subtree_control``: ``"cpu io memory"`` → a set."""
    return set(text.split())


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Parse ``/proc/<pid>/cgroup`` into hierarchy name → cgroup path.

    ``"0::/a"`` (cgroup v2) gives key ``""``. A v1 line names its hierarchy by its comma-joined
    controllers (``"2:cpu,cpuacct:/x"``); every controller gets its own key (``"cpu"`` and
    ``"cpuacct"`` both map to ``/x``) because callers look hierarchies up by controller. Named
    hierarchies keep their name (``"name=systemd"``).

    Raises:
        ValueError: a line does not have the ``id:controllers:path`` shape.
    """
    result: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3:
            raise ValueError(f"expected 'id:controllers:path', got {line!r}")
        _, controllers, path = parts
        if not controllers:
            result[""] = path
        for name in controllers.split(","):
            if name:
                result[name] = path
    return result


# v1 blkio.throttle.io_service_bytes operation names → the v2 io.stat keys they correspond to.
_BLKIO_OPS = {"Read": "rbytes", "Write": "wbytes", "Discard": "dbytes"}


def parse_blkio_service_bytes(text: str) -> dict[str, dict[str, int]]:
    """Parse v1 ``blkio.throttle.io_service_bytes`` into io.stat shape (bytes).

    ``"8:0 Read 4096\\n8:0 Write 8192\\n8:0 Sync 0\\n...\\nTotal 12288"`` →
    ``{"8:0": {"rbytes": 4096, "wbytes": 8192}}``: Sync/Async/Total are dropped because v2's
    ``io.stat`` has no equivalent.

    Raises:
        ValueError: a device line is not ``MAJ:MIN op bytes``.
    """
    result: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] == "Total":
            continue
        if len(parts) != 3:
            raise ValueError(f"expected 'MAJ:MIN op bytes', got {line!r}")
        device, op, value = parts
        key = _BLKIO_OPS.get(op)
        if key is not None:
            result.setdefault(device, {})[key] = parse_int(value)
    return result


def parse_cpu_list(text: str) -> set[int]:
    """Parse a kernel CPU list (``cpuset.cpus``): ``"0-2,5"`` → ``{0, 1, 2, 5}``, ``""`` → ``set()``.

    Raises:
        ValueError: the text is not a CPU list.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, dash, last = part.partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError:
            raise ValueError(f"not a CPU list: {text!r}") from None
        if low < 0 or high < low:
            raise ValueError(f"not a CPU list: {text!r}")
        cpus.update(range(low, high + 1))
    return cpus


def format_cpu_list(cpus) -> str:
    """Format CPU numbers as a kernel CPU list: ``[0, 1, 2, 5]`` → ``"0-2,5"``."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in ranges)
