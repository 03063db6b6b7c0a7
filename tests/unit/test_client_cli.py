"""``governor run`` and ``governor status`` against a ControlServer with a fake handler, and the
socket client (cli/client.py).

The server runs in a background thread with its own event loop. ``governor run`` runs in a
subprocess, because it execs: the fake handler must see that subprocess's pid, and its exit
code must be the command's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from governor.cli.client import DEFAULT_SOCKET, call, socket_path
from governor.cli.launch import plain
from governor.cli.main import main
from governor.errors import ControlSocketError, DaemonError, DaemonNotRunning, RequestError
from governor.wire.protocol import LaunchRequest, StatusRequest
from support.client import GOVERNOR, REPO, governor
from support.status_sample import STATUS

G = 1024**3
M = 1024**2


def test_run_launches_the_commands_own_pid_and_keeps_its_exit_code(fake_daemon):
    result, parent = governor("run", "--cpus", "1", "--", "sh", "-c", "echo $$; exit 3", socket_path=fake_daemon.path)
    assert result.returncode == 3, result.stderr
    [(request, peer)] = fake_daemon.seen
    assert result.stdout == f"{request.pid}\n" and request.pid == peer.pid != parent  # the command's, a child's
    assert result.stderr == ""  # it exited by itself: nothing to say


def test_run_with_stdout_closed_keeps_the_commands_exit_code(fake_daemon):
    # Python makes sys.stdout None for a closed fd 1, as cron or a daemon may leave it: the fast
    # path's flush before os._exit raised AttributeError there (a traceback, exit 1).
    result = subprocess.run([*GOVERNOR, "run", "--", "sh", "-c", "exit 3"], cwd=REPO, stderr=subprocess.PIPE,
                            text=True, timeout=30, env={**os.environ, "GOVERNOR_SOCKET": fake_daemon.path},
                            preexec_fn=lambda: os.close(1))
    assert result.returncode == 3, result.stderr
    assert fake_daemon.seen


def test_run_exec_launches_its_own_pid_then_execs_with_the_commands_exit_code(fake_daemon):
    result, pid = governor("run", "--exec", "--group", "physics", "--cpus", "1.5", "--memory", "2G", "--io-read",
                           "100M", "--io-write", "1.5K", "--", "sh", "-c", "echo $$; exit 3", socket_path=fake_daemon.path)
    assert result.returncode == 3, result.stderr
    assert result.stdout == f"{pid}\n"  # exec kept the pid the daemon moved into the cgroup
    [(request, peer)] = fake_daemon.seen
    assert request == LaunchRequest(pid=pid, group="physics",
                                    demand={"cpu": 1.5, "memory": 2 * G, "io_read": 100 * M, "io_write": 1536},
                                    command=("sh", "-c", "echo $$; exit 3"))
    assert (peer.pid, peer.uid, peer.gid) == (pid, os.getuid(), os.getgid())


def test_run_passes_options_after_the_command_to_the_command(fake_daemon):
    result, _ = governor("run", "--cpus", "1", "sh", "-c", 'echo "$@"', "sh", "--memory", "4G",
                         socket_path=fake_daemon.path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "--memory 4G\n"
    [(request, _)] = fake_daemon.seen
    assert request.demand == {"cpu": 1.0} and request.group is None


def test_run_without_a_daemon_fails_with_one_line(tmp_path):
    # --no-wait: without it, run waits for the daemon to come back (test_client_resend.py).
    path = str(tmp_path / "absent.sock")
    result, _ = governor("run", "--no-wait", "--", "sh", "-c", "echo ran", socket_path=path)
    assert result.returncode == 69
    assert result.stderr == (f"governor: error: governor daemon is not running (no socket at {path}) "
                             "(start it: sudo systemctl start governor)\n")
    assert result.stdout == ""


def test_run_with_a_dead_socket_says_connection_refused(tmp_path):
    path = str(tmp_path / "dead.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(path)  # bound, never listening
        result, _ = governor("run", "--no-wait", "--", "true", socket_path=path)
    assert result.returncode == 69
    assert result.stderr == (f"governor: error: governor daemon is not running (connection refused at {path}) "
                             "(start it: sudo systemctl start governor)\n")


def test_a_socket_path_that_is_a_plain_file_is_named_so(tmp_path):
    path = tmp_path / "passwd"
    path.write_text("root:x:0:0::/root:/bin/sh\n")  # connect() to it is refused, as to a dead daemon's
    result, _ = governor("status", socket_path=str(path))
    assert result.returncode != 0 and result.stderr.startswith(f"governor: error: {path}: not a socket"), result.stderr


def test_run_refused_by_the_daemon_prints_its_message_and_does_not_run(fake_daemon):
    fake_daemon.refuse = RequestError("forbidden", "uid 1000 may not launch into group physics")
    result, _ = governor("run", "--group", "physics", "--", "sh", "-c", "echo ran", socket_path=fake_daemon.path)
    assert result.returncode == 77
    assert result.stderr == ("governor: error: uid 1000 may not launch into group physics "
                             "(ask an admin to add you to a [groups] entry)\n")
    assert result.stdout == ""


def test_run_missing_command_is_127(fake_daemon):
    result, _ = governor("run", "--", "no-such-command-governor-test", socket_path=fake_daemon.path)
    assert result.returncode == 127
    assert result.stderr == "governor: error: no-such-command-governor-test: command not found\n"


def test_run_non_executable_file_is_126(fake_daemon, tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    result, _ = governor("run", "--", str(script), socket_path=fake_daemon.path)
    assert result.returncode == 126
    assert result.stderr == f"governor: error: {script}: permission denied\n"


@pytest.mark.parametrize("limits, said", [
    ({"memory.max": str(50 * M)}, "governor: task t1 is at 46.0M of its 50.0M memory cap\n"),
    ({"memory.high": str(50 * M)}, "governor: task t1 is at 46.0M of its 50.0M soft memory cap\n"),
])
def test_run_warns_once_when_its_task_passes_90_percent_of_its_memory_cap(fake_daemon, tmp_path, limits, said):
    # Issue 33, point 1: users heard of their memory cap only after the kill. The task's
    # cgroup here is a directory whose memory.current says 46M of a 50M cap.
    (tmp_path / "memory.current").write_text(f"{46 * M}\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    fake_daemon.started = {"cgroup": str(tmp_path), "limits": limits}
    env = {**os.environ, "GOVERNOR_SOCKET": fake_daemon.path}
    with subprocess.Popen([*GOVERNOR, "run", "--", "sleep", "60"], cwd=REPO, env=env, text=True,
                          stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stderr.readline() == said
        finally:
            proc.terminate()  # forwarded to sleep: governor run exits as it did
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert proc.stderr.read() == ""  # once


def test_a_task_held_at_its_soft_cap_is_warned_of_and_one_far_from_its_cap_is_not():
    from governor.cli.memory_warning import MemoryWatch

    held = MemoryWatch({"task": "7", "cgroup": "/g/t7", "limits": {"memory.high": str(100 * M)}},
                       lambda directory, memory: (60 * M, 3))
    assert held.look() == "governor: task 7 is held at its 100.0M soft memory cap (60.0M in use): it is throttled there"
    assert held.look() is None  # once
    far = MemoryWatch({"task": "8", "cgroup": "/g/t8", "limits": {"memory.max": str(100 * M)}},
                      lambda directory, memory: (89 * M, 3))  # a hard cap: no memory.high events matter
    assert far.look() is None and not far.warned
    unread = MemoryWatch({"task": "9", "cgroup": "/g/t9", "limits": {"memory.max": str(100 * M)}}, lambda d, m: None)
    assert unread.look() is None


def test_v1_caps_are_watched_as_v2_ones():
    from governor.cli.memory_warning import MemoryWatch

    # memory.limit_in_bytes is v1's hard cap, memory.soft_limit_in_bytes its soft one (issue 33).
    hard = MemoryWatch({"task": "7", "cgroup": "/g/t7", "limits": {"memory.soft_limit_in_bytes": str(10 * M),
                                                                    "memory.limit_in_bytes": str(100 * M)}},
                       lambda directory, memory: (91 * M, 0))
    assert hard.look() == "governor: task 7 is at 91.0M of its 100.0M memory cap"
    soft = MemoryWatch({"task": "8", "cgroup": "/g/t8", "limits": {"memory.soft_limit_in_bytes": str(100 * M)}},
                       lambda directory, memory: (95 * M, 0))
    assert soft.look() == "governor: task 8 is at 95.0M of its 100.0M soft memory cap"


def test_a_v1_task_s_memory_is_read_from_its_own_memory_cgroup_never_through_a_process(tmp_path):
    # Issue 43, point 3: a zombie's /proc/<pid>/cgroup names the root memory cgroup, and the
    # warning said "task 1 is at 1.4G of its 512.0M memory cap" for a loop using 5M: the
    # whole host's usage. The figure now comes from the directory the launch reply names.
    from governor.cgroups.memory_now import memory_now
    from governor.cli.memory_warning import MemoryWatch

    memory_root, cpu = tmp_path / "memory", tmp_path / "cpu,cpuacct" / "gov" / "A" / "task-1"
    task = memory_root / "gov" / "A" / "task-1"
    for directory in (task, cpu):
        directory.mkdir(parents=True)
    (memory_root / "memory.usage_in_bytes").write_text(f"{1434 * M}\n")  # the root: the whole host
    (task / "memory.usage_in_bytes").write_text(f"{5 * M}\n")
    proc = tmp_path / "proc" / "4242"  # the zombie: it names the root memory cgroup
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("5:memory:/\n4:cpu,cpuacct:/gov/A/task-1\n")
    started = {"task": "1", "cgroup": str(cpu), "memory_cgroup": str(task),
               "limits": {"memory.limit_in_bytes": str(512 * M)}}
    assert memory_now(str(cpu), str(task)) == (5 * M, 0)
    watch = MemoryWatch(started, memory_now)
    assert watch.look() is None and not watch.warned  # 5M of 512M: nothing to say
    (task / "memory.usage_in_bytes").write_text(f"{470 * M}\n")
    assert watch.look() == "governor: task 1 is at 470.0M of its 512.0M memory cap"
    # A reply without the memory hierarchy's directory (an older daemon on v1): no figure
    # rather than one read elsewhere.
    assert memory_now(str(cpu)) is None


@pytest.mark.parametrize("exec_in_place", [False, True])
def test_a_command_that_cannot_run_fails_at_once_without_asking_the_daemon(fake_daemon, tmp_path, exec_in_place):
    # Issue 33, point 3: a typo queued behind others and said "command not found" only when it
    # reached the head. The daemon here would keep it queued for ever.
    fake_daemon.queued, fake_daemon.hold = [{"position": 3, "why": "waits for memory"}], True
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    flags = ["--exec"] if exec_in_place else []
    for cmd, code, said in (("nosuchcmd-governor-test", 127, "nosuchcmd-governor-test: command not found"),
                            (str(tmp_path / "nowhere"), 127, f"{tmp_path / 'nowhere'}: No such file or directory"),
                            (str(tmp_path), 126, f"{tmp_path}: Is a directory"),
                            (str(script), 126, f"{script}: permission denied")):
        result, _ = governor("run", *flags, "--", cmd, socket_path=fake_daemon.path)
        assert (result.returncode, result.stderr) == (code, f"governor: error: {said}\n")
    assert fake_daemon.seen == []


def test_a_path_directory_the_user_cannot_search_is_passed_over_as_a_shell_does(tmp_path):
    # Issue 23, point 4: execvp reported the directory's EACCES as the command's: 126. In a
    # child that is not root (root searches any directory): nobody, if this runs as root.
    from governor.cli.become_task import execute

    closed = tmp_path / "closed"
    closed.mkdir(mode=0o000)  # searchable by no one but root
    tmp_path.chmod(0o755)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        code = 1
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            os.environ["PATH"] = f"{closed}:/usr/bin:/bin"
            sys.stderr = os.fdopen(write_end, "w")
            execute(("nosuchcmd-governor-test",))
        except SystemExit as leaving:
            code = leaving.code
        finally:
            os._exit(code)
    os.close(write_end)
    said = os.read(read_end, 4096).decode()
    _, status = os.waitpid(child, 0)
    closed.chmod(0o700)
    assert os.waitstatus_to_exitcode(status) == 127 and said.endswith("nosuchcmd-governor-test: command not found\n")


def test_a_command_on_path_that_is_not_executable_is_126_and_one_found_nowhere_127(fake_daemon, tmp_path):
    (tmp_path / "notexec").write_text("#!/bin/sh\n")
    (tmp_path / "notexec").chmod(0o644)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "GOVERNOR_SOCKET": fake_daemon.path}
    found = subprocess.run([*GOVERNOR, "run", "--", "notexec"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=30)
    assert found.returncode == 126 and "notexec: permission denied" in found.stderr
    nowhere = subprocess.run([*GOVERNOR, "run", "--", "nosuchcmd-governor-test"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=30)
    assert nowhere.returncode == 127 and "command not found" in nowhere.stderr


@pytest.mark.parametrize("args", [
    ["--cpus", "0", "--", "true"],
    ["--cpus", "-1", "--", "true"],
    ["--cpus", "inf", "--", "true"],
    ["--cpus", "two", "--", "true"],
    ["--memory", "4X", "--", "true"],
    ["--io-read", "-5M", "--", "true"],
    [],
])
def test_run_bad_flags_are_usage_errors(args, tmp_path):
    # Checked before connecting: the socket does not exist, yet the error is about the flag.
    result = CliRunner().invoke(main, ["run", "--socket", str(tmp_path / "absent.sock"), *args])
    assert result.exit_code == 2, result.output
    [line] = result.output.splitlines()  # one line, in governor's style, with where to look
    assert line.startswith("governor: error: ") and line.endswith(" run -h)") and "daemon" not in line


def test_run_help_is_help_not_a_command(fake_daemon):
    for flag in ("-h", "--help"):
        result, _ = governor("run", flag, "--", "true", socket_path=fake_daemon.path)
        assert result.returncode == 0 and "Usage: governor run" in result.stdout, result.stderr
    result, _ = governor("status", "-h", socket_path=fake_daemon.path)
    assert result.returncode == 0 and "Usage: governor status" in result.stdout
    assert not fake_daemon.seen  # nothing was launched


def test_an_unknown_run_option_is_an_error_with_a_suggestion_not_a_command(fake_daemon):
    result, _ = governor("run", "--cpu", "1", "--", "true", socket_path=fake_daemon.path)
    assert result.returncode == 2
    assert "No such option '--cpu'" in result.stderr and "'--cpus'" in result.stderr
    assert not fake_daemon.seen


def test_options_after_the_command_are_the_commands(fake_daemon):
    result, _ = governor("run", "sh", "-c", "echo ran $0", "--cpus", socket_path=fake_daemon.path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ran --cpus\n"


HEAVY = ["rich", "scipy", "numpy", "psutil", "cgroupspy", "asyncio", "governor.core.drf", "governor.core.policies",
         "governor.core.scenario", "governor.config.load", "governor.core.model", "governor.daemon", "governor.wire.server"]
_REPORT = f"import json, sys; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"


def test_run_help_imports_nothing_heavy():
    code = ("import sys; sys.argv = ['governor', 'run', '--help']\nfrom governor.cli.main import main\n"
            f"try:\n    main()\nexcept SystemExit:\n    pass\n{_REPORT}")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "Usage: governor run" in result.stdout
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_run_imports_nothing_heavy_up_to_exec(fake_daemon):
    # execvp is replaced by a report of what is loaded at the moment governor run would exec.
    code = ("import os, sys\n"
            f"def report(file, args):\n    {_REPORT}\n    sys.stdout.flush()\n    os._exit(0)\n"
            "os.execv = report\n"
            "sys.argv = ['governor', 'run', '--cpus', '1', '--memory=1G', '--', 'true']\n"
            "from governor.cli.entry import main\nmain()")
    result = subprocess.run([sys.executable, "-c", code.replace(repr(HEAVY), repr([*HEAVY, "click"]))], cwd=REPO,
                            capture_output=True, text=True, timeout=30, env={**os.environ, "GOVERNOR_SOCKET": fake_daemon.path})
    assert result.returncode == 0, result.stderr
    assert len(fake_daemon.seen) == 1  # it did talk to the daemon
    assert json.loads(result.stdout) == []  # not even click: its imports cost 3× Python's start


PLAIN_DEFAULTS = {"name": None, "time_limit": None, "summary": False, "exec_in_place": False}


@pytest.mark.parametrize("args, parsed", [
    (["--cpus", "1.5", "--memory=4G", "--no-wait", "--", "make", "-j4"],
     {"demand": {"cpu": 1.5, "memory": 4 * 1024**3}, "group": None, "no_wait": True, "socket_option": None,
      "cmd": ("make", "-j4"), **PLAIN_DEFAULTS}),
    (["--group", "ops", "--socket", "/s", "ls", "--", "-l"],
     {"demand": {}, "group": "ops", "no_wait": False, "socket_option": "/s", "cmd": ("ls", "--", "-l"),
      **PLAIN_DEFAULTS}),
    (["--io-read", "200M", "--io-write=1G", "dd"],
     {"demand": {"io_read": 200 * 1024**2, "io_write": 1024**3}, "group": None, "no_wait": False,
      "socket_option": None, "cmd": ("dd",), **PLAIN_DEFAULTS}),
    (["--name", "nightly build", "--time-limit=1h30m", "--summary", "make"],
     {"demand": {}, "group": None, "no_wait": False, "socket_option": None, "cmd": ("make",),
      "name": "nightly build", "time_limit": 5400.0, "summary": True, "exec_in_place": False}),
])
def test_a_plain_run_is_parsed_without_click(args, parsed):
    assert plain(args) == parsed


@pytest.mark.parametrize("args", [["--help", "--", "true"], ["-h", "true"], ["--cpu", "1", "--", "true"],
                                  ["--cpus", "nan", "true"], ["--cpus", "-0", "true"], ["--memory", "lots", "x"],
                                  ["--cpus", "1"], ["--group"], ["--no-wait=yes", "true"], [],
                                  ["--time-limit", "soon", "true"], ["--time-limit=0", "true"],
                                  ["--summary=yes", "true"], ["--name"]])
def test_anything_else_goes_to_click_which_reports_it(args):
    assert plain(args) is None


@pytest.mark.parametrize("cores", ["1e-320", "0.001", "1e308"])
def test_a_cpu_demand_the_kernel_cannot_enforce_is_refused_by_the_client(cores):
    result = CliRunner().invoke(main, ["run", "--cpus", cores, "--", "true"])
    assert result.exit_code == 2 and "from 0.01 (the kernel's smallest CPU quota) to 65,536" in result.output


@pytest.mark.parametrize("args, words", [
    (["--memory", "9" * 300], "'--memory': must be at most 4194304.0T, got '999999999999999999999999…'"),
    (["--memory", "99999999999999999999T"], "'--memory': must be at most 4194304.0T, got '99999999999999999999T'"),
    (["--time-limit", "9" * 300], "'--time-limit': must be at most 3650 days, got '999999999999999999999999…'"),
    (["--time-limit", "99999999999999d"], "'--time-limit': must be at most 3650 days"),
    (["--time-limit", "x" * 300], "expected a time span like 90s, 10m, 2h or 1h30m, got 'xxxxxxxxxxxxxxxxxxxxxxxx…'"),
    # Below the least memory a task may declare: 0.5 said "> 0" (from the daemon), 16 "at least 1.0M".
    (["--memory", "0.5"], "'--memory': must be at least 1.0M: no process starts in less, got '0.5'"),
    (["--memory", "16"], "'--memory': must be at least 1.0M: no process starts in less, got '16'"),
])
def test_an_amount_past_what_any_host_has_is_refused_in_a_line(args, words):
    # A 300-digit --memory went to the daemon and came back in full; a 300-digit --time-limit
    # was accepted as 1e300 seconds.
    result = CliRunner().invoke(main, ["run", *args, "--", "true"])
    assert result.exit_code == 2 and words in result.output and len(result.output) < 200


@pytest.mark.parametrize("weight", ["nan", "inf", "1e309", "0", "1001", "0.0001"])
def test_a_weight_no_config_could_give_is_refused_by_the_client(weight):
    # nan, inf and 1e309 passed click's FloatRange and ended in a traceback (not JSON compliant).
    result = CliRunner().invoke(main, ["set-weight", "physics", weight])
    assert result.exit_code == 2 and "must be a weight from 0.001 to 1000" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_status_json_prints_the_status_object(fake_daemon):
    result = CliRunner().invoke(main, ["status", "--json", "--socket", fake_daemon.path])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1
    assert json.loads(result.output) == STATUS


def test_status_human_output_at_80_columns(fake_daemon, monkeypatch):
    monkeypatch.setenv("GOVERNOR_SOCKET", fake_daemon.path)
    result = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["status"])
    assert result.exit_code == 0, result.output
    for text in ("physics", "ops", "50.0%", "25.0%", "cpu saturated", "7.25", "150.0M/s", "backup.sh"):
        assert text in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_status_reply_without_status_object_is_an_error(fake_daemon):
    fake_daemon.status = ["not", "an", "object"]
    result = CliRunner().invoke(main, ["status", "--socket", fake_daemon.path])
    assert result.exit_code == 1
    assert result.output == f"governor: error: {fake_daemon.path}: the daemon's status reply has no status object\n"


def test_socket_path_precedence(monkeypatch):
    monkeypatch.delenv("GOVERNOR_SOCKET", raising=False)
    assert socket_path(None) == DEFAULT_SOCKET == "/run/governor/governor.sock"
    monkeypatch.setenv("GOVERNOR_SOCKET", "/tmp/env.sock")
    assert socket_path(None) == "/tmp/env.sock"
    assert socket_path("/tmp/option.sock") == "/tmp/option.sock"


def test_call_returns_the_payload_and_raises_daemon_errors(fake_daemon):
    assert call(fake_daemon.path, LaunchRequest(pid=os.getpid(), group=None, demand={}, command=())).task == "t1"
    fake_daemon.refuse = RequestError("not_found", "no group 'x' in the config")
    with pytest.raises(DaemonError) as info:
        call(fake_daemon.path, StatusRequest())
    assert (info.value.code, info.value.message, info.value.op) == ("not_found", "no group 'x' in the config", "status")
    with pytest.raises(DaemonNotRunning):
        call(fake_daemon.path + ".absent", StatusRequest())


def one_shot(path: str, reply: bytes | None) -> threading.Thread:
    """A server that accepts one connection, reads a line, sends ``reply`` (None: nothing, hold
    the connection open for a second) and hangs up."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()

    def serve():
        with listener, listener.accept()[0] as conn:
            conn.recv(65536)
            if reply is None:
                threading.Event().wait(1)
            else:
                with contextlib.suppress(BrokenPipeError):  # a client that stopped reading
                    conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(("reply", "timeout", "message"), [
    (b"", 5, "closed the connection without replying"),
    (b'{"ok": true', 5, "closed the connection without replying"),
    (b"<html>\n", 5, "not JSON"),
    (b"[1, 2]\n", 5, "malformed reply"),
    (b'{"ok": true, "status": {"version": NaN}}\n', 5, "not JSON"),  # Python's json would read it
    (b'{"ok": true, "status": {"version": -Infinity}}\n', 5, "not JSON"),
    (b"[" * 5000 + b"]" * 5000 + b"\n", 5, "nested too deeply to read"),  # json's RecursionError
    (b'{"ok": false, "error": "nope"}\n', 5, "malformed error reply"),
    (None, 0.2, "no reply from the daemon within 0.2 s"),
])
def test_call_broken_replies_are_control_socket_errors(tmp_path, reply, timeout, message):
    path = str(tmp_path / "odd.sock")
    thread = one_shot(path, reply)
    with pytest.raises(ControlSocketError, match=message) as info:
        call(path, StatusRequest(), timeout=timeout)
    assert not isinstance(info.value, DaemonNotRunning)
    thread.join(5)


