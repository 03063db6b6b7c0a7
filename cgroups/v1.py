"""cgroup v1 driver (legacy and hybrid hosts): the v2 driver's interface over the cpu, cpuacct,
cpuset, memory, blkio and pids hierarchies (devices too where GPUs are governed).

Governor owns one root directory in each hierarchy (e.g. ``/sys/fs/cgroup/cpu/<own>/governor``
and ``/sys/fs/cgroup/memory/<own>/governor``); a cgroup ``rel`` exists once per hierarchy.

Use of cgroupspy: one :class:`cgroupspy.nodes.Node` tree per hierarchy models the cgroups
this driver manages that have children (governor's root, the groups), each node made once and
found again by its path (an index: cgroupspy's own lookups compare full paths with every
sibling, milliseconds per launch at scale). A leaf (a task) is a plain directory until a cgroup
is made below it: five nodes per task held 19 MiB of a daemon with 10,000 tasks. Directories
are made and removed, and values read and written, through :mod:`governor.cgroups.files`
(never cgroupspy's controller properties: those raise bare ``OSError``/``IOError`` without the
value, parse ``-1``/``max`` differently per file and cannot write one ``blkio`` rule per
device), so every failure names path, value and errno.

Limits are diffed against what the kernel accepted (:class:`governor.cgroups.base.DriverBase`)
and written in :data:`governor.cgroups.limits.V1_ORDER`, like the v2 driver.

v1's parent/child rules are kept here, not by callers:

* ``cpuset.cpus``: a child's CPUs must stay within its parent's, and v1 children do not inherit
  (a new cpuset cgroup starts empty and is given a copy). A cgroup's CPUs change in three
  steps so that no write is refused (``EBUSY``): the parent widens to old ∪ new, every child
  takes the new list, the parent narrows to the new list.
* CFS quota: a child's quota may not exceed its parent's, nor a parent's fall below a child's
  (``EINVAL``): a group held to its guarantee keeps its largest task's cap where that is more
  (a group with no quota passes its tasks' caps up to the root), a parent below a new child's
  cap is raised first, a parent raised so comes down in the same plan once its children have,
  a quota an earlier daemon left is read at a cgroup's first plan, and a cgroup gives its quota
  up before it is removed (:mod:`governor.cgroups.v1_quotas`, :mod:`governor.cgroups.nesting`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from cgroupspy.nodes import Node

from governor.cgroups.base import DriverBase
from governor.cgroups.errors import CgroupError, CgroupReadError, CgroupUnsupported, ProcessGone
from governor.cgroups.files import below, list_children, make_dir, read_file, relative_parts, remove_dir, write_file
from governor.cgroups.limits import V1_ORDER, CgroupLimits, diff_writes, v1_files, v1_key, v1_reset
from governor.cgroups.parse import format_cpu_list, parse_cpu_list, parse_pids
from governor.cgroups.stats import CgroupStats
from governor.cgroups.v1_cgroup import (cpu_usage_usec, init_cpuset, memory_cap_bytes, populated_below, read_v1_stats,
                                        reset_devices)
from governor.cgroups.v1_quotas import V1Quotas

__all__ = ["CgroupV1Driver", "REQUIRED_CONTROLLERS"]

log = logging.getLogger(__name__)

REQUIRED_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
# cpuset first: a new cpuset cgroup must get CPUs and memory nodes before a task can join it.
HIERARCHY_ORDER = ("cpuset", "cpu", "cpuacct", "memory", "blkio", "devices", "pids")
# v2 controller names that are spelt differently on v1.
_V1_NAME = {"io": "blkio"}
_COUNTED = ("cpu", "cpuacct", "memory", "blkio", "pids")  # the hierarchies read_stats reads (blkio, pids: where given)


class CgroupV1Driver(DriverBase):
    """Manage cgroups below governor's own root in each v1 hierarchy.

    Args:
        roots: controller → governor's root directory in that controller's hierarchy; co-mounted
            controllers (``cpu,cpuacct``) map to the same directory. ``cpu``, ``cpuacct``,
            ``cpuset`` and ``memory`` are required; ``blkio`` is needed only for ``io_max``,
            ``devices`` only for limits that deny devices (``devices.deny``); ``pids.max`` is
            written where ``pids`` is given (a kernel without that hierarchy has no cap to set).

    Raises:
        CgroupUnsupported: a required controller is missing from ``roots``.
    """

    mode = "v1"

    def __init__(self, roots: Mapping[str, Path]):
        super().__init__()
        missing = [c for c in REQUIRED_CONTROLLERS if c not in roots]
        if missing:
            raise CgroupUnsupported(f"cgroup v1 controller(s) {' '.join(missing)} not given",
                                    path=", ".join(str(p) for p in roots.values()))
        self.roots = dict(roots)
        # One Node tree per distinct root, so co-mounted controllers share it. The tree starts
        # at the root's parent so that the root itself is created by create_cgroup too.
        self._trees: dict[Path, Node] = {}
        # (root, rel) → the Node made for it: a launch finds its group's node at once, not by
        # comparing Nodes (each comparison builds two full paths).
        self._nodes: dict[tuple[Path, str], Node] = {}
        self._cloning: set[tuple[Path, str]] = set()  # (root, rel): new children get its CPUs
        # Ancestors of a root this driver made (systemd delegates no cpuset on v1, so a root
        # below a unit's cgroup lacks its parents there), removed again with the root.
        self._made: dict[Path, list[Path]] = {}
        self._quotas = V1Quotas(lambda rel: self.controller_path("cpu", rel), self._record,
                                lambda rel: self._applied.pop(rel, None))
        for controller in HIERARCHY_ORDER:
            if controller in self.roots:
                root = self.roots[controller]
                self._trees.setdefault(root, Node(os.fsencode(root.parent)))

    def controller_path(self, controller: str, rel: str) -> Path:
        """Return the directory of cgroup ``rel`` in ``controller``'s hierarchy.

        Raises:
            CgroupUnsupported: no root was given for ``controller``.
            ValueError: ``rel`` leaves the root.
        """
        if controller not in self.roots:
            raise CgroupUnsupported(f"cgroup v1 controller {controller} not configured",
                                    path=str(controller))
        return below(self.roots[controller], rel)

    def directory(self, rel: str) -> Path:
        """The directory of cgroup ``rel`` in the cpu hierarchy, for people."""
        return self.controller_path("cpu", rel)

    def memory_directory(self, rel: str) -> Path:
        """The directory of cgroup ``rel`` in the memory hierarchy."""
        return self.controller_path("memory", rel)

    def pids_directory(self, rel: str) -> Path | None:
        """The directory of cgroup ``rel`` in the pids hierarchy; None where it is not mounted."""
        return self.controller_path("pids", rel) if "pids" in self.roots else None

    def create(self, rel: str) -> None:
        """Create cgroup ``rel`` and every missing ancestor, the root included, in every
        hierarchy (idempotent). New cpuset cgroups get their parent's ``cpuset.cpus`` and
        ``cpuset.mems`` (v1 starts them empty and a task cannot join an empty cpuset:
        ``ENOSPC``): the root as a copy, the cgroups below it from the kernel
        (``cgroup.clone_children`` on their parent).

        Raises:
            CgroupError: mkdir failed (path and errno in the error).
            CgroupWriteError: initialising the cpuset failed.
        """
        parts = relative_parts(rel)
        for root, tree in self._trees.items():
            node = tree
            for depth, part in enumerate((root.name, *parts)):
                key = (root, "/".join(parts[:depth]))
                known = self._nodes.get(key)
                if known is None:
                    cpuset = root == self.roots["cpuset"]
                    if cpuset and depth:  # below governor's root: the kernel copies the parent's
                        self._clone_children(node, (root, "/".join(parts[:depth - 1])))
                    if depth == len(parts) > 0:  # the leaf: no node (module docstring)
                        if make_dir(root.joinpath(*parts)) and root == self.roots.get("cpu"):
                            self._quotas.made(rel)
                        break
                    if not depth:
                        self._make_ancestors(root, cpuset)
                    known, made = self._create_child(node, part)
                    self._nodes[key] = known
                    if made and root == self.roots.get("cpu"):
                        self._quotas.made(key[1])
                    if cpuset and not depth:  # the root's parent is not governor's to change
                        init_cpuset(Path(os.fsdecode(known.full_path)))
                node = known

    def remove(self, rel: str) -> None:
        """Remove the leaf cgroup ``rel`` (``""`` = the root) from every hierarchy; already
        gone is not an error. Its record stays until :meth:`forget` (on the record's thread).

        Raises:
            CgroupBusy: it holds processes or child cgroups.
            CgroupError: it cannot be removed otherwise.
        """
        for root in reversed(self._trees):
            remove_dir(below(root, rel))
            if not relative_parts(rel):
                for made in reversed(self._made.pop(root, [])):
                    try:
                        remove_dir(made)
                    except CgroupError:
                        break  # another's now
            key = (root, "/".join(relative_parts(rel)))
            self._cloning.discard(key)
            node = self._nodes.pop(key, None)
            if node is not None:  # by identity: Node's == builds both full paths
                node.parent.children = [child for child in node.parent.children if child is not node]

    def children(self, rel: str = "") -> list[str]:
        """Return the names of the child cgroups of ``rel`` (from the cpu hierarchy), sorted.

        Raises:
            CgroupReadError: the cgroup cannot be listed.
        """
        return list_children(self.controller_path("cpu", rel))

    def enable_controllers(self, rel: str, controllers: Iterable[str]) -> None:
        """Nothing to enable on v1 (every hierarchy has its controller everywhere); only checks
        that each controller (v2 names: ``io`` = ``blkio``) has a configured hierarchy.

        Raises:
            CgroupUnsupported: a controller has no configured hierarchy.
        """
        relative_parts(rel)
        for controller in controllers:
            self.controller_path(_V1_NAME.get(controller, controller), "")

    def _apply_one(self, rel: str, limits: CgroupLimits) -> tuple[list[str], list[CgroupError]]:
        last = self._record(rel)
        if limits.cpu_quota_usec is not None:
            limits = self._quotas.nested(rel, limits)
        elif "cpu" in self.roots:
            self._quotas.adopt(rel, last)
        desired = [(v1_key(c, f, v), v) for c, f, v in v1_files(limits) if c != "pids" or "pids" in self.roots]
        written, errors = [], []
        if ("devices" in self.roots and not limits.devices_denied and self._devices_unknown(rel)
                and not any(key[1] == "devices.deny" for key in last)):
            try:  # nothing to deny: the diff would leave an earlier daemon's devices.deny lines
                reset_devices(self.controller_path("devices", rel))
                self._devices_unknown(rel, known=True)
            except CgroupError as error:
                errors.append(error)
        for key, value in diff_writes(desired, last, rank=lambda k: V1_ORDER.index(k[:2])):
            controller, file, _ = key
            try:
                directory = self.controller_path(controller, rel)  # devices: raises without that hierarchy
                if value is None and file == "devices.deny":  # the rule no longer denied is allowed again
                    file, target = "devices.allow", last[key]
                else:
                    target = v1_reset(controller, file, last[key]) if value is None else value
                if target is None:  # cpuset.cpus back to the parent's CPUs
                    target = read_file(directory.parent, file).strip()
                if file == "cpuset.cpus":
                    self._set_cpus(directory, target)
                else:
                    write_file(directory, file, target)
            except CgroupError as error:
                errors.append(error)
                if error.vanished:
                    break
                continue
            if value is None:
                del last[key]
            else:
                last[key] = value
            written.append(file)
        if written:
            log.debug("applied %s to %s", ", ".join(written), rel or "<root>")
        self._quotas.written(rel, last)
        return written, errors

    def forget(self, rel: str) -> None:
        super().forget(rel)
        self._quotas.forget(rel)

    def _as_asked(self, rel: str) -> bool:
        return self._quotas.as_asked(rel)

    def _again(self, planned: Mapping[str, CgroupLimits], refused: Mapping[str, list[CgroupError]]) -> list[str]:
        return self._quotas.again(planned, refused)

    def _set_cpus(self, directory: Path, cpus: str) -> None:
        """Give ``directory`` (and every cpuset below it) the CPU list ``cpus`` without a
        refused write: widen to old ∪ new, set the children, then narrow (module docstring)."""
        old = parse_cpu_list(read_file(directory, "cpuset.cpus"))
        new = parse_cpu_list(cpus)
        widest = old | new
        if widest != old:
            write_file(directory, "cpuset.cpus", format_cpu_list(widest))
        for child in list_children(directory):
            self._set_cpus(directory / child, cpus)
        if widest != new:
            write_file(directory, "cpuset.cpus", cpus)

    def device_guard_problem(self) -> str | None:
        """Why limits that deny devices cannot be applied: no devices hierarchy was given, or None."""
        if "devices" not in self.roots:
            return ("the cgroup v1 devices controller is not mounted here, or the daemon started without "
                    "capacity.gpus (restart it to govern GPUs)")
        return None

    def move(self, rel: str, pid: int) -> None:
        """Move process ``pid`` (all its threads) into cgroup ``rel`` in every hierarchy, cpuset first.

        Raises:
            ProcessGone: there is no such process (it exited meanwhile).
            CgroupWriteError: refused otherwise, e.g. ``ENOSPC`` (empty cpuset), ``ENOENT``
                (``rel`` vanished).
        """
        for root in self._trees:
            write_file(below(root, rel), "cgroup.procs", str(pid))

    def pids(self, rel: str) -> list[int]:
        """The pids in cgroup ``rel`` itself in any hierarchy, sorted (one that joined since lacks
        them until :meth:`rejoin`). Raises CgroupReadError: in no hierarchy (``vanished``), or unreadable."""
        return sorted(set().union(*filter(None, self._procs(rel).values())))

    def rejoin(self, rel: str, leave: Callable[[int], bool] | None = None) -> list[int]:
        """Put every process of cgroup ``rel`` (in any hierarchy) into ``rel`` in each
        hierarchy, made where missing: one that joined since they started (``devices``, a
        daemon restarted to govern GPUs) holds none, and its rules would hold nobody. A
        process ``leave(pid)`` tells to leave (another manager's since: a Slurm job adopted
        it) stays where it is in every hierarchy.
        Returns the pids moved into some hierarchy, sorted (not one that exited meanwhile).

        Raises:
            CgroupError: ``rel`` is in no hierarchy (``vanished``), cannot be made or read, or a move was refused.
        """
        inside = self._procs(rel)
        if None in inside.values():
            self.create(rel)  # only then: a mkdir, even of one that exists, takes cgroup_mutex
        moved, every = set(), set().union(*filter(None, inside.values()))
        lacking = every - set.intersection(*(there or set() for there in inside.values()))
        left = {pid for pid in lacking if leave is not None and leave(pid)}
        for root, there in inside.items():
            for pid in sorted(every - (there or set()) - left):
                with contextlib.suppress(ProcessGone):  # it exited meanwhile
                    write_file(below(root, rel), "cgroup.procs", str(pid))
                    moved.add(pid)
        return sorted(moved)

    def _procs(self, rel: str) -> dict[Path, set[int] | None]:
        """Root → the pids in ``rel`` in its hierarchy, None where ``rel`` is missing (raises
        CgroupReadError: missing from every one, ``vanished``; or a read failed)."""
        found: dict[Path, set[int] | None] = dict.fromkeys(self._trees)
        for root in self._trees:
            try:
                found[root] = set(parse_pids(read_file(below(root, rel), "cgroup.procs")))
            except CgroupReadError as error:
                if not error.vanished:
                    raise
                missing = error
        if all(pids is None for pids in found.values()):
            raise missing
        return found

    def _read_stats(self, rel: str, peak: bool) -> CgroupStats:
        """Sample cgroup ``rel`` (:func:`~governor.cgroups.v1_cgroup.read_v1_stats`; raises CgroupReadError)."""
        return read_v1_stats({c: self.controller_path(c, rel) for c in _COUNTED if c in self.roots}, peak)

    def cpu_usage_usec(self, rel: str) -> int:
        """``cpuacct.usage`` of cgroup ``rel``, ns → µs (raises CgroupReadError)."""
        return cpu_usage_usec(self.controller_path("cpuacct", rel))

    def memory_cap_bytes(self, rel: str) -> int | None:
        """:func:`~governor.cgroups.v1_cgroup.memory_cap_bytes` of ``rel`` (raises CgroupReadError)."""
        return memory_cap_bytes(self.controller_path("memory", rel))

    def populated(self, rel: str) -> bool:
        """Whether cgroup ``rel`` or one below it holds a process, from the cpu hierarchy alone: a
        process joins every hierarchy at once (every exit and every reconcile asks). Raises
        CgroupReadError: it cannot be read (``vanished``: it is gone)."""
        return populated_below(self.controller_path("cpu", rel))

    @staticmethod
    def _create_child(node: Node, name: str) -> tuple[Node, bool]:
        """What ``Node.create_cgroup`` does, less its duplicate check, which compares full
        paths with every sibling (3 ms per launch beside 30 siblings); the index rules a
        duplicate out. An existing directory (a restart) is taken as it is. Returns the node
        and whether its directory was made here."""
        child = Node(os.fsencode(name), parent=node)
        made = make_dir(Path(os.fsdecode(child.full_path)))
        node.children.append(child)
        return child, made

    def _make_ancestors(self, root: Path, cpuset: bool) -> None:
        """Make the missing ancestors of ``root`` (their cpusets as their parents'), top down.

        Raises:
            CgroupError: mkdir failed; CgroupWriteError: a cpuset could not be set.
        """
        missing = [a for a in root.parents if not a.exists()]
        for ancestor in reversed(missing):
            make_dir(ancestor)
            self._made.setdefault(root, []).append(ancestor)
            if cpuset:
                init_cpuset(ancestor)

    def _clone_children(self, node: Node, key: tuple[Path, str]) -> None:
        """Have the kernel give new children of cpuset cgroup ``node`` its ``cpuset.cpus`` and
        ``cpuset.mems`` (``cgroup.clone_children``): two writes saved per launch, and a write
        to ``cpuset.cpus`` is among the dearest of cgroupfs."""
        if key not in self._cloning:
            write_file(Path(os.fsdecode(node.full_path)), "cgroup.clone_children", "1")
            self._cloning.add(key)
