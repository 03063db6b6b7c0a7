"""What cgroup setup this host has, and where the calling process sits in it.

Everything is read from ``/proc/<pid>/mountinfo``, ``/proc/<pid>/cgroup`` and
``cgroup.controllers``, whose locations are parameters so tests can use fake trees. The mode is
taken from the mount table rather than from ``statfs`` magic numbers because Python has no
portable ``statfs`` and the mount table also tells where each hierarchy lives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from governor.cgroups.files import read_file
from governor.cgroups.parse import parse_controllers, parse_proc_cgroup
from governor.cgroups.errors import CgroupError, CgroupUnsupported

__all__ = ["Mode", "Mount", "cgroup_dirs", "controller_mount", "host_mode", "own_cgroup", "parse_mountinfo",
           "proc_path", "v1_mounts", "v2_controllers", "v2_mount", "device_guard", "dmem_regions"]

Mode = Literal["unified", "hybrid", "legacy"]

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Superblock options of a v1 cgroup mount that are not controller names.
_V1_NON_CONTROLLER_OPTIONS = {"rw", "ro", "noprefix", "clone_children", "xattr", "cpuset_v2_mode",
                              "favordynmods"}

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One cgroup filesystem mount from ``mountinfo``.

    Attributes:
        mount_point: where it is mounted (``/sys/fs/cgroup/cpu``).
        root: the hierarchy path shown at the mount point (``/`` unless in a container).
        fstype: ``cgroup`` (v1) or ``cgroup2``.
        controllers: v1 controllers bound to this hierarchy (``{"cpu", "cpuacct"}``); empty
            for cgroup2 and for named hierarchies such as ``name=systemd``.
    """

    mount_point: Path
    root: str
    fstype: str
    controllers: frozenset[str]


def _unescape(field: str) -> str:
    # mountinfo octal-escapes space, tab, newline and backslash (\040 ...).
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """Return the ``cgroup`` and ``cgroup2`` mounts listed in a ``mountinfo`` text, in order.

    Raises:
        ValueError: a line lacks the ``-`` separator of the mountinfo format.
    """
    mounts = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split()
        try:
            sep = fields.index("-")
        except ValueError:
            raise ValueError(f"malformed mountinfo line: {line!r}") from None
        fstype, super_options = fields[sep + 1], fields[sep + 3] if len(fields) > sep + 3 else ""
        if fstype not in ("cgroup", "cgroup2"):
            continue
        controllers: frozenset[str] = frozenset()
        if fstype == "cgroup":
            controllers = frozenset(o for o in super_options.split(",")
                                    if o not in _V1_NON_CONTROLLER_OPTIONS and "=" not in o)
        mounts.append(Mount(Path(_unescape(fields[4])), _unescape(fields[3]), fstype, controllers))
    return mounts


def _mounts(proc: Path, pid: int | str) -> list[Mount]:
    return parse_mountinfo(read_file(proc / str(pid), "mountinfo"))


def driver_mode(cgroup_root: Path = CGROUP_ROOT, proc: Path = PROC) -> str:
    """The driver :func:`~governor.cgroups.hierarchy.open_hierarchy` gives this host: ``"v2"``
    on a unified host, ``"v1"`` on a hybrid or legacy one (raises as :func:`host_mode`)."""
    return "v2" if host_mode(cgroup_root, proc) == "unified" else "v1"


def host_mode(cgroup_root: Path = CGROUP_ROOT, proc: Path = PROC) -> Mode:
    """Tell how cgroups are mounted at ``cgroup_root``.

    Returns:
        ``"unified"`` if ``cgroup_root`` itself is cgroup2; ``"hybrid"`` if v1 controllers are
        mounted below it and a cgroup2 hierarchy too (usually ``<root>/unified``);
        ``"legacy"`` if only v1 hierarchies are.

    Raises:
        CgroupReadError: ``<proc>/self/mountinfo`` cannot be read.
        CgroupUnsupported: no cgroup filesystem is mounted at or below ``cgroup_root``.
    """
    below = [m for m in _mounts(proc, "self")
             if m.mount_point == cgroup_root or cgroup_root in m.mount_point.parents]
    if any(m.fstype == "cgroup2" and m.mount_point == cgroup_root for m in below):
        return "unified"
    if any(m.fstype == "cgroup" and m.controllers for m in below):
        return "hybrid" if any(m.fstype == "cgroup2" for m in below) else "legacy"
    raise CgroupUnsupported(f"no cgroup hierarchy mounted at {cgroup_root}", path=str(cgroup_root))


def own_cgroup(pid: int | str = "self", proc: Path = PROC) -> dict[str, str]:
    """Return the cgroup of process ``pid`` per hierarchy, from ``<proc>/<pid>/cgroup``.

    Keys are controller names (``"memory"``; co-mounted ``cpu,cpuacct`` gives both keys),
    named hierarchies (``"name=systemd"``) and ``""`` for cgroup v2. Values are paths relative
    to the hierarchy root (``"/process_api/abc"``).

    Raises:
        CgroupReadError: the file cannot be read (e.g. no such process).
    """
    return parse_proc_cgroup(read_file(proc / str(pid), "cgroup"))


