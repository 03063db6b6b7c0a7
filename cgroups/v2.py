"""cgroup v2 driver: create, limit, populate and observe cgroups under a root governor owns.

The driver is the single writer below its root (design §3): it remembers what the kernel
accepted in each cgroup (:class:`governor.cgroups.base.DriverBase`) and :meth:`CgroupV2Driver.apply` writes
only the files whose value changed, in the order of :data:`governor.cgroups.limits.V2_ORDER`. All file access goes through
:mod:`governor.cgroups.files`; cgroups are named by paths relative to the root (``"physics/task-7"``,
``""`` = the root itself).

Log levels follow systemd: a write that fails with ``ENOENT`` means the cgroup vanished (its
task exited and it was removed) and is logged at DEBUG; the error is raised either way.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from governor.cgroups.base import DriverBase
from governor.cgroups.device_filter import attach_deny_program, bpf_device_filter_supported
from governor.cgroups.device_rules import devices_text
from governor.cgroups.errors import CgroupError, CgroupReadError, CgroupUnsupported, CgroupWriteError
from governor.cgroups.files import below, list_children, make_dir, read_file, relative_parts, remove_dir, write_file
from governor.cgroups.limits import V2_DEVICE_PROGRAM, V2_ORDER, CgroupLimits, diff_writes, v2_files, v2_key, v2_reset
from governor.cgroups.parse import (parse_cgroup_events, parse_controllers, parse_flat_keyed, parse_int, parse_max,
                                    parse_nested_keyed, parse_pids)
from governor.cgroups.pressure import read_pressure
from governor.cgroups.stats import MEMORY_EVENT_KEYS, CgroupStats

__all__ = ["CgroupV2Driver", "move_self_to_leaf"]

log = logging.getLogger(__name__)


def move_self_to_leaf(cgroup_dir: Path, leaf: str = "leaf") -> Path:
    """Move the calling process into ``cgroup_dir/leaf`` (created if needed) and return it.

    A v2 cgroup whose children have controllers may hold no processes itself (the
    no-internal-process rule; the root is exempt), so a process must leave its cgroup before
    enabling controllers there. Only the caller is moved: governor never moves processes it
    did not start.

    Raises:
        CgroupError: the leaf cannot be created.
        CgroupWriteError: the move was refused.
    """
    target = cgroup_dir / leaf
    make_dir(target)
    write_file(target, "cgroup.procs", str(os.getpid()))
    return target


class CgroupV2Driver(DriverBase):
    """Manage cgroups below ``root``, a cgroup v2 directory governor owns.

    Args:
        root: the cgroup directory, e.g. ``/sys/fs/cgroup/governor.slice/governor-tasks.service/governed``.
    """

    mode = "v2"

    def __init__(self, root: Path):
        super().__init__()
        self.root = root
        self._bpf_usable: bool | None = None  # whether device programs can be attached here: asked once
        # Whether samples read the pressure files: off where the host has no PSI (open_hierarchy asks once).
        self.psi = True

    def path(self, rel: str) -> Path:
        """Return the directory of cgroup ``rel``.

        Raises:
            ValueError: ``rel`` leaves the root.
        """
        return below(self.root, rel)

    def directory(self, rel: str) -> Path:
        """The directory of cgroup ``rel`` (as :meth:`path`)."""
        return self.path(rel)

    def create(self, rel: str) -> None:
        """Create cgroup ``rel`` and every missing ancestor, the root included (idempotent;
        the root's parent must exist).

        Raises:
            CgroupError: mkdir failed (path and errno in the error).
        """
        directory = self.root.parent
        for part in (self.root.name, *relative_parts(rel)):
            directory = directory / part
            if make_dir(directory):
                log.debug("created cgroup %s", directory)

    def remove(self, rel: str) -> None:
        """Remove the leaf cgroup ``rel`` (``""`` = the root); a cgroup already gone is not an
        error. Its record stays until :meth:`forget` (on the record's thread).

        Raises:
            CgroupBusy: it holds processes or child cgroups.
            CgroupError: it cannot be removed otherwise.
        """
        if remove_dir(self.path(rel)):
            log.debug("removed cgroup %s", self.path(rel))

    def children(self, rel: str = "") -> list[str]:
        """Return the names of the child cgroups of ``rel``, sorted.

        Raises:
            CgroupReadError: the cgroup cannot be listed.
        """
        return list_children(self.path(rel))

    def enable_controllers(self, rel: str, controllers: Iterable[str]) -> None:
        """Make ``controllers`` (``"cpu"``, ``"memory"``...) available in cgroup ``rel`` by
        writing ``+cpu +memory ...`` to ``cgroup.subtree_control`` of every cgroup from the
        root down to ``rel``'s parent (only where not enabled yet).

        Each of those cgroups must hold no processes (no-internal-process rule).

        Raises:
            CgroupUnsupported: a controller is missing from some ``cgroup.controllers`` (the
                root's parent did not delegate it, or the kernel lacks it).
            CgroupWriteError: the kernel refused (``EBUSY``: processes in that cgroup).
        """
        wanted = list(dict.fromkeys(controllers))
        parts = relative_parts(rel)
        directory = self.root
        for depth in range(len(parts) + 1):
            if depth:
                directory = directory / parts[depth - 1]
            missing = [c for c in wanted if c not in parse_controllers(
                read_file(directory, "cgroup.controllers"))]
            if missing:
                raise CgroupUnsupported(
                    f"controller(s) {' '.join(missing)} not available in {directory}",
                    path=str(directory / "cgroup.controllers"))
            if depth == len(parts):
                break
            enabled = parse_controllers(read_file(directory, "cgroup.subtree_control"))
            to_enable = [c for c in wanted if c not in enabled]
            if to_enable:
                write_file(directory, "cgroup.subtree_control",
                           " ".join(f"+{c}" for c in to_enable))

    def delegate_root(self, controllers: Iterable[str]) -> None:
        """Enable ``controllers`` in the root's parent's ``cgroup.subtree_control`` so the root
        gets them (needed when governor's root is a new child of the daemon's own cgroup).

        Raises:
            CgroupUnsupported: a controller is not available in the parent.
            CgroupWriteError: the kernel refused (``EBUSY``: processes live in the parent).
        """
        parent = self.root.parent
        available = parse_controllers(read_file(parent, "cgroup.controllers"))
        missing = [c for c in controllers if c not in available]
        if missing:
            raise CgroupUnsupported(f"controller(s) {' '.join(missing)} not available in {parent}",
                                    path=str(parent / "cgroup.controllers"))
        enabled = parse_controllers(read_file(parent, "cgroup.subtree_control"))
        to_enable = [c for c in controllers if c not in enabled]
        if to_enable:
            write_file(parent, "cgroup.subtree_control", " ".join(f"+{c}" for c in to_enable))

    def _apply_one(self, rel: str, limits: CgroupLimits) -> tuple[list[str], list[CgroupError]]:
        directory = self.path(rel)
        last = self._record(rel)
        desired = [(v2_key(f, v), v) for f, v in v2_files(limits)]
        if limits.devices_denied:
            desired.append((V2_DEVICE_PROGRAM, devices_text(limits.devices_denied)))
        written, errors = [], []
        if V2_DEVICE_PROGRAM not in last and not limits.devices_denied and self._devices_unknown(rel):
            try:  # nothing to attach: the diff would leave an earlier daemon's program in place
                self._forget_earlier_program(directory)
                self._devices_unknown(rel, known=True)
            except CgroupError as error:
                errors.append(error)
                if error.vanished:
                    log.debug("%s (cgroup vanished, its task probably exited)", error)
                    return written, errors
        for key, value in diff_writes(desired, last, rank=_rank):
            file = key[0]
            try:
                if key == V2_DEVICE_PROGRAM:
                    # No devices files on v2: a BPF program (as systemd's DeviceAllow= and runc),
                    # the new one attached before the old is detached; none: ours detached.
                    attach_deny_program(directory, limits.devices_denied)
                else:
                    write_file(directory, file, v2_reset(file, last[key]) if value is None else value)
            except CgroupError as error:
                errors.append(error)
                if error.vanished:
                    break  # the whole cgroup is gone: nothing else will succeed
                continue
            if value is None:
                del last[key]
            else:
                last[key] = value
            written.append(file)
        if written:
            log.debug("applied %s to %s", ", ".join(written), directory)
        return written, errors

    def _forget_earlier_program(self, directory: Path) -> None:
        """Detach governor's device program from ``directory`` if an earlier daemon left one
        there (this driver has no record of it, and the plan denies nothing): the record then
        says what the kernel holds. Only where this process can attach programs at all
        (:func:`bpf_device_filter_supported`, asked once): elsewhere none of ours can be there.

        Raises:
            CgroupWriteError: as :func:`attach_deny_program`; a directory not on cgroup2
                (``EBADF``) holds no program and is no error.
        """
        if self._bpf_usable is None:
            self._bpf_usable = bpf_device_filter_supported() is None
        if not self._bpf_usable:
            return
        try:
            attach_deny_program(directory, ())
        except CgroupWriteError as error:
            if error.errno != errno.EBADF:
                raise

    def device_guard_problem(self) -> str | None:
        """Why no BPF device program can be attached here (no ``CONFIG_CGROUP_BPF``, no
        ``CAP_SYS_ADMIN``), or None."""
        return bpf_device_filter_supported()

    def move(self, rel: str, pid: int) -> None:
        """Move process ``pid`` (with all its threads) into cgroup ``rel``.

        Raises:
            ProcessGone: there is no such process (it exited meanwhile).
            CgroupWriteError: refused otherwise, e.g. ``EBUSY`` (``rel`` has children with
                controllers), ``ENOENT`` (``rel`` vanished).
        """
        write_file(self.path(rel), "cgroup.procs", str(pid))

    def pids(self, rel: str) -> list[int]:
        """Return the pids (processes, not threads) in cgroup ``rel`` itself.

        Raises:
            CgroupReadError: the cgroup does not exist.
        """
        return parse_pids(read_file(self.path(rel), "cgroup.procs"))

    def populated(self, rel: str) -> bool:
        """Whether ``rel`` or a cgroup below it holds a process (``cgroup.events``: one read,
        however many cgroups are below, e.g. the scopes of a user's slice).

        Raises:
            CgroupReadError: the cgroup does not exist (``vanished``) or cannot be read.
        """
        return parse_cgroup_events(read_file(self.path(rel), "cgroup.events")).populated

    def events_path(self, rel: str) -> Path:
        """Return the path of ``rel``'s ``cgroup.events``; it is modified (inotify IN_MODIFY)
        when ``populated`` or ``frozen`` changes."""
        return self.path(rel) / "cgroup.events"

    def _read_stats(self, rel: str, peak: bool) -> CgroupStats:
        """Sample the counters of cgroup ``rel``. Memory, io and pids fields are left None/empty when
        those controllers are not enabled for it; its pressure files are read unless :attr:`psi`
        is off.

        Raises:
            CgroupReadError: a stat file cannot be read (e.g. the cgroup vanished).
        """
        directory = self.path(rel)
        enabled = parse_controllers(read_file(directory, "cgroup.controllers"))
        cpu = parse_flat_keyed(read_file(directory, "cpu.stat"))
        memory_current: int | None = None
        memory_peak: int | None = None
        memory_events: dict[str, int] = {}
        if "memory" in enabled:
            memory_current = parse_int(read_file(directory, "memory.current"))
            memory_peak = _optional_int(directory, "memory.peak") if peak else None
            events = parse_flat_keyed(read_file(directory, "memory.events"))
            memory_events = {k: events.get(k, 0) for k in MEMORY_EVENT_KEYS}
        pids_current = pids_refused = None
        if "pids" in enabled and (pids_current := _optional_int(directory, "pids.current")) is not None:
            pids_refused = parse_flat_keyed(read_file(directory, "pids.events")).get("max", 0)
        io_stat: dict[str, dict[str, int]] = {}
        if "io" in enabled:
            io_stat = {dev: {k: v for k, v in fields.items() if v is not None}
                       for dev, fields in parse_nested_keyed(read_file(directory, "io.stat")).items()}
        return CgroupStats(
            cpu_usage_usec=cpu["usage_usec"],
            cpu_nr_throttled=cpu.get("nr_throttled", 0),
            cpu_throttled_usec=cpu.get("throttled_usec", 0),
            memory_current_bytes=memory_current,
            memory_events=memory_events,
            io_stat=io_stat,
            populated=parse_cgroup_events(read_file(directory, "cgroup.events")).populated,
            memory_peak_bytes=memory_peak,
            psi=read_pressure(directory) if self.psi else {},
            pids_current=pids_current,
            pids_refused=pids_refused,
        )

    def cpu_usage_usec(self, rel: str) -> int:
        """``usage_usec`` of cgroup ``rel``'s ``cpu.stat`` (raises CgroupReadError)."""
        try:
            return parse_flat_keyed(read_file(self.path(rel), "cpu.stat"))["usage_usec"]
        except (ValueError, KeyError) as error:
            raise CgroupReadError(f"cannot parse the CPU counter of cgroup {rel!r}: {error!r}",
                                  path=str(self.path(rel))) from None

    def memory_cap_bytes(self, rel: str) -> int | None:
        """The hard memory cap in force in cgroup ``rel`` (``memory.max``), bytes; None where
        it is ``max`` or the memory controller is off there.

        Raises:
            CgroupReadError: it cannot be read (``vanished``: the cgroup is gone).
        """
        try:
            return parse_max(read_file(self.path(rel), "memory.max"))
        except CgroupReadError as error:
            if error.errno == errno.ENOENT and self.path(rel).is_dir():
                return None
            raise
        except ValueError as error:
            raise CgroupReadError(f"cannot parse the memory.max of cgroup {rel!r}: {error}",
                                  path=str(self.path(rel))) from None

    def kill(self, rel: str) -> int:
        """Kill every process in cgroup ``rel`` and below it with SIGKILL in one write of
        ``1`` to ``cgroup.kill`` (Linux ≥ 5.14: no process can fork out of the way). A kernel
        without the file gets :meth:`~governor.cgroups.base.DriverBase.kill`'s pid by pid rounds.

        Returns:
            How many processes were signalled (0 after ``cgroup.kill``: the kernel does not say).

        Raises:
            CgroupError: the write was refused or the cgroup is gone (``vanished``).
        """
        directory = self.path(rel)
        try:
            write_file(directory, "cgroup.kill", "1")
        except CgroupWriteError as error:
            if error.errno == errno.ENOENT and directory.is_dir():
                return super().kill(rel)
            raise
        return 0


def _rank(key: tuple[str, str]) -> int:
    """Where the setting ``key`` comes in the write order: :data:`V2_ORDER`, then the device
    program."""
    return len(V2_ORDER) if key == V2_DEVICE_PROGRAM else V2_ORDER.index(key[0])


def _optional_int(directory: Path, name: str) -> int | None:
    """The integer in ``directory/name``, or None when the kernel has no such file.

    Raises:
        CgroupReadError: the file exists but cannot be read.
    """
    try:
        return parse_int(read_file(directory, name))
    except CgroupReadError as error:
        if error.errno == errno.ENOENT and directory.is_dir():
            return None
        raise
