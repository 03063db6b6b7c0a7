"""What ``governor run`` loads on its way to the command (issue 37): not the modules a launch
does not need before the daemon answers, and, for a command that ends before the first memory
look, not the memory watch's either. Not timed: what is loaded is the fact, the cost of each
module is docs/benchmarks.md's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.client import GOVERNOR, REPO
from support.waits import wait_until

# Not needed before the launch is sent: exact size parsing for a whole size (fractions,
# decimal; 1.5G still reads exactly with them), the config parser (tomllib), the parent death
# signal (ctypes: armed while the daemon works), the other operations' types (a dataclass costs
# ~0.5 ms to define), the memory watch and the cgroupfs modules it reads with.
NOT_BEFORE_SENDING = ["fractions", "decimal", "tomllib", "governor.config.tomlcheck", "ctypes", "governor.wire.protocol",
                      "governor.wire.request_types", "governor.wire.reply_types", "governor.host.task_memory",
                      "governor.cgroups.memory_now", "governor.cgroups.limits", "governor.wire.limit_files",
                      "governor.cgroups.files", "logging"]
# Not needed by governor run's own process for a command that ends within the first look.
NOT_FOR_A_SHORT_COMMAND = ["ctypes", "governor.host.task_memory", "governor.cgroups.memory_now", "governor.cgroups.limits",
                           "governor.wire.limit_files", "logging"]

# Runs governor run in a process that reports, on its stdout, what was loaded when the launch
# request went out (in the child that becomes the command) and when governor run exited (with
# os._exit, once its command has: no interpreter teardown).
_REPORTING = """
import json, os, socket, sys
def loaded(names):
    return json.dumps(sorted(name for name in names if name in sys.modules))
send = socket.socket.sendall
def sendall(self, data, *args):
    if data.startswith(b'{{"op":"launch"'):
        os.write(1, ("sent " + loaded({before!r}) + "\\n").encode())
    return send(self, data, *args)
socket.socket.sendall = sendall
leave = os._exit  # how governor run exits once its command has
def exit_now(code):
    os.write(1, ("exited " + loaded({short!r}) + "\\n").encode())
    leave(code)
os._exit = exit_now
sys.argv = ["governor", *{args!r}]
from governor.cli.entry import main
main()
"""


def run_reporting(socket_path: str, *args: str) -> dict[str, list[str]]:
    code = _REPORTING.format(before=NOT_BEFORE_SENDING, short=NOT_FOR_A_SHORT_COMMAND, args=list(args))
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30,
                            env={**os.environ, "GOVERNOR_SOCKET": socket_path})
    assert result.returncode == 0, result.stderr
    return {when: json.loads(names) for when, names in (line.split(" ", 1) for line in result.stdout.splitlines())}


def test_run_sends_its_launch_before_loading_what_the_launch_does_not_need(fake_daemon):
    reports = run_reporting(fake_daemon.path, "run", "--memory", "64M", "--cpus", "0.5", "--", "true")
    [(request, _)] = fake_daemon.seen
    assert request.demand == {"memory": 64 << 20, "cpu": 0.5}
    assert reports["sent"] == []


def test_run_of_a_command_that_ends_at_once_never_loads_the_memory_watch(fake_daemon):
    reports = run_reporting(fake_daemon.path, "run", "--memory", "64M", "--", "true")
    assert reports["exited"] == []


def test_run_exec_sends_its_launch_before_loading_what_the_launch_does_not_need(fake_daemon):
    reports = run_reporting(fake_daemon.path, "run", "--exec", "--memory=2G", "--io-read", "100M", "--", "true")
    [(request, _)] = fake_daemon.seen
    assert request.demand == {"memory": 2 << 30, "io_read": 100 << 20}
    assert reports["sent"] == []


def test_the_command_dies_with_governor_run_though_its_death_signal_is_armed_after_the_launch(fake_daemon):
    run = subprocess.Popen([*GOVERNOR, "run", "--", "sleep", "60"], cwd=REPO, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, env={**os.environ, "GOVERNOR_SOCKET": fake_daemon.path})
    try:
        wait_until(lambda: fake_daemon.seen, "the launch")
        [(request, _)] = fake_daemon.seen
        command = request.pid
        wait_until(lambda: _cmdline(command) == b"sleep\x0060\x00", "the command's exec")
    finally:
        run.kill()
        run.wait()
    wait_until(lambda: _cmdline(command) in (None, b""), "the command's end (its parent death signal)")


def _cmdline(pid: int) -> bytes | None:
    """Process ``pid``'s command line; None once it is gone (empty while a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            return stream.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
