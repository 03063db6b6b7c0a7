"""``governor check-config`` through click's CliRunner: what it refuses (exit 2, one line that
names the file and the key) and what it warns of, checked against this host as the daemon's
start would check (its users and groups, a file or state directory the daemon would not trust,
the unit that GPUs need, guarantees that cannot all be held). The summary of a good file is in
test_cli_check_config_summary.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from governor.cgroups.versions import VERSIONS
from governor.config.load import parse_config
from governor.host import cgroup_moves
from support.check_config import needs_root, run


@needs_root
@pytest.mark.parametrize(("text", "key"), [
    ("[groups.x]\nweight = 0\nusers = [\"a\"]\n", "groups.x.weight"),
    ('[groups."*"]\n[enforcement]\ncpu = "shares"\n', "enforcement.cpu"),
    ('[groups."*"]\n[[capacity.io]]\ndevice = "sda"\nread = 1\nwrite = 1\n', "capacity.io[0].device"),
])
@needs_root
def test_bad_file_exits_2_on_one_line_naming_file_and_key(tmp_path, text, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = run(str(path))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"governor: error: {path}: {key}: ")


@needs_root
def test_bad_toml_exits_2_with_line_and_column(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[groups."*"]\nweight = \n')
    result = run(str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"governor: error: {path}: not valid TOML: ")
    assert "line 2, column" in result.stderr


@pytest.mark.parametrize("name", ["missing.toml", "."])
def test_unreadable_file_exits_2(tmp_path, name):
    path = tmp_path / name
    result = run(str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"governor: error: {path}: cannot read: ")
    assert len(result.stderr.splitlines()) == 1


def test_a_file_an_admin_may_not_read_is_said_so_with_sudo(tmp_path, monkeypatch):
    # A stranger's check: click's own check came first, "Invalid value for '[FILE]': Path … is
    # not readable", where --help promises that check-config says to use sudo.
    path = tmp_path / "root-only.toml"
    path.write_text('[groups."*"]\n')
    as_admin(monkeypatch)
    real_open = os.open

    def denied(name, *args, **kwargs):
        if os.fspath(name) == str(path):
            raise PermissionError(13, "Permission denied")
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "access", lambda name, mode, **kwargs: os.fspath(name) != str(path))
    monkeypatch.setattr(os, "open", denied)
    result = run(str(path))
    assert result.exit_code == 2
    assert result.stderr == (f"governor: error: {path}: cannot read: Permission denied; the daemon reads it as root: "
                             f"sudo governor check-config {path}\n"), result.stderr


@pytest.mark.parametrize("args", [[], ["--default", "x.toml"]])
def test_file_or_default_is_required_but_not_both(args):
    result = run(*args)
    assert result.exit_code == 2
    assert "give FILE to check, or --default" in result.stderr


@needs_root
def test_the_daemons_start_checks_run_against_this_host(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('[groups."*"]\n[capacity]\nreserve = { cpu = 1000 }\n')
    result = run(str(path))
    assert result.exit_code == 2 and "capacity.reserve.cpu: reserving 1000 cores leaves nothing" in result.stderr
    path.write_text('[groups."*"]\n[[capacity.io]]\ndevice = "/dev/no-such-disk"\nread = "1G"\nwrite = "1G"\n')
    result = run(str(path))
    assert result.exit_code == 2 and "capacity.io[0].device: /dev/no-such-disk" in result.stderr
    assert result.stderr.rstrip().endswith("(on this host)")
    assert run("--portable", str(path)).exit_code == 0


@needs_root
def test_names_this_host_does_not_know_are_warned_about(tmp_path, monkeypatch):
    with_cpus(monkeypatch)
    path = tmp_path / "g.toml"
    path.write_text('[groups.lab]\nusers = ["root", "no-such-user-x"]\nunix_groups = ["no-such-group-x"]\n'
                    'user_limit = { memory = "1G" }\n'
                    '[daemon]\nadmin_group = "no-such-admins-x"\n[sessions]\nexempt = ["nobody-x"]\n'
                    'memory = "64M"\n')  # (a session demand that fits any host: only the names warn)
    result = run(str(path))
    assert result.exit_code == 0, result.output
    # (A note about the host, e.g. a v2 mount without favordynmods, is not the file's.)
    warnings = [line for line in result.stderr.splitlines() if not line.startswith("governor: note:")]
    assert warnings == [
        f"governor: warning: {path}: groups.lab.users: no user 'no-such-user-x' on this host",
        f"governor: warning: {path}: groups.lab.unix_groups: no Unix group 'no-such-group-x' on this host",
        f"governor: warning: {path}: daemon.admin_group: no Unix group 'no-such-admins-x' on this host: "
        "only root may run admin operations",
        f"governor: warning: {path}: sessions.exempt: no user 'nobody-x' on this host",
    ]
    assert run("--portable", str(path)).stderr == ""


@needs_root
@pytest.mark.parametrize("spoil", ["writable", "other owner"])
def test_a_file_the_daemon_would_not_trust_is_refused(tmp_path, spoil):
    path = tmp_path / "g.toml"
    path.write_text('[groups."*"]\n')
    if spoil == "writable":
        path.chmod(0o666)
    else:
        os.chown(path, 65534, 65534)
    result = run(str(path))
    assert result.exit_code == 2 and "not trusted: " in result.stderr, result.output
    assert run("--portable", str(path)).exit_code == 0  # a file for another host is only read


@needs_root
def test_a_state_directory_the_daemon_would_not_trust_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)
    path = tmp_path / "g.toml"
    path.write_text(f'[groups."*"]\n[daemon]\nstate_dir = "{state}"\n')
    result = run(str(path))
    assert result.exit_code == 2 and f"{path}: daemon.state_dir: state directory {state} is writable by others" \
        in result.stderr, result.output
    state.chmod(0o700)
    assert run(str(path)).exit_code == 0


SHIPPED_UNIT = Path(__file__).resolve().parents[2] / "configs" / "governor.service"


def test_the_daemons_unit_is_checked_for_what_gpus_on_cgroup_v2_need(tmp_path):
    # Issue 31, point 8: a unit without CAP_BPF restarted forever once capacity.gpus was set,
    # though check-config said OK.
    from governor.cli.check_config_gpus import unit_warnings

    groups = '[groups.A]\nusers = ["root"]\n'
    gpus = parse_config('[capacity]\ngpus = ["/dev/nvidia0"]\n' + groups, "gpus.toml")
    unit = tmp_path / "governor.service"
    unit.write_text(SHIPPED_UNIT.read_text())
    assert unit_warnings(gpus, VERSIONS["v2"], unit, "6.1.0-18-amd64") == []
    assert unit_warnings(gpus, VERSIONS["v2"], tmp_path / "none.service", "6.1.0") == []  # not installed: run by hand
    old = (SHIPPED_UNIT.read_text().replace(" CAP_BPF CAP_SYS_ADMIN\n", "\n")
           .replace("=@system-service bpf\n", "=@system-service\n"))
    unit.write_text(old)
    [capability, admin, syscall] = unit_warnings(gpus, VERSIONS["v2"], unit, "6.1.0")
    assert capability.startswith(f"capacity.gpus on cgroup v2: the daemon keeps tasks from other tasks' GPUs with a "
                                 f"BPF device program, and {unit} lacks CAP_BPF in CapabilityBoundingSet=")
    assert capability.endswith("systemctl edit governor, [Service] CapabilityBoundingSet=CAP_BPF")
    assert "lacks CAP_SYS_ADMIN in CapabilityBoundingSet= (a device program attached earlier could not be " in admin
    assert "lacks the bpf system call in SystemCallFilter=" in syscall and syscall.endswith("SystemCallFilter=bpf")
    [v1] = unit_warnings(gpus, VERSIONS["v1"], unit, "6.1.0")  # v1 guards devices with devices.deny: CAP_SYS_ADMIN only
    assert v1.startswith(f"capacity.gpus on cgroup v1: the daemon keeps tasks from other tasks' GPUs with "
                         f"devices.deny, and {unit} lacks CAP_SYS_ADMIN in CapabilityBoundingSet= (the kernel refuses")
    unit.write_text(SHIPPED_UNIT.read_text())
    assert unit_warnings(gpus, VERSIONS["v1"], unit, "6.1.0") == []
    unit.write_text(old)
    assert unit_warnings(parse_config(groups, "plain.toml"), VERSIONS["v2"], unit, "6.1.0") == []
    (tmp_path / "governor.service.d").mkdir()
    (tmp_path / "governor.service.d" / "override.conf").write_text(
        "[Service]\nCapabilityBoundingSet=CAP_BPF CAP_SYS_ADMIN\nSystemCallFilter=bpf\n")
    assert unit_warnings(gpus, VERSIONS["v2"], unit, "6.1.0") == []
    (tmp_path / "governor.service.d" / "override.conf").write_text(
        "[Service]\nCapabilityBoundingSet=CAP_BPF\nSystemCallFilter=bpf\n")
    [older] = unit_warnings(gpus, VERSIONS["v2"], unit, "5.4.0-150-generic")  # CAP_BPF came with Linux 5.8
    assert "lacks CAP_SYS_ADMIN in CapabilityBoundingSet=" in older


def test_a_unit_with_cap_bpf_but_not_cap_sys_admin_is_warned_of(tmp_path):
    # Review of main, finding 1: the unit had CAP_BPF only, so the first device program loaded
    # but none could be replaced or taken off later (BPF_PROG_GET_FD_BY_ID needs CAP_SYS_ADMIN).
    from governor.cli.check_config_gpus import unit_warnings

    gpus = parse_config('[capacity]\ngpus = ["/dev/nvidia0"]\n[groups.A]\nusers = ["root"]\n', "gpus.toml")
    unit = tmp_path / "governor.service"
    unit.write_text(SHIPPED_UNIT.read_text().replace(" CAP_BPF CAP_SYS_ADMIN\n", " CAP_BPF\n"))
    [warning] = unit_warnings(gpus, VERSIONS["v2"], unit, "6.1.0")
    assert f"{unit} lacks CAP_SYS_ADMIN in CapabilityBoundingSet= (a device program attached earlier" in warning
    assert warning.endswith("CapabilityBoundingSet=CAP_SYS_ADMIN")
    (tmp_path / "governor.service.d").mkdir()
    (tmp_path / "governor.service.d" / "no-admin.conf").write_text("[Service]\nCapabilityBoundingSet=~CAP_SYS_ADMIN\n")
    unit.write_text(SHIPPED_UNIT.read_text())
    [refused] = unit_warnings(gpus, VERSIONS["v2"], unit, "6.1.0")
    assert "lacks CAP_SYS_ADMIN" in refused


NESTED_GUARANTEES = """
[capacity]
memory = "1G"
[groups.dept]
[groups.lab-a]
parent = "dept"
users = ["root"]
guarantee = { memory = "600M" }
[groups.lab-b]
parent = "dept"
users = ["root"]
guarantee = { memory = "600M" }
"""


def test_guarantees_that_cannot_all_be_held_as_headroom_are_refused(tmp_path):
    # Issue 32, point 2: two children of a group with no guarantee ask 1.2G of a 1G capacity;
    # the daemon's own check counts only top-level guarantees and let them through.
    from governor.errors import ConfigError
    from governor.core.headroom import check_guarantees_held

    config = parse_config(NESTED_GUARANTEES, "g.toml")
    with pytest.raises(ConfigError, match=r"groups\.lab-a\.guarantee\.memory: .*lab-a, lab-b\) add up to 1\.2G"):
        check_guarantees_held(config, {"memory": 1024.0**3})
    check_guarantees_held(config, {"memory": 2 * 1024.0**3})  # room for both: nothing to say
    path = tmp_path / "g.toml"
    path.write_text(NESTED_GUARANTEES)
    result = run(str(path))
    assert result.exit_code == 2 and "they cannot all be held" in result.stderr
    portable = run("--portable", str(path))  # capacity.memory is fixed: the same verdict anywhere
    assert portable.exit_code == 2 and "they cannot all be held" in portable.stderr


def test_the_daemon_refuses_guarantees_that_cannot_all_be_held_as_check_config_does(tmp_path):
    from support.daemons import make_daemon

    from governor.errors import RequestError

    daemon = make_daemon(tmp_path, NESTED_GUARANTEES.replace('memory = "1G"', 'memory = "2G"'))
    daemon.reloads.load_config = lambda: parse_config(NESTED_GUARANTEES, "g.toml")
    with pytest.raises(RequestError) as refused:
        daemon.reloads.reload("test")
    assert refused.value.code == "invalid_config" and "they cannot all be held" in refused.value.message
    assert daemon.policy.capacity["memory"] == 2 * 1024**3  # the old config stays in force


def with_cpus(monkeypatch, cpus: int = 8) -> None:
    """Check against a host of ``cpus`` CPUs, not the runner's affinity (a stranger's check: run
    under ``taskset -c 1``, a default task's 1 core was past the 0.75 left to divide)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))


