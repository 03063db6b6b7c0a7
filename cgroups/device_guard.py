"""The GPU guard: deny the GPU and control nodes on a cgroup *outside* governor's root, where
processes start before governor governs them (the login slices' parent, ``user.slice``), so
that none opens a GPU before it is moved into its session, nor after (issue 31, point 4).

Only the listed nodes are denied (a deny list: every other device stays as it was), and the
parent's descendants cannot take the denial back:

- cgroup v2: a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program (:func:`~governor.cgroups.device_filter.deny_program`)
  attached with ``BPF_F_ALLOW_MULTI``: the kernel runs every program on the path from the root
  and allows an access only when all allow it, so systemd's own programs keep applying and a
  child's program cannot allow what ours denies. The program is loaded under the name
  :data:`GUARD_NAME`, by which :func:`detach_guards` finds it again (``BPF_PROG_QUERY``, then
  ``BPF_OBJ_GET_INFO_BY_FD`` for each attached program's name) to take it off.
- cgroup v1: ``devices.deny`` lines on the parent's ``devices`` cgroup; the kernel takes a
  parent's new exception from its children too, and a child may never allow what its parent
  denies. :func:`unguard_v1` writes the same lines to ``devices.allow``, down the subtree.

Sources: ``include/uapi/linux/bpf.h`` (``union bpf_attr``: ``BPF_PROG_LOAD``'s ``prog_name``
at byte 48, ``BPF_PROG_QUERY``, ``BPF_PROG_GET_FD_BY_ID``, ``BPF_OBJ_GET_INFO_BY_FD``;
``struct bpf_prog_info``'s ``name`` at byte 64), kernel
``Documentation/admin-guide/cgroup-v1/devices.rst``.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from governor.cgroups.device_filter import Device, deny_program, deny_v1_lines
from governor.cgroups.errors import CgroupError, CgroupUnsupported, CgroupWriteError
from governor.cgroups.files import write_file

__all__ = ["GUARD_NAME", "GuardPlan", "attach_guard", "detach_guards", "guard_v1", "guards_attached", "plan_guard",
           "put_guard", "take_guard", "unguard_v1"]

GUARD_NAME = "gov_gpu_guard"  # BPF object names: at most 15 characters of [A-Za-z0-9_.]

_PROG_LOAD, _PROG_ATTACH, _PROG_DETACH = 5, 8, 9
_PROG_GET_FD_BY_ID, _OBJ_GET_INFO_BY_FD, _PROG_QUERY = 13, 15, 16
_PROG_TYPE_CGROUP_DEVICE, _CGROUP_DEVICE, _F_ALLOW_MULTI = 15, 6, 2
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_ATTR_SIZE = 128  # union bpf_attr, zero beyond what each command reads (every kernel since 4.15)
_LICENSE = b"Apache-2.0\0"
_INFO_SIZE, _INFO_NAME = 80, 64  # struct bpf_prog_info up to and with its name
_MOST_ATTACHED = 64  # BPF_CGROUP_MAX_PROGS

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd: int, attr: ctypes.Array, path: str) -> int:
    machine = platform.machine()
    if machine not in _SYS_BPF:
        raise CgroupUnsupported(f"no bpf() syscall number known for {machine}", path=path)
    result = _libc.syscall(ctypes.c_long(_SYS_BPF[machine]), ctypes.c_long(cmd), attr, ctypes.c_uint(_ATTR_SIZE))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _attr(*fields: tuple[int, str, int]) -> ctypes.Array:
    """A zeroed ``union bpf_attr`` with ``(offset, struct format, value)`` fields set."""
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    for offset, form, value in fields:
        struct.pack_into("<" + form, attr, offset, value)
    return attr


def _rules(denied: Sequence[Device]) -> str:
    return ", ".join(f"{k} {major}:{'*' if minor == -1 else minor}" for k, major, minor in denied) or "nothing"


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


def plan_guard(kind: str, parents: Sequence[str], *, mode: str, mount: Path, governor_root: Path) -> GuardPlan:
    """Where ``[capacity] gpu_guard = kind`` puts the guard (reads which cgroups exist).

    Args:
        kind: ``"sessions"`` (``parents``, relative to ``mount``), ``"host"`` (every top-level
            cgroup of ``mount`` but the one holding ``governor_root``) or ``"tasks"`` (none).
        mode: ``"v2"`` or ``"v1"``; mount: the cgroup2 mount, or the v1 ``devices``
            hierarchy's; governor_root: governor's root in that hierarchy (never guarded:
            its tasks must open their GPUs).
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
        elif not place.is_dir():
            notes.append(f"{place} does not exist here: not guarded")
        else:
            places.append(place)
    return GuardPlan(mode, tuple(places), tuple(notes))


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
                continue
            old = _ours(place)
            try:
                attach_guard(place, denied)
                for fd in old:
                    _attach(place, fd, _PROG_DETACH, f"detach an older {GUARD_NAME}")
            finally:
                for fd in old:
                    os.close(fd)
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
    """Load a program denying ``denied`` (named :data:`GUARD_NAME`) and attach it to the
    cgroup v2 directory ``cgroup_dir`` with ``BPF_F_ALLOW_MULTI``.

    Raises:
        ValueError: a device out of range (:func:`~governor.cgroups.device_filter.deny_program`).
        CgroupWriteError: ``bpf()`` or opening the directory failed (``path``: the cgroup,
            ``errno`` set: ``EPERM`` without CAP_BPF/CAP_SYS_ADMIN, ``EBADF`` not cgroup2).
        CgroupUnsupported: no bpf syscall number known for this machine.
    """
    program, path = deny_program(denied), str(cgroup_dir)
    value = f"GPU guard ({GUARD_NAME}) denying {_rules(denied)}"
    insns = ctypes.create_string_buffer(program, len(program))
    licence = ctypes.create_string_buffer(_LICENSE, len(_LICENSE))
    load = _attr((0, "I", _PROG_TYPE_CGROUP_DEVICE), (4, "I", len(program) // 8),
                 (8, "Q", ctypes.addressof(insns)), (16, "Q", ctypes.addressof(licence)))
    load[48:48 + len(GUARD_NAME)] = GUARD_NAME.encode()
    try:
        prog_fd = _bpf(_PROG_LOAD, load, path)
    except OSError as e:
        raise CgroupWriteError(path, value, e.errno) from e
    try:
        _attach(cgroup_dir, prog_fd, _PROG_ATTACH, value)
    finally:
        os.close(prog_fd)


def guards_attached(cgroup_dir: Path) -> int:
    """How many programs named :data:`GUARD_NAME` are attached to ``cgroup_dir``.

    Raises:
        CgroupWriteError: the programs cannot be listed (``errno`` set).
    """
    fds = _ours(cgroup_dir)
    for fd in fds:
        os.close(fd)
    return len(fds)


def detach_guards(cgroup_dir: Path) -> int:
    """Detach every program named :data:`GUARD_NAME` from ``cgroup_dir``; returns how many.
    Other programs (systemd's, another manager's) stay.

    Raises:
        CgroupWriteError: listing or detaching failed (``errno`` set).
    """
    fds = _ours(cgroup_dir)
    try:
        for fd in fds:
            _attach(cgroup_dir, fd, _PROG_DETACH, f"detach {GUARD_NAME}")
    finally:
        for fd in fds:
            os.close(fd)
    return len(fds)


def guard_v1(devices_dir: Path, denied: Sequence[Device]) -> None:
    """Deny ``denied`` on the v1 ``devices`` cgroup ``devices_dir`` (``devices.deny``, one
    write per rule): its processes and every descendant's lose them.

    Raises:
        ValueError: a device out of range; CgroupWriteError: the kernel refused a line.
    """
    for line in deny_v1_lines(denied):
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
    lines = deny_v1_lines(denied)
    for directory, _, _ in os.walk(devices_dir):
        for line in lines:
            try:
                write_file(Path(directory), "devices.allow", line)
            except CgroupError as error:
                if directory == str(devices_dir) or not error.vanished:
                    raise


def _attach(cgroup_dir: Path, prog_fd: int, cmd: int, value: str) -> None:
    path = str(cgroup_dir)
    try:
        dir_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise CgroupWriteError(path, value, e.errno) from e
    try:
        flags = _F_ALLOW_MULTI if cmd == _PROG_ATTACH else 0
        _bpf(cmd, _attr((0, "I", dir_fd), (4, "I", prog_fd), (8, "I", _CGROUP_DEVICE), (12, "I", flags)), path)
    except OSError as e:
        raise CgroupWriteError(path, value, e.errno) from e
    finally:
        os.close(dir_fd)


def _ours(cgroup_dir: Path) -> list[int]:
    """Fds of the programs named :data:`GUARD_NAME` attached to ``cgroup_dir`` itself."""
    path, value = str(cgroup_dir), f"list {GUARD_NAME}"
    ids = (ctypes.c_uint32 * _MOST_ATTACHED)()
    try:
        dir_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise CgroupWriteError(path, value, e.errno) from e
    try:
        query = _attr((0, "I", dir_fd), (4, "I", _CGROUP_DEVICE), (16, "Q", ctypes.addressof(ids)),
                      (24, "I", _MOST_ATTACHED))
        _bpf(_PROG_QUERY, query, path)
    except OSError as e:
        raise CgroupWriteError(path, value, e.errno) from e
    finally:
        os.close(dir_fd)
    count = struct.unpack_from("<I", query, 24)[0]
    fds = []
    for prog_id in ids[:count]:
        try:
            fd = _bpf(_PROG_GET_FD_BY_ID, _attr((0, "I", prog_id)), path)
        except OSError:
            continue  # detached and freed since the query
        info = ctypes.create_string_buffer(_INFO_SIZE)
        try:
            _bpf(_OBJ_GET_INFO_BY_FD, _attr((0, "I", fd), (4, "I", _INFO_SIZE), (8, "Q", ctypes.addressof(info))), path)
        except OSError:
            os.close(fd)
            continue
        if info.raw[_INFO_NAME:_INFO_NAME + 16].split(b"\0")[0].decode(errors="replace") == GUARD_NAME:
            fds.append(fd)
        else:
            os.close(fd)
    return fds
