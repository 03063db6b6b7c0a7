"""``governor run --summary``: run the command as a child (same terminal, signals forwarded,
its exit code kept), then print what it used as ``systemd-run --wait`` does, on stderr::

    Finished with result: success
    Main processes terminated with: code=exited/status=0
    Service runtime: 2.012s
    CPU time consumed: 1.996s
    Memory peak: 1.2M

The child asks the daemon to govern *its own* pid and execs the command, so the task holds the
command's processes and not this one, which only waits: the task ends when they do, and the
daemon's ended record of it (``governor ps --ended``) gives the figures. The child passes
the started task to this process through a close-on-exec pipe.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

from governor.units import format_size, format_timespan

# How long to wait for the daemon's ended record once the command exited: it notices the
# emptied cgroup within milliseconds, or at its next reconcile pass.
RECORD_WAIT_S = 5.0
# Forwarded to the command; SIGINT and SIGQUIT come from the terminal to both processes.
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
RESULTS = {"time_limit": "timeout", "oom_kill": "oom-kill", "stop": "stopped"}


def run_with_summary(path: str, request: dict, cmd: tuple[str, ...]) -> None:
    """Launch ``cmd`` in a child governed as ``request`` asks, wait for it, print the summary
    to stderr and exit with the command's status (128 + signal when a signal ended it);
    never returns."""
    reader, writer = os.pipe()  # not inherited across exec: end of file once the command runs
    child = os.fork()
    if child == 0:
        os.close(reader)
        _child(path, {**request, "pid": os.getpid()}, cmd, writer)
    os.close(writer)
    for signum in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_IGN)
    def forward(signum: int, _) -> None:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(child, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    began = time.monotonic()
    with os.fdopen(reader, "rb") as pipe:
        told = pipe.read()
    _, status = os.waitpid(child, 0)
    wall = time.monotonic() - began
    code = os.waitstatus_to_exitcode(status)
    exit_code = code if code >= 0 else 128 - code
    if not told:  # refused, or left the queue: the child said why
        sys.exit(exit_code)
    started = json.loads(told)
    task = None if started.get("nested") else str(started.get("task"))
    record = None if task is None else _ended_record(path, task)
    for line in summary_lines(record, status, wall, task=task):
        sys.stderr.write(line + "\n")
    sys.exit(exit_code)


def _child(path: str, request: dict, cmd: tuple[str, ...], writer: int) -> None:
    """In the child: be governed, tell the parent which task, exec; never returns."""
    from governor.cli.failures import report
    from governor.cli.launch import execute, launch_waiting
    from governor.errors import GovernorError

    code = 1
    try:
        started = launch_waiting(path, request)
        os.write(writer, json.dumps(started).encode())
        execute(cmd)
    except SystemExit as leaving:
        code = leaving.code if isinstance(leaving.code, int) else 1
    except GovernorError as error:  # the line and exit code of every other failure (cli.failures)
        text, code = report(error)
        sys.stderr.write(text + "\n")
    finally:
        sys.stderr.flush()
        os._exit(code)


def _ended_record(path: str, task: str) -> dict | None:
    """The daemon's ended record of ``task``, waiting up to :data:`RECORD_WAIT_S`; None if
    it does not come (processes of the task live on) or the daemon cannot be asked."""
    from governor.cli.client import call
    from governor.errors import GovernorError

    deadline = time.monotonic() + RECORD_WAIT_S
    while True:
        try:
            records = call(path, {"op": "ps", "ended": True, "task": task}).get("ended") or []
        except GovernorError:
            return None
        found = next((r for r in reversed(records) if isinstance(r, dict) and r.get("id") == task), None)
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def summary_lines(record: dict | None, status: int, wall: float, *, task: str | None) -> list[str]:
    """The summary of a command that ended with wait ``status`` (:func:`os.waitpid`) after
    ``wall`` seconds, from its task's ended ``record`` (None: unknown, said so unless ``task``
    is None: the command ran inside an enclosing task, which goes on)."""
    from governor.accounting import exit_words  # after the command: its imports cost no launch time

    if os.WIFEXITED(status):
        result = "success" if os.WEXITSTATUS(status) == 0 else "exit-code"
    else:
        result = "core-dump" if os.WCOREDUMP(status) else "signal"
    terminated = exit_words(status)
    if record is None:
        lines = [f"Finished with result: {result}", f"Main processes terminated with: {terminated}",
                 f"Service runtime: {format_timespan(wall)}"]
        if task is not None:
            lines.append(f"Task {task}: no ended record (processes of it may still run); see governor ps --ended")
        return lines
    reason = record.get("reason")
    if reason in RESULTS:
        result = RESULTS[reason] + (f" (by {record['stopped_by']})" if record.get("stopped_by") else "")
    lines = [f"Finished with result: {result}", f"Main processes terminated with: {terminated}",
             f"Service runtime: {format_timespan(record.get('wall_s') or wall)}"]
    if record.get("cpu_s") is not None:
        lines.append(f"CPU time consumed: {format_timespan(record['cpu_s'])}")
    if record.get("throttled_s"):
        lines.append(f"CPU time throttled: {format_timespan(record['throttled_s'])}")
    if record.get("memory_peak") is not None:
        peak = format_size(record["memory_peak"])
        lines.append(f"Memory peak: {peak if peak[-1].isalpha() else peak + 'B'}")
    if record.get("oom_kills"):
        lines.append(f"OOM kills: {record['oom_kills']}")
    return lines