def as_admin(monkeypatch, memory: int = 64 << 30):
    """Run check-config as uid 1000 (an admin without sudo) on a host of ``memory`` bytes (and
    8 CPUs)."""
    import collections

    import psutil

    from governor.cli import check_config

    with_cpus(monkeypatch)
    monkeypatch.setattr(check_config.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    memory_info = collections.namedtuple("memory_info", "total")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory_info(memory))
    # Nor this host's mounts: a v2 host without favordynmods would add its note to stderr.
    monkeypatch.setattr(cgroup_moves, "MOUNTS", Path("/nonexistent/mounts"))


@needs_root
def test_an_admin_without_sudo_is_checked_against_the_daemons_user(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)  # root's, as the running daemon made it
    path = tmp_path / "g.toml"
    path.write_text(f'[groups."*"]\n[daemon]\nstate_dir = "{state}"\n')
    as_admin(monkeypatch)
    result = run(str(path))
    assert result.exit_code == 0, result.output  # was: "owned by uid 0, not 1000", rc 2
    assert result.stdout.startswith(f"{path}: OK")


def test_a_file_an_admin_cannot_read_says_to_use_sudo(tmp_path, monkeypatch):
    from governor.cli import inputs
    from governor.errors import ConfigError

    def denied(path, owner=None):
        raise ConfigError(path, None, "cannot read: Permission denied")

    monkeypatch.setattr(inputs, "read_input", denied)
    as_admin(monkeypatch)
    result = run("/etc/governor/governor.toml")
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("the daemon reads it as root: sudo governor check-config "
                                          "/etc/governor/governor.toml"), result.stderr


