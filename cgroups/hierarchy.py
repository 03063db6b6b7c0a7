"""Where governor's cgroups live on this host, and the driver that writes them.

``--cgroup-root`` (default ``governor``): a relative path is taken below the daemon's own cgroup
in every hierarchy (DESIGN.md §8: without systemd the root is a child of the daemon's cgroup);
an absolute path is a path in the cgroup tree, as ``/proc/<pid>/cgroup`` spells it, the same on
v2 and v1 (``/governor.slice/x`` → ``/sys/fs/cgroup/governor.slice/x`` on v2,
``/sys/fs/cgroup/cpu/governor.slice/x``, … on v1), so one systemd unit serves both; on v2 a
directory under the cgroup mount (``/sys/fs/cgroup/governor``) is taken as it is too.

On a unified (v2) host the daemon first moves itself into a leaf ``daemon`` of its own cgroup
(unless that is the hierarchy's root), because a cgroup whose children use controllers may
hold no processes (the no-internal-process rule). Hybrid and legacy hosts use the v1 driver.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from governor.cgroups import detect, devices
from governor.cgroups.base import ApplyReport
from governor.cgroups.device_guard import GuardPlan, plan_guard
from governor.cgroups.driver import Driver
from governor.cgroups.errors import CgroupError, CgroupUnsupported
from governor.cgroups.limits import CgroupLimits
from governor.cgroups.versions import version
from governor.cgroups.locks import LockHeld, claims, lock_directory, release, take
from governor.cgroups.logind import is_login_slice, login_uid
from governor.cgroups.pressure import psi_unavailable
from governor.cgroups.stats import CgroupStats
from governor.cgroups.systemd import SliceDriver, systemd_slices, units_above
from governor.cgroups.v1 import CgroupV1Driver
from governor.cgroups.v2 import CgroupV2Driver, move_self_to_leaf

V2_CONTROLLERS = ("cpu", "cpuset", "memory", "io", "pids")
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "blkio")
V1_OPTIONAL = ("pids",)  # joined where mounted


class Location(NamedTuple):
    """Where a process is: ``rel``, its cgroup relative to governor's root (``""``: the root
    itself; None: outside it), ``login_uid``, the uid whose systemd user slice
    (``/user.slice/user-<uid>.slice/…``, where logind tracks that user's sessions) it is in,
    or None, and ``paths``, its ``/proc/<pid>/cgroup`` (hierarchy key → path; None where not
    read), which tells whether another daemon's root holds it."""

    rel: str | None
    login_uid: int | None
    paths: Mapping[str, str] | None = None


@dataclass
class Hierarchy:
    """The cgroup hierarchy governor writes to, and the one way to it from above ``cgroups/``.

    A cgroup is named relative to governor's root (``"physics/task-7"``), or, for a user's
    login slice, relative to the cgroup v2 mount (``"user.slice/user-1000.slice"``,
    :mod:`governor.cgroups.logind`): the methods that take a name route a login slice to
    ``slices`` (its limits set through systemd) and everything else to ``driver``.

    Attributes:
        driver: the driver rooted at governor's root (:class:`~governor.cgroups.driver.Driver`).
        root: governor's root, for people (one path on v2; the cpu hierarchy's on v1).
        controllers: what to enable below the root (v2).
        cgroup_mount: where the cgroup filesystems are mounted.
        proc_key, proc_root: the line of ``/proc/<pid>/cgroup`` that tells where a process is
            (``""``: v2's ``0::``; v1: the cpu hierarchy's), and governor's root as spelled
            there (None: unknown, no process is ever found inside).
        slices: logind's user slices, on a systemd host with cgroup v2; None elsewhere (a
            process in its login slice is then left where it is).
        no_psi: why this host's cgroups have no pressure stall information, one sentence
            (:func:`~governor.cgroups.pressure.psi_unavailable`); None where they have it.
        lock: the root's lock file and the descriptor holding it (:func:`hold_root`), given up
            by :meth:`release_lock` at the daemon's stop; None where none was taken.
        hierarchies: the keys of ``/proc/<pid>/cgroup`` naming the hierarchies the driver
            writes (``("",)``: v2; v1: each controller with a root), where foreign subtrees
            are looked for too (:mod:`governor.cgroups.foreign_subtrees`).
    """

    driver: Driver
    root: str
    controllers: tuple[str, ...]
    cgroup_mount: Path = Path("/sys/fs/cgroup")
    proc_key: str = ""
    proc_root: str | None = None
    slices: SliceDriver | None = None
    no_psi: str | None = None
    lock: tuple[Path, int] | None = None
    hierarchies: tuple[str, ...] = ("",)

    def release_lock(self) -> None:
        """Give up the root's lock and remove its file (a daemon's last step: no lock file of a
        stopped daemon is left in ``/run/governor/locks``)."""
        if self.lock is not None:
            release(*self.lock)
            self.lock = None

    @property
    def mode(self) -> str:
        """``"v2"`` or ``"v1"``, for people and status."""
        return self.driver.mode

    @property
    def memory_high_throttles(self) -> bool:
        """Whether a soft memory limit throttles a task at its value on this host
        (:attr:`~governor.cgroups.versions.Version.memory_high_throttles`)."""
        return version(self.mode).memory_high_throttles

    def prepare(self, rel: str) -> None:
        """Create cgroup ``rel`` (and its group) with the controllers enabled down to it. Takes
        the kernel's ``cgroup_mutex``: may run on a thread of its own. Its limits, device rules
        included, are :meth:`apply`'s, before any process joins it.

        Raises:
            CgroupError: creation failed; CgroupUnsupported: a controller is missing.
        """
        self.driver.create(rel)
        self.driver.enable_controllers(rel, self.controllers)

    def device_guard_problem(self) -> str | None:
        """Why this host's cgroups cannot keep a task from device nodes, or None."""
        return self.driver.device_guard_problem()

    def path(self, rel: str) -> Path:
        """Directory of cgroup ``rel`` (in the cpu hierarchy on v1)."""
        return self._of(rel).directory(rel)

    def memory_path(self, rel: str) -> Path:
        """Directory of cgroup ``rel`` where its memory files are (the memory hierarchy on v1)."""
        return self._of(rel).memory_directory(rel)

    def apply(self, rel: str, limits: CgroupLimits) -> list[str]:
        """:meth:`Driver.apply <governor.cgroups.driver.Driver.apply>` on ``rel``'s driver."""
        return self._of(rel).apply(rel, limits)

    def apply_plan(self, planned: Mapping[str, CgroupLimits]) -> ApplyReport:
        """:meth:`Driver.apply_plan <governor.cgroups.driver.Driver.apply_plan>`, login slices
        through systemd after governor's own cgroups."""
        logins = {rel: limits for rel, limits in planned.items() if self.slices is not None and is_login_slice(rel)}
        report = self.driver.apply_plan({rel: limits for rel, limits in planned.items() if rel not in logins})
        if logins:
            more = self.slices.apply_plan(logins)
            report.written += more.written
            report.errors += more.errors
        return report

    def in_force(self, rel: str) -> dict[str, str]:
        """What the kernel (or systemd) accepted in ``rel``: file or property → value."""
        return self._of(rel).in_force(rel)

    def read_stats(self, rel: str, *, peak: bool = False) -> CgroupStats:
        """One sample of ``rel``'s counters (raises CgroupReadError)."""
        return self._of(rel).read_stats(rel, peak=peak)

    def cpu_usage_usec(self, rel: str) -> int:
        """``rel``'s cumulative CPU counter, µs, one file read (raises CgroupReadError)."""
        return self._of(rel).cpu_usage_usec(rel)

    def populated(self, rel: str) -> bool:
        """Whether ``rel`` or a cgroup below it holds a process (raises CgroupReadError)."""
        return self._of(rel).populated(rel)

    def pids(self, rel: str) -> list[int]:
        """The processes in ``rel`` itself (raises CgroupReadError)."""
        return self._of(rel).pids(rel)

    def pids_full(self, rel: str) -> bool:
        """:meth:`Driver.pids_full <governor.cgroups.driver.Driver.pids_full>` of governor's
        cgroup ``rel``: whether a fork in it fails now (two reads; the cgroup thread may ask)."""
        return self.driver.pids_full(rel)

    def events_path(self, rel: str) -> Path | None:
        """The file whose change says ``rel`` emptied, or None (v1: watch a pid instead)."""
        return self._of(rel).events_path(rel)

    def release_login(self, rel: str, limits: CgroupLimits | None = None) -> None:
        """Reset the properties governor set on login slice ``rel`` and those ``limits`` set
        (an earlier daemon's caps; the slice is systemd's: it stays). Raises CgroupWriteError
        when systemctl refuses."""
        self.slices.reset(rel, limits)

    def children(self, rel: str = "") -> list[str]:
        """The names of governor's cgroup ``rel``'s child cgroups, sorted (raises CgroupReadError)."""
        return self.driver.children(rel)

    def memory_cap_bytes(self, rel: str) -> int | None:
        """:meth:`Driver.memory_cap_bytes <governor.cgroups.driver.Driver.memory_cap_bytes>` of
        governor's cgroup ``rel``: bytes, None where none is set."""
        return self.driver.memory_cap_bytes(rel)

    def move(self, rel: str, pid: int) -> None:
        """:meth:`Driver.move <governor.cgroups.driver.Driver.move>`: process ``pid`` and its
        threads into governor's cgroup ``rel`` (takes ``cgroup_mutex``)."""
        self.driver.move(rel, pid)

    def rejoin(self, rel: str, leave: Callable[[int], bool] | None = None) -> list[int]:
        """:meth:`Driver.rejoin <governor.cgroups.driver.Driver.rejoin>` on governor's cgroup
        ``rel``: the pids put into the hierarchies that lacked them."""
        return self.driver.rejoin(rel, leave)

    def kill(self, rel: str) -> int:
        """:meth:`Driver.kill <governor.cgroups.driver.Driver.kill>`: SIGKILL every process in
        governor's cgroup ``rel`` and below; how many were signalled (0: unknown)."""
        return self.driver.kill(rel)

    def remove(self, rel: str) -> None:
        """:meth:`Driver.remove <governor.cgroups.driver.Driver.remove>` of governor's cgroup
        ``rel`` (``""``: the root; raises CgroupBusy while it holds something)."""
        self.driver.remove(rel)

    def forget(self, rel: str) -> None:
        """Drop the driver's record of governor's cgroup ``rel`` (what it wrote there)."""
        self.driver.forget(rel)

    def guard_plan(self, kind: str, parents: tuple[str, ...]) -> GuardPlan:
        """Where ``[capacity] gpu_guard = kind`` goes in the hierarchy this host guards devices
        with (:func:`~governor.cgroups.device_guard.plan_guard`): the cgroup v2 mount, or v1's
        ``devices`` hierarchy, leaving out governor's root and the daemon's own cgroup there."""
        if self.mode == "v2":
            return plan_guard(kind, parents, mode="v2", mount=self.cgroup_mount,
                              governor_root=Path(self.root), daemon_cgroup=_own_cgroup(""))
        mount = detect.v1_mounts().get("devices")
        root = getattr(self.driver, "roots", {}).get("devices")
        if mount is None or root is None:
            return GuardPlan("v1", (), ("the v1 devices controller is not mounted, or governor's root has no devices "
                                        "cgroup: processes outside governor's tasks are not kept from GPUs",))
        return plan_guard(kind, parents, mode="v1", mount=mount, governor_root=Path(root),
                          daemon_cgroup=_own_cgroup("devices"))

    def systemd_units(self, own: Collection[str]) -> tuple[list[str], SliceDriver | None]:
        """The units of ``own`` above governor's root (:func:`~governor.cgroups.systemd.units_above`)
        and the driver that sets their properties through systemd, when systemd manages a v2
        host (:func:`~governor.cgroups.systemd.systemd_slices`); ``([], None)`` elsewhere."""
        units = units_above(Path(self.root), self.cgroup_mount, own) if self.mode == "v2" else []
        return units, systemd_slices(self.mode, self.cgroup_mount) if units else None

    def _of(self, rel: str) -> Driver | SliceDriver:
        return self.slices if self.slices is not None and is_login_slice(rel) else self.driver

    def locate(self, pid: int, proc: Path = Path("/proc")) -> Location:
        """Where process ``pid`` is (one read of ``/proc/<pid>/cgroup``).

        Raises:
            CgroupReadError: the file cannot be read (``vanished``: no such process).
        """
        paths = detect.own_cgroup(pid, proc)
        path = paths.get(self.proc_key)
        login = login_uid(paths.get("name=systemd", paths.get("")) or "")
        if path is None or self.proc_root is None:
            return Location(None, login, paths)
        if path == self.proc_root:
            return Location("", login, paths)
        prefix = self.proc_root.rstrip("/") + "/"
        return Location(path[len(prefix):] if path.startswith(prefix) else None, login, paths)

    def io_sharing(self, disk: str) -> str:
        """How a guarantee on whole disk ``disk`` is enforced here (:func:`governor.cgroups.devices.io_sharing`)."""
        return devices.io_sharing(disk, mode=self.mode, cgroup_mount=self.cgroup_mount)


def _own_cgroup(hierarchy: str) -> Path | None:
    """The directory of this daemon's own cgroup in ``hierarchy`` (``""``: cgroup v2,
    ``"devices"``), which the guard must leave alone (:func:`plan_guard`); None where
    ``/proc/self/cgroup`` does not say (then nothing is left out for it)."""
    try:
        return detect.cgroup_dirs().get(hierarchy)
    except CgroupError:
        return None


def root_lock(directory: Path, locks: Path | None = None) -> Path:
    """The lock file of cgroup root ``directory``: ``root-<digest of its real path>.lock`` in
    ``locks`` (default :func:`~governor.cgroups.locks.lock_directory`)."""
    key = hashlib.sha256(os.path.realpath(directory).encode()).hexdigest()[:16]
    return (locks or lock_directory()) / f"root-{key}.lock"


def hold_root(directory: Path, locks: Path | None = None) -> int:
    """Take the lock that makes a daemon the only one writing below ``directory``: an exclusive
    ``flock`` on ``root-<digest of the path>.lock`` in ``locks`` (default
    :func:`~governor.cgroups.locks.lock_directory`: ``/run/governor/locks`` for root), a
    directory no other user may open, so no user can hold it to keep the daemon from starting.
    Held until the process exits, ``kill -9`` included; one a dead daemon's forked child kept is
    taken over (:mod:`governor.cgroups.locks`).

    Returns:
        The descriptor holding the lock (left open on purpose).

    Raises:
        CgroupError: another live process holds it: a second daemon on the same ``--cgroup-root``.
        GovernorError: the lock directory is not private to this user (naming it).
    """
    own = root_lock(directory, locks)
    try:
        fd = take(own, {"root": str(directory)})
    except LockHeld as held:
        who = f" (pid {held.pid})" if held.pid else ""
        raise CgroupError(f"another governor daemon{who} already governs {directory}: stop it, or give this one "
                          "another --cgroup-root", path=str(directory)) from None
    # A root inside another daemon's, or holding one: the outer daemon's pass over its tree took
    # the inner one's task as an unrecorded one of its own, stopped it and removed its root.
    mine = Path(os.path.realpath(directory))
    for path, holder in claims(own.parent, "root-*.lock"):
        theirs = holder.get("claim", {}).get("root") if isinstance(holder.get("claim"), dict) else None
        if path == own or not isinstance(theirs, str):
            continue
        other = Path(os.path.realpath(theirs))
        if other in mine.parents or mine in other.parents:
            release(own, fd)
            where = "holds" if mine in other.parents else "lies inside"
            raise CgroupError(f"another governor daemon (pid {holder.get('pid')}) governs {other}, which {directory} "
                              f"{where}: one daemon's tree may not hold another's; give this one another "
                              "--cgroup-root", path=str(directory))
    return fd


def _missing_controller(needed: str, root: Path, cgroup_mount: Path, *, relative: bool) -> str:
    """Why v2 controller ``needed`` cannot be had at ``root``, and what to do: a cgroup has a
    controller only where its parent enables it for its children (``cgroup.subtree_control``)."""
    where = root.parent
    if where == cgroup_mount:
        return f"cgroup v2 controller {needed} is not available in {where}: this kernel does not have it"
    reason = (f"cgroup v2 controller {needed} is not available in {where}: its parent {where.parent} does not "
              f"delegate it ({needed} is not in {where.parent / 'cgroup.subtree_control'})")
    if relative:
        return (f"{reason}. A relative --cgroup-root is made below the daemon's own cgroup; give an absolute "
                f"one whose parent has {needed} (e.g. --cgroup-root /governor), or run the daemon from its "
                "systemd unit (governor install-systemd), whose cgroup systemd delegates every controller")
    return f"{reason}: enable it there, or give another --cgroup-root"


def open_hierarchy(cgroup_root: str = "governor", *, cgroup_mount: Path = Path("/sys/fs/cgroup"),
                   proc: Path = Path("/proc"), devices: bool = False) -> Hierarchy:
    """Detect the host's cgroup mode, choose its driver (v2 or v1; systemd's user slices on a
    systemd host with cgroup v2), and create governor's root there. With ``devices`` (GPUs
    are governed), a v1 host's devices hierarchy is used too (v2 guards devices with BPF).

    Raises:
        CgroupUnsupported: no usable hierarchy, or a controller governor needs is missing.
        CgroupError: the root cannot be created, the daemon cannot move into its leaf, or
            another daemon governs the same root (:func:`hold_root`).
        GovernorError: the directory of the root's lock is not private to root (:func:`hold_root`).
    """
    mode = detect.host_mode(cgroup_mount, proc)
    own = detect.cgroup_dirs("self", proc)
    if mode == "unified":
        base = own[""]
        if cgroup_root.startswith(str(cgroup_mount) + "/"):
            root = Path(cgroup_root)
        elif cgroup_root.startswith("/"):
            root = cgroup_mount / cgroup_root.lstrip("/")
        else:
            if base != cgroup_mount:
                move_self_to_leaf(base, "daemon")
            root = base / cgroup_root
        available = detect.v2_controllers(root.parent)
        controllers = tuple(c for c in V2_CONTROLLERS if c in available)
        for needed in ("cpu", "memory"):
            if needed not in controllers:
                why = _missing_controller(needed, root, cgroup_mount, relative=not cgroup_root.startswith("/"))
                raise CgroupUnsupported(why, path=str(root.parent / "cgroup.controllers"))
        driver = CgroupV2Driver(root)
        driver.create("")
        lock = (root_lock(root), hold_root(root))
        try:
            driver.delegate_root(controllers)
        except BaseException:  # a refused start leaves no lock behind (its root: the caller's)
            release(*lock)
            raise
        no_psi = psi_unavailable("v2", root)
        driver.psi = no_psi is None
        return Hierarchy(driver, str(root), controllers, cgroup_mount, "", detect.proc_path(root, proc),
                         systemd_slices("v2", cgroup_mount), no_psi, lock)

    mounts = detect.v1_mounts(proc)
    roots = {}
    # pids where the kernel has it (Linux ≥ 4.3): every cgroup's pids.max (DESIGN.md §3).
    wanted = (*V1_CONTROLLERS, *V1_OPTIONAL, *(("devices",) if devices else ()))
    for controller in wanted:
        if controller in mounts:
            base = Path(str(mounts[controller]) + cgroup_root) if cgroup_root.startswith("/") else own[controller] / cgroup_root
            roots[controller] = base
    driver = CgroupV1Driver(roots)
    driver.create("")
    shown = roots.get("cpu", next(iter(roots.values())))
    lock = (root_lock(shown), hold_root(shown))
    controllers = (*V1_CONTROLLERS, *(c for c in V1_OPTIONAL if c in roots))
    return Hierarchy(driver, str(shown), controllers, cgroup_mount, "cpu" if "cpu" in roots else "",
                     detect.proc_path(shown, proc), no_psi=psi_unavailable("v1", shown), lock=lock,
                     hierarchies=tuple(roots))
