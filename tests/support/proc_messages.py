"""Process-events connector messages as the kernel sends them (``linux/cn_proc.h``), and a
classic BPF interpreter for the few instructions :mod:`governor.host.proc_filter` uses, which
runs its program over them as the kernel would."""

import struct

from governor.host import proc_filter as f


def message(what: int, *fields: int, index: int = 1, kind: int = 3) -> bytes:
    """One netlink message: ``nlmsghdr``, ``cn_msg`` of connector ``index``, then ``proc_event``
    ``what`` with ``fields`` (u32 each) as its data."""
    event = struct.pack("=IIQ", what, 0, 0) + struct.pack(f"={len(fields)}I", *fields)
    body = struct.pack("=IIIIHH", index, 1, 0, 0, len(event), 0) + event
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def run_filter(program: list[tuple[int, int, int, int]], packet: bytes) -> int:
    """What ``program`` (``(code, jt, jf, k)`` rows) returns for ``packet``: a load past its end
    returns 0, as the kernel's interpreter does."""
    a = x = pc = 0
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code in (f.BPF_LD | f.BPF_W | f.BPF_ABS, f.BPF_LD | f.BPF_H | f.BPF_ABS):
            size = 4 if code == f.BPF_LD | f.BPF_W | f.BPF_ABS else 2
            if k + size > len(packet):
                return 0
            a = int.from_bytes(packet[k:k + size], "big")
        elif code == f.BPF_MISC | f.BPF_TAX:
            x = a
        elif code in (f.BPF_JMP | f.BPF_JEQ | f.BPF_K, f.BPF_JMP | f.BPF_JEQ | f.BPF_X):
            operand = x if code & f.BPF_X else k
            pc += jt if a == operand else jf
        elif code == f.BPF_RET | f.BPF_K:
            return k
        else:
            raise AssertionError(f"instruction {code:#x} at {pc - 1} is not one this interpreter knows")