@needs_root
def test_a_default_task_or_session_the_host_cannot_hold_is_warned_about(tmp_path, monkeypatch):
    path = tmp_path / "g.toml"
    path.write_text(f'[groups."*"]\nuser_limit = {{ memory = "1000M" }}\n[capacity]\nreserve = {{ memory = "1G" }}\n'
                    f'[defaults.task]\nmemory = "1G"\n'
                    f'[sessions]\nenabled = true\nmemory = "512M"\n[daemon]\nstate_dir = "{tmp_path / "s"}"\n')
    as_admin(monkeypatch, memory=2 << 30)  # 1G left to divide
    assert run(str(path)).stderr == ""  # 1G fits in 1G
    path.write_text(path.read_text().replace('"1G"\n[sessions]', '"1.5G"\n[sessions]').replace('"512M"', '"2G"'))
    result = run(str(path))
    assert result.exit_code == 0, result.output
    warnings = result.stderr.splitlines()
    assert warnings == [
        f"governor: warning: {path}: defaults.task: demand memory = 1.5G exceeds the capacity of 1.0G on this "
        "host: every governor run that does not ask for less is refused",
        f"governor: warning: {path}: sessions: demand memory = 2.0G exceeds the capacity of 1.0G on this host: "
        "no login session can be governed"], result.stderr