def test_a_reply_past_the_longest_read_is_cut_there(tmp_path, monkeypatch):
    import governor.cli.client as client

    monkeypatch.setattr(client, "MAX_REPLY_BYTES", 1 << 20)
    path = str(tmp_path / "endless.sock")
    thread = one_shot(path, b"x" * (3 << 20))  # no newline: a server that never ends its line
    with pytest.raises(ControlSocketError, match="reply is longer than 1 MiB; nothing more was read"):
        call(path, StatusRequest(), timeout=5)
    thread.join(5)


def test_a_stop_reply_of_other_than_ids_is_refused():
    from governor.wire.reply_types import StopReply

    assert StopReply.from_json({"stopped": ["7"]}).stopped == ("7",)
    with pytest.raises(ValueError, match="not of task ids"):  # was printed as {'a': 1}, None, 10**300
        StopReply.from_json({"stopped": [{"a": 1}, None, 10**300]})


def test_a_queued_line_shows_the_daemons_reason_as_text(fake_daemon):
    fake_daemon.queued = [{"position": 10**30, "reason": "\x1b]0;PWNED\x07waits"}]
    result, _ = governor("run", "--", "true", socket_path=fake_daemon.path)
    assert result.returncode == 0
    assert result.stderr.splitlines()[0] == "governor: queued (position ?): ?]0;PWNED?waits; Ctrl-C leaves the queue"


