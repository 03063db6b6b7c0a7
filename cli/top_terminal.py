"""``governor top``'s terminal side: one ``watch`` stream read by a thread, keys read in
cbreak mode, and a full-screen :class:`rich.live.Live` redrawn from :func:`governor.cli.top_view.top_view`.

The main loop sleeps in ``select`` on stdin and a wake-up pipe; the stream thread, SIGWINCH
(a resize) and a one-second timeout (for the "3s ago" clocks) write to or expire it. Nothing
polls the daemon: the stream pushes one snapshot per interval.
"""

from __future__ import annotations

import os
import queue
import select
import signal
import sys
import termios
import threading
import time
import tty

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live

from governor.cli.client import stream
from governor.wire.request_types import WatchRequest
from governor.cli.top_state import TopState, parse_keys, press
from governor.cli.top_view import top_view
from governor.cli.view_common import console
from governor.errors import ControlSocketError, DaemonError

RECONNECT_S = 1.0
REDRAW_S = 1.0


class Feed(threading.Thread):
    """Reads ``watch`` snapshots from the daemon into ``updates``, reconnecting every
    :data:`RECONNECT_S` while it cannot be reached; wakes the main loop through ``wake_fd``.

    ``updates`` receives ``("status", snapshot, unix_time)`` and ``("down", reason, unix_time)``.
    A daemon thread: it may be blocked in ``recv`` when top quits, and must not keep the
    process alive.
    """

    def __init__(self, path: str, interval: float, wake_fd: int):
        super().__init__(name="governor-top-feed", daemon=True)
        self.path, self.interval, self.wake_fd = path, interval, wake_fd
        self.updates: queue.SimpleQueue = queue.SimpleQueue()
        self.stopped = threading.Event()
        self._waking = threading.Lock()

    def run(self) -> None:
        # A missed update should not read as a dead daemon: allow three intervals (and 5 s).
        timeout = max(5.0, 3 * self.interval)
        while not self.stopped.is_set():
            try:
                for reply in stream(self.path, WatchRequest(self.interval), timeout):
                    self._send("status", reply.snapshot)
                    if self.stopped.is_set():
                        return
            except DaemonError as error:
                self._send("down", f"the daemon refused watch: {error}")
            except ControlSocketError as error:
                self._send("down", str(error))
            self.stopped.wait(RECONNECT_S)

    def stop(self) -> None:
        """End the stream at its next update. Once this returns the thread writes no wake-up, so
        the caller may close ``wake_fd``: a number closed and reused (by a pipe opened next)
        would otherwise receive the thread's last wake-up byte."""
        with self._waking:
            self.stopped.set()

    def _send(self, kind: str, value: object) -> None:
        self.updates.put((kind, value, time.time()))
        with self._waking:
            if not self.stopped.is_set():
                _wake(self.wake_fd)


class _Screen:
    """Renders the current state at whatever size the terminal has at drawing time."""

    def __init__(self, state: TopState):
        self.state = state

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield top_view(self.state, width=options.max_width, height=options.height or console.height, now=time.time())


def run(path: str, interval: float) -> None:
    """Show the live view until ``q`` (or Ctrl-C); the terminal is restored however it ends.

    Raises:
        click.ClickException: stdin or stdout is not a terminal.
    """
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        from governor.cli.command_failure import Failure
        from governor.cli.failures import EXIT_FAILURE

        raise Failure("governor top needs a terminal (for a snapshot: governor status --json)", EXIT_FAILURE)
    # Exported COLUMNS/LINES are a snapshot of some terminal's size: rich would prefer them to
    # this terminal's real size and never follow a resize.
    for variable in ("COLUMNS", "LINES"):
        os.environ.pop(variable, None)
    state = TopState()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    feed = Feed(path, interval, wake_write)
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin)
    previous_winch = signal.signal(signal.SIGWINCH, lambda *_: _wake(wake_write))
    try:
        # cbreak: keys arrive one at a time and unechoed; Ctrl-C still raises KeyboardInterrupt.
        tty.setcbreak(stdin)
        feed.start()
        with Live(_Screen(state), screen=True, auto_refresh=False, redirect_stdout=False,
                  redirect_stderr=False, console=console()) as live:
            _loop(state, feed, stdin, wake_read, live)
    except KeyboardInterrupt:
        pass
    finally:
        feed.stop()
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, previous_winch)
        os.close(wake_read)
        os.close(wake_write)


def _loop(state: TopState, feed: Feed, stdin: int, wake_read: int, live: Live) -> None:
    live.refresh()
    while not state.quit:
        ready, _, _ = select.select([stdin, wake_read], [], [], REDRAW_S)
        if wake_read in ready:
            os.read(wake_read, 4096)
        if stdin in ready:
            for key in parse_keys(os.read(stdin, 1024)):
                press(state, key)
        while not feed.updates.empty():
            kind, value, at = feed.updates.get()
            if kind == "status":
                state.receive(value, at)
            else:
                state.down = value
        live.refresh()


def _wake(fd: int) -> None:
    try:
        os.write(fd, b".")
    except (BlockingIOError, OSError):
        # A full pipe already holds a wake-up; a closed one means top is quitting.
        pass
