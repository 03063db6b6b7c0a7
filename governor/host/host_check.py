"""What the daemon checks of this host before it makes anything, and the facts ``governor
check-config`` reports of it (the command's words are ``cli/check_config*.py``'s):

* the cgroup version the daemon would drive, as :mod:`governor.cgroups.versions` says what it
  gives (:func:`kernel_here`);
* the capacity after the reserve, each governed block device, the state directory
  (:func:`check_on_this_host`, which ``governor daemon`` runs too, before its start);
* the GPUs ``capacity.gpus`` finds (:func:`gpus_on_this_host`), how the kernel keeps a cgroup
  from a device node and whether it could cap GPU memory (:func:`gpu_kernel_here`), and what
  keeps processes outside governor's tasks from the GPUs (:func:`gpu_guard_here`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

# What a cgroup version gives the daemon: the type kernel_here returns, named here for the cli.
from governor.cgroups.versions import Version

if TYPE_CHECKING:
    from governor.config.load import Config
    from governor.core.gpus import GpuInventory

__all__ = ["DAEMON_UID", "GpuGuardHere", "GpuKernelHere", "Version", "check_on_this_host", "gpu_guard_here",
           "gpu_kernel_here", "gpus_on_this_host", "kernel_here"]

# The daemon runs as root, and trusts only a config root owns (cli/daemon_cmd.py).
DAEMON_UID = 0


def kernel_here() -> Version:
    """What this host's cgroups give the daemon: v2 on a unified host, v1 on a hybrid or legacy
    one (as the daemon drives it); v2 where there are no cgroups (the daemon would refuse to
    start anyway)."""
    from governor.cgroups import detect
    from governor.cgroups.versions import version
    from governor.errors import CgroupError

    try:
        return version(detect.driver_mode())
    except CgroupError:
        return version("v2")


def gpus_on_this_host(config: Config) -> GpuInventory | None:
    """The GPUs ``capacity.gpus`` finds here, or None when no GPU is governed.

    Raises:
        ConfigError: at ``capacity.gpus``, as the daemon would refuse it (NVML missing, a node
            that is not a character device, no GPU found).
    """
    if config.gpus is None:
        return None
    from governor.core.gpus import GpuError
    from governor.errors import ConfigError
    from governor.host.nvml import discover

    try:
        return discover(config.gpus, config.gpu_control)
    except GpuError as error:
        raise ConfigError(config.file, "capacity.gpus", error.reason) from None


def check_on_this_host(config: Config) -> dict[str, float]:
    """What the daemon checks at start against the host, before it makes anything: the
    capacity after the reserve, each governed device, the state directory.

    Returns:
        The capacity the daemon would divide (resource → cores, bytes, bytes/s), and the root's
        cap on each count (``pids``).

    Raises:
        ConfigError: naming the key, as the daemon would refuse it.
    """
    import psutil

    from governor.cgroups.devices import whole_disk
    from governor.config import resources
    from governor.errors import ConfigError, DeviceError, GovernorError
    from governor.host.kernel_limits import process_limit
    from governor.host.task_store import TaskStore

    gpus = gpus_on_this_host(config)
    cpus, memory = float(len(os.sched_getaffinity(0))), psutil.virtual_memory().total
    capacity = config.capacity(cpus, memory, len(gpus.gpus) if gpus else 0)
    # The root's pids.max, as the daemon would write it (a reserve that leaves nothing is refused).
    capacity.update(resources.caps(config, resources.Host(cpus, memory, 0, process_limit())))
    for index, device in enumerate(config.io_devices):
        try:
            whole_disk(device.device)
        except DeviceError as error:
            raise ConfigError(config.file, f"capacity.io[{index}].device", f"{error} (on this host)") from None
    try:
        TaskStore(Path(config.state_dir)).check(owner=DAEMON_UID)
    except GovernorError as error:
        raise ConfigError(config.file, "daemon.state_dir", f"{error} (on this host)") from None
    return capacity


class GpuKernelHere(NamedTuple):
    """How this host's kernel keeps a cgroup from a device node (``guard``: its words, or
    ``unknown (why)``), and the regions its ``dmem`` controller could cap (None: no dmem here,
    Linux 6.14+ on cgroup v2)."""

    guard: str
    dmem_regions: list[str] | None


def gpu_kernel_here() -> GpuKernelHere:
    """:class:`GpuKernelHere` of this host. Never raises."""
    from governor.cgroups.detect import device_guard, dmem_regions
    from governor.errors import CgroupError

    try:
        guard = device_guard()
    except CgroupError as error:
        guard = f"unknown ({error})"
    return GpuKernelHere(guard, dmem_regions())


class GpuGuardHere(NamedTuple):
    """What keeps processes outside governor's tasks from the GPUs on this host.

    Attributes:
        kind: the guard in force: ``capacity.gpu_guard``, ``"tasks"`` where it says
            ``"sessions"`` and sessions are off.
        places: the cgroups the GPU and control nodes are denied on.
        notes: what the plan could not cover, in words.
        how: how the kernel denies them (``devices.deny``; a BPF device program and its name).
        held: ``(pid, process name or None)`` of each process holding a GPU or control node now.
    """

    kind: str
    places: tuple[Path, ...]
    notes: tuple[str, ...]
    how: str
    held: tuple[tuple[int, str | None], ...]


def gpu_guard_here(config: Config, gpus: GpuInventory, kernel: Version) -> GpuGuardHere:
    """:class:`GpuGuardHere` for ``config``'s ``capacity.gpu_guard`` and the GPUs found
    (``gpus``) on this host, whose cgroups are ``kernel``'s. The daemon's root is not known
    here: nothing is left out for holding it."""
    from governor.cgroups.detect import controller_mount
    from governor.cgroups.device_guard import GUARD_NAME, plan_guard
    from governor.host.openfiles import node_holders, process_name

    rules = config.gpu_guard
    kind = "tasks" if rules.kind == "sessions" and not config.sessions.enabled else rules.kind
    mount = controller_mount("devices", kernel.mode)
    plan = plan_guard(kind, rules.parents, mode=kernel.mode, mount=mount, governor_root=Path("/"))
    how = kernel.device_guard + (f" named {GUARD_NAME}" if kernel.guard_is_program else "")
    numbers = {(gpu.major, gpu.minor) for gpu in gpus.gpus} | {(major, minor) for _, major, minor in gpus.control}
    held = tuple((pid, process_name(pid)) for pid in sorted(node_holders(numbers)))
    return GpuGuardHere(kind, tuple(plan.places), tuple(plan.notes), how, held)
