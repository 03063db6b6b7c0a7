"""Limits on cgroups systemd manages (a logind user's ``user-UID.slice``), written through systemd.

systemd is the only writer of the cgroups of its units: a value written straight into a slice's
files is overwritten at the next ``systemctl daemon-reload``. :class:`SliceDriver` therefore
sets the unit's properties instead, at runtime (``systemctl set-property --runtime``, kept under
``/run/systemd/system.control`` until reboot, so a reload keeps them), and reads the unit's
counters from its cgroup like :class:`~governor.cgroups.v2.CgroupV2Driver` (cgroup v2 only).

Cgroups are named relative to the v2 mount (``"user.slice/user-1000.slice"``); the unit is the
last part. Only what a task's caps use is mapped (DESIGN.md §3):

============================  =====================================================
limit                         systemd property (systemd.resource-control(5))
============================  =====================================================
``cpu.max`` quota / period    ``CPUQuota=<percent>%`` (whole, rounded up: systemd before
                              v256 keeps whole percents in its drop-in, so a finer value
                              would change at the next ``daemon-reload``);
                              ``CPUQuotaPeriodSec=<usec>us`` unless 100 ms (its default)
``cpu.weight``                ``CPUWeight=``
``memory.min/low/high/max``   ``MemoryMin=``, ``MemoryLow=``, ``MemoryHigh=``, ``MemoryMax=`` (bytes)
``io.max`` rbps / wbps        ``IOReadBandwidthMax=``, ``IOWriteBandwidthMax=``
                              (``/dev/block/MAJ:MIN <bytes>``)
``pids.max``                  ``TasksMax=``
============================  =====================================================
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from governor.cgroups.base import DriverBase
from governor.cgroups.errors import CgroupError, CgroupUnsupported, CgroupWriteError
from governor.cgroups.files import relative_parts
from governor.cgroups.limits import CgroupLimits
from governor.cgroups.stats import CgroupStats
from governor.cgroups.v2 import CgroupV2Driver

__all__ = ["MEMORY_PROPERTIES", "SliceDriver", "in_dropin_order", "systemd_slices", "unit_properties", "units_above"]

log = logging.getLogger(__name__)

# The memory properties and the cgroup v2 files they set (status and the journal name them so).
MEMORY_PROPERTIES = {"MemoryMin": "memory.min", "MemoryLow": "memory.low", "MemoryHigh": "memory.high",
                     "MemoryMax": "memory.max"}
# What each property is reset to when the limits no longer set it ("" = systemd's default).
RESETS = {"CPUQuota": "", "CPUQuotaPeriodSec": "", "CPUWeight": "", "MemoryMin": "", "MemoryLow": "", "MemoryHigh": "infinity",
          "MemoryMax": "infinity", "IOReadBandwidthMax": "", "IOWriteBandwidthMax": "", "TasksMax": ""}
# What systemd writes in a set-property drop-in for each reset above (``MemoryLow=`` is stored as
# 0, ``MemoryMax=infinity`` as given, ``TasksMax=`` as infinity: the systemd suite found a user's
# 50-TasksMax.conf left by uninstall): a drop-in holding it sets nothing.
RESET_WRITTEN = {**{name: "" for name in RESETS}, "MemoryMin": "0", "MemoryLow": "0", "MemoryHigh": "infinity",
                 "MemoryMax": "infinity", "TasksMax": "infinity"}
# systemctl blocks the daemon's event loop: well below the unit's WatchdogSec=30.
SYSTEMCTL_TIMEOUT_S = 5.0
SYSTEMD_PERIOD_USEC = 100_000

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def unit_properties(limits: CgroupLimits) -> dict[str, tuple[str, ...]]:
    """The systemd properties ``limits`` become: property → its assignments (several for a
    per-device list, in device order). Properties the limits leave unset are absent.

    Raises:
        CgroupUnsupported: the limits hold something a login session's caps never use (a
            cpuset, an io weight, device rules: systemd's ``DeviceAllow=`` is an allow list,
            governor's a deny list), which this driver does not map.
    """
    if limits.cpuset_cpus is not None or limits.io_weight or limits.devices_denied:
        raise CgroupUnsupported("cpusets, io weights and device rules are not set on systemd units", path="")
    properties: dict[str, tuple[str, ...]] = {}
    if limits.cpu_quota_usec is not None:
        # Rounded up: never a cap below the quota asked, and never 0 % (which systemd refuses).
        percent = -(-limits.cpu_quota_usec * 100 // limits.cpu_period_usec)
        properties["CPUQuota"] = (f"{percent}%",)
        if limits.cpu_period_usec != SYSTEMD_PERIOD_USEC:
            properties["CPUQuotaPeriodSec"] = (f"{limits.cpu_period_usec}us",)
    if limits.cpu_weight is not None:
        properties["CPUWeight"] = (str(limits.cpu_weight),)
    for name, value in zip(MEMORY_PROPERTIES, (limits.memory_min_bytes, limits.memory_low_bytes,
                                               limits.memory_high_bytes, limits.memory_max_bytes)):
        if value is not None:
            properties[name] = (str(value),)
    for name, field in (("IOReadBandwidthMax", "rbps"), ("IOWriteBandwidthMax", "wbps")):
        lines = tuple(f"/dev/block/{io.device} {getattr(io, field)}"
                      for io in sorted(limits.io_max, key=lambda io: io.device) if getattr(io, field) is not None)
        if lines:
            properties[name] = lines
    if limits.pids_max is not None:
        properties["TasksMax"] = (str(limits.pids_max),)
    return properties


class SliceDriver(DriverBase):
    """Limits and counters of systemd units' cgroups, by way of systemd (see the module). Not a
    :class:`~governor.cgroups.driver.Driver`: the cgroups are systemd's to make, fill and
    remove, so it offers only what a unit's owner may do (limits, counters, who is in it);
    :class:`~governor.cgroups.hierarchy.Hierarchy` routes a login slice here.

    Args:
        mount: the cgroup v2 mount (``/sys/fs/cgroup``); cgroups are named relative to it.
        run: runs a ``systemctl`` command line and returns its result (tests pass a fake).

    :meth:`apply` raises :class:`~governor.errors.CgroupWriteError` (path: the unit; value:
    the assignments; errno None) when systemctl refuses; the record then keeps what systemd
    accepted before.
    """

    mode = "v2"

    def __init__(self, mount, *, run: Runner | None = None):
        super().__init__()
        self._reader = CgroupV2Driver(Path(mount))  # reads only: counters, members, cgroup.events
        self._run = run or _systemctl

    def directory(self, rel: str) -> Path:
        return self._reader.path(rel)

    def pids(self, rel: str) -> list[int]:
        return self._reader.pids(rel)

    def populated(self, rel: str) -> bool:
        return self._reader.populated(rel)

    def events_path(self, rel: str) -> Path:
        return self._reader.events_path(rel)

    def _read_stats(self, rel: str, peak: bool) -> CgroupStats:
        return self._reader.read_stats(rel, peak=peak)

    def reset(self, rel: str, limits: CgroupLimits | None = None) -> None:
        """Reset the properties this driver set on ``rel``'s unit, and those ``limits`` would
        set (what an earlier daemon set: the record does not outlive a restart). The cgroup
        itself is systemd's; systemd takes properties of a unit that is not running, too.

        Raises:
            CgroupWriteError: systemctl refused (the record is dropped all the same).
        """
        names = dict.fromkeys([key[0] for key in self._record(rel)] + list(unit_properties(limits or CgroupLimits())))
        self.forget(rel)
        if names:
            self._set(rel, [f"{name}={RESETS[name]}" for name in names])

    def _apply_one(self, rel: str, limits: CgroupLimits) -> tuple[list[str], list[CgroupError]]:
        last = self._record(rel)
        desired = {(name,): ", ".join(lines) for name, lines in unit_properties(limits).items()}
        stale = [key for key in last if key not in desired]
        changed = [key for key, value in desired.items() if last.get(key) != value]
        assignments = [f"{key[0]}={RESETS[key[0]]}" for key in stale]
        for key in changed:
            if key[0].startswith("IO"):  # a list: clear it, then give every device
                assignments.append(f"{key[0]}=")
            assignments += [f"{key[0]}={line}" for line in desired[key].split(", ")]
        if not assignments:
            return [], []
        try:
            self._set(rel, assignments)
        except CgroupError as error:
            return [], [error]
        for key in stale:
            del last[key]
        last.update((key, desired[key]) for key in changed)
        return [key[0] for key in stale + changed], []

    def _set(self, rel: str, assignments: list[str]) -> None:
        unit = relative_parts(rel)[-1]
        try:
            done = self._run(["systemctl", "set-property", "--runtime", "--", unit, *in_dropin_order(assignments)])
        except (OSError, subprocess.SubprocessError) as error:
            raise CgroupWriteError(unit, " ".join(assignments), getattr(error, "errno", None)) from None
        if done.returncode != 0:
            reason = done.stderr.strip().splitlines()[-1:] or [f"systemctl exited {done.returncode}"]
            raise CgroupWriteError(f"{unit} ({reason[0]})", " ".join(assignments), None)
        log.debug("set %s on %s", " ".join(assignments), unit)


def in_dropin_order(assignments: Sequence[str]) -> list[str]:
    """``assignments`` (``Name=value``) in the order of the drop-ins systemd writes for them,
    ``50-<Name>.conf`` by name (one property's several assignments kept in their order).

    systemd (252, and later: systemd issue #35710) appends each drop-in a ``set-property`` writes to
    the unit's list in the order given, while ``systemctl status`` compares that list with the
    drop-ins found on disk, sorted: ``MemoryMin=`` before ``MemoryLow=`` left every status of
    the unit saying it "changed on disk. Run 'systemctl daemon-reload'". Given in file order, a
    unit's new drop-ins are appended where the sorted list has them.

    >>> in_dropin_order(["MemoryMin=0", "MemoryLow=1", "CPUQuota=5%", "CPUQuotaPeriodSec=10ms"])
    ['CPUQuota=5%', 'CPUQuotaPeriodSec=10ms', 'MemoryLow=1', 'MemoryMin=0']
    """
    return sorted(assignments, key=lambda assignment: f"50-{assignment.partition('=')[0]}.conf")


def systemd_slices(mode: str, mount: Path, *, booted: Path = Path("/run/systemd/system")) -> SliceDriver | None:
    """A :class:`SliceDriver` for ``mount`` when systemd manages this host's cgroups and they
    are v2 (``mode``): systemd is PID 1 (sd_booted(3): ``booted`` is a directory) and
    ``systemctl`` is on PATH. None otherwise: logind's slices are then not governed."""
    if mode != "v2" or not booted.is_dir() or shutil.which("systemctl") is None:
        return None
    return SliceDriver(mount)


def units_above(root: Path, mount: Path, own: Collection[str]) -> list[str]:
    """The systemd units of ``own`` whose cgroups hold ``root``: its ancestors between ``mount``
    (exclusive) and ``root`` (exclusive) named ``*.slice`` or ``*.service`` whose name is in
    ``own``, as cgroups relative to ``mount``, outermost first
    (``/sys/fs/cgroup/governor.slice/governor-tasks.service/governed`` →
    ``["governor.slice", "governor.slice/governor-tasks.service"]``). Empty when ``root`` is not
    below ``mount``. Pure: the path alone says it (systemd names a unit's cgroup after it)."""
    try:
        parts = Path(root).relative_to(mount).parts
    except ValueError:
        return []
    return ["/".join(parts[:depth + 1]) for depth, name in enumerate(parts[:-1])
            if name.endswith((".slice", ".service")) and name in own]


def _systemctl(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S, check=False)
