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
    from governor.host.host_check import Version


def gpu_report(config: Config, kernel: Version) -> list[str]:
    """What ``check-config`` says of GPUs on this host, whose cgroups are ``kernel``'s: each GPU
    found (governor's index, node, UUID, name), the control nodes, how the kernel keeps tasks
    from the others' nodes, and whether the ``dmem`` controller could cap GPU memory; one line
    saying so when no GPU is governed.

    Raises:
        ConfigError: at ``capacity.gpus`` (:func:`governor.host.host_check.gpus_on_this_host`).
    """
    from governor.host.host_check import gpu_kernel_here, gpus_on_this_host

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
    here = gpu_kernel_here()
    lines.append(f"  kept from other tasks' GPUs by: {here.guard}")
    lines += gpu_guard_report(config, gpus, kernel)
    regions = here.dmem_regions
    lines.append("  GPU memory: not capped (the kernel's dmem controller is not here: Linux 6.14+ on cgroup v2)"
                 if regions is None else
                 f"  GPU memory: not capped; dmem lists {len(regions)} region(s) it could cap: "
                 + "; ".join(regions))
    return lines


def gpu_guard_report(config: Config, gpus, kernel: Version) -> list[str]:
    """What keeps processes outside governor's tasks from the GPUs (``capacity.gpu_guard``) on
    this host, whose cgroups are ``kernel``'s: where the nodes are denied, what is not covered,
    and the processes holding a GPU node now (system services outside governor are left alone;
    ``gpus``: the inventory; :func:`governor.host.host_check.gpu_guard_here`)."""
    from governor.host.host_check import gpu_guard_here

    rules = config.gpu_guard
    here = gpu_guard_here(config, gpus, kernel)
    kind = here.kind
    lines = [f"  outside governor's tasks (gpu_guard = \"{rules.kind}\""
             + (", sessions off" if kind != rules.kind else "") + "):"]
    if here.places:
        but = " but the one holding governor's root" if kind == "host" else ""
        lines.append(f"    GPU and control nodes denied on {', '.join(map(str, here.places))} ({here.how}; "
                     f"descendants cannot allow them){but}")
    else:
        lines.append("    processes outside governor's tasks are NOT kept from GPUs: nowhere to deny them"
                     + ('; gpu_guard = "host" denies them on every top-level cgroup but governor\'s' if kind == "tasks"
                        else ""))
    if kind == "sessions" and not here.places:
        lines.append("    a session process found holding a GPU node is ended and logged instead (every 5 s)")
    lines += [f"    note: {note}" for note in here.notes if not note.startswith('gpu_guard = "tasks"')]
    lines.append("    holding a GPU or control node now (processes outside governor are left alone): "
                 + (", ".join(f"{name or '?'} (pid {pid})" for pid, name in here.held) or "none"))
    return lines


def unit_warnings(config: Config, guard: Version, unit: Path | None = None, kernel: str | None = None) -> list[str]:
    """What the daemon's installed systemd unit lacks for ``config`` on this host, read from
    ``unit`` (default: where ``install-systemd`` writes governor.service) and its drop-ins, on
    cgroups that are ``guard``'s (:data:`governor.cgroups.versions.VERSIONS`: what each version's
    device guard needs). With ``capacity.gpus`` on cgroup v2, the daemon loads a BPF device
    program, which needs CAP_BPF (CAP_SYS_ADMIN stands in on a ``kernel`` release before 5.8;
    default: this host's), and replaces or takes off programs attached earlier (a reload, a
    restart, the GPU guard), which needs CAP_SYS_ADMIN (``BPF_PROG_GET_FD_BY_ID``), both in
    ``CapabilityBoundingSet=``, and ``bpf`` in an allow-list ``SystemCallFilter=``; on v1, the
    kernel takes a ``devices.deny`` line only from CAP_SYS_ADMIN. One warning per missing item,
    naming it and the fix; none when no unit is installed there."""
    from governor.cli.install_systemd import unit_values
    from governor.host.systemd_files import UNIT_DIR

    unit = unit or Path("/") / UNIT_DIR / "governor.service"
    if config.gpus is None or not unit.is_file():
        return []
    release = tuple(int(part) for part in re.findall(r"\d+", kernel or os.uname().release)[:2])
    needed = guard.guard_needs(release)
    why = (f"capacity.gpus on cgroup {guard.mode}: the daemon keeps tasks from other tasks' GPUs with "
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