def v2_controllers(cgroup_dir: Path) -> set[str]:
    """Return the controllers available in the v2 cgroup ``cgroup_dir`` (``cgroup.controllers``).

    Raises:
        CgroupReadError: not a v2 cgroup directory.
    """
    return parse_controllers(read_file(cgroup_dir, "cgroup.controllers"))


def v1_mounts(proc: Path = PROC, pid: int | str = "self") -> dict[str, Path]:
    """Return v1 controller → mount point, one key per controller of co-mounted hierarchies
    (``cpu,cpuacct`` mounted once gives ``cpu`` and ``cpuacct`` with the same path).

    Raises:
        CgroupReadError: mountinfo cannot be read.
    """
    return {c: m.mount_point for m in _mounts(proc, pid) if m.fstype == "cgroup"
            for c in sorted(m.controllers)}


def controller_mount(controller: str, mode: str) -> Path:
    """Where ``controller``'s cgroups are on this host when the drivers run in ``mode``: the
    unified root on v2; on v1 its hierarchy's mount point, or where one is usually mounted.

    Raises:
        CgroupReadError: mountinfo cannot be read (v1).
    """
    if mode == "v2":
        return CGROUP_ROOT
    return v1_mounts().get(controller, CGROUP_ROOT / controller)


def v2_mount(proc: Path = PROC, pid: int | str = "self") -> Path | None:
    """Return where the cgroup2 hierarchy is mounted (first mount), or None.

    Raises:
        CgroupReadError: mountinfo cannot be read.
    """
    return next((m.mount_point for m in _mounts(proc, pid) if m.fstype == "cgroup2"), None)


def _relative_to_mount(path: str, mount_root: str) -> str:
    # In a cgroup namespace or bind mount, the mount shows a subtree: strip its root.
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root):]
    return path.lstrip("/")


def proc_path(directory: Path, proc: Path = PROC) -> str | None:
    """Return how ``/proc/<pid>/cgroup`` spells cgroup ``directory`` (``"/governor"`` for
    ``/sys/fs/cgroup/governor``; on v1 for ``/sys/fs/cgroup/cpu,cpuacct/governor``), or None
    when no cgroup mount holds it.

    Raises:
        CgroupReadError: mountinfo cannot be read.
    """
    holders = [m for m in _mounts(proc, "self") if m.fstype in ("cgroup", "cgroup2")
               and (m.mount_point == directory or m.mount_point in directory.parents)]
    if not holders:
        return None
    mount = max(holders, key=lambda m: len(m.mount_point.parts))
    parts = [p for p in (mount.root.strip("/"), str(directory.relative_to(mount.mount_point))) if p not in ("", ".")]
    return "/" + "/".join(parts)


def cgroup_dirs(pid: int | str = "self", proc: Path = PROC) -> dict[str, Path]:
    """Return the directory of process ``pid``'s own cgroup in every mounted hierarchy.

    Keys as in :func:`own_cgroup` (``""`` = the v2 directory); hierarchies listed in
    ``/proc/<pid>/cgroup`` but not mounted are left out. E.g. on a hybrid host
    ``{"memory": Path("/sys/fs/cgroup/memory/process_api/abc"), "": Path("/sys/fs/cgroup/unified"), ...}``.

    Raises:
        CgroupReadError: a ``/proc`` file cannot be read.
    """
    own = own_cgroup(pid, proc)
    dirs: dict[str, Path] = {}
    for m in _mounts(proc, pid):
        keys = [""] if m.fstype == "cgroup2" else sorted(m.controllers)
        for key in keys:
            if key in own and key not in dirs:
                dirs[key] = m.mount_point / _relative_to_mount(own[key], m.root)
    return dirs


def device_guard(proc: Path = PROC, cgroup_root: Path = CGROUP_ROOT) -> str:
    """How this host's cgroups can keep a task from device nodes, in words: the v1 ``devices``
    controller, or (v2) a BPF device program; or why neither works here."""
    from governor.cgroups.device_filter import bpf_device_filter_supported

    if driver_mode(cgroup_root, proc) == "v1":
        if "devices" in v1_mounts(proc):
            return "the cgroup v1 devices controller (devices.deny on each task's cgroup)"
        return "none: the cgroup v1 devices controller is not mounted, so the daemon refuses capacity.gpus"
    problem = bpf_device_filter_supported()
    if problem:
        return f"none: {problem}; the daemon refuses capacity.gpus"
    return "a BPF device program on each task's cgroup (BPF_PROG_TYPE_CGROUP_DEVICE, as systemd's DeviceAllow=)"


def dmem_regions(cgroup_root: Path = CGROUP_ROOT) -> list[str] | None:
    """The device-memory regions the kernel's ``dmem`` controller lists (``dmem.capacity`` at
    the v2 root: ``drm/0000:03:00.0/vram0 8573157376``), or None where there is no such
    controller (before Linux 6.14, or cgroup v1)."""
    try:
        text = read_file(cgroup_root, "dmem.capacity")
    except CgroupError:
        return None
    return [line.strip() for line in text.splitlines() if line.strip()]
