"""governor.config.load: good files become exact values; lookups (capacity, groups, weights,
demands); the example config parses and documents every key."""

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
from support.good_config import GOOD, G, M

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "governor.toml"


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
    everyone_weight=0.5, everyone_user_limit={}, admin_group="wheel", sample_interval_s=0.5, reconcile_interval_s=10.0,
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
    # A reserve of no core is a choice (a task's or a session's 0 cores is refused).
    assert lent_cpu(load_config({"capacity": {"reserve": {"cpu": 0}}, "groups": {"*": {}}}, "c.toml")) == 0.0


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
