"""``governor run`` as the command's parent: run it as a child (same terminal, signals forwarded,
its exit code kept), and when it ends, say why if governor ended it, as Slurm's ``srun`` does::

    governor: task 12 ended: its time limit of 3s was reached

or, with ``--summary``, what it used, as ``systemd-run --wait`` does, on stderr::

    Finished with result: success
    Main processes terminated with: code=exited/status=0
    Service runtime: 2.012s
    CPU time consumed: 1.996s
    Memory peak: 1.2M

The child asks the daemon to govern *its own* pid and execs the command, so the task holds the
command's processes and not this one, which only waits: the task ends when they do, and the
daemon's ended record of it (``governor ps --ended``) gives the figures. The child passes
the started task to this process through a close-on-exec pipe, and dies with this process
(``PR_SET_PDEATHSIG``): ``kill -9`` of ``governor run`` ends the command as before.
"""

from __future__ import annotations

import functools
import json
import os
import select
import signal
import sys
import time

from governor.cli.become_task import say
from governor.cli.memory_warning import LOOK_EVERY_S, MemoryWatch
from governor.config.units import format_size, format_timespan

TYPE_CHECKING = False  # typing's, without loading typing: governor run's path (issue 46)
if TYPE_CHECKING:
    from governor.wire.ps_types import EndedRecord
    from governor.wire.request_types import LaunchRequest

# How long to wait for the daemon's ended record once the command exited: it notices the
# emptied cgroup within milliseconds, or at its next reconcile pass.
RECORD_WAIT_S = 5.0
# Forwarded to the command; SIGINT and SIGQUIT too when a process sent them (from the
# terminal, they reach the command itself).
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_WATCHED = {signal.SIGCHLD, signal.SIGINT, signal.SIGQUIT, *FORWARDED}
# How often signals are looked for while the child waits in the queue.
_SIGNAL_POLL_S = 0.05
RESULTS = {"time_limit": "timeout", "oom_kill": "oom-kill", "stop": "stopped"}
# PR_SET_PDEATHSIG (linux/prctl.h): the signal a process gets when its parent exits.
_PR_SET_PDEATHSIG = 1


