"""One error style and one exit code per kind of failure (cli/failures.py; the table in docs/user.md):
one test per row, through click (CliRunner) and through ``governor run``'s fast path (a
subprocess of the console script's entry, which never loads click)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fake_socket import FakeSocket

from governor.cli import client as cli_client
from governor.cli.failures import KINDS
from governor.cli.main import main
from governor.wire.protocol import ERROR_CODES

REPO = Path(__file__).resolve().parents[2]
GOVERNOR = [sys.executable, "-c", "from governor.cli.entry import main; main()"]
START_IT = "(start it: sudo systemctl start governor)"


def start_that(path: str) -> str:
    """The hint for a socket that is not the installed unit's: a daemon run by hand."""
    return f"(start the daemon that serves it: sudo governor daemon --socket {shlex.quote(path)} …)"


def governor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI in a subprocess, as the console script runs it."""
    return subprocess.run([*GOVERNOR, *args], cwd=REPO, capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})})


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stderr


@pytest.fixture
def refusing(tmp_path):
    """A daemon that answers every request with the error ``refusing.answer = (code, message)``."""
    servers = []

    def serve(code: str, message: str) -> str:
        path = str(tmp_path / f"{len(servers)}.sock")
        servers.append(FakeSocket(path, [{"ok": False, "error": {"code": code, "message": message}}]))
        return path

    yield serve
    for server in servers:
        server.close()


def test_every_daemon_error_code_has_an_exit_code():
    assert set(ERROR_CODES) <= set(KINDS)


def test_0_done(tmp_path):
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "status": {"groups": {}}}])
    assert invoke("status", "--json", "--socket", server.path) == (0, "")
    server.close()


def test_1_failure_a_daemon_bug(refusing):
    path = refusing("internal", "internal error: KeyError 'x'")
    assert invoke("status", "--socket", path) == (1, "governor: error: internal error: KeyError 'x' (a bug in the "
                                                     "daemon: journalctl -u governor has the details)\n")


def test_1_failure_a_broken_reply(tmp_path):
    server = FakeSocket(str(tmp_path / "g.sock"), [b"nonsense\n"])
    code, err = invoke("status", "--socket", server.path)
    server.close()
    assert code == 1 and err.startswith("governor: error: ") and err.count("\n") == 1


def test_2_usage_error_is_one_line_with_where_to_look():
    code, err = invoke("status", "--jsn")
    assert code == 2
    assert err == "governor: error: No such option '--jsn'. Did you mean '--json'? (see main status -h)\n"
    assert invoke("nosuchcommand")[0] == 2


@pytest.mark.parametrize("interval", ["nan", "NaN", "0", "inf", "-0"])
def test_a_top_interval_that_is_no_number_in_range_is_a_usage_error_not_a_traceback(interval):
    code, err = invoke("top", "-b", "-n", "1", "-d", interval, "--socket", "/nonexistent/governor.sock")
    assert code == 2 and err.startswith("governor: error: Invalid value for '-d' / '--interval': ") and "0.5<=x<=60" in err
    assert err.count("\n") == 1


def test_no_command_at_all_is_help_not_an_error_line():
    result = CliRunner().invoke(main, [])
    assert result.output.startswith("Usage:") and "Commands:" in result.output


@pytest.mark.parametrize("daemon_code", ["bad_request", "not_found", "exceeds_capacity", "too_large"])
def test_2_bad_input_the_daemon_refuses(refusing, daemon_code):
    result = governor("run", "--", "true", env={"GOVERNOR_SOCKET": refusing(daemon_code, "demand cpu = 9 cores")})
    assert result.returncode == 2 and result.stderr.startswith("governor: error: demand cpu = 9 cores")


def test_2_a_reload_of_a_bad_config(refusing):
    path = refusing("invalid_config", "/etc/governor/governor.toml: capacity.bogus: unknown key")
    assert invoke("reload", "--socket", path) == (
        2, "governor: error: /etc/governor/governor.toml: capacity.bogus: unknown key (the config in force stays; "
           "governor check-config FILE checks a file)\n")


def test_2_a_bad_scenario_file(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text("[capacity]\ncpu = -1\n")
    code, err = invoke("simulate", str(scenario))
    assert code == 2 and err.startswith(f"governor: error: {scenario}: capacity.cpu: ")


def test_a_refusal_no_group_would_lift_gets_no_hint_to_join_one():
    # "process 371 is governed by another governor daemon (…); launch through that one: …" ended
    # "(ask an admin to add you to a [groups] entry)" (second-week check).
    from governor.cli.failures import report
    from governor.errors import DaemonError

    other = ("process 371 is governed by another governor daemon (pid 320, cgroup root /sys/fs/cgroup/cpu/b); "
             "launch through that one: governor run --socket /tmp/b.sock …")
    for message in (other, "a client may launch only its own pid (12), not 1"):
        said, status = report(DaemonError("forbidden", message, "launch"))
        assert status == 77 and said == f"governor: error: {message}", said
    said, _ = report(DaemonError("forbidden", "user bob belongs to no governed group", "launch"))
    assert said.endswith("(ask an admin to add you to a [groups] entry)")


def test_a_launch_past_a_quota_is_not_pointed_at_the_hosts_capacity():
    # A stranger's check: "exceeds nobody's user_limit of 4.0G (ask for less: governor status
    # shows the capacity)": status shows the host's capacity, not the quota that refused it.
    from governor.cli.failures import report
    from governor.errors import DaemonError

    for message in ("demand memory = 5.0G exceeds nobody's user_limit of 4.0G",
                    "demand memory = 5.0G exceeds group A's limit of 4.0G"):
        said, status = report(DaemonError("exceeds_capacity", message, "launch"))
        assert status == 2 and said == f"governor: error: {message} (ask for less, or an admin to raise it)", said
    said, _ = report(DaemonError("exceeds_capacity", "demand memory = 50G exceeds the capacity of 23G", "launch"))
    assert said.endswith("(ask for less: governor status shows the capacity)")


def test_the_installed_units_socket_says_to_start_the_unit_another_the_daemon_serving_it():
    # A daemon run by hand on a socket of its own was told "sudo systemctl start governor": no
    # unit serves that socket (new-user check).
    from governor.cli.client import DEFAULT_SOCKET
    from governor.cli.failures import report
    from governor.errors import DaemonError, DaemonNotRunning

    assert report(DaemonNotRunning(DEFAULT_SOCKET, "no socket"))[0].endswith(START_IT)
    assert report(DaemonError("daemon_not_running", "x", "status"))[0].startswith("governor: error: x")  # a daemon's
    assert report(DaemonNotRunning("/tmp/my gov/g.sock", "no socket"))[0].endswith(
        "(start the daemon that serves it: sudo governor daemon --socket '/tmp/my gov/g.sock' …)")


def test_69_no_daemon_click_and_fast_path_alike(tmp_path):
    path = str(tmp_path / "absent.sock")
    expected = f"governor: error: governor daemon is not running (no socket at {path}) {start_that(path)}\n"
    assert invoke("status", "--socket", path) == (69, expected)
    result = governor("run", "--no-wait", "--", "true", env={"GOVERNOR_SOCKET": path})  # else it waits for one
    assert (result.returncode, result.stderr) == (69, expected)


def test_69_the_daemon_cannot_do_it_here(refusing):
    result = governor("run", "--", "true", env={"GOVERNOR_SOCKET": refusing("unavailable", "no cgroup support")})
    assert (result.returncode, result.stderr) == (69, "governor: error: no cgroup support\n")


@pytest.mark.parametrize(("daemon_code", "hint"), [
    ("would_wait", "--no-wait given: without it the task waits in the queue"),
    ("too_many", "try again when one of your tasks has ended"),
])
def test_75_try_again_later(refusing, daemon_code, hint):
    result = governor("run", "--no-wait", "--", "true", env={"GOVERNOR_SOCKET": refusing(daemon_code, "not now")})
    assert (result.returncode, result.stderr) == (75, f"governor: error: not now ({hint})\n")


def test_137_stopped_while_queued(refusing):
    result = governor("run", "--", "true", env={"GOVERNOR_SOCKET": refusing("stopped", "task 7 was stopped by bob")})
    assert (result.returncode, result.stderr) == (137, "governor: error: task 7 was stopped by bob\n")


def test_77_a_user_in_no_group_is_told_whom_to_ask(refusing):
    result = governor("run", "--", "true",
                      env={"GOVERNOR_SOCKET": refusing("forbidden", "user bob belongs to no governed group")})
    assert (result.returncode, result.stderr) == (
        77, "governor: error: user bob belongs to no governed group (ask an admin to add you to a [groups] entry)\n")


def test_77_an_admin_operation_says_who_may(refusing):
    path = refusing("forbidden", "reload is for root; user bob is not")
    assert invoke("reload", "--socket", path) == (
        77, "governor: error: reload is for root; user bob is not (run it as root, or as a member of the config's "
            "admin_group)\n")


def test_77_a_socket_the_user_may_not_open(monkeypatch, tmp_path):
    # As root the kernel lets every connect() through: the refusal is simulated at the socket.
    class Denied:
        def __init__(self, *args):
            pass

        def settimeout(self, timeout):
            pass

        def connect(self, path):
            raise PermissionError(13, "Permission denied")

        def close(self):
            pass

    monkeypatch.setattr(cli_client.socket, "socket", Denied)
    code, err = invoke("status", "--socket", str(tmp_path / "s"))
    assert code == 77
    assert err == (f"governor: error: {tmp_path}/s: cannot connect: Permission denied "
                   "(ask an admin for access to the control socket)\n")


def test_130_interrupted(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_client, "call", interrupted)
    code, err = invoke("status")
    assert code == 130 and "Traceback" not in err and "Aborted" not in err



def test_130_interrupted_on_the_fast_path_before_the_queue():
    # A Ctrl-C while governor run's launch loads its modules (after Python's handler is back)
    # printed a KeyboardInterrupt traceback; click's path says nothing and exits 130.
    code = ("import governor.cli.launch as launch\n"
            "def interrupted(*args, **kwargs):\n    raise KeyboardInterrupt\n"
            "launch.start = interrupted\n"
            "from governor.cli.entry import main; main()")
    result = subprocess.run([sys.executable, "-c", code, "run", "--", "true"], cwd=REPO, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 130 and "Traceback" not in result.stderr, result.stderr


# 126, 127 (run's command cannot be executed, is not found) and 130 in run's queue: tests/unit/test_client_cli.py.


def test_verbose_shows_the_internal_code_click_and_fast_path_alike(refusing, tmp_path):
    path = refusing("forbidden", "user bob belongs to no governed group")
    assert CliRunner().invoke(main, ["--verbose", "status", "--socket", path]).stderr.endswith(
        "[groups] entry) [forbidden]\n")
    result = governor("--verbose", "run", "--", "true", env={"GOVERNOR_SOCKET": refusing("forbidden", "no group")})
    assert result.returncode == 77 and result.stderr.endswith("[groups] entry) [forbidden]\n")
    absent = str(tmp_path / "absent.sock")
    result = governor("-v", "run", "--no-wait", "--", "true", env={"GOVERNOR_SOCKET": absent})
    assert result.returncode == 69 and result.stderr.endswith(f"{start_that(absent)} [daemon_not_running]\n")
    assert "[" not in governor("run", "--", "true", env={"GOVERNOR_SOCKET": path}).stderr.split(")")[-1]


def test_an_error_line_is_printable_and_bounded_in_every_part():
    from governor.cli.failures import LINE_PART_CHARS, line

    shown = line("M" * 10**6, "\x1b]0;PWNED\x07 groups: A", "\x1b[2J" + "c" * 10**5)
    assert "\x1b" not in shown and "\x07" not in shown and "?]0;PWNED? groups: A" in shown
    assert len(shown) < 3 * LINE_PART_CHARS + 200 and "… (1,000,000 characters)" in shown
