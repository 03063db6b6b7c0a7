"""What ``governor check-config`` says of GPUs on this host: the GPUs ``capacity.gpus`` finds,
their control nodes, what keeps processes outside governor's tasks from them, and what the
installed unit lacks for that."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from governor.config.load import Config


def gpus_on_this_host(config: Config):
    """The GPUs ``capacity.gpus`` finds here (a :class:`governor.core.gpus.GpuInventory`), or None
    when no GPU is governed.

    Raises:
        ConfigError: at ``capacity.gpus``, as the daemon would refuse it (NVML missing, a node
            that is not a character device, no GPU found).
    """
    if config.gpus is None:
        return None
    from governor.errors import ConfigError
    from governor.core.gpus import GpuError
    from governor.host.nvml import discover

    try:
        return discover(config.gpus, config.gpu_control)
    except GpuError as error:
        raise ConfigError(config.file, "capacity.gpus", error.reason) from None


def gpu_report(config: Config, mode: str) -> list[str]:
    """What ``check-config`` says of GPUs on this host (cgroup ``mode``: ``v1``/``v2``): each GPU
    found (governor's index, node, UUID, name), the control nodes, how the kernel keeps tasks
    from the others' nodes, and whether the ``dmem`` controller could cap GPU memory; one line
    saying so when no GPU is governed.

    Raises:
        ConfigError: at ``capacity.gpus`` (:func:`gpus_on_this_host`).
    """
    from governor.cgroups.detect import device_guard, dmem_regions
    from governor.errors import CgroupError

    gpus = gpus_on_this_host(config)
    if gpus is None:
        return ["gpus: none governed (capacity.gpus)"]
    source = "NVML" if gpus.source == "nvml" else "the listed device nodes"
    lines = [f"gpus: {len(gpus.gpus)} found through {source}; tasks ask with governor run --gpus N"]
    for gpu in gpus.gpus:
        about = ", ".join(part for part in (gpu.uuid or "no UUID: CUDA_VISIBLE_DEVICES names it by minor number",
                                            gpu.name) if part)
        lines.append(f"  gpu {gpu.index}: {gpu.node} ({gpu.major}:{gpu.minor}), {about}")
    control = ", ".join(path for path, _, _ in gpus.control) or "none found"
    lines.append(f"  control nodes (denied to governor's tasks holding no GPU): {control}")
    lines += [f"  note: {note}" for note in gpus.notes]
    try:
        lines.append(f"  kept from other tasks' GPUs by: {device_guard()}")
    except CgroupError as error:
        lines.append(f"  kept from other tasks' GPUs by: unknown ({error})")
    lines += gpu_guard_report(config, gpus, mode)
    regions = dmem_regions()
    lines.append("  GPU memory: not capped (the kernel's dmem controller is not here: Linux 6.14+ on cgroup v2)"
                 if regions is None else
                 f"  GPU memory: not capped; dmem lists {len(regions)} region(s) it could cap: "
                 + "; ".join(regions))
    return lines


def gpu_guard_report(config: Config, gpus, mode: str) -> list[str]:
    """What keeps processes outside governor's tasks from the GPUs (``capacity.gpu_guard``) on
    this host (cgroup ``mode``: ``v1``/``v2``): where the nodes are denied, what is not covered,
    and the processes holding a GPU node now (system services outside governor are left alone;
    ``gpus``: the inventory)."""
    from governor.cgroups.detect import controller_mount
    from governor.cgroups.device_guard import GUARD_NAME, plan_guard
    from governor.cgroups.versions import version
    from governor.host.openfiles import node_holders, process_name
    from pathlib import Path

    rules = config.gpu_guard
    kind = "tasks" if rules.kind == "sessions" and not config.sessions.enabled else rules.kind
    mount = controller_mount("devices", mode)
    # The daemon's root is not known here: nothing is left out for holding it.
    plan = plan_guard(kind, rules.parents, mode=mode, mount=mount, governor_root=Path("/"))
    how = version(mode).device_guard + (f" named {GUARD_NAME}" if version(mode).guard_is_program else "")
    lines = [f"  outside governor's tasks (gpu_guard = \"{rules.kind}\""
             + (", sessions off" if kind != rules.kind else "") + "):"]
    if plan.places:
        lines.append(f"    GPU and control nodes denied on {', '.join(map(str, plan.places))} ({how}; "
                     "descendants cannot allow them)" + (" but the one holding governor's root" if kind == "host" else ""))
    else:
        lines.append("    processes outside governor's tasks are NOT kept from GPUs: nowhere to deny them"
                     + ('; gpu_guard = "host" denies them on every top-level cgroup but governor\'s' if kind == "tasks"
                        else ""))
    if kind == "sessions" and not plan.places:
        lines.append("    a session process found holding a GPU node is ended and logged instead (every 5 s)")
    lines += [f"    note: {note}" for note in plan.notes if not note.startswith('gpu_guard = "tasks"')]
    numbers = {(gpu.major, gpu.minor) for gpu in gpus.gpus} | {(major, minor) for _, major, minor in gpus.control}
    held = node_holders(numbers)
    lines.append("    holding a GPU or control node now (processes outside governor are left alone): "
                 + (", ".join(f"{process_name(pid) or '?'} (pid {pid})" for pid in sorted(held)) or "none"))
    return lines


def unit_warnings(config: Config, mode: str, unit: Path | None = None, kernel: str | None = None) -> list[str]:
    """What the daemon's installed systemd unit lacks for ``config`` on this host, read from
    ``unit`` (default: where ``install-systemd`` writes governor.service) and its drop-ins.
    With ``capacity.gpus`` on cgroup v2 (``mode`` ``"v2"``), the daemon loads a BPF device
    program, which needs CAP_BPF (CAP_SYS_ADMIN stands in on a ``kernel`` release before 5.8;
    default: this host's), and replaces or takes off programs attached earlier (a reload, a
    restart, the GPU guard), which needs CAP_SYS_ADMIN (``BPF_PROG_GET_FD_BY_ID``), both in
    ``CapabilityBoundingSet=``, and ``bpf`` in an allow-list ``SystemCallFilter=``; on v1
    (``"v1"``), the kernel takes a ``devices.deny`` line only from CAP_SYS_ADMIN. One warning
    per missing item, naming it and the fix; none when no unit is installed there (what each
    version needs: :data:`governor.cgroups.versions.VERSIONS`)."""
    from governor.cgroups.versions import VERSIONS
    from governor.cli.install_systemd import unit_values
    from governor.cli.systemd_files import UNIT_DIR

    unit = unit or Path("/") / UNIT_DIR / "governor.service"
    if config.gpus is None or mode not in VERSIONS or not unit.is_file():
        return []
    guard = VERSIONS[mode]
    release = tuple(int(part) for part in re.findall(r"\d+", kernel or os.uname().release)[:2])
    needed = guard.guard_needs(release)
    why = (f"capacity.gpus on cgroup {mode}: the daemon keeps tasks from other tasks' GPUs with "
           f"{guard.device_guard}, and {unit} lacks")
    fix = ("run governor install-systemd again (its unit has them), or add it with a drop-in: systemctl edit "
           "governor, [Service]")
    warnings = []
    bounding: set[str] | None = None  # None: not restricted
    refused: set[str] = set()
    for value in unit_values(unit, "CapabilityBoundingSet"):
        if value.startswith("~"):
            refused |= set(value[1:].split())
        else:
            bounding = (bounding or set()) | set(value.split()) if value else None
    for capability, without in needed.items():
        if capability in refused or (bounding is not None and capability not in bounding):
            warnings.append(f"{why} {capability} in CapabilityBoundingSet= ({without}): "
                            f"{fix} CapabilityBoundingSet={capability}")
    filters = unit_values(unit, "SystemCallFilter") if guard.guard_syscalls else []
    allowed = [value for value in filters if value and not value.startswith("~")]
    for call in guard.guard_syscalls:
        if any(call in value[1:].split() for value in filters if value.startswith("~")) or (
                allowed and not any(call in value.split() for value in allowed)):
            warnings.append(f"{why} the {call} system call in SystemCallFilter= (the daemon would fail to start): "
                            f"{fix} SystemCallFilter={call}")
    return warnings
