"""The modules ``governor run`` loads on its way to its command, as a set (issue 46): beyond the
floor of any Python client of a unix socket (``import os, socket, json``), only these. A module
added to the launch path fails here until it is named below, with what it costs in
docs/benchmarks.md; dataclasses, typing, inspect, click and rich never are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.client import REPO

# governor's own modules on the way: the entry point, run's options and the resource registry
# (the amounts' rules), the launch's types and lines, the client, becoming the task.
GOVERNOR_MODULES = {
    "governor", "governor.cgroups", "governor.cgroups.errors", "governor.cli", "governor.cli.become_task",
    "governor.cli.client", "governor.cli.entry", "governor.cli.failures", "governor.cli.launch", "governor.config",
    "governor.config.resource_values", "governor.config.resources", "governor.config.units", "governor.errors",
    "governor.wire", "governor.wire.fields", "governor.wire.launch_types", "governor.wire.lines",
}
# Without --exec, governor run waits for its command: the waiter and its memory warning.
WAITER = {"governor.cli.summary", "governor.cli.memory_warning"}
# The standard library beyond the floor: `from __future__ import annotations` loads __future__;
# the entry point gc (collections off) and signal (Ctrl-C while loading).
STDLIB_MODULES = {"__future__", "gc", "signal"}
LAUNCH_PATH = GOVERNOR_MODULES | STDLIB_MODULES
# The parent death signal (PR_SET_PDEATHSIG: the command dies with a killed governor run) is
# armed with ctypes in the child that becomes the command, after its launch is sent, while the
# daemon works on it: the one addition between the send and the exec.
DEATH_SIGNAL = {"ctypes", "_ctypes", "ctypes._endian", "struct", "_struct"}
NEVER = {"dataclasses", "typing", "inspect", "click", "rich", "fractions", "decimal", "psutil"}

# Runs governor run in a fresh interpreter that reports, on its stdout, the modules loaded
# beyond the floor and those already loaded when it began (site's: none in a wheel install),
# when the launch request goes out and at the exec of the command.
_REPORTING = """
import sys
preloaded = set(sys.modules)
import json, os, socket
floor = preloaded | set(sys.modules)
def report(when):
    os.write(1, (when + " " + json.dumps(sorted(set(sys.modules) - floor)) + "\\n").encode())
os.write(1, ("preloaded " + json.dumps(sorted(preloaded)) + "\\n").encode())
send = socket.socket.sendall
def sendall(self, data, *args):
    if data.startswith(b'{{"op":"launch"'):
        report("sent")
    return send(self, data, *args)
socket.socket.sendall = sendall
execv = os.execv
def exec_command(path, args):
    report("exec")
    execv(path, args)
os.execv = exec_command
sys.argv = ["governor", *{args!r}]
from governor.cli.entry import main
main()
"""


def loaded_on_the_way(socket_path: str, *args: str) -> tuple[set[str], dict[str, set[str]]]:
    """(the modules loaded before governor run began, {"sent"/"exec": those loaded since beyond
    the floor})."""
    result = subprocess.run([sys.executable, "-c", _REPORTING.format(args=list(args))], cwd=REPO,
                            capture_output=True, text=True, timeout=30, env={**os.environ, "GOVERNOR_SOCKET": socket_path})
    assert result.returncode == 0, result.stderr
    reports = {when: set(json.loads(names)) for when, names in (line.split(" ", 1) for line in result.stdout.splitlines())}
    return reports.pop("preloaded"), reports


def test_run_loads_what_a_socket_client_needs_and_its_own_modules_only(fake_daemon):
    preloaded, reports = loaded_on_the_way(fake_daemon.path, "run", "--memory", "64M", "--cpus", "1.5", "--", "true")
    [(request, _)] = fake_daemon.seen
    assert request.demand == {"memory": 64 << 20, "cpu": 1.5}
    assert reports["sent"] == (LAUNCH_PATH | WAITER) - preloaded
    assert reports["exec"] == (LAUNCH_PATH | WAITER | DEATH_SIGNAL) - preloaded
    assert not (reports["exec"] | preloaded) & NEVER


def test_run_exec_loads_no_more_than_that_and_no_death_signal(fake_daemon):
    preloaded, reports = loaded_on_the_way(fake_daemon.path, "run", "--exec", "--memory=2G", "--io-read", "100M",
                                           "--name", "n", "--time-limit", "90s", "--", "true")
    [(request, _)] = fake_daemon.seen
    assert (request.demand, request.name, request.time_limit) == ({"memory": 2 << 30, "io_read": 100 << 20}, "n", 90)
    assert reports["sent"] == reports["exec"] == LAUNCH_PATH - preloaded
    assert not (reports["exec"] | preloaded) & NEVER
