"""An ordinary local user against the daemon (issue 12): the fuzzer's requests, forked
clients that launch themselves, and a process that runs as ``nobody`` and hands its
connections back. Each runs in a forked child that became ``nobody`` (SO_PEERCRED keeps who
connected), so nothing here is root's."""

from __future__ import annotations

import fcntl
import gc
import json
import os
import random
import select
import socket
import struct
import subprocess
import sys
import termios
import time
import traceback
from collections import Counter
from collections.abc import Callable

from support.waits import within

NOBODY = 65534


def as_nobody(work: Callable[[], dict]) -> dict:
    """Run ``work`` in a forked child that became ``nobody``; its result (a JSON object) back."""
    return as_user(NOBODY, work)


def fresh_as_nobody(work: str, **arguments) -> dict:
    """``<this module>.<work>(**arguments)`` (its result, a JSON object) in a new interpreter that
    became ``nobody``: for work that forks thousands of times. A fork copies its process's page
    tables, and the test process grows through a run (400 forked clients took 3x the time
    beside 3 M objects), so its figures would depend on the tests before."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import json, os, sys; sys.path[:0] = json.loads(sys.argv[1]); import hostile; os.setgroups([]); "
            "os.setgid(hostile.NOBODY); os.setuid(hostile.NOBODY); "
            "print(json.dumps(getattr(hostile, sys.argv[2])(**json.loads(sys.argv[3]))))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps([here, os.path.dirname(here)]), work,
                           json.dumps(arguments)], stdout=subprocess.PIPE, check=True, text=True)
    return json.loads(done.stdout)


def connections_as_nobody(path: str, count: int) -> tuple[list[socket.socket], list[int]]:
    """``count`` connections made by processes of ``nobody`` that have exited since, and their
    pids: the connections stay open here (passed back with SCM_RIGHTS)."""
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            parent.close()
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            for _ in range(count):
                grandchild = os.fork()
                if grandchild == 0:
                    sock = socket.socket(socket.AF_UNIX)
                    sock.connect(path)
                    socket.send_fds(child, [str(os.getpid()).encode().ljust(16)], [sock.fileno()])
                    os._exit(0)
                os.waitpid(grandchild, 0)
        finally:
            os._exit(0)
    child.close()
    socks, pids = [], []
    for _ in range(count):
        data, fds, _, _ = socket.recv_fds(parent, 16, 1)
        socks.append(socket.socket(fileno=fds[0]))
        pids.append(int(data.decode().strip()))
    os.waitpid(pid, 0)
    parent.close()
    return socks, pids


def request(sock: socket.socket, line: bytes, timeout: float = 30) -> dict | None:
    """Send one line and read one reply line; None when the server closed instead."""
    sock.settimeout(timeout)
    sock.sendall(line)
    return reply(sock)


def reply(sock: socket.socket) -> dict | None:
    """The next line the server sends on ``sock``; None when it closed instead. What follows
    that line stays in the socket for the next call (a queued launch's updates and its start
    may come in one read)."""
    data = b""
    while True:
        ahead = sock.recv(65536, socket.MSG_PEEK)
        if not ahead:
            return None
        end = ahead.find(b"\n")
        data += sock.recv(len(ahead) if end < 0 else end + 1)
        if end >= 0:
            return json.loads(data)


def hostile_lines(count: int, seed: int, own_pid: int) -> list[bytes]:
    """``count`` request lines that are wrong in every way a fuzzer finds: bad bytes, bad JSON,
    bad types, hostile numbers (1e308, NaN, -0.0, 5,000-digit integers), lone surrogates,
    path-like and control-character names, other pids, huge commands, unknown ops."""
    rng = random.Random(seed)
    numbers = ["1e308", "-1e308", "NaN", "Infinity", "-0.0", "0", "-1", "1" * 5000, "2e-308", "18446744073709551616",
               "0.0000001", "true", "null", '"1"', "[]", "{}"]
    names = ['"../../x"', '""', '"a/b"', '"task-1"', '"cgroup.procs"', '"\\udcff"', '"\\ud800x"', '"x\\ny"',
             '"' + "g" * 5000 + '"', '"*"', '"root"', '"F"', '"\\u0000"']
    pids = ["1", "0", "-1", str(own_pid), "4194304", "1e308", "2147483648", "true", '"1"']
    ops = ['"launch"', '"status"', '"watch"', '"explain"', '"reload"', '"set-weight"', '"nope"', "1", "null",
           '"LAUNCH"', '"status\\u0000"']

    def pick(choices):
        return rng.choice(choices)

    def line() -> bytes:
        kind = rng.randrange(8)
        if kind == 0:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b"") + b"\n"
        if kind == 1:
            return pick([b"{", b"[1,2", b'{"op": "status"', b"\xff\xfe{}", b'{"op": "status"}{"op":1}',
                         b'"just a string"', b"[" * 10000 + b"]" * 10000, b"{}" * 3]) + b"\n"
        if kind == 2:
            demand = ", ".join(f'"{k}": {pick(numbers)}' for k in rng.sample(
                ["cpu", "memory", "io_read", "io_write", "gpu", "\\udcff"], rng.randrange(0, 4)))
            return (f'{{"op": "launch", "pid": {pick(pids)}, "group": {pick(names + ["null"])}, '
                    f'"demand": {{{demand}}}, "wait": false}}\n').encode()
        if kind == 3:
            return f'{{"op": "set-weight", "group": {pick(names)}, "weight": {pick(numbers)}}}\n'.encode()
        if kind == 4:
            return f'{{"op": {pick(ops)}, {pick(names)}: {pick(numbers)}}}\n'.encode()
        if kind == 5:
            command = json.dumps(["x" * rng.randrange(1, 5000)] * rng.randrange(1, 100))
            return f'{{"op": "launch", "pid": {pick(pids)}, "command": {command}, "wait": false}}\n'.encode()
        if kind == 6:
            return f'{{"op": "watch", "interval": {pick(numbers)}}}\n'.encode()
        return f'{{"op": {pick(ops)}}}\n'.encode()

    return [line() for _ in range(count)]


def fuzz(path: str, lines: list[bytes]) -> dict:
    """Send ``lines`` one by one, on as many connections as the server's closing needs; count
    the replies by error code (``ok`` for a success, ``closed`` for no reply)."""
    codes: Counter[str] = Counter()
    sock = None
    start = time.monotonic()
    for line in lines:
        if sock is None:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(path)
        try:
            reply = request(sock, line)
        except OSError:
            reply = None
        if reply is None:
            codes["closed"] += 1
        else:
            codes["ok" if reply.get("ok") else reply["error"]["code"]] += 1
        if reply is None or b'"watch"' in line or b'"launch"' in line:
            sock.close()  # a stream (or its refusal) ends the connection
            sock = None
    if sock is not None:
        sock.close()
    return {"codes": dict(codes), "seconds": time.monotonic() - start}


def churn(path: str, tasks: int, parallel: int, group: str, *, linger: float = 0, memory: int = 1 << 20,
          within_s: float | None = None) -> dict:
    """``tasks`` short tasks of ``memory`` bytes: forked clients, ``parallel`` at a time, each
    launching its own pid over the socket and exiting once started (with ``linger``, leaving a
    child that sleeps that long in its task); with ``within_s``, no client starts after that
    many seconds (fewer tasks on a slow host). Returns the tasks started, counts of replies and
    the round trips (seconds, sorted)."""
    line = json.dumps({"op": "launch", "pid": 0, "group": group, "demand": {"cpu": 0.01, "memory": memory},
                       "wait": True}).replace('"pid": 0', '"pid": {pid}')
    running: dict[int, float] = {}
    trips, failed = [], 0
    read_end, write_end = os.pipe()
    results = os.fdopen(read_end, "rb", buffering=0)
    started, begun = 0, time.monotonic()
    while started < tasks or running:
        if within_s is not None and time.monotonic() - begun > within_s:
            tasks = started
        while started < tasks and len(running) < parallel:
            pid = os.fork()
            if pid == 0:
                # A collection would touch the test process's whole heap, copying its pages,
                # each charged to the task: how far past a small cap depends on the tests before.
                gc.disable()
                code = 1
                try:
                    sock = socket.socket(socket.AF_UNIX)
                    sock.connect(path)
                    reply = request(sock, (line.replace("{pid}", str(os.getpid())) + "\n").encode())
                    code = 0 if reply and reply.get("ok") and "task" in reply else 3
                    if code == 0 and linger and os.fork() == 0:
                        time.sleep(linger)  # the task's life (the workload), not a wait
                finally:
                    os.write(write_end, b"x")
                    os._exit(code)
            running[pid] = time.monotonic()
            started += 1
        pid, status = os.wait()
        if pid not in running:
            continue  # an orphan this process was handed (a subreaper's), not a client
        trips.append(time.monotonic() - running.pop(pid))
        failed += os.waitstatus_to_exitcode(status) != 0
    os.close(write_end)
    results.close()
    return {"tasks": started, "failed": failed, "trips": sorted(trips)}


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system, seconds) process ``pid`` used so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def as_user(uid: int, work: Callable[[], dict]) -> dict:
    """Run ``work`` in a forked child that became ``uid`` (its gid the same number); its result
    (a JSON object) back."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with os.fdopen(write_end, "w") as out:
                json.dump(work(), out)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as result:
        text = result.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and text, f"the child as uid {uid} failed ({status})"
    return json.loads(text)


