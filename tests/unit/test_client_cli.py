"""``governor run`` against a fake daemon behind a real control socket: the command's own pid
launched and its exit code kept, the daemon's refusals and the queue's places said in a line, a
command that cannot run refused before the daemon is asked.

The server runs in a background thread with its own event loop. ``governor run`` runs in a
subprocess, because it execs: the fake handler must see that subprocess's pid, and its exit
code must be the command's.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys

import pytest

from governor.errors import RequestError
from governor.wire.protocol import LaunchRequest
from support.client import GOVERNOR, REPO, governor

G = 1024**3
M = 1024**2


def test_run_launches_the_commands_own_pid_and_keeps_its_exit_code(fake_daemon):
    result, parent = governor("run", "--cpus", "1", "--", "sh", "-c", "echo $$; exit 3", socket_path=fake_daemon.path)
    assert result.returncode == 3, result.stderr
    [(request, peer)] = fake_daemon.seen
    assert result.stdout == f"{request.pid}\n" and request.pid == peer.pid != parent  # the command's, a child's
    assert result.stderr == ""  # it exited by itself: nothing to say


@pytest.mark.parametrize("flag", [[], ["--exec"], ["--summary"]])
def test_the_command_gets_the_default_signal_dispositions_not_pythons(fake_daemon, flag):
    # Python ignores SIGPIPE and SIGXFSZ; ignored, they stayed so across exec: `yes | head`
    # printed "Broken pipe" in a task (stranger check). SIGPIPE is 13, SIGXFSZ 25.
    result, _ = governor("run", *flag, "--", "sh", "-c", "yes | head -c 1; grep SigIgn /proc/self/status",
                         socket_path=fake_daemon.path)
    assert result.returncode == 0 and "Broken pipe" not in result.stderr, result.stderr
    ignored = int(result.stdout.split("SigIgn:")[1].split()[0], 16)
    assert not ignored & (1 << (13 - 1) | 1 << (25 - 1)), hex(ignored)


@pytest.mark.parametrize("flag", [[], ["--exec"]])
def test_a_long_command_runs_whole_and_the_daemon_is_sent_a_cut_copy_to_show(fake_daemon, flag):
    # The daemon refused more than 64 words or a word of over 4,096 characters (`gcc *.c`, a
    # long `sh -c` script): the command is for display only (stranger check).
    script = ": " + "a" * 5000 + "; echo $#"
    result, _ = governor("run", *flag, "--", "sh", "-c", script, "sh", *map(str, range(100)),
                         socket_path=fake_daemon.path)
    assert (result.returncode, result.stdout) == (0, "100\n"), result.stderr
    [(request, _)] = fake_daemon.seen
    assert len(request.command) == 64 and request.command[-1] == "… 41 more"
    assert request.command[2] == script[:4095] + "…" and request.command[:2] == ("sh", "-c")
    # Words that fill the request line (64 KiB) run whole too; what is shown stops at 8,192 characters.
    result, _ = governor("run", *flag, "--", "sh", "-c", "echo $#", "sh", *["é" * 4000] * 20,
                         socket_path=fake_daemon.path)
    assert (result.returncode, result.stdout) == (0, "20\n"), result.stderr
    shown = fake_daemon.seen[-1][0].command
    assert sum(map(len, shown)) <= 8192 + len(shown[-1]) and shown[-1] == "… 17 more", shown[3:]


@pytest.mark.parametrize("stderr", ["closed", "/dev/full"])
@pytest.mark.parametrize(("flag", "command", "code"), [
    ([], ("sh", "-c", "exit 3"), 3), (["--summary"], ("sh", "-c", "exit 3"), 3), (["--exec"], ("sh", "-c", "exit 3"), 3),
    ([], ("nosuchcmd-governor-test",), 127), (["--summary"], ("nosuchcmd-governor-test",), 127)])
def test_a_closed_or_full_stderr_keeps_the_exit_status(fake_daemon, stderr, flag, command, code):
    # What could not be said made it 1: Python's stderr is None for a closed fd 2, and a write
    # to /dev/full fails (stranger check).
    if stderr == "/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    full = open("/dev/full", "w") if stderr == "/dev/full" else None
    result = subprocess.run([*GOVERNOR, "run", *flag, "--", *command], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=full, timeout=30, env={**os.environ, "GOVERNOR_SOCKET": fake_daemon.path},
                            preexec_fn=(lambda: os.close(2)) if full is None else None)
    assert result.returncode == code


def test_an_empty_command_name_is_named_as_one(fake_daemon):
    result, _ = governor("run", "--", "", socket_path=fake_daemon.path)  # it said ": command not found"
    assert (result.returncode, result.stderr) == (127, "governor: error: '': command not found\n")
    assert fake_daemon.seen == []


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
                             f"(start the daemon that serves it: sudo governor daemon --socket {shlex.quote(path)} …)\n")
    assert result.stdout == ""


def test_run_with_a_dead_socket_says_connection_refused(tmp_path):
    path = str(tmp_path / "dead.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(path)  # bound, never listening
        result, _ = governor("run", "--no-wait", "--", "true", socket_path=path)
    assert result.returncode == 69
    assert result.stderr == (f"governor: error: governor daemon is not running (connection refused at {path}) "
                             f"(start the daemon that serves it: sudo governor daemon --socket {shlex.quote(path)} …)\n")


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


@pytest.mark.parametrize("sent, code, said", [
    ("SIGINT", 130, "governor: left the queue; nothing was started\n"),
    # SIGTERM ended the wait with 143 and not a word (new-user check).
    ("SIGTERM", 143, "governor: left the queue (SIGTERM); nothing was started\n"),
])
def test_ctrl_c_leaves_the_queue_and_runs_nothing(fake_daemon, sent, code, said):
    import signal

    fake_daemon.queued, fake_daemon.hold = [PLACE], True
    env = {**os.environ, "GOVERNOR_SOCKET": fake_daemon.path}
    with subprocess.Popen([*GOVERNOR, "run", "--", "sh", "-c", "echo ran"], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stderr.readline().startswith("governor: queued (position 2)")
            proc.send_signal(getattr(signal, sent))
            stdout, stderr = proc.communicate(timeout=30)
        finally:  # a failure above must not leave the test waiting for a client in the queue
            proc.kill()
    assert proc.returncode == code and stdout == ""
    assert stderr == said
    assert fake_daemon.left.wait(5)  # the daemon saw the connection end