PLACE = {"position": 2, "waiting_for": 1 * G, "held_by": [{"group": "A", "memory": 3 * G}],
         "reason": "memory: waits for 1.0G to free (held by A 3.0G)"}


def test_run_waits_in_the_queue_saying_so_then_runs(fake_daemon):
    fake_daemon.queued = [PLACE, {**PLACE, "position": 1}]
    result, _ = governor("run", "--memory", "2G", "--", "sh", "-c", "echo ran", socket_path=fake_daemon.path)
    assert result.returncode == 0 and result.stdout == "ran\n"
    lines = result.stderr.splitlines()
    assert lines[:2] == [
        "governor: queued (position 2): memory: waits for 1.0G to free (held by A 3.0G); Ctrl-C leaves the queue",
        "governor: queued (position 1): memory: waits for 1.0G to free (held by A 3.0G); Ctrl-C leaves the queue",
    ]
    assert len(lines) == 3 and lines[2].startswith("governor: task t1 started after waiting ")


def test_run_says_a_place_in_the_queue_once(fake_daemon):
    # Issue 33, point 9: "governor: queued (position 1)" was printed twice.
    fake_daemon.queued = [PLACE, {**PLACE, "held_by": [{"group": "A", "memory": 3 * G}]}, {**PLACE, "position": 1}]
    result, _ = governor("run", "--", "sh", "-c", "echo ran", socket_path=fake_daemon.path)
    assert result.returncode == 0, result.stderr
    assert [line.split(":")[1] for line in result.stderr.splitlines()[:-1]] == [" queued (position 2)",
                                                                               " queued (position 1)"]