def lingering_tasks(path: str, count: int, group: str, command: list[str]) -> list[int]:
    """``count`` tasks of the calling user, each a forked client that launched itself with
    ``command`` (for display: a long one fills every status) and then sleeps in its task; their
    pids (the caller kills them)."""
    pids = []
    for _ in range(count):
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(ready_read)
                sock = socket.socket(socket.AF_UNIX)
                sock.connect(path)
                line = json.dumps({"op": "launch", "pid": os.getpid(), "group": group, "command": command,
                                   "demand": {"cpu": 0.01, "memory": 1 << 20}})
                answer = request(sock, line.encode() + b"\n")
                sock.close()
                os.write(ready_write, b"1" if answer and answer.get("ok") else b"0")
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the caller's pipes must see their end
                time.sleep(3600)  # the task's life until the caller kills it, not a wait
            finally:
                os._exit(0)
        os.close(ready_write)
        ok = os.read(ready_read, 1)
        os.close(ready_read)
        assert ok == b"1", "a lingering task was refused"
        pids.append(pid)
    return pids


def silent_status(path: str, connections: int, seconds: float, ready: int, release: int) -> dict:
    """``connections`` connections that ask for ``status`` and never read, held ``seconds`` at
    most, until :func:`end_attack` lets go; one byte written to the file descriptor ``ready`` once
    the daemon answered each (its reply waits unread: :func:`wait_ready`), none if it did not
    within a minute."""
    socks = []
    for _ in range(connections):
        sock = socket.socket(socket.AF_UNIX)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(path)
        sock.sendall(b'{"op": "status"}\n')
        socks.append(sock)
    if ready is not None:
        answered = lambda: all(_unread(sock) for sock in socks)  # noqa: E731
        if not within(answered, 60, every=0.01):
            return {"held": len(socks), "answered": False}
        os.write(ready, b"!")
    held_until_ended(release, seconds)
    for sock in socks:
        sock.close()
    return {"held": len(socks)}


