"""What each cgroup version gives governor, as a table: the one place outside the drivers
where v1 and v2 differ. Every layer above asks this table (by the mode the drivers report,
``"v1"`` or ``"v2"``) and never compares the mode itself (tests/unit/test_import_layers.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["VERSIONS", "Version", "version"]


@dataclass(frozen=True)
class Version:
    """One cgroup version, by the kernel's names.

    Attributes:
        mode: ``"v1"`` or ``"v2"``, as the drivers and status name it.
        memory_high_throttles: whether the soft memory limit throttles a cgroup at its value
            (v2's ``memory.high``); v1's ``memory.soft_limit_in_bytes`` binds only under
            host-wide memory pressure, so a task may run past it into memory admitted to others.
        memory_floor: whether ``memory.min`` and ``memory.low`` protect memory from reclaim (v1
            has no floor: its soft limit is none).
        file_names: a limit's v2 file name → this version's, for what people read.
        device_guard: how a device node is denied to a cgroup, in words.
        guard_is_program: whether that is a BPF program (a kernel object with a name).
        guard_capabilities: capability → what fails without it, for the device guard; each
            with the kernel release it came with (before it, CAP_SYS_ADMIN stands in).
        guard_syscalls: the system calls the device guard makes beyond the ordinary.
    """

    mode: str
    memory_high_throttles: bool
    memory_floor: bool
    device_guard: str
    guard_is_program: bool
    guard_capabilities: Mapping[str, tuple[tuple[int, int], str]]
    guard_syscalls: tuple[str, ...] = ()
    file_names: Mapping[str, str] = field(default_factory=dict)

    def in_own_names(self, text: str) -> str:
        """``text`` with each v2 limit file it names renamed to this version's."""
        if not self.file_names:
            return text
        pattern = r"\b(?:" + "|".join(map(re.escape, self.file_names)) + r")\b"
        return re.sub(pattern, lambda name: self.file_names[name[0]], text)

    def guard_needs(self, release: tuple[int, int]) -> dict[str, str]:
        """The capabilities the device guard needs on a kernel of ``release`` (major, minor):
        capability → what fails without it."""
        return {capability: without for capability, (since, without) in self.guard_capabilities.items()
                if release >= since}


VERSIONS: Mapping[str, Version] = {
    "v2": Version(
        mode="v2", memory_high_throttles=True, memory_floor=True,
        device_guard="a BPF device program", guard_is_program=True,
        # CAP_BPF loads the program (Linux 5.8; CAP_SYS_ADMIN before it); BPF_PROG_GET_FD_BY_ID,
        # to replace or take off a program attached earlier, needs CAP_SYS_ADMIN.
        guard_capabilities={
            "CAP_BPF": ((5, 8), "the daemon would fail to start"),
            "CAP_SYS_ADMIN": ((0, 0), "a device program attached earlier could not be replaced or taken off "
                                      "(EPERM at the first reload, restart or stop that changes one)")},
        guard_syscalls=("bpf",)),
    "v1": Version(
        mode="v1", memory_high_throttles=False, memory_floor=False,
        device_guard="devices.deny", guard_is_program=False,
        guard_capabilities={
            "CAP_SYS_ADMIN": ((0, 0), "the kernel refuses every devices.deny line without it: EPERM at each "
                                      "GPU launch")},
        file_names={"cpu.max": "cpu.cfs_quota_us", "memory.high": "memory.soft_limit_in_bytes",
                    "memory.max": "memory.limit_in_bytes"}),
}


def version(mode: str) -> Version:
    """The entry for cgroup ``mode`` (``"v1"`` or ``"v2"``).

    Raises:
        KeyError: any other mode.
    """
    return VERSIONS[mode]