@pytest.mark.parametrize("exec_in_place", [False, True])
def test_run_inside_a_task_says_it_starts_none(fake_daemon, exec_in_place):
    # Issue 33, point 9: a nested governor run printed nothing though docs/user.md says it does.
    fake_daemon.nested = True
    result, _ = governor("run", *(["--exec"] if exec_in_place else []), "--", "sh", "-c", "echo ran",
                         socket_path=fake_daemon.path)
    assert result.returncode == 0 and result.stdout == "ran\n"
    assert result.stderr == "governor: already in task t1 (group root): sh runs there, with that task's caps\n"


def test_run_no_wait_refuses_with_its_own_exit_code(fake_daemon):
    fake_daemon.refuse = RequestError("would_wait", "its memory does not fit yet: it waits for 1.0G to free")
    result, _ = governor("run", "--no-wait", "--", "sh", "-c", "echo ran", socket_path=fake_daemon.path)
    assert result.returncode == 75 and result.stdout == ""
    assert result.stderr == ("governor: error: its memory does not fit yet: it waits for 1.0G to free"
                             " (--no-wait given: without it the task waits in the queue)\n")
    assert fake_daemon.seen[0][0].wait is False


def test_ctrl_c_leaves_the_queue_and_runs_nothing(fake_daemon):
    import signal

    fake_daemon.queued, fake_daemon.hold = [PLACE], True
    env = {**os.environ, "GOVERNOR_SOCKET": fake_daemon.path}
    with subprocess.Popen([*GOVERNOR, "run", "--", "sh", "-c", "echo ran"], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stderr.readline().startswith("governor: queued (position 2)")
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=30)
        finally:  # a failure above must not leave the test waiting for a client in the queue
            proc.kill()
    assert proc.returncode == 130 and stdout == ""
    assert stderr == "governor: left the queue; nothing was started\n"
    assert fake_daemon.left.wait(5)  # the daemon saw the connection end


def test_the_launch_reply_names_a_v1_task_s_memory_directory(tmp_path):
    # Issue 43, point 3: governor run reads a v1 task's memory where the daemon says its
    # memory cgroup is, not through /proc/<pid>/cgroup.
    from governor.cgroups.v1 import CgroupV1Driver
    from governor.wire.launch_types import LaunchReply, Started

    roots = {"cpu": tmp_path / "cpu,cpuacct" / "gov", "cpuacct": tmp_path / "cpu,cpuacct" / "gov",
             "cpuset": tmp_path / "cpuset" / "gov", "memory": tmp_path / "memory" / "gov"}
    driver = CgroupV1Driver(roots)
    assert driver.memory_directory("A/task-1") == tmp_path / "memory" / "gov" / "A" / "task-1"
    assert driver.directory("A/task-1") == tmp_path / "cpu,cpuacct" / "gov" / "A" / "task-1"
    started = Started("1", "A", "/cpu/gov/A/task-1", {}, memory_cgroup="/memory/gov/A/task-1")
    assert LaunchReply.from_json(started.to_json()) == started
    assert "memory_cgroup" not in Started("1", "A", "/gov/A/task-1", {}).to_json()  # v2: the one directory
