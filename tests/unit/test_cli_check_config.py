"""``governor check-config`` through click's CliRunner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from governor.cgroups.versions import VERSIONS
from governor.cli.main import main
from governor.config.load import default_config, parse_config
from governor.host import cgroup_moves

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "governor.toml"

GOOD = """
[capacity]
cpu = 1.5
reserve = { memory = "1G" }
[[capacity.io]]
device = "/dev/nvme0n1"
read = "2G"
write = "1G"
[defaults.task]
cpu = 1
memory = "1G"
io_read = "10M"
[enforcement]
cpu = "cores"
memory = "hard"
[groups.physics]
weight = 2
unix_groups = ["physics"]
users = ["alice"]
[groups."*"]
weight = 1
[daemon]
admin_group = "wheel"
"""


def run(*args: str):
    return CliRunner().invoke(main, ["check-config", *args])


def test_good_file_prints_a_summary(tmp_path):
    path = tmp_path / "governor.toml"
    path.write_text(GOOD)
    result = run("--portable", str(path))  # /dev/nvme0n1 need not be on this host
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        f"{path}: OK",
        "capacity:",
        "  cpu: 1.5 cores (fixed)",
        "  memory: host memory minus 1.0G reserved",
        "  pids: the kernel's limit (the lower of pid_max and threads-max) minus a tenth reserved, a cap on "
        "governor's root (pids.max), never divided",
        "  io nvme0n1 (/dev/nvme0n1): read 2.0G/s, write 1.0G/s",
        "default task: cpu 1, memory 1.0G, pids 4096, io read 10.0M/s, write 0/s on each device",
        "enforcement: cpu cores (cpu.max + exclusive cpuset.cpus), memory hard cap (memory.max)",
        "  all governed memory together: at most the memory capacity (memory.max on governor's root)",
        "memory protection: memory.min = a group's guarantee, memory.low = what it reserved up to its floor",
        "foreign tenants, never moved, what they hold taken off the capacity: /system.slice/*slurmstepd.scope, "
        "/system.slice/*/*slurmstepd.scope, /slurm, /slurm_*, /kubepods.slice, /nomad.slice, /machine.slice",
        "groups:",
        "  physics: weight 2; users alice; unix groups physics",
        '  "*": weight 1; every user in no explicit group, a group of their own',
        "sessions: every other process of a governed user, one session each: cpu 1, memory 2.0G, pids 4096; one "
        "daemon per host may govern sessions",
        "admin: root and members of wheel",
        "daemon: sample every 1s, reconcile every 5s, state in /run/governor/state",
        "bounds per user (root excepted): 256 tasks running and queued, 32 connections",
    ]


# The daemon trusts only a config root owns (and nobody else may write), and so does check-config.
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a config the daemon trusts is root's: run as root")


@needs_root
def test_default_style_file_summary():
    result = run(str(EXAMPLE))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"{EXAMPLE}: OK"
    assert "  cpu: host CPUs minus 0.5 reserved" in lines
    assert "  io: no block device governed" in lines
    assert any(line.startswith("  ops: weight 1, floor ") and line.endswith("; users bob, carol") for line in lines)
    assert "daemon.admin_group" not in result.stderr  # "wheel" warned on Debian (issue 33, point 9)


@needs_root
def test_no_everyone_table_and_no_admin_group_are_spelled_out(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('[groups.lab]\nunix_groups = ["lab"]\n[sessions]\nenabled = false\n')
    lines = run(str(path)).stdout.splitlines()
    assert any(line.startswith("  lab: weight 1, floor 100.0% (") and line.endswith("); unix groups lab")
               for line in lines)
    assert "sessions: off (only governor run is governed)" in lines
    assert "  users in no group above cannot launch tasks" in lines
    assert "admin: root only" in lines


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


def test_default_prints_the_embedded_default_which_parses():
    result = run("--default")
    assert result.exit_code == 0, result.output
    assert parse_config(result.stdout, "printed.toml") == default_config()


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
def test_names_this_host_does_not_know_are_warned_about(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('[groups.lab]\nusers = ["root", "no-such-user-x"]\nunix_groups = ["no-such-group-x"]\n'
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


@needs_root
def test_each_group_is_shown_with_its_members_today_and_its_floor(tmp_path, monkeypatch):
    import pwd
    from governor.host import access
    people = {"alice": (1001, ["lab"]), "bob": (1002, ["lab", "ops"]), "carol": (1003, []), "daemon": (1, ["lab"])}
    monkeypatch.setattr(pwd, "getpwall", lambda: [
        pwd.struct_passwd((name, "x", uid, uid, "", "/", "/bin/sh")) for name, (uid, _) in people.items()])
    monkeypatch.setattr(access, "identify", lambda uid, gid: next(
        access.Identity(uid, name, tuple(groups)) for name, (u, groups) in people.items() if u == uid))
    path = tmp_path / "g.toml"
    path.write_text('[groups.lab]\nweight = 2\nunix_groups = ["lab"]\n[groups.ops]\nweight = 3\nusers = ["bob"]\n'
                    '[groups."*"]\nweight = 1\n')
    lines = run(str(path)).stdout.splitlines()
    # weights: lab 2, ops 3, carol (a group of her own) 1: floors 2/6, 3/6, 1/6. The system user
    # "daemon" is in lab's Unix group but is no login user; bob is in both (ops names him).
    start = lines.index(next(line for line in lines if line.startswith("groups:")))
    shown = [line.split(" (")[0] if "floor" in line else line for line in lines[start + 1:start + 7]]
    assert shown == [
        "  lab: weight 2, floor 33.3%",
        "    members today: alice, bob",
        "  ops: weight 3, floor 50.0%",
        "    members today: bob",
        '  "*": weight 1; every user in no explicit group, a group of their own',
        "    today: carol; each such group: floor 16.7%",
    ]


def test_a_group_tree_is_shown_level_by_level_with_its_quotas(tmp_path):
    path = tmp_path / "tree.toml"
    path.write_text('[groups.science]\nguarantee = { cpu = 1 }\nlimit = { memory = "8G" }\n'
                    '[groups.lab]\nparent = "science"\nusers = ["alice"]\nuser_limit = { cpu = 2 }\n'
                    '[groups.ops]\nusers = ["bob"]\nweight = 3\n[fairshare]\nhalf_life = "12h"\n')
    result = run("--portable", str(path))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "  science: weight 1, floor 25.0%; guarantee cpu 1 core; limit memory 8.0G" in lines
    assert "    lab (in science): weight 1, floor 25.0%; users alice; each user at most cpu 2 cores" in lines
    assert "fair share over time: past use lowers a group's weight, halving every 12h" in lines


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


def test_a_floor_is_clipped_to_the_groups_limit(tmp_path):
    # Issue 32, break 6: "floor 66.7% (1.17 cores, 15.5G); limit cpu 1.5 cores, memory 2.0G".
    path = tmp_path / "limited.toml"
    path.write_text('[capacity]\ncpu = 3\nmemory = "24G"\n[groups.A]\nweight = 2\nusers = ["alice"]\n'
                    'limit = { cpu = 1.5, memory = "2G" }\n[groups.B]\nusers = ["bob"]\n')
    lines = run("--portable", str(path)).output.splitlines()
    assert "  A: weight 2, floor 8.3%; users alice; limit cpu 1.5 cores, memory 2.0G" in lines  # 2G of 24G
    assert "  B: weight 1, floor 33.3%; users bob" in lines


def test_the_floor_on_this_host_is_within_the_limit_it_is_shown_beside():
    # Issue 32, break 6, as measured: "floor 66.7% (1.17 cores, 15.5G); limit cpu 1.5 cores, memory 2.0G".
    from governor.cli.check_config import summary

    config = parse_config('[groups.A]\nweight = 2\nusers = ["alice"]\nlimit = { cpu = 1.5, memory = "2G" }\n'
                          '[groups.B]\nusers = ["bob"]\n', "t.toml")
    lines = summary(config, ({"cpu": 1.75, "memory": 23.25 * 1024**3}, {"A": ["alice"], "B": ["bob"]}, VERSIONS["v2"]))
    assert "  A: weight 2, floor 8.6% (0.15 cores, 2.0G); users alice; limit cpu 1.5 cores, memory 2.0G" in lines


def as_admin(monkeypatch, memory: int = 64 << 30):
    """Run check-config as uid 1000 (an admin without sudo) on a host of ``memory`` bytes."""
    import collections

    import psutil

    from governor.cli import check_config

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
    path.write_text(f'[groups."*"]\n[capacity]\nreserve = {{ memory = "1G" }}\n[defaults.task]\nmemory = "1G"\n'
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


def test_on_cgroup_v1_the_summary_names_v1_files():
    from governor.cli.check_config import summary

    config = parse_config('[groups."*"]\n[enforcement]\ncpu = "quota"\nmemory = "hard"\n', "g.toml")
    host = ({"cpu": 4.0, "memory": 8.0 * 2**30}, {}, VERSIONS["v1"])
    text = "\n".join(summary(config, host))
    assert "cpu.cfs_quota_us" in text and "memory.limit_in_bytes" in text
    assert not any(name in text for name in ("cpu.max", "memory.high", "memory.max")), text
    assert "cpu.max" in "\n".join(summary(config, ({**host[0]}, {}, VERSIONS["v2"])))
    soft = parse_config('[groups."*"]\n[enforcement]\nmemory = "soft"\n', "g.toml")
    assert "memory soft cap (memory.soft_limit_in_bytes)" in "\n".join(summary(soft, host))
    assert "memory protection: none on cgroup v1" in text
    assert "memory protection: memory.min = a group's guarantee" in "\n".join(summary(config, ({**host[0]}, {}, VERSIONS["v2"])))


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


def test_notify_is_shown_where_a_command_is_given_and_a_bad_one_names_its_key(tmp_path):
    path = tmp_path / "notify.toml"
    groups = '[groups.A]\nusers = ["alice"]\n'
    path.write_text(groups + '[notify]\ncommand = ["/usr/local/bin/mail", "ops team"]\nuser = "notify"\n'
                             'events = ["oom_kill"]\n')
    result = run("--portable", str(path))
    assert result.exit_code == 0, result.output
    assert "notify: /usr/local/bin/mail 'ops team' as notify on oom_kill; 4 at once, each within 10s" in \
        result.output.splitlines()
    path.write_text(groups + '[notify]\ncommand = "mail"\n')
    result = run("--portable", str(path))
    assert result.exit_code != 0 and "notify.command: must start with the program's absolute path" in result.output
    assert "Traceback" not in result.output


def test_a_notify_command_or_user_this_host_lacks_is_warned_of(tmp_path):
    from governor.cli.check_config_notify import notify_warnings

    groups = '[groups.A]\nusers = ["alice"]\n'
    absent = parse_config(groups + f'[notify]\ncommand = "{tmp_path}/absent"\nuser = "no-such-user-here"\n', "n.toml")
    assert notify_warnings(absent) == [
        f"notify.command: {tmp_path}/absent is no executable file here: every notification would fail",
        "notify.user: 'no-such-user-here' is no user of this host: no notification would run"]
    assert notify_warnings(parse_config(groups + '[notify]\ncommand = "/bin/true"\nuser = "root"\n', "n.toml")) == []
    assert notify_warnings(parse_config(groups, "n.toml")) == []


def test_the_summary_says_which_foreign_subtrees_are_looked_for():
    from governor.cli.check_config import summary

    groups = '[groups.A]\nusers = ["alice"]\n'
    listed = parse_config(groups + '[foreign]\ndetect = false\npaths = ["/batch.slice"]\n', "f.toml")
    off = parse_config(groups + "[foreign]\ndetect = false\n", "off.toml")
    assert "foreign tenants, never moved, what they hold taken off the capacity: /batch.slice" in summary(listed)
    assert "foreign tenants: none looked for (foreign.detect = false, no foreign.paths)" in summary(off)


@needs_root
def test_a_v2_host_whose_moves_wait_for_a_grace_period_is_told_of_favordynmods(tmp_path, monkeypatch):
    path = tmp_path / "g.toml"
    path.write_text(f'[groups."*"]\n[daemon]\nstate_dir = "{tmp_path / "s"}"\n')
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