def watchers(path: str, count: int, seconds: float, interval: float, ready: int, release: int) -> dict:
    """``count`` ``watch`` streams at ``interval`` read as fast as they come (and thrown away)
    for ``seconds`` at most, until :func:`end_attack` lets go; the bytes they got. One byte written
    to the file descriptor ``ready`` once each stream had its first snapshot (:func:`wait_ready`)."""
    import selectors

    selector = selectors.DefaultSelector()
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
        sock.sendall(json.dumps({"op": "watch", "interval": interval}).encode() + b"\n")
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    unserved = {key.fileobj for key in selector.get_map().values()}  # no snapshot yet
    got, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline and not held_until_ended(release, 0):
        for key, _ in selector.select(timeout=0.1):
            try:
                data = key.fileobj.recv(1 << 20)
            except BlockingIOError:
                continue
            got += len(data)
            if data:
                unserved.discard(key.fileobj)
        if ready is not None and not unserved:
            os.write(ready, b"!")
            ready = None
    for key in list(selector.get_map().values()):
        key.fileobj.close()
    return {"bytes": got}


def end_attack(write_end: int, attackers: int) -> None:
    """End the attack of ``attackers`` holding the read end of the pipe ``write_end`` (one byte
    each: the write end may stay open in every forked process), once the test measured what it
    came for; an attacker that never hears this stops at its own ``seconds``."""
    os.write(write_end, b"!" * attackers)


def held_until_ended(release: int, seconds: float) -> bool:
    """Whether the test let go (:func:`end_attack`), waiting ``seconds`` at most for it; the byte
    that said so is this attacker's, taken."""
    if not select.select([release], [], [], seconds)[0]:
        return False
    os.read(release, 1)
    return True


def _unread(sock: socket.socket) -> int:
    """Bytes received on ``sock`` and not read yet (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


def wait_ready(read_end: int, attackers: int, timeout: float = 60) -> None:
    """Wait until ``attackers`` each wrote their byte to the pipe whose read end is ``read_end``
    (the write end closed here: an attacker that died ends the wait at once); closes it.

    Raises:
        AssertionError: one died before it was ready, or ``timeout`` seconds passed.
    """
    import select

    got, deadline = b"", time.monotonic() + timeout
    try:
        while len(got) < attackers:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([read_end], [], [], left)[0], \
                f"{len(got)} of {attackers} attackers ready after {timeout} s"
            chunk = os.read(read_end, attackers)
            assert chunk, f"an attacker ended before it was ready ({len(got)} of {attackers})"
            got += chunk
    finally:
        os.close(read_end)
