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

cgroup v1 has the ``devices`` controller instead: :func:`deny_v1_lines` gives the same deny list
as ``devices.deny`` lines (kernel ``Documentation/admin-guide/cgroup-v1/devices.rst``).

Sources of the numbers below: ``include/uapi/linux/bpf.h`` and ``bpf_common.h`` (instruction
encoding, ``union bpf_attr``, ``struct bpf_cgroup_dev_ctx``, ``BPF_DEVCG_*``); runc's
``libcontainer/cgroups/devices/devicefilter.go`` and systemd's ``bpf-devices.c`` generate
programs of the same shape.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os
import platform
import struct
from collections.abc import Sequence
from pathlib import Path

from governor.cgroups.errors import CgroupUnsupported, CgroupWriteError

__all__ = ["Device", "attach_deny_program", "bpf_device_filter_supported", "deny_program", "deny_v1_lines"]

Device = tuple[str, int, int]
"""``("c" or "b", major, minor)``; a minor of ``-1`` means every minor of that major."""

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

# include/linux/kdev_t.h: MINORBITS 20, so majors have 12 bits. Keeping to these also keeps
# every number below 2**31, where JNE's sign-extended 32-bit immediate still matches.
_MAX_MAJOR, _MAX_MINOR = (1 << 12) - 1, (1 << 20) - 1


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


def _checked(device: Device) -> Device:
    kind, major, minor = device
    if kind not in _DEVCG_TYPE:
        raise ValueError(f"device type must be 'c' or 'b', not {kind!r}")
    if not 0 <= major <= _MAX_MAJOR:
        raise ValueError(f"device major {major} is outside 0..{_MAX_MAJOR}")
    if minor != -1 and not 0 <= minor <= _MAX_MINOR:
        raise ValueError(f"device minor {minor} is outside 0..{_MAX_MINOR} (or -1 for all)")
    return kind, major, minor


