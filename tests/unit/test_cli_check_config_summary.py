"""``governor check-config`` through click's CliRunner: the summary of a good file (capacity,
enforcement, each group with its members, floor and quotas, sessions, notify, foreign tenants;
cgroup v1's files on a v1 host) and the embedded default that ``--default`` prints."""

from __future__ import annotations

from pathlib import Path

from governor.cgroups.versions import VERSIONS
from governor.config.load import default_config, parse_config
from support.check_config import needs_root, run

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


@needs_root
def test_default_style_file_summary():
    result = run(str(EXAMPLE))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"{EXAMPLE}: OK"
    assert "  cpu: host CPUs minus 0.5 reserved" in lines
    assert "  io: no block device governed" in lines
    assert any(line.startswith("  ops: weight 1, floor ") and line.endswith("; users bob, carol; each user at most memory 8.0G")
               for line in lines)
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


def test_default_prints_the_embedded_default_which_parses():
    result = run("--default")
    assert result.exit_code == 0, result.output
    assert parse_config(result.stdout, "printed.toml") == default_config()


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


def test_the_summary_says_which_foreign_subtrees_are_looked_for():
    from governor.cli.check_config import summary

    groups = '[groups.A]\nusers = ["alice"]\n'
    listed = parse_config(groups + '[foreign]\ndetect = false\npaths = ["/batch.slice"]\n', "f.toml")
    off = parse_config(groups + "[foreign]\ndetect = false\n", "off.toml")
    assert "foreign tenants, never moved, what they hold taken off the capacity: /batch.slice" in summary(listed)
    assert "foreign tenants: none looked for (foreign.detect = false, no foreign.paths)" in summary(off)


def test_a_notify_command_with_characters_a_terminal_acts_on_is_shown_escaped_as_bash_reads_it(tmp_path):
    # Stranger check: "a\x1b[2Jb" was shown as 'ab' (the escape acted on), a newline broke the line.
    import os
    import shutil
    import subprocess

    from governor.cli.check_config import summary

    words = ["a\x1b[2Jb", "x\ny", "it's", "\x9b", "é", "\\", "two words", "\t", "\u200b", "\U000e0001"]
    config = parse_config('[groups.A]\nusers = ["alice"]\n[notify]\ncommand = ["/bin/echo", '
                          + ", ".join(_toml_string(word) for word in words) + ']\n', "n.toml")
    [line] = [line for line in summary(config) if line.startswith("notify: ")]
    shown = line.removeprefix("notify: ").split(" as the daemon on ")[0]
    assert shown.isprintable() and r"$'a\x1b[2Jb' $'x\ny'" in shown and "'é'" in shown
    if shutil.which("bash"):  # what it shows is the command itself, word for word, in any locale
        for locale in ("C", "C.UTF-8"):
            printed = subprocess.run(["bash", "-c", f"printf '%s\\0' {shown}"], capture_output=True, check=True,
                                     env={**os.environ, "LC_ALL": locale}).stdout
            assert printed.split(b"\0")[:-1] == [word.encode() for word in ["/bin/echo", *words]], locale


def test_a_state_dir_with_characters_a_terminal_acts_on_is_shown_escaped():
    from governor.cli.check_config import summary

    config = parse_config('[groups.A]\nusers = ["alice"]\n[daemon]\nstate_dir = "/run/x\\u001b[2J\\ny"\n', "s.toml")
    [line] = [line for line in summary(config) if line.startswith("daemon: ")]
    assert line.isprintable() and line.endswith(r"state in $'/run/x\x1b[2J\ny'")
    assert [line for line in summary(parse_config('[groups.A]\nusers = ["alice"]\n', "d.toml"))
            if line.startswith("daemon: ")][0].endswith("state in /run/governor/state")  # a plain path as it is


def _toml_string(text: str) -> str:
    return '"' + "".join(f"\\U{ord(c):08x}" if not c.isprintable() or c in '"\\' else c for c in text) + '"'
