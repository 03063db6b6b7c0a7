"""Process-events connector messages as the kernel sends them (``linux/cn_proc.h``), and
interpreters for the few instructions the socket filters use (classic BPF:
:mod:`governor.host.proc_filter`; eBPF and its map: :mod:`governor.host.proc_watch`), which run
their programs over them as the kernel would."""

import struct
import sys

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


def run_watch(program: list[tuple[int, int, int, int, int]], packet: bytes, watched: set[int] | dict[int, int],
              capacity: int = 1 << 16) -> int:
    """What the eBPF ``program`` (:func:`governor.host.proc_watch.instructions` rows) returns for
    ``packet``, with ``watched`` as its hash map (pids, or pid → value, updated in place; an
    update past ``capacity`` fails, as on a full map). Only the instructions the program uses are known; a
    ``BPF_ABS`` load past the packet's end returns 0, as in the kernel."""
    from governor.host import proc_watch as w

    mask = (1 << 64) - 1
    regs, stack, pc = [0] * 11, bytearray(16), 0
    regs[10] = len(stack)  # the frame pointer: the stack's top, as an offset into `stack`

    def imm(value: int) -> int:  # sign-extended to 64 bits, as the kernel does
        return value & mask

    def key(at: int) -> int:
        return int.from_bytes(stack[at:at + 4], sys.byteorder)

    while True:
        code, dst, src, off, k = program[pc]
        pc += 1
        if code in (w.LD_ABS_W, w.LD_ABS_H):
            size = 4 if code == w.LD_ABS_W else 2
            if k + size > len(packet):
                return 0
            regs[0] = int.from_bytes(packet[k:k + size], "big")
        elif code == w.LD_IMM64:
            regs[dst] = ("map", k)
            pc += 1
        elif code == w.MOV64_X:
            regs[dst] = regs[src]
        elif code == w.MOV64_K:
            regs[dst] = imm(k)
        elif code == w.MOV32_K:
            regs[dst] = k & 0xFFFFFFFF
        elif code == w.ADD64_K:
            regs[dst] = (regs[dst] + k) & mask
        elif code == w.TO_BE:
            regs[dst] = int.from_bytes((regs[dst] & 0xFFFFFFFF).to_bytes(4, sys.byteorder), "big")
        elif code == w.STX_W:
            stack[regs[dst] + off:regs[dst] + off + 4] = (regs[src] & 0xFFFFFFFF).to_bytes(4, sys.byteorder)
        elif code == w.ST_B:
            stack[regs[dst] + off] = k & 0xFF
        elif code in (w.JEQ_K, w.JNE_K, w.JNE_X, w.JA):
            operand = regs[src] if code == w.JNE_X else imm(k)
            taken = {w.JEQ_K: regs[dst] == operand, w.JNE_K: regs[dst] != operand, w.JNE_X: regs[dst] != operand,
                     w.JA: True}[code]
            pc += off if taken else 0
        elif code == w.CALL and k == w.BPF_FUNC_MAP_LOOKUP_ELEM:
            assert regs[1][0] == "map"
            regs[0] = 1 if key(regs[2]) in watched else 0
        elif code == w.CALL and k == w.BPF_FUNC_MAP_UPDATE_ELEM:
            assert regs[1][0] == "map" and regs[4] == 0 and stack[regs[3]] in (w.FORKED, w.UID_CHANGED)
            if key(regs[2]) in watched or len(watched) < capacity:
                if isinstance(watched, dict):
                    watched[key(regs[2])] = stack[regs[3]]
                else:
                    watched.add(key(regs[2]))
                regs[0] = 0
            else:
                regs[0] = imm(-7)  # -E2BIG
        elif code == w.EXIT:
            return regs[0] & 0xFFFFFFFF
        else:
            raise AssertionError(f"instruction {code:#x} at {pc - 1} is not one this interpreter knows")
