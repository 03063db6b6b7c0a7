"""The GPU guard: deny the GPU and control nodes on a cgroup *outside* governor's root, where
processes start before governor governs them (the login slices' parent, ``user.slice``), so
that none opens a GPU before it is moved into its session, nor after (issue 31, point 4).

Only the listed nodes are denied (a deny list: every other device stays as it was), and the
parent's descendants cannot take the denial back:

- cgroup v2: a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program (:func:`~governor.cgroups.device_filter.deny_program`)
  attached with ``BPF_F_ALLOW_MULTI``: the kernel runs every program on the path from the root
  and allows an access only when all allow it, so systemd's own programs keep applying and a
  child's program cannot allow what ours denies. The program is loaded under the name
  :data:`GUARD_NAME` through :func:`~governor.cgroups.device_filter.attach_deny_program`,
  which replaces an earlier one of that name (a killed daemon's) and finds it again to take
  it off (``BPF_PROG_QUERY``).
- cgroup v1: ``devices.deny`` lines on the parent's ``devices`` cgroup; the kernel takes a
  parent's new exception from its children too, and a child may never allow what its parent
  denies. :func:`unguard_v1` writes the same lines to ``devices.allow``, down the subtree.

Source: kernel ``Documentation/admin-guide/cgroup-v1/devices.rst`` (the bpf(2) side is
:mod:`~governor.cgroups.device_filter`'s).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from governor.cgroups.device_filter import attach_deny_program, attached_programs
from governor.cgroups.device_rules import Device, v1_line
from governor.cgroups.errors import CgroupError
from governor.cgroups.files import write_file

__all__ = ["GUARD_NAME", "GuardPlan", "attach_guard", "detach_guards", "guard_v1", "guards_attached", "plan_guard",
           "put_guard", "take_guard", "undo_guard", "unguard_v1"]

GUARD_NAME = "gov_gpu_guard"  # BPF object names: at most 15 characters of [A-Za-z0-9_.]


@dataclass(frozen=True)
class GuardPlan:
    """Where the guard goes on this host, and what it leaves unguarded.

    Attributes:
        mode: ``"v2"`` (a BPF program) or ``"v1"`` (``devices.deny``).
        places: the cgroup directories to guard.
        notes: sentences for ``check-config`` and ``status``, one per place left out or not
            covered (``/sys/fs/cgroup/user.slice does not exist here``).
    """

    mode: str
    places: tuple[Path, ...]
    notes: tuple[str, ...]


def plan_guard(kind: str, parents: Sequence[str], *, mode: str, mount: Path, governor_root: Path,
               daemon_cgroup: Path | None = None) -> GuardPlan:
    """Where ``[capacity] gpu_guard = kind`` puts the guard (reads which cgroups exist).

    Args:
        kind: ``"sessions"`` (``parents``, relative to ``mount``), ``"host"`` (every top-level
            cgroup of ``mount`` but those holding ``governor_root`` or ``daemon_cgroup``) or
            ``"tasks"`` (none).
        mode: ``"v2"`` or ``"v1"``; mount: the cgroup2 mount, or the v1 ``devices``
            hierarchy's; governor_root: governor's root in that hierarchy (never guarded:
            its tasks must open their GPUs).
        daemon_cgroup: the directory of the daemon's own cgroup in that hierarchy (from
            ``/proc/self/cgroup``; ``system.slice/governor.service`` under the shipped unit),
            never guarded either: the daemon's own NVML calls open ``/dev/nvidiactl``. None:
            not known.
    """
    if kind == "tasks":
        return GuardPlan(mode, (), ('gpu_guard = "tasks": processes outside governor\'s tasks are not kept from '
                                    "GPUs",))
    if kind == "host":
        candidates = sorted(p for p in _children(mount))
        notes = [f"processes in the root cgroup {mount} itself are not kept from GPUs (it holds governor's root)"]
    else:
        candidates = [mount / parent for parent in parents]
        notes = []
    places = []
    for place in candidates:
        if place == governor_root or place in governor_root.parents:
            notes.append(f"{place} is not guarded: it holds governor's root, whose tasks open their GPUs; its "
                         "other processes are not kept from GPUs")
        elif daemon_cgroup is not None and (place == daemon_cgroup or place in daemon_cgroup.parents):
            notes.append(f"{place} is not guarded: it holds the governor daemon ({daemon_cgroup}), which opens the "
                         "GPUs' control nodes itself; its other processes are not kept from GPUs")
        elif not place.is_dir():
            notes.append(f"{place} does not exist here: not guarded")
        else:
            places.append(place)
    return GuardPlan(mode, tuple(places), tuple(notes))


def undo_guard(before: GuardPlan, denied_before: Sequence[Device], after: GuardPlan | None,
               denied_now: Sequence[Device]) -> list[tuple[GuardPlan, list[Device]]]:
    """What to take off once guard ``after`` (denying ``denied_now``; None: none) replaced
    ``before`` (denying ``denied_before``): every node ``before`` denied on the places ``after``
    leaves, and, on v1 (whose denials add up, where v2's program of the same name is
    replaced), the nodes no longer denied on the places kept. Pure: ``(plan, denied)`` pairs
    for :func:`take_guard`, empty ones left out."""
    kept = set(after.places) if after is not None else set()
    undone = [(GuardPlan(before.mode, tuple(p for p in before.places if p not in kept), ()), list(denied_before))]
    if before.mode == "v1":
        undone.append((GuardPlan("v1", tuple(p for p in before.places if p in kept), ()),
                       [device for device in denied_before if device not in denied_now]))
    return [(plan, denied) for plan, denied in undone if plan.places and denied]


def put_guard(plan: GuardPlan, denied: Sequence[Device]) -> list[str]:
    """Deny ``denied`` on each of ``plan.places``; on v2 an earlier guard of ours there (a
    daemon killed before it took its own off, or one of another device list) is replaced:
    the new one is attached before the old is detached. Returns one sentence per place that
    failed (nothing raised: each place is guarded on its own)."""
    problems = []
    for place in plan.places:
        try:
            if plan.mode == "v1":
                guard_v1(place, denied)
            else:
                attach_guard(place, denied)
        except (CgroupError, ValueError) as error:
            problems.append(f"cannot guard {place}: {error}")
    return problems


def take_guard(plan: GuardPlan, denied: Sequence[Device]) -> list[str]:
    """Take the guard off each of ``plan.places`` (v2: every program of ours there; v1:
    ``denied`` allowed again down the subtree). Returns one sentence per place that failed."""
    problems = []
    for place in plan.places:
        try:
            if plan.mode == "v1":
                unguard_v1(place, denied)
            else:
                detach_guards(place)
        except (CgroupError, ValueError) as error:
            problems.append(f"cannot take the guard off {place}: {error}")
    return problems


def _children(mount: Path) -> list[Path]:
    try:
        with os.scandir(mount) as entries:
            return [Path(entry.path) for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def attach_guard(cgroup_dir: Path, denied: Sequence[Device]) -> None:
    """Deny ``denied`` below the cgroup v2 directory ``cgroup_dir`` with a program named
    :data:`GUARD_NAME`, replacing an earlier one of that name (attached before it is detached).

    Raises:
        ValueError: a device out of range; CgroupWriteError: ``bpf()`` failed (``errno`` set:
            ``EPERM`` without CAP_BPF/CAP_SYS_ADMIN, ``EBADF`` not cgroup2).
    """
    attach_deny_program(cgroup_dir, denied, name=GUARD_NAME)


def guards_attached(cgroup_dir: Path) -> int:
    """How many programs named :data:`GUARD_NAME` are attached to ``cgroup_dir``.

    Raises:
        CgroupWriteError: the programs cannot be listed (``errno`` set).
    """
    return sum(name == GUARD_NAME for name in attached_programs(cgroup_dir).values())


def detach_guards(cgroup_dir: Path) -> int:
    """Detach every program named :data:`GUARD_NAME` from ``cgroup_dir``; returns how many.
    Other programs (systemd's, another manager's) stay.

    Raises:
        CgroupWriteError: listing or detaching failed (``errno`` set).
    """
    count = guards_attached(cgroup_dir)
    attach_deny_program(cgroup_dir, (), name=GUARD_NAME)
    return count


def guard_v1(devices_dir: Path, denied: Sequence[Device]) -> None:
    """Deny ``denied`` on the v1 ``devices`` cgroup ``devices_dir`` (``devices.deny``, one
    write per rule): its processes and every descendant's lose them.

    Raises:
        ValueError: a device out of range; CgroupWriteError: the kernel refused a line.
    """
    for line in map(v1_line, denied):
        write_file(devices_dir, "devices.deny", line)


def unguard_v1(devices_dir: Path, denied: Sequence[Device]) -> None:
    """Take back :func:`guard_v1`: the same rules written to ``devices.allow`` on
    ``devices_dir`` and then each descendant, parents first (the kernel copied the parent's
    denial into every child, and a parent's allow does not reach them). A descendant that had
    denied one of them itself before the guard allows it again.

    Raises:
        ValueError: a device out of range; CgroupWriteError: the kernel refused a line (a
            descendant removed meanwhile is skipped).
    """
    lines = [v1_line(device) for device in denied]
    for directory, _, _ in os.walk(devices_dir):
        for line in lines:
            try:
                write_file(Path(directory), "devices.allow", line)
            except CgroupError as error:
                if directory == str(devices_dir) or not error.vanished:
                    raise
