"""``scripts/demo`` on this host's real cgroup v1: it runs governor's main job with sessions off,
then removes everything it made and prints nothing from the work it killed (issue 11, point 14),
also when it is interrupted (issue 21, point 3)."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import select
import signal
import subprocess
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.kernel_v1
REPO = Path(__file__).resolve().parents[2]


def nothing_left(before: set[str]) -> None:
    assert set(glob.glob("/tmp/governor-demo.*")) == before
    assert not glob.glob("/sys/fs/cgroup/*/governor-demo") + glob.glob("/sys/fs/cgroup/*/*/*/governor-demo")
    burners = subprocess.run(["pgrep", "-f", "while True: pass"], capture_output=True, text=True).stdout.split()
    assert not burners, f"the demo left its work running: {burners}"
    # Issue 44.1: its daemon's root lock and registry entry went too (each daemon left a lock).
    kept = [path for path in glob.glob("/run/governor/locks/*.lock") + glob.glob("/run/governor/daemons/*.json")
            if "governor-demo" in _text(path)]
    assert not kept, f"the demo left {kept}"


def _text(path: str) -> str:
    """The file's text; "" once another test's daemon removed it."""
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""


@contextlib.contextmanager
def demo(**options) -> Iterator[subprocess.Popen]:
    """``scripts/demo`` started in a session of its own; if the test fails, whatever of it is
    still running is killed and its cgroups removed, so that no later test meets it."""
    proc = subprocess.Popen([str(REPO / "scripts" / "demo")], start_new_session=True, text=True, **options)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            subprocess.run("find /sys/fs/cgroup -depth -type d -path '*/governor-demo*' -exec rmdir {} +",
                           shell=True, capture_output=True)


def test_the_demo_shows_two_groups_and_leaves_nothing_behind():
    before = set(glob.glob("/tmp/governor-demo.*"))
    with demo(stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        stdout, stderr = proc.communicate(timeout=300)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert result.returncode == 0, result.stderr
    assert "root" in result.stdout and "nobody" in result.stdout  # both groups in the status
    for noise in ("Terminated", "Killed", "Traceback"):
        assert noise not in result.stdout + result.stderr
    assert "session" not in result.stdout  # its daemon (whose log it shows) moved nothing it did not start
    nothing_left(before)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_demo_leaves_nothing_behind(how):
    before = set(glob.glob("/tmp/governor-demo.*"))
    with demo(stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        for line in proc.stdout:
            if line.startswith("== governor run"):
                break  # the daemon serves and the burners are starting
        proc.send_signal(how)
        rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + how, rest
    nothing_left(before)



def test_ctrl_c_on_its_terminal_stops_the_demo_with_130_and_says_nothing_else():
    # Issue 33, point 9: Ctrl-C on a terminal sends SIGINT to the whole foreground process
    # group. The daemon was in it and stopped, so `governor status` under way said "governor
    # daemon is not running" (69) instead of the demo stopping with 130; and one caught loading
    # its modules printed a KeyboardInterrupt traceback. Here the demo runs on a terminal of its
    # own, and ^C is typed as `governor status` starts.
    before = set(glob.glob("/tmp/governor-demo.*"))
    master, terminal = os.openpty()
    with demo(stdin=terminal, stdout=terminal, stderr=terminal, preexec_fn=_take_the_terminal) as proc:
        os.close(terminal)
        said = _read_until(master, b"== governor status")
        os.write(master, b"\x03")  # the terminal's Ctrl-C: SIGINT to its foreground group
        said += _read_until(master, None)
        assert proc.wait(timeout=120) == 130, said
    os.close(master)
    assert b"daemon is not running" not in said and b"Traceback" not in said, said
    nothing_left(before)


def _take_the_terminal() -> None:
    """In the demo's new session: make its stdin its controlling terminal, its group the foreground."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _read_until(master: int, marker: bytes | None, timeout: float = 300) -> bytes:
    """What the terminal shows until ``marker`` appears (None: until every writer closed it)."""
    said = b""
    while marker is None or marker not in said:
        ready, _, _ = select.select([master], [], [], timeout)
        assert ready, f"the demo said nothing more in {timeout} s: {said!r}"
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's last writer closed it
            chunk = b""
        if not chunk:
            assert marker is None, f"the demo ended before {marker!r}: {said!r}"
            return said
        said += chunk
    return said