def run_with_summary(path: str, request: LaunchRequest, cmd: tuple[str, ...], *, summary: bool = True,
                     verbose: bool = False) -> None:
    """Launch ``cmd`` in a child governed as ``request`` asks, wait for it, print the summary
    (``summary``) or, when governor ended the task (stopped, time limit, OOM kill), one line
    saying why, to stderr, and exit with the command's status (128 + signal when a signal
    ended it); never returns."""
    # Signals wait for sigwaitinfo here, which says who sent each; the child gets the caller's
    # mask back, and so does the caller however this ends (an in-process caller, such as a test,
    # would otherwise hand SIGTERM blocked to every process it starts later).
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    try:
        _run_and_wait(path, request, cmd, mask, summary=summary, verbose=verbose)
    finally:  # what came after the command ended was meant for it: dropped, as when this exits
        while signal.sigtimedwait(_WATCHED, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _run_and_wait(path: str, request: LaunchRequest, cmd: tuple[str, ...], mask: set, *, summary: bool,
                  verbose: bool) -> None:
    """:func:`run_with_summary` once the watched signals are blocked; never returns."""
    reader, writer = os.pipe()  # not inherited across exec: end of file once the command runs
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        os.close(reader)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _child(path, request._replace(pid=os.getpid()), cmd, writer, parent, verbose)
    os.close(writer)
    began = time.monotonic()
    told = b""
    while True:  # the child's word (the started task), forwarding signals meanwhile
        ready, _, _ = select.select([reader], [], [], _SIGNAL_POLL_S)
        while _forward(child, signal.sigtimedwait(_WATCHED, 0)):
            pass
        if ready:
            data = os.read(reader, 65536)
            if not data:
                break
            told += data
    os.close(reader)
    started = json.loads(told) if told else None
    watched = started is not None and not started.get("nested")  # a nested one is its outer task's
    # The watch is made at the first look, LOOK_EVERY_S in: a command that ends sooner (its
    # SIGCHLD wakes this loop) is not kept waiting for the watch's imports.
    watch, first_look = None, time.monotonic() + LOOK_EVERY_S
    while True:  # the command's end, forwarding signals and warning of its memory meanwhile
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            break
        if not watched or (watch is not None and watch.warned):
            _forward(child, signal.sigwaitinfo(_WATCHED))
            continue
        _forward(child, signal.sigtimedwait(_WATCHED, LOOK_EVERY_S))
        if watch is None and time.monotonic() >= first_look:
            from governor.host.task_memory import memory_now

            watch = MemoryWatch(started, memory_now)
        if watch is not None:
            watch.look()
    wall = time.monotonic() - began
    code = os.waitstatus_to_exitcode(status)
    exit_code = code if code >= 0 else 128 - code
    if started is None:  # refused, or left the queue: the child said why, unless a signal killed it
        if os.WIFSIGNALED(status):  # as a time limit shorter than the start does: it ended with 137, unsaid
            say(f"governor: killed by {_signal_name(os.WTERMSIG(status))} before the command started "
                "(governor ps --ended says why, if governor ended its task)")
        sys.exit(exit_code)
    task = None if started.get("nested") else str(started.get("task"))
    if summary:
        record = None if task is None else _ended_record(path, task)
        said = None if task is None else ended_line(record, task)  # why, in words, as without --summary
        for line in ([said] if said else []) + summary_lines(record, status, wall, task=task):
            say(line)
    elif task is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        # Killed: by governor (stop, time limit) or the kernel (OOM) if its record says so.
        line = ended_line(_ended_record(path, task), task)
        if line:
            say(line)

    sys.exit(exit_code)


def _signal_name(number: int) -> str:
    """``SIGKILL`` for 9; the number where it names no signal."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _forward(child: int, info) -> bool:
    """Pass a signal this process got on to the command: SIGINT and SIGQUIT only when a
    process sent them (the terminal sends them to the command itself too); False for none."""
    if info is None:
        return False
    if info.si_signo == signal.SIGCHLD:
        return True
    if info.si_signo in (signal.SIGINT, signal.SIGQUIT) and info.si_code > 0:  # SI_KERNEL: the tty's
        return True
    try:  # try, not contextlib.suppress: governor run's way to its command loads no contextlib (issue 46)
        os.kill(child, info.si_signo)
    except ProcessLookupError:  # it ended meanwhile
        pass
    return True


def ended_line(record: EndedRecord | None, task: str) -> str | None:
    """``governor: task 12 ended: stopped by alice`` for a task governor ended, ``governor:
    task 7 was refused 12 forks at its cap of 512 processes`` for one that exited by itself
    after the kernel refused it forks, or None (neither, or no record came)."""
    from governor.host.accounting import EXIT, forks_refused, why_ended

    if record is None or record.reason is None:
        return None
    if record.reason == EXIT:
        refused = forks_refused(record)
        return f"governor: task {task} {refused}" if refused else None
    return f"governor: task {task} ended: {why_ended(record)}"


def _child(path: str, request: LaunchRequest, cmd: tuple[str, ...], writer: int, parent: int, verbose: bool) -> None:
    """In the child: be governed, tell the parent which task, exec; never returns."""
    from governor.cli.failures import report
    from governor.cli.become_task import execute, hand_gpus, launch_waiting
    from governor.errors import GovernorError

    code = 1
    try:
        started = launch_waiting(path, request, sent=functools.partial(_die_with, parent))
        os.write(writer, json.dumps(started.to_json()).encode())
        hand_gpus(started)
        execute(cmd)
    except SystemExit as leaving:
        code = leaving.code if isinstance(leaving.code, int) else 1
    except GovernorError as error:  # the line and exit code of every other failure (cli.failures)
        text, code = report(error, verbose=verbose)
        say(text)
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):  # full: what could not be said is lost, the status is not
            pass
        os._exit(code)


def _die_with(parent: int) -> None:
    """Have this process killed when ``parent`` exits (``PR_SET_PDEATHSIG``), or exit now if
    it already has. Armed while the daemon works on the launch, which it has been sent: ctypes
    is not free to load, and a child that exits then ends its task as the command would."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no parent death signal
        pass
    if os.getppid() != parent:  # it died before the signal was armed
        os._exit(128 + signal.SIGKILL)


def _ended_record(path: str, task: str, wait_s: float = RECORD_WAIT_S) -> EndedRecord | None:
    """The daemon's ended record of ``task``, waiting up to ``wait_s``; None if it does not
    come (processes of the task live on), the daemon cannot be asked, or its record is
    malformed (a daemon's bug, or a hostile one: said on stderr, field named)."""
    from governor.cli.client import call
    from governor.cli.view_common import printable
    from governor.errors import GovernorError
    from governor.wire.ps_types import EndedRecord, decode_rows
    from governor.wire.request_types import PsRequest
    from governor.wire.status_json import MalformedStatus

    deadline = time.monotonic() + wait_s
    while True:
        try:
            records = call(path, PsRequest(ended=True, task=task)).ended or []
        except GovernorError:
            return None
        found = next((r for r in reversed(records) if isinstance(r, dict) and r.get("id") == task), None)
        if found is not None:
            try:  # printable: who stopped it is the daemon's text, shown on a terminal
                return printable(decode_rows(EndedRecord, [found], "ended")[0])
            except MalformedStatus as error:
                say(f"governor: the daemon's ended record of task {task} {error}")
                return None
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def summary_lines(record: EndedRecord | None, status: int, wall: float, *, task: str | None) -> list[str]:
    """The summary of a command that ended with wait ``status`` (:func:`os.waitpid`) after
    ``wall`` seconds, from its task's ended ``record`` (None: unknown, said so unless ``task``
    is None: the command ran inside an enclosing task, which goes on)."""
    from governor.config.resources import format_amount  # after the command: its imports cost no launch time
    from governor.host.accounting import exit_words

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
    if record.reason in RESULTS:
        result = RESULTS[record.reason] + (f" (by {record.stopped_by})" if record.stopped_by else "")
    lines = [f"Finished with result: {result}", f"Main processes terminated with: {terminated}",
             f"Service runtime: {format_timespan(record.wall_s or wall)}"]
    if record.cpu_s is not None:
        lines.append(f"CPU time consumed: {format_timespan(record.cpu_s)}")
    if record.throttled_s:
        lines.append(f"CPU time throttled: {format_timespan(record.throttled_s)}")
    if record.memory_peak is not None:
        peak = format_size(record.memory_peak)
        lines.append(f"Memory peak: {peak if peak[-1].isalpha() else peak + 'B'}")
    if record.memory_high_events:
        lines.append(f"Memory over its soft cap: {record.memory_high_events} times (reclaimed and throttled)")
    if record.oom_kills:
        lines.append(f"OOM kills: {record.oom_kills}")
    if record.forks_refused:
        cap = record.demand.get("pids")
        at = f" (at its cap of {format_amount('pids', cap, unit=True)})" if cap else ""
        lines.append(f"Forks refused: {record.forks_refused}{at}")
    return lines
