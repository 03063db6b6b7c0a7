"""``governor run``'s command line: the fast path's parser (cli/launch.py's ``plain``) and what it
leaves to click, help and usage errors, options after the command, values no host could hold
refused by the client, and nothing heavy imported up to the exec."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from governor.cli.launch import plain
from governor.cli.main import main
from support.client import REPO, governor


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


@pytest.mark.parametrize("weight", ["1_0", "٣"])
def test_a_weight_in_other_scripts_digits_or_digit_groups_is_refused(weight):
    # 1_0 and ٣ were weights 10 and 3 (second-week check), as --cpus took them before.
    result = CliRunner().invoke(main, ["set-weight", "physics", weight])
    assert result.exit_code == 2 and "is not a valid float" in result.output, result.output


@pytest.mark.parametrize("weight", ["nan", "inf", "1e309", "0", "1001", "0.0001", "1000.0001"])
def test_a_weight_no_config_could_give_is_refused_by_the_client(weight):
    # nan, inf and 1e309 passed click's FloatRange and ended in a traceback (not JSON compliant).
    result = CliRunner().invoke(main, ["set-weight", "physics", weight])
    assert result.exit_code == 2 and "must be a weight from 0.001 to 1000" in result.output
    assert f"got '{weight}'" in result.output  # as typed: 1000.0001 was said to be 1000
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("args", [["--cpus", "١"], ["--cpus", "1_0"], ["--memory", "١G"], ["--pids", "١٠"],
                                  ["--gpus", "١"], ["--time-limit", "١٠s"], ["--pids", "1_000"]])
def test_digits_of_other_scripts_and_digit_groups_are_no_amount(args, tmp_path):
    # Python's float() and int() read them: --memory ١G was 1G, --cpus 1_0 10 cores, where
    # --memory 1_0G was refused (attacker check).
    result = CliRunner().invoke(main, ["run", "--no-wait", "--socket", str(tmp_path / "absent.sock"), *args, "--",
                                       "true"])
    assert result.exit_code == 2 and result.output.startswith("governor: error: "), result.output
    assert "daemon" not in result.output
