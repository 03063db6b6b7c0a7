"""The classic BPF socket filter on the process-events socket (:mod:`governor.host.procevents`):
the kernel drops every event sessions do not need before it is queued to the daemon, where the
eBPF filter of :mod:`governor.host.proc_watch` (which passes far less) cannot be loaded.

Without it every event of the host costs the daemon a wake-up, a ``recv`` and a parse in
Python, and any user can send millions a second: ``prctl(PR_SET_NAME)`` sends one
``PROC_EVENT_COMM`` per call, each new thread a fork event. The filter runs in the sending
task's context (the one that forked, renamed itself or exited), so what it drops costs the
daemon nothing at all. It passes only:

* ``PROC_EVENT_FORK`` of a process (``child_pid == child_tgid``), not of a thread;
* ``PROC_EVENT_UID``.

An exec is not needed (it changes neither a process's uid nor its cgroup: docs/design.md, "The
event intake"), and was every other event of a shell running commands.

Classic BPF (``linux/filter.h``: ``struct sock_filter {__u16 code; __u8 jt; __u8 jf; __u32 k;}``,
the opcodes of ``linux/bpf_common.h``), attached with ``SO_ATTACH_FILTER`` and a ``struct
sock_fprog {unsigned short len; struct sock_filter *filter;}``. On a netlink socket the program
sees the message from its ``nlmsghdr`` on (``linux/netlink.h``, ``linux/connector.h``,
``linux/cn_proc.h``)::

    0   nlmsghdr  u32 len, u16 type (4), u16 flags, u32 seq, u32 pid
    16  cn_msg    u32 idx (16), u32 val (20), u32 seq, u32 ack, u16 len, u16 flags
    36  proc_event u32 what (36), u32 cpu, u64 timestamp_ns
    52  fork: u32 parent_pid, u32 parent_tgid, u32 child_pid (60), u32 child_tgid (64)

``BPF_LD|BPF_W|BPF_ABS`` loads in network byte order (big-endian) while the kernel writes these
fields in the host's: each constant is compared as the loads see it (:func:`loaded`). A load
past the message's end ends the program with 0: a short message is dropped.
"""

from __future__ import annotations

import ctypes
import socket
import struct
import sys

__all__ = ["SO_ATTACH_FILTER", "attach", "instructions", "loaded", "program"]

# linux/bpf_common.h: instruction classes, sizes, modes, jumps, sources.
BPF_LD, BPF_JMP, BPF_RET, BPF_MISC = 0x00, 0x05, 0x06, 0x07
BPF_W, BPF_H = 0x00, 0x08
BPF_ABS = 0x20
BPF_JEQ = 0x10
BPF_K, BPF_X = 0x00, 0x08
BPF_TAX = 0x00  # linux/filter.h: BPF_MISC's A → X
# asm-generic/socket.h
SO_ATTACH_FILTER = 26

# linux/netlink.h, linux/connector.h, linux/cn_proc.h (procevents.py takes them from here).
NLMSG_DONE = 3
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_EVENT_FORK = 0x1
PROC_EVENT_UID = 0x4
_TYPE_AT, _IDX_AT, _VAL_AT, _WHAT_AT = 4, 16, 20, 36
_CHILD_PID_AT, _CHILD_TGID_AT = 60, 64
# What a filter returns: the bytes of the message to keep (all of it), or none (dropped).
ACCEPT, DROP = 0xFFFFFFFF, 0

_INSTRUCTION = struct.Struct("=HBBI")  # struct sock_filter


def loaded(value: int, size: int = 4) -> int:
    """``value`` as written in the host's byte order, as a big-endian BPF load of ``size``
    bytes reads it."""
    return int.from_bytes(value.to_bytes(size, sys.byteorder), "big")


def instructions() -> list[tuple[int, int, int, int]]:
    """The program as ``(code, jt, jf, k)`` rows (``struct sock_filter``); a jump's ``jt`` and
    ``jf`` count the instructions skipped after it."""
    # Labels resolved by hand: 13 is the drop, 14 the accept.
    return [
        (BPF_LD | BPF_H | BPF_ABS, 0, 0, _TYPE_AT),                           # 0  A = nlmsg_type
        (BPF_JMP | BPF_JEQ | BPF_K, 0, 11, loaded(NLMSG_DONE, 2)),          # 1  not a connector message: drop
        (BPF_LD | BPF_W | BPF_ABS, 0, 0, _IDX_AT),                            # 2  A = cn_msg.id.idx
        (BPF_JMP | BPF_JEQ | BPF_K, 0, 9, loaded(CN_IDX_PROC)),             # 3
        (BPF_LD | BPF_W | BPF_ABS, 0, 0, _VAL_AT),                            # 4  A = cn_msg.id.val
        (BPF_JMP | BPF_JEQ | BPF_K, 0, 7, loaded(CN_VAL_PROC)),             # 5  another connector's: drop
        (BPF_LD | BPF_W | BPF_ABS, 0, 0, _WHAT_AT),                           # 6  A = proc_event.what
        (BPF_JMP | BPF_JEQ | BPF_K, 6, 0, loaded(PROC_EVENT_UID)),          # 7  uid: accept
        (BPF_JMP | BPF_JEQ | BPF_K, 0, 4, loaded(PROC_EVENT_FORK)),         # 8  anything else (exec too): drop
        (BPF_LD | BPF_W | BPF_ABS, 0, 0, _CHILD_TGID_AT),                     # 9  A = child_tgid
        (BPF_MISC | BPF_TAX, 0, 0, 0),                                        # 10 X = A
        (BPF_LD | BPF_W | BPF_ABS, 0, 0, _CHILD_PID_AT),                      # 11 A = child_pid
        (BPF_JMP | BPF_JEQ | BPF_X, 1, 0, 0),                                 # 12 a process (pid == tgid): accept
        (BPF_RET | BPF_K, 0, 0, DROP),                                        # 13 a thread, or not wanted
        (BPF_RET | BPF_K, 0, 0, ACCEPT),                                      # 14
    ]


def program() -> bytes:
    """The program as the kernel takes it: ``struct sock_filter`` after ``struct sock_filter``."""
    return b"".join(_INSTRUCTION.pack(*row) for row in instructions())


def attach(sock: socket.socket) -> None:
    """Attach the filter to ``sock``, a process-events socket (before it subscribes: no event
    passes unfiltered). The kernel copies the program: the buffer may go once this returns.

    Raises:
        OSError: the kernel refused the program (``EINVAL``) or has no socket filters.
    """
    code = program()
    buffer = ctypes.create_string_buffer(code, len(code))
    # struct sock_fprog: the count, then (after the C padding "@" gives) the pointer.
    fprog = struct.pack("@HP", len(code) // _INSTRUCTION.size, ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
