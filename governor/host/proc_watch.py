"""The eBPF socket filter on the process-events socket (:mod:`governor.host.procevents`): the
kernel passes only the events of processes the daemon *watches*, so that an exec, a fork or a
thread of a process that needs nothing (an ungoverned user's, or one already in its session or
task: nearly all) costs the daemon nothing at all.

What sessions need (docs/design.md, "The event intake"): a process becomes a governed user's by
taking the uid (``setuid``: sshd, su, cron, runuser), and a child starts in its parent's cgroup
by the kernel itself. So only two events can ask for a move: a uid change, and a fork of a
process that changed uid and has not been moved yet (its child was forked outside the session;
the parent may be gone by the time its uid event is read). An exec changes neither, and is not
needed. The program, run in the context of the task that caused the event, keeps a hash map of
watched process ids (tgids):

* ``PROC_EVENT_UID``: watch the process (:data:`UID_CHANGED`), pass the event;
* ``PROC_EVENT_FORK`` of a process (not a thread) whose parent is watched: watch the child
  (:data:`FORKED`), pass the event;
* anything else: drop.

The daemon stops watching a process once it has decided it (:meth:`Watched.forget`: in place,
not governed, gone) or moved it, and watches one a rescan found outside its place
(:meth:`Watched.watch`). A full map passes the event unwatched: the daemon still looks at it.
A child decided by its parent (forked where its parent was settled) stays watched if its uid
changed since: the daemon reads its fork event before its uid event, and the child may fork
in between (runuser's child takes the user's uid, execs the command, which forks and exits).

Program type ``BPF_PROG_TYPE_SOCKET_FILTER``, attached with ``SO_ATTACH_BPF``; the packet is the
netlink message from its ``nlmsghdr`` on (offsets in :mod:`governor.host.proc_filter`), read
with ``BPF_LD|BPF_ABS`` (big-endian loads, as in classic BPF: constants are compared as
:func:`~governor.host.proc_filter.loaded` gives them, and a pid is swapped back to the host's
order, ``BPF_END|BPF_TO_BE``, before it is a map key). ``bpf(2)`` is called through libc's
``syscall``; a kernel or a container without it (``ENOSYS``, ``EPERM``) keeps the classic filter.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import struct
import sys

from governor.host.proc_filter import (CN_IDX_PROC, CN_VAL_PROC, NLMSG_DONE, PROC_EVENT_FORK, PROC_EVENT_UID,
                                       loaded)

__all__ = ["SO_ATTACH_BPF", "Watched", "instructions"]

# asm/unistd.h: bpf(2) by machine; elsewhere the classic filter is kept.
_SYSCALL = {"x86_64": 321, "aarch64": 280}
# linux/bpf.h: commands, map and program types, helpers.
BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_MAP_DELETE_ELEM, BPF_PROG_LOAD = 0, 1, 2, 3, 5
BPF_MAP_TYPE_HASH, BPF_PROG_TYPE_SOCKET_FILTER = 1, 1
BPF_FUNC_MAP_LOOKUP_ELEM, BPF_FUNC_MAP_UPDATE_ELEM = 1, 2
BPF_PSEUDO_MAP_FD = 1
# asm-generic/socket.h
SO_ATTACH_BPF = 50
# Processes watched at once at most (4 bytes of key, 1 of value): only those between a uid
# change and their move, and their children meanwhile.
WATCHED_MAX = 1 << 16
# A watched process's value in the map: why the program watches it.
FORKED, UID_CHANGED = 1, 2
# linux/bpf_common.h, linux/bpf.h: opcodes.
LD_ABS_H, LD_ABS_W = 0x28, 0x20  # BPF_LD|BPF_ABS|BPF_H, …|BPF_W
LD_IMM64 = 0x18  # BPF_LD|BPF_IMM|BPF_DW
MOV64_X, MOV64_K, ADD64_K, MOV32_K = 0xBF, 0xB7, 0x07, 0xB4
TO_BE = 0xDC  # BPF_ALU|BPF_END|BPF_TO_BE: to big-endian, i.e. back to the host's order of a BPF_ABS load
STX_W, ST_B = 0x63, 0x72  # BPF_STX|BPF_MEM|BPF_W, BPF_ST|BPF_MEM|BPF_B
JEQ_K, JNE_K, JNE_X, JA = 0x15, 0x55, 0x5D, 0x05
CALL, EXIT = 0x85, 0x95
_TYPE_AT, _IDX_AT, _VAL_AT, _WHAT_AT = 4, 16, 20, 36
_TGID_AT = 56  # fork: parent_tgid; uid: process_tgid
_CHILD_PID_AT, _CHILD_TGID_AT = 60, 64
R0, R1, R2, R3, R4, R6, R7, R10 = 0, 1, 2, 3, 4, 6, 7, 10
Row = tuple[int, int, int, "int | str", int]  # (code, dst, src, off or a label, imm)


def instructions(map_fd: int) -> list[Row]:
    """The program as ``(code, dst, src, off, imm)`` rows (``struct bpf_insn``), a jump's
    ``off`` counting the instructions skipped after it; the map's ``ld_imm64`` takes two rows."""
    key, value = -4, -8  # on the stack: the u32 pid looked up or watched, the u8 value
    rows: list[tuple[str | None, Row]] = [
        (None, (MOV64_X, R6, R1, 0, 0)),                                   # r6 = the skb (BPF_ABS loads need it)
        (None, (LD_ABS_H, 0, 0, 0, _TYPE_AT)),                             # r0 = nlmsg_type
        (None, (JNE_K, R0, 0, "drop", loaded(NLMSG_DONE, 2))),            # not a connector message
        (None, (LD_ABS_W, 0, 0, 0, _IDX_AT)),
        (None, (JNE_K, R0, 0, "drop", loaded(CN_IDX_PROC))),
        (None, (LD_ABS_W, 0, 0, 0, _VAL_AT)),
        (None, (JNE_K, R0, 0, "drop", loaded(CN_VAL_PROC))),              # another connector's
        (None, (LD_ABS_W, 0, 0, 0, _WHAT_AT)),                             # r0 = proc_event.what
        (None, (JEQ_K, R0, 0, "uid", loaded(PROC_EVENT_UID))),
        (None, (JNE_K, R0, 0, "drop", loaded(PROC_EVENT_FORK))),          # exec, exit, comm, …
        (None, (LD_ABS_W, 0, 0, 0, _CHILD_TGID_AT)),
        (None, (MOV64_X, R7, R0, 0, 0)),                                   # r7 = child_tgid (as loaded)
        (None, (LD_ABS_W, 0, 0, 0, _CHILD_PID_AT)),
        (None, (JNE_X, R0, R7, "drop", 0)),                                # a thread: pid != tgid
        (None, (LD_ABS_W, 0, 0, 0, _TGID_AT)),                             # r0 = parent_tgid
        (None, (TO_BE, R0, 0, 0, 32)),
        (None, (STX_W, R10, R0, key, 0)),
        (None, (LD_IMM64, R1, BPF_PSEUDO_MAP_FD, 0, map_fd)),
        (None, (0, 0, 0, 0, 0)),
        (None, (MOV64_X, R2, R10, 0, 0)),
        (None, (ADD64_K, R2, 0, 0, key)),
        (None, (CALL, 0, 0, 0, BPF_FUNC_MAP_LOOKUP_ELEM)),
        (None, (JEQ_K, R0, 0, "drop", 0)),                                 # the parent is not watched
        (None, (ST_B, R10, 0, value, FORKED)),
        (None, (MOV64_X, R0, R7, 0, 0)),                                   # watch the child
        (None, (JA, 0, 0, "watch", 0)),
        ("uid", (ST_B, R10, 0, value, UID_CHANGED)),
        (None, (LD_ABS_W, 0, 0, 0, _TGID_AT)),                             # r0 = process_tgid
        ("watch", (TO_BE, R0, 0, 0, 32)),
        (None, (STX_W, R10, R0, key, 0)),
        (None, (LD_IMM64, R1, BPF_PSEUDO_MAP_FD, 0, map_fd)),
        (None, (0, 0, 0, 0, 0)),
        (None, (MOV64_X, R2, R10, 0, 0)),
        (None, (ADD64_K, R2, 0, 0, key)),
        (None, (MOV64_X, R3, R10, 0, 0)),
        (None, (ADD64_K, R3, 0, 0, value)),
        (None, (MOV64_K, R4, 0, 0, 0)),                                    # BPF_ANY
        (None, (CALL, 0, 0, 0, BPF_FUNC_MAP_UPDATE_ELEM)),                 # a full map: passed unwatched
        (None, (MOV32_K, R0, 0, 0, -1)),                                   # pass the whole message
        (None, (EXIT, 0, 0, 0, 0)),
        ("drop", (MOV64_K, R0, 0, 0, 0)),
        (None, (EXIT, 0, 0, 0, 0)),
    ]
    labels = {label: at for at, (label, _) in enumerate(rows) if label}
    return [(code, dst, src, labels[off] - at - 1 if isinstance(off, str) else off, imm)
            for at, (_, (code, dst, src, off, imm)) in enumerate(rows)]


