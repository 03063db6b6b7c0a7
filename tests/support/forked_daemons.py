"""``governor daemon`` forked from one interpreter that has loaded governor, for the real-kernel
tests: a daemon's start without its imports.

Why: under the cgroup v2 VM's emulated CPU a daemon's imports take 6-7 s of its 7-8 s start, and
the v2 suite starts about forty daemons beside the systemd suite's VM (CI's time, issue 45).
A forked daemon is what ``governor daemon ARGS`` would be: the same entry point
(``governor.cli.entry.main``) with the same argv, environment and working directory, its stdout
and stderr on the test's log, stdin on /dev/null, in this test process's process group and
cgroup; only its modules were loaded before the fork. Every start that tests the program
itself (a refused second daemon, the CLI, the systemd units, a daemon under a wrapper) runs it
as a user does.

:func:`start` returns a :class:`ForkedDaemon`, which answers what the tests ask of a
``subprocess.Popen``: ``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``kill``.
The server (this file run as a script) reports each daemon's exit status as ``waitpid`` gives
it; it ends when this process closes its stdin.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# What a start of `governor daemon` loads (cli/daemon_cmd.py's imports, the daemon's tree).
PRELOADED = ("governor.cli.entry", "governor.cli.main", "governor.cli.client", "governor.cli.inputs",
             "governor.config.load", "governor.config.units", "governor.daemon.build", "governor.daemon.root",
             "governor.errors", "governor.host.host_check", "governor.host.logs", "governor.host.systemd_files")


def serve() -> None:
    """The server: reads one JSON request a line on stdin (``argv``, ``env``, ``cwd``, ``log``),
    forks a daemon for each and answers ``{"pid": N}``; answers ``{"exited": N, "status": S}``
    (Popen's returncode: ``-signal`` when a signal ended it) once it reaped one."""
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    answers = os.dup(1)
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    pending = b""
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        ready, _, _ = select.select([requests, *children], [], [])
        for fd in ready:
            if fd is requests:
                chunk = requests.read(65536)
                if not chunk:
                    return
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    pid = _fork(json.loads(line), requests, closing=(answers, *children))
                    children[os.pidfd_open(pid)] = pid
                    os.write(answers, json.dumps({"pid": pid}).encode() + b"\n")
            else:
                pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                os.write(answers, json.dumps({"exited": pid, "status": os.waitstatus_to_exitcode(status)}).encode()
                         + b"\n")


def _fork(request: dict, requests, closing: tuple[int, ...]) -> int:
    """Fork; in the child, become ``governor ARGV`` and end as its interpreter would."""
    pid = os.fork()
    if pid:
        return pid
    requests.close()
    for fd in closing:
        os.close(fd)
    null, log = os.open(os.devnull, os.O_RDONLY), os.open(request["log"], os.O_WRONLY | os.O_APPEND)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"]
    from governor.cli.entry import main

    # SystemExit and every other exception leave through the interpreter's own end (threads
    # joined, atexit run, streams flushed, a traceback printed): the server's loop catches none.
    main()
    sys.exit(0)


class _Server:
    """The server process, and what it answered: the pids it forked, the exits it reaped. Its
    answers are read when a test asks (no thread: a test process with one, forking a child of
    its own, drew Python 3.12's "multi-threaded, use of fork() may lead to deadlocks")."""

    def __init__(self):
        self.cgroup = _own_cgroup()  # its daemons start here
        self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lock = threading.Lock()  # tests that launch from threads of their own ask too
        self.forked: list[int] = []
        self.exits: dict[int, int] = {}
        self.ended = False
        self._pending = b""
        atexit.register(self._end)

    def _read(self, deadline: float | None) -> bool:
        """Take in what the server has answered by ``deadline`` (``time.monotonic()``; None: wait
        for an answer); False when none came by then or the server has ended."""
        fd = self.proc.stdout.fileno()  # read raw: the buffered reader is never used
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([fd], [], [], timeout)[0]:
            return False
        chunk = os.read(fd, 65536)
        if not chunk:
            self.ended = True
            return False
        self._pending += chunk
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            answer = json.loads(line)
            if "pid" in answer:
                self.exits.pop(answer["pid"], None)  # an earlier daemon's, whose pid this one reuses
                self.forked.append(answer["pid"])
            else:
                self.exits[answer["exited"]] = answer["status"]
        return True

    def _end(self) -> None:
        # Waited for, so that the CPU of the daemons it reaped counts in this process's children
        # (scripts/test prints each suite's CPU).
        self.proc.stdin.close()
        self.proc.wait(timeout=60)

    def fork(self, argv: list[str], log: str) -> int:
        request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "log": log}
        with self.lock:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            # The first answer waits for the server's imports: minutes at worst in the VM.
            deadline = time.monotonic() + 600
            while not self.forked:
                if not self._read(deadline):
                    state = f"ended (exit {self.proc.poll()})" if self.ended else "did not answer in 600 s"
                    raise AssertionError(f"the daemon fork server {state}: its stderr is above")
            return self.forked.pop(0)

    def exit_of(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s exit status once the server reaped it, waiting up to ``timeout`` s
        (``None``: as long as it takes; 0: not at all); ``None`` while it runs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while pid not in self.exits and self._read(deadline):
                pass
            return self.exits.get(pid)


class ForkedDaemon:
    """A daemon the server forked, as the tests use a ``subprocess.Popen``. Signals go through
    a pidfd: never to another process that took a reaped daemon's pid."""

    def __init__(self, server: _Server, pid: int, args: list[str]):
        self.pid, self.args, self.returncode, self._server = pid, args, None, server
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # ended and reaped already: its exit is on its way
            self._pidfd = None

    def poll(self) -> int | None:
        return self._ended(0)

    def wait(self, timeout: float | None = None) -> int:
        if self._ended(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:  # ended, not yet reaped
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_of(self.pid, timeout)
            if self.returncode is not None and self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        return self.returncode


_server: _Server | None = None


def start(command: list[str], log) -> ForkedDaemon | subprocess.Popen:
    """``command`` (``[GOVERNOR, "daemon", …]``) with stdout and stderr on the open file ``log``:
    forked by the server, started afresh (a ``subprocess.Popen``) when this process has moved
    to another cgroup since the server started, as a daemon's place follows its starter's."""
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
    if _server.cgroup != _own_cgroup():
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    return ForkedDaemon(_server, _server.fork(command, log.name), command)


def _own_cgroup() -> str:
    return Path("/proc/self/cgroup").read_text()


if __name__ == "__main__":
    serve()
