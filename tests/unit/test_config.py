"""governor.config.load: good files become exact values; lookups; each bad input names its key."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.config import load as config_module
from governor.config import groups as config_groups
from governor.config.gpu_rules import GpuGuardRules
from governor.config.resources import lent_cpu
from governor.config.load import (
    Config, GroupRule, IoDevice, SessionRules, default_config, group_name_problem, load_config, parse_config,
)
from governor.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "governor.toml"
G = 1024**3
M = 1024**2

# As tomllib returns it: [[capacity.io]] is a list of tables.
GOOD = {
    "capacity": {
        "reserve": {"cpu": 0.5, "memory": "1G"},
        "io": [
            {"device": "/dev/nvme0n1", "read": "2G", "write": "1G"},
            {"device": "/dev/sda", "read": "200M", "write": 100 * M},
        ],
    },
    "defaults": {"task": {"cpu": 1, "memory": "1.5G", "io_read": "10M"}},
    "enforcement": {"cpu": "cores", "memory": "hard", "memory_protection": False},
    "groups": {
        "physics": {"weight": 2, "unix_groups": ["physics"], "users": ["alice"]},
        "ops": {"users": ["bob", "alice"]},
        "*": {"weight": 0.5},
    },
    "sessions": {"cpu": 0.5, "memory": "1G", "io_write": "5M", "exempt": ["backup"]},
    "daemon": {"admin_group": "wheel", "sample_interval": 0.5, "reconcile_interval": 10,
               "state_dir": "/var/lib/governor", "max_tasks_per_user": 10, "max_connections_per_user": 4},
}

GOOD_TEXT = """
[capacity]
reserve = { cpu = 0.5, memory = "1G" }
[[capacity.io]]
device = "/dev/nvme0n1"
read = "2G"
write = "1G"
[[capacity.io]]
device = "/dev/sda"
read = "200M"
write = 104857600
[defaults.task]
cpu = 1
memory = "1.5G"
io_read = "10M"
[enforcement]
cpu = "cores"
memory = "hard"
memory_protection = false
[groups.physics]
weight = 2
unix_groups = ["physics"]
users = ["alice"]
[groups.ops]
users = ["bob", "alice"]
[groups."*"]
weight = 0.5
[sessions]
cpu = 0.5
memory = "1G"
io_write = "5M"
exempt = ["backup"]
[daemon]
admin_group = "wheel"
sample_interval = 0.5
reconcile_interval = 10
state_dir = "/var/lib/governor"
max_tasks_per_user = 10
max_connections_per_user = 4
"""

NVME = IoDevice("/dev/nvme0n1", "nvme0n1", 2 * G, G)
SDA = IoDevice("/dev/sda", "sda", 200 * M, 100 * M)
EXPECTED = Config(
    cpu_cores=None, memory_bytes=None, reserve_cpu_cores=0.5, reserve_memory_bytes=G, reserve_pids=None,
    io_devices=(NVME, SDA),
    task_defaults={"cpu": 1.0, "memory": 3 * G // 2, "io_read": 10 * M, "io_write": 0, "pids": 4096},
    cpu_enforcement="cores", memory_enforcement="hard",
    groups=(GroupRule("physics", 2.0, ("alice",), ("physics",)), GroupRule("ops", 1.0, ("bob", "alice"), ())),
    everyone_weight=0.5, admin_group="wheel", sample_interval_s=0.5, reconcile_interval_s=10.0,
    state_dir="/var/lib/governor", max_tasks_per_user=10, max_connections_per_user=4,
    sessions=SessionRules(True, {"cpu": 0.5, "memory": G, "io_read": 0, "io_write": 5 * M, "pids": 4096}, ("backup",)),
    fairshare_half_life_s=None, gpus=None, gpu_control=None, gpu_guard=GpuGuardRules("sessions", ("user.slice",)),
    memory_protection=False, file="good.toml",
)


def test_good_config_parses_to_exact_values():
    config = load_config(GOOD, "good.toml")
    assert config == EXPECTED
    assert config.file == "good.toml"
    assert all(type(d.read_bps) is int and type(d.write_bps) is int for d in config.io_devices)
    assert type(config.task_defaults["memory"]) is int


def test_toml_text_and_bytes_parse_like_the_dict():
    assert parse_config(GOOD_TEXT, "good.toml") == EXPECTED
    assert parse_config(GOOD_TEXT.encode(), "good.toml") == EXPECTED


def test_embedded_default_is_what_left_out_keys_default_to():
    config = default_config()
    assert config.file == "<embedded default>"
    assert config == load_config({"groups": {"*": {}}}, "minimal.toml")
    assert (config.cpu_cores, config.memory_bytes) == (None, None)
    assert (config.reserve_cpu_cores, config.reserve_memory_bytes) == (0.25, 256 * M)
    assert config.task_defaults == {"cpu": 1.0, "memory": 512 * M, "io_read": 0, "io_write": 0, "pids": 4096}
    assert config.sessions.demand["pids"] == 4096 and config.reserve_pids is None
    assert (config.cpu_enforcement, config.memory_enforcement, config.memory_protection) == ("quota", None, True)
    assert config.memory_mode() == "hard"  # a declared memory is a hard cap, on v1 and v2 alike
    assert load_config({"groups": {"*": {}}, "enforcement": {"memory": "soft"}}, "soft.toml").memory_mode() == "soft"
    assert (config.groups, config.everyone_weight, config.io_devices) == ((), 1.0, ())
    assert config.allowed_groups("anyone", ["users"]) == ["anyone"]
    assert config.sessions == SessionRules(True, {"cpu": 1.0, "memory": 2 * G, "io_read": 0, "io_write": 0,
                                                  "pids": 4096}, ())
    assert config.session_demand() == {"cpu": 1.0, "memory": 2 * G, "pids": 4096}


def test_session_demand_names_each_governed_device():
    config = load_config(GOOD, "good.toml")
    assert config.session_demand() == {"cpu": 0.5, "memory": G, "pids": 4096, "io.nvme0n1.write": 5 * M,
                                       "io.sda.write": 5 * M}


def test_sessions_io_without_a_governed_device_is_refused():
    data = _with(("capacity", "io"), _DELETE)
    data["defaults"]["task"].pop("io_read")
    with pytest.raises(ConfigError) as caught:
        load_config(data, "bad.toml")
    assert caught.value.key == "sessions.io_write"


def test_example_config_parses():
    config = parse_config(EXAMPLE.read_bytes(), str(EXAMPLE))
    assert [(g.name, g.weight) for g in config.groups] == [("physics", 2.0), ("ops", 1.0)]
    # No admin group: "wheel" is Debian's "sudo", and a name the host lacks is warned about.
    assert (config.reserve_cpu_cores, config.reserve_memory_bytes, config.admin_group) == (0.5, G, None)
    # The I/O block is commented out (a device the host lacks would stop the daemon); it must
    # still be right once uncommented.
    text = EXAMPLE.read_text()
    block = '# [[capacity.io]]\n# device = "/dev/nvme0n1"\n# read = "2G"\n# write = "1G"\n'
    assert block in text
    with_io = parse_config(text.replace(block, block.replace("# ", "")), str(EXAMPLE))
    assert with_io.io_devices == (NVME,)


@pytest.mark.parametrize("table", ["_SECTIONS", "_CAPACITY_KEYS", "_RESERVE_KEYS", "_IO_KEYS", "_demand_keys",
                                   "_ENFORCEMENT", "_GROUP_KEYS", "_session_keys", "_DAEMON_KEYS"])
def test_example_config_documents_every_key(table):
    # Each key the loader accepts is explained in a comment that starts with it ("# cpu: ...",
    # "#   read, write: ...", "# capacity.io: ...") or heads a table ("[daemon]").
    text = EXAMPLE.read_text()
    keys = getattr(config_groups if table == "_GROUP_KEYS" else config_module, table)
    for key in keys() if callable(keys) else keys:  # the demand keys come from the registry when asked
        comment = rf"^#\s+(?:[\w.]+, )*(?:[\w.]+\.)?{key}[:,]"
        assert re.search(comment, text, re.MULTILINE) or f"[{key}" in text, f"{key} is not documented"


def test_capacity_is_host_minus_reserve_plus_io_devices():
    config = load_config(GOOD, "good.toml")
    assert config.resources == ("cpu", "memory", "pids", "io.nvme0n1.read", "io.nvme0n1.write", "io.sda.read",
                                "io.sda.write")
    capacity = config.capacity(8, 16 * G)
    assert capacity == {"cpu": 7.5, "memory": 15 * G, "io.nvme0n1.read": 2 * G, "io.nvme0n1.write": G,
                        "io.sda.read": 200 * M, "io.sda.write": 100 * M}
    assert tuple(capacity) == tuple(r for r in config.resources if r != "pids")  # a count is never divided


def test_explicit_capacity_ignores_host_and_default_reserve():
    config = load_config({"capacity": {"cpu": 1.5, "memory": "2G"}, "groups": {"*": {}}}, "c.toml")
    assert config.capacity(64, 512 * G) == {"cpu": 1.5, "memory": 2 * G}
    # Explicit values need no host room for the reserve.
    assert config.capacity(0.25, 256 * M) == {"cpu": 1.5, "memory": 2 * G}


def test_the_cpu_reserve_is_lent_while_idle_only_when_the_capacity_is_the_hosts_less_it():
    """Issue 42: the system's idle reserved cores are governed tasks' to use (compressible:
    the system takes them back by weight); a capacity.cpu given is divided as written."""
    assert lent_cpu(default_config()) == 0.25
    assert lent_cpu(load_config({"capacity": {"reserve": {"cpu": 1}}, "groups": {"*": {}}}, "c.toml")) == 1.0
    assert lent_cpu(load_config({"capacity": {"cpu": 1.5}, "groups": {"*": {}}}, "c.toml")) == 0.0


@pytest.mark.parametrize(("host_cpus", "host_memory", "key"), [
    (0.5, 16 * G, "capacity.reserve.cpu"),
    (0.25, 16 * G, "capacity.reserve.cpu"),
    (8, G, "capacity.reserve.memory"),
])
def test_reserve_leaving_nothing_is_refused(host_cpus, host_memory, key):
    with pytest.raises(ConfigError) as caught:
        load_config(GOOD, "good.toml").capacity(host_cpus, host_memory)
    assert (caught.value.file, caught.value.key) == ("good.toml", key)
    assert "leaves nothing" in caught.value.reason


@pytest.mark.parametrize(("user", "unix_groups", "allowed"), [
    ("alice", [], ["physics", "ops"]),                 # listed by name in both: file order
    ("bob", ["physics"], ["ops", "physics"]),          # by name first, then by Unix group
    ("dave", ["users", "physics"], ["physics"]),       # by Unix group only
    ("erin", ["users"], ["erin"]),                     # in no explicit group: a group of her own
    ("physics", ["users"], []),                        # own name taken by an explicit group
    ("task-7", [], []),                                # not a usable group name
    ("cpu.max", [], []),
    ("john@example.org", [], []),
])
def test_allowed_groups_and_group_for(user, unix_groups, allowed):
    config = load_config(GOOD, "good.toml")
    assert config.allowed_groups(user, unix_groups) == allowed
    assert config.group_for(user, unix_groups) == (allowed[0] if allowed else None)


def test_without_everyone_table_only_explicit_members_have_a_group():
    data = copy.deepcopy(GOOD)
    del data["groups"]["*"]
    config = load_config(data, "good.toml")
    assert config.allowed_groups("erin", ["users"]) == []
    assert config.group_for("erin", ["users"]) is None
    assert config.group_for("dave", {"physics"}) == "physics"
    assert config.weight_of("erin") is None


@pytest.mark.parametrize(("group", "weight"), [
    ("physics", 2.0), ("ops", 1.0), ("erin", 0.5), ("task-1", None), ("cpu.max", None), ("", None), ("a b", None),
])
def test_weight_of(group, weight):
    assert load_config(GOOD, "good.toml").weight_of(group) == weight


@given(user=st.text("abcdefghijklmnopqrstuvwxyz.-_@", min_size=1, max_size=8),
       unix_groups=st.sets(st.sampled_from(["physics", "users", "wheel"])))
def test_default_group_is_allowed_and_weighted(user, unix_groups):
    config = load_config(GOOD, "good.toml")
    group = config.group_for(user, unix_groups)
    allowed = config.allowed_groups(user, unix_groups)
    assert group == (allowed[0] if allowed else None)
    assert len(set(allowed)) == len(allowed)
    assert all(config.weight_of(name) is not None for name in allowed)


def test_task_demand_defaults_and_overrides():
    config = load_config(GOOD, "good.toml")
    assert config.task_demand() == {"cpu": 1.0, "memory": 3 * G // 2, "pids": 4096, "io.nvme0n1.read": 10 * M,
                                    "io.sda.read": 10 * M}
    demand = config.task_demand(cpu=2.5, memory=0, io_read=0, io_write=M)
    assert demand == {"cpu": 2.5, "pids": 4096, "io.nvme0n1.write": M, "io.sda.write": M}
    assert list(demand) == ["cpu", "pids", "io.nvme0n1.write", "io.sda.write"]
    assert default_config().task_demand(io_read=M) == {"cpu": 1.0, "memory": 512 * M, "pids": 4096}


@pytest.mark.parametrize("field", ["cpu", "memory", "io_read", "io_write", "pids"])
@pytest.mark.parametrize("value", [-1, math.nan, math.inf, True])
def test_task_demand_refuses_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        default_config().task_demand(**{field: value})


@pytest.mark.parametrize(("name", "problem"), [
    ("physics", None), ("lab_2.gpu-a", None), ("_x", None), ("9", None), ("a" * 64, None),
    ("a" * 65, "1-64"), ("", "1-64"), (".hidden", "1-64"), ("-x", "1-64"), ("a/b", "1-64"), ("a b", "1-64"),
    ("task-1", "task-"), ("cgroup.procs", "cgroup.*"), ("memory.high", "memory.*"), ("io.x", "io.*"),
    ("ga\n", "1-64"),  # `$` matches before a trailing newline: the whole name must match
    ("tasks", "v1 interface file tasks"), ("release_agent", "v1 interface"),
])
def test_group_name_problem(name, problem):
    found = group_name_problem(name)
    assert (found is None) if problem is None else (problem in found)



def _with(path: tuple, value) -> dict:
    """GOOD with the key at ``path`` set to ``value`` (or removed when value is _DELETE)."""
    data = copy.deepcopy(GOOD)
    table = data
    for name in path[:-1]:
        table = table[name]
    if value is _DELETE:
        del table[path[-1]]
    else:
        table[path[-1]] = value
    return data


_DELETE = object()
_IO0 = ("capacity", "io", 0)

BAD = [
    # (path to change, new value, expected key, words expected in the reason)
    (("extra",), 1, "extra", "allowed keys: capacity, defaults, enforcement, groups, fairshare, sessions, foreign, daemon"),
    (("capacity",), 3, "capacity", "must be a table [capacity]"),
    (("capacity", "gpu"), 1, "capacity.gpu", "allowed keys: cpu, memory, reserve, io"),
    (("capacity", "cpu"), "2", "capacity.cpu", "must be a number"),
    (("capacity", "cpu"), 0, "capacity.cpu", "> 0"),
    (("capacity", "cpu"), -1, "capacity.cpu", "negative"),
    (("capacity", "cpu"), math.inf, "capacity.cpu", "finite"),
    (("capacity", "cpu"), 1e308, "capacity.cpu", "at most 65,536 cores"),
    # A capacity of 1e-310 cores passed check-config and overflowed the filling at the reload.
    (("capacity", "cpu"), 1e-310, "capacity.cpu", "at least 0.01 cores (the kernel's smallest CPU quota)"),
    (("capacity", "reserve", "cpu"), 0.001, "capacity.reserve.cpu", "0 or at least 0.01 cores"),
    (("capacity", "memory"), "8388608T", "capacity.memory", "at most 4,611,686,018,427,387,904 bytes"),
    (("defaults", "task", "memory"), "0", "defaults.task.memory", "at least 1.0M"),
    (("groups", "physics", "weight"), 1e307, "groups.physics.weight", "between 0.001 and 1000"),
    (("capacity", "cpu"), 4, "capacity.reserve.cpu", "no effect: capacity.cpu is given"),
    (("capacity", "memory"), "2X", "capacity.memory", "suffix"),
    (("capacity", "memory"), 0.5, "capacity.memory", "> 0"),
    (("capacity", "memory"), "4G", "capacity.reserve.memory", "no effect: capacity.memory is given"),
    (("capacity", "reserve"), 1, "capacity.reserve", "must be a table"),
    (("capacity", "reserve", "disk"), 1, "capacity.reserve.disk", "allowed keys: cpu, memory"),
    (("capacity", "reserve", "cpu"), -0.5, "capacity.reserve.cpu", "negative"),
    (("capacity", "reserve", "cpu"), "1", "capacity.reserve.cpu", "must be a number"),
    (("capacity", "reserve", "memory"), "lots", "capacity.reserve.memory", "suffix"),
    (("capacity", "io"), {"device": "/dev/sda"}, "capacity.io", "array of tables"),
    (("capacity", "io"), [1], "capacity.io", "array of tables"),
    ((*_IO0, "device"), _DELETE, "capacity.io[0].device", "missing"),
    ((*_IO0, "read"), _DELETE, "capacity.io[0].read", "missing"),
    ((*_IO0, "write"), _DELETE, "capacity.io[0].write", "missing"),
    ((*_IO0, "speed"), 1, "capacity.io[0].speed", "allowed keys: device, read, write"),
    ((*_IO0, "device"), "nvme0n1", "capacity.io[0].device", "under /dev/"),
    ((*_IO0, "device"), "dev/nvme0n1", "capacity.io[0].device", "under /dev/"),
    ((*_IO0, "device"), "/dev/../etc/passwd", "capacity.io[0].device", "normalised"),
    ((*_IO0, "device"), "/dev/", "capacity.io[0].device", "under /dev/"),
    ((*_IO0, "device"), "/dev/sdb/", "capacity.io[0].device", "under /dev/"),
    ((*_IO0, "device"), 5, "capacity.io[0].device", "non-empty string"),
    (("capacity", "io", 1, "device"), "/dev/nvme0n1", "capacity.io[1].device", "listed twice (also capacity.io[0])"),
    (("capacity", "io", 1, "device"), "/dev/disk/nvme0n1", "capacity.io[1].device", "has the name 'nvme0n1'"),
    ((*_IO0, "read"), 0, "capacity.io[0].read", "> 0"),
    ((*_IO0, "read"), -1, "capacity.io[0].read", "negative"),
    ((*_IO0, "write"), "1Q", "capacity.io[0].write", "suffix"),
    (("defaults",), 1, "defaults", "must be a table"),
    (("defaults", "job"), {}, "defaults.job", "allowed keys: task"),
    (("defaults", "task"), [], "defaults.task", "must be a table"),
    (("defaults", "task", "gpu"), 1, "defaults.task.gpu", "allowed keys: cpu, memory, io_read, io_write"),
    (("defaults", "task", "cpu"), "1", "defaults.task.cpu", "must be a number"),
    (("defaults", "task", "memory"), -1, "defaults.task.memory", "negative"),
    (("defaults", "task", "io_write"), "x", "defaults.task.io_write", "suffix"),
    (("enforcement", "cpu"), "shares", "enforcement.cpu", "'quota' or 'cores'"),
    (("enforcement", "memory"), "oom", "enforcement.memory", "'soft' or 'hard'"),
    (("enforcement", "memory"), 1, "enforcement.memory", "'soft' or 'hard'"),
    (("enforcement", "io"), "throttle", "enforcement.io", "allowed keys: cpu, memory, memory_protection"),
    (("enforcement", "memory_protection"), "yes", "enforcement.memory_protection", "must be true or false"),
    (("groups",), _DELETE, "groups", "missing section"),
    (("groups",), {}, "groups", "defines no group"),
    (("groups",), 1, "groups", "must be a table"),
    (("groups", "physics"), 1, "groups.physics", "must be a table"),
    # One wording for every weight out of range (issue 33, point 9: there were three).
    (("groups", "physics", "weight"), 0, "groups.physics.weight", "must be a number between 0.001 and 1000, got 0"),
    (("groups", "physics", "weight"), -1, "groups.physics.weight", "must be a number between 0.001 and 1000, got -1"),
    (("groups", "physics", "weight"), "2", "groups.physics.weight",
     "must be a number between 0.001 and 1000, got a string '2'"),
    (("groups", "physics", "weight"), True, "groups.physics.weight",
     "must be a number between 0.001 and 1000, got a boolean true"),  # in TOML's words: it said True
    (("capacity", "io"), {}, "capacity.io", "array of tables, one [[capacity.io]] per device, got a table"),
    (("groups", "physics", "members"), [], "groups.physics.members", "allowed keys: weight, users, unix_groups"),
    (("groups", "physics", "users"), "alice", "groups.physics.users", "array of non-empty strings"),
    (("groups", "physics", "users"), [1], "groups.physics.users", "array of non-empty strings"),
    # An escape in a user name reached check-config's terminal raw; 3,000 characters, in full.
    (("groups", "physics", "users"), ["alice", "\x1b[31mred\n"], "groups.physics.users[1]",
     "must be a name of printable characters, at most 255, got '\\x1b[31mred\\n'"),
    (("groups", "physics", "users"), ["a" * 3000], "groups.physics.users[0]", "at most 255, got 'aaaa"),
    (("groups", "physics", "unix_groups"), [""], "groups.physics.unix_groups", "array of non-empty strings"),
    (("groups", "ops", "users"), [], "groups.ops", "nobody could launch"),
    (("groups", "*", "users"), ["x"], 'groups."*".users', "allowed keys: weight"),
    (("groups", "*", "weight"), 0, 'groups."*".weight', "must be a number between 0.001 and 1000, got 0"),
    (("groups", "task-x"), {"users": ["a"]}, "groups.task-x", "task-"),
    (("groups", "lab a"), {"users": ["a"]}, 'groups."lab a"', "not a usable group name"),
    (("groups", "a" * 65), {"users": ["a"]}, f"groups.{'a' * 65}", "not a usable group name"),
    (("groups", ".."), {"users": ["a"]}, 'groups.".."', "not a usable group name"),
    (("groups", "cpu.max"), {"users": ["a"]}, 'groups."cpu.max"', "cgroup interface files"),
    (("sessions",), 1, "sessions", "must be a table"),
    (("sessions", "users"), [], "sessions.users", "allowed keys: enabled, cpu, memory, io_read, io_write, pids, exempt"),
    (("sessions", "enabled"), "yes", "sessions.enabled", "true or false"),
    (("sessions", "cpu"), -1, "sessions.cpu", "negative"),
    (("sessions", "memory"), "1K", "sessions.memory", "at least 1.0M"),
    (("sessions", "exempt"), "bob", "sessions.exempt", "array of non-empty strings"),
    (("sessions", "pids"), -1, "sessions.pids", "whole number of processes from 1"),
    (("sessions", "pids"), 0, "sessions.pids", "whole number of processes from 1"),
    (("defaults", "task", "pids"), float("nan"), "defaults.task.pids", "whole number of processes from 1"),
    (("defaults", "task", "pids"), 1e308, "defaults.task.pids", "whole number of processes from 1"),
    (("defaults", "task", "pids"), 12.5, "defaults.task.pids", "whole number of processes from 1"),
    (("defaults", "task", "pids"), "512", "defaults.task.pids", "whole number of processes from 1"),
    (("defaults", "task", "pids"), True, "defaults.task.pids", "whole number of processes from 1"),
    (("defaults", "task", "pids"), 5_000_000, "defaults.task.pids", "from 1 to 4,194,304"),
    (("capacity", "reserve", "pids"), -5, "capacity.reserve.pids", "whole number of processes from 1"),
    (("groups", "physics", "limit"), {"pids": 0.5}, "groups.physics.limit.pids", "whole number of processes"),
    # 1e-310 cores passed, and the filling handed the group that much of every resource.
    (("groups", "physics", "limit"), {"cpu": 1e-310}, "groups.physics.limit.cpu",
     "must be at least 0.01 cores (the kernel's smallest CPU quota)"),
    (("capacity", "cpu"), 0.001, "capacity.cpu", "must be at least 0.01 cores"),  # not "0 or": 0 is no capacity
    (("groups", "physics", "user_limit"), {"pids": float("inf")}, "groups.physics.user_limit.pids",
     "whole number of processes"),
    (("groups", "physics", "guarantee"), {"pids": 10}, "groups.physics.guarantee.pids", "a count is a cap"),
    (("daemon",), [], "daemon", "must be a table"),
    (("daemon", "socket"), "/run/x", "daemon.socket", "allowed keys: admin_group, sample_interval"),
    (("daemon", "admin_group"), "", "daemon.admin_group", "must be a name of printable characters"),
    (("daemon", "admin_group"), 10, "daemon.admin_group", "must be a name of printable characters"),
    (("daemon", "admin_group"), "wh\x1b[31meel", "daemon.admin_group", "must be a name of printable characters"),
    (("daemon", "sample_interval"), 0, "daemon.sample_interval", "must be a number between 0.1 and 86400, got 0"),
    (("daemon", "reconcile_interval"), -1, "daemon.reconcile_interval", "between 0.1 and 86400, got -1"),
    # A millionth of a second passed check-config, and the daemon would have sampled in a busy loop.
    (("daemon", "sample_interval"), 0.000001, "daemon.sample_interval", "between 0.1 and 86400, got 1e-06"),
    (("daemon", "reconcile_interval"), 1e308, "daemon.reconcile_interval", "between 0.1 and 86400, got 1e+308"),
    (("daemon", "reconcile_interval"), "5s", "daemon.reconcile_interval", "must be a number"),
    (("daemon", "state_dir"), "run/governor", "daemon.state_dir", "absolute"),
    (("daemon", "state_dir"), 1, "daemon.state_dir", "non-empty string"),
    (("daemon", "max_tasks_per_user"), 0, "daemon.max_tasks_per_user", "whole number from 1"),
    (("daemon", "max_tasks_per_user"), True, "daemon.max_tasks_per_user", "whole number from 1"),
    (("daemon", "max_connections_per_user"), 1e308, "daemon.max_connections_per_user", "whole number from 1"),
]


# Each id names the deleted key, not the sentinel's address: ids must be the same in every
# pytest-xdist worker.
@pytest.mark.parametrize(("path", "value", "key", "reason"), BAD,
                         ids=[f"{k}={'(deleted)' if v is _DELETE else repr(v)}" for _, v, k, _ in BAD])
def test_bad_input_names_file_key_and_reason(path, value, key, reason):
    with pytest.raises(ConfigError) as caught:
        load_config(_with(path, value), "bad.toml")
    error = caught.value
    assert (error.file, error.key) == ("bad.toml", key)
    assert reason in error.reason
    assert str(error) == f"bad.toml: {key}: {error.reason}"


@pytest.mark.parametrize("name", ["io_read", "io_write"])
def test_task_io_without_a_governed_device_is_refused(name):
    data = _with(("capacity", "io"), _DELETE)
    data["defaults"]["task"] = {name: "1M"}
    data["sessions"].pop("io_write")
    with pytest.raises(ConfigError) as caught:
        load_config(data, "bad.toml")
    assert (caught.value.key, "no I/O device is governed" in caught.value.reason) == (f"defaults.task.{name}", True)
    data["defaults"]["task"][name] = 0
    assert load_config(data, "ok.toml").task_defaults[name] == 0


@pytest.mark.parametrize(("text", "reason"), [
    ("[groups.a]\nusers = \n", "line 2"),
    (b"[groups.a]\nusers = [\"\xff\"]\n", "not UTF-8"),
])
def test_unparsable_text_names_the_file_alone(text, reason):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "bad.toml")
    assert (caught.value.file, caught.value.key) == ("bad.toml", None)
    assert reason in caught.value.reason


def test_a_group_name_with_a_trailing_newline_is_refused():
    with pytest.raises(ConfigError, match="groups"):
        parse_config('[groups."ga\\n"]\nusers = ["root"]\n', "t.toml")