def test_on_cgroup_v1_check_config_names_the_memory_guarantees_the_kernel_cannot_protect():
    config = parse_config('[groups.A]\nusers = ["root"]\nguarantee = { memory = "2G" }\n'
                          '[groups.B]\nusers = ["root"]\nguarantee = { cpu = 1 }\n', "g.toml")
    warning = config.unprotected_memory_warning("v1")
    assert "the memory guarantees of A 2.0G are kept at admission only" in warning and "B" not in warning
    assert config.unprotected_memory_warning("v2") is None  # memory.min holds them there
    off = parse_config('[enforcement]\nmemory_protection = false\n[groups.A]\nusers = ["root"]\n'
                       'guarantee = { memory = "2G" }\n', "g.toml")
    assert off.unprotected_memory_warning("v1") is None  # nothing asked for


@pytest.mark.parametrize(("mode", "words"), [(0o664, "writable by its group (mode 0664)"),
                                             (0o646, "writable by others (mode 0646)"),
                                             (0o666, "writable by others and its group (mode 0666)")])
def test_a_writable_config_says_who_may_write_it(tmp_path, mode, words):
    # Issue 33, point 9: mode 0664 was called "writable by others" (chmod's o: neither owner nor group).
    from governor.cli.inputs import read_input
    from governor.errors import ConfigError

    path = tmp_path / "g.toml"
    path.write_text('[groups."*"]\n')
    path.chmod(mode)
    with pytest.raises(ConfigError) as refused:
        read_input(str(path), owner=os.geteuid())
    assert refused.value.reason == f"not trusted: {words}"
    path.chmod(0o644)
    assert read_input(str(path), owner=os.geteuid()) == b'[groups."*"]\n'