def _encode(rows: list[Row]) -> bytes:
    """``struct bpf_insn {u8 code; u8 dst_reg:4, src_reg:4; s16 off; s32 imm;}`` (the nibbles'
    order follows the machine's bitfields)."""
    little = sys.byteorder == "little"
    return b"".join(struct.pack("=BBhi", code, (src << 4 | dst) if little else (dst << 4 | src), off,
                                imm if imm < 1 << 31 else imm - (1 << 32))
                    for code, dst, src, off, imm in rows)


def _bpf(command: int, attr: bytes) -> int:
    """``bpf(command, attr, len(attr))``.

    Raises:
        OSError: the kernel refused it, or this machine's bpf(2) number is not known (ENOSYS).
    """
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"bpf(2) on {platform.machine()} is not known here")
    buffer = ctypes.create_string_buffer(attr, len(attr))
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(ctypes.c_long(number), ctypes.c_int(command), buffer, ctypes.c_uint(len(attr)))
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result


class Watched:
    """The map of watched processes and the program that reads it, attached to a socket.

    Raises (constructor):
        OSError: the kernel has no bpf(2) for this caller (``ENOSYS``, ``EPERM``) or refused
            the program (``EINVAL``, with the verifier's log in the message).
    """

    def __init__(self, sock: socket.socket) -> None:
        self._map = _bpf(BPF_MAP_CREATE, struct.pack("=IIIII", BPF_MAP_TYPE_HASH, 4, 1, WATCHED_MAX, 0).ljust(72, b"\0"))
        self.watched: set[int] = set()  # those the daemon knows of: every pid an event passed, and watch()'s
        self._libc, self._number = ctypes.CDLL(None, use_errno=True), _SYSCALL[platform.machine()]
        self._key = ctypes.c_uint32()
        self._value = ctypes.c_uint8(UID_CHANGED)
        try:
            code = _encode(instructions(self._map))
            program = ctypes.create_string_buffer(code, len(code))
            license_ = ctypes.create_string_buffer(b"GPL")
            log = ctypes.create_string_buffer(1 << 16)
            attr = struct.pack("=IIQQIIQ", BPF_PROG_TYPE_SOCKET_FILTER, len(code) // 8, ctypes.addressof(program),
                               ctypes.addressof(license_), 1, len(log), ctypes.addressof(log)).ljust(128, b"\0")
            try:
                loaded = _bpf(BPF_PROG_LOAD, attr)
            except OSError as error:
                said = log.value.decode(errors="replace").strip().splitlines()
                raise OSError(error.errno, f"{error.strerror}: {said[-1] if said else 'no verifier log'}") from None
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_BPF, loaded)
            finally:
                os.close(loaded)  # the socket holds the program
        except OSError:
            os.close(self._map)
            raise

    def passed(self, pid: int) -> None:
        """Note that an event of process ``pid`` passed: the program watches it."""
        self.watched.add(pid)

    def watch(self, pid: int) -> None:
        """Pass the fork events of process ``pid`` (one a rescan found outside its place) until
        :meth:`forget`. A full map leaves it unwatched: the rescan's next walk finds its children."""
        if pid not in self.watched:
            self.watched.add(pid)
            self._update(BPF_MAP_UPDATE_ELEM, pid)

    def forget(self, pid: int, *, forked: bool = False) -> None:
        """Stop watching process ``pid`` (decided, moved or gone); a pid not watched costs no
        system call. ``forked``: decided by its parent at its fork, so kept watched if its uid
        changed since (its uid event is still to be read; one system call more)."""
        if pid in self.watched:
            if forked and self._update(BPF_MAP_LOOKUP_ELEM, pid) == 0 and self._value.value == UID_CHANGED:
                return
            self.watched.discard(pid)
            self._update(BPF_MAP_DELETE_ELEM, pid)

    def close(self) -> None:
        os.close(self._map)

    def _update(self, command: int, pid: int) -> int:
        """One map call for ``pid``: its result (0, or -1 when refused); a lookup leaves the
        value in ``self._value``, an update writes :data:`UID_CHANGED` (the daemon's own watch
        is a decision still to make, as a uid change's)."""
        # union bpf_attr for map elements: {u32 map_fd; u64 key (aligned); u64 value; u64 flags}
        # (a delete takes no value: the kernel refuses one, EINVAL).
        self._key.value = pid
        value = ctypes.addressof(self._value) if command != BPF_MAP_DELETE_ELEM else 0
        if command == BPF_MAP_UPDATE_ELEM:
            self._value.value = UID_CHANGED
        attr = struct.pack("=IIQQQ", self._map, 0, ctypes.addressof(self._key), value, 0)
        # An update's or a delete's result does not matter to the callers: a pid already gone
        # from the map, or a full one, changes nothing.
        return self._libc.syscall(ctypes.c_long(self._number), ctypes.c_int(command), attr, ctypes.c_uint(len(attr)))
