"""The eBPF filter of the process-events intake (issue 42, part 2): only a uid change and the
forks of a watched process reach the daemon, so that an exec, a fork or a thread of a process
that needs nothing costs it nothing. Its program runs here through an interpreter over messages
laid out as the kernel sends them (tests/integration/test_proc_filter_v1.py loads it into the
kernel)."""

import ctypes
import struct

import pytest

from governor.host import proc_watch, procevents
from governor.host.proc_filter import ACCEPT, DROP
from support.proc_messages import message, run_watch

PROGRAM = proc_watch.instructions(7)
PROC_EVENT_EXEC, PROC_EVENT_COMM, PROC_EVENT_EXIT = 0x2, 0x200, 0x80000000


def fork(parent: int, child: int, thread_of: int | None = None) -> bytes:
    return message(procevents.PROC_EVENT_FORK, parent, parent, child, child if thread_of is None else thread_of)


def test_a_uid_change_passes_and_its_process_is_watched_from_then_on():
    watched: set[int] = set()
    assert run_watch(PROGRAM, message(procevents.PROC_EVENT_UID, 500, 500, 1000, 1000), watched) == ACCEPT
    assert watched == {500}
    # Its child, forked before its move, and that child's child: passed and watched.
    assert run_watch(PROGRAM, fork(500, 501), watched) == ACCEPT
    assert run_watch(PROGRAM, fork(501, 502), watched) == ACCEPT
    assert watched == {500, 501, 502}


def test_the_map_says_whether_a_process_was_watched_for_its_fork_or_its_uid_change():
    # runuser's child: its parent was watched, so its fork passed; then it takes the user's uid.
    watched = {400: proc_watch.UID_CHANGED}
    run_watch(PROGRAM, fork(400, 500), watched)
    assert watched == {400: proc_watch.UID_CHANGED, 500: proc_watch.FORKED}
    run_watch(PROGRAM, message(procevents.PROC_EVENT_UID, 500, 500, 1000, 1000), watched)
    assert watched[500] == proc_watch.UID_CHANGED


@pytest.mark.parametrize("packet", [
    fork(10, 11),  # a process an ungoverned (or settled) process forked: the shell of `while true; do true; done`
    message(PROC_EVENT_EXEC, 11, 11, 0, 0, 0, 0),  # any exec, a watched process's too
    message(PROC_EVENT_EXEC, 500, 500, 0, 0, 0, 0),
    fork(500, 12, thread_of=500),  # a thread of a watched process
    message(PROC_EVENT_COMM, 500, 500, 0x41414141, 0, 0, 0),  # prctl(PR_SET_NAME)
    message(PROC_EVENT_EXIT, 500, 500, 0, 17, 10, 10),
    message(procevents.PROC_EVENT_UID, 500, 500, 1000, 1000, index=2),  # another connector's
    message(procevents.PROC_EVENT_UID, 500, 500, 1000, 1000, kind=2),  # an error message
    fork(500, 13)[:-4],  # cut short: its child_tgid is missing
    b"\x00" * 8,
])
def test_every_other_event_is_dropped_in_the_kernel(packet):
    watched = {500}
    assert run_watch(PROGRAM, packet, watched) == DROP
    assert watched == {500}


def test_a_full_map_still_passes_a_uid_change():
    # The daemon looks at it from the event; only its later forks go unseen (a rescan finds them).
    watched = {1, 2}
    assert run_watch(PROGRAM, message(procevents.PROC_EVENT_UID, 500, 500, 1000, 1000), watched, capacity=2) == ACCEPT
    assert watched == {1, 2}


def test_pids_are_map_keys_in_the_hosts_byte_order():
    # 0x01020304 as the kernel writes it; a BPF_ABS load reads it big-endian, the program swaps it back.
    watched: set[int] = set()
    run_watch(PROGRAM, message(procevents.PROC_EVENT_UID, 0x01020304, 0x01020304, 1, 1), watched)
    assert watched == {0x01020304}


def test_the_program_is_what_the_kernel_takes():
    code = proc_watch._encode(PROGRAM)
    assert len(code) == 8 * len(PROGRAM)  # struct bpf_insn: u8, u8 (two registers), s16, s32
    assert struct.unpack_from("=BBhi", code, 0)[0] == proc_watch.MOV64_X
    for at, (op, _, _, off, _) in enumerate(PROGRAM):  # every jump lands inside, forwards (no loops)
        if op in (proc_watch.JEQ_K, proc_watch.JNE_K, proc_watch.JNE_X, proc_watch.JA):
            assert 0 <= off and at + 1 + off < len(PROGRAM)
    assert sum(op == proc_watch.LD_IMM64 for op, *_ in PROGRAM) == 2  # the map, in two rows each
    assert PROGRAM[-1][0] == proc_watch.EXIT


class FakeMap:
    """The map's system calls, counted."""

    def __init__(self):
        self.calls: list[tuple[int, int]] = []

    def __call__(self, command, pid):
        self.calls.append((command, pid))


def test_forgetting_a_process_never_watched_costs_no_system_call():
    watched = proc_watch.Watched.__new__(proc_watch.Watched)
    watched.watched = set()
    watched._update = calls = FakeMap()
    watched.passed(500)  # the program watches it
    watched.forget(500)
    watched.forget(500)
    watched.forget(11)  # a settled process, as the rescan settles every process
    watched.watch(600)
    watched.watch(600)
    assert calls.calls == [(proc_watch.BPF_MAP_DELETE_ELEM, 500), (proc_watch.BPF_MAP_UPDATE_ELEM, 600)]


class FakeKernelMap:
    """The map's system calls against a dict of pid → value, as the kernel keeps it."""

    def __init__(self, watched: proc_watch.Watched, values: dict[int, int]):
        self.watched, self.values, self.calls = watched, values, []

    def __call__(self, command, pid):
        self.calls.append((command, pid))
        if command == proc_watch.BPF_MAP_LOOKUP_ELEM:
            if pid not in self.values:
                return -1
            self.watched._value.value = self.values[pid]
        elif command == proc_watch.BPF_MAP_DELETE_ELEM:
            self.values.pop(pid, None)
        return 0


def test_a_child_decided_by_its_parent_stays_watched_once_its_uid_changed():
    # CI saw it under load: the daemon read runuser's child's fork (its parent settled: root's)
    # after the child took alice's uid; forgetting it then dropped the fork of the command it
    # ran, which exited at once: its child stayed outside her session until the rescan.
    watched = proc_watch.Watched.__new__(proc_watch.Watched)
    watched.watched = {500, 501}
    watched._value = ctypes.c_uint8()
    kernel = FakeKernelMap(watched, {500: proc_watch.UID_CHANGED, 501: proc_watch.FORKED})
    watched._update = kernel
    watched.forget(500, forked=True)
    watched.forget(501, forked=True)
    assert kernel.values == {500: proc_watch.UID_CHANGED} and watched.watched == {500}
    watched.forget(500)  # decided by its own uid event: forgotten whatever the map says
    assert kernel.values == {} and watched.watched == set()