def test_a_notify_command_or_user_this_host_lacks_is_warned_of(tmp_path):
    from governor.cli.check_config_notify import notify_warnings

    groups = '[groups.A]\nusers = ["alice"]\n'
    absent = parse_config(groups + f'[notify]\ncommand = "{tmp_path}/absent"\nuser = "no-such-user-here"\n', "n.toml")
    assert notify_warnings(absent) == [
        f"notify.command: {tmp_path}/absent is no executable file here: every notification would fail",
        "notify.user: 'no-such-user-here' is no user of this host: no notification would run"]
    assert notify_warnings(parse_config(groups + '[notify]\ncommand = "/bin/true"\nuser = "root"\n', "n.toml")) == []
    assert notify_warnings(parse_config(groups, "n.toml")) == []


@needs_root
def test_a_v2_host_whose_moves_wait_for_a_grace_period_is_told_of_favordynmods(tmp_path, monkeypatch):
    path = tmp_path / "g.toml"
    path.write_text(f'[groups."*"]\nuser_limit = {{ memory = "1G" }}\n[daemon]\nstate_dir = "{tmp_path / "s"}"\n')
    as_admin(monkeypatch)
    mounts = tmp_path / "mounts"
    mounts.write_text("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n")
    monkeypatch.setattr(cgroup_moves, "MOUNTS", mounts)
    result = run(str(path))
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("governor: note: cgroup2 at /sys/fs/cgroup is mounted without favordynmods: ")
    assert "cgroup_favordynmods=1" in result.stderr
    mounts.write_text("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,favordynmods 0 0\n")
    assert run(str(path)).stderr == ""