def _rule(device: Device) -> str:
    kind, major, minor = device
    return f"{kind} {major}:{'*' if minor == -1 else minor}"


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
            12-bit major / 20-bit minor.
    """
    program = [_ldx_w(_R2, _R1, _CTX_ACCESS_TYPE), _and32_imm(_R2, 0xFFFF),
               _ldx_w(_R4, _R1, _CTX_MAJOR), _ldx_w(_R5, _R1, _CTX_MINOR)]
    for kind, major, minor in map(_checked, denied):
        # Built back to front so that each jump's offset is simply what follows it in the block.
        block = [_mov64_imm(_R0, 0), _exit()]
        if minor != -1:
            block.insert(0, _jne_imm(_R5, minor, len(block)))
        block.insert(0, _jne_imm(_R4, major, len(block)))
        block.insert(0, _jne_imm(_R2, _DEVCG_TYPE[kind], len(block)))
        program += block
    program += [_mov64_imm(_R0, 1), _exit()]
    return b"".join(program)


def deny_v1_lines(denied: Sequence[Device]) -> list[str]:
    """The lines that deny ``denied`` in a v1 ``devices`` cgroup, e.g. ``["c 195:0 rwm",
    "c 195:* rwm"]`` (minor ``-1`` → ``*``).

    Write them to ``devices.deny`` one ``write(2)`` each (the kernel parses one rule per
    write; kernel Documentation/admin-guide/cgroup-v1/devices.rst).

    Raises:
        ValueError: as :func:`deny_program`.
    """
    return [f"{_rule(_checked(device))} rwm" for device in denied]


# --- bpf(2) ---------------------------------------------------------------------------------

_BPF_PROG_LOAD, _BPF_PROG_ATTACH = 5, 8
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
                ("_zero", ctypes.c_uint8 * (_ATTR_SIZE - 48))]


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


def _load(program: bytes, path: str, log: ctypes.Array | None = None) -> int:
    """Load ``program`` as a CGROUP_DEVICE program and return its fd; with ``log``, the
    verifier writes its log there (log_level 1)."""
    insns = ctypes.create_string_buffer(program, len(program))
    licence = ctypes.create_string_buffer(_LICENSE, len(_LICENSE))
    attr = _ProgLoadAttr(prog_type=_BPF_PROG_TYPE_CGROUP_DEVICE, insn_cnt=len(program) // 8,
                         insns=ctypes.addressof(insns), license=ctypes.addressof(licence))
    if log is not None:
        attr.log_level, attr.log_size, attr.log_buf = 1, len(log), ctypes.addressof(log)
    return _bpf(_BPF_PROG_LOAD, attr, path)


def _write_error(path: str, value: str, errno: int | None, detail: str = "") -> CgroupWriteError:
    error = CgroupWriteError(path, value, errno)
    if detail:
        error.args = (f"{error.args[0]}; {detail}",)
    return error


def attach_deny_program(cgroup_dir: Path, denied: Sequence[Device]) -> None:
    """Load :func:`deny_program` ``(denied)`` and attach it to the cgroup v2 directory
    ``cgroup_dir`` (``BPF_CGROUP_DEVICE``, ``BPF_F_ALLOW_MULTI``), then close both fds: the
    attachment holds the program for as long as the cgroup exists.

    Each call attaches one more program; an access is allowed only when every program on the
    path from the root allows it (kernel Documentation/admin-guide/cgroup-v2.rst, "Device
    controller"; include/uapi/linux/bpf.h on ``BPF_F_ALLOW_MULTI``).

    Raises:
        ValueError: as :func:`deny_program`.
        CgroupWriteError: ``bpf()`` or opening the directory failed; ``path`` is the cgroup
            directory, ``value`` describes the program (``"BPF device program denying c 195:0,
            c 195:255"``), ``errno`` is set (``EPERM`` without CAP_BPF/CAP_NET_ADMIN or
            CAP_SYS_ADMIN, ``EBADF`` when the directory is not on cgroup2, ``ENOENT`` when the
            cgroup vanished); a refused load carries the verifier log in the message.
        CgroupUnsupported: this machine's bpf syscall number is unknown.
    """
    program, path = deny_program(denied), str(cgroup_dir)
    value = f"BPF device program denying {', '.join(map(_rule, denied)) or 'nothing'}"
    try:
        prog_fd = _load(program, path)
    except OSError as first:
        # The first attempt goes without a log: the verifier then skips writing one for the
        # programs it accepts, which is all of them unless something is badly wrong.
        log = ctypes.create_string_buffer(_LOG_SIZE)
        try:
            prog_fd = _load(program, path, log)
        except OSError:
            text = log.value.decode(errors="replace").strip()
            raise _write_error(path, value, first.errno,
                               f"bpf(BPF_PROG_LOAD) verifier log: {text or '(empty)'}") from first
    try:
        try:
            dir_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise _write_error(path, value, e.errno, "cannot open the cgroup directory") from e
        try:
            _bpf(_BPF_PROG_ATTACH, _ProgAttachAttr(target_fd=dir_fd, attach_bpf_fd=prog_fd,
                                                   attach_type=_BPF_CGROUP_DEVICE,
                                                   attach_flags=_BPF_F_ALLOW_MULTI), path)
        except OSError as e:
            raise _write_error(path, value, e.errno, "bpf(BPF_PROG_ATTACH) failed") from e
        finally:
            os.close(dir_fd)
    finally:
        os.close(prog_fd)


def bpf_device_filter_supported() -> str | None:
    """``None`` when this process can load a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program here
    (it loads :func:`deny_program` ``([])`` and closes it), else a sentence saying why not.

    Only loading is tried: attaching also needs a cgroup2 directory, which the caller checks.
    Never raises.
    """
    try:
        os.close(_load(deny_program([]), "bpf"))
    except CgroupUnsupported as e:
        return str(e)
    except OSError as e:
        name = _errno.errorcode.get(e.errno, str(e.errno))
        failed = f"bpf(BPF_PROG_LOAD) of a device program failed: {os.strerror(e.errno)} ({name})"
        if e.errno == _errno.EPERM:
            return (f"{failed}: this process lacks CAP_BPF and CAP_NET_ADMIN (CAP_SYS_ADMIN before "
                    "Linux 5.8), or, before 5.11, its RLIMIT_MEMLOCK is too low")
        if e.errno == _errno.EINVAL:
            return (f"{failed}: the kernel does not know BPF_PROG_TYPE_CGROUP_DEVICE (built without "
                    "CONFIG_CGROUP_BPF, or older than 4.15)")
        if e.errno == _errno.ENOSYS:
            return f"{failed}: the kernel has no bpf() syscall (built without CONFIG_BPF_SYSCALL)"
        return failed
    return None
