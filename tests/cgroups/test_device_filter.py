"""The device deny program, checked by running its bytecode in a tiny interpreter (no kernel,
no root), and the v1 ``devices.deny`` lines."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.cgroups.device_filter import deny_program
from governor.cgroups.limits import CgroupLimits, v1_files

ACCESSES = (1, 2, 4)  # BPF_DEVCG_ACC_MKNOD, _READ, _WRITE (include/uapi/linux/bpf.h)
TYPES = {"b": 1, "c": 2}  # BPF_DEVCG_DEV_BLOCK, _CHAR


def run(program: bytes, kind: str, major: int, minor: int, access: int = 2) -> int:
    """Run ``program`` on a ``struct bpf_cgroup_dev_ctx``; knows only the opcodes deny_program
    emits, and fails on any other or on a jump out of the program."""
    assert len(program) % 8 == 0
    insns = [struct.unpack("<BBhi", program[i:i + 8]) for i in range(0, len(program), 8)]
    ctx = struct.pack("<III", (access << 16) | TYPES[kind], major, minor)
    regs, pc = {1: "ctx"}, 0
    while True:
        code, regs_byte, off, imm = insns[pc]
        dst, src = regs_byte & 0xF, regs_byte >> 4
        pc += 1
        if code == 0x61:  # ldx w: dst = *(u32 *)(src + off)
            assert regs[src] == "ctx" and off in (0, 4, 8)
            regs[dst] = struct.unpack_from("<I", ctx, off)[0]
        elif code == 0x54:  # alu32 and imm
            regs[dst] = (regs[dst] & imm) & 0xFFFFFFFF
        elif code == 0x55:  # jne imm (64-bit compare, imm sign-extended)
            if regs[dst] != imm & 0xFFFFFFFFFFFFFFFF:
                assert off >= 0, "backward jump: the verifier refuses loops"
                pc += off
        elif code == 0xB7:  # mov64 imm
            regs[dst] = imm & 0xFFFFFFFFFFFFFFFF
        elif code == 0x95:  # exit
            return regs[0]
        else:
            raise AssertionError(f"unexpected opcode {code:#x} at {pc - 1}")
        assert 0 <= pc < len(insns), f"jump out of the program to {pc}"


def test_denies_listed_char_device_for_every_access():
    program = deny_program([("c", 195, 0)])
    assert [run(program, "c", 195, 0, access) for access in ACCESSES] == [0, 0, 0]
    assert run(program, "c", 195, 1) == 1
    assert run(program, "c", 196, 0) == 1
    assert run(program, "b", 195, 0) == 1
    assert run(program, "c", 1, 3) == 1  # /dev/null


def test_minor_minus_one_denies_the_whole_major():
    program = deny_program([("c", 195, -1), ("b", 8, 16)])
    assert run(program, "c", 195, 0) == run(program, "c", 195, 255) == 0
    assert run(program, "b", 195, 0) == 1
    assert run(program, "b", 8, 16) == 0
    assert run(program, "b", 8, 0) == 1


def test_empty_list_allows_everything():
    program = deny_program([])
    assert all(run(program, kind, major, minor, access) == 1
               for kind in TYPES for major in (0, 1, 195) for minor in (0, 3) for access in ACCESSES)


def test_length_is_eight_bytes_an_instruction():
    # 4 to load the context, 4 per whole major, 5 per single minor, 2 to allow.
    assert len(deny_program([])) == 8 * 6
    assert len(deny_program([("c", 195, 0), ("c", 195, 255), ("c", 236, -1)])) == 8 * (4 + 5 + 5 + 4 + 2)


devices = st.lists(st.tuples(st.sampled_from("cb"), st.integers(0, 4095),
                             st.one_of(st.just(-1), st.integers(0, (1 << 20) - 1))), max_size=6)


@given(denied=devices, kind=st.sampled_from("cb"), major=st.integers(0, 4095),
       minor=st.integers(0, (1 << 20) - 1), access=st.sampled_from(ACCESSES), pick=st.integers(0, 5))
def test_denies_exactly_the_listed_devices(denied, kind, major, minor, access, pick):
    if denied and pick % 2:  # half the time, ask about a listed device
        kind, major, listed = denied[pick % len(denied)]
        minor = minor if listed == -1 else listed
    listed = any(k == kind and m == major and n in (-1, minor) for k, m, n in denied)
    assert run(deny_program(denied), kind, major, minor, access) == (0 if listed else 1)


def test_v1_devices_deny_lines_are_canonical():
    limits = CgroupLimits(devices_denied=[("c", 195, 0), ("c", 195, -1), ("b", 8, 16), ("c", 195, 0)])
    assert limits.devices_denied == (("b", 8, 16), ("c", 195, -1), ("c", 195, 0))  # sorted, each once
    assert [value for _, file, value in v1_files(limits) if file == "devices.deny"] == [
        "b 8:16 rwm", "c 195:* rwm", "c 195:0 rwm"]
    assert v1_files(CgroupLimits()) == []


@pytest.mark.parametrize("device", [("a", 1, 3), ("c", -1, 0), ("c", 4096, 0), ("c", 195, -2),
                                    ("b", 8, 1 << 20)])
def test_rejects_what_the_kernel_cannot_name(device):
    with pytest.raises(ValueError):
        deny_program([device])
    with pytest.raises(ValueError, match="device"):
        CgroupLimits(devices_denied=(device,))
