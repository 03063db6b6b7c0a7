"""Keep a task's processes off the GPUs it does not hold: a device deny list per cgroup.

governor denies only the GPU nodes a task was not given (``/dev/nvidia1`` when it holds GPU 0;
NVIDIA's control nodes too when it holds none), never "everything but": a deny list leaves
``/dev/null``, ``/dev/zero``, ttys and every other node the task's programs open as they were,
so no list of harmless devices has to be kept in step with the host.

cgroup v2 has no device files; access is decided by ``BPF_PROG_TYPE_CGROUP_DEVICE`` programs
attached to the cgroup (kernel ``Documentation/admin-guide/cgroup-v2.rst``, "Device
controller"). The kernel runs the program at every ``open``/``mknod`` of a device node with a
``struct bpf_cgroup_dev_ctx`` and refuses the access with ``EPERM`` when it returns 0.
:func:`deny_program` assembles such a program from scratch (no compiler, no libbpf) and
:func:`attach_deny_program` loads and attaches it with ``bpf(2)`` through :mod:`ctypes`.
It is attached with ``BPF_F_ALLOW_MULTI``: the kernel then runs every program attached on
the path from the root to the cgroup and allows an access only when all of them allow it, so a
program systemd attached above (a unit's ``DevicePolicy=``/``DeviceAllow=``) still applies and
ours can only narrow it.

A cgroup carries at most one governor program of each name (:data:`PROGRAM_NAME` for a task's
or session's limits; :mod:`~governor.cgroups.device_guard` names its guard otherwise): a new
list is attached before the programs of that name attached to the cgroup before are detached
(found with ``BPF_PROG_QUERY``, so a restarted daemon finds its predecessor's too), so no
access is allowed in between that either list denies.

cgroup v1 has the ``devices`` controller instead: the deny list becomes ``devices.deny`` lines
(:func:`governor.cgroups.limits.v1_files`; kernel ``Documentation/admin-guide/cgroup-v1/devices.rst``).

Sources of the numbers below: ``include/uapi/linux/bpf.h`` and ``bpf_common.h`` (instruction
encoding, ``union bpf_attr``, ``struct bpf_cgroup_dev_ctx``, ``BPF_DEVCG_*``); runc's
``libcontainer/cgroups/devices/devicefilter.go`` and systemd's ``bpf-devices.c`` generate
programs of the same shape.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as _errno
import os
import platform
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

from governor.cgroups.device_rules import Device, checked_device, devices_text
from governor.cgroups.errors import CgroupUnsupported, CgroupWriteError

__all__ = ["PROGRAM_NAME", "attach_deny_program", "attached_programs", "bpf_device_filter_supported", "deny_program"]

# The name governor's device programs are loaded with (at most 15 characters: BPF_OBJ_NAME_LEN).
PROGRAM_NAME = "governor_dev"

# --- the assembler: only the five instructions the program needs ------------------------------

# Opcode = class | size/operation | source (include/uapi/linux/bpf_common.h, bpf.h).
_BPF_LDX, _BPF_ALU, _BPF_JMP, _BPF_ALU64 = 0x01, 0x04, 0x05, 0x07
_BPF_W, _BPF_MEM, _BPF_K = 0x00, 0x60, 0x00
_BPF_AND, _BPF_MOV, _BPF_JNE, _BPF_EXIT = 0x50, 0xB0, 0x50, 0x90
_R0, _R1, _R2, _R4, _R5 = 0, 1, 2, 4, 5

# struct bpf_cgroup_dev_ctx { __u32 access_type; __u32 major; __u32 minor; } (bpf.h); the
# low 16 bits of access_type are the device type, the high 16 the access (BPF_DEVCG_ACC_*).
_CTX_ACCESS_TYPE, _CTX_MAJOR, _CTX_MINOR = 0, 4, 8
_DEVCG_TYPE = {"b": 1, "c": 2}  # BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One ``struct bpf_insn { __u8 code; __u8 dst_reg:4, src_reg:4; __s16 off; __s32 imm; }``
    (include/uapi/linux/bpf.h), little-endian: ``dst_reg`` is the low nibble of byte 1."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def _ldx_w(dst: int, src: int, off: int) -> bytes:
    """``dst = *(u32 *)(src + off)``: BPF_LDX | BPF_MEM | BPF_W (0x61)."""
    return _insn(_BPF_LDX | _BPF_MEM | _BPF_W, dst, src, off)


def _and32_imm(dst: int, imm: int) -> bytes:
    """``dst = (u32)dst & imm``: BPF_ALU | BPF_AND | BPF_K (0x54)."""
    return _insn(_BPF_ALU | _BPF_AND | _BPF_K, dst, imm=imm)


def _jne_imm(dst: int, imm: int, off: int) -> bytes:
    """``if dst != imm goto pc + 1 + off``: BPF_JMP | BPF_JNE | BPF_K (0x55)."""
    return _insn(_BPF_JMP | _BPF_JNE | _BPF_K, dst, off=off, imm=imm)


def _mov64_imm(dst: int, imm: int) -> bytes:
    """``dst = imm``: BPF_ALU64 | BPF_MOV | BPF_K (0xb7)."""
    return _insn(_BPF_ALU64 | _BPF_MOV | _BPF_K, dst, imm=imm)


def _exit() -> bytes:
    """``return r0``: BPF_JMP | BPF_EXIT (0x95)."""
    return _insn(_BPF_JMP | _BPF_EXIT)


def deny_program(denied: Sequence[Device]) -> bytes:
    """Assemble a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program that returns 0 (deny) for any access
    (read, write, mknod) to a device in ``denied`` and 1 (allow) for every other device.

    Shape (r1 = the ``struct bpf_cgroup_dev_ctx``)::

        r2 = ctx->access_type & 0xFFFF; r4 = ctx->major; r5 = ctx->minor   # 4 instructions
        per device:  if r2 != type goto next; if r4 != major goto next;
                     [if r5 != minor goto next;]  r0 = 0; exit              # 4, or 5 with a minor
        r0 = 1; exit                                                        # 2

    Args:
        denied: ``("c" | "b", major, minor)`` tuples; minor ``-1`` denies the whole major.

    Returns:
        The instructions, 8 bytes each (little-endian ``struct bpf_insn``, include/uapi/linux/bpf.h).

    Raises:
        ValueError: a type other than ``"c"``/``"b"``, or a number outside the kernel's
            12-bit major / 20-bit minor (:func:`~governor.cgroups.device_rules.checked_device`;
            they also keep every number below 2**31, where JNE's sign-extended 32-bit
            immediate still matches).
    """
    program = [_ldx_w(_R2, _R1, _CTX_ACCESS_TYPE), _and32_imm(_R2, 0xFFFF),
               _ldx_w(_R4, _R1, _CTX_MAJOR), _ldx_w(_R5, _R1, _CTX_MINOR)]
    for kind, major, minor in map(checked_device, denied):
        # Built back to front so that each jump's offset is simply what follows it in the block.
        block = [_mov64_imm(_R0, 0), _exit()]
        if minor != -1:
            block.insert(0, _jne_imm(_R5, minor, len(block)))
        block.insert(0, _jne_imm(_R4, major, len(block)))
        block.insert(0, _jne_imm(_R2, _DEVCG_TYPE[kind], len(block)))
        program += block
    program += [_mov64_imm(_R0, 1), _exit()]
    return b"".join(program)


# --- bpf(2) ---------------------------------------------------------------------------------

_BPF_PROG_LOAD, _BPF_PROG_ATTACH, _BPF_PROG_DETACH = 5, 8, 9
_BPF_PROG_GET_FD_BY_ID, _BPF_OBJ_GET_INFO_BY_FD, _BPF_PROG_QUERY = 13, 15, 16
_OBJ_NAME_LEN = 16  # BPF_OBJ_NAME_LEN, the terminating NUL included
# Programs attached to one cgroup asked for at once; BPF_CGROUP_MAX_PROGS is 64.
_QUERY_MAX = 64
_BPF_PROG_TYPE_CGROUP_DEVICE, _BPF_CGROUP_DEVICE, _BPF_F_ALLOW_MULTI = 15, 6, 2
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_LICENSE = b"Apache-2.0\0"  # device programs call no GPL-only helpers
_LOG_SIZE = 64 << 10
# union bpf_attr grows with each kernel; we pass 128 zeroed bytes, which every kernel since 4.15
# accepts (it reads what it knows and requires the rest to be zero).
_ATTR_SIZE = 128


class _ProgLoadAttr(ctypes.Structure):
    """The ``BPF_PROG_LOAD`` part of ``union bpf_attr`` (include/uapi/linux/bpf.h)."""

    _fields_ = [("prog_type", ctypes.c_uint32), ("insn_cnt", ctypes.c_uint32), ("insns", ctypes.c_uint64),
                ("license", ctypes.c_uint64), ("log_level", ctypes.c_uint32), ("log_size", ctypes.c_uint32),
                ("log_buf", ctypes.c_uint64), ("kern_version", ctypes.c_uint32), ("prog_flags", ctypes.c_uint32),
                ("prog_name", ctypes.c_char * _OBJ_NAME_LEN), ("_zero", ctypes.c_uint8 * (_ATTR_SIZE - 64))]


class _ProgQueryAttr(ctypes.Structure):
    """The ``BPF_PROG_QUERY`` part of ``union bpf_attr`` (include/uapi/linux/bpf.h)."""

    _fields_ = [("target_fd", ctypes.c_uint32), ("attach_type", ctypes.c_uint32), ("query_flags", ctypes.c_uint32),
                ("attach_flags", ctypes.c_uint32), ("prog_ids", ctypes.c_uint64), ("prog_cnt", ctypes.c_uint32),
                ("_zero", ctypes.c_uint8 * (_ATTR_SIZE - 28))]


class _GetFdByIdAttr(ctypes.Structure):
    """The ``BPF_PROG_GET_FD_BY_ID`` part of ``union bpf_attr`` (include/uapi/linux/bpf.h)."""

    _fields_ = [("prog_id", ctypes.c_uint32), ("next_id", ctypes.c_uint32), ("open_flags", ctypes.c_uint32),
                ("_zero", ctypes.c_uint8 * (_ATTR_SIZE - 12))]


class _InfoAttr(ctypes.Structure):
    """The ``BPF_OBJ_GET_INFO_BY_FD`` part of ``union bpf_attr`` (include/uapi/linux/bpf.h)."""

    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64),
                ("_zero", ctypes.c_uint8 * (_ATTR_SIZE - 16))]


class _ProgInfo(ctypes.Structure):
    """The start of ``struct bpf_prog_info`` up to its ``name`` (include/uapi/linux/bpf.h): the
    kernel fills no more than the ``info_len`` it is given."""

    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("tag", ctypes.c_uint8 * 8),
                ("jited_prog_len", ctypes.c_uint32), ("xlated_prog_len", ctypes.c_uint32),
                ("jited_prog_insns", ctypes.c_uint64), ("xlated_prog_insns", ctypes.c_uint64),
                ("load_time", ctypes.c_uint64), ("created_by_uid", ctypes.c_uint32), ("nr_map_ids", ctypes.c_uint32),
                ("map_ids", ctypes.c_uint64), ("name", ctypes.c_char * _OBJ_NAME_LEN)]


class _ProgAttachAttr(ctypes.Structure):
    """The ``BPF_PROG_ATTACH`` part of ``union bpf_attr`` (include/uapi/linux/bpf.h)."""

    _fields_ = [("target_fd", ctypes.c_uint32), ("attach_bpf_fd", ctypes.c_uint32),
                ("attach_type", ctypes.c_uint32), ("attach_flags", ctypes.c_uint32),
                ("replace_bpf_fd", ctypes.c_uint32), ("_zero", ctypes.c_uint8 * (_ATTR_SIZE - 20))]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd: int, attr: ctypes.Structure, path: str) -> int:
    """``bpf(cmd, &attr, sizeof attr)``; returns its result (a new fd for loads).

    Raises:
        CgroupUnsupported: no known bpf syscall number for this machine (``path`` names it).
        OSError: the syscall failed.
    """
    machine = platform.machine()
    if machine not in _SYS_BPF:
        raise CgroupUnsupported(f"no bpf() syscall number known for {machine}", path=path)
    result = _libc.syscall(ctypes.c_long(_SYS_BPF[machine]), ctypes.c_long(cmd), ctypes.byref(attr),
                           ctypes.c_uint(ctypes.sizeof(attr)))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _load(program: bytes, path: str, log: ctypes.Array | None = None, name: str = PROGRAM_NAME) -> int:
    """Load ``program`` as a CGROUP_DEVICE program named ``name`` and return its fd; with
    ``log``, the verifier writes its log there (log_level 1)."""
    insns = ctypes.create_string_buffer(program, len(program))
    licence = ctypes.create_string_buffer(_LICENSE, len(_LICENSE))
    attr = _ProgLoadAttr(prog_type=_BPF_PROG_TYPE_CGROUP_DEVICE, insn_cnt=len(program) // 8,
                         insns=ctypes.addressof(insns), license=ctypes.addressof(licence), prog_name=name.encode())
    if log is not None:
        attr.log_level, attr.log_size, attr.log_buf = 1, len(log), ctypes.addressof(log)
    return _bpf(_BPF_PROG_LOAD, attr, path)


def _write_error(path: str, value: str, errno: int | None, detail: str = "") -> CgroupWriteError:
    error = CgroupWriteError(path, value, errno)
    if detail:
        error.args = (f"{error.args[0]}; {detail}",)
    return error


def attach_deny_program(cgroup_dir: Path, denied: Sequence[Device], *, name: str = PROGRAM_NAME) -> None:
    """Make governor's device program ``name`` on the cgroup v2 directory ``cgroup_dir`` deny
    exactly ``denied``: load :func:`deny_program` ``(denied)`` (named ``name``), attach it
    (``BPF_CGROUP_DEVICE``, ``BPF_F_ALLOW_MULTI``), then detach every program of that name
    attached there before (:func:`attached_programs`: this daemon's, or an earlier one's).
    The new program is in force before the old one goes, so no access either denies slips
    through between. An empty ``denied`` attaches nothing and detaches ours. The fds are
    closed: the attachment holds the program for as long as the cgroup exists.

    An access is allowed only when every program on the path from the root allows it (kernel
    Documentation/admin-guide/cgroup-v2.rst, "Device controller"; include/uapi/linux/bpf.h on
    ``BPF_F_ALLOW_MULTI``): programs others attached (systemd's) stay and still apply.

    Raises:
        ValueError: as :func:`deny_program`.
        CgroupWriteError: ``bpf()`` or opening the directory failed; ``path`` is the cgroup
            directory, ``value`` describes the program (``"BPF device program denying c 195:0,
            c 195:255"``), ``errno`` is set (``EPERM`` without CAP_BPF/CAP_NET_ADMIN, or without
            CAP_SYS_ADMIN once a program is attached there, ``EBADF`` when not cgroup2, ``ENOENT`` when the
            cgroup vanished); a refused load carries the verifier log in the message. When
            the old program could not be detached, both stay (the access allowed is what
            both allow): a later call detaches it.
        CgroupUnsupported: this machine's bpf syscall number is unknown.
    """
    path = str(cgroup_dir)
    value = f"BPF device program denying {devices_text(denied) or 'nothing'}"
    prog_fd = _load_checked(deny_program(denied), path, value, name) if denied else None
    try:
        with _directory(cgroup_dir, value) as dir_fd:
            old: dict[int, int] = {}  # governor's programs attached before: id → an fd of it
            try:
                for prog_id, fd, loaded_as in _programs(dir_fd, path, value):
                    old[prog_id] = fd
                    if loaded_as != name:  # another's (systemd's, or governor's of another name): it stays
                        os.close(old.pop(prog_id))
                if prog_fd is not None:
                    _bpf_or_raise(_BPF_PROG_ATTACH, _ProgAttachAttr(
                        target_fd=dir_fd, attach_bpf_fd=prog_fd, attach_type=_BPF_CGROUP_DEVICE,
                        attach_flags=_BPF_F_ALLOW_MULTI), path, value, "bpf(BPF_PROG_ATTACH) failed")
                for old_fd in old.values():
                    _bpf_or_raise(_BPF_PROG_DETACH, _ProgAttachAttr(
                        target_fd=dir_fd, attach_bpf_fd=old_fd, attach_type=_BPF_CGROUP_DEVICE), path, value,
                        "bpf(BPF_PROG_DETACH) of the program it replaces failed")
            finally:
                for old_fd in old.values():
                    os.close(old_fd)
    finally:
        if prog_fd is not None:
            os.close(prog_fd)


def attached_programs(cgroup_dir: Path) -> dict[int, str]:
    """The device programs attached to the cgroup v2 directory ``cgroup_dir`` itself (not
    above it): program id → the name it was loaded with (:data:`PROGRAM_NAME`: governor's).

    Raises:
        CgroupWriteError: as :func:`attach_deny_program` (``value``: ``"BPF device programs"``).
        CgroupUnsupported: this machine's bpf syscall number is unknown.
    """
    value, names = "BPF device programs", {}
    with _directory(cgroup_dir, value) as dir_fd:
        for prog_id, prog_fd, loaded_as in _programs(dir_fd, str(cgroup_dir), value):
            os.close(prog_fd)
            names[prog_id] = loaded_as
    return names


@contextlib.contextmanager
def _directory(cgroup_dir: Path, value: str) -> Iterator[int]:
    """``cgroup_dir`` open (an fd), for ``bpf()`` to name the cgroup; closed afterwards."""
    try:
        dir_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise _write_error(str(cgroup_dir), value, e.errno, "cannot open the cgroup directory") from e
    try:
        yield dir_fd
    finally:
        os.close(dir_fd)


def _bpf_or_raise(cmd: int, attr: ctypes.Structure, path: str, value: str, failed: str) -> int:
    """:func:`_bpf`, its failure a CgroupWriteError on ``path`` and ``value`` saying ``failed``."""
    try:
        return _bpf(cmd, attr, path)
    except OSError as e:
        raise _write_error(path, value, e.errno, failed) from e


def _load_checked(program: bytes, path: str, value: str, name: str) -> int:
    """:func:`_load`, a refusal raised as a CgroupWriteError with the verifier's log."""
    try:
        return _load(program, path, name=name)
    except OSError as first:
        # The first attempt goes without a log: the verifier then skips writing one for the
        # programs it accepts, which is all of them unless something is badly wrong.
        log = ctypes.create_string_buffer(_LOG_SIZE)
        try:
            return _load(program, path, log, name)
        except OSError:
            text = log.value.decode(errors="replace").strip()
            raise _write_error(path, value, first.errno,
                               f"bpf(BPF_PROG_LOAD) verifier log: {text or '(empty)'}") from first


def _programs(dir_fd: int, path: str, value: str) -> Iterator[tuple[int, int, str]]:
    """``(id, fd, name)`` of each device program attached to the cgroup open as ``dir_fd``
    (``BPF_PROG_QUERY``, then each by id; one gone meanwhile is skipped). The caller closes
    each fd it is given."""
    ids = (ctypes.c_uint32 * _QUERY_MAX)()
    query = _ProgQueryAttr(target_fd=dir_fd, attach_type=_BPF_CGROUP_DEVICE, prog_ids=ctypes.addressof(ids),
                           prog_cnt=_QUERY_MAX)
    _bpf_or_raise(_BPF_PROG_QUERY, query, path, value, "bpf(BPF_PROG_QUERY) failed")
    for prog_id in ids[:query.prog_cnt]:
        try:
            prog_fd = _bpf(_BPF_PROG_GET_FD_BY_ID, _GetFdByIdAttr(prog_id=prog_id), path)
        except OSError as e:
            if e.errno == _errno.ENOENT:
                continue  # detached and freed since the query
            raise _write_error(path, value, e.errno, f"bpf(BPF_PROG_GET_FD_BY_ID) of program {prog_id} failed") from e
        info = _ProgInfo()
        try:
            _bpf_or_raise(_BPF_OBJ_GET_INFO_BY_FD, _InfoAttr(bpf_fd=prog_fd, info_len=ctypes.sizeof(info),
                                                             info=ctypes.addressof(info)), path, value,
                          "bpf(BPF_OBJ_GET_INFO_BY_FD) failed")
        except CgroupWriteError:
            os.close(prog_fd)
            raise
        yield prog_id, prog_fd, info.name.decode(errors="replace")


def bpf_device_filter_supported() -> str | None:
    """``None`` when this process can load a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program and get its
    fd by its id (``BPF_PROG_GET_FD_BY_ID``, as :func:`attach_deny_program` does for each program
    it replaces or detaches: CAP_SYS_ADMIN only, CAP_BPF does not cover it), else a sentence
    saying why not. Attaching needs a cgroup2 directory too, which the caller checks. Never raises."""
    try:
        prog_fd = _load(deny_program([]), "bpf")
    except CgroupUnsupported as e:
        return str(e)
    except OSError as e:
        why = {_errno.EPERM: ": this process lacks CAP_BPF and CAP_NET_ADMIN (CAP_SYS_ADMIN before Linux 5.8), or, "
                             "before 5.11, its RLIMIT_MEMLOCK is too low",
               _errno.EINVAL: ": the kernel does not know BPF_PROG_TYPE_CGROUP_DEVICE (built without "
                              "CONFIG_CGROUP_BPF, or older than 4.15)",
               _errno.ENOSYS: ": the kernel has no bpf() syscall (built without CONFIG_BPF_SYSCALL)"}
        return f"bpf(BPF_PROG_LOAD) of a device program failed: {os.strerror(e.errno)}{why.get(e.errno, '')}"
    info = _ProgInfo()
    try:
        _bpf(_BPF_OBJ_GET_INFO_BY_FD, _InfoAttr(bpf_fd=prog_fd, info_len=ctypes.sizeof(info),
                                                info=ctypes.addressof(info)), "bpf")
        os.close(_bpf(_BPF_PROG_GET_FD_BY_ID, _GetFdByIdAttr(prog_id=info.id), "bpf"))
    except OSError as e:
        lacks = (": this process lacks CAP_SYS_ADMIN, without which a device program attached earlier (by this daemon, "
                 "or one before a restart) can be neither replaced nor taken off") if e.errno == _errno.EPERM else ""
        return f"bpf(BPF_PROG_GET_FD_BY_ID) of a device program it loaded failed: {os.strerror(e.errno)}{lacks}"
    finally:
        os.close(prog_fd)
    return None
