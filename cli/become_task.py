"""How ``governor run`` becomes its task once its request is built: the command resolved
before the daemon is asked (127/126 at once), the wait in the daemon's queue, the GPUs named to
CUDA, the exec. Shared by :func:`governor.cli.launch.start` and the child that
:mod:`governor.cli.summary` forks; the hot path's rule holds (:mod:`governor.cli.launch`): the
stdlib and the error classes only, the rest imported where used.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable

from governor.cli.failures import EXIT_CANNOT_EXECUTE, EXIT_INTERRUPTED, EXIT_NOT_FOUND
from governor.cli.failures import line as error_line

TYPE_CHECKING = False  # typing's, without loading typing: governor run's path (issue 46)
if TYPE_CHECKING:
    from governor.wire.reply_types import Started
    from governor.wire.request_types import LaunchRequest

# How long a launch waits for a daemon that is not there (restarting, killed) before it gives
# up, whether it had been sent already (queued or in flight) or not.
RESTART_GRACE_S = 60.0
# How often a client waiting for the daemon tries its socket again.
RETRY_S = 0.5


def hand_gpus(started: Started) -> None:
    """Name the started task's GPUs to CUDA and to NVIDIA's container tools before the exec:
    ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` list them (UUIDs, or minor
    numbers, which follow PCI bus order: hence ``CUDA_DEVICE_ORDER``), so the task numbers
    them from 0. A task without GPUs keeps its environment: its opens are refused anyway."""
    if started.gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["NVIDIA_VISIBLE_DEVICES"] = ",".join(started.gpus)
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"


def resolve(name: str) -> str:
    """The file ``name`` runs, checked before the daemon is asked: found on ``PATH`` as
    :func:`execute` finds it, or (with a slash) the path itself; exits as a shell would when it
    cannot run: 127 (not found), 126 (a directory, or no exec permission). ``execute`` still
    reports what changes between the two (the file removed meanwhile)."""
    path = name if "/" in name else _find(name)
    if path is None:  # (an empty name said ": command not found")
        _fail(f"{name or repr(name)}: command not found", EXIT_NOT_FOUND)
    elif not os.path.exists(path):
        _fail(f"{name}: No such file or directory", EXIT_NOT_FOUND)
    elif os.path.isdir(path):
        _fail(f"{name}: Is a directory", EXIT_CANNOT_EXECUTE)
    elif not os.access(path, os.X_OK):
        _fail(f"{name}: permission denied", EXIT_CANNOT_EXECUTE)
    return path


def _fail(reason: str, status: int) -> None:
    say(error_line(reason))
    sys.exit(status)


def execute(cmd: tuple[str, ...]) -> None:
    """Exec ``cmd``, found on ``PATH`` as a POSIX shell finds it; never returns. A command
    found nowhere exits 127 (``command not found``), one found but not executable 126 (a
    directory of ``PATH`` this user cannot search is passed over, as bash does: execvp would
    report its EACCES as the command's)."""
    path = cmd[0] if "/" in cmd[0] else _find(cmd[0])
    if path is None:
        _fail(f"{cmd[0]}: command not found", EXIT_NOT_FOUND)
    # Python ignores SIGPIPE and SIGXFSZ for itself, and an ignored signal stays so across exec:
    # `yes | head` in a task said "Broken pipe" instead of ending, as it does under a shell.
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.execv(path, cmd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            reason, status = "No such file or directory", EXIT_NOT_FOUND
        elif exc.errno in (errno.EACCES, errno.EPERM):
            reason, status = "permission denied", EXIT_CANNOT_EXECUTE
        else:
            reason, status = exc.strerror or str(exc), EXIT_CANNOT_EXECUTE
        _fail(f"{cmd[0]}: {reason}", status)


def _find(name: str) -> str | None:
    """The first ``PATH`` entry holding an executable file ``name``; else the first holding
    a file by that name (exec then fails: 126); else None."""
    found = None
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            found = found or candidate
    return found


def say(line: str) -> None:
    """``line`` on stderr where it can be said: a full one (``2>/dev/full``) must not turn the
    exit status the line goes with (127, the command's own) into 1."""
    try:  # try, not contextlib.suppress: a plain run loads no contextlib (issue 46)
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def launch_waiting(path: str, request: LaunchRequest, sent: Callable[[], None] | None = None) -> Started:
    """Ask the daemon to start this process as a task, waiting in its queue if need be; the
    started task (``nested``: this process already was in that task, which is said
    on stderr, with and without ``--exec``). ``sent`` is called each time the request is
    sent, while the daemon works on it (:func:`governor.cli.client.stream`).

    A daemon that is not there (restarting: its socket missing or refusing) is waited for, up
    to :data:`RESTART_GRACE_S` from when it was first missed (``waiting for the daemon to come
    back…`` on a terminal, nothing otherwise) until it answers (a place in its queue, the
    started task); one that goes away before it answers (killed during the launch, or while
    the task was queued) is asked again when it is back: the launch is this process's own pid,
    so a daemon that had started it answers with that task
    (:class:`governor.cli.client.LaunchInterrupted`). ``--no-wait`` waits for nothing.

    Raises:
        DaemonNotRunning, LaunchInterrupted: no daemon answered within :data:`RESTART_GRACE_S`
            (at once with ``--no-wait``): none listened, or each hung up; and what
            :func:`governor.cli.client.launch` raises otherwise.
    """
    import time

    from governor.cli.client import LaunchInterrupted, launch
    from governor.errors import DaemonNotRunning

    line = _QueueLine()
    terminated = _OnSigterm()
    away_since = None  # time.monotonic() when the daemon was first found missing, until it answers

    def answered(place: dict) -> None:  # a daemon that only hangs up (each time) is not back
        nonlocal away_since
        away_since = None
        line.show(place)

    try:
        while True:
            try:
                started = launch(path, request, answered, sent=sent)
                terminated.restore()  # started: a SIGTERM from now on is the command's to take
                if started.nested:
                    say(f"governor: already in task {started.task} (group {started.group}): "
                        f"{request.command[0]} runs there, with that task's caps")
                if line.since is not None and not started.nested:
                    from governor.config.units import format_timespan

                    line.done()
                    say(f"governor: task {started.task} started after waiting "
                        f"{format_timespan(time.monotonic() - line.since)}")
                return started
            except LaunchInterrupted:
                if not request.wait or (away_since is not None and time.monotonic() - away_since > RESTART_GRACE_S):
                    raise
                line.note("the daemon went away; asking again when it is back")
                away_since = time.monotonic() if away_since is None else away_since
            except DaemonNotRunning:
                if not request.wait:
                    raise
                if away_since is None:
                    away_since = time.monotonic()
                    line.waiting("waiting for the daemon to come back…")
                if time.monotonic() - away_since > RESTART_GRACE_S:
                    raise
            time.sleep(RETRY_S)
    except KeyboardInterrupt:
        line.done()
        say("governor: left the queue; nothing was started")
        sys.exit(EXIT_INTERRUPTED)
    except _Terminated:
        line.done()
        say("governor: left the queue (SIGTERM); nothing was started")
        sys.exit(128 + signal.SIGTERM)
    finally:
        terminated.restore()
        line.done()


class _Terminated(Exception):
    """SIGTERM came while the launch waited."""


class _OnSigterm:
    """While a launch waits, SIGTERM (a timeout wrapper, a batch system, governor run's parent
    passing it on) leaves the queue as Ctrl-C does, and says so: it ended the wait with 143 and
    not a word. Once only (a second SIGTERM meanwhile is ignored), never where SIGTERM is
    ignored (a supervisor's choice, kept), and not off the main thread (Python sets no handler
    there: a caller's thread). :meth:`restore` puts back the handler in force before, once the
    launch is decided: the command's exec then takes the default action."""

    def __init__(self) -> None:
        self._previous = signal.getsignal(signal.SIGTERM)
        self._installed = False
        if self._previous is not signal.SIG_IGN:
            try:
                signal.signal(signal.SIGTERM, self._leave)
                self._installed = True
            except ValueError:  # off the main thread
                pass

    def _leave(self, signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Terminated

    def restore(self) -> None:
        """Put back the handler in force before (the default where none was set from Python)."""
        if self._installed:
            self._installed = False
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous)


# Off a terminal, how often at most, seconds, a queue line that changed only slightly is written.
QUIET_REPEAT_S = 60.0


class _QueueLine:
    """The "waiting" message on stderr: rewritten in place on a terminal at each change;
    otherwise (logs, pipes, a ``nohup`` job waiting an hour) a line when the reason changes
    materially (:func:`~governor.config.units.materially_changed`: another group or resource,
    a figure off by more than 10 %), else at most once per :data:`QUIET_REPEAT_S`: the daemon
    tells each move of the session memory it waits on, a few KB each."""

    def __init__(self, clock: Callable[[], float] | None = None, live: bool | None = None) -> None:
        import time

        self.clock = clock or time.monotonic
        self.live = sys.stderr.isatty() if live is None else live
        self.shown = False
        self.since: float | None = None  # clock() of the first "queued"
        self.last: str | None = None  # the line written last
        self.written_at = 0.0  # clock() when it was

    def show(self, place: dict) -> None:
        from governor.cli.view_common import printable, reason
        from governor.config.units import materially_changed

        now = self.clock()
        if self.since is None:
            self.since = now
        why = printable(reason(place.get("reason")))  # the daemon's one reason, as every view shows it
        position = place.get("position")
        at = position if type(position) is int and 0 < position < 10**9 else "?"  # not a 300-digit place
        text = f"governor: queued (position {at}): {why}; Ctrl-C leaves the queue"
        if text == self.last:  # the daemon tells every change of its place; a line says only what is new
            return
        if (self.live or self.last is None or materially_changed(self.last, text)
                or now - self.written_at >= QUIET_REPEAT_S):
            self._write(text)

    def note(self, text: str) -> None:
        self._write(f"governor: {text}")

    def waiting(self, text: str) -> None:
        """Say ``text`` on a terminal only: a wait a log need not hear of (it ends in a start or
        an error, each said)."""
        if self.live and text != self.last:
            self._write(f"governor: {text}")

    def done(self) -> None:
        if self.live and self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        self.shown = False

    def _write(self, text: str) -> None:
        if self.live:
            sys.stderr.write("\r\x1b[K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
        self.shown, self.last, self.written_at = True, text, self.clock()
